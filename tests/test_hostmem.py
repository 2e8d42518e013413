"""crackjax.deploy.hostmem: glibc keeps and reuses freed memory after tune_malloc."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Page faults of allocating and filling a 64 MiB array again after one was freed: glibc's
# defaults hand such a block back to the system (munmap) and fault it in anew each time.
_FAULTS = """
import resource, sys
from crackjax.deploy import hostmem
if sys.argv[1] == 'tuned':
  assert hostmem.tune_malloc()
import numpy as np
a = np.ones(64 << 20, np.uint8); del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
  a = np.ones(64 << 20, np.uint8); del a
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def _faults(mode: str) -> float:
  # A fresh process each: the setting is process-wide and cannot be undone.
  proc = subprocess.run(
    [sys.executable, '-c', _FAULTS, mode], capture_output=True, text=True, cwd=REPO, timeout=120
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  return float(proc.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc only')
def test_tuned_malloc_reuses_freed_blocks():
  default, tuned = _faults('default'), _faults('tuned')
  # 64 MiB is 16,384 pages of 4 KiB (fewer with transparent huge pages); reused: none.
  assert tuned <= 8 and default > 10 * (tuned + 1), (default, tuned)
