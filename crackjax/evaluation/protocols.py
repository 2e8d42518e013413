"""Evaluation protocols: input checking, per-threshold counts, and the protocol table.

A protocol turns (probability map, ground truth) pairs into the four count arrays of
:class:`ThresholdCounts` at each threshold of its own grid; everything downstream
(ODS, OIS, AP; :mod:`crackjax.evaluation.aggregate`) is shared. :data:`PROTOCOLS` maps
each name to its :class:`Protocol` spec; the package docstring describes them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from crackjax.evaluation.matching import max_matching_size
from crackjax.evaluation.thinning import thin_coords

__all__ = [
  'PROTOCOLS',
  'SUPPORTED_PROTOCOLS',
  'TOLERANCE_MAX_DIST',
  'Protocol',
  'ThresholdCounts',
  'counts_per_threshold',
  'get_protocol',
  'tolerance_counts',
]

#: BSDS ``maxDist``: matching tolerance as a fraction of the image diagonal.
TOLERANCE_MAX_DIST = 0.0075


class ThresholdCounts(NamedTuple):
  """Per-image, per-threshold counts, each an int64 array of shape (num_images, T).

  Precision is ``matched_pred / num_pred`` and recall ``matched_gt / num_gt``. For
  the strict protocol ``matched_pred == matched_gt == TP``, ``num_pred = TP + FP``
  and ``num_gt = TP + FN``; a tolerance protocol matches predicted and ground-truth
  pixels separately, which is why the two matched counts are kept apart.
  """

  matched_pred: np.ndarray
  num_pred: np.ndarray
  matched_gt: np.ndarray
  num_gt: np.ndarray


# ---------------------------------------------------------------------------
# Input checking
# ---------------------------------------------------------------------------


def _squeeze_channel(a: np.ndarray) -> np.ndarray:
  """Drops a trailing singleton channel so HxW and HxWx1 compare equal."""
  if a.ndim == 3 and a.shape[-1] == 1:
    return a[..., 0]
  return a


def _check_pair(index: int, prob: Any, gt: Any) -> tuple[np.ndarray, np.ndarray]:
  """Validates one (prob, gt) pair and returns (prob, gt as bool), both HxW.

  Raises:
      ValueError: naming ``index`` and the problem.
  """
  prob = np.asarray(prob)
  gt = np.asarray(gt)
  prob_shape, gt_shape = prob.shape, gt.shape  # as given, for the messages
  where = f'image {index}'
  if prob.dtype.kind not in 'fiub':
    raise ValueError(f'{where}: probs must be real numbers, got dtype {prob.dtype}')
  if prob.dtype.kind != 'f':
    # Integer/bool maps are legal only as 0/1 maps; float64 keeps them exact.
    prob = prob.astype(np.float64)
  prob = _squeeze_channel(prob)
  gt = _squeeze_channel(gt)
  if prob.ndim != 2:
    raise ValueError(f'{where}: probs must have shape HxW or HxWx1, got {prob_shape}')
  if gt.shape != prob.shape:
    raise ValueError(f'{where}: shape mismatch between probs {prob_shape} and gt {gt_shape}')
  if prob.size == 0:
    raise ValueError(f'{where}: image has no pixels (shape {prob_shape})')
  if np.isnan(prob).any():
    raise ValueError(f'{where}: probs contain NaN')
  lo, hi = prob.min(), prob.max()
  if lo < 0 or hi > 1:
    raise ValueError(f'{where}: probs must lie in [0, 1], got range [{lo}, {hi}]')
  if gt.dtype != np.bool_:
    if gt.dtype.kind not in 'fiu':
      raise ValueError(f'{where}: gt must be binary, got dtype {gt.dtype}')
    bad = (gt != 0) & (gt != 1)
    if bad.any():
      values = np.unique(gt[bad])[:5].tolist()
      raise ValueError(f'{where}: gt must be binary (0/1), found values {values}')
    gt = gt == 1
  return prob, gt


def _check_num_thresholds(num_thresholds: int) -> None:
  if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, int | np.integer):
    raise ValueError(f'num_thresholds must be an int, got {num_thresholds!r}')
  if num_thresholds < 1:
    raise ValueError(f'num_thresholds must be >= 1, got {num_thresholds}')


def _check_images(
  probs: Sequence[Any], gts: Sequence[Any]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """Validates all (prob, gt) pairs; returns them as lists of HxW arrays (gt bool)."""
  probs = list(probs)
  gts = list(gts)
  if len(probs) != len(gts):
    raise ValueError(f'got {len(probs)} probability maps but {len(gts)} ground truths')
  if not probs:
    raise ValueError('no images to evaluate')
  checked = [_check_pair(i, p, g) for i, (p, g) in enumerate(zip(probs, gts, strict=True))]
  return [c[0] for c in checked], [c[1] for c in checked]


# ---------------------------------------------------------------------------
# Strict protocol
# ---------------------------------------------------------------------------


def _strict_thresholds(num_thresholds: int) -> np.ndarray:
  """Nominal strict thresholds ``i / n``, ``i = 0..n-1`` (float64)."""
  return np.arange(num_thresholds, dtype=np.float64) / num_thresholds


def _thresholds_as(dtype: np.dtype, num_thresholds: int) -> np.ndarray:
  """Thresholds i/n in ``dtype``: what ``prob > i / n`` compares against in numpy."""
  return (np.arange(num_thresholds, dtype=np.float64) / num_thresholds).astype(dtype)


def _num_thresholds_below(prob: np.ndarray, num_thresholds: int) -> np.ndarray:
  """Returns, per pixel, ``k = #{i : t_i < prob}`` (an int in [0, n]).

  Then ``prob > t_i`` iff ``i < k``, which turns all thresholds into one histogram.
  ``ceil(prob * n)`` is the answer in exact arithmetic; rounding of the product and
  of the thresholds (e.g. float32(0.29) vs 0.29) can put it off by one near a
  threshold, so it is corrected by comparing against the dtype-exact thresholds.
  This is ~2x faster than ``np.searchsorted`` and gives the same result.
  """
  n = num_thresholds
  p = prob.ravel()
  thr = _thresholds_as(p.dtype, n)
  k = np.ceil(p.astype(np.float64) * n).astype(np.intp)
  np.clip(k, 0, n, out=k)
  # Loop rather than a single pass so the result stays exact even when thresholds
  # collide in a narrow dtype (huge n with float16); normally one pass is a no-op.
  while True:
    up = (k < n) & (thr[np.minimum(k, n - 1)] < p)
    down = (k > 0) & (thr[np.maximum(k - 1, 0)] >= p)
    if not (up.any() or down.any()):
      return k
    # up and down never hold together (thresholds are sorted).
    k += up
    k -= down


def _strict_counts(prob: np.ndarray, gt: np.ndarray, num_thresholds: int) -> np.ndarray:
  """Returns int64 (T, 2) array: predicted positives among [non-crack, crack] pixels."""
  n = num_thresholds
  k = _num_thresholds_below(prob, n)
  # One bincount for both classes: offset crack pixels by n + 1 bins.
  hist = np.bincount(k + gt.ravel().astype(np.intp) * (n + 1), minlength=2 * (n + 1))
  hist = hist.reshape(2, n + 1).astype(np.int64)
  # Predicted at threshold i <=> k > i, i.e. bins i+1..n: a reverse cumulative sum.
  above = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]  # above[:, j] = sum_{k >= j}
  return above[:, 1:].T  # row i -> pixels with k >= i + 1


def counts_per_threshold(
  prob: np.ndarray, gt: np.ndarray, num_thresholds: int = 100
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Strict (pixel-to-pixel) TP/FP/FN of one image at every threshold at once.

  Identical to looping ``pred = prob > i / num_thresholds`` for each ``i``, with
  the threshold in ``prob``'s dtype, but one pass over the pixels.

  Args:
      prob: HxW or HxWx1 crack probabilities in [0, 1].
      gt: binary ground truth of the same size (bool or 0/1 numbers).
      num_thresholds: number of thresholds ``T``; thresholds are ``i / T``.

  Returns:
      ``(tp, fp, fn)``, each an int64 array of shape ``(T,)``.

  Raises:
      ValueError: on invalid inputs (reported as image 0).
  """
  _check_num_thresholds(num_thresholds)
  prob, gt = _check_pair(0, prob, gt)
  pos = _strict_counts(prob, gt, num_thresholds)
  fp, tp = pos[:, 0].copy(), pos[:, 1].copy()
  fn = np.int64(np.count_nonzero(gt)) - tp
  return tp, fp, fn


