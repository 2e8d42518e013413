"""False positives on crack-free photos: predicted crack length per megapixel.

A clean road or wall should give an (almost) empty mask. The figure measured here is the
length of the predicted mask's skeleton (`measure.measure_cracks`' ``length_px``, the length
crackjax-predict's measurements.csv reports) summed over crack-free images, per million
pixels of those images:

  from crackjax import Predictor
  from crackjax.deploy import crack_free

  predictor = Predictor.from_pretrained('crackforest-unet-cpu')
  result = crack_free.fp_length_per_mp(predictor, patches)  # at the model's stored threshold
  result['length_per_mp']

Public crack datasets keep few crack-free photos (their crops mostly drop crack-free areas), so
`crack_free_windows` cuts crack-free patches out of labelled photos deterministically: the
windows of a regular grid whose ground truth has no crack pixel within `margin` pixels of the
window (a label drawn a little off the crack, or a crack just outside the window, does not
count against the model). `crack_free_patches` does that for a list of (image, mask) pairs and
also keeps whole images whose masks are empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from scipy import ndimage

#: Window side and margin (pixels) of `crack_free_windows` by default.
WINDOW = 128
MARGIN = 16


def near_crack(crack: np.ndarray, margin: int) -> np.ndarray:
  """The pixels within `margin` pixels (Euclidean) of a crack pixel of the boolean `crack`
  (none where it has no crack)."""
  if not crack.any():
    return np.zeros_like(crack, bool)
  return ndimage.distance_transform_edt(~crack) <= margin


def _threshold(predictor: Any, threshold: float | None) -> float:
  """`threshold`, else the predictor's own (a model file's stored one)."""
  t = getattr(predictor, 'threshold', None) if threshold is None else threshold
  if t is None:
    raise ValueError('give a threshold: the predictor has none')
  return float(t)


def crack_free_windows(
  gt: np.ndarray, *, size: int = WINDOW, margin: int = MARGIN, stride: int | None = None
) -> list[tuple[int, int]]:
  """Top-left corners (y, x) of the `size` x `size` windows of a regular grid (step `stride`,
  default `size`: windows that do not overlap, from the top-left corner) lying inside the
  image and holding no ground-truth crack pixel within `margin` pixels (Euclidean) of the
  window. Row-major order. `gt`: H x W (or H x W x 1) mask, crack = nonzero."""
  gt = np.asarray(gt)
  if gt.ndim == 3 and gt.shape[-1] == 1:
    gt = gt[..., 0]
  if gt.ndim != 2:
    raise ValueError(f'expected an H x W mask, got shape {gt.shape}')
  if size < 1 or margin < 0:
    raise ValueError(f'size must be >= 1 and margin >= 0, got {size}, {margin}')
  stride = size if stride is None else stride
  if stride < 1:
    raise ValueError(f'stride must be >= 1, got {stride}')
  h, w = gt.shape
  crack = gt != 0
  near = near_crack(crack, margin)
  # Integral image: the number of near pixels in any window in O(1).
  total = np.zeros((h + 1, w + 1), np.int64)
  total[1:, 1:] = np.cumsum(np.cumsum(near, axis=0), axis=1)
  corners = []
  for y in range(0, h - size + 1, stride):
    for x in range(0, w - size + 1, stride):
      count = total[y + size, x + size] - total[y, x + size] - total[y + size, x] + total[y, x]
      if count == 0:
        corners.append((y, x))
  return corners


def crack_free_patches(
  pairs: Iterable[tuple[str, np.ndarray, np.ndarray]],
  *,
  size: int = WINDOW,
  margin: int = MARGIN,
  stride: int | None = None,
  max_patches: int | None = None,
) -> tuple[list[tuple[str, np.ndarray]], dict[str, int]]:
  """Crack-free images from labelled ones: every image whose mask has no crack pixel, whole,
  and the `crack_free_windows` of the others, each cut out as a patch.

  Args:
    pairs: (name, H x W x 3 image, H x W mask) triples.
    max_patches: keep at most this many patches, evenly spaced over the whole list (whole
      images and windows in input order), so that the choice is deterministic.

  Returns:
    (patches, counts): ``[(label, image), ...]`` with labels ``name`` (a whole image) or
    ``name@y,x`` (a window), and ``{'whole_images', 'windows', 'images_with_windows'}``
    before `max_patches`, plus ``'kept'``.
  """
  patches: list[tuple[str, np.ndarray]] = []
  whole = windows = with_windows = 0
  for name, image, gt in pairs:
    gt = np.asarray(gt)
    if not gt.any():
      patches.append((name, np.asarray(image)))
      whole += 1
      continue
    corners = crack_free_windows(gt, size=size, margin=margin, stride=stride)
    with_windows += bool(corners)
    windows += len(corners)
    for y, x in corners:
      patches.append((f'{name}@{y},{x}', np.asarray(image)[y : y + size, x : x + size]))
  if max_patches is not None and len(patches) > max_patches:
    keep = np.unique(np.linspace(0, len(patches) - 1, max_patches).round().astype(int))
    patches = [patches[i] for i in keep]
  counts = {
    'whole_images': whole,
    'windows': windows,
    'images_with_windows': with_windows,
    'kept': len(patches),
  }
  return patches, counts


def skeleton_length(mask: np.ndarray) -> float:
  """Length (px) of a binary mask's skeleton, as measurements.csv's ``length_px``. Measured
  whatever the mask: a false-positive map almost all crack is a length to count here, not a
  photo to flag as no road (`measure.not_road`, which crackjax-predict applies)."""
  from crackjax.deploy import measure

  mask = np.asarray(mask, bool)
  if not mask.any():
    return 0.0
  return measure.skeleton_length(mask)


def fp_length_of_masks(masks: Sequence[np.ndarray]) -> dict[str, Any]:
  """The false-positive figures of predicted masks of crack-free images: ``length_px`` (the
  skeleton lengths summed), ``megapixels`` (the images' pixels / 1e6), ``length_per_mp``
  (their ratio), ``images`` and ``images_with_fp`` (masks with any crack pixel)."""
  if not masks:
    raise ValueError('no crack-free images to measure')
  length = sum(skeleton_length(m) for m in masks)
  pixels = sum(int(np.asarray(m).shape[0]) * int(np.asarray(m).shape[1]) for m in masks)
  return {
    'images': len(masks),
    'images_with_fp': int(sum(bool(np.asarray(m).any()) for m in masks)),
    'megapixels': pixels / 1e6,
    'length_px': float(length),
    'length_per_mp': float(length / (pixels / 1e6)),
  }


def fp_length_per_mp(
  predictor: Callable[[np.ndarray], np.ndarray],
  images: Iterable[np.ndarray],
  *,
  threshold: float | None = None,
  progress: Callable[[int], object] | None = None,
) -> dict[str, Any]:
  """False-positive crack length per megapixel of `predictor` on crack-free `images`.

  Each image's probability map (``predictor(image)``) is thresholded (crack where probability
  > `threshold`, default the predictor's own ``threshold``: a model file's stored one) and the
  skeleton length of the mask counted (`fp_length_of_masks`, whose dict is returned with the
  threshold). `progress(1)` is called after each image (a tqdm bar's ``update``)."""
  t = _threshold(predictor, threshold)
  masks = []
  for image in images:
    masks.append(np.asarray(predictor(image)) > t)
    if progress is not None:
      progress(1)
  return {'threshold': float(t), **fp_length_of_masks(masks)}


def far_false_positives(
  predictor: Callable[[np.ndarray], np.ndarray],
  pairs: Iterable[tuple[np.ndarray, np.ndarray]],
  *,
  margin: int = MARGIN,
  threshold: float | None = None,
) -> dict[str, Any]:
  """`predictor`'s false positives on labelled photos, each predicted whole: the skeleton
  length (px) of its mask at `threshold` (default the predictor's) where the photo lies
  farther than `margin` pixels from any labelled crack, per megapixel of that area. Unlike
  `crack_free_patches`, which needs whole crack-free windows (few in tight crops of cracks),
  every photo counts, and each is predicted with its whole context.

  Args:
    pairs: (H x W x 3 image, H x W mask) pairs, crack = nonzero.
  """
  t = _threshold(predictor, threshold)
  length = 0.0
  area = photos = with_fp = 0
  for image, gt in pairs:
    far = ~near_crack(np.asarray(gt) != 0, margin)
    fp = (np.asarray(predictor(image)) > t) & far
    length += skeleton_length(fp)
    area += int(far.sum())
    photos += 1
    with_fp += bool(fp.any())
  if not area:
    raise ValueError(f'no pixel lies farther than {margin} px from a labelled crack')
  return {
    'threshold': t,
    'margin': margin,
    'photos': photos,
    'photos_with_fp': with_fp,
    'megapixels': area / 1e6,
    'length_px': length,
    'length_per_mp': length / (area / 1e6),
  }
