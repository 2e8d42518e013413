"""Tables I-VIII as re-run by `crackjax.paper.runner`, beside the paper's figures.

  python -m crackjax.paper.report repro/cpu                      # -> repro/cpu/report/
  python -m crackjax.paper.report repro/cpu --export=results/cpu_scale.json   # small, committable
  python -m crackjax.paper.report results/cpu_scale.json --out=docs/reproduction/cpu_scale

Inputs are campaign directories of `crackjax.paper.runner` (``table<T>/<group>/seed<S>/`` with
``run.json`` and ``epoch_<NNN>.json``) or JSON files written by ``--export`` (the same results
without checkpoints, per-threshold curves or logs: a few kB per run), so a committed report can
be regenerated anywhere.

Written to ``--out``:
  report.md     per table and protocol, the paper's layout: each row's ODS and OIS precision,
                recall and F1 and its F1 at the fixed threshold 0.5, mean (std) over seeds in
                percent, the training time, and beside them the paper's value and the
                difference; then the paper's claim tested: each row against the longest
                wce_xie row (the paper's second baseline) with Welch's t-test.
  report.csv    the same numbers, one line per (table, row, protocol).
  curves_table<T>_<protocol>.png   ODS and OIS F1 against the epoch per training group, mean
                and min-max over seeds (Figs. 5-6 of the paper).
  report_compare.csv   Tables V-VIII (the comparison models), when a run of theirs is there:
                per (table, row, protocol) our ODS / OIS / fixed-threshold F1, time and
                parameter count beside the paper's ODS, OIS, parameters, GFLOPS, TT and FPS.
                report.md shows them too, with each model's dagger row against its original
                one (Welch's t-test), as the paper compares them.
  .crackjax-outputs.json   the files above with their SHA-256: a later report replaces them
                without a word while they are unchanged; any other file of those names (a
                user's own report.md, or one edited since) only with --overwrite. Links in
                --out are refused (`crackjax.runs.outputs`).

Every number names its protocol (docs/evaluation.md) and the hardware it ran on; the paper's
figures are its own protocol's (unnamed there, see docs/reproduction.md).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import flags

from crackjax.config import flags as config_flags
from crackjax.paper import records
from crackjax.paper import tables as paper
from crackjax.runs import exits, outputs

PROG = 'python -m crackjax.paper.report'
USAGE = f'{PROG} CAMPAIGN_DIR_OR_EXPORT.json ... [--out=DIR] [--export=FILE] [flags]'
# ------------------------------------------------------------------------------------- numbers


@dataclasses.dataclass
class RowResult:
  """One paper row under one protocol: per-seed values at the row's epoch (fractions)."""

  row: paper.Row
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
  by_epoch = {e['epoch']: e for e in run['epochs']}
  e = by_epoch.get(epoch)
  if e is None or protocol not in e.get('results', {}):
    return None
  r = e['results'][protocol]
  # An epoch absent, or its time unknown (evaluated from a checkpoint: null, NaN before strict
  # JSON): NaN, the sum is too.
  times = [_seconds(by_epoch.get(k, {}).get('train_seconds')) for k in range(1, epoch + 1)]
  fixed = r.get('fixed', {}).get('f1', math.nan)
  return {
    'ods_p': r['ods']['precision'],
    'ods_r': r['ods']['recall'],
    'ods_f1': r['ods']['f1'],
    'ois_p': r['ois']['precision'],
    'ois_r': r['ois']['recall'],
    'ois_f1': r['ois']['f1'],
    'f1_fixed': fixed,
    'time_s': float(np.sum(times)),  # NaN if an epoch's time is unknown
    'params': float(e.get('params', math.nan)),
  }


def row_results(runs: Sequence[dict[str, Any]], protocol: str) -> list[RowResult]:
  """Every paper row that some run covers, in the paper's order, under `protocol`."""
  out = []
  for rows in paper.TABLES.values():
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
  for rows in paper.COMPARE_TABLES.values():
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


