"""Public crack datasets published with their own train / valid / test folders.

`SplitFolderBuilder` is the base of the builders of DeepCrack, CRACK500, GAPs384 and the
AigleRN-TRIMM crops: each split is one folder of images and one of masks, found under the
manual dir in any of the layouts the public copies use (folder names case- and
separator-insensitive, at any depth up to 4 below the manual dir):

* ``<set>/{train,valid,test}/`` + ``<set>/{train,valid,test}_lab/`` (the cropped copies of the
  Lightweight-Modular-Model repository, ``Datasets/<set>/``);
* ``<set>/{train,test}_img/`` + ``<set>/{train,test}_lab/`` (DeepCrack as its authors ship it);
* ``<set>/{train,val,test}crop/`` holding ``<name>.jpg`` and ``<name>_mask.png`` side by side
  (CRACK500 as its authors ship it).

A split is the source's own: a layout without a validation folder gives no ``valid`` split
(configs then take one from ``train`` with TFDS slicing, e.g. ``train[90%:]``). Images and masks
are paired by file name without extension, a ``_mask`` / ``_gt`` / ``_lab`` suffix on the mask
name ignored; masks are white (or 1) on black, non-binary (JPEG) masks thresholded at half the
range with one warning per split.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

import PIL.Image
import tensorflow_datasets as tfds
from etils import epath

from crackjax.tfds_builders import listing, paired_builder
from crackjax.tfds_builders.contract import normalise
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError

# Split -> the folder names (normalised) a source uses for it.
SPLIT_NAMES: dict[str, tuple[str, ...]] = {
  'train': ('train', 'training'),
  'valid': ('valid', 'val', 'validation'),
  'test': ('test', 'testing'),
}
# Suffixes (normalised) of a split's image folder and of its mask folder.
IMAGE_SUFFIXES = ('', 'img', 'image', 'images')
MASK_SUFFIXES = ('lab', 'label', 'labels', 'gt', 'mask', 'masks')
# A folder that holds images and masks side by side (CRACK500's ``traincrop``).
MIXED_SUFFIX = 'crop'
_MASK_NAME = re.compile(r'[_\-. ]?(gt|mask|label|lab)$', re.IGNORECASE)


def mask_key(stem: str) -> str:
  """'6192_mask' -> '6192'; other names unchanged."""
  return _MASK_NAME.sub('', stem) or stem


def _subdirs(directory: epath.Path) -> dict[str, epath.Path]:
  return {normalise(d.name): d for d in directory.iterdir() if d.is_dir()}


def split_folders(
  directory: epath.Path,
) -> dict[str, tuple[epath.Path, epath.Path | None]]:
  """``{split: (image folder, mask folder)}`` of the splits found directly in `directory`; the
  mask folder is None where images and masks lie side by side (``<split>crop``)."""
  subs = _subdirs(directory)
  found: dict[str, tuple[epath.Path, epath.Path | None]] = {}
  for split, names in SPLIT_NAMES.items():
    for name in names:
      masks = [subs[name + s] for s in MASK_SUFFIXES if name + s in subs]
      images = [subs[name + s] for s in IMAGE_SUFFIXES if name + s in subs]
      if len(masks) == 1 and len(images) == 1:
        found[split] = (images[0], masks[0])
        break
      if name + MIXED_SUFFIX in subs:
        found[split] = (subs[name + MIXED_SUFFIX], None)
        break
  return found


def find_split_folders(
  root: epath.PathLike, keys: Sequence[str], *, layout: str, max_depth: int = 4
) -> dict[str, tuple[epath.Path, epath.Path | None]]:
  """The split folders of the dataset named by one of `keys` (normalised) under `root`.

  The dataset's folder is the one whose name is a key and that holds split folders (any of
  them: a copy of the test photos alone is a dataset with a test split); `root` itself if it
  holds them directly.

  Raises:
    DatasetNotFoundError: no such folder, or several (the message lists them).
  """
  root = epath.Path(root)
  if not root.is_dir():
    raise DatasetNotFoundError(f'{root} does not exist. Expected layout:\n{layout}')
  candidates = [
    d for d in listing.walk_dirs(root, max_depth) if normalise(d.name) in keys and split_folders(d)
  ]
  if not candidates and split_folders(root):
    candidates = [root]
  if len(candidates) == 1:
    return split_folders(candidates[0])
  if not candidates:
    raise DatasetNotFoundError(
      f'Could not find the split folders of {keys[0]!r} under {root}. Expected layout:\n{layout}'
    )
  shown = '\n'.join(f'  {d}' for d in candidates)
  raise DatasetNotFoundError(
    f'Several copies of {keys[0]!r} under {root}; point the manual dir at one of them:\n{shown}'
  )


def split_pairs(
  split: str, images: epath.Path, masks: epath.Path | None, *, what: str
) -> list[listing.Pair]:
  """The (image, mask) pairs of one split's folders, sorted by name."""
  if masks is not None:
    return listing.pair_by_stem(
      listing.list_images(images, f'{what} {split} image'),
      listing.list_images(masks, f'{what} {split} mask', stem_key=mask_key),
      image_dir=images,
      mask_dir=masks,
    )
  files = listing.list_images(images, f'{what} {split} file')
  image_files = {k: p for k, p in files.items() if mask_key(k) == k}
  mask_files = {mask_key(k): p for k, p in files.items() if mask_key(k) != k}
  return listing.pair_by_stem(image_files, mask_files, image_dir=images, mask_dir=images)


