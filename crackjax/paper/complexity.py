"""Model complexity: parameters, MACs/FLOPs, inference speed and memory (paper Tables V-VIII).

  python -m crackjax.paper.complexity --config=configs/crackforest_exp.py
  python -m crackjax.paper.complexity --config=configs/crackforest_exp.py --hw=512,512 --fps_batch=8
  python -m crackjax.paper.complexity --config=configs/crackforest_exp.py \
      --config.model.widths='(16, 32, 64, 128, 256)' --config.model.dtype=bfloat16
  python -m crackjax.paper.complexity --config=configs/compare.py:hed

The operation counts (analytic MACs, FLOPs, a training step's FLOPs, the paper's convention,
XLA's cross-check) are `crackjax.paper.flops`', whose docstring states the convention every
FLOP/s figure of crackjax and its benchmarks follows. Here the forward pass is also compiled
and timed (`measure_fps`) and its memory read.

Memory (`memory_figures`): the device's peak, `jax.Device.memory_stats()['peak_bytes_in_use']`,
where the backend has an allocator that reports it (GPU, TPU): the process's peak on that
device so far, everything included (parameters, every compiled program's buffers, scratch).
The CPU backend reports nothing (`memory_stats()` is None); there the substitute is XLA's
compiled memory analysis of the program (`compiled_memory`): argument + output - aliased
(donated) + temporary bytes, the buffers the program needs at once, printed under that name,
never as device memory. Host RSS is a host figure and is labelled as one where printed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from crackjax import cli
from crackjax.experiment.build import Experiment, build
from crackjax.models import fused_logits
from crackjax.paper import flops, table_rules, tables
from crackjax.runs import outputs

# Input (H, W) of each dataset at which the paper reports complexity and speed.
PAPER_INPUT_SIZES: dict[str, tuple[int, int]] = {
  'crackforest': (320, 480),
  'aiglern': (304, 448),
  'crack360': (512, 512),
  'bjn260': (320, 480),
}


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
  variables = flops.abstract_variables(model, height, width)
  count = flops.hlo_flops(fwd.lower(variables, x))
  return float('nan') if count is None else count


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

  'macs' is `flops.forward_macs` per image (any model), 'unet_macs' the layer-by-layer U-Net
  count with the paper's convention (None for other models), 'xla_flops' the cross-check.
  With `fps`, each FPS measurement also carries its analytic FLOP/s and, where
  `flops.PEAK_FLOPS` knows the device, its fraction of the peak for the model's dtype.
  """
  config, model = experiment.config, experiment.model
  h, w = measurement_size(config, hw)
  params = flops.abstract_variables(model, h, w)['params']
  macs = flops.forward_macs(model, h, w)
  device = jax.devices()[0]
  out = {
    'model': config.model.name,
    'model_fields': {k: v for k, v in config.model.items() if k != 'name'},
    'input_hw': [h, w],
    'params': flops.count_params(params),
    'macs': macs,
    'flops': 2 * macs['total'],
    'unet_macs': flops.unet_macs(config.model.widths, h, w)
    if config.model.name == 'unet'
    else None,
    'xla_flops': xla_flops(model, h, w),
    'backend': jax.default_backend(),
    'device': str(device.device_kind),
  }
  out['xla_cross_check'] = flops.cross_check(out['flops'], out['xla_flops'])
  if fps:
    dtype = str(config.model.get('dtype', 'float32'))
    for key, batch in (('fps_batch1', 1), ('fps_batched', fps_batch)):
      f = measure_fps(model, h, w, batch=batch, repeats=repeats)
      f['flops_per_s'] = out['flops'] * f['fps']
      f['peak_fraction'] = flops.peak_fractions(f['flops_per_s'], out['device'], dtype)
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
          'macs': flops.forward_macs(model, h, w)['total'],
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
  step = flops.TRAIN_FORWARD_MULTIPLE
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
    f'counts {step} x: {step * r["flops"] / 1e9:.2f} G per image',
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
