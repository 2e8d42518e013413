"""Code shared by the crackjax TFDS builders: errors, the data contract, file handling and
`PairedImageBuilder`, the base class of every builder.

Everything here validates loudly: every problem raises `DatasetError` (or, for files that are
not where a builder looks, its subclass `DatasetNotFoundError`), or warns with
`CrackDataWarning`, with the offending file's path in the message; nothing is silently dropped.

* `PairedImageBuilder` stores array_record files of the data contract's features; a builder
  lists its (image, mask) pairs per split and may override how one pair is read
  (`load_pair`) and what happens after the size check (`postprocess`).
* `load_rgb` decodes an image fully (so truncated files fail here, naming the file) and
  converts it to RGB (grey, palette, RGBA and 16-bit images are accepted). Images with more
  than 8 bits are read by their actual range: values up to 1023 / 4095 / 16383 / 65535 are
  10- / 12- / 14- / 16-bit data (`full_range`), so 12-bit data in a 16-bit file is not
  stored almost black.
* `load_mask` turns a mask file into uint8 HxW with 1 = crack. Accepted without comment:
  values {0, 1} or {0, max} (max = 255 for 8-bit, the `full_range` of high-bit-depth files,
  1 for 1-bit files). Anything else (e.g. JPEG-compressed masks, anti-aliased strokes) is
  thresholded at ``value > threshold * max`` (default 0.5, i.e. > 127.5 for 8-bit). Colour
  masks whose channels differ are converted to grey first.
* Corrections and suspicious data are reported once per split and condition, not once per
  file: while `PairedImageBuilder` reads a split, the readers note each corrected file in a
  `SplitReport`, and at the end of the split one `CrackDataWarning` per condition gives the
  count and up to five file names (masks thresholded, colour masks converted, high-bit-depth
  images rescaled, nearly black / white images, masks mostly crack, a split without any crack
  pixel). Masks that are mostly crack (usually black cracks on white) are an error instead
  where the builder says so (`PairedImageBuilder.refuse_majority_crack`). Outside a builder
  the readers warn per file.
* `list_images` lists a directory's images by stem (png, jpg, jpeg, bmp, tif, tiff; any case).
* `pair_by_stem` matches images and masks by stem; an image without a mask, a mask without an
  image and duplicate stems are errors.
* `find_dataset_dirs` locates ``(image_dir, gt_dir)`` of a published dataset under a manual
  download directory, tolerating the usual folder-name variants; `find_pairs` lists its pairs.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
import dataclasses
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import PIL.Image
import tensorflow_datasets as tfds
from etils import epath

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


# ----------------------------------------------------------------------------- errors


class DatasetError(ValueError):
  """The dataset cannot be prepared: a file or folder is unusable (the message names it)."""


class DatasetNotFoundError(DatasetError):
  """The files a builder needs are not where it looks (e.g. the manual download is missing)."""


class CrackDataWarning(UserWarning):
  """A file was used after a correction (e.g. a non-binary mask was thresholded)."""


def warn(message: str) -> None:
  warnings.warn(message, CrackDataWarning, stacklevel=2)


# ----------------------------------------------------------------------------- split reports

# Share of crack pixels above which a mask is "mostly crack" (usually inverted polarity).
MAJORITY_CRACK = 0.5
# Mean brightness (0-255) of a stored image below / above which it is reported.
DARK_MEAN, BRIGHT_MEAN = 10.0, 245.0
# File names shown per condition.
MAX_EXAMPLES = 5

# What each condition of a SplitReport says, after '<dataset>/<split>: <count> '.
CONDITIONS = {
  'non_binary': (
    'mask(s) are not binary (e.g. saved as JPEG or anti-aliased) and were thresholded '
    '(the mask threshold sets the cut)'
  ),
  'colour_mask': 'mask(s) are colour images; converted to grey (ITU-R 601 luma) first',
  'high_bit_depth': (
    'image(s) have more than 8 bits per value; read by their actual range (the smallest '
    'of 10/12/14/16 bits that holds their maximum) rather than as 16-bit'
  ),
  'dark_image': (
    f'image(s) are nearly black (mean brightness < {DARK_MEAN:g} of 255); check the files '
    '(e.g. high-bit-depth data exported in the wrong range, or unexposed photos)'
  ),
  'bright_image': (
    f'image(s) are nearly white (mean brightness > {BRIGHT_MEAN:g} of 255); check the files '
    '(over-exposed, or not the photos you meant)'
  ),
  'majority_crack': (
    f'mask(s) are mostly crack (> {MAJORITY_CRACK:.0%} of their pixels): usually black '
    'cracks on white, read with the wrong mask polarity'
  ),
}


@dataclasses.dataclass
class SplitReport:
  """What was corrected or looks wrong in one split, reported once per condition.

  Attributes:
    label: '<dataset>/<split>', the prefix of every message.
    notes: condition (a key of `CONDITIONS`) -> [(file, detail)] in reading order.
    num_masks / num_empty: masks read, and those without a crack pixel.
  """

  label: str
  notes: dict[str, list[tuple[epath.Path, str]]] = dataclasses.field(default_factory=dict)
  num_masks: int = 0
  num_empty: int = 0

  def add(self, condition: str, path: epath.PathLike, detail: str = '') -> None:
    self.notes.setdefault(condition, []).append((epath.Path(path), detail))

  def check(self, image: PIL.Image.Image, mask: np.ndarray, pair: Pair) -> None:
    """Notes a stored image's brightness and its mask's crack share."""
    mean = float(np.asarray(image).mean())
    if mean < DARK_MEAN:
      self.add('dark_image', pair.image_path, f'mean {mean:.1f}')
    elif mean > BRIGHT_MEAN:
      self.add('bright_image', pair.image_path, f'mean {mean:.1f}')
    share = float(np.mean(mask)) if mask.size else 0.0
    self.num_masks += 1
    self.num_empty += share == 0
    if share > MAJORITY_CRACK:
      self.add('majority_crack', pair.mask_path, f'{share:.0%} crack')

  def message(self, condition: str) -> str:
    """'<label>: <n> <what CONDITIONS says>: <up to MAX_EXAMPLES files (detail)>'."""
    entries = self.notes[condition]
    return f'{self.label}: {len(entries)} {CONDITIONS[condition]}: {name_files(entries)}'

  def empty_message(self) -> str | None:
    """The warning for a split none of whose masks has a crack pixel, else None."""
    if not self.num_masks or self.num_empty < self.num_masks:
      return None
    return (
      f'{self.label}: none of its {self.num_masks} mask(s) has a crack pixel. Training on it '
      'learns nothing and F1 on it is 0 or meaningless; check the mask files, the mask '
      'polarity and the mask threshold.'
    )


def name_files(entries: Sequence[tuple[epath.Path, str]], limit: int = MAX_EXAMPLES) -> str:
  """'in DIR: a.png (detail), b.png ... (N more)'; full paths when the folders differ."""
  parents = {p.parent for p, _ in entries}
  shared = len(parents) == 1
  shown = [f'{p.name if shared else p}' + (f' ({d})' if d else '') for p, d in entries[:limit]]
  more = f' ... ({len(entries) - limit} more)' if len(entries) > limit else ''
  return (f'in {next(iter(parents))}: ' if shared else '') + ', '.join(shown) + more


_REPORT: contextvars.ContextVar[SplitReport | None] = contextvars.ContextVar(
  'crackjax_split_report', default=None
)


@contextlib.contextmanager
def reporting_to(report: SplitReport | None) -> Iterator[None]:
  """Within the block, the readers note corrections in ``report`` instead of warning."""
  token = _REPORT.set(report)
  try:
    yield
  finally:
    _REPORT.reset(token)


def note(condition: str, path: epath.PathLike, detail: str, message: str) -> None:
  """Notes a corrected file in the active `SplitReport`, or warns ``message`` without one."""
  report = _REPORT.get()
  if report is None:
    warnings.warn(message, CrackDataWarning, stacklevel=3)
  else:
    report.add(condition, path, detail)


# ----------------------------------------------------------------------------- data contract


def features() -> tfds.features.FeaturesDict:
  """The feature dict of docs/architecture.md's data contract (PNG-encoded, lossless)."""
  return tfds.features.FeaturesDict(
    {
      'image': tfds.features.Image(shape=(None, None, 3), dtype=np.uint8, encoding_format='png'),
      'mask': tfds.features.Image(shape=(None, None, 1), dtype=np.uint8, encoding_format='png'),
      'name': tfds.features.Text(),
    }
  )


