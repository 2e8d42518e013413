"""The PyTorch peer of bench/train_step.py: the same U-Net, loss and Adam step in PyTorch (eager
or torch.compile), timed the same way, for the speed ratios of docs/performance.md. It runs in
a process of its own (train_step.py's `TorchServer`), so the JAX process never loads
torch. Also the measuring helpers both sides share (the random batch, the time statistics,
the peak resident memory).
"""

from __future__ import annotations

import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

CRACK_FRACTION = 0.02
TORCH_COMPILE_MODES = ('default', 'reduce-overhead', 'max-autotune', 'max-autotune-no-cudagraphs')


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


def torch_available() -> bool:
  """Whether `import torch` works, checked in a subprocess so this process never loads it."""
  if importlib.util.find_spec('torch') is None:
    return False
  return subprocess.run([sys.executable, '-c', 'import torch'], capture_output=True).returncode == 0


def torch_unsupported(config) -> str | None:
  """Why the PyTorch comparison cannot run this config, or None if it can."""
  if config.model.name != 'unet':
    return f'the PyTorch comparison implements the U-Net only, not {config.model.name!r}'
  lc = config.loss
  if lc.get('name', 'holistic') != 'holistic' or lc.weighting != 'exp':
    return 'the PyTorch comparison implements the holistic loss with exp weighting only'
  return None


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


def resolve_torch_device(name: str) -> str:
  """'cpu' or 'cuda' for `--torch_device` ('auto': CUDA when torch sees a GPU).

  Raises:
    RuntimeError: 'cuda' was asked for and torch sees no GPU (a CPU-only build or none).
  """
  import torch

  if name == 'auto':
    return 'cuda' if torch.cuda.is_available() else 'cpu'
  if name == 'cuda' and not torch.cuda.is_available():
    raise RuntimeError(
      f'--torch_device=cuda, but torch {torch.__version__} sees no CUDA GPU '
      f'(CUDA build: {torch.version.cuda or "none"})'
    )
  return name


