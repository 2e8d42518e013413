"""Model complexity: parameters, MACs/FLOPs, inference speed and memory (paper Tables V-VIII).

  python -m crackjax.paper.complexity --config=configs/crackforest_exp.py
  python -m crackjax.paper.complexity --config=configs/crackforest_exp.py --hw=512,512 --fps_batch=8
  python -m crackjax.paper.complexity --config=configs/crackforest_exp.py \
      --config.model.widths='(16, 32, 64, 128, 256)' --config.model.dtype=bfloat16
  python -m crackjax.paper.complexity --config=configs/compare.py:hed

Operation counts (the convention every FLOP/s figure of crackjax and its benchmarks follows):

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
  before XLA optimises it), shown only as a labelled cross-check (`cross_check`). The
  compiled program's analysis counts what the backend emits instead: on GPUs the
  convolutions become cuDNN custom calls it does not count (an H200 run of the compiled
  analysis printed 0.03 G for the U-Net's 2 x 112.89 G; the lowered HLO still holds them as
  convolutions, not yet checked on a GPU); on the CPU the two agree (DeepCrack, SegNet,
  U-Net at 32x48: within 0.2%) and the lowered one needs no compilation (0.1 s instead of
  0.7-1.7 s). It is flagged whenever it is off 2 x the analytic MACs by more than a factor
  of `CROSS_CHECK_FACTOR`. Every FLOP/s and peak fraction comes from the analytic count.

Memory (`memory_figures`): the device's peak, `jax.Device.memory_stats()['peak_bytes_in_use']`,
where the backend has an allocator that reports it (GPU, TPU): the process's peak on that
device so far, everything included (parameters, every compiled program's buffers, scratch).
The CPU backend reports nothing (`memory_stats()` is None); there the substitute is XLA's
compiled memory analysis of the program (`compiled_memory`): argument + output - aliased
(donated) + temporary bytes, the buffers the program needs at once, printed under that name,
never as device memory. Host RSS is a host figure and is labelled as one where printed.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.extend.core
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from crackjax import cli
from crackjax.experiment.build import Experiment, build
from crackjax.models import fused_logits
from crackjax.paper import table_rules, tables
from crackjax.runs import outputs

# Input (H, W) of each dataset at which the paper reports complexity and speed.
PAPER_INPUT_SIZES: dict[str, tuple[int, int]] = {
  'crackforest': (320, 480),
  'aiglern': (304, 448),
  'crack360': (512, 512),
  'bjn260': (320, 480),
}

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


def _abstract_variables(model, height: int, width: int) -> dict[str, Any]:
  """Shapes of all the model's variables: 'params', and e.g. 'batch_stats' for BatchNorm."""
  x = jax.ShapeDtypeStruct((1, height, width, 3), jnp.float32)
  return jax.eval_shape(model.init, jax.random.key(0), x)


def forward_macs(model: nn.Module, height: int, width: int, batch: int = 1) -> dict[str, int]:
  """Analytic MACs of the forward pass of `model` on a [batch, height, width, 3] input.

  Traced, not compiled: backend-independent, and the same on every device.
  """
  variables = _abstract_variables(model, height, width)
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


# ----------------------------------------------------------------------------- memory


def compiled_memory(compiled) -> dict[str, int] | None:
  """XLA's memory analysis of a compiled program (bytes), or None where it has none.

  'total' = argument + output - alias (donated inputs reused as outputs) + temp: the device
  buffers the program needs at the same time.
  """
  try:
    m = compiled.memory_analysis()
  except Exception:  # noqa: BLE001 - not every backend implements it
    return None
  if m is None:
    return None
  out = {
    'argument': int(m.argument_size_in_bytes),
    'output': int(m.output_size_in_bytes),
    'alias': int(m.alias_size_in_bytes),
    'temp': int(m.temp_size_in_bytes),
    'generated_code': int(m.generated_code_size_in_bytes),
  }
  out['total'] = out['argument'] + out['output'] - out['alias'] + out['temp']
  return out


def device_memory(device: jax.Device | None = None) -> dict[str, int] | None:
  """The device allocator's figures (bytes), or None where the backend has none (CPU)."""
  device = device or jax.devices()[0]
  try:
    stats = device.memory_stats()
  except Exception:  # noqa: BLE001 - not every backend implements it
    return None
  if not stats or 'peak_bytes_in_use' not in stats:
    return None
  return {
    'peak_bytes_in_use': int(stats['peak_bytes_in_use']),
    'bytes_in_use': int(stats.get('bytes_in_use', 0)),
    'bytes_limit': int(stats.get('bytes_limit', 0)),
  }


