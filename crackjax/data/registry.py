"""Datasets: the explicit registry of builders, preparation, and errors that say what to fix.

`DATASETS` maps ``config.data.name`` to a `DatasetEntry`: the builder class and the keyword
arguments it takes from ``config.data`` (`BuilderArg`; the user's folders for 'crack_folder').
tests/test_contracts.py prepares every entry from a fixture. A dataset crackjax does not ship
is registered by a plugin (`register_dataset` in an importable module that the config names in
``plugins``, crackjax/plugins.py; docs/architecture.md, "Add a dataset"). Every
function here takes the config's `data` group (configs/base.py) as plain data, a mapping
(``config.data.to_dict()``, or the ``data`` of a recorded config.json), e.g.
`prepare_dataset(data)`. Reading never imports TensorFlow: builders store array_record
files, read back with ``builder.as_data_source(split)`` (random access, decoded with PIL).

Preparation with several processes: every process calls `get_data_source`; the first to take
an exclusive lock (`crackjax.runs.file_locks`, on every platform) on ``<data_dir>/<dataset>.lock``
prepares the dataset, the others block on the lock and then find it prepared; the lock's file
is removed when it is released. With a data_dir that is not
shared between hosts, each host prepares its own (identical, deterministic) copy.
`python launch.py` prepares before anything else, so a missing or broken file stops the run
before a model is compiled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from crackjax import plugins
from crackjax.data import source_record
from crackjax.runs import docs, file_locks
from crackjax.tfds_builders.aiglern import AigleRN
from crackjax.tfds_builders.aiglern_trimm import AigleRNTrimm
from crackjax.tfds_builders.bjn260 import BJN260
from crackjax.tfds_builders.crack360 import Crack360
from crackjax.tfds_builders.crack500 import Crack500
from crackjax.tfds_builders.crack_folder import CrackFolder
from crackjax.tfds_builders.crackforest import CrackForest
from crackjax.tfds_builders.deepcrack import DeepCrack
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError
from crackjax.tfds_builders.gaps384 import GAPs384


@dataclasses.dataclass(frozen=True)
class BuilderArg:
  """One keyword argument a builder takes from ``config.data``.

  Attributes:
    field: its field under ``config.data``, dotted (e.g. 'folder.images'); None if unset.
    path: a file-system path: ``~`` and ``$VARS`` are expanded, '' is None.
    required: the builder cannot be constructed without it (`DatasetEntry.missing`).
  """

  field: str
  path: bool = False
  required: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetEntry:
  """A dataset and what it needs, as DATASETS declares it.

  Attributes:
    builder: its TFDS builder class (array_record; tfds_builders/).
    args: the builder's keyword arguments -> the ``config.data`` fields they come from
      (besides ``data_dir``, which every builder takes from ``config.data.data_dir``).
    missing: the end of the message for a required argument left unset: what to pass.
    module: the module that registered it (`register_dataset` records it); None for the
      entries crackjax ships.
  """

  builder: type[tfds.core.GeneratorBasedBuilder]
  args: Mapping[str, BuilderArg] = dataclasses.field(default_factory=dict)
  missing: str = ''
  module: str | None = None


# Explicit registry: config.data.name -> the builder and what it takes from config.data.
DATASETS: dict[str, DatasetEntry] = {
  'crackforest': DatasetEntry(builder=CrackForest),
  'aiglern': DatasetEntry(builder=AigleRN),
  'crack360': DatasetEntry(builder=Crack360),
  'bjn260': DatasetEntry(builder=BJN260),
  # Public crack datasets with their own split folders (tfds_builders/split_folders.py): the
  # general model's training mixture (configs/release/roads_unet_cpu.py).
  'deepcrack': DatasetEntry(builder=DeepCrack),
  'crack500': DatasetEntry(builder=Crack500),
  'gaps384': DatasetEntry(builder=GAPs384),
  'aiglern_trimm': DatasetEntry(builder=AigleRNTrimm),
  # Your own images: config.data.folder (configs/base.py).
  'crack_folder': DatasetEntry(
    builder=CrackFolder,
    args={
      'image_dir': BuilderArg('folder.images', path=True, required=True),
      'mask_dir': BuilderArg('folder.masks', path=True, required=True),
      'train_list': BuilderArg('folder.train_list', path=True),
      'test_list': BuilderArg('folder.test_list', path=True),
      'mask_threshold': BuilderArg('folder.mask_threshold'),
      'mask_polarity': BuilderArg('folder.mask_polarity'),
      'mask_suffix': BuilderArg('folder.mask_suffix'),
      'allow_majority_crack': BuilderArg('folder.allow_majority_crack'),
    },
    missing='your folders: pass --config.data.folder.images=DIR '
    '--config.data.folder.masks=DIR (images and masks matched by file name; see '
    f'{docs.doc("datasets.md")}).',
  ),
}


def register_dataset(name: str, entry: DatasetEntry, *, module: str | None = None) -> DatasetEntry:
  """Adds a plugin's dataset to DATASETS and returns its entry as registered.

  As `crackjax.models.register_model` (call it from an importable module that the config's
  ``plugins`` names; the rule for taken names is `crackjax.plugins.register`).
  """
  module = module or plugins.registering_module()
  return plugins.register(DATASETS, 'Dataset', name, entry, module)


def _expand(path: str | None) -> str | None:
  return os.path.expandvars(os.path.expanduser(path)) if path else None


def _field(data: Mapping[str, Any], field: str) -> Any:
  """The value of ``config.data.<field>`` (dotted), None where any part is absent."""
  value: Any = data
  for part in field.split('.'):
    value = value.get(part) if value is not None else None
  return value


def builder_kwargs(data: Mapping[str, Any]) -> dict[str, Any]:
  """The keyword arguments the builder of ``data.name`` takes from ``data`` (its entry's
  ``args``; ``data_dir`` aside).

  Raises:
    KeyError: if ``data.name`` is not a key of `DATASETS`.
    DatasetNotFoundError: a required argument is unset (the message says what to pass).
  """
  entry = DATASETS[data['name']]
  kwargs = {}
  for key, arg in entry.args.items():
    value = _field(data, arg.field)
    if arg.required and not value:
      raise DatasetNotFoundError(f'Dataset {data["name"]!r} needs {entry.missing}')
    kwargs[key] = _expand(value) if arg.path else value
  return kwargs


def get_builder(data: Mapping[str, Any]) -> tfds.core.GeneratorBasedBuilder:
  """Constructs (does not prepare) the builder of ``data.name`` in ``data.data_dir``.

  Args:
    data: the config's ``data`` group; a builder also takes the fields its entry in
      `DATASETS` names (dataset 'crack_folder': ``data.folder``).

  Raises:
    ValueError: if ``data.name`` is not a key of `DATASETS`.
    DatasetNotFoundError: a required field is unset ('crack_folder' without
      ``data.folder.images`` / ``.masks``).
  """
  name = data['name']
  if name not in DATASETS:
    raise ValueError(
      f'Unknown dataset config.data.name={name!r}; known datasets: {sorted(DATASETS)}'
    )
  return DATASETS[name].builder(data_dir=_expand(data['data_dir']), **builder_kwargs(data))


def manual_dir_problem(data: Mapping[str, Any]) -> str | None:
  """Why dataset ``data`` cannot be prepared for want of its manual dir (one phrase), or None:
  it is prepared already, or its manual dir is given and holds files, or it needs none."""
  builder = get_builder(data)
  if builder.is_prepared():
    return None
  try:
    _check_manual_dir(builder, _expand(data.get('manual_dir')))
  except DatasetNotFoundError as e:
    return str(e).splitlines()[0]
  return None


def _check_manual_dir(builder: tfds.core.GeneratorBasedBuilder, manual_dir: str | None) -> None:
  """Raises DatasetNotFoundError if the manual download is needed, or given, but not there.

  A builder with ``MANUAL_DIR_REQUIRED`` needs ``config.data.manual_dir``; for any builder, a
  ``config.data.manual_dir`` that is set must exist and hold files (a builder that can
  download, such as CrackForest, never falls back to downloading past a mistyped path).
  """
  required = getattr(builder, 'MANUAL_DIR_REQUIRED', False)
  if not manual_dir:
    if not required:
      return
    problem = 'config.data.manual_dir is not set'
  elif not os.path.isdir(manual_dir):
    problem = f'config.data.manual_dir={manual_dir} does not exist'
  elif not os.listdir(manual_dir):
    problem = f'config.data.manual_dir={manual_dir} is empty'
  else:
    return
  instructions = textwrap.dedent(getattr(builder, 'MANUAL_DOWNLOAD_INSTRUCTIONS', None) or '')
  instructions = instructions.strip()
  if not required:
    raise DatasetNotFoundError(
      f'Dataset {builder.name!r}: {problem}; point --config.data.manual_dir at the dataset, '
      f'or leave it unset.\n{instructions}'.strip()
    )
  raise DatasetNotFoundError(
    f'Dataset {builder.name!r} needs files you download yourself, and {problem}.\n'
    f'{instructions}\n'
    f'It is prepared once into {builder.data_dir_root}; later runs with the same '
    '--config.data.data_dir need no manual_dir.'
  )


def _dataset_error(e: BaseException | None) -> DatasetError | None:
  """The DatasetError to raise for an error of a builder's preparation, if it is one.

  Walks ``e``'s cause/context chain (TFDS may wrap the builder's error) to the first
  `DatasetError` and returns a new error of the same class with only its message, so the
  caller's ``raise ... from e`` shows the builder's message without a self-referencing chain.
  None if the chain holds no DatasetError.
  """
  seen = set()
  while e is not None and id(e) not in seen:
    if isinstance(e, DatasetError):
      return type(e)(str(e))
    seen.add(id(e))
    e = e.__cause__ or e.__context__
  return None


@contextlib.contextmanager
def _file_lock(path: epath.Path) -> Iterator[None]:
  """Exclusive inter-process lock (flock on POSIX, filelock's msvcrt lock on Windows; the system
  drops it when its holder dies), so that only one process prepares; the others wait. Its file
  is removed when it is released, also after a failed or interrupted preparation (was: a stray
  ``<dataset>.lock`` in data_dir after every command; `file_locks` says why that is safe)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with file_locks.exclusive(os.fspath(path)):
    yield


