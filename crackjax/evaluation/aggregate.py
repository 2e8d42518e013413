"""Aggregation shared by all protocols: P/R/F1, ODS, OIS, AP, and :func:`evaluate`.

The conventions (0/0, tie-breaks, the BSDS variants) are in the package docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from crackjax.evaluation.protocols import (
  FIXED_THRESHOLD,
  Protocol,
  ThresholdCounts,
  _check_images,
  _check_num_thresholds,
  get_protocol,
)
from crackjax.evaluation.result import (
  F1,
  FIXED_F1,
  FIXED_PRECISION,
  FIXED_RECALL,
  ODS,
  OIS,
  PRECISION,
  RECALL,
  Curve,
  ImageRow,
  OperatingPoint,
  PooledPoint,
  ProtocolResult,
)

__all__ = [
  'at_threshold',
  'evaluate',
  'f1_of',
  'from_counts',
  'image_scores',
  'ods_ois_fields',
  'point_from_counts',
  'protocol_result',
]


def _prf(
  matched_pred: np.ndarray, num_pred: np.ndarray, matched_gt: np.ndarray, num_gt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """P, R, F1 elementwise with the package's 0-denominator conventions (no NaN)."""
  p = matched_pred / np.maximum(num_pred, 1)
  r = matched_gt / np.maximum(num_gt, 1)
  denom = p + r
  f1 = np.divide(2 * p * r, denom, out=np.zeros_like(denom), where=denom > 0)
  return p, r, f1


def f1_of(
  matched_pred: np.ndarray, num_pred: np.ndarray, matched_gt: np.ndarray, num_gt: np.ndarray
) -> np.ndarray:
  """F1 elementwise from the four counts, with the package's conventions (`_prf`)."""
  return _prf(*(np.asarray(c, np.float64) for c in (matched_pred, num_pred, matched_gt, num_gt)))[2]


def _average_precision(precision: np.ndarray, recall: np.ndarray) -> float:
  """Area under the P-R curve with monotone interpolated precision (see the package doc)."""
  order = np.argsort(recall, kind='stable')
  r = recall[order]
  p = precision[order]
  # p_interp(r_k) = max precision at recall >= r_k: reverse running maximum.
  p_interp = np.maximum.accumulate(p[::-1])[::-1]
  dr = np.diff(r, prepend=0.0)
  return float(np.sum(dr * p_interp))


def _bsds_fmeasure(p: np.ndarray, r: np.ndarray) -> np.ndarray:
  """BSDS ``fmeasure``: ``2pr / (p + r + ((p + r) == 0))``."""
  s = p + r
  return 2 * p * r / (s + (s == 0))


def bsds_max_f(
  thresholds: np.ndarray, precision: np.ndarray, recall: np.ndarray
) -> tuple[float, float, float, float]:
  """BSDS ``maxF``: best F over the curve linearly interpolated between thresholds.

  For consecutive thresholds i-1, i and d in ``linspace(0, 1, 100)``, t, R and P are
  ``x(i) * d + x(i-1) * (1 - d)``; the first maximum in that scan order (threshold 1
  first) wins, as the benchmark's strict ``f > bestF`` update does. Any increasing grid
  works: each segment is sampled at the same 100 fractions of its own length, so short
  tail segments are sampled as densely (in P and R) as long ones.

  Returns:
      (threshold, precision, recall, f1), interpolated.
  """
  d = np.linspace(0.0, 1.0, 100)

  def lerp(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x[:1], (x[1:, None] * d + x[:-1, None] * (1 - d)).ravel()])

  t, p, r = lerp(thresholds), lerp(precision), lerp(recall)
  k = int(np.argmax(_bsds_fmeasure(p, r)))
  return float(t[k]), float(p[k]), float(r[k]), float(_bsds_fmeasure(p[k], r[k]))


def bsds_average_precision(precision: np.ndarray, recall: np.ndarray) -> float:
  """BSDS ``Area_PR`` of collect_eval_bdry (see the package docstring)."""
  # [Ru, indR] = unique(R) with MATLAB's (pre-2013) last occurrence for repeats.
  order = np.lexsort((np.arange(recall.size), recall))
  r_sorted = recall[order]
  last = np.append(r_sorted[1:] != r_sorted[:-1], True)
  ru, pu = r_sorted[last], precision[order][last]
  if ru.size <= 1:
    return 0.0
  ri = np.arange(101) / 100  # 0 : 0.01 : 1
  p_int = np.interp(ri, ru, pu)
  p_int[(ri < ru[0]) | (ri > ru[-1])] = 0.0  # interp1 gives NaN outside -> 0
  return float(np.sum(p_int) * 0.01)


