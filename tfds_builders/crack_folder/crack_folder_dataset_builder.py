"""TFDS builder for a user's own crack images: a folder of images and a folder of masks.

    CrackFolder(data_dir=D, image_dir='roads/images', mask_dir='roads/masks')
    CrackFolder(data_dir=D, config=folder_config(image_dir=..., mask_dir=..., ...))

* Images and masks are matched by file name without extension (``0001.jpg`` <-> ``0001.png``;
  with ``mask_suffix='_mask'``, ``0001.jpg`` <-> ``0001_mask.png``). Formats: png, jpg, jpeg,
  bmp, tif, tiff (any case). Any size; images may differ in size from each other (stored as
  is; training then needs ``config.data.input_size`` crops), but each mask must have its
  image's size.
* Masks: crack = white. {0, 1} and {0, 255} (and {0, 65535}) masks are used as they are; any
  other mask (e.g. saved as JPEG) is thresholded at value > ``mask_threshold`` x max (default
  0.5: > 127.5 for 8-bit), with one warning per split giving the count and the first five
  files. ``mask_polarity='dark'`` for black cracks on white, ``'auto'`` for "cracks are the
  minority". A mask that is mostly crack (> 50 % of its pixels; usually black cracks read
  with the default polarity) is an error naming the files, unless ``allow_majority_crack``.
  A split whose masks hold no crack pixel at all, and nearly black or white images, are
  warned about (once per split).
* Images with more than 8 bits (16-bit TIFF/PNG) are read by their actual range
  (`reading.full_range`: 12-bit data in a 16-bit file is scaled by 4095, not 65535).
* Splits: ``train_list`` / ``test_list`` text files (one name per line, with or without
  extension; blank lines and ``#`` comments ignored). With one list the other split is every
  remaining image; with both, images in neither are reported in a warning and left out. With
  none: sorted names permuted with ``numpy.random.default_rng(seed=0)``, the first
  ``round(0.8 n)`` (at least 1, at most n - 1) are train, the rest test.
* Errors naming the file (`errors.DatasetError`): missing or empty directory, an image without a
  mask or a mask without an image, two files with one name, unreadable/truncated file, size
  mismatch, a list naming an unknown image or an image in both lists.

Where the prepared data goes: the builder config is named ``<folder>_<hash>``, where the
hash covers the absolute paths, the options, the split lists, every file's name, size and
modification time, and ``READER`` (the version of the way files are read). So different
folders (or a folder whose files changed, or a newer reader) get their own directory
``<data_dir>/crack_folder/<folder>_<hash>/1.1.0`` and never reuse stale data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import PIL.Image
import tensorflow_datasets as tfds
from etils import epath

from crackjax.tfds_builders import errors, listing, paired_builder, reading, split_report
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError

TRAIN_FRACTION = 0.8
SPLIT_SEED = 0
# Hashed into the config name: raised when reading files changes what is stored, so folders
# prepared by an older reader are prepared again (2: high-bit-depth images by their range).
READER = 2


@dataclasses.dataclass(eq=False)
class CrackFolderConfig(tfds.core.BuilderConfig):
  """Where the user's files are and how to read them (see the module docstring)."""

  image_dir: str = ''
  mask_dir: str = ''
  train_list: str | None = None
  test_list: str | None = None
  mask_threshold: float = 0.5
  mask_polarity: str = 'bright'
  mask_suffix: str = ''
  allow_majority_crack: bool = False

  def __repr__(self) -> str:
    # Short: TFDS logs the config's repr on every load.
    return f'CrackFolderConfig(name={self.name!r}, image_dir={self.image_dir!r})'


def _abs(path: str | None) -> str | None:
  return os.path.abspath(os.path.expanduser(path)) if path else None


