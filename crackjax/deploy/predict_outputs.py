"""How `crackjax-predict` writes a photo's files so that half-written ones never count as done.

Each map (probs/, masks/, overlays/) is written under a temporary name beside its place and
renamed into it once whole, so a full disk or a Ctrl-C never leaves a cut-short file under a
map's name. A photo counts as done once its line is in the progress file of --out
(`Progress`, PROGRESS_FILE: JSON lines; one as its maps are begun, one after all of them are
in place, with its rows of measurements.csv and cracks.csv): the same command again predicts
exactly the photos without that line (writing again only maps it began itself), and its
tables list every photo of the command, those done before included. A line cut short by an
interruption does not count. The file begins with the prediction's settings (model, step,
threshold, tiling, measuring flags): maps of other settings are never mixed into one table.
Once the tables are written the file stays as the folder's manifest (`finish`: its photos
done, then a last line `{"finished": N}`): the same command again over a tree that has grown
predicts only the photos it does not list (a survey's new day of photos), and the photos of
a prediction split into shards are merged into one folder through it
(`crackjax.survey.shards`).

The maps' pixels (`as_8bit`, `overlay`) and the tables' cells (`csv_table`: no cell a
spreadsheet would evaluate) are made here too, and an earlier prediction's maps that a new
one does not hold are removed only inside OUT (`remove_maps`).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image

from crackjax.deploy.photos import PROGRESS_FILE, map_files
from crackjax.runs import outputs

#: A file being written is named so (beside its place) until it is whole.
PARTIAL = '.partial'


def partial_path(path: Path) -> Path:
  return path.with_name(path.name + PARTIAL)


def write_whole(path: Path, save: Callable[[Path], None]) -> None:
  """Writes `path` by `save(temporary)` and a rename: it never exists half-written. An error
  of the disk names `path` (`cannot write O/probs/003.png: No space left on device`)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  temporary = partial_path(path)
  try:
    with outputs.naming(path):
      save(temporary)
      os.replace(temporary, path)
  except BaseException:
    with contextlib.suppress(OSError):
      temporary.unlink()
    raise


def save_image(path: Path, array: np.ndarray, format: str, **kwargs: Any) -> None:
  """`array` as an image file at `path`, whole or not at all (`write_whole`)."""
  write_whole(path, lambda p: PIL.Image.fromarray(array).save(p, format=format, **kwargs))


def write_text(path: Path, text: str) -> None:
  """`text` as `path` (UTF-8), whole or not at all."""
  write_whole(path, lambda p: p.write_text(text, encoding='utf-8'))


class SettingsDiffer(ValueError):
  """--out holds a prediction of other settings, unfinished or finished (the message says
  which)."""


class Progress:
  """The progress file of a prediction in `out` (module docstring).

  Attributes:
    done: {name: {'row': ..., 'cracks': [...]}} of the photos done, by an earlier run of the
      same command too.
  """

  def __init__(self, out: Path, settings: Mapping[str, Any], *, restart: bool):
    """Opens (or with `restart`, starts) the progress file of `out` for `settings`.

    Raises:
      SettingsDiffer: the file was begun with other settings (and not `restart`).
    """
    self.path = Path(out) / PROGRESS_FILE
    self.settings = json.loads(outputs.dumps(dict(settings)))
    self.done: dict[str, dict[str, Any]] = {}
    self.begun: set[str] = set()
    earlier = None if restart else read_progress(out)
    if earlier is not None and not earlier[1] and not earlier[2]:
      earlier = None  # nothing was begun (every photo skipped): nothing to finish
    if earlier is not None:
      old, self.done, self.begun = earlier
      changed = [
        k for k in sorted(set(old) | set(self.settings)) if old.get(k) != self.settings.get(k)
      ]
      if changed:
        shown = '; '.join(f'{k}: {old.get(k)} -> {self.settings.get(k)}' for k in changed[:3])
        if unfinished(out):
          raise SettingsDiffer(
            f'{out} holds an unfinished prediction made with other settings ({shown}): run it '
            f'again with its own flags to finish it, pass --overwrite to start again, or choose '
            f'another --out.'
          )
        raise SettingsDiffer(
          f'{out} holds a prediction made with other settings ({shown}): its photos would be '
          'kept, not predicted again; pass --overwrite to replace it, or choose another --out.'
        )
    self.path.parent.mkdir(parents=True, exist_ok=True)
    if earlier is None:
      write_text(self.path, outputs.dumps({'settings': self.settings}) + '\n')

  def is_done(self, name: str, out: Path) -> bool:
    """Whether `name` was done (its line is here) and its maps are still all there."""
    return name in self.done and all(f.is_file() for f in map_files(out, name))

  def started(self, name: str) -> bool:
    """Whether this command began writing the maps of `name` (then maps of that name in
    --out are its own, perhaps cut short, and may be written again)."""
    return name in self.begun or name in self.done

  def start(self, name: str) -> None:
    """Records that the maps of `name` are about to be written."""
    self._append({'started': name})
    self.begun.add(name)

  def add(self, name: str, row: Mapping[str, Any], cracks: list[Mapping[str, Any]]) -> None:
    """Records `name` as done (after all its maps are in place)."""
    self._append({'name': name, 'row': dict(row), 'cracks': [dict(c) for c in cracks]})
    self.done[name] = {'row': dict(row), 'cracks': [dict(c) for c in cracks]}

  def _append(self, entry: Mapping[str, Any]) -> None:
    with outputs.naming(self.path), self.path.open('a', encoding='utf-8') as f:
      f.write(outputs.dumps(dict(entry)) + '\n')
      f.flush()