def _pick_ods(f1: np.ndarray, errors: np.ndarray) -> int:
  """Max F1; ties -> fewest errors; then highest threshold."""
  cand = np.flatnonzero(f1 == f1.max())
  cand = cand[errors[cand] == errors[cand].min()]
  return int(cand[-1])


def _pick_ois(
  f1: np.ndarray, num_pred: np.ndarray, has_crack: bool, ods: int, highest_on_ties: bool
) -> int:
  """OIS threshold index of one image (rules 1-3 of the package docstring)."""
  if not has_crack:
    cand = np.flatnonzero(num_pred == num_pred.min())
    return int(cand[-1])
  best = f1.max()
  if best <= 0:
    return ods
  cand = np.flatnonzero(f1 == best)
  if highest_on_ties:  # BSDS: ff = find(F == max(F)); ff(end)
    return int(cand[-1])
  dist = np.abs(cand - ods)  # in grid steps (index distance), exact on any grid
  cand = cand[dist == dist.min()]
  return int(cand[-1])  # equal distance on both sides -> the higher threshold


class _Curve(NamedTuple):
  """Precision, recall and F1 arrays (one per threshold, or per image and threshold)."""

  precision: np.ndarray
  recall: np.ndarray
  f1: np.ndarray


def _resolve_num_thresholds(spec: Protocol, num_thresholds: int | None) -> int:
  if num_thresholds is None:
    num_thresholds = spec.default_num_thresholds
  _check_num_thresholds(num_thresholds)
  return int(num_thresholds)


def _ods(counts: ThresholdCounts) -> tuple[int, _Curve]:
  """The ODS grid index and the dataset curve (counts summed over images)."""
  total = ThresholdCounts(*(a.sum(axis=0) for a in counts))
  curve = _Curve(*_prf(*total))
  errors = (total.num_pred - total.matched_pred) + (total.num_gt - total.matched_gt)
  return _pick_ods(curve.f1, errors), curve


def _point(curve: _Curve, thresholds: np.ndarray, i: int) -> OperatingPoint:
  """Grid point ``i`` of the dataset curve."""
  return OperatingPoint(
    precision=float(curve.precision[i]),
    recall=float(curve.recall[i]),
    f1=float(curve.f1[i]),
    threshold=float(thresholds[i]),
  )


def _ods_and_ap(
  bsds: bool, thresholds: np.ndarray, curve: _Curve, ods_grid: OperatingPoint
) -> tuple[OperatingPoint, float]:
  """The reported ODS point and AP: BSDS (interpolated maxF, Area_PR) or grid-based."""
  if bsds:
    t, p, r, f = bsds_max_f(thresholds, curve.precision, curve.recall)
    ods = OperatingPoint(precision=p, recall=r, f1=f, threshold=t)
    return ods, bsds_average_precision(curve.precision, curve.recall)
  return ods_grid, _average_precision(curve.precision, curve.recall)


def _ois_indices(counts: ThresholdCounts, f1: np.ndarray, ods: int, bsds: bool) -> np.ndarray:
  """Each image's OIS threshold index, from its per-threshold F1 (rows of ``f1``)."""
  return np.array(
    [
      _pick_ois(f1[j], counts.num_pred[j], bool(counts.num_gt[j, 0] > 0), ods, bsds)
      for j in range(len(f1))
    ],
    dtype=np.intp,
  )


#: How OIS pools (its ``pooling``).
OIS_POOLING = "counts pooled over images at each image's best threshold"


def _ois(counts: ThresholdCounts, chosen: np.ndarray) -> PooledPoint:
  """OIS: P/R/F1 of the counts pooled over images at each image's chosen threshold."""
  rows = np.arange(len(chosen))
  pooled = ThresholdCounts(*(np.sum(a[rows, chosen]) for a in counts))
  p, r, f1 = _prf(*(np.asarray(a) for a in pooled))
  return PooledPoint(precision=float(p), recall=float(r), f1=float(f1), pooling=OIS_POOLING)


