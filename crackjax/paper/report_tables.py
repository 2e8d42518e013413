"""The report's tables: report.md's sections and report.csv / report_compare.csv from
`RowResult`s, one list of columns per group of tables read by both renderers (Tables I-IV:
`TABLE_COLUMNS`, V-VIII: `COMPARE_COLUMNS`), with the Welch tests against the baselines and
each dagger row against its original loss."""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crackjax.paper import tables
from crackjax.paper.report_stats import RowResult, compare_results, row_results, welch


def _method(row: tables.Row) -> str:
  """The row's method as the paper prints it, with q's parameters where the paper gives them
  in other columns (Table I has two 'wce_power' rows: beta 0.5, gamma 1/2 and 0.85, 1/3)."""
  if row.weighting in (None, 'xie') or row.b or row.beta is None:
    return row.name
  gamma = ''
  if row.weighting == 'power' and row.gamma:
    den = round(1 / row.gamma)
    gamma = f', γ=1/{den}' if abs(row.gamma * den - 1) < 1e-9 else f', γ={row.gamma:g}'
  return f'{row.name} (β={row.beta:g}{gamma})'


def method_label(row: tables.Row) -> str:
  """The name the report's tables give `row` (its curves' legend uses it too)."""
  return _method(row)


def _welch_cells(a: Sequence[float], b: Sequence[float]) -> str:
  """'Δ | 95% CI | p' table cells of `welch(a, b)`, in points ('–' where undefined)."""
  w = welch(a, b)
  ci = f'[{100 * w["low"]:+.2f}, {100 * w["high"]:+.2f}]' if np.isfinite(w['low']) else '–'
  p = f'{w["p"]:.3g}' if np.isfinite(w['p']) else '–'
  return f'{100 * w["diff"]:+.2f} | {ci} | {p}'


# The columns of `_against`'s cells.
_AGAINST = ('Δ ODS F1 (ours)', '95% CI', 'p', 'Δ ODS F1 (paper)')


def _against(r: RowResult, base: RowResult) -> str:
  """`_AGAINST`'s cells: r's ODS F1 against base's, in points: ours (`_welch_cells`), then the
  paper's (its means)."""
  cells = _welch_cells(r.values['ods_f1'], base.values['ods_f1'])
  return f'{cells} | {r.row.ods.f1.mean - base.row.ods.f1.mean:+.2f}'


