"""crackjax.runs.file_locks.exclusive: one holder at a time, across processes, although the
holder removes the lock file on release (a waiter must not keep the removed file's lock)."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crackjax.runs import file_locks

REPO = Path(__file__).resolve().parents[1]

# Each process adds 1 to the counter ROUNDS times, reading and writing it with a pause between
# (a lost update whenever two hold the lock at once) and logs when it holds it.
WORKER = textwrap.dedent("""
  import os, sys, time
  from crackjax.runs import file_locks

  lock, counter, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
  for _ in range(rounds):
    with file_locks.exclusive(lock):
      value = int(open(counter).read())
      time.sleep(0.002)
      with open(counter, 'w') as f:
        f.write(str(value + 1))
""")


def _python(*args: str, **kwargs) -> subprocess.Popen:
  env = {**os.environ, 'PYTHONPATH': str(REPO)}
  return subprocess.Popen([sys.executable, *args], env=env, cwd=REPO, **kwargs)


def test_one_holder_at_a_time_and_no_file_left(tmp_path):
  lock, counter = tmp_path / 'data.lock', tmp_path / 'counter'
  counter.write_text('0')
  workers = [_python('-c', WORKER, str(lock), str(counter), '40') for _ in range(4)]
  assert [w.wait(timeout=120) for w in workers] == [0, 0, 0, 0]
  assert counter.read_text() == '160'  # no update lost: never two holders
  assert not lock.exists()


def test_the_file_is_removed_after_an_error_too(tmp_path):
  lock = tmp_path / 'data.lock'
  with file_locks.exclusive(lock):
    assert lock.exists()
  assert not lock.exists()
  with pytest.raises(KeyboardInterrupt), file_locks.exclusive(lock):
    raise KeyboardInterrupt
  assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(sys.platform == 'win32', reason='kill -9')
def test_a_killed_holders_file_is_taken_and_removed_by_the_next(tmp_path):
  lock = tmp_path / 'data.lock'
  holder = _python(
    '-c',
    'import sys, time\n'
    'from crackjax.runs import file_locks\n'
    'with file_locks.exclusive(sys.argv[1]):\n'
    '  print("held", flush=True)\n'
    '  time.sleep(600)\n',
    str(lock),
    stdout=subprocess.PIPE,
    text=True,
  )
  assert holder.stdout.readline() == 'held\n'
  holder.send_signal(signal.SIGKILL)
  holder.wait(timeout=30)
  holder.stdout.close()
  assert lock.exists()  # kill -9 runs no clean-up; the kernel dropped the flock
  with file_locks.exclusive(lock):
    pass
  assert not lock.exists()