def _strict_protocol(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], num_thresholds: int
) -> ThresholdCounts:
  """Pixel-to-pixel counts for all images (inputs already validated)."""
  tp = np.empty((len(probs), num_thresholds), np.int64)
  num_pred = np.empty_like(tp)
  num_gt = np.empty_like(tp)
  for j, (prob, gt) in enumerate(zip(probs, gts, strict=True)):
    pos = _strict_counts(prob, gt, num_thresholds)
    tp[j] = pos[:, 1]
    num_pred[j] = pos.sum(axis=1)
    num_gt[j] = np.count_nonzero(gt)
  return ThresholdCounts(tp, num_pred, tp.copy(), num_gt)


# ---------------------------------------------------------------------------
# Tolerance protocols (BSDS boundary benchmark)
# ---------------------------------------------------------------------------


def _tolerance_thresholds(num_thresholds: int) -> np.ndarray:
  """BSDS thresholds ``linspace(1/(n+1), 1-1/(n+1), n)``: 0.01..0.99 for n = 99."""
  return np.arange(1, num_thresholds + 1, dtype=np.float64) / (num_thresholds + 1)


def _tolerance_image(
  prob: np.ndarray, gt: np.ndarray, num_thresholds: int, max_dist: float, thin_gt: bool
) -> np.ndarray:
  """Returns int64 (T, 3): [matched, thinned predictions, GT pixels] per threshold.

  One ground truth, so matched predictions == matched GT pixels == matching size.
  """
  h, w = prob.shape
  radius = max_dist * math.sqrt(h * h + w * w)  # correspondPixels: maxDist * diagonal
  out = np.zeros((num_thresholds, 3), np.int64)
  gy, gx = np.nonzero(gt)
  if thin_gt:
    gy, gx = thin_coords(gy, gx)
  num_gt = gy.size
  out[:, 2] = num_gt

  # Pixel pairs closer than or at `radius` (BSDS drops a pair iff d > maxDist).
  r = int(math.floor(radius))
  dy, dx = np.mgrid[-r : r + 1, -r : r + 1]
  near_offsets = np.sqrt(dy * dy + dx * dx) <= radius
  # GT pixel ids on a grid padded by r, -1 elsewhere; offsets then never leave it.
  stride = w + 2 * r
  gid = np.full((h + 2 * r) * stride, -1, np.int64)
  gid[(gy + r) * stride + gx + r] = np.arange(num_gt)
  # Nearest offsets first: the greedy start of max_matching_size tries them in order.
  by_dist = np.argsort((dy * dy + dx * dx)[near_offsets], kind='stable')
  offs = (dy[near_offsets] * stride + dx[near_offsets])[by_dist]
  # Pixels with some GT pixel within the radius (only they can be matched).
  near = np.zeros((h + 2 * r) * stride, bool)
  if num_gt:
    g_lin = (gy + r) * stride + gx + r
    near[(g_lin[:, None] + offs).ravel()] = True
  near = near.reshape(h + 2 * r, stride)[r : r + h, r : r + w]

  # Predictions are nested: sort candidate pixels by decreasing prob once; the
  # prediction at threshold i is a prefix of that order.
  flat = prob.ravel()
  thr = _tolerance_thresholds(num_thresholds).astype(flat.dtype)
  cand = np.flatnonzero(flat >= thr[0])
  vals = flat[cand]
  order = np.argsort(vals, kind='stable')
  counts = cand.size - np.searchsorted(vals[order], thr, side='left')
  cand = cand[order[::-1]]
  cy, cx = np.divmod(cand, w)
  prev_k, prev_lin = -1, None
  for i, k in enumerate(counts):
    if k == prev_k:  # same binary map as the previous threshold
      out[i, :2] = out[i - 1, :2]
      continue
    prev_k = k
    ty, tx = thin_coords(cy[:k], cx[:k])
    out[i, 1] = ty.size
    if num_gt == 0 or ty.size == 0:
      prev_lin = None
      continue
    keep = near[ty, tx]
    lin = (ty[keep] + r) * stride + tx[keep] + r
    if prev_lin is not None and np.array_equal(lin, prev_lin):
      out[i, 0] = out[i - 1, 0]  # same matchable pixels -> same graph
      continue
    prev_lin = lin
    if lin.size:
      out[i, 0] = max_matching_size(gid[lin[:, None] + offs], num_gt)
  return out