# ------------------------------------------------------------------------------------- writing


def _method(row: paper.Row) -> str:
  """The row's method as the paper prints it, with q's parameters where the paper gives them
  in other columns (Table I has two 'wce_power' rows: beta 0.5, gamma 1/2 and 0.85, 1/3)."""
  if row.weighting in (None, 'xie') or row.b or row.beta is None:
    return row.name
  gamma = ''
  if row.weighting == 'power' and row.gamma:
    den = round(1 / row.gamma)
    gamma = f', γ=1/{den}' if abs(row.gamma * den - 1) < 1e-9 else f', γ={row.gamma:g}'
  return f'{row.name} (β={row.beta:g}{gamma})'


def _welch_cells(a: Sequence[float], b: Sequence[float]) -> str:
  """'Δ | 95% CI | p' table cells of `welch(a, b)`, in points ('–' where undefined)."""
  w = welch(a, b)
  ci = f'[{100 * w["low"]:+.2f}, {100 * w["high"]:+.2f}]' if np.isfinite(w['low']) else '–'
  p = f'{w["p"]:.3g}' if np.isfinite(w['p']) else '–'
  return f'{100 * w["diff"]:+.2f} | {ci} | {p}'


def _pct(mean: float, std: float) -> str:
  if not np.isfinite(mean):
    return '–'
  return f'{100 * mean:.2f}' + (f' ({100 * std:.2f})' if np.isfinite(std) else '')


def _time(seconds: float) -> str:
  if not np.isfinite(seconds):
    return '–'
  m, s = divmod(round(seconds), 60)
  return f'{m}min {s:02d}s' if m else f'{s}s'


def _describe_runs(runs: Sequence[dict[str, Any]]) -> list[str]:
  lines = []
  kinds = sorted(
    {
      f'{r["hardware"].get("device_kind", "?")} ({r["hardware"].get("backend", "?")}; CPU '
      f'{r["hardware"].get("cpu", "?")}, {r["hardware"].get("cpu_count", "?")} cores)'
      for r in runs
    }
  )
  lines.append(f'- Hardware: {"; ".join(kinds)}.')
  side = sorted({r.get('side_by_side', 1) for r in runs})
  if side != [1]:
    lines.append(
      f'- Jobs ran side by side ({"/".join(map(str, side))} processes): times are shared.'
    )
  settings = sorted({json.dumps(r['setting'], sort_keys=True) for r in runs})
  for text in settings:
    # A field absent (an export of an older setting_of) is unknown: '?' (None means unset).
    s = dict.fromkeys(('widths', 'width_scale', 'input_size', 'steps_per_epoch'), '?')
    s |= {'batch_size': '?', 'dtype': '?', **json.loads(text)}
    model = s.get('model') or 'unet'
    net = (
      f'widths {s["widths"]}' if model == 'unet' else f'{model} (width_scale {s["width_scale"]})'
    )
    lines.append(
      f'- Setting: {net}, training input {s["input_size"] or "full images"}, '
      f'{s["steps_per_epoch"]} steps/epoch, batch {s["batch_size"]}, {s["dtype"]}.'
    )
  commits = sorted({str(r['versions'].get('commit')) for r in runs})
  jax_versions = sorted({str(r['versions'].get('jax')) for r in runs})
  lines.append(f'- Code: commit {", ".join(commits)}; jax {", ".join(jax_versions)}.')
  return lines


def _baseline(results: Sequence[RowResult], table: int) -> RowResult | None:
  """The longest wce_xie row of `table` that has results (the paper's second baseline)."""
  xie = [r for r in results if r.row.table == table and r.row.weighting == 'xie' and r.row.b == 0]
  return max(xie, key=lambda r: r.row.epochs, default=None)


def _is_xie(r: RowResult) -> bool:
  return r.row.weighting == 'xie' and r.row.b == 0


