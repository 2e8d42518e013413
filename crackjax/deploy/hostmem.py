"""Host memory: allocation tuned for XLA on the CPU (glibc's malloc), and whether a photo's
prediction fits the memory left (`PhotoMemory`, end of this module).

XLA's CPU runtime allocates the buffers of every call of a compiled function anew (the
temporaries of one U-Net forward pass on a 1024 x 1024 input are ~0.5 GB) and frees them at
the end. glibc serves blocks above 32 MiB with a fresh `mmap` and returns them with `munmap`,
and it trims the freed top of its heaps, so each call page-faults its buffers in again: on the
2-core machine of docs/prediction.md, 0.28 s of kernel time of a 0.84 s call at 1024 x 1024
(125,000 page faults, 0.5 GB, per call), against 0.03 s of 0.12 s at 320 x 480, which is why
large inputs ran slower per pixel than small ones there. `tune_malloc` tells glibc to serve
every block from its heap (no mmap), to keep what is freed (no trim) and to use one arena, so
the second call reuses the first call's pages: measured 0.70 s per 1024 x 1024 call instead of
0.82-0.86 s, 20,000-26,000 page faults instead of 124,000.

The cost: memory freed by the process is not returned to the system until it exits (its
resident size stays at its peak), which suits a command that runs one model to the end. So
`crackjax-predict` calls it (`--tune_malloc`, on by default); the library never does by
itself, since it changes the whole process. On other C libraries (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8


def tune_malloc() -> bool:
  """Makes glibc's malloc keep and reuse freed memory (module docstring).

  Call it early, before the first computation (JAX's thread pools start then). Returns True
  where all three settings were taken, False where the C library is not glibc or refused one.
  """
  if not sys.platform.startswith('linux'):
    return False
  try:
    mallopt = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6').mallopt
  except (OSError, AttributeError):
    return False
  mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
  mallopt.restype = ctypes.c_int
  settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1))
  return all(mallopt(param, value) == 1 for param, value in settings)


# ------------------------------------------------------------------------ memory of a photo

#: Bytes a photo's pixel takes at the peak of crackjax-predict's work on it, rounded up: the
#: process's peak resident memory grew 36-48 bytes a pixel from 1 to 5 to 20 MP (a synthetic
#: photo 26% crack in 3.3 million specks, the smoke model: 0.49, 0.68, 1.22 GB), most of it the
#: measuring (components, skeleton, a band of the distance transform, the photo's mask).
BYTES_PER_PIXEL = 48
#: And per pixel of a batch of tiles: the model's own temporaries (a U-Net on a 1024 x 1024
#: tile took ~0.5 GB, module docstring), rounded up.
BYTES_PER_TILE_PIXEL = 600


def _read_int(path: str) -> int | None:
  try:
    text = open(path).read().split()[0]  # noqa: SIM115 (a one-line read)
  except (OSError, IndexError):
    return None
  return int(text) if text.isdigit() else None


def available_bytes() -> int | None:
  """Memory this process may still take: the system's MemAvailable (/proc/meminfo), lowered
  to what its address-space limit leaves (RLIMIT_AS, `ulimit -v`: numpy's allocations fail
  there first) and to what the process's cgroup limit leaves (v2 memory.max - memory.current, v1
  memory.limit_in_bytes - memory.usage_in_bytes: a container's limit is not in MemAvailable);
  None where none of them can be read (another system)."""
  found = []
  try:
    for line in open('/proc/meminfo'):  # noqa: SIM115
      if line.startswith('MemAvailable:'):
        found.append(int(line.split()[1]) * 1024)
  except (OSError, ValueError, IndexError):
    pass
  address_space = _address_space_left()
  if address_space is not None:
    found.append(address_space)
  for limit, usage in (
    ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory.current'),
    ('/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/memory/memory.usage_in_bytes'),
  ):
    most, used = _read_int(limit), _read_int(usage)
    if most is not None and used is not None and most < 1 << 60:  # 'max' / no limit: None
      found.append(max(0, most - used))
  return min(found) if found else None


def _address_space_left() -> int | None:
  """What the process's address-space limit (RLIMIT_AS, `ulimit -v`) leaves above its
  virtual size now; None without a limit (or where it cannot be read)."""
  try:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
      return None
    pages = int(open('/proc/self/statm').read().split()[0])  # noqa: SIM115
  except (ImportError, OSError, ValueError, IndexError):
    return None
  return max(0, soft - pages * os.sysconf('SC_PAGE_SIZE'))


def resident_bytes() -> int:
  """This process's resident memory now (0 where /proc cannot tell)."""
  try:
    text = open('/proc/self/statm').read().split()  # noqa: SIM115
    pages = int(text[1])
  except (OSError, IndexError, ValueError):
    return 0
  return pages * os.sysconf('SC_PAGE_SIZE')


class PhotoMemory:
  """Whether a photo's prediction fits the memory left (`refusal`), judged from its size
  before it is decoded: a 108 MP photo under a 3 GB limit ended in numpy's
  _ArrayMemoryError traceback after minutes of work."""

  def __init__(self, tile_pixels: int | Callable[[int, int], int] = 0):
    """`tile_pixels`: the pixels of one model call (a batch of tiles), or a function of the
    photo's (width, height) giving them: a photo smaller than the tile is predicted whole, at
    its own padded size (a --tile_size=100000 refused a 0.15 MP photo as needing 6e+03 GB)."""
    # Memory the process holds above this (an earlier photo's, kept by tune_malloc) is free
    # for the next photo, though not for the system.
    self._baseline = resident_bytes()
    self._tile_pixels = tile_pixels if callable(tile_pixels) else (lambda w, h: tile_pixels)

  def needs(self, width: int, height: int) -> int:
    """The bytes a `width` x `height` photo needs (an estimate, `BYTES_PER_PIXEL`)."""
    tiles = BYTES_PER_TILE_PIXEL * self._tile_pixels(width, height)
    return BYTES_PER_PIXEL * width * height + tiles

  def refusal(self, path: str | os.PathLike, width: int, height: int) -> str | None:
    """The line for a photo that will not fit (None if it fits, or the memory is unknown)."""
    free = available_bytes()
    if free is None:
      return None
    free += max(0, resident_bytes() - self._baseline)
    need = self.needs(width, height)
    if need <= free:
      return None
    return (
      f'{path}: {width}x{height} ({width * height / 1e6:.3g} MP) needs about '
      f'{need / 1e9:.3g} GB of memory to predict and measure, and {free / 1e9:.3g} GB are free '
      'here; free some memory, predict it where there is more (or cut it into parts), or '
      'try anyway with --ignore_memory_estimate'
    )
