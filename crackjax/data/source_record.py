"""A prepared dataset copy knows its source (issue 57): the folder it was made from and a
fingerprint of that folder's listing, so that a later run whose source differs prepares it again
instead of silently reading the old copy.

After a preparation, `write` puts ``crackjax_source.json`` into the copy's version folder: the
manual dir given, the dataset's own folder under it (the common folder of every file the
builder read: ``Datasets/DeepCrack`` of a folder holding several datasets, so another dataset
added beside it changes nothing) and the sha256 of that folder's listing (every file under it:
relative path, size, modification time; `listing`). `changed` compares a run's manual dir with
it: another folder, or the same folder with files added, removed or changed, is a reason to
prepare again (crackjax.data.registry keeps the old copy until the new one is complete). A copy
without a record (prepared before records, or by another tool) is used as it is, and a run
given no manual dir uses the copy as it is: there is no source to compare.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from crackjax.runs import outputs

RECORD = 'crackjax_source.json'


def listing(root: str | os.PathLike) -> dict[str, tuple[int, int]]:
  """{relative path: (size, mtime_ns)} of every file under `root` (hidden ones left out)."""
  out: dict[str, tuple[int, int]] = {}
  root = os.fspath(root)
  for folder, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if not d.startswith('.')]
    for name in files:
      if name.startswith('.'):
        continue
      path = os.path.join(folder, name)
      try:
        st = os.stat(path)
      except OSError:
        continue
      out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
  return out


def _digest(files: dict[str, tuple[int, int]]) -> str:
  text = '\n'.join(f'{k}\t{s}\t{m}' for k, (s, m) in sorted(files.items()))
  return hashlib.sha256(text.encode()).hexdigest()


def source_root(paths: Iterable[str | os.PathLike], manual_dir: str) -> str:
  """The common folder of the files a preparation read (the manual dir if none or if it is
  not under it)."""
  folders = {os.path.dirname(os.path.realpath(p)) for p in paths}
  if not folders:
    return os.path.realpath(manual_dir)
  root = os.path.commonpath(sorted(folders))
  manual = os.path.realpath(manual_dir)
  return root if root == manual or root.startswith(manual + os.sep) else manual


def write(copy_dir: str | os.PathLike, manual_dir: str, read: Iterable[str]) -> dict[str, Any]:
  """Records the source of the copy in `copy_dir` (its version folder): `manual_dir` and the
  listing of the folder the files `read` came from. Returns the record."""
  root = source_root(read, manual_dir)
  files = listing(root)
  record = {
    'manual_dir': os.path.realpath(manual_dir),
    'root': root,
    'files': len(files),
    'listing_sha256': _digest(files),
    'listing': {k: list(v) for k, v in sorted(files.items())},
  }
  Path(copy_dir, RECORD).write_text(outputs.dumps(record, indent=1) + '\n')
  return record


def read(copy_dir: str | os.PathLike) -> dict[str, Any] | None:
  """The copy's record, or None (none written, or unreadable)."""
  try:
    record = json.loads(Path(copy_dir, RECORD).read_text())
  except (OSError, ValueError):
    return None
  return record if isinstance(record, dict) else None


def changed(copy_dir: str | os.PathLike, manual_dir: str | None) -> str | None:
  """Why the copy in `copy_dir` no longer follows `manual_dir` (one phrase), or None: it does,
  or there is nothing to compare (no manual dir given, no record)."""
  record = read(copy_dir)
  if not manual_dir or record is None:
    return None
  given = os.path.realpath(manual_dir)
  if given != record.get('manual_dir'):
    return f'it was prepared from {record.get("manual_dir")}, not {given}'
  root = record.get('root') or given
  if not os.path.isdir(root):
    return f'its source folder {root} is gone'
  files = listing(root)
  if _digest(files) == record.get('listing_sha256'):
    return None
  old = {k: tuple(v) for k, v in (record.get('listing') or {}).items()}
  added = len(files.keys() - old.keys())
  removed = len(old.keys() - files.keys())
  edited = sum(1 for k in files.keys() & old.keys() if files[k] != old[k])
  counts = ((added, 'added'), (removed, 'removed'), (edited, 'changed'))
  parts = [f'{n} file(s) {what}' for n, what in counts if n]
  return f'its source {root} changed since ({", ".join(parts) or "listing differs"})'
