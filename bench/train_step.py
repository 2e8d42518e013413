"""Wall time of crackjax's jitted U-Net train step, with an optional PyTorch comparison.

Builds the model and Adam state the way training does (`crackjax.state.init_train_state`,
`make_mesh`, `global_batch`, `crackjax.train.make_train_step`), feeds one random batch of
the configured shape (images uniform in [0, 1], masks ~2% crack), compiles, runs
`--warmup` steps and then times `--steps` steps, blocking on the result of each. The step
is the full training step: on-device augmentation, forward, loss, backward and the Adam
update.

Prints compile time, median / min / max step time, images per second, the process's
peak RSS (VmHWM, as getrusage's ru_maxrss but not inherited across fork/exec: the peak of
the whole process including imports and compilation, not of the step alone),
versions, backend and device kind; on a GPU also the achieved TFLOP/s (XLA cost-analysis
flops of the step / median step time) and its fraction of the device's peak from PEAK_FLOPS.

If `import torch` works (torch is never a dependency) the same U-Net, loss and optimizer
run in PyTorch in a separate subprocess, after the JAX run, with
torch.set_num_threads(os.cpu_count()), so the two peak RSS figures do not mix; the ratio
jax/torch of the median step times comes from the same invocation. `--notorch` skips it.

Usage (the config and its ``--config.*`` overrides as for launch.py)::

    python bench/train_step.py --config=configs/crackforest_exp.py \
        [--config.model.widths='(16, 32, 64, 128, 256)'] [--config.model.conv_impl=xla] \
        [--config.model.dtype=bfloat16] [--hw=320,480] [--batch=2] [--steps=5] [--warmup=1]
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from absl import flags

from crackjax import cli, validate

REPO = Path(__file__).resolve().parents[1]

# Dense peak FLOP/s per device kind (substring of jax's device_kind), by precision.
# H100 SXM: 989 TFLOP/s bf16 dense tensor core, 67 TFLOP/s fp32 (non-tensor-core).
PEAK_FLOPS: dict[str, dict[str, float]] = {
  'H100': {'bf16': 989e12, 'fp32': 67e12},
  'H200': {'bf16': 989e12, 'fp32': 67e12},
  'A100': {'bf16': 312e12, 'fp32': 19.5e12},
}

CRACK_FRACTION = 0.02


def _peak_rss_mb() -> float:
  """Peak RSS of this process in MB: VmHWM of /proc/self/status where there is one.

  On Linux ru_maxrss (getrusage) survives fork and exec, so a subprocess started by a big
  process reports its parent's peak; VmHWM belongs to the process's own address space.
  Elsewhere falls back to ru_maxrss (KiB on Linux, bytes on macOS).
  """
  try:
    for line in Path('/proc/self/status').read_text().splitlines():
      if line.startswith('VmHWM:'):
        return int(line.split()[1]) / 1024.0
  except OSError:
    pass
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return rss / 2**20 if sys.platform == 'darwin' else rss / 1024.0


def _time_stats(times: list[float], batch: int) -> dict:
  """Step times and their median / min / max, and images per second at the median."""
  median = statistics.median(times)
  return {
    'step_times_s': times,
    'median_s': median,
    'min_s': min(times),
    'max_s': max(times),
    'images_per_s': batch / median,
  }


def random_batch(batch: int, h: int, w: int, seed: int = 0):
  """Images uniform in [0, 1] and masks with ~CRACK_FRACTION crack pixels (float32)."""
  import numpy as np

  rng = np.random.default_rng(seed)
  image = rng.random((batch, h, w, 3), dtype=np.float32)
  mask = (rng.random((batch, h, w, 1)) < CRACK_FRACTION).astype(np.float32)
  return {'image': image, 'mask': mask}


def _flops_of(compiled) -> float | None:
  try:
    cost = compiled.cost_analysis()
  except Exception:  # noqa: BLE001 - not every backend implements it
    return None
  if isinstance(cost, list | tuple):
    cost = cost[0] if cost else None
  if not cost or 'flops' not in cost:
    return None
  return float(cost['flops'])


def bench_jax(config, hw, batch, steps, warmup) -> dict:
  import flax
  import jax

  from crackjax import prefetch, train
  from crackjax import state as state_lib
  from crackjax.models.conv import resolve_impl

  config.data.input_size = tuple(hw)
  config.batch_size = batch
  widths = tuple(config.model.widths)
  mesh = state_lib.make_mesh()
  state = state_lib.init_train_state(config, (*hw, 3), mesh)
  n_params = sum(int(x.size) for x in jax.tree.leaves(state.params))
  step = train.make_train_step(config, mesh, state)
  data = state_lib.global_batch(random_batch(batch, *hw), mesh)

  t0 = time.perf_counter()
  compiled = step.lower(state, data).compile()
  compile_s = time.perf_counter() - t0
  prefetch.release_freed_host_memory()  # as train_and_evaluate does after compiling
  flops = _flops_of(compiled)

  for _ in range(warmup):
    state, metrics = compiled(state, data)
    jax.block_until_ready((state, metrics))
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    state, metrics = compiled(state, data)
    jax.block_until_ready((state, metrics))
    times.append(time.perf_counter() - t0)
  loss = float(metrics['loss'])

  device = jax.devices()[0]
  median = statistics.median(times)
  result = {
    'framework': 'jax',
    'jax': jax.__version__,
    'flax': flax.__version__,
    'backend': jax.default_backend(),
    'device_kind': device.device_kind,
    'device_count': jax.device_count(),
    'widths': list(widths),
    'hw': list(hw),
    'batch': batch,
    'steps': steps,
    'warmup': warmup,
    'params': n_params,
    'loss': loss,
    'conv_impl': f'{config.model.conv_impl} ({resolve_impl(config.model.conv_impl)})',
    'compute_dtype': config.model.dtype,
    'compile_s': compile_s,
    **_time_stats(times, batch),
    'peak_rss_mb': _peak_rss_mb(),
    'flops_per_step': flops,
  }
  if result['backend'] == 'gpu' and flops:
    achieved = flops / median
    result['tflops'] = achieved / 1e12
    peaks = next((v for k, v in PEAK_FLOPS.items() if k in device.device_kind), None)
    if peaks:
      result['peak_fraction'] = {prec: achieved / peak for prec, peak in peaks.items()}
  return result


# ----------------------------------------------------------------------------- PyTorch


def torch_available() -> bool:
  """Whether `import torch` works, checked in a subprocess so this process never loads it."""
  if importlib.util.find_spec('torch') is None:
    return False
  return subprocess.run([sys.executable, '-c', 'import torch'], capture_output=True).returncode == 0


def _torch_unet(widths):
  import torch
  from torch import nn

  def block(cin, cout):
    return nn.Sequential(
      nn.Conv2d(cin, cout, 3, padding=1),
      nn.ReLU(inplace=True),
      nn.Conv2d(cout, cout, 3, padding=1),
      nn.ReLU(inplace=True),
    )

  class UNet(nn.Module):
    """The same U-Net as crackjax.models.unet.UNet, NCHW."""

    def __init__(self):
      super().__init__()
      self.down = nn.ModuleList()
      cin = 3
      for w in widths[:-1]:
        self.down.append(block(cin, w))
        cin = w
      self.bottom = block(cin, widths[-1])
      self.ups = nn.ModuleList()
      self.up_blocks = nn.ModuleList()
      cin = widths[-1]
      for w in reversed(widths[:-1]):
        self.ups.append(nn.ConvTranspose2d(cin, w, 2, stride=2))
        self.up_blocks.append(block(2 * w, w))
        cin = w
      self.head = nn.Conv2d(cin, 1, 1)

    def forward(self, x):
      skips = []
      for blk in self.down:
        x = blk(x)
        skips.append(x)
        x = nn.functional.max_pool2d(x, 2)
      x = self.bottom(x)
      for up, blk, skip in zip(self.ups, self.up_blocks, reversed(skips), strict=True):
        x = blk(torch.cat([skip, up(x)], dim=1))
      return self.head(x)

  return UNet()


def bench_torch(config, hw, batch, steps, warmup, expect_params=None) -> dict:
  """The PyTorch equivalent; meant to run in its own process (see `_torch_subprocess`)."""
  import numpy as np
  import torch

  torch.set_num_threads(os.cpu_count())
  torch.manual_seed(0)
  model = _torch_unet(tuple(config.model.widths))
  n_params = sum(p.numel() for p in model.parameters())
  if expect_params is not None:
    assert n_params == expect_params, (n_params, expect_params)
  opt = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
  data = random_batch(batch, *hw)
  image = torch.from_numpy(np.ascontiguousarray(data['image'].transpose(0, 3, 1, 2)))
  mask = torch.from_numpy(np.ascontiguousarray(data['mask'].transpose(0, 3, 1, 2)))
  lc = config.loss
  if lc.weighting != 'exp':
    raise ValueError(
      f'the torch comparison implements the exp weighting only, not {lc.weighting!r}'
    )

  def step():
    opt.zero_grad(set_to_none=True)
    logits = model(image)
    # As crackjax.losses: alpha Laplace-smoothed over the batch, q = beta base^(gamma(2a-1)).
    n = mask.numel()
    alpha = (n - mask.sum() + 1.0) / (n + 2.0)
    q = (lc.beta * lc.base ** (lc.gamma * (2.0 * alpha - 1.0))).detach()
    loss = lc.a * torch.nn.functional.binary_cross_entropy_with_logits(logits, mask, pos_weight=q)
    if lc.b:
      p = torch.sigmoid(logits)
      inter = (mask * p).sum()
      union = mask.sum() + p.sum() - inter
      loss = loss + lc.b * (1.0 - (inter + lc.jaccard_smooth) / (union + lc.jaccard_smooth))
    loss.backward()
    opt.step()
    return float(loss.detach())

  for _ in range(warmup):
    step()
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    loss = step()
    times.append(time.perf_counter() - t0)
  return {
    'framework': 'torch',
    'torch': torch.__version__,
    'threads': torch.get_num_threads(),
    'params': n_params,
    'loss': loss,
    **_time_stats(times, batch),
    'peak_rss_mb': _peak_rss_mb(),
  }


def _torch_subprocess(argv, expect_params) -> dict:
  """Runs `bench_torch` in a fresh process with the same command line (argv[1:])."""
  cmd = [
    sys.executable,
    str(Path(__file__).resolve()),
    *argv[1:],
    f'--torch_worker={expect_params}',
  ]
  out = subprocess.run(cmd, check=True, capture_output=True, text=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main


def _fmt_times(r) -> str:
  return (
    f'median {r["median_s"]:.3f} s (min {r["min_s"]:.3f}, max {r["max_s"]:.3f}; '
    f'{len(r["step_times_s"])} steps)'
  )


def report(jr: dict, tr: dict | None) -> str:
  lines = [
    f'config widths {tuple(jr["widths"])}, input {jr["hw"][0]}x{jr["hw"][1]}, batch '
    f'{jr["batch"]}, {jr["params"]:,} parameters',
    f'jax {jr["jax"]}, flax {jr["flax"]}, backend {jr["backend"]}, device '
    f'{jr["device_kind"]} x{jr["device_count"]}, python {platform.python_version()}, '
    f'{os.cpu_count()} CPUs',
    f'jax conv_impl {jr["conv_impl"]}, compute_dtype {jr["compute_dtype"]}',
    f'jax compile:      {jr["compile_s"]:.2f} s',
    f'jax step:         {_fmt_times(jr)}',
    f'jax images/s:     {jr["images_per_s"]:.2f}',
    f'jax peak RSS:     {jr["peak_rss_mb"]:.0f} MB (process peak RSS, VmHWM)',
  ]
  if jr.get('flops_per_step'):
    lines.append(
      f'XLA flops/step:   {jr["flops_per_step"] / 1e9:.1f} GFLOP '
      f'({jr["flops_per_step"] / jr["median_s"] / 1e9:.1f} GFLOP/s achieved)'
    )
  if 'tflops' in jr:
    lines.append(f'achieved:         {jr["tflops"]:.1f} TFLOP/s')
    for prec, frac in jr.get('peak_fraction', {}).items():
      lines.append(f'  fraction of {jr["device_kind"]} dense {prec} peak: {frac:.1%}')
  if tr is not None:
    lines += [
      f'torch {tr["torch"]} ({tr["threads"]} threads) step: {_fmt_times(tr)}',
      f'torch images/s:   {tr["images_per_s"]:.2f}',
      f'torch peak RSS:   {tr["peak_rss_mb"]:.0f} MB (separate process, VmHWM)',
      f'ratio jax/torch:  {jr["median_s"] / tr["median_s"]:.2f} (step time; >1: jax slower)',
    ]
  return '\n'.join(lines)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_list('hw', ['320', '480'], 'H,W of the input', flag_values=fv)
  flags.DEFINE_integer('batch', 2, 'global batch size', flag_values=fv)
  flags.DEFINE_integer('steps', 5, 'timed steps', lower_bound=1, flag_values=fv)
  flags.DEFINE_integer('warmup', 1, 'untimed steps after compiling', flag_values=fv)
  flags.DEFINE_bool(
    'torch', True, 'compare with PyTorch if it is importable (--notorch: skip)', flag_values=fv
  )
  flags.DEFINE_string('json', None, 'also write the results here', flag_values=fv)
  flags.DEFINE_integer('torch_worker', None, 'internal: run the PyTorch side only', flag_values=fv)


def main(argv=None) -> dict:
  """Runs the benchmark and prints the report; returns {'jax': ..., 'torch': ... or None}.

  Args:
    argv: the command line without the program name (default: sys.argv[1:]).
  """
  prog = 'bench/train_step.py'
  default = str(REPO / 'configs' / 'crackforest_exp.py')
  fv, argv = cli.parse_command(prog, argv, _define_flags, default_config=default)
  config = fv.config
  hw = tuple(int(v) for v in fv.hw)
  if len(hw) != 2:
    sys.exit(f'{prog}: --hw takes H,W, got {fv.hw}')

  if fv.torch_worker is not None:
    r = bench_torch(config, hw, fv.batch, fv.steps, fv.warmup, expect_params=fv.torch_worker)
    print(json.dumps(r))
    return {'jax': None, 'torch': r}

  try:
    validate.check_config(config)
  except validate.ConfigError as e:
    sys.exit(f'{prog}: bad config: {" / ".join(str(e).splitlines())}')
  jr = bench_jax(config, hw, fv.batch, fv.steps, fv.warmup)
  if not math.isfinite(jr['median_s']) or not math.isfinite(jr['loss']):
    raise FloatingPointError(f'non-finite result: {jr}')
  tr = None
  if fv.torch and torch_available():
    tr = _torch_subprocess(argv, jr['params'])
  elif fv.torch:
    print('(torch not importable: no PyTorch comparison)')
  print(report(jr, tr))
  result = {'jax': jr, 'torch': tr}
  if fv.json:
    Path(fv.json).write_text(json.dumps(result, indent=1))
  return result


if __name__ == '__main__':
  main()