def _same_epochs(results: Sequence[RowResult]) -> list[str]:
  """Each other row against the wce_xie row of the same epochs (the paper's Table I has
  wce_xie at 5, 10, 20 and 70 epochs), where both have results."""
  xie = {r.row.epochs: r for r in results if _is_xie(r)}
  pairs = [(r, xie[r.row.epochs]) for r in results if not _is_xie(r) and r.row.epochs in xie]
  if not pairs:
    return []
  out = [
    'Against wce_xie trained for the same number of epochs (ODS F1, points; Welch 95% CI '
    'and two-sided p):',
    '',
    '| method | epochs | seeds | Δ ODS F1 (ours) | 95% CI | p | Δ ODS F1 (paper) |',
    '|---|---|---|---|---|---|---|',
  ]
  for r, base in pairs:
    cells = _welch_cells(r.values['ods_f1'], base.values['ods_f1'])
    out.append(
      f'| {_method(r.row)} | {r.row.epochs} | {len(r.seeds)} vs {len(base.seeds)} | {cells} | '
      f'{r.row.ods.f1.mean - base.row.ods.f1.mean:+.2f} |'
    )
  return [*out, '']


# ------------------------------------------------------ one renderer, two groups of tables
# A table is its columns, one description that the Markdown and the CSV renderer both read
# (the CSV shows some that Markdown does not, and the other way round). Tables I-IV and Tables
# V-VIII differ only in their columns and in their follow-up tables (Welch tests against a
# baseline, and dagger against the original loss).


@dataclasses.dataclass(frozen=True)
class Column:
  """One column of a results table, for both renderers.

  Attributes:
    title: the Markdown header; None: a CSV-only column.
    cell: the Markdown cell of a RowResult (None for a CSV-only column).
    names: the CSV headers, one per value (a statistic has two: its mean and its std); empty:
      a Markdown-only column.
    values: the CSV values of a RowResult, one per name (None for a Markdown-only column).
  """

  title: str | None
  cell: Callable[[RowResult], str] | None
  names: tuple[str, ...] = ()
  values: Callable[[RowResult], Sequence[Any]] | None = None


def _md(title: str, cell: Callable[[RowResult], str]) -> Column:
  """A Markdown-only column."""
  return Column(title, cell)


def _csv(name: str, value: Callable[[RowResult], Any]) -> Column:
  """A CSV-only column."""
  return Column(None, None, (name,), lambda r: (value(r),))


def _both(
  title: str, cell: Callable[[RowResult], str], name: str, value: Callable[[RowResult], Any]
) -> Column:
  """A column of both renderers: Markdown shows `cell`, CSV `value` (for the paper's figures,
  the printed text there and the number here)."""
  return Column(title, cell, (name,), lambda r: (value(r),))


def _statistic(
  title: str, name: str, scale: float = 100.0, cell: Callable[[RowResult], str] | None = None
) -> Column:
  """A statistic over seeds: Markdown 'mean (std)' in percent (or `cell`), CSV its mean and
  std times `scale` (percent like the paper, seconds, counts) in <name>_mean, <name>_std."""

  def values(r: RowResult) -> list[str]:
    return [f'{x * scale:.4f}' if np.isfinite(x) else '' for x in r.mean_std(name)]

  return Column(
    title, cell or (lambda r: _pct(*r.mean_std(name))), (f'{name}_mean', f'{name}_std'), values
  )


def _delta(name: str, paper_figure: Callable[[paper.Row], float]) -> Callable[[RowResult], str]:
  """The cell 'ours - paper' in points of statistic `name` ('–' without a value of ours)."""

  def cell(r: RowResult) -> str:
    ours = r.mean_std(name)[0]
    return f'{100 * ours - paper_figure(r.row):+.2f}' if np.isfinite(ours) else '–'

  return cell