def memory_figures(compiled=None, device: jax.Device | None = None) -> dict[str, Any]:
  """The peak-memory figure to report, and what it is.

  Returns:
    {'peak_bytes': the figure, 'source': 'device' (allocator peak, GPU/TPU) or
    'xla_compiled' (CPU: XLA's memory analysis of `compiled`, see `compiled_memory`) or
    None (neither available), 'label': how to print it, 'device': the allocator's figures
    or None, 'compiled': `compiled_memory(compiled)` or None}.
  """
  dev = device_memory(device)
  comp = compiled_memory(compiled) if compiled is not None else None
  if dev is not None:
    source, peak, label = 'device', dev['peak_bytes_in_use'], 'device peak (allocator)'
  elif comp is not None:
    source, peak = 'xla_compiled', comp['total']
    label = 'no device allocator stats on this backend; XLA compiled memory analysis'
  else:
    source, peak, label = None, None, 'not available'
  return {'peak_bytes': peak, 'source': source, 'label': label, 'device': dev, 'compiled': comp}


def format_memory(mem: dict[str, Any]) -> str:
  """One line for `memory_figures`' result."""
  if mem['peak_bytes'] is None:
    return 'n/a (no device allocator stats, no compiled memory analysis)'
  line = f'{mem["peak_bytes"] / 2**20:.0f} MiB ({mem["label"]}'
  comp = mem['compiled']
  if comp is not None:
    line += (
      f'; program: args {comp["argument"] / 2**20:.0f} + out {comp["output"] / 2**20:.0f} '
      f'- donated {comp["alias"] / 2**20:.0f} + temp {comp["temp"] / 2**20:.0f} MiB'
    )
  return line + ')'


# ----------------------------------------------------------------------------- inference


def _forward(model: nn.Module):
  # All variables (parameters, and the running averages of a BatchNorm model, which applies
  # them in inference mode by default).
  return jax.jit(lambda v, x: jax.nn.sigmoid(fused_logits(model.apply(v, x))))


def xla_flops(model: nn.Module, height: int, width: int, batch: int = 1) -> float:
  """FLOPs of the lowered forward pass according to XLA's cost analysis (a cross-check;
  nothing is compiled)."""
  fwd = _forward(model)
  x = jax.ShapeDtypeStruct((batch, height, width, 3), jnp.float32)
  variables = _abstract_variables(model, height, width)
  flops = hlo_flops(fwd.lower(variables, x))
  return float('nan') if flops is None else flops


def measure_fps(
  model: nn.Module, height: int, width: int, *, batch: int = 1, repeats: int = 10
) -> dict[str, Any]:
  """Images per second of jitted inference (after one warm-up call), and its memory.

  'first_call_s' is compilation plus the first call; 'memory' is `memory_figures` of the
  compiled forward pass right after the timed calls.
  """
  fwd = _forward(model)
  x = jnp.asarray(np.random.default_rng(0).random((batch, height, width, 3), np.float32))
  variables = jax.jit(model.init)(jax.random.key(0, impl='rbg'), x)  # every collection
  t0 = time.perf_counter()
  compiled = fwd.lower(variables, x).compile()
  compiled(variables, x).block_until_ready()
  compile_s = time.perf_counter() - t0
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    compiled(variables, x).block_until_ready()
    times.append(time.perf_counter() - t0)
  median = float(np.median(times))
  return {
    'batch': batch,
    'median_s': median,
    'fps': batch / median,
    'first_call_s': compile_s,
    'repeats': repeats,
    'memory': memory_figures(compiled),
  }


def measurement_size(
  config: ml_collections.ConfigDict, override: tuple[int, int] | None = None
) -> tuple[int, int]:
  """(H, W) to measure at: `override`, else config.data.input_size, else the paper's size."""
  if override:
    return override
  if config.data.get('input_size'):
    return tuple(config.data.input_size)
  if config.data.name not in PAPER_INPUT_SIZES:
    raise ValueError(f'No default input size for dataset {config.data.name!r}; pass --hw=H,W.')
  return PAPER_INPUT_SIZES[config.data.name]