def _markdown_lines(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
  """A Markdown table's lines: the `header` cells, the rule, a line per row of cells."""
  return [
    '| ' + ' | '.join(header) + ' |',
    '|' + '---|' * len(header),
    *('| ' + ' | '.join(row) + ' |' for row in rows),
  ]


def _comparison(intro: str, header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
  """A comparison's lines: `intro`, a blank line, its Markdown table, a blank line."""
  return [intro, '', *_markdown_lines(header, rows), '']


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
    # Several settings (rows of different scales; a row never mixes them, `records.load`
    # refuses that): each line names the rows it is the setting of.
    groups = sorted({r['group'] for r in runs if json.dumps(r['setting'], sort_keys=True) == text})
    of = f' (rows {", ".join(groups)})' if len(settings) > 1 else ''
    lines.append(
      f'- Setting{of}: {net}, training input {s["input_size"] or "full images"}, '
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
  return _comparison(
    'Against wce_xie trained for the same number of epochs (ODS F1, points; Welch 95% CI '
    'and two-sided p):',
    ('method', 'epochs', 'seeds', *_AGAINST),
    (
      (_method(r.row), str(r.row.epochs), f'{len(r.seeds)} vs {len(base.seeds)}', _against(r, base))
      for r, base in pairs
    ),
  )


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


def _delta(name: str, paper_figure: Callable[[tables.Row], float]) -> Callable[[RowResult], str]:
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


def _ods_f1(row: tables.Row) -> float:
  return row.ods.f1.mean


def _ois_f1(row: tables.Row) -> float:
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
  return _markdown_lines([c.title for c in shown], ([c.cell(r) for c in shown] for r in results))


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
  which = 'I-VIII' if any(r['table'] in tables.COMPARE_TABLES for r in runs) else 'I-IV'
  out = [f'# Reproduction of Tables {which} (crackjax.paper.runner)', '']
  out += _describe_runs(runs)
  out += [
    '- Figures: mean (std over seeds) in percent; F1@0.5 = F1 at the fixed threshold 0.5; '
    'time = wall seconds of training up to that epoch (the first epoch includes start-up and '
    'compilation); Δ = ours − paper.',
    '',
  ]
  for table in [*tables.TABLES, *tables.COMPARE_TABLES]:
    for protocol in protocols:
      results = [r for r in _results_of(runs, table, protocol) if r.row.table == table]
      if results:
        out += _table_section(table, protocol, results)
  if left:
    out += ['## Left out', '', 'Seeds of rows that are not in the tables above, and why:', '']
    out += [f'- {line}' for line in left] + ['']
  return '\n'.join(out)


def _results_of(runs, table: int, protocol: str) -> list[RowResult]:
  if table in tables.COMPARE_TABLES:
    return compare_results(runs, protocol)
  return row_results(runs, protocol)


def _table_section(table: int, protocol: str, results: Sequence[RowResult]) -> list[str]:
  """A table's heading, its rows under COMPARE_COLUMNS or TABLE_COLUMNS, and its follow-up."""
  if table in tables.COMPARE_TABLES:
    head = [
      f'## Table {table} ({tables.dataset_of(table)}, comparison models), `{protocol}` protocol',
      '',
      'Epochs of the non-U-Net rows are assumed (the paper gives only TT; '
      '`crackjax.paper.tables.Row.epochs_basis`). Our GFLOPS and FPS: '
      f'`python -m crackjax.paper.complexity --config=configs/table{table}.py:<key>`.',
      '',
    ]
    return [*head, *markdown_table(results, COMPARE_COLUMNS), '', *_dagger_lines(results)]
  head = [f'## Table {table} ({tables.SETTINGS[table].dataset}), `{protocol}` protocol', '']
  out = [*head, *markdown_table(results, TABLE_COLUMNS), '']
  base = _baseline(results, table)
  if base is None:
    return out
  out += _comparison(
    f'Against the second baseline, {base.row.name} at {base.row.epochs} epochs (ODS F1, '
    'points; Welch 95% CI and two-sided p; the paper gives means only):',
    ('method', 'epochs', *_AGAINST),
    ((_method(r.row), str(r.row.epochs), _against(r, base)) for r in results if r is not base),
  )
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

  def time_ratio(orig: RowResult, dag: RowResult) -> str:
    ratio = dag.mean_std('time_s')[0] / orig.mean_std('time_s')[0]
    return f'{ratio:.2f}' if np.isfinite(ratio) else '–'

  return _comparison(
    'Dagger (exponential WCE) against the original loss, per model (ODS F1, points; Welch '
    '95% CI and two-sided p; time = ours dagger / original):',
    ('model', *_AGAINST, 'time ratio', 'TT ratio (paper)'),
    (
      (
        orig.row.name,
        _against(dag, orig),
        time_ratio(orig, dag),
        f'{dag.row.time_s / orig.row.time_s:.2f}',
      )
      for orig, dag in pairs
    ),
  )


def write_csv(path: Path, runs: Sequence[dict[str, Any]], protocols: Sequence[str]) -> None:
  """report.csv: one line per (Table I-IV row, protocol), ours beside the paper's."""
  csv_table(path, [r for p in protocols for r in row_results(runs, p)], TABLE_COLUMNS)


def write_compare_csv(path: Path, runs: Sequence[dict[str, Any]], protocols: Sequence[str]) -> None:
  """report_compare.csv: one line per (Table V-VIII row, protocol), ours beside the paper's."""
  csv_table(path, [r for p in protocols for r in compare_results(runs, p)], COMPARE_COLUMNS)