class SplitFolderBuilder(paired_builder.PairedImageBuilder, skip_registration=True):
  """A public dataset with its own split folders (the module docstring's layouts).

  A subclass sets ``name``, ``HOMEPAGE``, ``CITATION``, ``KEYS`` (its folder's names,
  normalised), ``LAYOUT`` (shown when the folders are not found), ``LICENSE`` (the terms of
  use, kept in the DatasetInfo) and ``SOURCE`` (where to get it); its
  ``MANUAL_DOWNLOAD_INSTRUCTIONS`` are made from them, its docstring's words before ':' as
  the dataset's title.
  """

  KEYS: ClassVar[tuple[str, ...]] = ()
  #: The (width, height) its copies' photos have (either orientation): a folder whose photos
  #: all have another dataset's sizes is refused as that dataset's (`recognise`).
  SIZES: ClassVar[frozenset[tuple[int, int]]] = frozenset()
  LAYOUT: ClassVar[str] = ''
  LICENSE: ClassVar[str] = ''
  #: Where to get the files, for the instructions (`instructions`).
  SOURCE: ClassVar[str] = ''
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES: ClassVar[dict[str, str]] = {'1.0.0': 'Initial release: the source splits.'}
  MANUAL_DIR_REQUIRED = True

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    if cls.KEYS:
      KNOWN[cls.name] = cls
    if cls.SOURCE:  # a dataset (not a further base): its instructions from its declarations
      title = cls.__doc__.split(':')[0] if cls.__doc__ else cls.name
      cls.MANUAL_DOWNLOAD_INSTRUCTIONS = instructions(
        title, cls.SOURCE, cls.LAYOUT, f'tfds_builders/{cls.name}/README.md'
      )

  def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> Mapping:
    root = self.manual_root(dl_manager)
    folders = find_split_folders(root, self.KEYS, layout=self.LAYOUT)
    recognise(self.name, folders)
    return {
      split: self._generate_examples(split_pairs(split, images, masks, what=self.name), split=split)
      for split, (images, masks) in folders.items()
    }


#: The split-folder datasets by name (each subclass that declares KEYS), for `recognise`.
KNOWN: dict[str, type] = {}
# Photos sampled from a folder to tell whose it is.
_SAMPLE = 20


def _both(sizes: frozenset[tuple[int, int]]) -> set[tuple[int, int]]:
  return set(sizes) | {(h, w) for w, h in sizes}


def recognise(name: str, folders: Mapping[str, tuple[epath.Path, epath.Path | None]]) -> None:
  """Refuses, in one line, a folder found for dataset `name` that is another's: its dataset
  folder is named as another's (``Crack500/`` given to the deepcrack builder), or every
  photo of a sample has another dataset's sizes (`SplitFolderBuilder.SIZES`) and none its own.

  Raises:
    DatasetError: naming the folder, what it looks like and why.
  """
  first = next(iter(folders.values()))[0]
  here = first.parent
  own = KNOWN.get(name)
  for other, cls in KNOWN.items():
    if other != name and normalise(here.name) in cls.KEYS:
      raise DatasetError(
        f"{name}: {here} is named as {other}'s folder, not {name}'s: point the manual dir at "
        f"{name}'s copy (or prepare it as {other})."
      )
  if own is None or not own.SIZES:
    return
  files = sorted(p for p in first.iterdir() if listing.is_image_file(p))
  if not files:
    return
  step = max(1, len(files) // _SAMPLE)
  sizes = set()
  for path in files[::step][:_SAMPLE]:
    try:
      with PIL.Image.open(path) as image:
        sizes.add(image.size)
    except (OSError, ValueError):  # an unreadable photo is the preparation's to name
      continue
  if not sizes or sizes & _both(own.SIZES):
    return
  for other, cls in KNOWN.items():
    if other != name and cls.SIZES and sizes <= _both(cls.SIZES):
      shown = ', '.join(f'{w}x{h}' for w, h in sorted(sizes)[:3])
      expected = ', '.join(f'{w}x{h}' for w, h in sorted(own.SIZES))
      raise DatasetError(
        f"{name}: the photos in {first} are {shown}, the sizes of {other}'s, not of {name}'s "
        f"({expected}): the folder looks like {other}; point the manual dir at {name}'s copy."
      )


def instructions(name: str, source: str, layout: str, readme: str) -> str:
  """The MANUAL_DOWNLOAD_INSTRUCTIONS of a split-folder dataset."""
  return f"""\
  {name} is not downloaded automatically. Get it from {source}, extract it into a folder DIR:
{layout}
  and run with --config.data.manual_dir=DIR (launch.py; a builder:
  DownloadConfig(manual_dir=DIR)). See {readme}.
  """


LMM_SOURCE = 'https://github.com/Omaralmaqtari/Lightweight-Modular-Model (Datasets/)'
LMM_CITATION = """\
@article{almaqtari2024lightweight,
  title={Lightweight Yet Effective: A Modular Approach to Crack Segmentation},
  author={Al-maqtari, Omar and Peng, Bo and Al-Huda, Zaid and Al-Malahi, Abdulrahman and
          Maqtary, Naseebah},
  journal={IEEE Transactions on Intelligent Vehicles}, year={2024}
}"""
