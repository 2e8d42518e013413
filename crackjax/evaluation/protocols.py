"""Evaluation protocols: input checking, per-threshold counts, and the protocol table.

A protocol turns (probability map, ground truth) pairs into the four count arrays of
:class:`ThresholdCounts` at each threshold of its own grid; everything downstream
(ODS, OIS, AP; :mod:`crackjax.evaluation.aggregate`) is shared. :data:`PROTOCOLS` maps
each name to its :class:`Protocol` spec; the package docstring describes them. A protocol
crackjax does not ship is registered by a plugin (:func:`register_protocol` in an importable
module that the config names in ``plugins``, crackjax/plugins.py; docs/architecture.md,
"Add a protocol").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from crackjax import plugins
from crackjax.evaluation.matching import tolerance_image

__all__ = [
  'FIXED_THRESHOLD',
  'HIGH_TAIL_THRESHOLDS',
  'LOW_TAIL_THRESHOLDS',
  'PROTOCOLS',
  'SUPPORTED_PROTOCOLS',
  'TOLERANCE_MAX_DIST',
  'Protocol',
  'ThresholdCounts',
  'counts_per_threshold',
  'get_protocol',
  'register_protocol',
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
# Threshold grids
# ---------------------------------------------------------------------------

#: Extra thresholds below the uniform grid: ``0.003, 0.005, 0.007``. Down to 0.003 the
#: logit step between neighbours stays <= 0.52, finer than the coarsest step of the
#: uniform grid itself (0.01 -> 0.02: 0.70). Short because a low threshold is the costly
#: one for the tolerance protocols: its map is a large blob to thin (up to ~20x the time
#: of an average threshold); see docs/evaluation.md for the choice and the timings.
LOW_TAIL_THRESHOLDS: tuple[float, ...] = (0.003, 0.005, 0.007)
#: Extra thresholds above the uniform grid: ``{7, 5, 3, 2, 1} x 1e-3`` and ``x 1e-4``
#: below 1 (neighbours <= 0.70 apart in logit) and 0.99999. Longer than the low tail:
#: weighting the crack class (q > 1, e.g. Xie's) pushes crack probabilities towards 1,
#: and high-threshold maps are small and cheap. Ends at 0.99999 (logit 11.5): float32 has
#: only ~170 values in (0.99999, 1), its spacing below 1 being 6e-8.
HIGH_TAIL_THRESHOLDS: tuple[float, ...] = (
  *(0.993, 0.995, 0.997, 0.998, 0.999),
  *(0.9993, 0.9995, 0.9997, 0.9998, 0.9999),
  0.99999,
)
#: The threshold of a deployed model; every grid contains it exactly (``'fixed'`` results).
FIXED_THRESHOLD = 0.5


def _with_tails(uniform: np.ndarray, tails: bool = True) -> np.ndarray:
  """``uniform`` plus 0.5 and (``tails``) the tail thresholds: sorted, no repeats (float64)."""
  extra = [FIXED_THRESHOLD]
  if tails:
    extra += [*LOW_TAIL_THRESHOLDS, *HIGH_TAIL_THRESHOLDS]
  return np.unique(np.concatenate([np.asarray(uniform, np.float64), extra]))


def _check_thresholds(thresholds: Any) -> np.ndarray:
  """An explicit threshold grid as float64: 1-D, non-empty, strictly increasing, in [0, 1].

  Raises:
      ValueError: naming the problem.
  """
  t = np.asarray(thresholds, dtype=np.float64)
  if t.ndim != 1 or t.size == 0:
    raise ValueError(f'thresholds must be a non-empty 1-D sequence, got shape {t.shape}')
  if not (np.isfinite(t).all() and t.min() >= 0 and t.max() <= 1):
    raise ValueError('thresholds must be finite and lie in [0, 1]')
  if t.size > 1 and not (np.diff(t) > 0).all():
    raise ValueError('thresholds must be strictly increasing')
  return t


def _grid(
  protocol: str, num_thresholds: int, thresholds: Sequence[float] | np.ndarray | None
) -> np.ndarray:
  """The explicit ``thresholds`` (checked), or else ``protocol``'s grid for ``num_thresholds``."""
  if thresholds is not None:
    return _check_thresholds(thresholds)
  _check_num_thresholds(num_thresholds)
  return PROTOCOLS[protocol].thresholds(int(num_thresholds))


# ---------------------------------------------------------------------------
# Strict protocol
# ---------------------------------------------------------------------------


def _strict_uniform_thresholds(num_thresholds: int) -> np.ndarray:
  """The uniform part of the strict grid: ``i / n``, ``i = 0..n-1`` (float64)."""
  return np.arange(num_thresholds, dtype=np.float64) / num_thresholds


