"""The photos of `crackjax-predict`: which files its inputs name, how each is read, what its
outputs are called, and which files in an output folder are crackjax's own.

Outputs of crackjax are never inputs: a search of folders and globs leaves out the command's
--out (a photos/pred inside photos/) and every file an earlier crackjax command recorded in an
output folder (its manifest `.crackjax-outputs.json`, and the progress file of an unfinished
prediction), with one line that says so. A photo named twice (a folder and a file in it) is
predicted once, said.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import PIL.Image
import PIL.ImageOps

from crackjax.runs import outputs

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.tif', '.tiff', '.webp', '.gif')
# PIL refuses images over twice its MAX_IMAGE_PIXELS (a guard against decompression bombs);
# the same limit, in megapixels, is --max_megapixels's default.
DEFAULT_MAX_MEGAPIXELS = 2 * PIL.Image.MAX_IMAGE_PIXELS / 1e6
#: The folders of a prediction's maps in its --out, and each map's extension.
MAP_KINDS = (('probs', '.png'), ('masks', '.png'), ('overlays', '.jpg'))
#: An unfinished prediction's record in its --out: one JSON line per photo done
#: (`crackjax.deploy.predict_outputs`).
PROGRESS_FILE = '.crackjax-predict.jsonl'


def map_files(out: Path, name: str) -> list[Path]:
  """The files crackjax-predict writes for output `name`: probability map, mask, overlay."""
  return [out / kind / f'{name}{ext}' for kind, ext in MAP_KINDS]


class UnreadableImageError(ValueError):
  """A file that is not an image PIL can decode (the message names it and says why)."""


def _distinct_figures(value: float, limit: float) -> tuple[str, str]:
  """`value` and `limit` with the fewest decimals (at most 6) that still tell them apart, and
  each at least to its first significant digit.

  So a 4.0001 MP photo over a 4 MP limit does not read "4 MP is over the 4 MP limit", nor a
  0.2 MP photo over a 0.001 MP limit "over the 0 MP limit".
  """

  def shown(x: float, decimals: int) -> str:
    if 0 < abs(x) < 1:  # at least to the first significant digit
      decimals = max(decimals, min(6, -math.floor(math.log10(abs(x)))))
    text = f'{x:.{decimals}f}'
    return text.rstrip('0').rstrip('.') if '.' in text else text  # 4.10 -> 4.1, 4.00 -> 4

  decimals = next((d for d in range(7) if f'{value:.{d}f}' != f'{limit:.{d}f}'), 6)
  return shown(value, decimals), shown(limit, decimals)


def load_photo(
  path: str | Path,
  *,
  max_megapixels: float = DEFAULT_MAX_MEGAPIXELS,
  notes: list[str] | None = None,
) -> np.ndarray:
  """An image file as H x W x 3 uint8 RGB, upright (EXIF orientation applied).

  Grey, palette and RGBA images are converted to RGB (alpha dropped); 16-bit and other
  high-bit-depth grey images are scaled by their actual range (the smallest bit depth that
  holds their maximum, at least 8), so a 12-bit image is not stored almost black. An animated
  image gives its first frame, with a line in `notes`.

  Raises:
    UnreadableImageError: the file cannot be decoded (truncated, not an image, ...) or has
      more than `max_megapixels` million pixels (read from its header, before decoding).
  """
  # Our own limit (from the header, below) replaces PIL's, so that the message can name the
  # flag that lifts it.
  pil_limit, PIL.Image.MAX_IMAGE_PIXELS = PIL.Image.MAX_IMAGE_PIXELS, None
  try:
    with PIL.Image.open(path) as image:
      megapixels = image.width * image.height / 1e6
      if megapixels > max_megapixels:
        size, limit = _distinct_figures(megapixels, max_megapixels)
        raise UnreadableImageError(
          f'{path}: {image.width}x{image.height} ({size} MP) is over the {limit} MP limit '
          f'that guards against decompression bombs; pass '
          f'--max_megapixels={int(megapixels) + 1} if the file is trusted'
        )
      frames = getattr(image, 'n_frames', 1)
      image.load()  # PIL decodes lazily: force it so broken files fail here, by name.
      image = PIL.ImageOps.exif_transpose(image)
  except UnreadableImageError:
    raise
  except Exception as e:  # PIL raises OSError, SyntaxError, ValueError ... for bad files.
    raise UnreadableImageError(f'{path}: cannot read image ({type(e).__name__}: {e})') from e
  finally:
    PIL.Image.MAX_IMAGE_PIXELS = pil_limit
  if frames > 1 and notes is not None:
    notes.append(f'{path} is animated ({frames} frames): predicted its first frame')
  if image.width == 0 or image.height == 0:
    raise UnreadableImageError(f'{path}: empty image ({image.width}x{image.height})')
  if image.mode in ('I', 'I;16', 'I;16B', 'I;16L', 'F'):
    grey = np.asarray(image).astype(np.float64)
    top = max(float(grey.max(initial=0)), 1.0)
    full = 255.0 if top <= 255 else float(2 ** int(np.ceil(np.log2(top + 1))) - 1)
    grey = np.clip(np.round(grey * (255.0 / full)), 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=2)
  return np.asarray(image.convert('RGB'))


def photo_size(path: str | Path) -> tuple[int, int] | None:
  """(width, height) of an image file from its header, without decoding it; None if it
  cannot be read (`load_photo` then says why)."""
  pil_limit, PIL.Image.MAX_IMAGE_PIXELS = PIL.Image.MAX_IMAGE_PIXELS, None
  try:
    with PIL.Image.open(path) as image:
      return image.width, image.height
  except Exception:  # PIL raises OSError, SyntaxError, ValueError ... for bad files
    return None
  finally:
    PIL.Image.MAX_IMAGE_PIXELS = pil_limit


@dataclasses.dataclass(frozen=True)
class Input:
  """An image to predict: its path, and its path under the folder it was found in (its file
  name for a file or a glob match), which names its outputs."""

  path: Path
  relative: Path


def find_inputs(
  specs: Sequence[str], *, out: str | Path | None = None
) -> tuple[list[Input], list[str]]:
  """Image files named by `specs` (files, folders, globs), in order, without duplicates.

  Args:
    specs: files, folders and globs, as given on the command line.
    out: the command's output folder: where it lies inside a folder searched, it is left out
      (its maps would be predicted as photos); where a searched folder lies inside it, only
      its map folders (probs/, masks/, overlays/) are.

  Returns:
    (inputs, problems): folders contribute their image files, subfolders included (sorted;
    hidden files and folders left out); a spec that matches nothing, and the other files a
    folder holds (counted, a few named), are problems, reported by the caller; so are the
    outputs of crackjax left out (one line a spec) and photos named more than once.
  """
  inputs: dict[Path, Input] = {}
  problems = []
  repeated = []
  owned = _OwnOutputs(out)
  for spec in specs:
    path = Path(os.path.expanduser(spec))
    if path.is_dir():
      visible = sorted(_folder_files(path, spec, problems, owned))
      visible = [p for p in visible if not owned.lists(p)]
      found = [Input(p, p.relative_to(path)) for p in visible if _is_image(p)]
      others = [p for p in visible if not _is_image(p)]
      for root, n in _unlisted_outputs(found, path).items():
        problems.append(
          f'note: {root} looks like the output of crackjax-predict (probs/, masks/, overlays/, '
          f'measurements.csv) but has no {outputs.MANIFEST}: its {n} map(s) are predicted as '
          "photos; name the photos' folder instead, or delete those maps"
        )
      if not found:
        problems.append(f'{spec}: folder holds no image files ({", ".join(IMAGE_EXTENSIONS)})')
      elif others:
        named = ', '.join(str(p.relative_to(path)) for p in others[:3])
        more = ', ...' if len(others) > 3 else ''
        problems.append(
          f'{spec}: skipped {len(others)} file(s) that are not images ({named}{more})'
        )
    elif path.is_file():
      found = [Input(path, Path(path.name))]
    else:
      matches = sorted(Path(p) for p in glob.glob(os.path.expanduser(spec), recursive=True))
      found = [
        Input(p, Path(p.name))
        for p in matches
        if p.is_file() and not owned.holds(p, _glob_root(spec)) and not owned.lists(p)
      ]
      if not found and not owned.anything():
        problems.append(f'{spec}: no such file, folder or matching files')
    if owned.anything():
      problems.append(f'{spec}: {owned.said()}')
    for item in found:
      key = item.path.resolve()
      if key in inputs:
        repeated.append(item.path)
      inputs.setdefault(key, item)
  if repeated:
    more = f' and {len(repeated) - 1} more' if len(repeated) > 1 else ''
    problems.append(
      f'{repeated[0]}{more} named more than once (a folder and a file in it, or twice): each '
      'photo is predicted once'
    )
  return list(inputs.values()), problems


def _unlisted_outputs(found: Sequence[Input], searched: Path) -> dict[Path, int]:
  """{output folder: maps found in it} for the inputs under a folder laid out as
  crackjax-predict's output (a map folder beside measurements.csv) whose manifest is gone:
  the manifest is how outputs are told from photos, so these are only said, not left out."""
  kinds = {kind for kind, _ in MAP_KINDS}
  counts: dict[Path, int] = {}
  for item in found:
    for folder in item.path.parents:
      if folder == searched.parent:
        break
      root = folder.parent
      if folder.name in kinds and (root / 'measurements.csv').is_file():
        if not (root / outputs.MANIFEST).exists():
          counts[root] = counts.get(root, 0) + 1
        break
  return counts


def _glob_root(spec: str) -> Path:
  """The folder a glob searches: its leading parts without a wildcard."""
  parts = Path(os.path.expanduser(spec)).parts
  fixed = [p for p in parts[: next((i for i, p in enumerate(parts) if glob.has_magic(p)), None)]]
  return Path(*fixed) if fixed else Path('.')


class _OwnOutputs:
  """What crackjax wrote where inputs are searched: the command's own --out, and the files
  listed in the manifest (`outputs.MANIFEST`) or progress file (PROGRESS_FILE) of an output
  folder; counted as they are left out, for one line a spec (`said`)."""

  def __init__(self, out: str | Path | None):
    self.given = out  # as the user wrote it, for the line
    self.out = Path(out).resolve() if out is not None else None
    self._listed: dict[Path, set[Path]] = {}
    self.left_out: list[Path] = []
    self._out_seen = False

  def holds(self, path: Path, root: Path | None = None) -> bool:
    """Whether `path` (a file or folder) lies in --out, where its maps are written: all of it,
    or only its map folders where the folder searched (`root`) lies inside --out."""
    if self.out is None:
      return False
    real = path.resolve()
    inside_out = root is not None and root.resolve().is_relative_to(self.out)
    places = [self.out / kind for kind, _ in MAP_KINDS] if inside_out else [self.out]
    if any(real == p or real.is_relative_to(p) for p in places):
      self._out_seen = True
      return True
    return False

  def lists(self, path: Path) -> bool:
    """Whether `path` is a file an output folder above it records as crackjax's own."""
    real = path.resolve()
    for folder in real.parents:
      if real in self._listing(folder):
        self.left_out.append(path)
        return True
    return False

  def _listing(self, folder: Path) -> set[Path]:
    if folder not in self._listed:
      listed: set[Path] = set()
      try:
        data = json.loads((folder / outputs.MANIFEST).read_text())
        listed |= {(folder / n).resolve() for n in data.get('files', {}) if isinstance(n, str)}
      except (OSError, ValueError, AttributeError):
        pass
      try:
        lines = (folder / PROGRESS_FILE).read_text().splitlines()
      except (OSError, UnicodeDecodeError):
        lines = []
      for line in lines:
        try:
          entry = json.loads(line)
          name = entry.get('name', entry.get('started'))
        except (ValueError, AttributeError):
          continue  # a line cut short by an interruption
        if isinstance(name, str):
          listed |= {p.resolve() for p in map_files(folder, name)}
      self._listed[folder] = listed
    return self._listed[folder]

  def anything(self) -> bool:
    """Whether something was left out since the last `said`."""
    return bool(self.left_out) or self._out_seen

  def said(self) -> str:
    """The line on what was left out (and forgets it, for the next spec)."""
    parts = []
    if self._out_seen:
      parts.append(f'--out={self.given}')
    if self.left_out:
      parts.append(
        f'{len(self.left_out)} file(s) an earlier crackjax command wrote (its {outputs.MANIFEST})'
      )
    self.left_out, self._out_seen = [], False
    return f'left out {" and ".join(parts)}: outputs of crackjax are never read as inputs'