def _prepared_builder(data: Mapping[str, Any]) -> tfds.core.GeneratorBasedBuilder:
  """Returns the builder of ``data``, preparing the dataset first if needed, and again if the
  prepared copy no longer follows its source (`source_record.changed`: another manual dir, or
  files added, removed or changed there; the old copy is kept until the new one is complete).

  Raises:
    DatasetNotFoundError: the dataset needs files that are absent (message: what and where).
    DatasetError: a file of the dataset is unusable (the message names it).
  """
  builder = get_builder(data)
  manual_dir = _expand(data.get('manual_dir'))
  if builder.is_prepared():
    check_prepared(builder)
    if source_record.changed(builder.data_dir, manual_dir) is None:
      return builder
  lock = epath.Path(builder.data_dir_root) / f'{builder.name}.lock'
  with _file_lock(lock):
    aside = f'{os.fspath(builder.data_dir)}.stale'
    if _put_back(aside, builder):  # a copy set aside by a preparation killed (kill -9)
      builder = get_builder(data)
    stale = False
    try:
      if builder.is_prepared():
        # Prepared (by another process while we waited for the lock, or earlier and stale): a
        # fresh builder reads the dataset info (splits, sizes) from disk.
        builder = get_builder(data)
        why = source_record.changed(builder.data_dir, manual_dir)
        if why is None:
          return check_prepared(builder)
        stale = True  # first: a signal inside the rename still puts it back
        _set_aside(builder, why, manual_dir)
        builder = get_builder(data)
      _prepare(builder, manual_dir)
    except BaseException:  # Ctrl-C and SIGTERM (`exits.terminable`) included
      if stale:  # the old copy back: nothing lost
        _put_back(aside, builder, say=False)
      raise
    if stale:
      shutil.rmtree(aside, ignore_errors=True)
  return builder


