"""The crackjax model file: a trained model for inference in one safetensors file.

One file holds everything prediction needs, and nothing that runs code on load:

* the tensors: every parameter under ``params/<module path>`` and every BatchNorm running
  average under ``batch_stats/<module path>`` (crackjax's own paths, `pretrained.flat_variables`),
  in float32 or, with ``dtype='bfloat16'``, bfloat16;
* the safetensors header's string metadata, each value JSON: ``crackjax.format`` (this module's
  `FORMAT_VERSION`), ``crackjax.requires`` (the crackjax that wrote it), ``crackjax.model`` (the
  run's ``config.model`` group), ``crackjax.plugins``, ``crackjax.input`` (the input rule:
  RGB in [0, 1], reflection padding to a multiple), ``crackjax.threshold`` (the threshold and how
  it was chosen), ``crackjax.card`` (the model card: data and licence, training, scores),
  ``crackjax.config`` (the run's whole config, for fine-tuning and the record), and
  ``crackjax.sha256``, the checksum of all of the above (`content_sha256`).

Why safetensors (docs/export.md): a plain header of JSON and raw little-endian arrays, read
without executing anything (unlike pickles), with string metadata, readable from Python,
Rust, JavaScript and C++, and the weights format Hugging Face and flax users already know. An
orbax checkpoint is a folder of many files; a .npz has no metadata and np.load may unpickle.

The checksum covers every tensor (name, dtype, shape, bytes) and every metadata entry but
itself, so one changed byte of content is refused on load, in one line naming the file and
both checksums (`ModelFileError`); a file whose header no longer parses is refused the same
way. A file of a newer `FORMAT_VERSION` names the crackjax that wrote it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from crackjax.models import model_schema
from crackjax.runs import outputs

FORMAT_VERSION = 1
SUFFIX = '.safetensors'
PREFIX = 'crackjax.'
CHECKSUM_KEY = PREFIX + 'sha256'
# The metadata entries every model file holds (besides the checksum).
FIELDS = ('format', 'requires', 'model', 'plugins', 'input', 'threshold', 'card', 'config')
DTYPES = ('float32', 'bfloat16')
# safetensors' dtype names of the arrays a model file holds.
_ST_DTYPES = {
  'F32': np.dtype(np.float32),
  'BF16': np.dtype(ml_dtypes.bfloat16),
  'F16': np.dtype(np.float16),
  'F64': np.dtype(np.float64),
  'I32': np.dtype(np.int32),
  'I64': np.dtype(np.int64),
}


def _is_float(dtype: np.dtype) -> bool:
  return dtype.kind == 'f' or dtype == np.dtype(ml_dtypes.bfloat16)


class ModelFileError(ValueError):
  """A model file that cannot be used: damaged, altered, newer, or not a model file."""


def _meta_group(name: str) -> property:
  """A `ModelFile` attribute that reads one group of its metadata, ``meta[name]``."""
  return property(lambda self: self.meta[name], doc=f'``meta[{name!r}]``.')


@dataclasses.dataclass(frozen=True)
class ModelFile:
  """A model file's content.

  Attributes:
    path: where it was read from.
    params: the parameters, nested dicts of numpy arrays (as stored: float32 or bfloat16).
    batch_stats: the BatchNorm running averages (nested), or None for a model without.
    meta: the decoded metadata, FIELDS -> values.
    sha256: the content checksum (`content_sha256`), verified.
  """

  path: Path
  params: dict[str, Any]
  batch_stats: dict[str, Any] | None
  meta: dict[str, Any]
  sha256: str

  # The metadata's groups, read as attributes.
  model = _meta_group('model')
  card = _meta_group('card')
  threshold = _meta_group('threshold')
  config = _meta_group('config')
  input = _meta_group('input')

  @functools.cached_property
  def module(self):
    """The linen Module its ``crackjax.model`` group describes, built on first use (`read`
    with ``build`` has checked every tensor against it, its plugins allowed)."""
    from crackjax.models import model_from_config

    return model_from_config(dict(self.model))


def crackjax_version() -> str:
  # The installed distribution's version (crackjax.__version__ reads the same; importing the
  # package from here would make an import cycle).
  import importlib.metadata

  try:
    return importlib.metadata.version('crackjax')
  except importlib.metadata.PackageNotFoundError:
    return '0+unknown'


def flatten(tree: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
  """{'<prefix>/<a>/<b>': array} of nested dicts."""
  out = {}
  for key, value in tree.items():
    name = f'{prefix}/{key}'
    if isinstance(value, Mapping):
      out.update(flatten(value, name))
    else:
      out[name] = np.asarray(value)
  return out


def named_arrays(
  params: Mapping[str, Any], batch_stats: Mapping[str, Any] | None
) -> dict[str, Any]:
  """A model's variables as crackjax-layout named arrays (``params/...``, ``batch_stats/...``):
  what `crackjax.models.pretrained.initialise` maps onto a fresh state."""
  arrays = flatten(params, 'params')
  if batch_stats:
    arrays.update(flatten(batch_stats, 'batch_stats'))
  return arrays


def unflatten(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, Any]:
  """The nested dicts of the arrays whose names start with '<prefix>/'."""
  tree: dict[str, Any] = {}
  for name, array in arrays.items():
    head, _, rest = name.partition('/')
    if head != prefix:
      continue
    node = tree
    *parents, leaf = rest.split('/')
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = array
  return tree


def content_sha256(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> str:
  """The checksum of a model file's content: every tensor's name, dtype, shape and bytes, and
  every metadata entry except the checksum itself, in sorted order."""
  h = hashlib.sha256()
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    h.update(_CANONICAL.encode([name, array.dtype.name, list(array.shape)]).encode())
    h.update(array.tobytes())
  for key in sorted(k for k in metadata if k != CHECKSUM_KEY):
    h.update(_CANONICAL.encode([key, metadata[key]]).encode())
  return h.hexdigest()


# The checksum's canonical form of its entries: the json module's own defaults (as
# json.dumps(x, allow_nan=False)), not `outputs.dumps`, so that it never moves with how
# crackjax writes its JSON (names, numbers and strings only here: the bytes are those every
# crackjax so far has hashed).
_CANONICAL = json.JSONEncoder(allow_nan=False)


def file_sha256(path: str | Path) -> str:
  """SHA-256 of the file's bytes (what a registry entry and a download are checked against)."""
  h = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      h.update(block)
  return h.hexdigest()


