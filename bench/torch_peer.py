"""The PyTorch peer of bench/train_step.py: the same U-Net, loss and Adam step in PyTorch (eager
or torch.compile), timed the same way, for the speed ratios of docs/performance.md. It runs in
a process of its own (train_step.py's `_torch_subprocess`), so the JAX process never loads
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


def bench_torch(
  config,
  hw,
  batch,
  steps,
  warmup,
  *,
  expect_params=None,
  device='auto',
  compile_mode: str | None = None,
  compile_backend: str = 'inductor',
) -> dict:
  """The PyTorch equivalent; meant to run in its own process (see `_torch_subprocess`).

  Args:
    config: the bench's config (model widths and dtype, loss, learning rate).
    hw: (H, W) of the input.
    batch: batch size.
    steps: timed steps.
    warmup: untimed steps after the first call (which compiles under torch.compile).
    expect_params: assert the model has this many parameters (Flax's count).
    device: 'auto', 'cpu' or 'cuda'.
    compile_mode: None for eager, else the `torch.compile` mode of the model + loss.
    compile_backend: the `torch.compile` backend ('inductor'; tests use 'aot_eager', which
      traces the same way without generating C++/Triton kernels).
  """
  import numpy as np
  import torch

  device = resolve_torch_device(device)
  cuda = device == 'cuda'
  if not cuda:
    torch.set_num_threads(os.cpu_count())
  torch.manual_seed(0)
  bf16 = config.model.get('dtype', 'float32') == 'bfloat16'
  memory_format = torch.channels_last if bf16 else torch.contiguous_format
  model = _torch_unet(tuple(config.model.widths)).to(device=device, memory_format=memory_format)
  n_params = sum(p.numel() for p in model.parameters())
  if expect_params is not None:
    assert n_params == expect_params, (n_params, expect_params)
  opt = torch.optim.Adam(model.parameters(), lr=config.learning_rate, fused=cuda)
  data = random_batch(batch, *hw)
  image = torch.from_numpy(np.ascontiguousarray(data['image'].transpose(0, 3, 1, 2)))
  image = image.to(device).contiguous(memory_format=memory_format)
  mask = torch.from_numpy(np.ascontiguousarray(data['mask'].transpose(0, 3, 1, 2))).to(device)
  lc = config.loss

  def loss_of(image, mask):
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
      logits = model(image)
    logits = logits.float()
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
    loss_fn, mode = loss_of, 'eager'
  elif compile_backend == 'inductor':
    loss_fn = torch.compile(loss_of, mode=compile_mode)
    mode = f'torch.compile (mode {compile_mode})'
  else:  # other backends take no mode
    loss_fn = torch.compile(loss_of, backend=compile_backend)
    mode = f'torch.compile (backend {compile_backend})'

  def sync():
    if cuda:
      torch.cuda.synchronize()

  def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(image, mask)
    loss.backward()
    opt.step()
    return loss.detach()

  t0 = time.perf_counter()
  step()
  sync()
  first_call_s = time.perf_counter() - t0
  for _ in range(warmup):
    step()
  sync()
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    loss = step()
    sync()
    times.append(time.perf_counter() - t0)
  if bf16:
    precision = 'bfloat16 autocast, channels_last'
  elif cuda:  # PyTorch's defaults: TF32 in cuDNN convolutions, not in matmuls
    precision = (
      f'float32 (cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}, '
      f'matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32})'
    )
  else:
    precision = 'float32'
  result = {
    'framework': 'torch',
    'torch': torch.__version__,
    'device': torch.cuda.get_device_name() if cuda else 'cpu',
    'mode': mode,
    'precision': precision,
    'threads': torch.get_num_threads(),
    'params': n_params,
    'loss': float(loss),
    'first_call_s': first_call_s,
    **_time_stats(times, batch),
    'peak_rss_mb': _peak_rss_mb(),
  }
  if cuda:
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