class _LocalDatasetInfo(tfds.core.DatasetInfo):
  """DatasetInfo of a dataset that is only ever prepared from local files.

  Before a builder's data is prepared, TFDS asks `initialize_from_bucket` for metadata
  pre-computed in gs://tfds-data, where none of the crack datasets is; it creates an empty
  temporary directory first and never removes it: one more in /tmp for every builder built
  (thousands after a test run, one per launch for a user)."""

  def initialize_from_bucket(self) -> None:
    """Nothing to fetch: the metadata comes from preparing the local files."""


def dataset_info(
  builder: tfds.core.DatasetBuilder,
  description: str,
  *,
  homepage: str | None = None,
  citation: str | None = None,
) -> tfds.core.DatasetInfo:
  """DatasetInfo shared by the crack builders: the contract's features, (image, mask) as
  supervised keys, and records kept in the order written (sorted names)."""
  return _LocalDatasetInfo(
    builder=builder,
    description=description,
    features=features(),
    supervised_keys=('image', 'mask'),
    homepage=homepage,
    citation=citation,
    disable_shuffling=True,
  )


def example(image: PIL.Image.Image, mask: np.ndarray, name: str) -> dict[str, Any]:
  """A record of the data contract. PIL images, so TFDS encodes with PIL, not TensorFlow."""
  return {'image': image, 'mask': PIL.Image.fromarray(mask, mode='L'), 'name': name}