def _put_back(aside: str, builder: tfds.core.DatasetBuilder, *, say: bool = True) -> bool:
  """Puts a prepared copy set aside (`_set_aside`) back in its place, under the file lock,
  where the preparation that set it aside did not finish (interrupted, or killed before it
  could put it back: the next call does, `say`-ing so); returns whether it did. A new copy
  without its source record in the old one's place (TFDS done, the record not yet written)
  gives way to the old one, known good; one with its record is the finished preparation's,
  and the copy aside is left over from its clean-up: removed."""
  here = os.fspath(builder.data_dir)
  if not os.path.isdir(aside):
    return False
  if os.path.lexists(here):
    if source_record.read(here) is not None:
      shutil.rmtree(aside, ignore_errors=True)
      return False
    shutil.rmtree(here, ignore_errors=True)
  os.replace(aside, here)
  if say:
    print(f'crackjax: put the prepared {builder.name} back in {here}.', file=sys.stderr, flush=True)
  return True


def _set_aside(builder: tfds.core.DatasetBuilder, why: str, manual_dir: str | None) -> str:
  """Renames the stale copy aside (``<version>.stale``), saying why in one line; returns its
  new path."""
  here = os.fspath(builder.data_dir)
  aside = f'{here}.stale'
  print(
    f'crackjax: the prepared {builder.name} in {here} no longer follows its source ({why}): '
    f'preparing it again from {manual_dir} (the old copy is kept until the new one is complete).',
    file=sys.stderr,
    flush=True,
  )
  os.replace(here, aside)
  return aside