def _count(n: float) -> str:
  if not np.isfinite(n):
    return '–'
  return f'{n / 1e6:.2f}M' if n >= 1e6 else f'{n / 1e3:.2f}K'


def _seeds(r: RowResult) -> str:
  return str(len(r.seeds))


def _train_time(r: RowResult) -> str:
  # Seeds whose time is unknown (an epoch evaluated from a checkpoint) are left out of the
  # mean: said, so a mean over fewer seeds is not taken for one over all.
  values = r.values.get('time_s', [])
  timed = sum(bool(np.isfinite(x)) for x in values)
  shown = _time(r.mean_std('time_s')[0])
  return shown if timed in (0, len(values)) else f'{shown} ({timed} of {len(values)} seeds)'


def _ods_f1(row: paper.Row) -> float:
  return row.ods.f1.mean


def _ois_f1(row: paper.Row) -> float:
  return row.ois.f1.mean


# The columns both groups of tables begin with (after the method), and their seeds.
_TABLE = _csv('table', lambda r: r.row.table)
_KEY = _csv('key', lambda r: r.row.key)
_EPOCHS = _both('epochs', lambda r: str(r.row.epochs), 'epochs', lambda r: r.row.epochs)
_PROTOCOL = _csv('protocol', lambda r: r.protocol)
_SEEDS = _both('seeds', _seeds, 'seeds', lambda r: ' '.join(map(str, r.seeds)))

#: Tables I-IV (report.md, report.csv): P/R/F1 at ODS and OIS beside the paper's figures and
#: time (Markdown: the paper's F1 and the differences; CSV: all the paper's figures).
TABLE_COLUMNS = (
  _TABLE,
  _KEY,
  _both('method', lambda r: _method(r.row), 'method', lambda r: r.row.name),
  _EPOCHS,
  _PROTOCOL,
  _SEEDS,
  _statistic('ODS P', 'ods_p'),
  _statistic('ODS R', 'ods_r'),
  _statistic('ODS F1', 'ods_f1'),
  _statistic('OIS P', 'ois_p'),
  _statistic('OIS R', 'ois_r'),
  _statistic('OIS F1', 'ois_f1'),
  _statistic('F1@0.5', 'f1_fixed'),
  _statistic('time', 'time_s', 1.0, cell=_train_time),
  _csv('paper_ods_p', lambda r: r.row.ods.p.mean),
  _csv('paper_ods_r', lambda r: r.row.ods.r.mean),
  _both(
    'paper ODS F1', lambda r: f'{_ods_f1(r.row):.2f}', 'paper_ods_f1', lambda r: _ods_f1(r.row)
  ),
  _md('Δ ODS F1', _delta('ods_f1', _ods_f1)),
  _csv('paper_ois_p', lambda r: r.row.ois.p.mean),
  _csv('paper_ois_r', lambda r: r.row.ois.r.mean),
  _both(
    'paper OIS F1', lambda r: f'{_ois_f1(r.row):.2f}', 'paper_ois_f1', lambda r: _ois_f1(r.row)
  ),
  _md('Δ OIS F1', _delta('ois_f1', _ois_f1)),
  _both('paper time', lambda r: r.row.time or '–', 'paper_time_s', lambda r: r.row.time_s),
)

