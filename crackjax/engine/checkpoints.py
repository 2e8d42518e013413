"""Checkpoints: the orbax manager of a workdir, restore, and recovery from damaged steps.

Checkpoints are orbax `CheckpointManager` steps under ``<workdir>/checkpoints``, saved with
`StandardSave` (`crackjax.engine.checkpoint_saves`, where a failed save ends) and restored
onto an abstract state (shapes, dtypes and shardings, no values;
`train_state.abstract_train_state`) with `StandardRestore`. This module is the one restore
path of the package: training resumes, evaluation, the runner, prediction and export all
restore through `restore` / `restore_or_init`. A damaged newest step is named, set aside and
the newest readable one used (`restore_latest_readable`); a checkpoint of another model
configuration is refused with the fields that differ.

Each step also records the run that wrote it, in orbax's per-step custom metadata
(``<step>/_CHECKPOINT_METADATA``, key ``'crackjax'``: the config, its model group, the image
shape of the abstract state; `run_metadata`), so a ``checkpoints/`` folder copied alone can be
rebuilt, predicted from and evaluated (``config.json`` beside it stays the readable copy;
older steps without the record restore through it). Inference restores only the parameters
(and BatchNorm statistics), not the optimiser state (`restore` with a dict, orbax's partial
restore).
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import json
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging

from crackjax.engine import train_state


def checkpoint_manager(
  workdir: str | Path, max_to_keep: int, *, create: bool = True
) -> ocp.CheckpointManager:
  """The orbax manager of ``<workdir>/checkpoints`` (created unless ``create=False``), keeping
  the newest `max_to_keep` steps (``config.max_checkpoints_to_keep``)."""
  options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=create)
  return ocp.CheckpointManager(Path(workdir).absolute() / 'checkpoints', options=options)


#: The key of orbax's per-step custom metadata under which a step records its run.
METADATA_KEY = 'crackjax'
# orbax's file of a step's metadata (item handlers, timestamps, custom metadata).
_STEP_METADATA_FILE = '_CHECKPOINT_METADATA'


def checkpoint_directory(path: str | Path) -> Path:
  """The checkpoint folder of `path`: a run's ``<path>/checkpoints``, or `path` itself when
  it holds the steps (a run's ``checkpoints/`` folder given directly, or copied alone under
  another name)."""
  path = Path(path).absolute()
  if not (path / 'checkpoints').is_dir() and complete_steps(path):
    return path
  return path / 'checkpoints'


def run_directory(path: str | Path) -> Path:
  """The run folder of `path`, where its records (config.json, threshold.json, eval/) are:
  `path`, or its parent when `path` is a checkpoint folder named ``checkpoints``."""
  path = Path(path)
  directory = checkpoint_directory(path)
  if directory == path.absolute() and path.absolute().name == 'checkpoints':
    return path.absolute().parent
  return path


def step_metadata(directory: str | Path, step: int) -> dict[str, Any] | None:
  """What step `step` of checkpoint folder `directory` records of its run (`save`'s
  `metadata`), or None: a step saved before steps recorded it, or whose record is unreadable.
  Read from orbax's metadata file directly: `CheckpointManager.metadata(step)` also reads
  every item's metadata, and warns for an item it has no handler for yet."""
  path = Path(directory) / str(step) / _STEP_METADATA_FILE
  try:
    custom = json.loads(path.read_text()).get('custom_metadata') or {}
  except (OSError, ValueError, AttributeError):
    return None
  found = custom.get(METADATA_KEY) if isinstance(custom, dict) else None
  return found if isinstance(found, dict) and isinstance(found.get('config'), dict) else None


def run_metadata(path: str | Path, step: int | None = None) -> dict[str, Any] | None:
  """The record of step `step` (default: the newest step that has one) of the checkpoints of
  `path` (a run folder or its checkpoint folder; `checkpoint_directory`), or None."""
  directory = checkpoint_directory(path)
  steps = [step] if step is not None else sorted(complete_steps(directory), reverse=True)
  for s in steps:
    found = step_metadata(directory, s)
    if found is not None:
      return found
  return None