def report(
  experiment: Experiment,
  hw: tuple[int, int] | None = None,
  *,
  fps_batch: int = 8,
  repeats: int = 10,
  fps: bool = True,
) -> dict:
  """Computes every figure; returns them as a dict (also printed by main).

  'macs' is `forward_macs` per image (any model), 'unet_macs' the layer-by-layer U-Net
  count with the paper's convention (None for other models), 'xla_flops' the cross-check.
  With `fps`, each FPS measurement also carries its analytic FLOP/s and, where
  PEAK_FLOPS knows the device, its fraction of the peak for the model's dtype.
  """
  config, model = experiment.config, experiment.model
  h, w = measurement_size(config, hw)
  params = _abstract_variables(model, h, w)['params']
  macs = forward_macs(model, h, w)
  device = jax.devices()[0]
  out = {
    'model': config.model.name,
    'model_fields': {k: v for k, v in config.model.items() if k != 'name'},
    'input_hw': [h, w],
    'params': count_params(params),
    'macs': macs,
    'flops': 2 * macs['total'],
    'unet_macs': unet_macs(config.model.widths, h, w) if config.model.name == 'unet' else None,
    'xla_flops': xla_flops(model, h, w),
    'backend': jax.default_backend(),
    'device': str(device.device_kind),
  }
  out['xla_cross_check'] = cross_check(out['flops'], out['xla_flops'])
  if fps:
    dtype = str(config.model.get('dtype', 'float32'))
    for key, batch in (('fps_batch1', 1), ('fps_batched', fps_batch)):
      f = measure_fps(model, h, w, batch=batch, repeats=repeats)
      f['flops_per_s'] = out['flops'] * f['fps']
      f['peak_fraction'] = peak_fractions(f['flops_per_s'], out['device'], dtype)
      out[key] = f
    out['device_memory'] = device_memory(device)
  out['paper'] = paper_rows(config, model)
  return out


def paper_size(table: int) -> tuple[int, int]:
  """(H, W) at which the paper counts a model of Tables V-VIII: Crack360 512x512, AigleRN its
  training crop, CrackForest and BJN260 480x320 (crackjax.paper.tables.SETTINGS)."""
  size = tables.SETTINGS[table_rules.COMPARE_BASE[table]].input_size
  return tuple(size) if size else (320, 480)


def paper_rows(config: ml_collections.ConfigDict, model: nn.Module) -> list[dict[str, Any]]:
  """Our parameters and analytic MACs beside the paper's parameters, GFLOPS and FPS, for
  every original-loss row of Tables V-VIII with this config's model (`model`; the dagger rows
  share them), each at the size the paper used for its table."""
  out = []
  for table, rows in tables.COMPARE_TABLES.items():
    for row in rows:
      if row.model != config.model.name or row.dagger:
        continue
      h, w = paper_size(table)
      out.append(
        {
          'table': table,
          'dataset': row.dataset,
          'input_hw': [h, w],
          'macs': forward_macs(model, h, w)['total'],
          'paper_params': row.params_count,
          'paper_gflops': row.gflops,
          'paper_fps': row.fps,
        }
      )
  return out


def _define_flags(flag_values: flags.FlagValues) -> None:
  flags.DEFINE_list(
    'hw',
    None,
    "H,W (default: the config's input size, else the paper's size for the dataset)",
    flag_values=flag_values,
  )
  flags.DEFINE_integer(
    'fps_batch', 8, 'batch of the batched FPS measurement', flag_values=flag_values
  )
  flags.DEFINE_integer('repeats', 10, 'timed calls per FPS measurement', flag_values=flag_values)
  flags.DEFINE_bool(
    'fps', True, 'measure inference speed (--nofps skips it)', flag_values=flag_values
  )
  flags.DEFINE_string('json', None, 'also write the figures here', flag_values=flag_values)


PROG = 'python -m crackjax.paper.complexity'


def main(argv: Sequence[str] | None = None) -> dict:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  return COMMAND.run(_main, argv)


_INTERRUPTED = 'interrupted (Ctrl-C); nothing was written: run the same command again.'
COMMAND = cli.Command(PROG, _define_flags, takes_config=True, interrupted=_INTERRUPTED)