def _fixed(curve: _Curve, thresholds: np.ndarray) -> tuple[int, OperatingPoint]:
  """The grid index of :data:`FIXED_THRESHOLD` (0.5) and the dataset's P, R, F1 there."""
  (i,) = np.flatnonzero(thresholds == FIXED_THRESHOLD)  # every grid contains 0.5 exactly
  return int(i), _point(curve, thresholds, int(i))


def _per_image(
  images: _Curve, thresholds: np.ndarray, chosen: np.ndarray, fixed: int
) -> tuple[ImageRow, ...]:
  """Each image's threshold, P, R and F1 at its OIS threshold, and P, R, F1 at 0.5."""
  return tuple(
    ImageRow(
      index=int(j),
      threshold=float(thresholds[t]),
      precision=float(images.precision[j, t]),
      recall=float(images.recall[j, t]),
      f1=float(images.f1[j, t]),
      fixed_precision=float(images.precision[j, fixed]),
      fixed_recall=float(images.recall[j, fixed]),
      fixed_f1=float(images.f1[j, fixed]),
    )
    for j, t in enumerate(chosen)
  )


def ods_ois_fields(result: dict[str, Any]) -> dict[str, float]:
  """The ODS and OIS points of one protocol's results (`evaluate`'s, as the evaluation record
  keeps them) as flat fields, in this order: ods_p, ods_r, ods_f1, ois_p, ois_r, ois_f1
  (precision, recall, F1)."""
  names = {'p': PRECISION, 'r': RECALL, 'f1': F1}
  return {
    f'{point}_{short}': result[point][name] for point in (ODS, OIS) for short, name in names.items()
  }


def image_scores(row: np.ndarray, thresholds: np.ndarray, bsds: bool) -> dict[str, float]:
  """What one image's counts alone decide of its per-image result (`from_counts`' per_image
  row): its OIS F1 ('f1') and its P, R, F1 at 0.5 ('fixed_*'), from its counts on the grid
  `thresholds` (int (4, T), the `ThresholdCounts` fields in order), equal to the final ones.
  Its OIS threshold, P and R are not here: on ties (and where F1 is 0 everywhere) the
  dataset's ODS threshold picks them, known only when every image is counted; the F1 at the
  image's pick is the same whichever the ODS (its best F1, or the crack-free rule's)."""
  counts = ThresholdCounts(*(np.asarray(a)[None] for a in row))
  images = _Curve(*_prf(*counts))
  (fixed,) = np.flatnonzero(thresholds == FIXED_THRESHOLD)
  chosen = _ois_indices(counts, images.f1, int(fixed), bsds)[0]  # any ODS gives this F1
  return {
    F1: float(images.f1[0, chosen]),
    FIXED_PRECISION: float(images.precision[0, fixed]),
    FIXED_RECALL: float(images.recall[0, fixed]),
    FIXED_F1: float(images.f1[0, fixed]),
  }