class CheckpointError(RuntimeError):
  """A checkpoint directory that cannot be resumed from; the one-line message says why and
  what to do (every step damaged, or written by a different model configuration)."""


# What orbax calls a step folder while it is being written (renamed to `<step>` when complete).
TMP_SUFFIX = '.orbax-checkpoint-tmp'


def remove_unfinished_saves(directory: str | Path) -> list[Path]:
  """Deletes the temporary folders of saves that did not complete (``<step>.orbax-checkpoint-
  tmp...``) in a checkpoint `directory`; returns what it removed. Complete steps are never
  touched."""
  directory = Path(directory)
  removed = []
  if jax.process_index() == 0 and directory.is_dir():
    for path in sorted(directory.glob(f'*{TMP_SUFFIX}*')):
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed


def complete_steps(directory: str | Path) -> list[int]:
  """The steps of a checkpoint `directory` whose saves completed (orbax names a step's folder
  by its number only when it is complete), oldest first; read from the disk, so also right
  after a failed save, whatever the manager still lists."""
  directory = Path(directory)
  if not directory.is_dir():
    return []
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _key_name(entry: Any) -> str:
  for attr in ('key', 'name', 'idx'):
    if hasattr(entry, attr):
      return str(getattr(entry, attr))
  return str(entry)


def _leaf_shapes(tree: Any) -> dict[str, tuple[int, ...]]:
  """{'params/ConvBlock_0/Conv_0/kernel': shape, ...} of a state or a checkpoint's metadata."""
  return {
    '/'.join(_key_name(k) for k in path): tuple(leaf.shape)
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    if hasattr(leaf, 'shape')
  }


def one_line(error: BaseException, limit: int = 200) -> str:
  """``ExcType: first line of the message``, cut before TensorStore's spec dump."""
  lines = str(error).strip().splitlines()
  text = lines[0] if lines else ''
  text = text.split(' See full TensorStore details')[0].strip()
  if len(text) > limit:
    text = text[: limit - 3] + '...'
  return f'{type(error).__name__}: {text}' if text else type(error).__name__


class UnreadableMetadataError(Exception):
  """A step whose array metadata cannot be read: damaged, and not handed to orbax's restore.

  Restoring such a step (e.g. its OCDBT manifest deleted) fails inside TensorStore's
  asynchronous reads, whose callbacks then print dozens of 'Event loop is closed' tracebacks
  on stderr; the metadata says the same thing first, quietly.
  """


def _missing_index_files(item: Path) -> list[str]:
  """The index files an orbax item directory lacks: `_METADATA` (the tree), and, where
  the arrays are in OCDBT form (`ocdbt.process_*` folders), `manifest.ocdbt` (their index;
  without it no array can be found)."""
  missing = [] if (item / '_METADATA').is_file() else ['_METADATA']
  if any(item.glob('ocdbt.process_*')) and not (item / 'manifest.ocdbt').is_file():
    missing.append('manifest.ocdbt')
  return missing


def _saved_shapes(mngr: ocp.CheckpointManager, step: int) -> dict[str, tuple[int, ...]]:
  """The shape of every array saved at `step`, from its metadata.

  Raises:
    UnreadableMetadataError: the metadata cannot be read, or lists no array.
  """
  item = Path(mngr.directory) / str(step) / 'default'
  missing = _missing_index_files(item)
  if missing:
    # Asking orbax would log its own warning and, now and then, leave TensorStore callbacks
    # that print 'Event loop is closed' tracebacks: the files say it first.
    raise UnreadableMetadataError(f'{", ".join(missing)} missing in {item}')
  handler = ocp.StandardCheckpointHandler()
  try:
    # The item's handler, not a StandardCheckpointer: that would look for the step's own
    # metadata file inside the item and warn 'Metadata file does not exist' on every restore.
    metadata = handler.metadata(item)
    saved = _leaf_shapes(getattr(metadata, 'item_metadata', metadata))
  except Exception as e:  # noqa: BLE001 - any failure to read it is damage
    raise UnreadableMetadataError(f'its array metadata cannot be read ({one_line(e)})') from e
  finally:
    handler.close()
  if not saved:
    raise UnreadableMetadataError('its array metadata lists no array')
  return saved