def normalise(name: str) -> str:
  """'GROUND_TRUTH' -> 'groundtruth', 'CRKWH100-gt' -> 'crkwh100gt'."""
  return re.sub(r'[^a-z0-9]', '', name.lower())


# ----------------------------------------------------------------------------- reading


def read_pil(path: epath.PathLike, what: str = 'image') -> PIL.Image.Image:
  """Opens and fully decodes ``path`` (PIL is lazy: force it so bad files fail here)."""
  path = epath.Path(path)
  try:
    with path.open('rb') as f:
      image = PIL.Image.open(f)
      image.load()
  except Exception as e:  # OSError, SyntaxError, ValueError, DecompressionBombError ...
    raise DatasetError(f'Cannot read {what} {path}: {type(e).__name__}: {e}') from e
  if image.width == 0 or image.height == 0:
    raise DatasetError(f'{what.capitalize()} {path} is empty ({image.width}x{image.height}).')
  return image


def full_range(maximum: float) -> int:
  """The full scale of integer data whose largest value is ``maximum``: 255 up to 255, else
  the smallest of 2**10 - 1, 2**12 - 1, 2**14 - 1, 2**16 - 1 that holds it (12-bit data in a
  16-bit file: 4095), else ``maximum`` itself."""
  if maximum <= 255:
    return 255
  for bits in (10, 12, 14, 16):
    if maximum < 2**bits:
      return 2**bits - 1
  return int(maximum)


def _to_8bit(array: np.ndarray) -> np.ndarray:
  if array.dtype == np.uint8:
    return array
  if array.dtype == bool:
    return array.astype(np.uint8) * 255
  if np.issubdtype(array.dtype, np.floating):
    top = 1.0 if array.max(initial=0) <= 1.0 else float(array.max())
  else:
    top = float(full_range(array.max(initial=0)))
  return np.clip(np.round(array.astype(np.float64) * (255.0 / top)), 0, 255).astype(np.uint8)


def load_rgb(path: epath.PathLike) -> PIL.Image.Image:
  """Reads an image of any common format/mode as an 8-bit RGB ``PIL.Image``.

  Grey images of more than 8 bits are scaled by their `full_range` (12-bit data in a 16-bit
  file by 4095, not 65535); that correction is noted (see `note`) unless the data is 16-bit.
  """
  image = read_pil(path, 'image')
  if image.mode == 'RGB':
    return image
  if image.mode in ('I', 'I;16', 'I;16B', 'I;16L', 'F'):  # 16-bit / float grey: scale to 8 bits.
    array = np.asarray(image)
    if not np.issubdtype(array.dtype, np.floating):
      top = full_range(array.max(initial=0))
      if 255 < top < 65535:
        bits = top.bit_length()
        note(
          'high_bit_depth',
          path,
          f'max {array.max()}: {bits}-bit',
          f'Image {path} holds {bits}-bit data (maximum {array.max()}); scaled by {top}.',
        )
    return PIL.Image.fromarray(_to_8bit(array), mode='L').convert('RGB')
  return image.convert('RGB')  # L, 1, P, RGBA, LA, CMYK, YCbCr ...


def mask_array(path: epath.PathLike) -> np.ndarray:
  """The raw 2-D values of a mask file (colour masks reduced to one channel)."""
  image = read_pil(path, 'mask')
  if image.mode == 'P':
    image = image.convert('RGBA' if 'transparency' in image.info else 'RGB')
  array = np.asarray(image)
  if array.ndim == 3:
    array = array[..., :3] if array.shape[2] >= 3 else array[..., :1]
    if all(np.array_equal(array[..., 0], array[..., c]) for c in range(1, array.shape[2])):
      array = array[..., 0]
    else:
      note(
        'colour_mask',
        path,
        '',
        f'Mask {path} is a colour image; converted to grey (ITU-R 601 luma) before thresholding.',
      )
      array = np.asarray(PIL.Image.fromarray(np.ascontiguousarray(array)).convert('L'))
  return array


