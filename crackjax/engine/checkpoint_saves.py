"""Saving checkpoints, and a save's failure in one line.

`save` writes a TrainState as an orbax step (asynchronously; training goes on) with the run's
record in the step's metadata (`checkpoints.METADATA_KEY`). A save that cannot complete (a full
or read-only disk, another writer filling it midway) ends in `CheckpointSaveError`: the step,
the operating system's reason, the free space and the last complete step kept; the unfinished
step's temporary folders are removed, and the late tracebacks of its abandoned writes are
silenced (`quiet_abandoned_writes`). Restoring is `crackjax.engine.checkpoints`'.
"""

from __future__ import annotations

import contextlib
import errno
import logging as logging_lib
import os
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging

from crackjax.engine.checkpoints import (
  METADATA_KEY,
  TMP_SUFFIX,
  CheckpointError,
  complete_steps,
  one_line,
  remove_unfinished_saves,
)
from crackjax.runs import exits


class CheckpointSaveError(CheckpointError):
  """A checkpoint could not be written (a full or read-only disk, ...); its temporary folders
  were removed and the message names the step, the reason and the last complete step kept."""


def _os_reason(error: BaseException) -> str:
  """The operating system's words in a failed save ('No space left on device'), which orbax
  and TensorStore wrap in a ValueError of several hundred characters."""
  if isinstance(error, OSError) and error.strerror:
    return error.strerror
  text = str(error)
  code = re.search(r"os_error_code='?(\d+)", text) or re.search(r'\[Errno (\d+)\]', text)
  if code:
    return os.strerror(int(code.group(1)))
  return one_line(error)


def _failed_step(error: BaseException | str) -> int | None:
  """The step whose save failed, from the temporary folder the error (or a name) names."""
  found = re.search(rf'(\d+){re.escape(TMP_SUFFIX)}', str(error))
  return int(found.group(1)) if found else None


def _is_abandoned_write(record: logging_lib.LogRecord) -> bool:
  """Whether `record` is asyncio's report of an orbax write (a task, or the future that gathers
  a save's writes: 'Future' / '_GatheringFuture exception was never retrieved', with a 3-frame
  traceback, when the disk fills midway, e.g. by another writer) whose error nobody read: the
  save's failure is `save`'s one line."""
  message = record.getMessage()
  return 'exception was never retrieved' in message and ('orbax' in message or 'OCDBT' in message)


def _save_failed(mngr: ocp.CheckpointManager, step: int | None, error: BaseException):
  """The CheckpointSaveError for `error`, after the failed save's temporary folders are gone."""
  directory = Path(mngr.directory)
  with contextlib.suppress(Exception):  # the failed save's own threads are done or dead
    mngr.close()
  unfinished = [_failed_step(p.name) for p in remove_unfinished_saves(directory)]
  step = _failed_step(error) or step or max((s for s in unfinished if s is not None), default=None)
  complete = complete_steps(directory)
  kept = (
    f'the last complete checkpoint, step {complete[-1]}, is kept'
    if complete
    else 'no complete checkpoint was saved'
  )
  which = f'of step {step} ' if step is not None else ''
  reason = _os_reason(error)
  if reason == os.strerror(errno.ENOSPC):  # filled during the save: how full it is now
    with contextlib.suppress(OSError):
      reason += f' ({shutil.disk_usage(directory).free / 1e6:.1f} MB free now)'
  # The disk's own errors say what to do; another reason (orbax, another writer) is only named.
  fix = 'Free space there (or make it writable) and' if _is_disk_reason(reason) else 'Then'
  return CheckpointSaveError(
    f'cannot save the checkpoint {which}in {directory}: {reason}. Training stopped; {kept}. '
    f'{fix} run the same command again to resume.'
  )


def _is_disk_reason(reason: str) -> bool:
  """Whether `_os_reason`'s words are the disk's: full, over quota, too big, read-only, or
  not permitted."""
  codes = (*exits.DISK_ERRNOS, errno.EACCES, errno.EPERM)  # a save only writes: these too
  return any(reason.startswith(os.strerror(code)) for code in codes)


def _is_abandoned_callback(exc_type, exc, tb) -> bool:
  """Whether an error printed by native code is a write of a failed orbax save reporting to
  the save's event loop after orbax closed it (the first failed write ends the save; the
  others finish later, each with this traceback)."""
  if exc_type is not RuntimeError or str(exc) != 'Event loop is closed':
    return False
  frames = [f.f_code.co_name for f, _ in traceback.walk_tb(tb)]
  return 'call_soon_threadsafe' in frames or '_check_closed' in frames