def _config_mismatch(
  mngr: ocp.CheckpointManager, step: int, abstract: train_state.TrainState
) -> str | None:
  """How step `step`'s saved arrays differ from `abstract` (None: they agree).

  Raises:
    UnreadableMetadataError: the step's metadata cannot be read (damage).
  """
  saved = _saved_shapes(mngr, step)
  wanted = _leaf_shapes(abstract)
  if isinstance(abstract, dict):  # a partial restore: compare what it reads, and the model's
    keep = set(abstract) | {'params', 'batch_stats'}
    saved = {k: v for k, v in saved.items() if k.split('/', 1)[0] in keep}
  for name, shape in wanted.items():
    if name not in saved:
      return f'{name} (shape {shape}) is not in the checkpoint'
    if saved[name] != shape:
      return f'{name} has shape {saved[name]} in the checkpoint but {shape} in this config'
  for name, shape in saved.items():
    if name not in wanted:
      return f"the checkpoint has {name} (shape {shape}), which this config's model lacks"
  return None


def _restore_step(
  mngr: ocp.CheckpointManager, step: int, abstract: train_state.TrainState
) -> train_state.TrainState:
  """Restores `step` onto `abstract`.

  Raises:
    CheckpointError: the checkpoint's arrays do not match `abstract` (a different model
      configuration; nothing is moved).
    UnreadableMetadataError: the step's metadata cannot be read (damage; orbax not called).
    Exception: whatever orbax / TensorStore raise for a step that cannot be read.
  """
  mismatch = _config_mismatch(mngr, step, abstract)
  if mismatch:
    raise CheckpointError(
      f'The checkpoint in {mngr.directory} (step {step}) was written by a different model '
      f'configuration: {mismatch}. Use the config the run was trained with (its config.json) '
      'or another --workdir.'
    )
  if isinstance(abstract, dict):
    return _restore_part(mngr, step, abstract)
  return mngr.restore(step, args=ocp.args.StandardRestore(abstract))


def _restore_part(mngr: ocp.CheckpointManager, step: int, abstract: dict[str, Any]) -> Any:
  """The fields of `abstract` (e.g. step, params, batch_stats) of step `step`, nothing else
  read (orbax's partial restore: the optimiser state stays on disk)."""
  restore_args = ocp.checkpoint_utils.construct_restore_args(abstract)
  if 'partial_restore' in inspect.signature(ocp.args.PyTreeRestore).parameters:
    args = ocp.args.PyTreeRestore(abstract, restore_args=restore_args, partial_restore=True)
  else:  # an older orbax: an empty `transforms` drops what the target lacks
    args = ocp.args.PyTreeRestore(abstract, restore_args=restore_args, transforms={})
  return mngr.restore(step, args=args)


def _discard_failed_reads() -> None:
  """Collects the read tasks a failed orbax restore leaves behind, silently.

  When one array cannot be read, orbax abandons the other reads; Python would report each
  later as an 'Exception ignored in ...' traceback on stderr. Collect them now (and let
  TensorStore's callbacks settle) with the unraisable-exception hook muted.
  """
  hook = sys.unraisablehook
  sys.unraisablehook = lambda _: None
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      time.sleep(0.1)
      gc.collect()
  finally:
    sys.unraisablehook = hook


