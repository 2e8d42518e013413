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

import numpy as np
import PIL.Image
import scipy.io
import tensorflow_datasets as tfds
from etils import epath

from tfds_builders import common
from tfds_builders.common import DatasetError, DatasetNotFoundError
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


def find_dataset_root(directory: epath.PathLike) -> epath.Path:
  """Returns the CrackForest root (the folder holding ``image/`` and ``groundTruth/``).

  Args:
    directory: the root itself, or a folder containing it one level down (such as the
      extracted archive holding ``CrackForest-dataset-master/``).

  Raises:
    DatasetNotFoundError: if neither ``directory`` nor exactly one sub-folder is a root.
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
      raise DatasetNotFoundError(
        f'{directory} holds several CrackForest roots {[p.name for p in candidates]}; '
        'point manual_dir at one of them.'
      )
  raise DatasetNotFoundError(
    f'{directory} does not look like the CrackForest dataset: expected image/ and '
    'groundTruth/ in it or in one sub-folder (e.g. CrackForest-dataset-master/).'
  )


def _find_image(root: epath.Path, stem: str) -> epath.Path:
  for ext in _IMAGE_EXTENSIONS:
    path = root / 'image' / f'{stem}{ext}'
    if path.exists():
      return path
  raise DatasetError(
    f'Labelled stem {stem!r} ({root / "groundTruth" / (stem + ".mat")}) has no image: '
    f'{root / "image" / (stem + ".jpg")} does not exist.'
  )


def list_records(root: epath.Path) -> list[common.Pair]:
  """The labelled examples (one per ``groundTruth/*.mat``, the pair's mask file), by stem."""
  stems = sorted(p.stem for p in (root / 'groundTruth').glob('*.mat'))
  if not stems:
    raise DatasetError(f'No .mat files in {root / "groundTruth"}.')
  return [common.Pair(s, _find_image(root, s), root / 'groundTruth' / f'{s}.mat') for s in stems]


def load_crack_mask(path: epath.Path) -> np.ndarray:
  """Reads ``groundTruth.Segmentation`` from a .mat file; returns uint8 HxW, 1 = crack."""
  try:
    with path.open('rb') as f:
      mat = scipy.io.loadmat(f)
    segmentation = np.asarray(mat['groundTruth'][0, 0]['Segmentation'])
  except Exception as e:  # Not a MAT file, or not the struct layout CrackForest uses.
    raise DatasetError(
      f'Cannot read groundTruth.Segmentation from {path}: {type(e).__name__}: {e}'
    ) from e
  if segmentation.ndim != 2:
    raise DatasetError(f'{path}: Segmentation has shape {segmentation.shape}, expected 2-D.')
  unexpected = set(np.unique(segmentation).tolist()) - _VALID_LABELS
  if unexpected:
    raise DatasetError(
      f'{path}: Segmentation has values {sorted(unexpected)} outside {sorted(_VALID_LABELS)}.'
    )
  return np.isin(segmentation, _CRACK_LABELS).astype(np.uint8)


class CrackForest(common.PairedImageBuilder):
  """CrackForest (CFD): 118 labelled 480x320 road images, 72 train / 46 test."""

  name = 'crackforest'
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release: crack = Segmentation in {2, 4}; 72/46 split.'}
  HOMEPAGE = _HOMEPAGE
  CITATION = _CITATION
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
  Offline: pass download_config=tfds.download.DownloadConfig(manual_dir=D) where D is a copy of
  https://github.com/cuilimeng/CrackForest-dataset (D/image/*.jpg, D/groundTruth/*.mat) or a
  folder holding the extracted archive (D/CrackForest-dataset-master/...); from launch.py:
  --config.data.manual_dir=D. Without it the archive is downloaded.
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    try:
      source = dl_manager.manual_dir  # Raises if no manual dir was given or it is empty.
    except AssertionError:
      source = dl_manager.download_and_extract(_URL)
    pairs = list_records(find_dataset_root(source))
    train, test = splits.split_stems([p.name for p in pairs])
    return self.split_by_name(pairs, train=train, test=test)

  def load_pair(self, pair: common.Pair) -> tuple[PIL.Image.Image, np.ndarray]:
    """The JPEG as RGB, and the crack mask of the pair's ``.mat`` (``load_crack_mask``)."""
    return common.load_rgb(pair.image_path), load_crack_mask(pair.mask_path)
