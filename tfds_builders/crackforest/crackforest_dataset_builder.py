"""TFDS builder for the CrackForest dataset (CFD), stored as array_record.

Layout read (that of the public repository ``cuilimeng/CrackForest-dataset``)::

    <root>/image/NNN.jpg          RGB images, 480x320 (W x H); 155 files, only 001-118 labelled
    <root>/groundTruth/NNN.mat    MATLAB struct ``groundTruth`` with fields ``Segmentation``
                                  (uint8 HxW region map) and ``Boundaries``

``<root>`` is either the directory given as ``manual_dir`` itself or a sub-directory of it
(e.g. the extracted ``CrackForest-dataset-master/`` folder of the GitHub archive); without a
usable manual dir the GitHub archive of the default branch is downloaded.

Labels: crack = ``Segmentation`` in {2, 4}. 1 is background, 3 marks background patches
enclosed by cracks (as bright as the pavement around them), 4 marks separate faint cracks.

Split (see ``splits.py`` for the rule and the exact 72/46 lists of the real dataset): the
labelled stems (those with a ``.mat``) are sorted, permuted with
``numpy.random.default_rng(SPLIT_SEED)`` and the first ``round(n * 72 / 118)`` go to ``train``,
the rest to ``test`` (the paper's 60%/40% split, §IV-A: 72 training / 46 testing images).
Unlabelled images (119-155 in the real archive) are not part of any split.

TensorFlow-free: ``tfds.features.Image`` only needs TensorFlow to encode *numpy arrays*. The
builder hands it ``PIL.Image`` objects instead, which TFDS encodes with PIL (PNG, lossless:
the stored pixels are exactly those PIL decoded from the JPEG, independent of the decoder used
at read time), and array_record files are read back with ``builder.as_data_source`` /
``tfds.data_source``, which decodes with PIL (or OpenCV) and never imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import PIL.Image
import scipy.io
import tensorflow_datasets as tfds
from etils import epath

from tfds_builders.crackforest import splits

# Archive of the default branch of the public repository; extracts to CrackForest-dataset-master/.
_URL = 'https://github.com/cuilimeng/CrackForest-dataset/archive/refs/heads/master.zip'
_HOMEPAGE = 'https://github.com/cuilimeng/CrackForest-dataset'
_CRACK_LABELS = (2, 4)
_VALID_LABELS = frozenset({1, 2, 3, 4})
_IMAGE_EXTENSIONS = ('.jpg', '.JPG', '.jpeg', '.png')

_CITATION = """\
@article{shi2016automatic,
  title={Automatic road crack detection using random structured forests},
  author={Shi, Yong and Cui, Limeng and Qi, Zhiquan and Meng, Fan and Chen, Zhensong},
  journal={IEEE Transactions on Intelligent Transportation Systems},
  volume={17}, number={12}, pages={3434--3445}, year={2016}, publisher={IEEE}
}
@inproceedings{cui2015pavement,
  title={Pavement Distress Detection Using Random Decision Forests},
  author={Cui, Limeng and Qi, Zhiquan and Chen, Zhensong and Meng, Fan and Shi, Yong},
  booktitle={International Conference on Data Science}, pages={95--102}, year={2015},
  organization={Springer}
}"""


class CrackForestDataError(ValueError):
  """The CrackForest directory is incomplete or holds a file that cannot be used."""


@dataclasses.dataclass(frozen=True)
class _Record:
  stem: str
  image_path: epath.Path
  mat_path: epath.Path


def find_dataset_root(directory: epath.PathLike) -> epath.Path:
  """Returns the CrackForest root (the folder holding ``image/`` and ``groundTruth/``).

  Args:
    directory: the root itself, or a folder containing it one level down (such as the
      extracted archive holding ``CrackForest-dataset-master/``).

  Raises:
    CrackForestDataError: if neither ``directory`` nor exactly one sub-folder is a root.
  """
  directory = epath.Path(directory)

  def is_root(p: epath.Path) -> bool:
    return (p / 'image').is_dir() and (p / 'groundTruth').is_dir()

  if is_root(directory):
    return directory
  if directory.is_dir():
    candidates = sorted(p for p in directory.iterdir() if p.is_dir() and is_root(p))
    if len(candidates) == 1:
      return candidates[0]
    if len(candidates) > 1:
      raise CrackForestDataError(
          f'{directory} holds several CrackForest roots {[p.name for p in candidates]}; '
          'point manual_dir at one of them.')
  raise CrackForestDataError(
      f'{directory} does not look like the CrackForest dataset: expected image/ and '
      'groundTruth/ in it or in one sub-folder (e.g. CrackForest-dataset-master/).')


def _find_image(root: epath.Path, stem: str) -> epath.Path:
  for ext in _IMAGE_EXTENSIONS:
    path = root / 'image' / f'{stem}{ext}'
    if path.exists():
      return path
  raise CrackForestDataError(
      f'Labelled stem {stem!r} ({root / "groundTruth" / (stem + ".mat")}) has no image: '
      f'{root / "image" / (stem + ".jpg")} does not exist.')


def list_records(root: epath.Path) -> list[_Record]:
  """Lists the labelled examples (one per ``groundTruth/*.mat``), sorted by stem."""
  stems = sorted(p.stem for p in (root / 'groundTruth').glob('*.mat'))
  if not stems:
    raise CrackForestDataError(f'No .mat files in {root / "groundTruth"}.')
  return [_Record(s, _find_image(root, s), root / 'groundTruth' / f'{s}.mat') for s in stems]


def load_image(path: epath.Path) -> PIL.Image.Image:
  """Decodes an image fully (so truncated files fail here) and converts it to RGB."""
  try:
    with path.open('rb') as f:
      image = PIL.Image.open(f)
      image.load()  # PIL decodes lazily; force it so corrupt files fail now, with the name.
  except Exception as e:  # PIL raises OSError, SyntaxError, ValueError ... for bad files.
    raise CrackForestDataError(f'Cannot read image {path}: {e}') from e
  return image.convert('RGB') if image.mode != 'RGB' else image


def load_crack_mask(path: epath.Path) -> np.ndarray:
  """Reads ``groundTruth.Segmentation`` from a .mat file; returns uint8 HxW, 1 = crack."""
  try:
    with path.open('rb') as f:
      mat = scipy.io.loadmat(f)
    segmentation = np.asarray(mat['groundTruth'][0, 0]['Segmentation'])
  except Exception as e:  # Not a MAT file, or not the struct layout CrackForest uses.
    raise CrackForestDataError(
        f'Cannot read groundTruth.Segmentation from {path}: {type(e).__name__}: {e}') from e
  if segmentation.ndim != 2:
    raise CrackForestDataError(
        f'{path}: Segmentation has shape {segmentation.shape}, expected 2-D.')
  unexpected = set(np.unique(segmentation).tolist()) - _VALID_LABELS
  if unexpected:
    raise CrackForestDataError(
        f'{path}: Segmentation has values {sorted(unexpected)} outside {sorted(_VALID_LABELS)}.')
  return np.isin(segmentation, _CRACK_LABELS).astype(np.uint8)


def load_example(record: _Record) -> dict[str, Any]:
  """Reads one example, checking that image and ground truth agree in size."""
  image = load_image(record.image_path)
  mask = load_crack_mask(record.mat_path)
  if mask.shape != (image.height, image.width):
    raise CrackForestDataError(
        f'{record.mat_path}: Segmentation is {mask.shape[0]}x{mask.shape[1]} (HxW) but '
        f'{record.image_path} is {image.height}x{image.width}.')
  # PIL images (not numpy arrays) so TFDS encodes them with PIL rather than TensorFlow.
  return {'image': image, 'mask': PIL.Image.fromarray(mask, mode='L'), 'name': record.stem}


class CrackForest(tfds.core.GeneratorBasedBuilder):
  """CrackForest (CFD): 118 labelled 480x320 road images, 72 train / 46 test."""

  name = 'crackforest'
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release: crack = Segmentation in {2, 4}; 72/46 split.'}
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
  Offline: pass download_config=tfds.download.DownloadConfig(manual_dir=D) where D is a copy of
  https://github.com/cuilimeng/CrackForest-dataset (D/image/*.jpg, D/groundTruth/*.mat) or a
  folder holding the extracted archive (D/CrackForest-dataset-master/...). Without it the
  archive is downloaded.
  """

  def __init__(self, *, file_format: str | None = None, **kwargs: Any):
    # array_record by default: random access for grain, readable without TensorFlow.
    super().__init__(file_format=file_format or 'array_record', **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=__doc__,
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(None, None, 3), dtype=np.uint8,
                                         encoding_format='png'),
            'mask': tfds.features.Image(shape=(None, None, 1), dtype=np.uint8,
                                        encoding_format='png'),
            'name': tfds.features.Text(),
        }),
        supervised_keys=('image', 'mask'),
        homepage=_HOMEPAGE,
        citation=_CITATION,
        # Keep the generation order (sorted stems) as the stored order, so evaluation
        # iterates images in a stable, readable order.
        disable_shuffling=True,
    )

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    try:
      source = dl_manager.manual_dir  # Raises if no manual dir was given or it is empty.
    except AssertionError:
      source = dl_manager.download_and_extract(_URL)
    root = find_dataset_root(source)
    records = list_records(root)
    by_stem = {r.stem: r for r in records}
    train, test = splits.split_stems(list(by_stem))
    return {
        'train': self._generate_examples([by_stem[s] for s in train]),
        'test': self._generate_examples([by_stem[s] for s in test]),
    }

  def _generate_examples(self, records: list[_Record]) -> Iterator[tuple[str, dict[str, Any]]]:
    for record in records:
      yield record.stem, load_example(record)