def quiet_abandoned_writes() -> None:
  """Installs, once, the filters of a failed save's late reports, which `save` replaces by its
  one line: the other write tasks of that save fail too, and TensorStore reports each as
  unraisable (`PyErr_WriteUnraisable`, a bare 'Event loop is closed' traceback on stderr) and
  asyncio each task whose error nobody read ('Task exception was never retrieved')."""
  if getattr(sys.unraisablehook, 'crackjax_quiet', False):
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    if not _is_abandoned_callback(
      unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback
    ):
      previous(unraisable)

  hook.crackjax_quiet = True
  sys.unraisablehook = hook
  logging_lib.getLogger('asyncio').addFilter(lambda record: not _is_abandoned_write(record))


def _short_of_space(directory: Path, state: Any) -> str | None:
  """Why a checkpoint of `state` cannot fit in `directory`'s free space, or None. It takes
  what the newest complete step takes on disk, or before the first one the bytes of its arrays
  (an upper bound: OCDBT may compress); the older steps stay until it is complete."""
  steps = complete_steps(directory)
  if steps:
    needed = sum(f.stat().st_size for f in (directory / str(steps[-1])).rglob('*') if f.is_file())
  else:
    needed = sum(getattr(x, 'nbytes', 0) for x in jax.tree.leaves(state))
  try:
    free = shutil.disk_usage(directory if directory.exists() else directory.parent).free
  except OSError:
    return None  # cannot tell: let the save try
  if free >= needed + (needed >> 5) + (1 << 18):  # and some room for orbax's metadata files
    return None
  return (
    f'No space left on device ({free / 1e6:.1f} MB free, a checkpoint takes {needed / 1e6:.1f} MB)'
  )


def save(
  mngr: ocp.CheckpointManager,
  step: int,
  state: Any,
  *,
  force: bool = False,
  metadata: dict[str, Any] | None = None,
) -> None:
  """Saves `state` as step `step` (asynchronously: training goes on while it is written).

  `metadata` (JSON data: `Experiment.checkpoint_metadata`) is recorded with the step
  (`METADATA_KEY` of orbax's custom metadata), so the step describes the run that wrote it.

  A failure of this save or of the one before it (orbax reports an asynchronous save's error
  at the next call) raises at once.

  Raises:
    CheckpointSaveError: the one-line reason; the unfinished step's folders are removed.
  """
  quiet_abandoned_writes()
  # A Ctrl-C or SIGTERM waits until orbax has started the save: one inside `mngr.save` left
  # its signal-waiting threads hanging (the process never exited) and the step's temporary
  # folder half made (`exits.interrupts_deferred`).
  with exits.interrupts_deferred():
    finish_saves(mngr)  # the previous save (orbax waits for it anyway): its failure first
    short = _short_of_space(Path(mngr.directory), state)
    if short:
      # Refused before orbax writes anything: a save that runs out of space midway fails in
      # its background threads, whose late writes print tracebacks that nothing can catch.
      raise _save_failed(mngr, step, OSError(errno.ENOSPC, short))
    try:
      custom = {METADATA_KEY: metadata} if metadata else None
      mngr.save(step, args=ocp.args.StandardSave(state), force=force, custom_metadata=custom)
    except Exception as e:  # noqa: BLE001 - orbax, TensorStore and the OS all mean: not saved
      raise _save_failed(mngr, step, e) from None


def check_saves(mngr: ocp.CheckpointManager) -> None:
  """Raises CheckpointSaveError if a save running in the background has failed (cheap: called
  with every metrics flush, so a full disk stops training within `log_every_steps`)."""
  if mngr.is_saving_in_progress():
    return
  try:
    mngr.check_for_errors()
  except Exception as e:  # noqa: BLE001
    raise _save_failed(mngr, None, e) from None


def finish_saves(mngr: ocp.CheckpointManager) -> None:
  """Waits for the background save, if any; its failure raises CheckpointSaveError."""
  try:
    mngr.wait_until_finished()
  except Exception as e:  # noqa: BLE001
    raise _save_failed(mngr, None, e) from None


def save_failure(mngr: ocp.CheckpointManager, error: BaseException) -> CheckpointSaveError | None:
  """After `error` stopped training, waits for the save running in the background, if any.

  Its failure is the line to end on when `error` is the disk refusing another write (a full
  disk, e.g. filled by another writer while the checkpoint was written: the epoch record or
  metrics.jsonl fails after the save did), since only the save's line names the checkpoint,
  the one kept and the way to resume: it is returned then. Otherwise it is logged as a
  warning and `error` stays the news.

  Returns:
    The CheckpointSaveError to raise instead of `error`, or None.
  """
  try:
    finish_saves(mngr)
  except CheckpointSaveError as failed:
    if isinstance(error, OSError) and error.errno in exits.DISK_ERRNOS:
      return failed
    logging.warning('%s', failed)
  return None
