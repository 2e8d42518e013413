"""SIGTERM ends a run once: the first raises SystemExit (the checkpoint is saved on the way
out), later ones are ignored so that they cannot break that save (issue: a runner killed with
kill -9 sent its workers a second SIGTERM, which interrupted orbax's save)."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_SCRIPT = textwrap.dedent("""
  import os, signal, time
  from crackjax.runs import exits

  exits.exit_on_sigterm()
  try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
  except SystemExit as e:
    print('exit:', e, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # the second one, during the save on the way out
    time.sleep(0.2)
    print('saved', flush=True)
""")


def _run(script: str) -> subprocess.CompletedProcess:
  """`script` in a new Python process that imports this checkout's crackjax."""
  env = dict(
    os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get('PYTHONPATH')]))
  )
  return subprocess.run(
    [sys.executable, '-c', script], capture_output=True, text=True, timeout=60, env=env
  )


def test_a_second_sigterm_does_not_interrupt_the_way_out():
  proc = _run(_SCRIPT)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == [f'exit: Received signal {int(signal.SIGTERM)}', 'saved']


# `signal.<name>` sent while the collector runs a callback, as JAX's `_xla_gc_callback`, which
# it runs at any allocation (`collect()`).
_SIGNAL_IN_A_GC_CALLBACK = """
  import gc, os, signal
  from crackjax.runs import exits

  def callback(phase, info):
    if phase == 'start':
      os.kill(os.getpid(), signal.{name})
      sum(range(1000))  # bytecodes, where Python runs the handler

  def collect():
    gc.callbacks.append(callback)
    gc.collect()
    gc.callbacks.remove(callback)
"""


def signal_in_a_gc_callback(name: str, body: str) -> str:
  """A script that defines `collect()`, which sends `signal.<name>` while the collector runs a
  callback, then runs `body` (indented as in a textwrap.dedent block of two spaces)."""
  return textwrap.dedent(_SIGNAL_IN_A_GC_CALLBACK.format(name=name) + body)


_GC_SCRIPT = signal_in_a_gc_callback(
  'SIGINT',
  """
  exits.watch_interrupts()
  collect()
  print('requested:', exits.interrupt_requested(), flush=True)
  try:
    os.kill(os.getpid(), signal.SIGINT)  # anywhere else it raises, as always
    sum(range(1000))
  except KeyboardInterrupt:
    print('raised', flush=True)
""",
)


def test_a_ctrl_c_in_a_gc_callback_is_remembered_without_a_traceback():
  # A Ctrl-C that landed in JAX's gc callback printed 'Exception ignored in: <function
  # _xla_gc_callback>' and its traceback (seen once when interrupting the first compilation).
  proc = _run(_GC_SCRIPT)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == ['requested: True', 'raised']
  assert 'Exception ignored' not in proc.stderr and 'Traceback' not in proc.stderr


_GC_SIGTERM_SCRIPT = signal_in_a_gc_callback(
  'SIGTERM',
  """
  exits.exit_on_sigterm()
  collect()
  print('requested:', exits.termination_requested(), flush=True)
  try:
    exits.raise_if_requested()  # the training loop's check, at its next step
  except SystemExit as e:
    print('raised:', type(e).__name__, e, flush=True)
  exits.exit_on_sigterm()  # a new command's handler forgets it
  print('requested:', exits.termination_requested(), flush=True)
""",
)


def test_a_sigterm_in_a_gc_callback_is_remembered_and_raised_at_the_next_check():
  # CI: a SLURM job's worker, sent SIGTERM to save (a preemption), took it inside JAX's gc
  # callback, where the SystemExit was printed and dropped ('Exception ignored in: <function
  # _xla_gc_callback>') and later SIGTERMs ignored: it never saved, and was killed.
  proc = _run(_GC_SIGTERM_SCRIPT)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.splitlines() == [
    'requested: True',
    f'raised: Terminated Received signal {int(signal.SIGTERM)}',
    'requested: False',
  ]
  assert 'Exception ignored' not in proc.stderr and 'Traceback' not in proc.stderr
