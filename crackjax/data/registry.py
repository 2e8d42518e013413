"""Datasets: the explicit registry of builders, preparation, and errors that say what to fix.

`DATASETS` maps ``config.data.name`` to a `DatasetEntry`: the builder class and the keyword
arguments it takes from ``config.data`` (`BuilderArg`; the user's folders for 'crack_folder').
tests/test_contracts.py prepares every entry from a fixture. A dataset crackjax does not ship
is registered by a plugin (`register_dataset` in an importable module that the config names in
``plugins``, crackjax/plugins.py; docs/architecture.md, "Add a dataset"). Every
function here takes the config's `data` group (configs/base.py), e.g.
`prepare_dataset(config.data)`. Reading never imports TensorFlow: builders store array_record
files, read back with ``builder.as_data_source(split)`` (random access, decoded with PIL).

Preparation with several processes: every process calls `get_data_source`; the first to take
an exclusive lock (`filelock`, on every platform) on ``<data_dir>/<dataset>.lock`` prepares the
dataset, the others block on the lock and then find it prepared. With a data_dir that is not
shared between hosts, each host prepares its own (identical, deterministic) copy.
`python launch.py` prepares before anything else, so a missing or broken file stops the run
before a model is compiled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import filelock
import ml_collections
import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from crackjax import plugins
from crackjax.tfds_builders.aiglern import AigleRN
from crackjax.tfds_builders.bjn260 import BJN260
from crackjax.tfds_builders.crack360 import Crack360
from crackjax.tfds_builders.crack_folder import CrackFolder
from crackjax.tfds_builders.crackforest import CrackForest
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError


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
    'docs/datasets.md).',
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


def _field(data: ml_collections.ConfigDict, field: str) -> Any:
  """The value of ``config.data.<field>`` (dotted), None where any part is absent."""
  value: Any = data
  for part in field.split('.'):
    value = value.get(part) if value is not None else None
  return value


def builder_kwargs(data: ml_collections.ConfigDict) -> dict[str, Any]:
  """The keyword arguments the builder of ``data.name`` takes from ``data`` (its entry's
  ``args``; ``data_dir`` aside).

  Raises:
    KeyError: if ``data.name`` is not a key of `DATASETS`.
    DatasetNotFoundError: a required argument is unset (the message says what to pass).
  """
  entry = DATASETS[data.name]
  kwargs = {}
  for key, arg in entry.args.items():
    value = _field(data, arg.field)
    if arg.required and not value:
      raise DatasetNotFoundError(f'Dataset {data.name!r} needs {entry.missing}')
    kwargs[key] = _expand(value) if arg.path else value
  return kwargs


def get_builder(data: ml_collections.ConfigDict) -> tfds.core.GeneratorBasedBuilder:
  """Constructs (does not prepare) the builder of ``data.name`` in ``data.data_dir``.

  Args:
    data: the config's ``data`` group; a builder also takes the fields its entry in
      `DATASETS` names (dataset 'crack_folder': ``data.folder``).

  Raises:
    ValueError: if ``data.name`` is not a key of `DATASETS`.
    DatasetNotFoundError: a required field is unset ('crack_folder' without
      ``data.folder.images`` / ``.masks``).
  """
  if data.name not in DATASETS:
    raise ValueError(
      f'Unknown dataset config.data.name={data.name!r}; known datasets: {sorted(DATASETS)}'
    )
  return DATASETS[data.name].builder(data_dir=_expand(data.data_dir), **builder_kwargs(data))


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
  """Exclusive inter-process lock (`filelock`: flock on POSIX, msvcrt on Windows; the system
  drops it when its holder dies), so that only one process prepares; the others wait."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with filelock.FileLock(os.fspath(path)):
    yield


def _prepared_builder(data: ml_collections.ConfigDict) -> tfds.core.GeneratorBasedBuilder:
  """Returns the builder of ``data``, preparing the dataset first if needed.

  Raises:
    DatasetNotFoundError: the dataset needs files that are absent (message: what and where).
    DatasetError: a file of the dataset is unusable (the message names it).
  """
  builder = get_builder(data)
  if builder.is_prepared():
    return builder
  lock = epath.Path(builder.data_dir_root) / f'{builder.name}.lock'
  with _file_lock(lock):
    if builder.is_prepared():
      # Another process prepared it while we waited for the lock: a fresh builder reads the
      # dataset info (splits, sizes) from disk.
      return get_builder(data)
    # Prepared here: the builder then holds the info itself and is returned as it is (one
    # construction per process).
    manual_dir = _expand(data.manual_dir)
    _check_manual_dir(builder, manual_dir)
    logging.info(
      'Preparing dataset %s into %s (once; later runs reuse it)...',
      builder.name,
      builder.data_dir,
    )
    try:
      builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir)
      )
    except Exception as e:  # A builder's data error: re-raise with its message only.
      error = _dataset_error(e)
      if error is None:
        raise
      raise error from e
  return builder


def prepare_dataset(data: ml_collections.ConfigDict) -> tfds.core.GeneratorBasedBuilder:
  """Prepares dataset ``data.name`` if needed and returns its builder; cheap once prepared.

  ``data`` is the config's data group, ``config.data``.

  Call it first (launch.py does) so that absent or invalid files stop a run at once with
  `DatasetNotFoundError` / `DatasetError`, before any model is built.
  """
  return _prepared_builder(data)


def get_data_source(data: ml_collections.ConfigDict, split: str) -> Sequence[dict[str, Any]]:
  """Random-access source of ``split`` (preparing the dataset first if needed).

  Records are dicts ``{'image': uint8 [H, W, 3], 'mask': uint8 [H, W, 1], 'name': bytes}``.
  """
  return _prepared_builder(data).as_data_source(split)


def record_name(record: dict[str, Any]) -> str:
  name = record['name']
  return name.decode() if isinstance(name, bytes) else str(name)
