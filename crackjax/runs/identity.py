"""A run's identity: its config fingerprint, the lock on its workdir and its JSON records.

A workdir holds one computation. `fingerprint` keeps the config fields that define it (data,
augmentation, model, loss, seed, optimisation) and drops those that do not (paths, the number
of epochs, logging, evaluation), so a run may be moved, extended to more epochs or evaluated
differently, but never resumed under another computation: `check_identity` stops with the
fields that differ, old -> new. `lock` keeps a second process out of a workdir while one
trains or evaluates there (`filelock`, on every platform); the system drops the lock when its
holder dies, even by kill -9.
Records are written atomically (`write_json`) and checked when read (`read_record`): a damaged
one is named and set aside, never counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import filelock

from crackjax.runs import outputs

FINGERPRINT_FILE = 'fingerprint.json'
#: The file whose system lock holds a workdir (`lock`).
LOCK_FILE = '.lock'
#: Who holds it (pid, host, since when, command), for the message of a second process: a file
#: of its own, since Windows does not let another process read a locked file.
HOLDER_FILE = '.lock.holder'

#: The config fields (dotted) that name paths of the machine that trained the run: where the
#: data is, not what it is. Not part of a run's identity (`NOT_IDENTITY`), and a model file
#: stores None there (`crackjax.deploy.model_export.portable_config`: meaningless elsewhere,
#: and private; a command that reads data takes them as flags: crackjax-evaluate
#: --manual_dir, --folder). The one list of them.
MACHINE_PATHS = (
  'data.data_dir',
  'data.manual_dir',
  'data.folder.images',
  'data.folder.masks',
  'data.folder.train_list',
  'data.folder.test_list',
)

# Config fields (dotted; a prefix covers a group) that do not change what is computed.
NOT_IDENTITY = (
  *MACHINE_PATHS,
  'data.test_split',
  'model.conv_impl',  # the same convolutions, another kernel layout
  # The initial weights (file, normalization): only a new run reads them, and its init.json
  # records what it started from.
  'model_init',
  'num_epochs',  # a run may be extended
  'max_checkpoints_to_keep',
  'log_every_steps',
  'eval',
)


class RunMismatchError(ValueError):
  """The workdir holds a run of another configuration."""


class RunLockedError(RuntimeError):
  """Another process is using the workdir."""


def _as_dict(config: Mapping[str, Any]) -> dict[str, Any]:
  """`config` as JSON holds it (tuples become lists, as in config.json)."""
  if not isinstance(config, Mapping):
    raise TypeError(
      f'A fingerprint is of the config as config.json records it (a dict), not of a '
      f'{type(config).__name__}.'
    )
  return json.loads(json.JSONEncoder(default=str).encode(config))  # as json.dumps(default=str)


def _flatten(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
  flat: dict[str, Any] = {}
  for key, value in tree.items():
    name = f'{prefix}{key}'
    if isinstance(value, Mapping):
      flat.update(_flatten(value, f'{name}.'))
    else:
      flat[name] = value
  return flat


def is_machine_path(name: str) -> bool:
  """Whether the dotted config field `name` is a path of the machine (`MACHINE_PATHS`, or a
  mixture member's manual_dir, `data.mix.<member>.manual_dir`)."""
  parts = name.split('.')
  member_dir = len(parts) == 4 and parts[:2] == ['data', 'mix'] and parts[3] == 'manual_dir'
  return name in MACHINE_PATHS or member_dir


def _excluded(name: str) -> bool:
  # A mixture member's folder is where its data is, as data.manual_dir is: the prepared copy's
  # source record (crackjax.data.source_record) answers for what the data is.
  return is_machine_path(name) or any(name == x or name.startswith(f'{x}.') for x in NOT_IDENTITY)


# Fields added after runs were recorded: at these values they compute what a run from before
# them computed, so they are left out of the fingerprint (such a run resumes, its fingerprint
# unchanged). The photometric group computes nothing while it is not enabled. A new field
# whose default computes what runs before it computed belongs here, with that default.
_PHOTOMETRIC = 'augment.photometric'
_NEUTRAL = {'data.scale_range': [1.0, 1.0], 'model.input_norm': 'none'}
# The constant step size, the only one before schedules: its other fields compute nothing.
_CONSTANT_LR = {
  'lr_schedule.name': 'constant',
  'lr_schedule.warmup_steps': 0,
  'lr_schedule.decay_from_step': 0,
  'lr_schedule.end_step': 0,
  'lr_schedule.end_factor': 0.0,
}


def _neutral(flat: Mapping[str, Any]) -> set[str]:
  """The names of `flat` (a flattened config) that are at their neutral value."""
  out = {k for k, v in _NEUTRAL.items() if k in flat and flat[k] == v}
  if not flat.get(f'{_PHOTOMETRIC}.enabled'):
    out |= {k for k in flat if k.startswith(f'{_PHOTOMETRIC}.')}
  if all(flat.get(k, v) == v for k, v in _CONSTANT_LR.items()):
    out |= {k for k in _CONSTANT_LR if k in flat}
  if not flat.get('data.jpeg_probability'):  # never: its quality range computes nothing
    out |= {k for k in ('data.jpeg_probability', 'data.jpeg_quality') if k in flat}
  return out


def fingerprint(config: Mapping[str, Any]) -> dict[str, Any]:
  """The fields of `config` that define the computation, as {'dotted.name': value}.

  Args:
    config: the config as config.json records it (plain JSON data,
      `crackjax.experiment.build.Experiment.hparams`).

  Raises:
    TypeError: `config` is not a mapping (a ConfigDict: its recorded JSON is fingerprinted).
  """
  flat = _flatten(_as_dict(config))
  neutral = _neutral(flat)
  return {k: v for k, v in sorted(flat.items()) if not _excluded(k) and k not in neutral}


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
  """'field: old -> new' for every field that differs (absent fields say so)."""
  out = []
  for name in sorted(set(old) | set(new)):
    a, b = old.get(name, '(absent)'), new.get(name, '(absent)')
    if a != b:
      out.append(f'{name}: {json.dumps(a)} -> {json.dumps(b)}')
  return out


def _read_json(path: Path) -> Any:
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError):
    return None