def _folder_files(
  root: Path, spec: str, problems: list[str], owned: _OwnOutputs | None = None
) -> list[Path]:
  """The visible files under `root` (hidden files and folders left out), symbolically linked
  files and folders followed, as most tools that take a folder of photos do. A link to a
  folder searched already (a loop, or a folder inside `root`), a broken link and a folder that
  cannot be read are skipped with a line in `problems`, never silently; the folders of --out
  that `owned` holds are not searched."""
  files, broken, links = [], [], []
  searched = {root.resolve()}
  pending = [root]
  while pending or links:
    if not pending:
      # Links last: a folder reached both directly and through a link is searched once, as
      # itself, and the link is the one named.
      link = links.pop(0)
      real = link.resolve()
      if real in searched or any(p in searched for p in real.parents):
        problems.append(
          f'{spec}: skipped the link {link.relative_to(root)} -> {os.readlink(link)}: that '
          'folder is searched already (a loop, or a folder inside this one)'
        )
        continue
      searched.add(real)
      pending.append(link)
    folder = pending.pop()
    try:
      entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
      problems.append(f'{spec}: cannot read folder {folder} ({e.strerror or e}); skipped')
      continue
    for entry in entries:
      if entry.name.startswith('.'):
        continue
      path = Path(entry.path)
      if entry.is_dir():  # follows a link
        if owned is not None and owned.holds(path, root):
          continue
        (links if entry.is_symlink() else pending).append(path)
      elif entry.is_file():
        files.append(path)
      elif entry.is_symlink():  # neither a file nor a folder behind it
        broken.append(str(path.relative_to(root)))
  if broken:
    more = ', ...' if len(broken) > 3 else ''
    problems.append(
      f'{spec}: skipped {len(broken)} broken link(s) ({", ".join(sorted(broken)[:3])}{more})'
    )
  return files