def _parallel_counts(
  spec: Protocol,
  probs: list[np.ndarray],
  gts: list[np.ndarray],
  thresholds: np.ndarray,
  progress: Callable[[int], None] | None,
  workers: int,
) -> ThresholdCounts:
  """``spec.counts`` over `workers` processes, a few images per task, in image order. Each
  image's row depends on that image only, so the counts are those of one process. The
  processes are spawned (not forked: the parent may run JAX's threads) and import numpy and
  scipy only, and the module of ``spec.counts``: the function itself is sent, not the
  protocol's name, so a plugin's protocol (absent from a fresh process's PROTOCOLS) counts
  there too."""
  import concurrent.futures
  import multiprocessing

  size = max(1, min(8, -(-len(probs) // (4 * workers))))
  starts = range(0, len(probs), size)
  context = multiprocessing.get_context('spawn')
  with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
    futures = [
      pool.submit(spec.counts, probs[i : i + size], gts[i : i + size], thresholds) for i in starts
    ]
    rows = []
    for i, future in zip(starts, futures, strict=True):
      rows.append(future.result())
      if progress is not None:
        progress(len(probs[i : i + size]))
  return ThresholdCounts(*(np.concatenate(arrays) for arrays in zip(*rows, strict=True)))


def _counts(
  spec: Protocol,
  probs: list[np.ndarray],
  gts: list[np.ndarray],
  thresholds: np.ndarray,
  progress: Callable[[int], None] | None,
  workers: int = 1,
) -> ThresholdCounts:
  """``spec.counts`` of all images; with ``progress``, image by image (or chunk by chunk over
  `workers` processes), reporting each."""
  if workers > 1 and spec.parallel and len(probs) > 1:
    return _parallel_counts(spec, probs, gts, thresholds, progress, workers)
  if progress is None:
    return spec.counts(probs, gts, thresholds)
  rows = []
  for prob, gt in zip(probs, gts, strict=True):
    rows.append(spec.counts([prob], [gt], thresholds))
    progress(1)
  return ThresholdCounts(*(np.concatenate(arrays) for arrays in zip(*rows, strict=True)))


def evaluate(probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], **options: Any) -> dict:
  """:func:`protocol_result`'s result as JSON (a dict of python floats, ints and lists: what
  eval.json holds); `options`: its keyword arguments (protocol, num_thresholds,
  tail_thresholds, progress, workers), and the same errors."""
  return protocol_result(probs, gts, **options).to_json()


def protocol_result(
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  *,
  protocol: str = 'strict',
  num_thresholds: int | None = None,
  tail_thresholds: bool = True,
  progress: Callable[[int], None] | None = None,
  workers: int = 1,
) -> ProtocolResult:
  """Evaluates crack probability maps against binary ground truth, typed
  (`crackjax.evaluation.result.ProtocolResult`; :func:`evaluate` gives its JSON). crackjax's
  own scoring carries this typed result and writes its JSON once.

  See the package docstring for the protocol, the 0/0 conventions and tie-breaks.

  Args:
      probs: per-image float arrays in [0, 1], HxW or HxWx1; sizes may differ
          between images.
      gts: per-image binary arrays (bool or 0/1), same size as their prob.
      protocol: matching protocol; one of ``SUPPORTED_PROTOCOLS``.
      num_thresholds: number of uniform thresholds; ``None`` -> the protocol's default
          (strict: 100, thresholds ``i / n`` for ``i = 0..n-1``; tolerance: 99,
          thresholds ``i / (n + 1)`` for ``i = 1..n``). The grid also holds the tail
          thresholds and 0.5 (``get_protocol(protocol).thresholds(n)``). To follow a
          configured grid where the protocol allows it, pass
          ``get_protocol(protocol).num_thresholds(configured)``.
      tail_thresholds: add the tail thresholds (``LOW_TAIL_THRESHOLDS``,
          ``HIGH_TAIL_THRESHOLDS``) to the grid; without them a model whose best
          threshold lies beyond the uniform part gets a capped ODS. 0.5 is always there.
      progress: called with the number of images just counted (e.g. a tqdm bar's
          ``update``); the protocol's count function then runs one image at a time, which
          gives the same counts (each image's row depends on that image only).
      workers: processes that count the images in parallel (> 1: spawned processes, a few
          images each; the same result), for the protocols whose counting is worth it
          (``Protocol.parallel``: the tolerance protocols); the others count in this one.

  Returns:
      The result, whose JSON (``to_json()``, :func:`evaluate`) is a dict of python
      floats/ints/lists only::

          {'protocol', 'protocol_description', 'num_images',
           'num_thresholds',  # the uniform part (the argument, resolved)
           'tail_thresholds',  # bool, the argument
           'grid_size',  # all thresholds evaluated: uniform + 0.5 + tails
           'ods': {'precision', 'recall', 'f1', 'threshold'},
           'ods_grid': {'precision', 'recall', 'f1', 'threshold'},
           'ois': {'precision', 'recall', 'f1', 'pooling'},
           'ois_mean_f1', 'ap',
           'fixed': {'threshold', 'precision', 'recall', 'f1'},  # the dataset at t = 0.5
           'curve': {'thresholds', 'precision', 'recall', 'f1'},  # dataset curve
           'per_image': [{'index', 'threshold', 'precision', 'recall', 'f1',
                          'fixed_precision', 'fixed_recall', 'fixed_f1'}, ...]}

      ``fixed`` is the grid point 0.5 under the protocol's own rule (strict: prob > 0.5,
      the rule of a deployed model; tolerance: prob >= 0.5, thinned), never interpolated.

  Raises:
      ValueError: unknown protocol (the message lists the supported ones), bad
          ``num_thresholds``, length mismatch, or a bad image (the message names the
          image index: shape mismatch, NaN, values outside [0, 1], non-binary gt).
  """
  spec = get_protocol(protocol)
  num_thresholds = _resolve_num_thresholds(spec, num_thresholds)
  probs, gts = _check_images(probs, gts)
  thresholds = spec.thresholds(num_thresholds, bool(tail_thresholds))
  counts = _counts(spec, probs, gts, thresholds, progress, workers)
  return from_counts(protocol, counts, num_thresholds, tail_thresholds)


def from_counts(
  protocol: str, counts: ThresholdCounts, num_thresholds: int, tail_thresholds: bool = True
) -> ProtocolResult:
  """The result of :func:`protocol_result` (typed) from the images' per-threshold counts on
  `protocol`'s grid (``get_protocol(protocol).thresholds(num_thresholds, tail_thresholds)``),
  each array of shape (num_images, T) in image order: what a scoring that keeps counts instead
  of maps (`crackjax.evaluation.streaming`) aggregates at the end. `num_thresholds` as
  resolved (an int). Everything :func:`evaluate` returns follows from the counts alone."""
  spec = get_protocol(protocol)
  num_thresholds = _resolve_num_thresholds(spec, num_thresholds)
  thresholds = spec.thresholds(num_thresholds, bool(tail_thresholds))
  if counts.num_pred.ndim != 2 or counts.num_pred.shape[1] != thresholds.size:
    raise ValueError(
      f'counts of shape {counts.num_pred.shape} do not fit the {protocol} grid of '
      f'{thresholds.size} thresholds'
    )
  if not len(counts.num_pred):
    raise ValueError('no images to evaluate')
  ods, curve = _ods(counts)  # one threshold for the whole dataset
  ods_grid = _point(curve, thresholds, ods)
  ods_result, ap = _ods_and_ap(spec.bsds, thresholds, curve, ods_grid)
  images = _Curve(*_prf(*counts))
  chosen = _ois_indices(counts, images.f1, ods, spec.bsds)  # one threshold per image
  fixed_index, fixed = _fixed(curve, thresholds)
  return ProtocolResult(
    protocol=protocol,
    protocol_description=spec.description,
    num_images=len(chosen),
    num_thresholds=num_thresholds,
    tail_thresholds=bool(tail_thresholds),
    grid_size=int(thresholds.size),
    ods=ods_result,
    ods_grid=ods_grid,
    ois=_ois(counts, chosen),
    ois_mean_f1=float(images.f1[np.arange(len(chosen)), chosen].mean()),
    ap=ap,
    fixed=fixed,
    curve=Curve(
      thresholds=tuple(thresholds.tolist()),
      precision=tuple(curve.precision.tolist()),
      recall=tuple(curve.recall.tolist()),
      f1=tuple(curve.f1.tolist()),
    ),
    per_image=_per_image(images, thresholds, chosen, fixed_index),
  )


def at_threshold(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], *, protocol: str, threshold: float
) -> dict[str, float]:
  """The dataset's precision, recall and F1 (counts pooled over the images, as ODS) at one
  threshold that need not be on any grid, e.g. the one a deployed run uses."""
  if not 0.0 <= float(threshold) <= 1.0:
    raise ValueError(f'threshold must be in [0, 1], got {threshold}')
  spec = get_protocol(protocol)
  probs, gts = _check_images(probs, gts)
  counts = spec.counts(probs, gts, np.array([float(threshold)]))
  return point_from_counts(counts, threshold).to_json(threshold_first=True)


def point_from_counts(counts: ThresholdCounts, threshold: float) -> OperatingPoint:
  """:func:`at_threshold`'s result, typed, from the images' counts at that one threshold
  (arrays of shape (num_images, 1)): pooled over the images."""
  p, r, f1 = _prf(*(np.sum(c, axis=0) for c in counts))
  return OperatingPoint(
    precision=float(p[0]), recall=float(r[0]), f1=float(f1[0]), threshold=float(threshold)
  )