def binarize(
  array: np.ndarray, path: epath.PathLike, *, threshold: float = 0.5, polarity: str = 'bright'
) -> np.ndarray:
  """uint8 HxW, 1 = crack, from raw mask values (see the module docstring).

  Args:
    array: 2-D mask values (bool, uint8, uint16, int32 or float).
    path: the file, for messages.
    threshold: fraction of the full range above which a non-binary value is crack.
    polarity: 'bright' (crack = high values), 'dark' (crack = low values) or 'auto' (crack =
      the minority: if more than half the pixels would be crack, the mask is inverted).
  """
  if polarity not in ('bright', 'dark', 'auto'):
    raise ValueError(f"polarity must be 'bright', 'dark' or 'auto', got {polarity!r}")
  if not 0.0 < threshold < 1.0:
    raise ValueError(f'threshold must be in (0, 1), got {threshold}')
  array = np.asarray(array)
  if array.ndim != 2:
    raise DatasetError(f'Mask {path} has shape {array.shape}; expected a 2-D (grey) mask.')
  if array.dtype == bool:
    crack = array
  else:
    if np.issubdtype(array.dtype, np.floating):
      full = 1.0 if array.max(initial=0) <= 1.0 else 255.0
    elif array.dtype == np.uint8:
      full = 255
    else:
      full = full_range(array.max(initial=0))
    values = np.unique(array)
    if set(values.tolist()) <= {0, 1}:
      crack = array == 1
    elif set(values.tolist()) <= {0, full}:
      crack = array == full
    else:
      cut = threshold * full
      crack = array > cut
      shown = ', '.join(f'{v:g}' for v in values[:6]) + (', ...' if len(values) > 6 else '')
      note(
        'non_binary',
        path,
        f'{len(values)} values; crack = value > {cut:g}',
        f'Mask {path} is not binary ({len(values)} distinct values: {shown}); '
        f'thresholded: crack = value > {cut:g} ({threshold:g} of {full:g}).',
      )
  if polarity == 'dark':
    crack = ~crack
  elif polarity == 'auto' and crack.mean() > 0.5:
    crack = ~crack
  return crack.astype(np.uint8)


def load_mask(
  path: epath.PathLike, *, threshold: float = 0.5, polarity: str = 'bright'
) -> np.ndarray:
  """Reads a mask file as uint8 HxW with 1 = crack (see `binarize`)."""
  return binarize(mask_array(path), path, threshold=threshold, polarity=polarity)


def check_same_size(
  image: PIL.Image.Image,
  mask: np.ndarray,
  image_path: epath.PathLike,
  mask_path: epath.PathLike,
) -> None:
  """Raises DatasetError naming both files if ``mask`` (HxW) is not ``image``'s size."""
  if mask.shape != (image.height, image.width):
    raise DatasetError(
      f'Mask {mask_path} is {mask.shape[1]}x{mask.shape[0]} (WxH) but its image {image_path} '
      f'is {image.width}x{image.height}.'
    )


# ----------------------------------------------------------------------------- listing


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
      f'extension): {names}'
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