def read_progress(
  out: Path,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], set[str]] | None:
  """(settings, done, started) of `out`'s progress file; None if there is none (or it is
  unreadable: then nothing counts as done)."""
  try:
    lines = (Path(out) / PROGRESS_FILE).read_text(encoding='utf-8').splitlines()
  except (OSError, UnicodeDecodeError):
    return None
  settings, done, started = None, {}, set()
  for line in lines:
    try:
      entry = json.loads(line)
    except ValueError:
      continue  # the last line, cut short by an interruption: that photo is not done
    if not isinstance(entry, dict):
      continue
    if settings is None and isinstance(entry.get('settings'), dict):
      settings = entry['settings']
    elif isinstance(entry.get('name'), str) and isinstance(entry.get('row'), dict):
      done[entry['name']] = {'row': entry['row'], 'cracks': list(entry.get('cracks') or [])}
    elif isinstance(entry.get('started'), str):
      started.add(entry['started'])
  return None if settings is None else (settings, done, started)


#: The key of a finished prediction's last line (`finish`).
FINISHED = 'finished'


def _last_entry(out: Path) -> dict[str, Any] | None:
  """The last whole JSON line of `out`'s progress file (None: none, or cut short)."""
  try:
    with (Path(out) / PROGRESS_FILE).open('rb') as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - 4096))
      tail = f.read().decode('utf-8', 'replace').splitlines()
  except OSError:
    return None
  try:
    entry = json.loads(tail[-1]) if tail else None
  except ValueError:
    return None
  return entry if isinstance(entry, dict) else None


def unfinished(out: Path) -> bool:
  """Whether `out` holds a prediction begun and not finished (its tables, if any, are its
  own, cut short: the same command again replaces them)."""
  earlier = read_progress(out)
  if earlier is None or not (earlier[1] or earlier[2]):
    return False
  return FINISHED not in (_last_entry(out) or {})


def finish(out: Path) -> None:
  """Once the tables list every photo: the progress file rewritten as the folder's manifest,
  its settings, every photo done (by this command or an earlier one into `out`) and a last
  line `{"finished": N}` (the lines of photos begun and not done go)."""
  earlier = read_progress(out)
  if earlier is None:
    return
  settings, done, _ = earlier
  lines = [outputs.dumps({'settings': settings})]
  lines += [
    outputs.dumps({'name': n, 'row': d['row'], 'cracks': d['cracks']}) for n, d in done.items()
  ]
  lines.append(outputs.dumps({FINISHED: len(done)}))
  write_text(Path(out) / PROGRESS_FILE, '\n'.join(lines) + '\n')


# ------------------------------------------------------------------------ the tables and maps

OVERLAY_COLOUR = (255, 0, 0)


def earlier_names(table: Path) -> list[str]:
  """The output names an earlier prediction listed in its measurements.csv ([] if none)."""
  try:
    with table.open(newline='') as f:
      return [csv_text(row['name']) for row in csv.DictReader(f) if row.get('name')]
  except (OSError, csv.Error, UnicodeDecodeError):
    return []


def _own_name(name: str) -> bool:
  """Whether `name` (read from an earlier measurements.csv) is one `output_names` gives: a
  relative path without '..', which cannot lead out of OUT by itself."""
  return bool(name) and not Path(name).is_absolute() and '..' not in Path(name).parts


def remove_maps(out: Path, names: Sequence[str]) -> list[str]:
  """Removes the map files of `names` in `out` (and folders that become empty); returns
  the names that had any. Only the files `map_files` names are touched, and only inside
  `out`.

  Raises:
    outputs.UnsafeOutputError: a file to remove is, or lies under, a symbolic link below
      `out`, or resolves outside it (nothing of that name is removed).
  """
  removed = []
  for name in names:
    if not _own_name(name):
      continue  # not a name this tool writes: an edited table must not reach outside `out`
    files = [f for f in map_files(out, name) if f.is_file()]
    # The command checked these before it began; checked again just before they go, since
    # a link planted meanwhile would carry the delete outside `out`.
    outputs.check_inside(out, files)
    for f in files:
      f.unlink()
      folder = f.parent
      while folder != out and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
    if files:
      removed.append(name)
  return removed


def overlay(photo: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """The photo with crack pixels painted OVERLAY_COLOUR."""
  out = photo.copy()
  out[mask] = OVERLAY_COLOUR
  return out


def as_8bit(prob: np.ndarray) -> np.ndarray:
  """The probability map as 8-bit grey (255 = 1), a band of rows at a time: no float copy of
  a whole large map."""
  result = np.empty(prob.shape, np.uint8)
  rows = max(1, (1 << 22) // max(prob.shape[1], 1))
  for y in range(0, prob.shape[0], rows):
    band = np.clip(prob[y : y + rows], 0.0, 1.0) * 255.0
    result[y : y + rows] = np.round(band)
  return result


#: What a spreadsheet reads as the start of a formula: a text cell beginning with one is
#: written behind a single quote, as OWASP advises against "CSV injection" (a photo named
#: '=HYPERLINK(...).jpg' must stay text in measurements.csv and cracks.csv).
FORMULA_STARTS = ('=', '+', '-', '@', '\t', '\r')


def csv_cell(value):
  """`value` as a CSV cell that no spreadsheet evaluates (numbers unchanged)."""
  if isinstance(value, str) and value.startswith(FORMULA_STARTS):
    return "'" + value
  return value


def csv_text(cell: str) -> str:
  """The text a `csv_cell` cell was written from."""
  if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS):
    return cell[1:]
  return cell


def csv_table(fields: Sequence[str], rows: Sequence[dict]) -> str:
  buffer = io.StringIO(newline='')
  writer = csv.DictWriter(buffer, fieldnames=fields)
  writer.writeheader()
  writer.writerows({k: ('' if v is None else csv_cell(v)) for k, v in row.items()} for row in rows)
  return buffer.getvalue()