def write(
  path: str | Path,
  *,
  params: Mapping[str, Any],
  batch_stats: Mapping[str, Any] | None,
  meta: Mapping[str, Any],
  dtype: str = 'float32',
) -> str:
  """Writes a model file atomically (a temporary file renamed); returns its file SHA-256.

  Args:
    path: the file (suffix `SUFFIX` by convention).
    params / batch_stats: the model's variables (nested dicts of arrays).
    meta: FIELDS except 'format' and 'requires' (added here), each JSON-serialisable.
    dtype: 'float32' or 'bfloat16' for the floating-point tensors.
  """
  from safetensors.numpy import save_file

  if dtype not in DTYPES:
    raise ValueError(f'dtype={dtype!r} is not one of {DTYPES}.')
  tensors = flatten(params, 'params')
  if batch_stats:
    tensors.update(flatten(batch_stats, 'batch_stats'))
  target = np.dtype(ml_dtypes.bfloat16) if dtype == 'bfloat16' else np.dtype(np.float32)
  tensors = {
    k: np.ascontiguousarray(v.astype(target) if _is_float(v.dtype) else v)
    for k, v in tensors.items()
  }
  values = {'format': FORMAT_VERSION, 'requires': f'crackjax>={crackjax_version()}', **meta}
  missing = [f for f in FIELDS if f not in values]
  if missing:
    raise ValueError(f'model file metadata lacks {missing}.')
  metadata = {PREFIX + k: outputs.dumps(values[k], sort_keys=True) for k in FIELDS}
  metadata[CHECKSUM_KEY] = content_sha256(tensors, metadata)
  path = Path(path)
  tmp = path.with_name(f'.{path.name}.tmp-{os.getpid()}')
  try:
    save_file(tensors, str(tmp), metadata=metadata)
    # safetensors creates its file readable by its owner alone (0600); a model file is for
    # sharing (a colleague, a web server), so it gets the mode any new file gets here.
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)
  finally:
    tmp.unlink(missing_ok=True)
  return file_sha256(path)