def _main(fv: flags.FlagValues, arguments: list[str]) -> dict:
  """Prints the complexity report of ``--config`` (arguments that are not flags are
  ignored)."""
  del arguments
  prog = PROG
  config = fv.config
  hw = tuple(int(v) for v in fv.hw) if fv.hw else None
  if hw is not None and len(hw) != 2:
    sys.exit(f'{prog}: --hw takes H,W, got {fv.hw}')
  try:
    experiment = build(config, training=False)
    r = report(experiment, hw, fps_batch=fv.fps_batch, repeats=fv.repeats, fps=fv.fps)
  except ValueError as e:  # an unknown model or dtype, a size the model cannot take
    sys.exit(f'{prog}: {e}')
  print(format_report(r, config))
  if fv.json:
    from pathlib import Path

    Path(fv.json).write_text(outputs.dumps(r, indent=1, default=str))
  return r


def format_report(r: dict, config: ml_collections.ConfigDict) -> str:
  """The report of `report` as text."""
  m, um = r['macs'], r['unet_macs']
  h, w = r['input_hw']
  fields = ', '.join(f'{k} {v}' for k, v in r['model_fields'].items())
  lines = [
    f'{r["model"]} ({fields}) at {h}x{w} (HxW), batch 1',
    f'  parameters:                    {r["params"] / 1e6:.2f} M ({r["params"]:,})',
    f'  MACs (analytic, from jaxpr):   {m["total"] / 1e9:.2f} G  '
    f'(convolutions {m["conv"] / 1e9:.2f} G + matrix products {m["dot"] / 1e9:.2f} G)',
  ]
  if um is not None:
    lines.append(
      f'  U-Net layer by layer:          {um["true"] / 1e9:.2f} G  '
      f'(convs {um["conv"] / 1e9:.2f} G + transposed convs {um["up"] / 1e9:.2f} G)'
    )
  lines += [
    f'  FLOPs (2 x analytic MACs):     {r["flops"] / 1e9:.2f} G forward; a training step '
    f'counts {TRAIN_FORWARD_MULTIPLE} x: {TRAIN_FORWARD_MULTIPLE * r["flops"] / 1e9:.2f} G '
    'per image',
    f'  XLA cost analysis (check):     {r["xla_flops"] / 1e9:.2f} G flops, {r["xla_cross_check"]}',
  ]
  if um is not None:
    lines.append(
      f"  paper convention ('GFLOPS'):   {um['paper'] / 1e9:.2f} G  "
      '(MACs, each 2x2 transposed conv charged 4 taps per output pixel)'
    )
  for key in ('fps_batch1', 'fps_batched'):
    if key in r:
      f = r[key]
      fractions = ', '.join(
        f'{frac:.1%} of {r["device"]} dense {p} peak' for p, frac in f['peak_fraction'].items()
      )
      fractions = f' ({fractions})' if fractions else ''
      lines += [
        f'  inference, batch {f["batch"]:>2}:          {f["fps"]:.2f} images/s '
        f'(median {f["median_s"] * 1e3:.1f} ms over {f["repeats"]}; first call '
        f'{f["first_call_s"]:.1f} s) on {r["backend"]} ({r["device"]})',
        f'    analytic {f["flops_per_s"] / 1e12:.3f} TFLOP/s{fractions}',
        f'    memory: {format_memory(f["memory"])}',
      ]
  if r.get('device_memory'):
    d = r['device_memory']
    lines.append(
      f'  device peak memory (process):  {d["peak_bytes_in_use"] / 2**20:.0f} MiB '
      f'(memory_stats peak_bytes_in_use; limit {d["bytes_limit"] / 2**20:.0f} MiB)'
    )
  elif 'fps_batch1' in r:
    lines.append(
      f'  device peak memory (process):  n/a on {r["backend"]} (memory_stats() is None); '
      'see the compiled memory analysis above'
    )
  if r.get('paper'):
    lines.append(
      "  beside the paper's Tables V-VIII (ours at this config's widths; the paper's GFLOPS are "
      'MACs, its FPS a GTX 1080 Ti):'
    )
    for q in r['paper']:
      ph, pw = q['input_hw']
      lines.append(
        f'    Table {q["table"]} ({q["dataset"]}, {ph}x{pw}): parameters {r["params"] / 1e6:.2f} M '
        f'vs {q["paper_params"] / 1e6:.2f} M; MACs {q["macs"] / 1e9:.2f} G vs GFLOPS '
        f'{q["paper_gflops"]:.2f}; paper FPS {q["paper_fps"]:.2f}'
      )
  return '\n'.join(lines)


if __name__ == '__main__':
  main()
