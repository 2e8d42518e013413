"""What every command that writes files keeps to: strict JSON, and an output folder it owns.

JSON: `dumps` writes a value as strict JSON. A non-finite float (NaN, +-Infinity, numpy's
included) becomes null, since Python's default `NaN` is not JSON and strict readers
(JavaScript's JSON.parse, jq, Go, Rust) reject the whole file; anything else JSON cannot hold
is an error (allow_nan=False), never silently written. Readers take null where a value may be
unknown (an epoch's ``train_seconds`` when it was evaluated after an interruption). Every JSON
file the project writes goes through `dumps` (tests/faults/test_outputs.py checks the code).

Output folders: a command writes and removes files only inside the folder it was given.
`check_inside` refuses, before anything is written, a planned path that is a symbolic link
below that folder, lies under one, or resolves outside it (a link planted as ``OUT/probs``
must not make ``--overwrite`` delete or write elsewhere); the folder itself may be a link the
user made, and is resolved once. `foreign_files` tells a command's own earlier outputs, which
it may replace, from files a user made or edited, which it replaces only with --overwrite:
its own are listed with their SHA-256 in the folder's manifest (`MANIFEST`, written by
`record_outputs` after the files).

Failed writes: inside `naming(path)`, an OSError of a write or flush (which Python raises
without a file name) names `path`, so that the command's one line (`crackjax.runs.exits`) says
which file the disk refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: The manifest of a command's outputs in a folder: {'files': {name: sha256}}.
MANIFEST = '.crackjax-outputs.json'


class UnsafeOutputError(ValueError):
  """A planned output path that is, or lies under, a symbolic link, or leaves the folder."""


def finite(obj: Any) -> Any:
  """`obj` with every non-finite float turned into None and numpy scalars and arrays into
  Python numbers and lists (dicts, lists and tuples followed; other values as they are)."""
  if isinstance(obj, bool | np.bool_):
    return bool(obj)
  if isinstance(obj, float | np.floating):
    return float(obj) if math.isfinite(obj) else None
  if isinstance(obj, np.integer):
    return int(obj)
  if isinstance(obj, np.ndarray):
    return finite(obj.tolist())
  if isinstance(obj, dict):
    return {k: finite(v) for k, v in obj.items()}
  if isinstance(obj, list | tuple):
    return [finite(v) for v in obj]
  return obj


def dumps(obj: Any, **kwargs: Any) -> str:
  """`json.dumps` of `finite(obj)` with allow_nan=False: strict JSON, NaN and Infinity as
  null. Takes json.dumps' other keyword arguments (indent, sort_keys, default, ...)."""
  return json.dumps(finite(obj), allow_nan=False, **kwargs)


# ------------------------------------------------------------------------------ output folders


@contextlib.contextmanager
def naming(path: object) -> Iterator[None]:
  """Gives an OSError raised inside it without a file name (a write or flush that the disk
  refused: Python names the file only when it is opened) the name `path`, so that the one
  line of `crackjax.runs.exits.one_line_exits` says which file could not be written."""
  try:
    yield
  except OSError as e:
    if e.filename is not None or e.errno is None:
      raise
    raise OSError(e.errno, e.strerror or os.strerror(e.errno), str(path)) from e


def check_inside(folder: str | Path, paths: Iterable[str | Path], flag: str = '--out') -> None:
  """Checks that every path of `paths` (each `folder` / a relative path) is written inside
  `folder`: no part of it below `folder` is a symbolic link (an existing one; a dangling one
  counts), and it resolves inside the resolved `folder`.

  Raises:
    UnsafeOutputError: one line naming the first offending path and what to do.
  """
  folder = Path(folder)
  root = folder.resolve()
  checked: set[Path] = set()
  for path in paths:
    path = Path(path)
    current = folder
    for part in path.relative_to(folder).parts:
      current = current / part
      if current in checked:
        continue
      if current.is_symlink():
        raise UnsafeOutputError(
          f'{current} is a symbolic link (to {os.readlink(current)}); {flag} is written only '
          f'inside itself, never through a link: remove the link or choose another {flag}.'
        )
      checked.add(current)
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
      raise UnsafeOutputError(
        f'{path} resolves to {resolved}, outside {flag}={folder}; nothing was written.'
      )


