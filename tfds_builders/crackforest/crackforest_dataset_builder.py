"""TFDS builder for the CrackForest dataset (CFD), stored as array_record.

Layout read (that of the public repository ``cuilimeng/CrackForest-dataset``)::

    <root>/image/NNN.jpg          RGB images, 480x320 (W x H); 155 files, only 001-118 labelled
    <root>/groundTruth/NNN.mat    MATLAB struct ``groundTruth`` with fields ``Segmentation``
                                  (uint8 HxW region map) and ``Boundaries``

``<root>`` is either the directory given as ``manual_dir`` itself or a sub-directory of it
(e.g. the extracted ``CrackForest-dataset-master/`` folder of the GitHub archive); without a
manual dir the GitHub archive of a pinned commit (``COMMIT``) is downloaded and its content
checked (``CONTENT_SHA256``). A manual dir that is given
but missing, empty or not the dataset is an error (never a silent download), and so is a failed
download: one `DatasetNotFoundError` naming the URL and ``--config.data.manual_dir``, raised
at once offline (a short connection probe of the host runs first, since TFDS retries a failed
connection with backoff for minutes).

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

import hashlib
import re
import socket
import urllib.parse
import urllib.request

import numpy as np
import PIL.Image
import scipy.io
import tensorflow_datasets as tfds
from etils import epath

from crackjax.tfds_builders import listing, paired_builder, reading
from crackjax.tfds_builders.crackforest import splits
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError

# The archive of one commit of the public repository (its newest, 10 May 2017), not of a
# branch that could move; it extracts to CrackForest-dataset-<COMMIT>/.
COMMIT = 'ed57c2d96754e6c7d105805cd29aeeb3a799f267'
URL = f'https://github.com/cuilimeng/CrackForest-dataset/archive/{COMMIT}.zip'
_HOMEPAGE = 'https://github.com/cuilimeng/CrackForest-dataset'
#: `content_sha256` of that commit: what the builder reads of a download is checked against it.
#: Computed from a copy of the commit (every file's git blob id equal to the commit's tree);
#: GitHub generates the zip itself, so its bytes are not pinned, the files in it are.
CONTENT_SHA256 = 'e20ee663dccf8f86391c00f37c23434002d76faa1f6bba7faa3c01c6569df62d'
# The dataset's own licence (its README, section 2).
LICENSE = 'The dataset is made available for non-commercial research purposes only.'
_CRACK_LABELS = (2, 4)
_VALID_LABELS = frozenset({1, 2, 3, 4})
_IMAGE_EXTENSIONS = ('.jpg', '.JPG', '.jpeg', '.png')
# Seconds the connection probe of the download host may take before the download is abandoned.
PROBE_TIMEOUT_S = 5.0

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


def content_sha256(root: epath.PathLike) -> str:
  """SHA-256 of what the builder reads of a CrackForest root: one line
  ``<relative path> <sha256 of the file>`` per ``image/*.jpg`` and ``groundTruth/*.mat``,
  sorted by path."""
  root = epath.Path(root)
  files = sorted([*root.glob('image/*.jpg'), *root.glob('groundTruth/*.mat')])
  lines = [
    f'{f.relative_to(root).as_posix()} {hashlib.sha256(f.read_bytes()).hexdigest()}\n'
    for f in files
  ]
  return hashlib.sha256(''.join(lines).encode()).hexdigest()


def check_download(root: epath.Path) -> epath.Path:
  """`root` (a downloaded archive's dataset folder) if its content is the pinned commit's.

  Raises:
    DatasetError: another content (a changed or damaged download), naming the URL.
  """
  found = content_sha256(root)
  if found != CONTENT_SHA256:
    raise DatasetError(
      f"The CrackForest archive downloaded from {URL} is not commit {COMMIT[:12]}'s "
      f'content (its image/*.jpg and groundTruth/*.mat have SHA-256 {found[:16]}..., expected '
      f'{CONTENT_SHA256[:16]}...): delete {root} and prepare again, or pass '
      '--config.data.manual_dir=DIR with a copy of the dataset.'
    )
  return root


def download_failed_message(error: BaseException) -> str:
  """The one-line message for a download of ``URL`` that failed with ``error``."""
  return (
    f'Could not download CrackForest from {URL} ({type(error).__name__}: '
    f'{_short_reason(error)}). Offline? Get the archive (or a copy of {_HOMEPAGE}) and pass '
    '--config.data.manual_dir=DIR.'
  )


def _short_reason(error: BaseException) -> str:
  """The innermost reason of ``error`` (e.g. urllib3's under requests'), on one short line."""
  seen = {id(error)}
  while True:  # requests' ConnectionError wraps urllib3's MaxRetryError, which has `.reason`.
    inner = getattr(error, 'reason', None)
    if not isinstance(inner, BaseException) and error.args:
      inner = error.args[0]
    if not isinstance(inner, BaseException) or id(inner) in seen:
      break
    seen.add(id(inner))
    error = inner
  text = ' '.join(str(error).split()) or type(error).__name__
  # urllib3 prefixes the connection: "HTTPSConnection(host='github.com', port=443): ...".
  text = re.sub(r'^(<[^>]*>|\w+\([^)]*\)|None): ', '', text)
  return text if len(text) <= 200 else text[:197] + '...'


def probe_connection(url: str, timeout: float = PROBE_TIMEOUT_S) -> None:
  """Opens (and closes) a TCP connection to ``url``'s host, or raises OSError within ``timeout``.

  Skipped when a proxy is configured for the URL's scheme (the host may be reachable only
  through it).
  """
  parts = urllib.parse.urlsplit(url)
  if parts.scheme in urllib.request.getproxies():
    return
  port = parts.port or (443 if parts.scheme == 'https' else 80)
  with socket.create_connection((parts.hostname, port), timeout=timeout):
    pass


def download_archive(dl_manager: tfds.download.DownloadManager) -> epath.Path:
  """Downloads and extracts ``URL``; a failure is one `DatasetNotFoundError`, fast offline.

  Raises:
    DatasetNotFoundError: the host cannot be reached (after at most ``PROBE_TIMEOUT_S``), or
      the download or extraction failed; the message names the URL and the manual_dir flag.
  """
  try:
    probe_connection(URL)
  except OSError as e:
    raise DatasetNotFoundError(download_failed_message(e)) from None
  try:
    return epath.Path(dl_manager.download_and_extract(URL))
  except Exception as e:  # requests' ConnectionError, TFDS' download or checksum errors, ...
    raise DatasetNotFoundError(download_failed_message(e)) from e


def _find_image(root: epath.Path, stem: str) -> epath.Path:
  for ext in _IMAGE_EXTENSIONS:
    path = root / 'image' / f'{stem}{ext}'
    if path.exists():
      return path
  raise DatasetError(
    f'Labelled stem {stem!r} ({root / "groundTruth" / (stem + ".mat")}) has no image: '
    f'{root / "image" / (stem + ".jpg")} does not exist.'
  )


def list_records(root: epath.Path) -> list[listing.Pair]:
  """The labelled examples (one per ``groundTruth/*.mat``, the pair's mask file), by stem."""
  stems = sorted(p.stem for p in (root / 'groundTruth').glob('*.mat'))
  if not stems:
    raise DatasetError(f'No .mat files in {root / "groundTruth"}.')
  return [listing.Pair(s, _find_image(root, s), root / 'groundTruth' / f'{s}.mat') for s in stems]


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


class CrackForest(paired_builder.PairedImageBuilder):
  """CrackForest (CFD): 118 labelled 480x320 road images, 72 train / 46 test."""

  name = 'crackforest'
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release: crack = Segmentation in {2, 4}; 72/46 split.'}
  HOMEPAGE = _HOMEPAGE
  CITATION = _CITATION
  LICENSE = LICENSE
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
  Without a manual dir the archive is downloaded from GitHub. Offline, pass
  --config.data.manual_dir=DIR where DIR is a copy of
  https://github.com/cuilimeng/CrackForest-dataset (DIR/image/*.jpg, DIR/groundTruth/*.mat) or
  a folder holding the extracted archive (DIR/CrackForest-dataset-master/...). (Calling TFDS
  directly: download_config=tfds.download.DownloadConfig(manual_dir=DIR).)
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    source, downloaded = self._source(dl_manager)
    root = find_dataset_root(source)
    if downloaded:
      check_download(root)
    pairs = list_records(root)
    train, test = splits.split_stems([p.name for p in pairs])
    return self.split_by_name(pairs, train=train, test=test)

  def _source(self, dl_manager: tfds.download.DownloadManager) -> tuple[epath.Path, bool]:
    """(the manual dir if one was given (it must hold the dataset), else the downloaded
    archive; whether it was downloaded).

    Raises:
      DatasetNotFoundError: a given manual dir is missing or empty, or the download failed.
    """
    try:
      return dl_manager.manual_dir, False
    except AssertionError:  # Not given (TFDS' default <download_dir>/manual), missing or empty.
      # TFDS has no public "was a manual dir given?": compare with its default location.
      given = getattr(dl_manager, '_manual_dir', None)
      if given is not None and epath.Path(given) != dl_manager.download_dir / 'manual':
        raise DatasetNotFoundError(
          f'The CrackForest manual dir {given} does not exist or is empty; point '
          '--config.data.manual_dir at the dataset (DIR/image/*.jpg, DIR/groundTruth/*.mat), '
          'or leave it unset to download the dataset.'
        ) from None
    return download_archive(dl_manager), True

  def load_pair(self, pair: listing.Pair) -> tuple[PIL.Image.Image, np.ndarray]:
    """The JPEG as RGB, and the crack mask of the pair's ``.mat`` (``load_crack_mask``)."""
    return reading.load_rgb(pair.image_path), load_crack_mask(pair.mask_path)