def _umask() -> int:
  """This process's umask: from /proc where Linux shows it; elsewhere by setting it and
  setting it straight back (a file another thread creates in between would miss it)."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('Umask:'):
          return int(line.split()[1], 8)
  except OSError:
    pass
  mask = os.umask(0)
  os.umask(mask)
  return mask


def _header(path: Path) -> dict[str, Any]:
  """The safetensors header (JSON) of `path`; ModelFileError if it is not one."""
  try:
    with open(path, 'rb') as f:
      size = int.from_bytes(f.read(8), 'little')
      if not 0 < size <= path.stat().st_size - 8:
        raise ValueError(f'header size {size}')
      header = json.loads(f.read(size))
    if not isinstance(header, dict):
      raise ValueError(f'the header is a JSON {type(header).__name__}, not an object')
    metadata = header.get('__metadata__') or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
      raise ValueError('its __metadata__ is not an object of strings')
    return header
  except (ValueError, UnicodeDecodeError) as e:
    raise ModelFileError(
      f'{path} is not a crackjax model file (a safetensors file): its header cannot be read '
      f'({e}); the file is damaged or of another kind.'
    ) from e


def read_metadata(path: str | Path) -> dict[str, Any]:
  """The decoded metadata (FIELDS) of a model file, checked against `model_schema.SCHEMA`,
  without reading its tensors or verifying its checksum (`read` does both).

  Raises:
    ModelFileError: not a model file, one of a newer format, or a field at fault.
    FileNotFoundError: no such file.
  """
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'{path}: no such model file.')
  meta = _decode(path, _header(path).get('__metadata__') or {})
  _refuse(path, model_schema.problems(meta))
  return meta


def stored_dtype(path: str | Path) -> str | None:
  """The dtype of a model file's floating-point tensors ('float32' or 'bfloat16', `DTYPES`;
  None for none), from its header alone. Raises ModelFileError for a file not safetensors."""
  header = _header(Path(path))
  kinds = {e.get('dtype') for k, e in header.items() if k != '__metadata__' and isinstance(e, dict)}
  found = sorted(_ST_DTYPES[k].name for k in kinds if k in _ST_DTYPES and k.startswith(('F', 'B')))
  return found[-1] if found else None


def _decode(path: Path, raw: Mapping[str, str]) -> dict[str, Any]:
  """The metadata's JSON values; a file of a newer format is named as such before any field
  is judged (its fields may differ), a malformed one by `model_schema.problems`."""
  if PREFIX + 'format' not in raw:
    raise ModelFileError(
      f'{path} is a safetensors file but not a crackjax model file (no {PREFIX}format '
      'metadata); crackjax-export --format=model writes one from a run.'
    )
  try:
    meta = {k: json.loads(raw[PREFIX + k]) for k in FIELDS if PREFIX + k in raw}
  except json.JSONDecodeError as e:
    raise ModelFileError(f'{path}: damaged metadata ({e}); the file was altered.') from e
  version = meta.get('format')
  newer = isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION
  if newer:  # a string "1" is a damaged file, not a newer one: the schema says so
    raise ModelFileError(
      f'{path} is a crackjax model file of format {version}, newer than this crackjax '
      f'({crackjax_version()}) reads (format {FORMAT_VERSION}); it needs {meta.get("requires")}: '
      'pip install --upgrade crackjax.'
    )
  missing = [f for f in FIELDS if f not in meta]
  if missing:
    raise ModelFileError(f'{path}: the model file lacks {missing}; the file was altered.')
  return meta


def refusal(path: str | Path, problems: Sequence[str]) -> str:
  """The one line for a file whose metadata or tensors break the schema (`model_schema`)."""
  shown = '; '.join(problems[:6]) + (f'; and {len(problems) - 6} more' if len(problems) > 6 else '')
  return (
    f'{path}: not a usable crackjax model file: {shown}. It was altered or not written by '
    'crackjax-export --format=model; get it again from its source.'
  )


def _refuse(path: Path, problems: Sequence[str]) -> None:
  if problems:
    raise ModelFileError(refusal(path, problems))


def read(
  path: str | Path,
  *,
  build: bool = True,
  allow_plugins: Sequence[str] = (),
  how: str | None = None,
) -> ModelFile:
  """Reads and verifies a model file, in one pass.

  The checksum first (damage before anything else), then every problem at once
  (`model_schema.problems`): each metadata field and, with `build`, the model group and every
  tensor against the model it builds. With `build`, the file's plugins must be allowed first
  (`crackjax.plugins.model_file_plugins`: a plugin module it needs is used only if this
  process imported it already or `allow_plugins` names it; never imported on the file's word
  alone) and the returned `ModelFile.module` is the model its tensors fit. Without `build`
  (what rewrites a card or lists a registry), the metadata alone is judged.

  Raises:
    FileNotFoundError: no such file.
    ModelFileError: not a model file, a newer format, content that does not match its
      checksum (one line naming the file and both checksums), a field or tensor at fault,
      a plugin not allowed, or weights holding NaN or infinite values.
  """
  path = Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'{path}: no such model file.')
  raw_meta = _header(path).get('__metadata__') or {}
  meta = _decode(path, raw_meta)
  tensors = _tensors(path)
  stored = raw_meta.get(CHECKSUM_KEY)
  computed = content_sha256(tensors, raw_meta)
  if stored != computed:
    raise ModelFileError(
      f'{path}: checksum mismatch, the content was altered or damaged (stored sha256 '
      f'{stored}, content {computed}); download or export it again.'
    )
  bad = _non_finite(tensors)
  if bad:
    raise ModelFileError(
      f'{path}: {len(bad)} tensor(s) hold NaN or infinite values ({", ".join(bad[:3])}'
      f'{", ..." if len(bad) > 3 else ""}): the weights are unusable (a diverged training '
      'exported, or a file altered and its checksum recomputed); export it again from a good '
      'checkpoint.'
    )
  if build:
    _allowed(path, meta, allow_plugins, how)
  _refuse(path, model_schema.problems(meta, tensors if build else None))
  batch_stats = unflatten(tensors, 'batch_stats') or None
  return ModelFile(path, unflatten(tensors, 'params'), batch_stats, meta, computed)


def _tensors(path: Path) -> dict[str, np.ndarray]:
  """The file's tensors by name, in their stored dtypes."""
  import safetensors

  try:
    entries = safetensors.deserialize(path.read_bytes())
  except Exception as e:  # noqa: BLE001 - safetensors' own error types vary by version
    raise ModelFileError(f'{path}: damaged (safetensors cannot read it: {e}).') from e
  tensors = {}
  for name, entry in entries:
    if entry['dtype'] not in _ST_DTYPES:
      raise ModelFileError(f'{path}: tensor {name} has dtype {entry["dtype"]}, not a model dtype.')
    dtype = _ST_DTYPES[entry['dtype']]
    tensors[name] = np.frombuffer(bytes(entry['data']), dtype=dtype).reshape(entry['shape'])
  return tensors