#: Tables V-VIII (report.md, report_compare.csv): ODS / OIS F1 beside the paper's, with its
#: parameters, GFLOPS, TT and FPS.
COMPARE_COLUMNS = (
  _TABLE,
  _KEY,
  _both('method', lambda r: r.row.name, 'method', lambda r: r.row.name),
  _csv('model', lambda r: r.row.model),
  _csv('dagger', lambda r: r.row.dagger),
  _both(
    'β',
    lambda r: '-' if r.row.beta is None else f'{r.row.beta:g}',
    'beta',
    lambda r: '' if r.row.beta is None else r.row.beta,
  ),
  _EPOCHS,
  _PROTOCOL,
  _SEEDS,
  _statistic('ODS F1', 'ods_f1'),
  _statistic('OIS F1', 'ois_f1'),
  _statistic('F1@0.5', 'f1_fixed'),
  _statistic('time', 'time_s', 1.0, cell=_train_time),
  _statistic('params', 'params', 1.0, cell=lambda r: _count(r.mean_std('params')[0])),
  _both('paper ODS', lambda r: f'{_ods_f1(r.row):.2f}', 'paper_ods_f1', lambda r: _ods_f1(r.row)),
  _md('Δ ODS', _delta('ods_f1', _ods_f1)),
  _both('paper OIS', lambda r: f'{_ois_f1(r.row):.2f}', 'paper_ois_f1', lambda r: _ois_f1(r.row)),
  _md('Δ OIS', _delta('ois_f1', _ois_f1)),
  _md('paper TT', lambda r: r.row.time),
  _both('paper params', lambda r: r.row.params, 'paper_params', lambda r: r.row.params_count),
  _both('paper GFLOPS', lambda r: f'{r.row.gflops:g}', 'paper_gflops', lambda r: r.row.gflops),
  _csv('paper_time_s', lambda r: r.row.time_s),
  _both('paper FPS', lambda r: f'{r.row.fps:.2f}', 'paper_fps', lambda r: r.row.fps),
)


def markdown_table(results: Sequence[RowResult], columns: Sequence[Column]) -> list[str]:
  """The Markdown lines of one table: header, rule and a row per result (the columns with a
  title)."""
  shown = [c for c in columns if c.title is not None]
  return [
    '| ' + ' | '.join(c.title for c in shown) + ' |',
    '|' + '---|' * len(shown),
    *('| ' + ' | '.join(c.cell(r) for c in shown) + ' |' for r in results),
  ]


def csv_table(path: Path, results: Sequence[RowResult], columns: Sequence[Column]) -> None:
  """The CSV of one group of tables: a header and a line per result (the columns with CSV
  names)."""
  written = [c for c in columns if c.names]
  with path.open('w', newline='') as f:
    w = csv.writer(f)
    w.writerow([name for c in written for name in c.names])
    w.writerows([value for c in written for value in c.values(r)] for r in results)


def markdown(
  runs: Sequence[dict[str, Any]], protocols: Sequence[str], left: Sequence[str] = ()
) -> str:
  """The report as Markdown (see the module docstring); `left`: the `left_out` lines, listed
  after the tables."""
  tables = 'I-VIII' if any(r['table'] in paper.COMPARE_TABLES for r in runs) else 'I-IV'
  out = [f'# Reproduction of Tables {tables} (crackjax.paper.runner)', '']
  out += _describe_runs(runs)
  out += [
    '- Figures: mean (std over seeds) in percent; F1@0.5 = F1 at the fixed threshold 0.5; '
    'time = wall seconds of training up to that epoch (the first epoch includes start-up and '
    'compilation); Δ = ours − paper.',
    '',
  ]
  for table in [*paper.TABLES, *paper.COMPARE_TABLES]:
    for protocol in protocols:
      results = [r for r in _results_of(runs, table, protocol) if r.row.table == table]
      if results:
        out += _table_section(table, protocol, results)
  if left:
    out += ['## Left out', '', 'Seeds of rows that are not in the tables above, and why:', '']
    out += [f'- {line}' for line in left] + ['']
  return '\n'.join(out)


def _results_of(runs, table: int, protocol: str) -> list[RowResult]:
  if table in paper.COMPARE_TABLES:
    return compare_results(runs, protocol)
  return row_results(runs, protocol)