def recorded_fingerprint(workdir: str | Path) -> dict[str, Any] | None:
  """The fingerprint the run in `workdir` was started with: fingerprint.json, or for runs from
  before fingerprints the one of its config.json; None if neither can be read. (Neither file
  is moved: they are the run's, not records to redo.)"""
  workdir = Path(workdir)
  recorded = _read_json(workdir / FINGERPRINT_FILE)
  if isinstance(recorded, dict):
    return recorded
  config = _read_json(workdir / 'config.json')
  return fingerprint(config) if isinstance(config, dict) else None


def has_started(workdir: str | Path) -> bool:
  """Whether `workdir` holds training progress: a checkpoint or an evaluation record of an
  epoch (the runner's)."""
  workdir = Path(workdir)
  ckpt = workdir / 'checkpoints'
  if ckpt.is_dir() and any(p.name.isdigit() for p in ckpt.iterdir()):
    return True
  return any(workdir.glob('epoch_[0-9][0-9][0-9].json'))


def check_identity(workdir: str | Path, new: Mapping[str, Any], *, record: bool = True) -> None:
  """Stops if `workdir` holds a run started under another fingerprint than `new` (the
  experiment's, `fingerprint(config)`); otherwise (with `record`) writes `new` there.

  A workdir without progress (no checkpoint, no epoch record) takes the new fingerprint: a run
  that failed before its first checkpoint computed nothing.

  Raises:
    RunMismatchError: one message naming the workdir and each differing field, old -> new.
  """
  workdir = Path(workdir)
  new = dict(new)
  if has_started(workdir):
    old = recorded_fingerprint(workdir)
    # Filtered by today's NOT_IDENTITY: a field dropped from the identity since the run
    # started (e.g. model_init, now in every config) does not count against it.
    old = fingerprint(old) if old is not None else None
    if old is not None and old != new:
      diff = '; '.join(differences(old, new))
      raise RunMismatchError(
        f'{workdir} holds a run of another configuration ({diff}). Resume it with the config '
        f'it was started with (its config.json), or give this config another workdir.'
      )
  if record:
    workdir.mkdir(parents=True, exist_ok=True)
    write_json(workdir / FINGERPRINT_FILE, new)


# ------------------------------------------------------------------------------------- records


def write_json(path: str | Path, obj: Any, **dump_kwargs) -> None:
  """Writes `obj` as strict JSON (`outputs.dumps`: NaN and Infinity as null) atomically: a
  killed process never leaves half a file."""
  path = Path(path)
  tmp = path.with_name(f'.{path.name}.{os.getpid()}.tmp')
  try:
    with outputs.naming(path):  # a full disk's line names the record, not a nameless write
      tmp.write_text(outputs.dumps(obj, indent=1, **dump_kwargs))
  except OSError:
    tmp.unlink(missing_ok=True)  # no half-written temporary file left behind
    raise
  tmp.replace(path)


def read_record(path: str | Path, required: Sequence[str] = ()) -> Any:
  """The JSON in `path`, or None (the file set aside as `<name>.damaged`, with a message on
  stderr) when it is not valid JSON or lacks a `required` key.

  The message says what happened, not what follows: whether the epoch can be evaluated again
  depends on its checkpoint, which the caller says (`why_not_evaluated`)."""
  path = Path(path)
  try:
    data = json.loads(path.read_text())
    missing = [k for k in required if not isinstance(data, dict) or k not in data]
    if missing:
      raise ValueError(f'missing {missing}')
    return data
  except (ValueError, UnicodeDecodeError) as e:
    damaged = path.with_name(path.name + '.damaged')
    n = 1
    while damaged.exists():  # an earlier damaged copy is kept too, never replaced
      n += 1
      damaged = path.with_name(f'{path.name}.damaged-{n}')
    path.replace(damaged)
    print(
      f'{path}: damaged record ({e}); set aside as {damaged.name}; its epoch counts as not '
      'evaluated.',
      file=sys.stderr,
    )
    return None