def _try_restore(
  mngr: ocp.CheckpointManager, step: int, abstract: train_state.TrainState
) -> tuple[train_state.TrainState | None, str]:
  """(restored state, '') or, for a step that cannot be read, (None, the one-line reason).

  Raises:
    CheckpointError: the step was written by a different model configuration.
  """
  try:
    return _restore_step(mngr, step, abstract), ''
  except CheckpointError:
    raise
  except Exception as e:  # noqa: BLE001 - orbax, TensorStore, msgpack ... all mean damage.
    reason = one_line(e)
  _discard_failed_reads()  # after the except block, which keeps the failed reads alive
  return None, reason


def restore_step(
  mngr: ocp.CheckpointManager, step: int, abstract: train_state.TrainState
) -> train_state.TrainState:
  """Restores exactly step `step` onto `abstract`, moving nothing.

  Raises:
    CheckpointError: the step cannot be read, or was written by a different model
      configuration (one-line message naming the step and the directory).
  """
  restored, reason = _try_restore(mngr, step, abstract)
  if restored is not None:
    return restored
  raise CheckpointError(
    f'Checkpoint step {step} in {mngr.directory} cannot be read ({reason}); choose '
    f'another step of {sorted(mngr.all_steps())} or the default, the newest readable one.'
  )


def _set_aside(directory: Path, step: int) -> Path:
  """Renames step directory `step` to ``<step>.damaged-<timestamp>`` (orbax lists only
  directories named by an integer, so the manager no longer sees it); never deletes it."""
  stamp = time.strftime('%Y%m%dT%H%M%S')
  target = directory / f'{step}.damaged-{stamp}'
  n = 1
  while target.exists():
    n += 1
    target = directory / f'{step}.damaged-{stamp}-{n}'
  if jax.process_index() == 0:
    (directory / str(step)).rename(target)
  return target


def restore_latest_readable(
  mngr: ocp.CheckpointManager,
  abstract: train_state.TrainState | Callable[[], train_state.TrainState],
) -> train_state.TrainState | None:
  """The newest checkpoint of `mngr` that can be read, restored onto `abstract`.

  Steps are tried newest first. A step that fails to restore is logged in one line, renamed
  to ``<step>.damaged-<timestamp>`` in the same directory (kept, never deleted; the manager
  is reloaded so it no longer lists it) and the next older step is tried.

  Args:
    mngr: the run's checkpoint manager.
    abstract: the abstract state to restore onto (shapes, dtypes, shardings; see
      `train_state.abstract_train_state`), or a function building it (called only if there is
      a step).

  Returns:
    The restored state, or None when the directory holds no checkpoint (and no step set
    aside as damaged).

  Raises:
    CheckpointError: no step can be read, or only damaged steps set aside earlier remain
      (the message names the directory and those steps), or the checkpoint was written by a
      different model configuration.
  """
  steps = sorted(mngr.all_steps(), reverse=True)
  directory = Path(mngr.directory)
  if not steps:
    aside = sorted(p.name for p in directory.glob('*.damaged-*')) if directory.is_dir() else []
    if aside:  # Every step was set aside earlier: do not silently start afresh.
      raise CheckpointError(
        f'No readable checkpoint in {directory}: only damaged steps set aside earlier '
        f'({", ".join(aside)}). To start training afresh, delete or move {directory}.'
      )
    return None
  if callable(abstract):
    abstract = abstract()
  damaged: list[tuple[int, Path]] = []
  for i, step in enumerate(steps):
    logging.info('Restoring checkpoint of step %d from %s', step, directory)
    restored, reason = _try_restore(mngr, step, abstract)
    if restored is not None:
      return restored
    try:
      aside = f'set aside as {_set_aside(directory, step)}'
      mngr.reload()
    except OSError as e:
      # A run read from a read-only place (prediction, export): nothing can be moved, and
      # nothing needs to be; the older step is used all the same.
      aside = f'left in place ({e.strerror or e})'
    damaged.append((step, aside))
    then = f'falling back to step {steps[i + 1]}' if i + 1 < len(steps) else 'no older step'
    logging.warning(
      'Checkpoint step %d in %s cannot be read (%s); %s and %s.',
      step,
      directory,
      reason,
      aside,
      then,
    )
  names = ', '.join(f'step {step}: {aside}' for step, aside in damaged)
  raise CheckpointError(
    f'No readable checkpoint in {directory}: every step is damaged ({names}). '
    f'To start training afresh, delete or move {directory}.'
  )