def _is_image(path: Path) -> bool:
  return path.suffix.lower() in IMAGE_EXTENSIONS


def output_names(inputs: Sequence[Input]) -> list[str]:
  """Unique output names, in order: each input's relative path without its extension
  ('road', 'north/road'). Where several share one (case ignored, as some file systems do),
  those that differ in extension keep it ('road_jpg', 'road_png'); any still alike get their
  folder's name in front, then a counter. The same inputs always get the same names."""

  def key(name: str) -> str:
    return name.lower()

  def suffix(i: int) -> str:
    return inputs[i].path.suffix.lstrip('.').lower()

  names = [item.relative.with_suffix('').as_posix() for item in inputs]
  # Extensions first, but only in a group whose extensions differ: road.jpg in two folders
  # gets its folder ('north_road'), not 'north_road_jpg'.
  suffixes: dict[str, set[str]] = {}
  for i, n in enumerate(names):
    suffixes.setdefault(key(n), set()).add(suffix(i))
  names = [f'{n}_{suffix(i)}' if len(suffixes[key(n)]) > 1 else n for i, n in enumerate(names)]
  counts: dict[str, int] = {}
  for n in names:
    counts[key(n)] = counts.get(key(n), 0) + 1
  names = [
    f'{inputs[i].path.parent.name}_{n}' if counts[key(n)] > 1 else n for i, n in enumerate(names)
  ]
  seen: dict[str, int] = {}
  unique = []
  for n in names:
    seen[key(n)] = seen.get(key(n), 0) + 1
    unique.append(n if seen[key(n)] == 1 else f'{n}_{seen[key(n)]}')
  return unique