def _table_section(table: int, protocol: str, results: Sequence[RowResult]) -> list[str]:
  """A table's heading, its rows under COMPARE_COLUMNS or TABLE_COLUMNS, and its follow-up."""
  if table in paper.COMPARE_TABLES:
    head = [
      f'## Table {table} ({paper.dataset_of(table)}, comparison models), `{protocol}` protocol',
      '',
      'Epochs of the non-U-Net rows are assumed (the paper gives only TT; '
      '`crackjax.paper.tables.Row.epochs_basis`). Our GFLOPS and FPS: '
      f'`python -m crackjax.paper.complexity --config=configs/table{table}.py:<key>`.',
      '',
    ]
    return [*head, *markdown_table(results, COMPARE_COLUMNS), '', *_dagger_lines(results)]
  head = [f'## Table {table} ({paper.SETTINGS[table].dataset}), `{protocol}` protocol', '']
  out = [*head, *markdown_table(results, TABLE_COLUMNS), '']
  base = _baseline(results, table)
  if base is None:
    return out
  out += [
    f'Against the second baseline, {base.row.name} at {base.row.epochs} epochs (ODS F1, '
    'points; Welch 95% CI and two-sided p; the paper gives means only):',
    '',
    '| method | epochs | Δ ODS F1 (ours) | 95% CI | p | Δ ODS F1 (paper) |',
    '|---|---|---|---|---|---|',
  ]
  for r in results:
    if r is base:
      continue
    cells = _welch_cells(r.values['ods_f1'], base.values['ods_f1'])
    out.append(
      f'| {_method(r.row)} | {r.row.epochs} | {cells} | '
      f'{r.row.ods.f1.mean - base.row.ods.f1.mean:+.2f} |'
    )
  out.append('')
  return out + _same_epochs(results)


def _dagger_lines(results: Sequence[RowResult]) -> list[str]:
  """Each model's dagger row against its original loss (Tables V-VIII)."""
  by_key = {r.row.key: r for r in results}
  pairs = [
    (by_key[r.row.model], r)
    for r in results
    if r.row.dagger and r.row.model in by_key and not by_key[r.row.model].row.dagger
  ]
  if not pairs:
    return []
  out = [
    'Dagger (exponential WCE) against the original loss, per model (ODS F1, points; Welch '
    '95% CI and two-sided p; time = ours dagger / original):',
    '',
    '| model | Δ ODS F1 (ours) | 95% CI | p | Δ ODS F1 (paper) | time ratio | TT ratio (paper) |',
    '|---|---|---|---|---|---|---|',
  ]
  for orig, dag in pairs:
    cells = _welch_cells(dag.values['ods_f1'], orig.values['ods_f1'])
    ratio = dag.mean_std('time_s')[0] / orig.mean_std('time_s')[0]
    out.append(
      f'| {orig.row.name} | {cells} | '
      f'{dag.row.ods.f1.mean - orig.row.ods.f1.mean:+.2f} | '
      f'{f"{ratio:.2f}" if np.isfinite(ratio) else "–"} | '
      f'{dag.row.time_s / orig.row.time_s:.2f} |'
    )
  out.append('')
  return out


def write_csv(path: Path, runs: Sequence[dict[str, Any]], protocols: Sequence[str]) -> None:
  """report.csv: one line per (Table I-IV row, protocol), ours beside the paper's."""
  csv_table(path, [r for p in protocols for r in row_results(runs, p)], TABLE_COLUMNS)


def write_compare_csv(path: Path, runs: Sequence[dict[str, Any]], protocols: Sequence[str]) -> None:
  """report_compare.csv: one line per (Table V-VIII row, protocol), ours beside the paper's."""
  csv_table(path, [r for p in protocols for r in compare_results(runs, p)], COMPARE_COLUMNS)