class NoCheckpointError(FileNotFoundError):
  """The run has no checkpoint (or none of the requested step); the message names the
  directory and the steps it has."""


@dataclasses.dataclass(frozen=True)
class RestoreSpec:
  """What a restore needs besides the model: derived once from the config by
  `crackjax.experiment.build`.

  Attributes:
    image_shape: the (H, W, 3) the abstract state is built on, from the config alone (never
      from the data); the models are fully convolutional, so their parameters do not
      depend on it.
    max_to_keep: the newest steps the manager keeps (``config.max_checkpoints_to_keep``).
  """

  image_shape: tuple[int, int, int]
  max_to_keep: int


def _no_checkpoint(directory: Path) -> NoCheckpointError:
  return NoCheckpointError(
    f'No checkpoint in {directory}; train first (--mode=train or train_and_eval).'
  )


def existing_manager(workdir: str | Path, max_to_keep: int) -> ocp.CheckpointManager:
  """The orbax manager of a run's existing ``<workdir>/checkpoints``, or of `workdir` itself
  when it is a checkpoint folder (`checkpoint_directory`); nothing is created.

  Raises:
    NoCheckpointError: the run has no checkpoint folder.
  """
  directory = checkpoint_directory(workdir)
  if not directory.is_dir():
    raise _no_checkpoint(directory)
  options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=False)
  return ocp.CheckpointManager(directory, options=options)


def restore(
  mngr: ocp.CheckpointManager,
  abstract: Callable[[], train_state.TrainState],
  *,
  step: int | None = None,
) -> train_state.TrainState:
  """The one way a run's checkpoint is restored: by training (resume), evaluation, the
  runner, prediction and export (through `crackjax.engine.states.States.restore`).

  Without `step`, the newest readable step; a damaged newer one is set aside and an older one
  used (`restore_latest_readable`). A requested `step` that cannot be read is an error. Reads
  no dataset.

  Args:
    mngr: the run's checkpoint manager (`existing_manager`, or training's own).
    abstract: returns the abstract state to restore onto (shapes, dtypes, shardings:
      `States.abstract` on the mesh the state should live on), or a dict of some
      of its fields (``{'step', 'params', 'batch_stats'}``: inference), which restores just
      those (a dict; the optimiser state is not read).
    step: the step to restore, or None for the newest readable one.

  Raises:
    NoCheckpointError: no checkpoint, or none of `step` (the message lists the steps).
    CheckpointError: no readable step, `step` cannot be read, or the checkpoint was written
      by a different model configuration (one-line message naming the directory).
  """
  directory = Path(str(mngr.directory))
  if step is None:
    state = restore_latest_readable(mngr, abstract)
    if state is None:
      raise _no_checkpoint(directory)
    return state
  steps = sorted(mngr.all_steps())
  if step not in steps:
    raise NoCheckpointError(f'No checkpoint of step {step} in {directory}; steps: {steps}.')
  return restore_step(mngr, step, abstract())


def restore_or_init(
  mngr: ocp.CheckpointManager,
  abstract: Callable[[], train_state.TrainState],
  init: Callable[[], train_state.TrainState],
) -> train_state.TrainState:
  """The newest readable checkpoint of `mngr` (`restore`) if there is one, else `init()` (a
  fresh state with its initial weights).

  Raises:
    CheckpointError: there are checkpoints but none can be read, or they were written by a
      different model configuration.
  """
  try:
    return restore(mngr, abstract)
  except NoCheckpointError:
    return init()
