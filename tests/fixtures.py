"""Tiny fake datasets generated at test time, reusable by any test.

`make_fake_crackforest` writes a directory laid out like cuilimeng/CrackForest-dataset:
``image/NNN.jpg`` and ``groundTruth/NNN.mat`` (MATLAB struct ``groundTruth`` with fields
``Segmentation`` and ``Boundaries``, both uint8 HxW, loaded by ``scipy.io.loadmat`` as a 1x1
struct array exactly like the real files). Only the first ``n_labelled`` stems get a .mat.

Every Segmentation map has the same known pattern (see the ``*_PIXEL`` constants):
label 2 on row ``CRACK_ROW`` (crack), a 3x3 block of label 3 (background patch, NOT crack),
one pixel of label 4 (faint crack) and 1 everywhere else.
"""

from __future__ import annotations

from pathlib import Path

import ml_collections
import numpy as np
import PIL.Image
import scipy.io

CRACK_ROW = 5  # Segmentation == 2 on this whole row.
PATCH_PIXEL = (10, 10)  # Inside the 3x3 block of label 3 (background).
FAINT_CRACK_PIXEL = (20, 30)  # The single pixel of label 4 (crack).
BACKGROUND_PIXEL = (0, 0)  # Label 1.


def fake_segmentation(size: tuple[int, int]) -> np.ndarray:
  """Returns the uint8 region map (values 1..4) every fake .mat holds."""
  h, w = size
  if h <= max(CRACK_ROW, PATCH_PIXEL[0] + 1, FAINT_CRACK_PIXEL[0]) or w <= FAINT_CRACK_PIXEL[1]:
    raise ValueError(f'size {size} too small for the fixture pattern')
  seg = np.ones((h, w), np.uint8)
  seg[CRACK_ROW, :] = 2
  r, c = PATCH_PIXEL
  seg[r - 1:r + 2, c - 1:c + 2] = 3
  seg[FAINT_CRACK_PIXEL] = 4
  return seg


def fake_crack_mask(size: tuple[int, int]) -> np.ndarray:
  """The binary mask (uint8 HxW, 1 = crack) the builder must derive from the fixture."""
  return np.isin(fake_segmentation(size), (2, 4)).astype(np.uint8)


def write_mat(path: Path, segmentation: np.ndarray) -> None:
  """Writes a CrackForest-style .mat (struct groundTruth {Segmentation, Boundaries})."""
  boundaries = np.zeros_like(segmentation)
  boundaries[:, 1:] |= segmentation[:, 1:] != segmentation[:, :-1]
  boundaries[1:, :] |= segmentation[1:, :] != segmentation[:-1, :]
  # A dict becomes a 1x1 MATLAB struct; loadmat gives mat['groundTruth'][0, 0]['Segmentation'].
  scipy.io.savemat(
      path, {'groundTruth': {'Segmentation': segmentation.astype(np.uint8),
                             'Boundaries': boundaries.astype(np.uint8)}})


def make_fake_crackforest(root: Path, n_labelled: int = 10, n_unlabelled: int = 2,
                          size: tuple[int, int] = (32, 48)) -> Path:
  """Writes a tiny fake CrackForest archive under ``root`` and returns ``root``.

  Args:
    root: directory to create (parents too); becomes the dataset root holding ``image/`` and
      ``groundTruth/``.
    n_labelled: images 001..n_labelled, each with a .mat.
    n_unlabelled: further images without a .mat (ignored by the builder, like 119-155).
    size: (H, W) of every image and Segmentation map.

  Returns:
    ``root``.
  """
  root = Path(root)
  (root / 'image').mkdir(parents=True, exist_ok=True)
  (root / 'groundTruth').mkdir(parents=True, exist_ok=True)
  rng = np.random.default_rng(1234)
  seg = fake_segmentation(size)
  for i in range(1, n_labelled + n_unlabelled + 1):
    stem = f'{i:03d}'
    # Bright noisy pavement with dark cracks, so images differ and look vaguely real.
    image = rng.integers(150, 230, size=(*size, 3), dtype=np.uint8)
    image[np.isin(seg, (2, 4))] = 30
    PIL.Image.fromarray(image).save(root / 'image' / f'{stem}.jpg', quality=95)
    if i <= n_labelled:
      write_mat(root / 'groundTruth' / f'{stem}.mat', seg)
  return root


def fake_data_config(tmp_path: Path, **fake_kwargs) -> ml_collections.ConfigDict:
  """configs/base.py's config pointed at a fake CrackForest under ``tmp_path``.

  The raw files go to ``tmp_path/raw`` (created if missing) and the prepared TFDS data to
  ``tmp_path/tfds``. batch_size is 2 and input_size None (the fixture's stored size).

  Args:
    tmp_path: a fresh temporary directory (e.g. pytest's ``tmp_path``).
    **fake_kwargs: passed to `make_fake_crackforest`.
  """
  from configs import base  # Imported here so that merely importing fixtures stays cheap.

  tmp_path = Path(tmp_path)
  raw = tmp_path / 'raw'
  if not (raw / 'groundTruth').exists():
    make_fake_crackforest(raw, **fake_kwargs)
  config = base.get_config()
  config.dataset = 'crackforest'
  config.manual_dir = str(raw)
  config.data_dir = str(tmp_path / 'tfds')
  config.batch_size = 2
  config.input_size = None
  return config