def _sha256(path: Path) -> str:
  digest = hashlib.sha256()
  with path.open('rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def _manifest(folder: Path) -> dict[str, str]:
  """{name: sha256} of the outputs a command recorded in `folder` ({} if none or damaged)."""
  try:
    files = json.loads((folder / MANIFEST).read_text()).get('files', {})
  except (OSError, ValueError, AttributeError):
    return {}
  return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def foreign_files(folder: str | Path, names: Sequence[str]) -> list[str]:
  """Those of `names` that exist in `folder` and are not, unchanged, outputs recorded by
  `record_outputs` (a user's file, or one of ours edited since): what only --overwrite
  replaces."""
  folder = Path(folder)
  own = _manifest(folder)
  return [
    n
    for n in names
    if (folder / n).exists() and ((folder / n).is_dir() or own.get(n) != _sha256(folder / n))
  ]


def record_outputs(folder: str | Path, names: Sequence[str], written_by: str) -> None:
  """Adds `names` (files just written in `folder`) to its manifest, with their SHA-256, so
  that a later run of a command may replace them without --overwrite."""
  folder = Path(folder)
  files = {n: h for n, h in _manifest(folder).items() if (folder / n).is_file()}
  files |= {n: _sha256(folder / n) for n in names}
  text = dumps({'written_by': written_by, 'files': dict(sorted(files.items()))}, indent=1)
  (folder / MANIFEST).write_text(text + '\n')


def replace_advice(prog: str, folder: str | Path, names: Sequence[str], flag: str = '--out') -> str:
  """The one line for `foreign_files` found in `folder`: which files, and the two ways on."""
  shown = ', '.join(names[:3]) + (f' and {len(names) - 3} more' if len(names) > 3 else '')
  return (
    f'{prog}: {flag}={folder} holds {shown}, which {prog} did not write there (or which changed '
    f'since); pass --overwrite to replace {"it" if len(names) == 1 else "them"}, or choose '
    f'another {flag}.'
  )


def refuse_unsafe(prog: str, folder: str | Path, names: Sequence[str], overwrite: bool) -> None:
  """Ends the command `prog` in one line, before anything is written, unless `names` and the
  manifest may be written in the --out `folder`: each inside it (`check_inside`), and files
  among `names` that it did not write there (`foreign_files`) replaced only with `overwrite`
  (`replace_advice`)."""
  try:
    check_inside(folder, [Path(folder) / n for n in [*names, MANIFEST]])
  except UnsafeOutputError as e:
    sys.exit(f'{prog}: {e}')
  foreign = foreign_files(folder, names)
  if foreign and not overwrite:
    sys.exit(replace_advice(prog, folder, foreign))


def require_writable(prog: str, what: str, folder: str | Path) -> None:
  """Ends the command `prog` in one line, ``<prog>: cannot write <what>: <why>.``, unless files
  can be written in `folder` (`unwritable`); `what` names it as the user gave it (the flag)."""
  problem = unwritable(folder)
  if problem:
    sys.exit(f'{prog}: cannot write {what}: {problem}.')


def unwritable(folder: str | Path) -> str | None:
  """Why files could not be written in `folder`, or None if they can; creates nothing. The
  folder, or for a missing one its nearest existing parent (which must be a folder), gets a
  probe file, written and removed: the operating system's own reason ('Read-only file
  system', 'Permission denied') is the answer, whatever the mount or the user.

  Commands check the folders they will write (launch.py's workdir, crackjax-predict's and
  crackjax-export's --out) with it before any work, so the message comes first and names the
  path, rather than an OSError ('[Errno 17] File exists') after minutes of work."""
  existing = Path(os.path.abspath(folder))
  while not existing.exists():
    existing = existing.parent
  if not existing.is_dir():
    return f'{existing} is a file, not a folder'
  probe = existing / f'.crackjax-write-test-{os.getpid()}'
  try:
    probe.write_bytes(b'')
    probe.unlink()
  except OSError as e:
    return f'{e.strerror or e} ({existing})'
  return None