def _prepare(builder: tfds.core.GeneratorBasedBuilder, manual_dir: str | None) -> None:
  """Prepares `builder`'s dataset from `manual_dir` and records its source there; nothing
  half-made is left behind when it fails."""
  _check_manual_dir(builder, manual_dir)
  logging.info(
    'Preparing dataset %s into %s (once; later runs reuse it)...',
    builder.name,
    builder.data_dir,
  )
  made = _folders_tfds_makes(builder)
  existed = {p for p in made if p.exists()}
  _remove_incomplete(builder)  # a preparation killed earlier (kill -9, a lost machine)
  try:
    builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=manual_dir)
    )
  except BaseException as e:  # Ctrl-C included: nothing half-made is left behind
    _remove_incomplete(builder)
    for folder in made:  # deepest first; only the empty ones this attempt made
      if folder not in existed and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    error = _dataset_error(e) if isinstance(e, Exception) else None
    if error is None:
      raise
    # A builder's data error: re-raise with its message only.
    raise error from e
  if manual_dir and os.path.isdir(manual_dir):
    source_record.write(builder.data_dir, manual_dir, getattr(builder, 'source_paths', ()))


def _folders_tfds_makes(builder: tfds.core.DatasetBuilder) -> list[epath.Path]:
  """The folders a preparation creates under ``data_dir`` (deepest first): the dataset's
  (``<name>/[<config>/]``) and TFDS's download folders. A failed attempt left them empty, and
  the next call warned of a variant folder without dataset_info.json."""
  root = epath.Path(builder.data_dir_root)
  chain, folder = [], epath.Path(builder.data_dir)
  while folder != root and root in folder.parents:
    chain.append(folder)
    folder = folder.parent
  downloads = root / 'downloads'
  return [*chain, downloads / 'extracted', downloads / 'manual', downloads]


def _remove_incomplete(builder: tfds.core.DatasetBuilder) -> None:
  """Removes TFDS's temporary folders of an unfinished preparation of `builder`'s dataset
  (``incomplete.*`` beside its version folder): only TFDS writes them, and with the file lock
  held no other process is preparing this dataset."""
  for path in epath.Path(builder.data_dir).parent.glob('incomplete.*'):
    logging.info('Removing %s, left by a preparation that did not finish.', path)
    shutil.rmtree(os.fspath(path), ignore_errors=True)


def _damaged(builder: tfds.core.DatasetBuilder, what: str) -> DatasetError:
  """The one line for a prepared copy that cannot be read: its folder and how to rebuild it."""
  return DatasetError(
    f'The prepared dataset {builder.name} in {builder.data_dir} is damaged: {what}. Delete that '
    f'folder (rm -r {builder.data_dir}) and run the same command again: it is prepared again '
    'from its files (with --config.data.manual_dir where the dataset needs it).'
  )


