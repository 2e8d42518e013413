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
"""

from __future__ import annotations

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