def _num_thresholds_below(prob: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
  """Returns, per pixel, ``k = #{i : t_i < prob}`` (an int in [0, T]).

  Then ``prob > t_i`` iff ``i < k``, which turns all thresholds into one histogram. The
  thresholds are compared in ``prob``'s dtype (as the plain numpy ``prob > t`` does: a
  float32 map holding ``np.float32(0.29)`` equals threshold 0.29). Rounding is monotone,
  so they stay sorted there, though neighbours may coincide in a narrow dtype (float16);
  ``searchsorted`` counts correctly either way, for any sorted grid.
  """
  p = prob.ravel()
  return np.searchsorted(thresholds.astype(p.dtype), p, side='left')


def _strict_counts(prob: np.ndarray, gt: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
  """Returns int64 (T, 2) array: predicted positives among [non-crack, crack] pixels."""
  n = thresholds.size
  k = _num_thresholds_below(prob, thresholds)
  # One bincount for both classes: offset crack pixels by n + 1 bins.
  hist = np.bincount(k + gt.ravel().astype(np.intp) * (n + 1), minlength=2 * (n + 1))
  hist = hist.reshape(2, n + 1).astype(np.int64)
  # Predicted at threshold i <=> k > i, i.e. bins i+1..n: a reverse cumulative sum.
  above = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]  # above[:, j] = sum_{k >= j}
  return above[:, 1:].T  # row i -> pixels with k >= i + 1


def counts_per_threshold(
  prob: np.ndarray,
  gt: np.ndarray,
  num_thresholds: int = 100,
  *,
  thresholds: Sequence[float] | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Strict (pixel-to-pixel) TP/FP/FN of one image at every threshold at once.

  Identical to looping ``pred = prob > t`` over the thresholds ``t``, each in ``prob``'s
  dtype, but one pass over the pixels.

  Args:
      prob: HxW or HxWx1 crack probabilities in [0, 1].
      gt: binary ground truth of the same size (bool or 0/1 numbers).
      num_thresholds: the uniform part ``i / n``, ``i = 0..n-1``, of the strict grid
          (which also has the tail thresholds and 0.5; ``PROTOCOLS['strict'].thresholds``).
      thresholds: an explicit grid instead (strictly increasing, in [0, 1]); then
          ``num_thresholds`` is ignored.

  Returns:
      ``(tp, fp, fn)``, each an int64 array of shape ``(T,)``, ``T`` the grid size.

  Raises:
      ValueError: on invalid inputs (reported as image 0) or a bad grid.
  """
  grid = _grid('strict', num_thresholds, thresholds)
  prob, gt = _check_pair(0, prob, gt)
  pos = _strict_counts(prob, gt, grid)
  fp, tp = pos[:, 0].copy(), pos[:, 1].copy()
  fn = np.int64(np.count_nonzero(gt)) - tp
  return tp, fp, fn


def _strict_protocol(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], thresholds: np.ndarray
) -> ThresholdCounts:
  """Pixel-to-pixel counts for all images (inputs already validated)."""
  tp = np.empty((len(probs), thresholds.size), np.int64)
  num_pred = np.empty_like(tp)
  num_gt = np.empty_like(tp)
  for j, (prob, gt) in enumerate(zip(probs, gts, strict=True)):
    pos = _strict_counts(prob, gt, thresholds)
    tp[j] = pos[:, 1]
    num_pred[j] = pos.sum(axis=1)
    num_gt[j] = np.count_nonzero(gt)
  return ThresholdCounts(tp, num_pred, tp.copy(), num_gt)


# ---------------------------------------------------------------------------
# Tolerance protocols (BSDS boundary benchmark)
# ---------------------------------------------------------------------------


def _tolerance_uniform_thresholds(num_thresholds: int) -> np.ndarray:
  """BSDS thresholds ``linspace(1/(n+1), 1-1/(n+1), n)``: 0.01..0.99 for n = 99."""
  return np.arange(1, num_thresholds + 1, dtype=np.float64) / (num_thresholds + 1)


def tolerance_counts(
  prob: np.ndarray,
  gt: np.ndarray,
  num_thresholds: int = 99,
  max_dist: float = TOLERANCE_MAX_DIST,
  thin_gt: bool = False,
  *,
  thresholds: Sequence[float] | np.ndarray | None = None,
) -> ThresholdCounts:
  """BSDS-style tolerant counts of one image at every threshold.

  At each threshold ``t`` the prediction ``prob >= t`` (``t`` in ``prob``'s dtype) is
  thinned (:func:`thin`) and its pixels are matched one-to-one to ground-truth pixels at
  Euclidean distance ``<= max_dist * diagonal`` by a maximum bipartite matching. The
  ground truth is used as given (BSDS), or thinned first with ``thin_gt=True``.

  Args:
      prob: HxW or HxWx1 crack probabilities in [0, 1].
      gt: binary ground truth of the same size.
      num_thresholds: the uniform part ``i / (n + 1)``, ``i = 1..n``, of the tolerance
          grid (which also has the tail thresholds and 0.5;
          ``PROTOCOLS['tolerance'].thresholds``).
      max_dist: tolerance as a fraction of the image diagonal (BSDS ``maxDist``).
      thin_gt: thin the ground truth too (``num_gt`` then counts thinned pixels).
      thresholds: an explicit grid instead (strictly increasing, in [0, 1]); then
          ``num_thresholds`` is ignored.

  Returns:
      :class:`ThresholdCounts` of int64 arrays of shape ``(T,)``, ``T`` the grid size.
  """
  grid = _grid('tolerance', num_thresholds, thresholds)
  if not max_dist >= 0:
    raise ValueError(f'max_dist must be >= 0, got {max_dist}')
  prob, gt = _check_pair(0, prob, gt)
  c = tolerance_image(prob, gt, grid, float(max_dist), bool(thin_gt))
  return ThresholdCounts(c[:, 0], c[:, 1], c[:, 0].copy(), c[:, 2])


def _tolerance_protocol(
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  thresholds: np.ndarray,
  thin_gt: bool = False,
) -> ThresholdCounts:
  """Tolerant counts for all images (inputs already validated)."""
  c = np.stack(
    [
      tolerance_image(p, g, thresholds, TOLERANCE_MAX_DIST, thin_gt)
      for p, g in zip(probs, gts, strict=True)
    ]
  )
  return ThresholdCounts(c[..., 0], c[..., 1], c[..., 0].copy(), c[..., 2])


def _tolerance_thin_gt_protocol(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], thresholds: np.ndarray
) -> ThresholdCounts:
  return _tolerance_protocol(probs, gts, thresholds, thin_gt=True)


# ---------------------------------------------------------------------------
# Protocol table
# ---------------------------------------------------------------------------

CountsFn = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], np.ndarray], ThresholdCounts]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Protocol:
  """One evaluation protocol: how it counts, its threshold grid and its mask rule.

  Attributes:
      name: the key of this protocol in :data:`PROTOCOLS`.
      counts: ``counts(probs, gts, thresholds)`` -> :class:`ThresholdCounts` of shape
          (N, T) for validated images (HxW float probabilities, HxW bool ground truth)
          and a strictly increasing float64 grid of ``T`` nominal thresholds.
      uniform_thresholds: ``uniform_thresholds(n)`` -> the ``n`` uniform thresholds
          (float64); :meth:`thresholds` adds the tails and 0.5 to them.
      default_num_thresholds: the size of the uniform part when none is given.
      description: one-line summary, reported as ``protocol_description``.
      bsds: BSDS aggregation (interpolated ODS, BSDS AP, OIS ties -> highest threshold).
      follows_config_grid: whether the size of the uniform part follows the configured
          number of thresholds (``config.eval.num_thresholds``); otherwise the protocol
          always uses ``default_num_thresholds`` (the BSDS benchmark's 99).
      threshold_rule: how a probability map becomes this protocol's mask at a
          threshold, for humans (e.g. recorded next to a saved threshold).
      writes_threshold_file: whether this protocol's ODS threshold is a mask
          threshold worth recording for later prediction (``threshold.json``). The
          tolerance thresholds apply to thinned maps, so they are not.
      parallel: whether counting is worth splitting over processes (``evaluate(...,
          workers=N)``): the tolerance protocols' thinning and matching take ~0.05 CPU-s per
          CrackForest image (docs/performance.md), strict's vectorised counting ~3 ms, less
          than starting a process
          (docs/evaluation.md, "Scoring a run on other data"). The worker processes are
          spawned and unpickle ``counts`` by its module and name: it must then be a
          module-level function of an importable module.
      module: the module that registered it (:func:`register_protocol` records it); None
          for the protocols crackjax ships.
      counts_tp_fp_fn: whether its counts are pixels matched as they are (``matched_pred ==
          matched_gt``, strict): an image's TP, FP and FN then give its F1, and a scoring
          records them per image at the threshold in use (the release gate's bootstrap).
  """

  name: str
  counts: CountsFn
  uniform_thresholds: Callable[[int], np.ndarray]
  default_num_thresholds: int
  description: str
  bsds: bool
  follows_config_grid: bool
  threshold_rule: str
  writes_threshold_file: bool
  parallel: bool = False
  module: str | None = None
  counts_tp_fp_fn: bool = False

  def num_thresholds(self, configured: int | None) -> int:
    """The uniform grid size to evaluate with, given the configured one (``None``: not set)."""
    if self.follows_config_grid and configured is not None:
      return configured
    return self.default_num_thresholds

  def thresholds(self, num_thresholds: int, tails: bool = True) -> np.ndarray:
    """The full grid of nominal thresholds (float64, strictly increasing).

    The ``num_thresholds`` uniform thresholds, :data:`FIXED_THRESHOLD` (0.5) and, with
    ``tails``, :data:`LOW_TAIL_THRESHOLDS` and :data:`HIGH_TAIL_THRESHOLDS`, without
    repeats (a tail or 0.5 that is already a uniform threshold appears once).
    """
    return _with_tails(self.uniform_thresholds(num_thresholds), tails)


_TOLERANCE_RULE = 'crack where probability >= threshold, then thinned to one pixel'
_TAILS = (
  ', plus 0.5 and (by default) the tail thresholds 0.003, 0.005, 0.007 and 0.993, 0.995, '
  '0.997, 0.998, 0.999, 0.9993, 0.9995, 0.9997, 0.9998, 0.9999, 0.99999'
)

_TOLERANCE = Protocol(
  name='tolerance',
  counts=_tolerance_protocol,
  uniform_thresholds=_tolerance_uniform_thresholds,
  default_num_thresholds=99,
  description='BSDS boundary benchmark: prediction prob >= t thinned to one pixel, pixels '
  f'matched one-to-one to ground truth within {TOLERANCE_MAX_DIST} x image diagonal; '
  f'thresholds t = i/(num_thresholds+1) for i = 1..num_thresholds{_TAILS}; '
  'ODS interpolated between neighbouring thresholds, AP as BSDS collect_eval_bdry; '
  'ground truth used as given',
  bsds=True,
  follows_config_grid=False,
  threshold_rule=_TOLERANCE_RULE,
  writes_threshold_file=False,
  parallel=True,
)

#: name -> protocol. crackjax's own go here; a plugin's are added by :func:`register_protocol`.
PROTOCOLS: dict[str, Protocol] = {
  'strict': Protocol(
    name='strict',
    counts=_strict_protocol,
    uniform_thresholds=_strict_uniform_thresholds,
    default_num_thresholds=100,
    description='pixel-to-pixel matching: a pixel is crack iff prob > t, '
    f'thresholds t = i/num_thresholds for i = 0..num_thresholds-1{_TAILS}',
    bsds=False,
    follows_config_grid=True,
    threshold_rule='crack where probability > threshold',
    writes_threshold_file=True,
    counts_tp_fp_fn=True,
  ),
  'tolerance': _TOLERANCE,
  # The same grid, matching and records as 'tolerance'; only the ground truth differs.
  'tolerance_thin_gt': dataclasses.replace(
    _TOLERANCE,
    name='tolerance_thin_gt',
    counts=_tolerance_thin_gt_protocol,
    description="as 'tolerance' (BSDS boundary benchmark), but the ground truth is thinned "
    'to one pixel too before matching (for region-style ground truth several pixels wide)',
  ),
}
#: The protocols crackjax ships (:data:`PROTOCOLS` also holds those plugins register).
SUPPORTED_PROTOCOLS: tuple[str, ...] = tuple(PROTOCOLS)


def register_protocol(name: str, protocol: Protocol, *, module: str | None = None) -> Protocol:
  """Adds a plugin's protocol to :data:`PROTOCOLS` and returns it as registered.

  As `crackjax.models.register_model` (call it from an importable module that the config's
  ``plugins`` names; the rule for taken names is `crackjax.plugins.register`); then
  ``config.eval.protocols`` may name it.

  Raises:
      ValueError: `name` is taken by another module or crackjax, or differs from
          ``protocol.name``.
  """
  module = module or plugins.registering_module()
  if protocol.name != name:
    raise ValueError(f'Protocol registered as {name!r} is named {protocol.name!r}: use one name.')
  return plugins.register(PROTOCOLS, 'Protocol', name, protocol, module)


def get_protocol(name: str) -> Protocol:
  """The :class:`Protocol` called ``name``.

  Raises:
      ValueError: for an unknown name; the message lists the supported protocols.
  """
  try:
    return PROTOCOLS[name]
  except KeyError:
    raise ValueError(f'unknown protocol {name!r}; supported protocols: {list(PROTOCOLS)}') from None