def folder_config(
  *,
  image_dir: str,
  mask_dir: str,
  train_list: str | None = None,
  test_list: str | None = None,
  mask_threshold: float | None = None,
  mask_polarity: str | None = None,
  mask_suffix: str | None = None,
  allow_majority_crack: bool | None = None,
) -> CrackFolderConfig:
  """A `CrackFolderConfig` named after the folder and a hash of its paths, options and files.

  ``allow_majority_crack`` is not hashed: it changes whether preparation succeeds, not what
  is stored.
  """
  options = dict(
    image_dir=_abs(image_dir),
    mask_dir=_abs(mask_dir),
    train_list=_abs(train_list),
    test_list=_abs(test_list),
    mask_threshold=0.5 if mask_threshold is None else float(mask_threshold),
    mask_polarity=mask_polarity or 'bright',
    mask_suffix=mask_suffix or '',
  )
  files = listing.fingerprint_files(
    p
    for p in (
      options['image_dir'],
      options['mask_dir'],
      options['train_list'],
      options['test_list'],
    )
    if p
  )
  digest = hashlib.sha256(json.dumps([options, files, READER]).encode()).hexdigest()[:12]
  folder = os.path.basename(os.path.dirname(options['image_dir'])) or 'folder'
  slug = re.sub(r'[^a-z0-9]+', '_', folder.lower()).strip('_')[:40] or 'folder'
  return CrackFolderConfig(
    name=f'{slug}_{digest}',
    description=f'Images {options["image_dir"]}, masks {options["mask_dir"]}',
    allow_majority_crack=bool(allow_majority_crack),
    **options,
  )


def _read_list(path: str) -> list[str]:
  try:
    lines = epath.Path(path).read_text().splitlines()
  except OSError as e:
    raise DatasetError(f'Cannot read split list {path}: {e}') from e
  names = []
  for line in lines:
    line = line.split('#', 1)[0].strip()
    if line:
      name = os.path.basename(line)
      stem, ext = os.path.splitext(name)
      names.append(stem if ext.lower() in listing.IMAGE_EXTENSIONS else name)
  if not names:
    raise DatasetError(f'Split list {path} names no image.')
  return names


def split_names(
  names: list[str], train_list: str | None, test_list: str | None
) -> tuple[list[str], list[str]]:
  """(train, test) names from the list files, or the default deterministic 80/20 split."""
  known = set(names)
  lists = {}
  for split, path in (('train', train_list), ('test', test_list)):
    if path:
      listed = _read_list(path)
      unknown = [n for n in listed if n not in known]
      if unknown:
        raise DatasetError(
          f'Split list {path} names {len(unknown)} image(s) that are not in '
          f'the image folder: {", ".join(unknown[:10])}'
        )
      lists[split] = sorted(set(listed))
  if 'train' in lists and 'test' in lists:
    both = sorted(set(lists['train']) & set(lists['test']))
    if both:
      raise DatasetError(f'{", ".join(both[:10])} listed in both {train_list} and {test_list}.')
    unused = sorted(known - set(lists['train']) - set(lists['test']))
    if unused:
      errors.warn(
        f'{len(unused)} image(s) are in neither {train_list} nor {test_list} and are '
        f'not used: {", ".join(unused[:10])}' + (' ...' if len(unused) > 10 else '')
      )
    return lists['train'], lists['test']
  if 'train' in lists:
    return lists['train'], sorted(known - set(lists['train']))
  if 'test' in lists:
    return sorted(known - set(lists['test'])), lists['test']
  n = len(names)
  if n < 2:
    raise DatasetError(
      f'Only {n} image; the default train/test split needs at least 2 (or give a train_list).'
    )
  n_train = min(n - 1, max(1, round(n * TRAIN_FRACTION)))
  return listing.random_split(names, n_train, SPLIT_SEED)


class CrackFolder(paired_builder.PairedImageBuilder):
  """A user's folder of crack images and masks (see the module docstring)."""

  name = 'crack_folder'
  # 1.1.0: a copy prepared by 1.0.0 holds phone photos sideways; a new version prepares the
  # folders again instead of reusing it.
  VERSION = tfds.core.Version('1.1.0')
  RELEASE_NOTES = {
    '1.0.0': 'Initial release.',
    '1.1.0': 'Images and masks read upright by their EXIF orientation, as viewers show them.',
  }
  BUILDER_CONFIGS: list[CrackFolderConfig] = []
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
  Give the builder image_dir and mask_dir (from a launch.py config:
  --config.data.name=crack_folder --config.data.folder.images=DIR
  --config.data.folder.masks=DIR). See tfds_builders/crack_folder/README.md.
  """

  def __init__(
    self,
    *,
    image_dir: str | None = None,
    mask_dir: str | None = None,
    train_list: str | None = None,
    test_list: str | None = None,
    mask_threshold: float | None = None,
    mask_polarity: str | None = None,
    mask_suffix: str | None = None,
    allow_majority_crack: bool | None = None,
    **kwargs: Any,
  ):
    if image_dir or mask_dir:
      if 'config' in kwargs:
        raise ValueError('Pass either config or image_dir/mask_dir, not both.')
      if not (image_dir and mask_dir):
        raise DatasetNotFoundError('crack_folder needs both image_dir and mask_dir.')
      kwargs['config'] = folder_config(
        image_dir=image_dir,
        mask_dir=mask_dir,
        train_list=train_list,
        test_list=test_list,
        mask_threshold=mask_threshold,
        mask_polarity=mask_polarity,
        mask_suffix=mask_suffix,
        allow_majority_crack=allow_majority_crack,
      )
    super().__init__(**kwargs)

  def _pairs(self) -> list[listing.Pair]:
    return folder_pairs(self.builder_config)

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    del dl_manager  # Files come from the config, not the manual dir.
    pairs = self._pairs()
    c = self.builder_config
    train, test = split_names([p.name for p in pairs], c.train_list, c.test_list)
    # A test_list naming every image (crackjax-evaluate scoring a whole folder) leaves no
    # train split: it is left out rather than written empty (TFDS refuses empty splits).
    splits = {name: names for name, names in (('train', train), ('test', test)) if names}
    return self.split_by_name(pairs, **splits)

  def refuse_majority_crack(self) -> bool:
    return not self.builder_config.allow_majority_crack

  def majority_crack_advice(self) -> str:
    return majority_crack_advice(self.builder_config)

  def load_pair(self, pair: listing.Pair) -> tuple[PIL.Image.Image, np.ndarray]:
    """The config's mask threshold and polarity instead of the class defaults."""
    return load_folder_pair(self.builder_config, pair)