def tolerance_counts(
  prob: np.ndarray,
  gt: np.ndarray,
  num_thresholds: int = 99,
  max_dist: float = TOLERANCE_MAX_DIST,
  thin_gt: bool = False,
) -> ThresholdCounts:
  """BSDS-style tolerant counts of one image at every threshold.

  At threshold ``t_i = i / (num_thresholds + 1)``, ``i = 1..num_thresholds``, the
  prediction ``prob >= t_i`` is thinned (:func:`thin`) and its pixels are matched
  one-to-one to ground-truth pixels at Euclidean distance ``<= max_dist * diagonal``
  by a maximum bipartite matching. The ground truth is used as given (BSDS), or
  thinned first with ``thin_gt=True``.

  Args:
      prob: HxW or HxWx1 crack probabilities in [0, 1].
      gt: binary ground truth of the same size.
      num_thresholds: number of thresholds ``T``.
      max_dist: tolerance as a fraction of the image diagonal (BSDS ``maxDist``).
      thin_gt: thin the ground truth too (``num_gt`` then counts thinned pixels).

  Returns:
      :class:`ThresholdCounts` of int64 arrays of shape ``(T,)``.
  """
  _check_num_thresholds(num_thresholds)
  if not max_dist >= 0:
    raise ValueError(f'max_dist must be >= 0, got {max_dist}')
  prob, gt = _check_pair(0, prob, gt)
  c = _tolerance_image(prob, gt, int(num_thresholds), float(max_dist), bool(thin_gt))
  return ThresholdCounts(c[:, 0], c[:, 1], c[:, 0].copy(), c[:, 2])


