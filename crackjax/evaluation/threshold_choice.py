"""How a run's mask threshold is chosen from an evaluation record (``config.eval.threshold_over``).

* ``'pooled'`` (the default): the best threshold (ODS) of the split's pooled counts. A mixture's
  validation split pools its datasets' pixels, so the sets with the most crack pixels (CRACK500's
  crops are 20% crack, CrackForest's photos 2%) choose it.
* ``'datasets'``: for a mixture, the one threshold that maximises the mean over its datasets of
  their F1 at it, every dataset alike: the rule its epoch is chosen by (the mean over the
  datasets of their ODS F1, `crackjax.trainer.eval_records.with_members`), so that the threshold
  does not follow the densest set; for a single dataset it is the pooled ODS threshold.

`chosen_threshold` applies the rule to a record; threshold.json (`eval_records.write_threshold`)
and a model's threshold read back from an epoch record (`crackjax.experiment.restored`) both
take it from here.

A photo of a road never seen may need its own threshold, chosen without labels: the model is
less sure of itself there than on the validation parts the stored one was chosen on.
`photo_threshold` blends the stored threshold with the Otsu threshold of the photo's own
probability map; `photo_threshold_counts` scores a weight grid of it on labelled photos
(`bench/lodo.py`'s ``photo`` stage measures it on held-out datasets, issue 55 item 4);
`PhotoThreshold` is the rule as an operating point of a scoring (crackjax-evaluate
--photo_threshold, `crackjax.evaluation.streaming.StreamScorer`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from skimage.filters import threshold_otsu

from crackjax.evaluation.protocols import counts_per_threshold
from crackjax.evaluation.result import EvalRecord

#: The values of ``config.eval.threshold_over``.
THRESHOLD_OVER = ('pooled', 'datasets')


def mean_over_datasets(record: EvalRecord, protocol: str) -> tuple[float, float] | None:
  """(the threshold, the mean F1 there) that maximises the mean over the record's datasets (a
  mixture's, ``record.datasets``) of their `protocol` F1 at one threshold; the highest of equal
  ones, as an ODS is chosen. None: not a mixture's record, a dataset without that protocol, or
  datasets scored on different grids."""
  members = record.datasets or {}
  curves = [m.results.get(protocol) for m in members.values()]
  if not curves or any(c is None for c in curves):
    return None
  grids = {c.curve.thresholds for c in curves}
  if len(grids) != 1:
    return None
  thresholds = grids.pop()
  means = [sum(c.curve.f1[i] for c in curves) / len(curves) for i in range(len(thresholds))]
  best = max(range(len(thresholds)), key=lambda i: (means[i], thresholds[i]))
  return float(thresholds[best]), float(means[best])


def chosen_threshold(record: EvalRecord, protocol: str, over: str = 'pooled') -> tuple[float, str]:
  """The threshold `record` gives under rule `over` (`THRESHOLD_OVER`), and how it was chosen
  in words (threshold.json's ``chosen_by``).

  Raises:
    ValueError: `over` is not a rule; `record` has no `protocol` result.
  """
  if over not in THRESHOLD_OVER:
    raise ValueError(f'threshold_over={over!r} must be one of {list(THRESHOLD_OVER)}.')
  if protocol not in record.results:
    raise ValueError(f'the record of step {record.step} has no {protocol} result.')
  split = record.split
  if over == 'datasets':
    mean = mean_over_datasets(record, protocol)
    if mean is not None:
      n = len(record.datasets or {})
      return mean[0], (
        f'mean over the {n} datasets of their F1 at one threshold, on the {split} split, '
        f'{protocol} protocol'
      )
  return float(record.results[protocol].ods.threshold), (
    f'ODS F1 on the {split} split, {protocol} protocol'
  )


#: The blend weights `photo_threshold_counts` scores by default: 1 is the stored threshold.
PHOTO_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))


def photo_threshold(probs: np.ndarray, stored: float, weight: float) -> float:
  """A photo's own threshold, chosen without labels: ``weight * stored + (1 - weight) *
  otsu``, `otsu` the Otsu threshold of its probability map `probs` (the value that best splits
  its histogram in two, `skimage.filters.threshold_otsu`); `stored` for a map of one value.

  Raises:
    ValueError: `weight` outside [0, 1].
  """
  if not 0.0 <= weight <= 1.0:
    raise ValueError(f'the photo threshold weight must be in [0, 1], got {weight}.')
  probs = np.asarray(probs, np.float32)
  if weight == 1.0 or probs.min() == probs.max():
    return float(stored)
  return float(weight * stored + (1.0 - weight) * threshold_otsu(probs))


@dataclasses.dataclass(frozen=True)
class PhotoThreshold:
  """An operating point at which each photo has its own threshold, `photo_threshold` of its
  map with `stored` and `weight` (e.g. ``{'photo': PhotoThreshold(0.8, 0.3)}`` beside fixed
  thresholds in `StreamScorer`'s operating points)."""

  stored: float
  weight: float

  def __post_init__(self):
    if not (0.0 <= self.stored <= 1.0 and 0.0 <= self.weight <= 1.0):
      raise ValueError(
        f'a photo threshold needs a stored threshold and a weight in [0, 1], got {self}.'
      )

  def of(self, probs: np.ndarray) -> float:
    """The threshold of the photo whose map is `probs`."""
    return photo_threshold(probs, self.stored, self.weight)


def photo_threshold_counts(
  predict: Callable[[np.ndarray], np.ndarray],
  pairs: Iterable[tuple[np.ndarray, np.ndarray]],
  stored: float,
  weights: Sequence[float] = PHOTO_WEIGHTS,
) -> dict[str, list]:
  """Strict (pixel-to-pixel) TP / FP / FN summed over labelled photos, each thresholded at its
  `photo_threshold` for every weight of `weights`.

  Args:
    predict: an image's crack probability map (e.g. a `crackjax.deploy.predictor.Predictor`).
    pairs: (H x W x 3 image, H x W mask) pairs, crack = nonzero.
    stored: the model's stored threshold.
    weights: the blend weights scored (1: the stored threshold itself).

  Returns:
    {'weights', 'tp', 'fp', 'fn', 'f1'} (lists in the order of `weights`) and 'photos'.
  """
  totals = np.zeros((len(weights), 3), np.int64)
  photos = 0
  for image, gt in pairs:
    probs = np.asarray(predict(image), np.float32)
    cuts = [photo_threshold(probs, stored, w) for w in weights]
    grid = np.unique(np.asarray(cuts, np.float32))
    tp, fp, fn = counts_per_threshold(probs, np.asarray(gt) != 0, thresholds=grid)
    at = np.searchsorted(grid, np.asarray(cuts, np.float32))
    totals += np.stack([tp[at], fp[at], fn[at]], axis=1)
    photos += 1
  f1 = [2 * tp / max(2 * tp + fp + fn, 1) for tp, fp, fn in totals.tolist()]
  return {
    'weights': list(weights),
    'tp': totals[:, 0].tolist(),
    'fp': totals[:, 1].tolist(),
    'fn': totals[:, 2].tolist(),
    'f1': f1,
    'photos': photos,
  }
