"""The commands' last tracebacks (issue 57): each ends in one line (or the right result)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='needs /dev/full')
def test_docs_to_an_unwritable_stdout_is_one_line():
  with open('/dev/full', 'w') as full:
    done = subprocess.run(
      [sys.executable, '-m', 'crackjax.runs.docs', 'troubleshooting'],
      stdout=full,
      stderr=subprocess.PIPE,
      text=True,
      timeout=60,
    )
  assert done.returncode == 1
  assert done.stderr.strip().splitlines() == [
    'crackjax-docs: cannot write the page to standard output (No space left on device).'
  ]
  # A reader that stops early (| head) is no error.
  piped = subprocess.run(
    f'{sys.executable} -m crackjax.runs.docs troubleshooting | head -1',
    shell=True,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert piped.stdout.startswith('# ') and 'Traceback' not in piped.stderr