def _walk_dirs(root: epath.Path, max_depth: int) -> Iterable[epath.Path]:
  yield root
  if max_depth == 0:
    return
  try:
    children = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith('.'))
  except OSError:
    return
  for child in children:
    yield from _walk_dirs(child, max_depth - 1)


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

  for d in _walk_dirs(root, max_depth):
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
    raise DatasetNotFoundError(
      f'The manual download directory is missing or empty ({e.args[0].splitlines()[0]}).\n'
      f'{instructions}'
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


# ----------------------------------------------------------------------------- base builder


class PairedImageBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Base of the crack builders: one (image, mask) file pair -> one record of the contract.

  It is abstract (`_split_generators` is left to subclasses) and created with
  ``skip_registration=True``, so TFDS registers only its subclasses, each by its ``name``.

  A subclass sets ``name``, ``VERSION``, ``RELEASE_NOTES`` and optionally ``HOMEPAGE``,
  ``CITATION`` and ``DESCRIPTION`` (default: the docstring of the subclass's module), and
  implements ``_split_generators`` returning ``{split: self._generate_examples(pairs)}``.
  Hooks, in the order `_generate_examples` calls them for each pair:

  * ``load_pair(pair) -> (RGB PIL image, uint8 HxW mask with 1 = crack)``; the default reads
    the image with `load_rgb` and the mask with `load_mask` (``MASK_THRESHOLD``,
    ``MASK_POLARITY``);
  * `check_same_size` (the mask must have its image's size; not a hook);
  * ``postprocess(image, mask) -> (image, mask)``, e.g. a resize; the default keeps both.

  Each split's corrections and suspicious files are collected in a `SplitReport` and reported
  at the end of the split, one `CrackDataWarning` per condition; masks that are mostly crack
  raise `DatasetError` instead when ``refuse_majority_crack()`` (default False: a warning).

  Files are written as array_record (random access, read without TensorFlow) unless
  ``file_format`` is given.
  """

  HOMEPAGE: ClassVar[str | None] = None
  CITATION: ClassVar[str | None] = None
  DESCRIPTION: ClassVar[str | None] = None
  MASK_THRESHOLD: ClassVar[float] = 0.5
  MASK_POLARITY: ClassVar[str] = 'bright'

  def __init__(self, *, file_format: str | None = None, **kwargs: Any):
    super().__init__(file_format=file_format or 'array_record', **kwargs)

  @classmethod
  def description(cls) -> str:
    """``DESCRIPTION``, else the docstring of the module that defines the builder."""
    if cls.DESCRIPTION is not None:
      return cls.DESCRIPTION
    module = sys.modules.get(cls.__module__)
    return (module and module.__doc__) or cls.__doc__ or ''

  def _info(self) -> tfds.core.DatasetInfo:
    return dataset_info(self, self.description(), homepage=self.HOMEPAGE, citation=self.CITATION)

  @abc.abstractmethod
  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    """``{split: self._generate_examples(pairs)}``."""

  def manual_root(self, dl_manager: tfds.download.DownloadManager) -> epath.Path:
    """The manual dir, or DatasetNotFoundError with ``MANUAL_DOWNLOAD_INSTRUCTIONS``."""
    return manual_dir_or_raise(dl_manager, self.MANUAL_DOWNLOAD_INSTRUCTIONS)

  def split_by_name(self, pairs: Sequence[Pair], **names: Sequence[str]) -> dict[str, Any]:
    """``{split: self._generate_examples(those pairs)}`` from ``split=[pair names]``."""
    by_name = {p.name: p for p in pairs}
    return {
      split: self._generate_examples([by_name[n] for n in split_names], split=split)
      for split, split_names in names.items()
    }

  def load_pair(self, pair: Pair) -> tuple[PIL.Image.Image, np.ndarray]:
    """Reads one pair: (RGB PIL image, uint8 HxW mask, 1 = crack)."""
    image = load_rgb(pair.image_path)
    mask = load_mask(pair.mask_path, threshold=self.MASK_THRESHOLD, polarity=self.MASK_POLARITY)
    return image, mask

  def postprocess(
    self, image: PIL.Image.Image, mask: np.ndarray
  ) -> tuple[PIL.Image.Image, np.ndarray]:
    """Applied after the size check (e.g. a resize); the default keeps both as they are."""
    return image, mask

  def refuse_majority_crack(self) -> bool:
    """Whether masks that are mostly crack stop preparation (True) or are only warned about."""
    return False

  def majority_crack_advice(self) -> str:
    """What to do about masks that are mostly crack (appended to the warning or error)."""
    return (
      'If cracks are black on white, this builder reads them inverted; if they really cover '
      'most of the image, ignore this.'
    )

  def _generate_examples(
    self, pairs: Sequence[Pair], split: str = ''
  ) -> Iterator[tuple[str, dict[str, Any]]]:
    report = SplitReport(f'{self.name}/{split}' if split else self.name)
    for pair in pairs:
      with reporting_to(report):
        image, mask = self.load_pair(pair)
        check_same_size(image, mask, pair.image_path, pair.mask_path)
        image, mask = self.postprocess(image, mask)
        report.check(image, mask, pair)
      yield pair.name, example(image, mask, pair.name)
    self.report_split(report)

  def report_split(self, report: SplitReport) -> None:
    """One `CrackDataWarning` per condition of ``report``; `DatasetError` for masks that are
    mostly crack if `refuse_majority_crack`."""
    for condition in CONDITIONS:
      if condition in report.notes and condition != 'majority_crack':
        warnings.warn(report.message(condition), CrackDataWarning, stacklevel=2)
    empty = report.empty_message()
    if empty:
      warnings.warn(empty, CrackDataWarning, stacklevel=2)
    if 'majority_crack' in report.notes:
      message = f'{report.message("majority_crack")}. {self.majority_crack_advice()}'
      if self.refuse_majority_crack():
        raise DatasetError(message)
      warnings.warn(message, CrackDataWarning, stacklevel=2)
