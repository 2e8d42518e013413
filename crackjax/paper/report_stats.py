"""The numbers of `python -m crackjax.paper.report`: each paper row's per-seed values at its
epoch under one protocol (`RowResult`, from the runs of `records.load`), the seeds left out and
why (`left_out`), and Welch's t-test (`welch`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crackjax.evaluation.aggregate import ods_ois_fields
from crackjax.evaluation.result import EPOCH, F1, FIXED, PARAMS, RESULTS, TRAIN_SECONDS
from crackjax.paper import tables


@dataclasses.dataclass
class RowResult:
  """One paper row under one protocol: per-seed values at the row's epoch (fractions)."""

  row: tables.Row
  protocol: str
  seeds: list[int]
  # ods_p, ods_r, ods_f1, ois_p, ois_r, ois_f1, f1_fixed, time_s, params (NaN: not recorded)
  values: dict[str, list[float]]

  def mean_std(self, name: str) -> tuple[float, float]:
    v = np.asarray([x for x in self.values.get(name, []) if np.isfinite(x)], float)
    if v.size == 0:
      return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else math.nan


def _seconds(value: Any) -> float:
  """A recorded time in seconds, NaN where it is unknown (null or absent)."""
  return float(value) if isinstance(value, int | float) else math.nan


def _values_at(run: dict[str, Any], epoch: int, protocol: str) -> dict[str, float] | None:
  by_epoch = {e[EPOCH]: e for e in run['epochs']}
  e = by_epoch.get(epoch)
  if e is None or protocol not in e.get(RESULTS, {}):
    return None
  r = e[RESULTS][protocol]
  # An epoch absent, or its time unknown (evaluated from a checkpoint: null, NaN before strict
  # JSON): NaN, the sum is too.
  times = [_seconds(by_epoch.get(k, {}).get(TRAIN_SECONDS)) for k in range(1, epoch + 1)]
  fixed = r.get(FIXED, {}).get(F1, math.nan)
  return {
    **ods_ois_fields(r),
    'f1_fixed': fixed,
    'time_s': float(np.sum(times)),  # NaN if an epoch's time is unknown
    'params': float(e.get(PARAMS, math.nan)),
  }


def row_results(runs: Sequence[dict[str, Any]], protocol: str) -> list[RowResult]:
  """Every paper row that some run covers, in the paper's order, under `protocol`."""
  out = []
  for rows in tables.TABLES.values():
    out += [r for r in (_row_result(runs, row, protocol) for row in rows) if r is not None]
  return out


def left_out(
  runs: Sequence[dict[str, Any]],
  protocols: Sequence[str],
  set_aside: dict[tuple[int, str, int], dict[int, Path]] | None = None,
) -> list[str]:
  """A line for each row of each run (a row the run's job was started for) that the report
  leaves out under some of `protocols`, and why: its epoch has no record (damaged and set
  aside by the runner, per `set_aside` = `records.set_aside`; not reached yet; absent) or
  lacks a protocol. Each seed of a row is a mean's sample: none is dropped without a word."""
  lines = []
  for run in runs:
    by_epoch = {e['epoch']: e for e in run['epochs'] if 'results' in e}
    aside = (set_aside or {}).get((run['table'], run['group'], run['seed']), {})
    for row in run['rows']:
      epoch, name = row['epochs'], f'table{run["table"]}:{row["key"]} seed {run["seed"]}'
      record = by_epoch.get(epoch)
      if record is None:
        if epoch in aside:
          why = (
            f"epoch {epoch}'s record was damaged and set aside as {aside[epoch]}; run the "
            'runner again: it evaluates that epoch again if its checkpoint is kept, and '
            'otherwise says how to train the job afresh'
          )
        elif max(by_epoch, default=0) < epoch:
          why = (
            f'epoch {epoch} is not evaluated yet (the run reached epoch '
            f'{max(by_epoch, default=0)}: still running, or cut at a time limit; the runner '
            'resumes it)'
          )
        else:
          why = f'epoch {epoch} has no evaluation record'
        lines.append(f'{name}: {why}.')
        continue
      lacking = [p for p in protocols if p not in record['results']]
      if lacking:
        lines.append(
          f'{name}: epoch {epoch} was not evaluated under {lacking} (its record holds '
          f'{list(record["results"])}).'
        )
  return lines


def compare_results(runs: Sequence[dict[str, Any]], protocol: str) -> list[RowResult]:
  """Every row of Tables V-VIII that some run covers, in the paper's order, under `protocol`."""
  out = []
  for rows in tables.COMPARE_TABLES.values():
    out += [r for r in (_row_result(runs, row, protocol) for row in rows) if r is not None]
  return out


def _row_result(runs: Sequence[dict[str, Any]], row, protocol: str) -> RowResult | None:
  """`row`'s results under `protocol` in `runs` (None: no run covers it, or a reference row)."""
  if row.reference:
    return None
  seeds, values = [], {}
  for run in runs:
    if run['table'] != row.table or run['group'] != row.training_group:
      continue
    v = _values_at(run, row.epochs, protocol)
    if v is None:
      continue
    seeds.append(run['seed'])
    for k, x in v.items():
      values.setdefault(k, []).append(x)
  return RowResult(row, protocol, seeds, values) if seeds else None


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
  """Mean difference a - b, its 95% confidence interval and the two-sided p of Welch's
  t-test (NaN where a side has fewer than two values or no spread)."""
  from scipy import stats

  a, b = np.asarray(a, float), np.asarray(b, float)
  diff = float(a.mean() - b.mean()) if a.size and b.size else math.nan
  nan = {'diff': diff, 'low': math.nan, 'high': math.nan, 'p': math.nan}
  if a.size < 2 or b.size < 2:
    return nan
  va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
  se = math.sqrt(va + vb)
  if se == 0:
    return nan
  df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
  half = float(stats.t.ppf(0.975, df)) * se
  p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
  return {'diff': diff, 'low': diff - half, 'high': diff + half, 'p': p}