class TorchStep:
  """The PyTorch equivalent of crackjax's train step, built once and timed in blocks; meant to
  run in its own process (train_step.py's `TorchServer`).

  Args:
    config: the bench's config (model widths and dtype, loss, learning rate).
    hw: (H, W) of the input.
    batch: batch size.
    expect_params: assert the model has this many parameters (Flax's count).
    device: 'auto', 'cpu' or 'cuda'.
    compile_mode: None for eager, else the `torch.compile` mode of the model + loss.
    compile_backend: the `torch.compile` backend ('inductor'; tests use 'aot_eager', which
      traces the same way without generating C++/Triton kernels).
  """

  def __init__(
    self,
    config,
    hw,
    batch,
    *,
    expect_params=None,
    device='auto',
    compile_mode: str | None = None,
    compile_backend: str = 'inductor',
  ):
    import numpy as np
    import torch

    self.torch = torch
    self.batch = batch
    device = resolve_torch_device(device)
    self.device = device
    self.cuda = device == 'cuda'
    if not self.cuda:
      torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    self.bf16 = bf16 = config.model.get('dtype', 'float32') == 'bfloat16'
    memory_format = torch.channels_last if bf16 else torch.contiguous_format
    model = _torch_unet(tuple(config.model.widths)).to(device=device, memory_format=memory_format)
    self.n_params = sum(p.numel() for p in model.parameters())
    if expect_params is not None:
      assert self.n_params == expect_params, (self.n_params, expect_params)
    self.opt = torch.optim.Adam(model.parameters(), lr=config.learning_rate, fused=self.cuda)
    data = random_batch(batch, *hw)
    image = torch.from_numpy(np.ascontiguousarray(data['image'].transpose(0, 3, 1, 2)))
    self.image = image.to(device).contiguous(memory_format=memory_format)
    mask = np.ascontiguousarray(data['mask'].transpose(0, 3, 1, 2))
    self.mask = torch.from_numpy(mask).to(device)
    lc = config.loss

    # Phases are marked while `profile` runs, in eager mode only (torch.compile would trace
    # the markers).
    self.eager = compile_mode is None
    self.annotate = False
    phase = self.phase

    def loss_of(image, mask):
      with phase('forward'), torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        logits = model(image)
      with phase('loss'):
        return _loss(logits.float(), mask)

    def _loss(logits, mask):
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
      return loss

    if compile_mode is None:
      self.loss_fn, self.mode = loss_of, 'eager'
    elif compile_backend == 'inductor':
      self.loss_fn = torch.compile(loss_of, mode=compile_mode)
      self.mode = f'torch.compile (mode {compile_mode})'
    else:  # other backends take no mode
      self.loss_fn = torch.compile(loss_of, backend=compile_backend)
      self.mode = f'torch.compile (backend {compile_backend})'
    self.loss = None
    self.cpu_times: list[float] = []  # process CPU seconds (all threads) of each timed step
    t0 = time.perf_counter()
    self.step()
    self.sync()
    self.first_call_s = time.perf_counter() - t0

  def phase(self, name: str):
    """A `torch.profiler.record_function` marker of a phase of the step (eager only)."""
    import contextlib

    if not self.annotate:
      return contextlib.nullcontext()
    return self.torch.profiler.record_function(name)

  def sync(self) -> None:
    if self.cuda:
      self.torch.cuda.synchronize()

  def step(self):
    """One training step: zero the gradients, loss, backward, Adam."""
    self.opt.zero_grad(set_to_none=True)
    loss = self.loss_fn(self.image, self.mask)
    with self.phase('backward'):
      loss.backward()
    with self.phase('optimizer'):
      self.opt.step()
    self.loss = loss.detach()
    return self.loss

  def warm(self, n: int) -> None:
    """`n` untimed steps."""
    for _ in range(n):
      self.step()
    self.sync()

  def time_steps(self, n: int) -> list[float]:
    """Wall times of `n` steps, each waited for."""
    times = []
    for _ in range(n):
      t0, c0 = time.perf_counter(), time.process_time()
      self.step()
      self.sync()
      times.append(time.perf_counter() - t0)
      self.cpu_times.append(time.process_time() - c0)
    return times

  def profile(self, n: int) -> list[list]:
    """`n` steps under `torch.profiler`: [op, phase, self ms per step] for every aten op, the
    phase the op ran in ('forward', 'loss', 'backward', 'optimizer'; '' unmarked, and all of
    it under torch.compile), for bench/cpu_profile.py to sort into kinds."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    phases = ('forward', 'loss', 'backward', 'optimizer')
    self.annotate = self.eager
    try:
      with profile(activities=[ProfilerActivity.CPU]) as prof:
        self.warm(n)
    finally:
      self.annotate = False
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for event in prof.events():
      if event.name in phases or event.self_cpu_time_total <= 0:
        continue
      parent, phase = event.cpu_parent, ''
      while parent is not None:
        if parent.name in phases:
          phase = parent.name
          break
        parent = parent.cpu_parent
      totals[(event.name, phase)] += event.self_cpu_time_total / 1e3 / n
    return [[name, phase, ms] for (name, phase), ms in totals.items()]

  def result(self, times: list[float]) -> dict:
    """The figures of the timed steps `times` (see `bench_torch`)."""
    torch = self.torch
    if self.bf16:
      precision = 'bfloat16 autocast, channels_last'
    elif self.cuda:  # PyTorch's defaults: TF32 in cuDNN convolutions, not in matmuls
      precision = (
        f'float32 (cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}, '
        f'matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32})'
      )
    else:
      precision = 'float32'
    result = {
      'framework': 'torch',
      'torch': torch.__version__,
      'device': torch.cuda.get_device_name() if self.cuda else 'cpu',
      'mode': self.mode,
      'precision': precision,
      'threads': torch.get_num_threads(),
      'params': self.n_params,
      'loss': float(self.loss),
      'first_call_s': self.first_call_s,
      **_time_stats(times, self.batch),
      'cpu_s_per_step': statistics.median(self.cpu_times) if self.cpu_times else None,
      'peak_rss_mb': _peak_rss_mb(),
    }
    if self.cuda:
      result['memory'] = {
        'peak_bytes': int(torch.cuda.max_memory_allocated()),
        'source': 'device',
        'label': 'device peak, torch.cuda.max_memory_allocated',
      }
    else:
      result['memory'] = {
        'peak_bytes': None,
        'source': None,
        'label': 'no device memory on the CPU; see the host peak RSS',
      }
    return result


def bench_torch(config, hw, batch, steps, warmup, **kwargs) -> dict:
  """Builds a `TorchStep` (keyword arguments as there), runs `warmup` untimed and `steps` timed
  steps; returns its figures: mode, precision, first call, step times and their median,
  images/s, peak memory (the device's on CUDA, else None: see the host peak RSS)."""
  step = TorchStep(config, hw, batch, **kwargs)
  step.warm(warmup)
  return step.result(step.time_steps(steps))


def serve(step: TorchStep, lines, write) -> dict:
  """Answers the interleaved bench's requests, one per line of `lines`, each answer one JSON
  line given to `write`: 'ready' is announced first; 'run N' times N steps ({'times': [...]});
  'profile N' profiles N steps ({'profile': [[op, phase, ms per step], ...]}); 'done' answers
  with the figures of every step timed so far (`TorchStep.result`) and ends."""
  from crackjax.runs import outputs

  times: list[float] = []
  write(outputs.dumps({'ready': True, 'first_call_s': step.first_call_s}))
  for line in lines:
    verb, _, arg = line.strip().partition(' ')
    if verb == 'run':
      block = step.time_steps(int(arg))
      times += block
      write(outputs.dumps({'times': block, 'cpu_times': step.cpu_times[-len(block) :]}))
    elif verb == 'profile':
      write(outputs.dumps({'profile': step.profile(int(arg))}))
    elif verb == 'done':
      result = step.result(times)
      write(outputs.dumps(result))
      return result
  raise EOFError('the bench closed the PyTorch worker before "done"')