def folder_pairs(c: CrackFolderConfig | None) -> list[listing.Pair]:
  """The (image, mask) pairs of a folder config, sorted by name (`listing.pair_by_stem`)."""
  if c is None or not c.image_dir or not c.mask_dir:
    raise DatasetNotFoundError(
      'crack_folder needs image_dir and mask_dir (launch.py: --config.data.folder.images=DIR '
      '--config.data.folder.masks=DIR).'
    )
  suffix = c.mask_suffix

  def mask_key(stem: str) -> str:
    return stem[: -len(suffix)] if suffix and stem.endswith(suffix) else stem

  images = listing.list_images(c.image_dir, 'image')
  if os.path.abspath(c.image_dir) == os.path.abspath(c.mask_dir):
    if not suffix:
      raise DatasetError(
        f'Images and masks are both in {c.image_dir}; set a mask_suffix '
        '(e.g. "_mask") so they can be told apart.'
      )
    masks = {mask_key(s): p for s, p in images.items() if s.endswith(suffix)}
    images = {s: p for s, p in images.items() if not s.endswith(suffix)}
  else:
    masks = listing.list_images(c.mask_dir, 'mask', stem_key=mask_key)
  return listing.pair_by_stem(images, masks, image_dir=c.image_dir, mask_dir=c.mask_dir)


def majority_crack_advice(c: CrackFolderConfig) -> str:
  if c.allow_majority_crack:
    return 'Kept: allow_majority_crack is set.'
  return (
    'Black cracks on white? Set --config.data.folder.mask_polarity=dark (or auto: crack = '
    'the minority of each mask). If cracks really cover most of these images, set '
    '--config.data.folder.allow_majority_crack=True.'
  )


def load_folder_pair(
  c: CrackFolderConfig, pair: listing.Pair
) -> tuple[PIL.Image.Image, np.ndarray]:
  """One pair read with the config's mask threshold and polarity."""
  image = reading.load_rgb(pair.image_path)
  mask = reading.load_mask(pair.mask_path, threshold=c.mask_threshold, polarity=c.mask_polarity)
  return image, mask


def read_folder(
  c: CrackFolderConfig, pairs: list[listing.Pair], label: str
) -> Iterator[tuple[listing.Pair, PIL.Image.Image, np.ndarray]]:
  """Each pair read and checked as the builder prepares it ((pair, RGB image, uint8 HxW mask,
  1 = crack), in order), without storing anything: the same errors naming the files, and the
  same warnings once at the end (`paired_builder.report_split`, `label` their prefix). A mask
  that is mostly crack stops it at once (unless allow_majority_crack), with the builder's
  message, instead of after the whole folder."""
  report = split_report.SplitReport(label)
  for pair in pairs:
    with split_report.reporting_to(report):
      image, mask = load_folder_pair(c, pair)
      reading.check_same_size(image, mask, pair.image_path, pair.mask_path)
      report.check(image, mask, pair)
    if 'majority_crack' in report.notes and not c.allow_majority_crack:
      paired_builder.report_split(report, True, majority_crack_advice(c))
    yield pair, image, mask
  paired_builder.report_split(report, not c.allow_majority_crack, majority_crack_advice(c))