def plot_curves(path: Path, runs: Sequence[dict[str, Any]], table: int, protocol: str) -> bool:
  """ODS and OIS F1 per epoch for every training group of `table` (Figs. 5-6). False if no
  run of `table` has `protocol`."""
  from matplotlib.figure import Figure

  groups: dict[str, dict[int, dict[str, list[float]]]] = {}
  for run in runs:
    if run['table'] != table:
      continue
    for e in run['epochs']:
      r = e.get('results', {}).get(protocol)  # no 'results': not evaluated
      if r is None:
        continue
      per = groups.setdefault(run['group'].split(':', 1)[1], {}).setdefault(e['epoch'], {})
      per.setdefault('ods', []).append(r['ods']['f1'])
      per.setdefault('ois', []).append(r['ois']['f1'])
  if not groups:
    return False
  fig = Figure(figsize=(12, 4.5), layout='constrained')
  axes = fig.subplots(1, 2, sharey=True)
  for ax, what, label in zip(axes, ('ods', 'ois'), ('ODS F1', 'OIS F1'), strict=True):
    for name, by_epoch in groups.items():
      ep = sorted(by_epoch)
      vals = [np.asarray(by_epoch[k][what]) for k in ep]
      mean = [100 * v.mean() for v in vals]
      line = ax.plot(ep, mean, marker='.', label=f'{name} (n={max(len(v) for v in vals)})')[0]
      ax.fill_between(
        ep,
        [100 * v.min() for v in vals],
        [100 * v.max() for v in vals],
        alpha=0.15,
        color=line.get_color(),
      )
    ax.set_xlabel('epoch')
    ax.set_ylabel(f'{label} (%)')
    ax.set_title(f'{label}, {protocol} protocol')
    ax.grid(alpha=0.3)
  axes[1].legend(fontsize=7, loc='lower right')
  fig.suptitle(
    f'Table {table} ({paper.dataset_of(table)}): mean over seeds, band = min-max '
    '(cf. Figs. 5-6 of the paper)'
  )
  fig.savefig(path, dpi=110)
  return True


def report_files(runs: Sequence[dict[str, Any]], protocols: Sequence[str]) -> list[str]:
  """The names `write_report` may write in its folder (a curve of each table and protocol
  that the runs hold, whether or not it has points), checked before anything is written."""
  curves = [
    f'curves_table{table}_{protocol}.png'
    for table in sorted({r['table'] for r in runs})
    for protocol in protocols
  ]
  return ['report.md', 'report.csv', 'report_compare.csv', *curves]


def write_report(
  runs: Sequence[dict[str, Any]],
  out: str | Path,
  protocols: Sequence[str],
  left: Sequence[str] = (),
) -> Path:
  """report.md (with the `left_out` lines `left`), report.csv and the curve PNGs in `out`,
  listed in its manifest (`crackjax.runs.outputs.record_outputs`, so that the next report may
  replace them); returns the Markdown's path."""
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  text = markdown(runs, protocols, left)
  figures, written = [], ['report.md', 'report.csv']
  for table in sorted({r['table'] for r in runs}):
    for protocol in protocols:
      name = f'curves_table{table}_{protocol}.png'
      if plot_curves(out / name, runs, table, protocol):
        figures.append(f'![Table {table}, {protocol}]({name})')
        written.append(name)
  (out / 'report.md').write_text(text + '\n' + '\n\n'.join(figures) + '\n')
  write_csv(out / 'report.csv', runs, protocols)
  if any(compare_results(runs, p) for p in protocols):
    write_compare_csv(out / 'report_compare.csv', runs, protocols)
    written.append('report_compare.csv')
  outputs.record_outputs(out, written, PROG)
  return out / 'report.md'


def _protocols_of(runs: Sequence[dict[str, Any]]) -> list[str]:
  seen: dict[str, None] = {}
  for run in runs:
    for e in run['epochs']:
      seen.update(dict.fromkeys(e.get('results', {})))  # no 'results': not evaluated
  return list(seen)


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  with exits.one_line_exits(PROG, interrupted=_INTERRUPTED):
    return _main(argv)


_INTERRUPTED = 'interrupted (Ctrl-C); the inputs are untouched: run the same command again.'


