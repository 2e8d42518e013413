"""Host memory allocation tuned for XLA on the CPU (glibc's malloc).

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
import sys

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