def check_prepared(builder: tfds.core.DatasetBuilder) -> tfds.core.DatasetBuilder:
  """`builder` if every record file of its prepared copy holds the records its dataset_info
  counts (an array_record file's footer, read without its records: milliseconds), else a
  DatasetError naming the folder and how to rebuild it (`_damaged`): a file cut short (a
  copy or a disk that ran out) used to end training or evaluation in a 'Corrupted
  Riegeli/records file' traceback."""
  if builder.info.file_format != tfds.core.FileFormat.ARRAY_RECORD:
    return builder
  if '://' in os.fspath(builder.data_dir):  # a bucket: array_record's reader opens local files
    return builder
  from array_record.python import array_record_module

  for split in builder.info.splits.values():
    for path, expected in zip(split.filepaths, split.shard_lengths, strict=False):
      name = epath.Path(path).name
      if not epath.Path(path).exists():
        raise _damaged(builder, f'{name} is missing')
      try:
        found = array_record_module.ArrayRecordReader(os.fspath(path)).num_records()
      except Exception as e:  # noqa: BLE001 - any failure to open it is the news
        raise _damaged(builder, f'{name} cannot be read ({type(e).__name__}: {e})') from None
      if found != expected:
        raise _damaged(builder, f'{name} holds {found} of its {expected} records (cut short?)')
  return builder


def check_split(builder: tfds.core.DatasetBuilder, split: str) -> int:
  """The number of examples `split` (a TFDS split string: 'test', 'train[58:]') selects of
  `builder`'s prepared copy.

  Raises:
    DatasetError: the dataset has no such split, or it selects no example (one line naming
      the dataset, the split and the splits it has).
  """
  known = sorted(builder.info.splits)
  try:
    n = builder.info.splits[split].num_examples
  except (KeyError, ValueError, AssertionError) as e:
    raise DatasetError(
      f'Dataset {builder.name} has the splits {known}, not {split!r} '
      f'({" ".join(str(e).split())[:120]}).'
    ) from None
  if n == 0:
    raise DatasetError(f'Split {split!r} of dataset {builder.name} selects no example ({known}).')
  return n


class ReadableSource(Sequence):
  """A split's random-access source whose unreadable records (a prepared file damaged after
  `check_prepared`, e.g. a flipped byte) end in `_damaged`'s one line, not in array_record's
  'Corrupted Riegeli/records file' traceback."""

  def __init__(self, builder: tfds.core.DatasetBuilder, split: str):
    check_split(builder, split)
    self._builder, self._source = builder, builder.as_data_source(split)

  def __len__(self) -> int:
    return len(self._source)

  def __iter__(self):
    # Sequence's own __iter__ stops at an IndexError; array_record raises ValueError past the
    # end, so a plain `for record in source` ended in that error.
    for index in range(len(self)):
      yield self[index]

  def __getitem__(self, index):
    try:
      return self._source[index]
    except RuntimeError as e:
      if 'Riegeli' not in str(e) and 'ArrayRecord' not in str(e):
        raise
      raise _damaged(self._builder, f'a record cannot be read ({e})') from None


def prepare_dataset(data: Mapping[str, Any]) -> tfds.core.GeneratorBasedBuilder:
  """Prepares dataset ``data.name`` if needed and returns its builder; cheap once prepared.

  ``data`` is the config's data group as plain data (``config.data.to_dict()``).

  Call it first (launch.py does) so that absent or invalid files stop a run at once with
  `DatasetNotFoundError` / `DatasetError`, before any model is built.
  """
  return _prepared_builder(data)


def get_data_source(data: Mapping[str, Any], split: str) -> Sequence[dict[str, Any]]:
  """Random-access source of ``split`` (preparing the dataset first if needed).

  Records are dicts ``{'image': uint8 [H, W, 3], 'mask': uint8 [H, W, 1], 'name': bytes}``.
  """
  return ReadableSource(_prepared_builder(data), split)


def record_name(record: dict[str, Any]) -> str:
  name = record['name']
  return name.decode() if isinstance(name, bytes) else str(name)