def _allowed(path: Path, meta: Mapping[str, Any], allow_plugins: Sequence[str], how) -> None:
  """Raises ModelFileError unless every plugin the file names is allowed; names of a malformed
  field are left to `model_schema.problems`."""
  from crackjax import plugins

  config = meta.get('config')
  names = [
    *_strings(meta.get('plugins')),
    *_strings(config.get('plugins') if isinstance(config, dict) else None),
  ]
  try:
    plugins.model_file_plugins(str(path), names, tuple(allow_plugins), how=how)
  except ValueError as e:
    raise ModelFileError(str(e)) from e


def _strings(value: Any) -> list[str]:
  return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _non_finite(tensors: Mapping[str, np.ndarray]) -> list[str]:
  """The names of the floating-point tensors holding a NaN or an infinity."""
  return sorted(
    name
    for name, t in tensors.items()
    if _is_float(t.dtype) and not np.isfinite(t.astype(np.float32)).all()
  )


def as_float32(tree: Any) -> Any:
  """The tree's floating-point arrays as float32 (a bfloat16 file's parameters for the
  model, which computes in its own ``model.dtype``)."""
  if isinstance(tree, Mapping):
    return {k: as_float32(v) for k, v in tree.items()}
  if tree is None:
    return None
  return tree.astype(np.float32) if _is_float(tree.dtype) else tree
