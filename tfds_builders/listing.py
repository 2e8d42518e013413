"""Finding a dataset's files: `list_images` lists a directory's images by stem (png, jpg, jpeg,
bmp, tif, tiff; any case); `pair_by_stem` matches images and masks by stem (an image without a
mask, a mask without an image and duplicate stems are errors); `find_dataset_dirs` locates
``(image_dir, gt_dir)`` of a published dataset under a manual download directory, tolerating the
usual folder-name variants, and `find_pairs` lists its pairs."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from crackjax.tfds_builders.contract import normalise
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError, warn

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.tif', '.tiff')
# Folder names (normalised: lower case, letters and digits only) that hold images / masks.
IMAGE_DIR_NAMES = frozenset(
  {
    'image',
    'images',
    'img',
    'imgs',
    'im',
    'original',
    'originals',
    'input',
    'inputs',
    'jpegimages',
    'rgb',
  }
)
GT_DIR_NAMES = frozenset(
  {
    'gt',
    'gts',
    'groundtruth',
    'groundtruths',
    'label',
    'labels',
    'mask',
    'masks',
    'annotation',
    'annotations',
    'seg',
    'segmentation',
    'lab',
  }
)
# Files that are never data and are skipped without a warning.
_IGNORED_FILES = frozenset({'.ds_store', 'thumbs.db', 'desktop.ini'})


def is_image_file(path: epath.Path) -> bool:
  return path.suffix.lower() in IMAGE_EXTENSIONS


def _identity(stem: str) -> str:
  return stem


def list_images(
  directory: epath.PathLike, what: str = 'image', *, stem_key: Callable[[str], str] = _identity
) -> dict[str, epath.Path]:
  """Maps ``stem_key(stem)`` -> path for every image file of ``directory`` (not recursive).

  Raises:
    DatasetError: if the directory does not exist, holds no image file, or two files share a
      key (e.g. ``a.png`` and ``a.jpg``). Other files are skipped with a warning.
  """
  directory = epath.Path(directory)
  if not directory.is_dir():
    raise DatasetError(f'{what.capitalize()} directory {directory} does not exist.')
  found: dict[str, epath.Path] = {}
  skipped = []
  for path in sorted(directory.iterdir()):
    if path.name.startswith('.') or path.name.lower() in _IGNORED_FILES or path.is_dir():
      continue
    if not is_image_file(path):
      skipped.append(path.name)
      continue
    key = stem_key(path.stem)
    if key in found:
      raise DatasetError(f'Two {what} files for one name {key!r}: {found[key]} and {path}.')
    found[key] = path
  if skipped:
    warn(
      f'Skipped {len(skipped)} file(s) in {directory} that are not images '
      f'({"/".join(IMAGE_EXTENSIONS)}): {", ".join(skipped[:10])}'
      + (' ...' if len(skipped) > 10 else '')
    )
  if not found:
    raise DatasetError(
      f'{what.capitalize()} directory {directory} holds no image files '
      f'({", ".join(IMAGE_EXTENSIONS)}).'
    )
  return found


@dataclasses.dataclass(frozen=True)
class Pair:
  """One record to be: its name, its image file and its mask (ground-truth) file."""

  name: str
  image_path: epath.Path
  mask_path: epath.Path


def _suffix_hint(no_mask: Sequence[str], spare: set[str], masks: Mapping[str, Any]) -> str:
  """'; the masks are named <name><suffix> ...' when every unmatched image has a spare mask
  whose name is its own plus one common suffix (e.g. '_mask'), else ''."""
  suffixes = set()
  for key in no_mask:
    found = [m[len(key) :] for m in spare if m.startswith(key) and len(m) > len(key)]
    if len(found) != 1:
      return ''
    suffixes.add(found[0])
  if len(suffixes) != 1:
    return ''
  (suffix,) = suffixes
  example = masks[f'{no_mask[0]}{suffix}']
  return (
    f'; the masks are named <image name>{suffix} (e.g. {epath.Path(example).name}): set '
    f'--config.data.folder.mask_suffix={suffix}'
  )


def pair_by_stem(
  images: Mapping[str, epath.Path],
  masks: Mapping[str, epath.Path],
  *,
  image_dir: epath.PathLike,
  mask_dir: epath.PathLike,
) -> list[Pair]:
  """Pairs images and masks with equal keys, sorted by key; any unmatched file is an error."""
  no_mask = sorted(set(images) - set(masks))
  if no_mask:
    names = ', '.join(str(images[k]) for k in no_mask[:5]) + (' ...' if len(no_mask) > 5 else '')
    raise DatasetError(
      f'{len(no_mask)} image(s) have no mask in {mask_dir} (matched by file name without '
      f'extension): {names}{_suffix_hint(no_mask, set(masks) - set(images), masks)}'
    )
  no_image = sorted(set(masks) - set(images))
  if no_image:
    names = ', '.join(str(masks[k]) for k in no_image[:5]) + (' ...' if len(no_image) > 5 else '')
    raise DatasetError(f'{len(no_image)} mask(s) have no image in {image_dir}: {names}')
  return [Pair(k, images[k], masks[k]) for k in sorted(images)]


def random_split(names: Sequence[str], n_train: int, seed: int = 0) -> tuple[list[str], list[str]]:
  """Sorts ``names``, permutes them with ``default_rng(seed)``: first n_train train, rest test."""
  ordered = sorted(names)
  order = np.random.default_rng(seed).permutation(len(ordered))
  return (
    sorted(ordered[i] for i in order[:n_train]),
    sorted(ordered[i] for i in order[n_train:]),
  )


# ----------------------------------------------------------------------------- locating


def walk_dirs(root: epath.Path, max_depth: int) -> Iterable[epath.Path]:
  yield root
  if max_depth == 0:
    return
  try:
    children = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith('.'))
  except OSError:
    return
  for child in children:
    yield from walk_dirs(child, max_depth - 1)


def _has_images(directory: epath.Path) -> bool:
  return any(is_image_file(p) for p in directory.iterdir() if not p.is_dir())


def find_dataset_dirs(
  root: epath.PathLike, key: str, *, layout: str, max_depth: int = 4
) -> tuple[epath.Path, epath.Path]:
  """Finds ``(image_dir, gt_dir)`` of the dataset ``key`` (normalised name) under ``root``.

  Accepted, with any case and separators in folder names (``CRKWH100``, ``crkwh100``):

  * ``<key>/{image,images,img,...}/`` + ``<key>/{gt,groundTruth,label,mask,...}/``;
  * ``<key>/`` holding the images + ``<key>/gt/`` or a sibling ``<key>_gt/`` (``<key>GT``...);
  * ``{IMAGES,...}/<key>/`` + ``{GROUND_TRUTH,gt,...}/<key>/`` (the CrackDataset layout);
  * ``root`` itself holding an image folder and a ground-truth folder.

  Raises:
    DatasetNotFoundError: none or several candidates; the message shows ``layout``.
  """
  root = epath.Path(root)
  if not root.is_dir():
    raise DatasetNotFoundError(f'{root} does not exist. Expected layout:\n{layout}')
  candidates: list[tuple[epath.Path, epath.Path]] = []
  under_image, under_gt = [], []
  gt_names = GT_DIR_NAMES | {key + g for g in GT_DIR_NAMES}
  image_names = IMAGE_DIR_NAMES | {key + i for i in IMAGE_DIR_NAMES}

  def subdirs(d: epath.Path) -> dict[str, list[epath.Path]]:
    out: dict[str, list[epath.Path]] = {}
    for s in d.iterdir():
      if s.is_dir():
        out.setdefault(normalise(s.name), []).append(s)
    return out

  def image_and_gt(d: epath.Path) -> tuple[epath.Path, epath.Path] | None:
    subs = subdirs(d)
    imgs = [p for n, ps in subs.items() if n in image_names for p in ps]
    gts = [p for n, ps in subs.items() if n in gt_names for p in ps]
    if len(gts) == 1 and len(imgs) == 1:
      return imgs[0], gts[0]
    if len(gts) == 1 and not imgs and _has_images(d):
      return d, gts[0]
    return None

  for d in walk_dirs(root, max_depth):
    name = normalise(d.name)
    if name == key:
      found = image_and_gt(d)
      if found is None and _has_images(d):
        siblings = [
          s
          for s in d.parent.iterdir()
          if s.is_dir() and normalise(s.name) in {key + g for g in GT_DIR_NAMES}
        ]
        if len(siblings) == 1:
          found = (d, siblings[0])
      if found:
        candidates.append(found)
      elif d != root:
        parent = normalise(d.parent.name)
        if parent in IMAGE_DIR_NAMES:
          under_image.append(d)
        elif parent in GT_DIR_NAMES:
          under_gt.append(d)
  if len(under_image) == 1 and len(under_gt) == 1:
    candidates.append((under_image[0], under_gt[0]))
  if not candidates and normalise(root.name) != key:
    found = image_and_gt(root)
    if found:
      candidates.append(found)
  candidates = list(dict.fromkeys(candidates))
  if len(candidates) == 1:
    return candidates[0]
  if not candidates:
    raise DatasetNotFoundError(
      f'Could not find the images and ground truth of {key!r} under {root}. '
      f'Expected layout:\n{layout}'
    )
  listing = '\n'.join(f'  images {i}  ground truth {g}' for i, g in candidates)
  raise DatasetNotFoundError(
    f'Several copies of {key!r} under {root}; point the manual dir at one of them:\n{listing}'
  )


def find_pairs(
  root: epath.PathLike,
  key: str,
  *,
  layout: str,
  what: str = '',
  image_key: Callable[[str], str] = _identity,
  mask_key: Callable[[str], str] = _identity,
) -> list[Pair]:
  """The (image, mask) pairs of dataset ``key`` under ``root`` (`find_dataset_dirs`), sorted.

  Args:
    root: the manual dir.
    key: normalised dataset name (``'crkwh100'``).
    layout: the expected layout, shown when the folders are not found.
    what: prefix of 'image' / 'ground-truth' in messages (e.g. ``'crkwh100 '``).
    image_key / mask_key: file stem -> the name that pairs an image with its mask.
  """
  image_dir, gt_dir = find_dataset_dirs(root, key, layout=layout)
  images = list_images(image_dir, f'{what}image', stem_key=image_key)
  masks = list_images(gt_dir, f'{what}ground-truth', stem_key=mask_key)
  return pair_by_stem(images, masks, image_dir=image_dir, mask_dir=gt_dir)


def manual_dir_or_raise(dl_manager: tfds.download.DownloadManager, instructions: str) -> epath.Path:
  """``dl_manager.manual_dir``, turning TFDS' AssertionError into DatasetNotFoundError."""
  try:
    return dl_manager.manual_dir
  except AssertionError as e:
    # TFDS' own words end in 'using instructions:' and its copy of them; ours follow at once
    # (was: '... using instructions:).' and the instructions on the next lines, which read as
    # if TFDS had none).
    found = str(e.args[0] if e.args else e).split(' Create it and download', 1)[0].strip()
    raise DatasetNotFoundError(
      f"{found} Put the dataset's files there, or pass their folder as "
      f'DownloadConfig(manual_dir=DIR) (launch.py: --config.data.manual_dir=DIR), as follows:\n'
      f'{textwrap.dedent(instructions).strip()}'
    ) from None


def fingerprint_files(paths: Iterable[epath.PathLike]) -> list[tuple[str, int, int]]:
  """(name, size, mtime_ns) of every file in ``paths`` (directories listed one level)."""
  out = []
  for p in paths:
    p = os.fspath(p)
    if os.path.isdir(p):
      for entry in sorted(os.scandir(p), key=lambda e: e.name):
        if entry.is_file():
          st = entry.stat()
          out.append((os.path.join(p, entry.name), st.st_size, st.st_mtime_ns))
    elif os.path.isfile(p):
      st = os.stat(p)
      out.append((p, st.st_size, st.st_mtime_ns))
  return out