def _tolerance_protocol(
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  num_thresholds: int,
  thin_gt: bool = False,
) -> ThresholdCounts:
  """Tolerant counts for all images (inputs already validated)."""
  c = np.stack(
    [
      _tolerance_image(p, g, num_thresholds, TOLERANCE_MAX_DIST, thin_gt)
      for p, g in zip(probs, gts, strict=True)
    ]
  )
  return ThresholdCounts(c[..., 0], c[..., 1], c[..., 0].copy(), c[..., 2])


def _tolerance_thin_gt_protocol(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], num_thresholds: int
) -> ThresholdCounts:
  return _tolerance_protocol(probs, gts, num_thresholds, thin_gt=True)


# ---------------------------------------------------------------------------
# Protocol table
# ---------------------------------------------------------------------------

CountsFn = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], int], ThresholdCounts]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Protocol:
  """One evaluation protocol: how it counts, its threshold grid and its mask rule.

  Attributes:
      name: the key of this protocol in :data:`PROTOCOLS`.
      counts: ``counts(probs, gts, n)`` -> :class:`ThresholdCounts` of shape (N, n) for
          validated images (HxW float probabilities, HxW bool ground truth).
      thresholds: ``thresholds(n)`` -> the ``n`` nominal thresholds (float64).
      default_num_thresholds: the grid size when none is given.
      description: one-line summary, reported as ``protocol_description``.
      bsds: BSDS aggregation (interpolated ODS, BSDS AP, OIS ties -> highest threshold).
      follows_config_grid: whether the grid size follows the configured number of
          thresholds (``config.eval.num_thresholds``); otherwise the protocol always
          uses ``default_num_thresholds`` (the BSDS benchmark's 99).
      threshold_rule: how a probability map becomes this protocol's mask at a
          threshold, for humans (e.g. recorded next to a saved threshold).
      writes_threshold_file: whether this protocol's ODS threshold is a mask
          threshold worth recording for later prediction (``threshold.json``). The
          tolerance thresholds apply to thinned maps, so they are not.
  """

  name: str
  counts: CountsFn
  thresholds: Callable[[int], np.ndarray]
  default_num_thresholds: int
  description: str
  bsds: bool
  follows_config_grid: bool
  threshold_rule: str
  writes_threshold_file: bool

  def num_thresholds(self, configured: int | None) -> int:
    """The grid size to evaluate with, given the configured one (``None``: not set)."""
    if self.follows_config_grid and configured is not None:
      return configured
    return self.default_num_thresholds


