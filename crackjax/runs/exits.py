"""One way for every command to end on a problem: one line that names it and what to do, and
an exit status (1 for an error, 130 for an interrupt, 143 for SIGTERM), never a traceback for
something the user can fix or did on purpose.

Each command's ``main`` runs its work inside `one_line_exits`::

    with exits.one_line_exits(PROG, errors=(checkpoints.CheckpointError, ...)):
      run(...)

Code deep inside a command that knows more about an ending than the command does (the training
loop knows which checkpoint it kept) raises `Stopped` with the whole line; `one_line_exits`
prints it as it is.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import signal
import sys
import threading
from collections.abc import Iterator

#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130
#: The exit status of a command stopped by SIGTERM (128 + SIGTERM): a time limit or a kill, whose
#: checkpoint is kept, told apart from an error (1) by the scripts that resume it.
TERMINATED = 143

# Errors that only a write gets, of the disk rather than of the program (EACCES and EPERM
# are not among them: reading an unreadable file gets them too, and its message names it).
_ADVICE = {
  errno.ENOSPC: 'free some space there',
  errno.EDQUOT: 'free some space there (the disk quota is used up)',
  errno.EFBIG: 'free some space there or raise the file size limit',
  errno.EROFS: 'make it writable or choose another folder',
}
#: The errors of the disk rather than of the program (full, over quota, too big, read-only).
DISK_ERRNOS = tuple(_ADVICE)


class Stopped(Exception):
  """A command ends here with the one line `message` (without the program's name) and exit
  status `code`; raised where the ending is best explained (e.g. the training loop, which
  knows which checkpoint it kept)."""

  def __init__(self, message: str, code: int = 1):
    super().__init__(message)
    self.code = code


class Interrupted(KeyboardInterrupt):
  """Ctrl-C, after the code it interrupted kept what it could; the message says what was kept
  and how to go on (`one_line_exits` prints it, exit status 130)."""


class Terminated(SystemExit):
  """SIGTERM (a time limit, `kill`), as `exit_on_sigterm` raises it:
  ``Received signal 15``, and after the training loop kept what it could, its line saying
  what was kept (`one_line_exits` prints it after the program's name, status 143). Where no
  `one_line_exits` is around, it ends the process as the SystemExit it is."""


def disk_error(error: OSError) -> str | None:
  """The one-line explanation of an OSError that the disk caused (full, over quota,
  read-only), with what to do; None for other OSErrors."""
  if error.errno not in _ADVICE:
    return None
  where = f'cannot write {error.filename}' if error.filename else 'cannot write'
  reason = error.strerror or errno.errorcode.get(error.errno, str(error.errno))
  return f'{where}: {reason}; {_ADVICE[error.errno]} and run the same command again.'


def _end(prog: str, message: str, code: int) -> None:
  line = f'{prog}: {message}'
  if code == 1:
    raise SystemExit(line)  # as sys.exit(line): Python prints it on stderr, status 1
  sys.stdout.flush()
  print(line, file=sys.stderr, flush=True)
  raise SystemExit(code)


@contextlib.contextmanager
def one_line_exits(
  prog: str,
  *,
  errors: tuple[type[BaseException], ...] = (),
  interrupted: str = 'interrupted (Ctrl-C); nothing was lost: run the same command again.',
) -> Iterator[None]:
  """Ends the command in one line for the problems that are not bugs.

  Args:
    prog: the command's name, the first word of every line.
    errors: exception types whose message is already the one line to print (exit status 1).
    interrupted: the line for a Ctrl-C that reached here without a `Stopped` of its own.

  `Stopped` prints its line with its own status; KeyboardInterrupt prints `interrupted` and
  exits 130; SIGTERM (`Terminated`) its own line, or `interrupted` worded for SIGTERM, and exits
  143; an OSError of the disk (full, over quota, read-only) names the file and what to
  do. Anything else is a bug and keeps its traceback.
  """
  try:
    yield
  except Stopped as e:
    _end(prog, str(e), e.code)
  except KeyboardInterrupt as e:
    _end(prog, str(e) or interrupted, INTERRUPTED)
  except Terminated as e:
    message = str(e.code)
    if message.startswith('Received signal'):  # nothing more specific said what was kept
      message = interrupted.replace('interrupted (Ctrl-C)', 'stopped by SIGTERM', 1)
    _end(prog, message, TERMINATED)
  except OSError as e:
    message = disk_error(e)
    if message is not None:
      _end(prog, message, 1)
    if isinstance(e, errors):
      _end(prog, str(e), 1)
    raise
  except errors as e:
    _end(prog, str(e), 1)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
  """Ctrl-C (SIGINT) raises KeyboardInterrupt inside the block even where the parent process
  ignores it (a shell's ``trap '' INT``, ``nohup``: an ignored signal stays ignored in the
  child, and Python then installs no handler of its own); the handler before is put back
  after. Outside the main thread (where Python takes no signals) it does nothing."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)


# Set by a Ctrl-C that `watch_interrupts` or `interrupts_deferred` saw, until `clear_interrupt`.
_REQUESTED = threading.Event()


def watch_interrupts() -> None:
  """Ctrl-C raises KeyboardInterrupt as always, and is also remembered (`interrupt_requested`):
  a KeyboardInterrupt that lands in a finalizer or a library's callback is swallowed there
  ('Exception ignored in ...'), and the training loop would go on as if nothing happened.
  One that lands in a garbage-collection callback (JAX has one, run at any allocation) is
  only remembered: raised there, Python would print its traceback and drop it, so the loop's
  check of `interrupt_requested` ends the run instead, in its one line. Commands call it
  first, in the main thread."""

  def handler(signum, frame):
    _REQUESTED.set()
    if not in_gc_callback(frame):
      raise KeyboardInterrupt

  if threading.current_thread() is threading.main_thread():  # where Python takes signals
    signal.signal(signal.SIGINT, handler)


def in_gc_callback(frame) -> bool:
  """Whether `frame` (where a signal landed) runs inside a `gc.callbacks` function: such a
  frame is on the stack only while the collector calls it. A signal handler must not raise
  there: Python prints the exception and drops it ('Exception ignored in ...')."""
  codes = {getattr(callback, '__code__', None) for callback in gc.callbacks} - {None}
  while frame is not None and codes:
    if frame.f_code in codes:
      return True
    frame = frame.f_back
  return False


def interrupt_requested() -> bool:
  """Whether a Ctrl-C came (since `clear_interrupt`), raised or swallowed."""
  return _REQUESTED.is_set()


def clear_interrupt() -> None:
  """Forgets earlier Ctrl-Cs (a new run starts in this process)."""
  _REQUESTED.clear()


@contextlib.contextmanager
def interrupts_deferred(
  signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> Iterator[None]:
  """Holds Ctrl-C (and SIGTERM) back until the block ends, then delivers them.

  For code that a signal must not cut in two:
  - XLA's compilation runs on a thread of its own, and a Ctrl-C that ends the process while
    it runs crashes the interpreter at exit (a segmentation fault in
    `SingleDeviceSharding::Create`, exit status 139, jaxlib 0.10);
  - orbax's `CheckpointManager.save` starts threads that wait for signals from the rest of
    the save; a KeyboardInterrupt between the two leaves them waiting forever (the process
    then never exits: `threading._shutdown` joins them) and the step's temporary folder half
    written, so the save on the way out fails with 'Directory not empty'.
  Deferred, the signal takes effect when the block returns (seconds later), through the
  handler that was in place: `watch_interrupts`' KeyboardInterrupt, the SIGTERM handler's
  SystemExit. Outside the main thread (where Python delivers no signals) it does nothing.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received: list[int] = []

  def hold(signum, frame):
    received.append(signum)
    if signum == signal.SIGINT:
      _REQUESTED.set()

  previous = {s: signal.signal(s, hold) for s in signals}
  try:
    yield
  finally:
    for s, handler in previous.items():
      signal.signal(s, handler)
  for signum in dict.fromkeys(received):  # each signal once, in the order they came
    _deliver(signum, previous[signum])


def _deliver(signum: int, handler) -> None:
  """Delivers a held signal as its handler `handler` (from `signal.signal`) would have."""
  if callable(handler):
    handler(signum, None)
  elif handler == signal.SIG_DFL:
    if signum == signal.SIGINT:
      raise KeyboardInterrupt
    signal.raise_signal(signum)  # the default action (SIGTERM: the process ends)
  # SIG_IGN (or None: a handler not installed from Python): nothing to deliver


def exit_on_sigterm() -> None:
  """SIGTERM raises SystemExit once, which unwinds through `loop.train_and_evaluate` (it saves
  a checkpoint on the way out); further SIGTERMs are ignored so that they cannot interrupt
  that save (a runner killed with kill -9 sent its workers a second one, which broke the save
  inside orbax: 'cannot schedule new futures after shutdown', the newest steps lost). SIGKILL
  still ends a process that does not finish.

  The SIGTERM is also remembered (`termination_requested`), as `watch_interrupts` remembers a
  Ctrl-C: one that lands in a garbage-collection callback (JAX's, run at any allocation) is
  only remembered, since raised there it would be printed and dropped ('Exception ignored in
  <function _xla_gc_callback>'), and the later ones ignored: the run went on to its end (seen
  here), or made no more progress until it was killed, unsaved (CI: a preempted SLURM job's
  worker, killed 75 s later). The training loop's check (`raise_if_requested`) then ends the
  run in its one line.
  Installing the handler forgets an earlier SIGTERM of this process (a new command)."""

  def handler(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _TERMINATION.set()
    if not in_gc_callback(frame):
      raise Terminated(f'Received signal {signum}')

  _TERMINATION.clear()
  signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def terminable() -> Iterator[None]:
  """SIGTERM raises `Terminated` inside the block (`exit_on_sigterm`), so that a command's
  `one_line_exits` prints its line and exits 143 and everything it started is ended on the
  way out (worker pools by their context managers, a prepared dataset's set-aside copy put
  back): the default action ended the process at once, silent, its workers and
  multiprocessing's resource tracker left running. The default action is put back after. A
  handler installed before (crackjax-train's own `exit_on_sigterm`, the runner's) or an
  ignored SIGTERM is left as it is; so is a thread other than the main one (where Python takes
  no signals)."""
  main = threading.current_thread() is threading.main_thread()
  if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
    yield
    return
  exit_on_sigterm()
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


# Set by the SIGTERM that `exit_on_sigterm`'s handler took, until it is installed again.
_TERMINATION = threading.Event()


def termination_requested() -> bool:
  """Whether `exit_on_sigterm`'s handler took a SIGTERM, raised or only remembered."""
  return _TERMINATION.is_set()


def raise_if_requested() -> None:
  """At a point where stopping is safe (a training loop's next step): raises the
  KeyboardInterrupt of a Ctrl-C, or the `Terminated` of a SIGTERM, that was remembered but
  not raised (it landed in a garbage-collection callback, or a library swallowed it)."""
  if interrupt_requested():
    raise KeyboardInterrupt
  if termination_requested():
    raise Terminated(f'Received signal {int(signal.SIGTERM)}')