def finally_evaluated(workdir: str | Path, step: int, protocols: Sequence[str]) -> bool:
  """Whether `workdir`'s eval.json is the final evaluation of step `step` under `protocols`:
  a finished run relaunched has nothing to do."""
  path = Path(workdir) / 'eval.json'
  record = read_record(path, required=('step', 'protocols')) if path.exists() else None
  return bool(record) and record['step'] == step and set(protocols) <= set(record['protocols'])


def set_aside_records(path: str | Path) -> list[Path]:
  """The damaged copies `read_record` set aside of the record `path`, oldest first."""
  path = Path(path)
  copies = path.parent.glob(f'{path.name}.damaged*')
  return sorted(copies, key=lambda p: (len(p.name), p.name))


def why_not_evaluated(directory: str | Path, epoch: int, required: Sequence[str] = ()) -> str:
  """Why `epoch` of the results `directory` has no whole record (one that `evaluated_epochs`
  counts with `required`): damaged and set aside, lacking a protocol, or never written."""
  path = epoch_path(directory, epoch)
  if path.exists():
    record = read_record(path, required=('epoch', 'results'))
    if record is not None:
      lacking = [p for p in required if p not in record['results']]
      return f'its record {path.name} lacks protocol(s) {lacking}'
  aside = set_aside_records(path)
  if aside:
    return f'its record was damaged and set aside as {aside[-1].name}'
  return 'it has no record (the run stopped before its evaluation was written)'


# ---------------------------------------------------------------------------------------- lock


def leader_lock(workdir: str | Path) -> contextlib.AbstractContextManager:
  """`lock(workdir)` on process 0, nothing on the others: process 0 speaks for the run (the
  hosts of a multi-host run share one workdir). Every writer of a workdir holds it: training,
  its evaluation (launch.py --mode=eval) and scoring on other data (crackjax-evaluate)."""
  import jax  # here: the rest of this module is read by tools that need no jax

  return lock(workdir) if jax.process_index() == 0 else contextlib.nullcontext()


_HELD: dict[Path, Any] = {}


@contextlib.contextmanager
def lock(workdir: str | Path) -> Iterator[None]:
  """Holds `workdir` for this process (re-entrant within it).

  Raises:
    RunLockedError: another process holds it (the message names that process).
  """
  workdir = Path(workdir).resolve()
  if workdir in _HELD:
    yield
    return
  workdir.mkdir(parents=True, exist_ok=True)
  held = filelock.FileLock(os.fspath(workdir / LOCK_FILE))
  holder_file = workdir / HOLDER_FILE
  try:
    held.acquire(blocking=False)
  except filelock.Timeout:
    holder = _read_holder(holder_file) or 'another process'
    raise RunLockedError(
      f'{workdir} is in use by {holder}. Wait for it to end or stop it; a second process '
      'there would mix two runs.'
    ) from None
  command = short_command(sys.argv)
  holder_file.write_text(
    f'pid {os.getpid()} on {platform.node()} since {time.strftime("%Y-%m-%d %H:%M:%S")} '
    f'({command})\n'
  )
  _HELD[workdir] = held
  try:
    yield
  finally:
    del _HELD[workdir]
    with contextlib.suppress(OSError):
      holder_file.unlink()
    held.release()


def _read_holder(path: Path) -> str:
  """The holder's line (`HOLDER_FILE`), or '' when it is absent or being written."""
  try:
    return path.read_text().strip()
  except OSError:
    return ''


def short_command(argv: Sequence[str], limit: int = 200) -> str:
  """The command line `argv` (its program by name) for the lock file: whole arguments only,
  the last ones left out (' ...') beyond `limit` characters, so no path is cut in two."""
  words = [Path(a).name if i == 0 else a for i, a in enumerate(argv)]
  shown = words[:1]
  for word in words[1:]:
    if len(' '.join([*shown, word])) > limit:
      return ' '.join(shown) + ' ...'
    shown.append(word)
  return ' '.join(shown)


def epoch_path(directory: str | Path, epoch: int) -> Path:
  """Where the evaluation record of `epoch` lives in a results directory (the workdir for the
  run's own test split; `evaluate.results_dir`)."""
  return Path(directory) / f'epoch_{epoch:03d}.json'


def evaluated_epochs(directory: str | Path, required: Sequence[str] = ()) -> list[int]:
  """Epochs of `directory` whose evaluation record is readable and whole, and holds every
  protocol of `required` (a damaged record is set aside by `read_record`, so its epoch
  counts as not evaluated)."""
  epochs = []
  for path in sorted(Path(directory).glob('epoch_[0-9][0-9][0-9].json')):
    record = read_record(path, required=('epoch', 'results'))
    if record is not None and set(required) <= set(record['results']):
      epochs.append(int(path.stem.split('_')[1]))
  return epochs