def _main(argv: Sequence[str] | None) -> int:
  full = [PROG, *(sys.argv[1:] if argv is None else argv)]
  fv = flags.FlagValues()
  flags.DEFINE_string(
    'out', None, 'Report directory (default: <first input>/report).', flag_values=fv
  )
  flags.DEFINE_string(
    'export', None, 'Also write the results as one small JSON file.', flag_values=fv
  )
  flags.DEFINE_bool(
    'overwrite',
    False,
    'Replace an existing --export file that is not among the inputs (one that is, is merged '
    'into), and files in --out that an earlier report did not write or that changed since (its '
    'own unchanged ones it replaces anyway).',
    flag_values=fv,
  )
  flags.DEFINE_list('protocols', None, 'Protocols to report (default: all found).', flag_values=fv)
  flags.DEFINE_bool(
    'complete_only',
    False,
    'Keep only the jobs evaluated at every epoch up to their longest row (drop runs cut at a '
    "chunk's time limit, which the next chunk redoes from scratch).",
    flag_values=fv,
  )
  inputs = config_flags.parse_flags(fv, full, prog=PROG, usage=USAGE)[1:]
  if not inputs:
    sys.exit(f'usage: {USAGE}')
  try:
    runs = records.load(inputs)
  except (OSError, ValueError) as e:
    sys.exit(f'{PROG}: {e}')
  if fv.complete_only:
    runs = records.complete_runs(runs)
    if not runs:
      sys.exit(
        f'{PROG}: --complete_only: no run in {", ".join(inputs)} is evaluated at every epoch '
        'of its rows; nothing to report or export.'
      )
  found = _protocols_of(runs)
  if not found:
    sys.exit(f'{PROG}: no epoch in {", ".join(inputs)} was evaluated; nothing to report.')
  unknown = [p for p in fv.protocols or () if p not in found]
  if unknown:
    sys.exit(f'{PROG}: --protocols {unknown} not in these results; they hold {list(found)}.')
  # Every flag checked before anything is written (was: the export written, then this).
  out = fv.out or (Path(inputs[0]) / 'report' if Path(inputs[0]).is_dir() else None)
  if out is None:
    sys.exit(f'{PROG}: --out is required when the input is an export file.')
  targets = [('--out', out)] + ([('--export', Path(fv.export).parent)] if fv.export else [])
  for flag, folder in targets:
    problem = config_flags.unwritable(folder)
    if problem:
      sys.exit(f'{PROG}: cannot write {flag}: {problem}.')
  if fv.export and Path(fv.export).exists() and not fv.overwrite:
    # A file the user made (e.g. the committed results of earlier chunks) is replaced only on
    # request; an export that is one of the inputs is merged into, as docs/reproduction.md does.
    if Path(fv.export).resolve() not in {Path(i).resolve() for i in inputs}:
      sys.exit(
        f'{PROG}: --export={fv.export} exists and is not among the inputs; pass --overwrite '
        'to replace it, or name it as an input to merge these results into it.'
      )
  protocols = fv.protocols or found
  # A user's own report.md (or a report's, edited since) is replaced only on request; the
  # report's own unchanged outputs (its manifest) are, so that rerunning it needs no flag.
  names = report_files(runs, protocols)
  try:
    outputs.check_inside(out, [Path(out) / n for n in [*names, outputs.MANIFEST]])
  except outputs.UnsafeOutputError as e:
    sys.exit(f'{PROG}: {e}')
  foreign = outputs.foreign_files(out, names)
  if foreign and not fv.overwrite:
    sys.exit(outputs.replace_advice(PROG, out, foreign))
  if fv.export:
    records.export(runs, fv.export)
    print(f'exported {len(runs)} runs to {fv.export}')
  left = left_out(runs, protocols, records.set_aside(inputs))
  for line in left:
    print(f'note: left out {line}', file=sys.stderr)
  print(f'wrote {write_report(runs, out, protocols, left)}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
