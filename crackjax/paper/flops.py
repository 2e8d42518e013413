"""Operation counts of a model, the convention every FLOP/s figure of crackjax and its
benchmarks follows: analytic MACs from the traced forward pass, FLOPs of a training step,
parameters, XLA's cost analysis as a cross-check and the devices' peaks. Nothing here compiles
or runs a model; `crackjax.paper.complexity` (the command) reports these beside measured speed
and memory.

* **Analytic MACs** (`forward_macs`, any model of `crackjax.models.MODELS`): the forward pass
  is traced to a jaxpr (nothing is compiled) and every convolution and matrix product in it
  is counted (`jaxpr_macs`): a convolution costs output elements x kernel taps x input
  channels per group, divided by the input (lhs) dilation for a transposed convolution
  written as a dilated one, so only taps that meet an input pixel count; a matrix product
  (`dot_general`, e.g. the U-Net's up-convolution einsum or a bilinear resize) costs
  output elements x contracted size; a `scan` body counts once per iteration. Taps on the
  zero padding of 'same' convolutions are counted, as the paper does. Element-wise work
  (bias, activations, pooling, the loss) is not. For the U-Net this equals the layer-by-
  layer `unet_macs` exactly (a 3x3 convolution costs H*W*9*C_in*C_out, a 2x2 stride-2
  transposed convolution H_out*W_out*C_in*C_out: each output pixel receives exactly one
  input pixel): 112.89 G at 480x320 for the paper's widths.
* **FLOPs = 2 x MACs** (a multiply and an add).
* **A training step = 3 x the forward FLOPs** (`TRAIN_FORWARD_MULTIPLE`), i.e. 6 x MACs
  per image: the backward pass computes the gradients with respect to each product's input
  and its weights, each as costly as the forward product. The first layer needs no input
  gradient, so the exact figure is slightly lower; `bench/train_step.py` also counts the
  jaxpr of the whole step the same way as a check.
* **The paper's convention** (U-Net only): its "GFLOPS" column are MACs that charge each
  2x2 transposed convolution the full 4 taps per output pixel, i.e. true MACs + 3 x the
  transposed convolutions' MACs. That reproduces 127.99 G at 480x320 and 218.44 G at
  512x512 for the paper's U-Net (Tables V-VIII print 128.18 G and 218.46 G) and 28.44 G at
  304x448 for widths 32...512 (printed 28.44 G).
* **XLA's cost analysis** of the lowered forward pass ('flops': the HLO as jax emits it,
  before XLA optimises it: `hlo_flops`; `crackjax.paper.complexity.xla_flops` for a model),
  shown only as a labelled cross-check (`cross_check`). The compiled program's analysis
  counts what the backend emits instead: on GPUs the convolutions become cuDNN custom calls it
  does not count (an H200 run of the compiled analysis printed 0.03 G for the U-Net's
  2 x 112.89 G; the lowered HLO still holds them as convolutions, not yet checked on a GPU);
  on the CPU the two agree (DeepCrack, SegNet, U-Net at 32x48: within 0.2%) and the lowered
  one needs no compilation (0.1 s instead of 0.7-1.7 s). It is flagged whenever it is off
  2 x the analytic MACs by more than a factor of `CROSS_CHECK_FACTOR`. Every FLOP/s and peak
  fraction comes from the analytic count.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

# FLOPs of a training step (forward + backward) per forward FLOP.
TRAIN_FORWARD_MULTIPLE = 3
# XLA's cost analysis is flagged when it is off the analytic FLOPs by more than this factor.
CROSS_CHECK_FACTOR = 2.0

# Dense peak FLOP/s per device kind (a substring of jax's device_kind), by arithmetic:
# NVIDIA's data-sheet figures for the SXM parts without sparsity. On Hopper and Ampere XLA
# runs float32 convolutions and matmuls on TF32 tensor cores by default (jax's default
# precision), so a float32 step is compared with both the 'fp32' and the 'tf32' peak.
PEAK_FLOPS: dict[str, dict[str, float]] = {
  'H100': {'bf16': 989e12, 'tf32': 494e12, 'fp32': 67e12},
  'H200': {'bf16': 989e12, 'tf32': 494e12, 'fp32': 67e12},
  'A100': {'bf16': 312e12, 'tf32': 156e12, 'fp32': 19.5e12},
}


def unet_macs(
  widths: Sequence[int], height: int, width: int, in_channels: int = 3
) -> dict[str, int]:
  """Multiply-accumulates of one forward pass of the revised U-Net, by layer type.

  Returns:
    {'conv': 3x3 and 1x1 convolutions, 'up': 2x2 stride-2 transposed convolutions (true
    count), 'true': conv + up, 'paper': conv + 4 * up (the paper's convention)}.
  """
  conv = up = 0
  h, w, c = height, width, in_channels
  for i, features in enumerate(widths):
    conv += h * w * 9 * (c * features + features * features)
    c = features
    if i < len(widths) - 1:
      h, w = h // 2, w // 2
  for features in reversed(widths[:-1]):
    h, w = h * 2, w * 2
    up += h * w * c * features
    conv += h * w * 9 * (2 * features * features + features * features)
    c = features
  conv += h * w * c  # final 1x1 conv to one logit
  return {'conv': conv, 'up': up, 'true': conv + up, 'paper': conv + 4 * up}


def count_params(params) -> int:
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


# ----------------------------------------------------------------------------- analytic MACs


def _sub_jaxprs(params: dict[str, Any]) -> Iterator[Any]:
  """The jaxprs held in an equation's parameters (jit, scan, cond, custom_vjp bodies...)."""
  for value in params.values():
    for v in value if isinstance(value, list | tuple) else (value,):
      if isinstance(v, jax.extend.core.ClosedJaxpr):
        yield v.jaxpr
      elif isinstance(v, jax.extend.core.Jaxpr):
        yield v


def _conv_macs(eqn) -> int:
  out = eqn.outvars[0].aval.shape
  kernel = eqn.invars[1].aval.shape
  rhs_spec = eqn.params['dimension_numbers'].rhs_spec  # (out features, in features, spatial...)
  taps = math.prod(kernel[d] for d in rhs_spec[2:])
  # The kernel's in-feature dimension is already C_in / feature_group_count.
  macs = math.prod(out) * kernel[rhs_spec[1]] * taps
  return macs // math.prod(eqn.params.get('lhs_dilation') or (1,))


def _dot_macs(eqn) -> int:
  (contract, _), _ = eqn.params['dimension_numbers']
  lhs = eqn.invars[0].aval.shape
  return math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[d] for d in contract)


def jaxpr_macs(jaxpr) -> dict[str, int]:
  """Multiply-accumulates of the convolutions and matrix products of a (closed) jaxpr.

  Returns:
    {'conv': conv_general_dilated MACs, 'dot': dot_general MACs, 'total': their sum}. Nested
    jaxprs are counted where they run: a scan body `length` times, the costlier branch of a
    cond, a while body once (its trip count is unknown).
  """
  jaxpr = getattr(jaxpr, 'jaxpr', jaxpr)
  acc = {'conv': 0, 'dot': 0}
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    if name == 'conv_general_dilated':
      acc['conv'] += _conv_macs(eqn)
    elif name == 'dot_general':
      acc['dot'] += _dot_macs(eqn)
    subs = [jaxpr_macs(sub) for sub in _sub_jaxprs(eqn.params)]
    if not subs:
      continue
    if name == 'cond':
      subs = [max(subs, key=lambda s: s['total'])]
    times = int(eqn.params.get('length', 1)) if name == 'scan' else 1
    for sub in subs:
      acc['conv'] += times * sub['conv']
      acc['dot'] += times * sub['dot']
  acc['total'] = acc['conv'] + acc['dot']
  return acc


def abstract_variables(model: nn.Module, height: int, width: int) -> dict[str, Any]:
  """Shapes of all the model's variables: 'params', and e.g. 'batch_stats' for BatchNorm."""
  x = jax.ShapeDtypeStruct((1, height, width, 3), jnp.float32)
  return jax.eval_shape(model.init, jax.random.key(0), x)


def forward_macs(model: nn.Module, height: int, width: int, batch: int = 1) -> dict[str, int]:
  """Analytic MACs of the forward pass of `model` on a [batch, height, width, 3] input.

  Traced, not compiled: backend-independent, and the same on every device.
  """
  variables = abstract_variables(model, height, width)
  x = jax.ShapeDtypeStruct((batch, height, width, 3), jnp.float32)
  # Inference mode: a BatchNorm model (train=False by default) uses its running averages.
  jaxpr = jax.make_jaxpr(model.apply)(variables, x)
  return jaxpr_macs(jaxpr)


def train_step_flops(forward_macs_per_image: float, batch: int) -> float:
  """Analytic FLOPs of one training step: 3 x forward FLOPs (2 per MAC) x batch."""
  return TRAIN_FORWARD_MULTIPLE * 2.0 * forward_macs_per_image * batch


# ----------------------------------------------------------------------------- cross-checks


def hlo_flops(stage) -> float | None:
  """XLA's cost-analysis 'flops' of a lowered (`jax.stages.Lowered`: the HLO before XLA's
  optimisations) or compiled program, or None where the backend has no cost analysis."""
  try:
    cost = stage.cost_analysis()
  except Exception:  # noqa: BLE001 - not every backend implements it
    return None
  if isinstance(cost, list | tuple):  # older jax returns one dict per device
    cost = cost[0] if cost else None
  if not cost or 'flops' not in cost:
    return None
  return float(cost['flops'])


def cross_check(analytic_flops: float, xla: float | None) -> str:
  """How XLA's cost-analysis flops compare with the analytic count, as a short label."""
  if not xla:
    return 'not available on this backend'
  ratio = xla / analytic_flops
  if 1 / CROSS_CHECK_FACTOR <= ratio <= CROSS_CHECK_FACTOR:
    return f'{ratio:.2f} x analytic: agrees'
  return (
    f'{ratio:.3g} x analytic: DISAGREES, not used (XLA does not count work it hands to '
    'libraries, e.g. cuDNN convolutions on GPUs)'
  )


def peak_flops(device_kind: str) -> dict[str, float]:
  """PEAK_FLOPS of the device kind ({} when the table does not know it)."""
  return next((v for k, v in PEAK_FLOPS.items() if k in device_kind), {})


def peak_fractions(flops_per_s: float, device_kind: str, dtype: str) -> dict[str, float]:
  """Achieved fraction of the device's dense peaks relevant to compute dtype `dtype`."""
  peaks = peak_flops(device_kind)
  relevant = ('bf16',) if dtype == 'bfloat16' else ('tf32', 'fp32')
  return {p: flops_per_s / peaks[p] for p in relevant if p in peaks}