_TOLERANCE_RULE = 'crack where probability >= threshold, then thinned to one pixel'

#: name -> protocol. New protocols go here.
PROTOCOLS: dict[str, Protocol] = {
  'strict': Protocol(
    name='strict',
    counts=_strict_protocol,
    thresholds=_strict_thresholds,
    default_num_thresholds=100,
    description='pixel-to-pixel matching: a pixel is crack iff prob > t, '
    'thresholds t = i/num_thresholds for i = 0..num_thresholds-1',
    bsds=False,
    follows_config_grid=True,
    threshold_rule='crack where probability > threshold',
    writes_threshold_file=True,
  ),
  'tolerance': Protocol(
    name='tolerance',
    counts=_tolerance_protocol,
    thresholds=_tolerance_thresholds,
    default_num_thresholds=99,
    description='BSDS boundary benchmark: prediction prob >= t thinned to one pixel, pixels '
    f'matched one-to-one to ground truth within {TOLERANCE_MAX_DIST} x image diagonal; '
    'thresholds t = i/(num_thresholds+1) for i = 1..num_thresholds; '
    'ODS interpolated between neighbouring thresholds, AP as BSDS collect_eval_bdry; '
    'ground truth used as given',
    bsds=True,
    follows_config_grid=False,
    threshold_rule=_TOLERANCE_RULE,
    writes_threshold_file=False,
  ),
  'tolerance_thin_gt': Protocol(
    name='tolerance_thin_gt',
    counts=_tolerance_thin_gt_protocol,
    thresholds=_tolerance_thresholds,
    default_num_thresholds=99,
    description="as 'tolerance' (BSDS boundary benchmark), but the ground truth is thinned "
    'to one pixel too before matching (for region-style ground truth several pixels wide)',
    bsds=True,
    follows_config_grid=False,
    threshold_rule=_TOLERANCE_RULE,
    writes_threshold_file=False,
  ),
}
SUPPORTED_PROTOCOLS: tuple[str, ...] = tuple(PROTOCOLS)


def get_protocol(name: str) -> Protocol:
  """The :class:`Protocol` called ``name``.

  Raises:
      ValueError: for an unknown name; the message lists the supported protocols.
  """
  try:
    return PROTOCOLS[name]
  except KeyError:
    raise ValueError(
      f'unknown protocol {name!r}; supported protocols: {list(SUPPORTED_PROTOCOLS)}'
    ) from None
