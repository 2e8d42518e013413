"""Model complexity: parameters, MACs/FLOPs and inference speed (paper Tables V-VIII).

  python -m crackjax.complexity --config=configs/crackforest_exp.py
  python -m crackjax.complexity --config=configs/crackforest_exp.py --hw=512,512 --fps_batch=8
  python -m crackjax.complexity --config=configs/crackforest_exp.py \
      --config.model.widths='(16, 32, 64, 128, 256)' --config.model.dtype=bfloat16

Three operation counts are printed side by side:

* true MACs, counted layer by layer (`unet_macs`; U-Net only, other models print n/a): a
  3x3 convolution costs H*W*9*C_in*C_out multiply-accumulates, a 2x2 stride-2 transposed
  convolution H_out*W_out*C_in*C_out (each output pixel receives exactly one input pixel);
* the paper's convention: its "GFLOPS" column are MACs that charge each 2x2 transposed
  convolution the full 4 taps per output pixel, i.e. true MACs + 3 x the transposed
  convolutions' true MACs. That reproduces 127.99 G at 480x320 and 218.44 G at 512x512 for
  the paper's U-Net (Tables V-VIII print 128.18 G and 218.46 G) and 28.44 G at 304x448 for
  widths 32...512 (printed 28.44 G);
* XLA's own cost analysis of the compiled forward pass ('flops', two per MAC plus the
  element-wise work), as a check that the layer-by-layer count describes the real program.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from crackjax import cli
from crackjax.models import fused_logits, model_from_config

# Input (H, W) of each dataset at which the paper reports complexity and speed.
PAPER_INPUT_SIZES: dict[str, tuple[int, int]] = {
  'crackforest': (320, 480),
  'aiglern': (304, 448),
  'crack360': (512, 512),
  'bjn260': (320, 480),
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


def _forward(config: ml_collections.ConfigDict):
  model = model_from_config(config.model)
  return model, jax.jit(lambda p, x: jax.nn.sigmoid(fused_logits(model.apply({'params': p}, x))))


def xla_flops(config: ml_collections.ConfigDict, height: int, width: int, batch: int = 1) -> float:
  """FLOPs of the compiled forward pass according to XLA's cost analysis."""
  model, fwd = _forward(config)
  x = jax.ShapeDtypeStruct((batch, height, width, 3), jnp.float32)
  params = jax.eval_shape(model.init, jax.random.key(0), x)['params']
  analysis = fwd.lower(params, x).compile().cost_analysis()
  if isinstance(analysis, list):  # older jax returns one dict per device
    analysis = analysis[0]
  return float(analysis['flops'])


def measure_fps(
  config: ml_collections.ConfigDict, height: int, width: int, *, batch: int = 1, repeats: int = 10
) -> dict[str, float]:
  """Images per second of jitted inference (after one warm-up call)."""
  model, fwd = _forward(config)
  x = jnp.asarray(np.random.default_rng(0).random((batch, height, width, 3), np.float32))
  params = jax.jit(model.init)(jax.random.key(0, impl='rbg'), x)['params']
  t0 = time.perf_counter()
  fwd(params, x).block_until_ready()
  compile_s = time.perf_counter() - t0
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fwd(params, x).block_until_ready()
    times.append(time.perf_counter() - t0)
  median = float(np.median(times))
  return {
    'batch': batch,
    'median_s': median,
    'fps': batch / median,
    'first_call_s': compile_s,
    'repeats': repeats,
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
  config: ml_collections.ConfigDict,
  hw: tuple[int, int] | None = None,
  *,
  fps_batch: int = 8,
  repeats: int = 10,
  fps: bool = True,
) -> dict:
  """Computes every figure; returns them as a dict (also printed by main)."""
  h, w = measurement_size(config, hw)
  model = model_from_config(config.model)
  params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, h, w, 3)))['params']
  # The layer-by-layer count knows the U-Net only; other models report XLA's count alone.
  macs = unet_macs(config.model.widths, h, w) if config.model.name == 'unet' else None
  out = {
    'model': config.model.name,
    'model_fields': {k: v for k, v in config.model.items() if k != 'name'},
    'input_hw': [h, w],
    'params': count_params(params),
    'macs': macs,
    'xla_flops': xla_flops(config, h, w),
    'backend': jax.default_backend(),
    'device': str(jax.devices()[0].device_kind),
  }
  if fps:
    out['fps_batch1'] = measure_fps(config, h, w, batch=1, repeats=repeats)
    out['fps_batched'] = measure_fps(config, h, w, batch=fps_batch, repeats=repeats)
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


def main(argv: Sequence[str] | None = None) -> None:
  """Prints the complexity report of ``--config`` (argv without the program name)."""
  prog = 'python -m crackjax.complexity'
  fv, _ = cli.parse_command(prog, argv, _define_flags)
  config = fv.config
  hw = tuple(int(v) for v in fv.hw) if fv.hw else None
  if hw is not None and len(hw) != 2:
    sys.exit(f'{prog}: --hw takes H,W, got {fv.hw}')
  try:
    r = report(config, hw, fps_batch=fv.fps_batch, repeats=fv.repeats, fps=fv.fps)
  except ValueError as e:  # an unknown model or dtype, a size the model cannot take
    sys.exit(f'{prog}: {e}')
  print(format_report(r, config))


def format_report(r: dict, config: ml_collections.ConfigDict) -> str:
  """The report of `report` as text."""
  m = r['macs']
  h, w = r['input_hw']
  fields = ', '.join(f'{k} {v}' for k, v in r['model_fields'].items())
  lines = [
    f'{r["model"]} ({fields}) at {h}x{w} (HxW), batch 1',
    f'  parameters:                    {r["params"] / 1e6:.2f} M ({r["params"]:,})',
  ]
  if m is None:
    lines.append('  MACs (layer by layer):         n/a (counted for the U-Net only)')
  else:
    lines += [
      f'  MACs (true, layer by layer):   {m["true"] / 1e9:.2f} G  '
      f'(convs {m["conv"] / 1e9:.2f} G + transposed convs {m["up"] / 1e9:.2f} G)',
      f'  FLOPs (2 x true MACs):         {2 * m["true"] / 1e9:.2f} G',
    ]
  lines.append(f'  XLA cost analysis, flops:      {r["xla_flops"] / 1e9:.2f} G')
  if m is not None:
    lines.append(
      f"  paper convention ('GFLOPS'):   {m['paper'] / 1e9:.2f} G  "
      '(MACs, each 2x2 transposed conv charged 4 taps per output pixel)'
    )
  for key in ('fps_batch1', 'fps_batched'):
    if key in r:
      f = r[key]
      lines.append(
        f'  inference, batch {f["batch"]:>2}:          {f["fps"]:.2f} images/s '
        f'(median {f["median_s"] * 1e3:.1f} ms over {f["repeats"]}; first call '
        f'{f["first_call_s"]:.1f} s) on {r["backend"]} ({r["device"]})'
      )
  return '\n'.join(lines)


if __name__ == '__main__':
  main()
