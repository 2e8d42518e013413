"""The report's figures: ODS and OIS F1 against the epoch per training group of a table, mean
and min-max over seeds (Figs. 5-6 of the paper), with the paper's printed figures marked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crackjax.evaluation.result import EPOCH, F1, ODS, OIS, RESULTS
from crackjax.paper import tables
from crackjax.paper.report_tables import method_label


def _paper_points(group: str, table: int) -> list[tuple[int, float, float]]:
  """(epochs, ODS F1, OIS F1) of the paper's rows of training group `group`, where the paper
  states the epochs (printed in Tables I-IV, or a U-Net row of Tables V-VIII, the same
  training as a Table I-IV row); not where they are assumed from training times."""
  rows = tables.training_groups(table).get(group, ())
  return [
    (r.epochs, r.ods.f1.mean, r.ois.f1.mean)
    for r in rows
    if r.epochs and (r.epochs_basis == 'printed' or r.unet_row)
  ]


def plot_curves(path: Path, runs: Sequence[dict[str, Any]], table: int, protocol: str) -> bool:
  """ODS and OIS F1 per epoch for every training group of `table` (Figs. 5-6). False if no
  run of `table` has `protocol`.

  Each group is named as the table names its rows (`report_tables.method_label`), in one
  legend beside both panels; the paper's F1 of the group's rows is marked (a star of the
  group's colour at the printed epochs) and its reference row (RSF, Tables I-IV) drawn as a
  grey line, as in the paper's figures. The epoch axis has integer ticks."""
  from matplotlib.figure import Figure
  from matplotlib.lines import Line2D
  from matplotlib.ticker import MaxNLocator

  groups: dict[str, dict[int, dict[str, list[float]]]] = {}
  for run in runs:
    if run['table'] != table:
      continue
    for e in run['epochs']:
      r = e.get(RESULTS, {}).get(protocol)  # no 'results': not evaluated
      if r is None:
        continue
      per = groups.setdefault(run['group'], {}).setdefault(e[EPOCH], {})
      per.setdefault(ODS, []).append(r[ODS][F1])
      per.setdefault(OIS, []).append(r[OIS][F1])
  if not groups:
    return False
  by_group = tables.training_groups(table)
  reference = next((r for r in tables.table_rows(table) if r.reference), None)
  fig = Figure(figsize=(13, 4.8), layout='constrained')
  axes = fig.subplots(1, 2, sharey=True)
  handles, seeds = [], set()
  for ax, what, label in zip(axes, (ODS, OIS), ('ODS F1', 'OIS F1'), strict=True):
    for i, (group, by_epoch) in enumerate(groups.items()):
      color = f'C{i % 10}'
      ep = sorted(by_epoch)
      vals = [np.asarray(by_epoch[k][what]) for k in ep]
      seeds.update(len(v) for v in vals)
      ax.plot(ep, [100 * v.mean() for v in vals], marker='.', color=color)
      ax.fill_between(
        ep, [100 * v.min() for v in vals], [100 * v.max() for v in vals], alpha=0.15, color=color
      )
      for epochs, ods, ois in _paper_points(group, table):
        if epochs > ep[-1]:  # beyond what was trained: it would only stretch the axis
          continue
        ax.plot(epochs, ods if what == ODS else ois, '*', ms=11, color=color, mec='k', mew=0.5)
      if what == ODS:
        rows = by_group.get(group)
        name = method_label(rows[0]) if rows else group.split(':', 1)[-1]
        handles.append(Line2D([], [], color=color, marker='.', label=name))
    if reference is not None:
      value = reference.ods.f1.mean if what == ODS else reference.ois.f1.mean
      ax.axhline(value, color='0.45', ls='--', lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel('epoch')
    ax.set_ylabel(f'{label} (%)')
    ax.set_title(f'{label}, {protocol} protocol')
    ax.grid(alpha=0.3)
  handles.append(
    Line2D(
      [],
      [],
      ls='',
      marker='*',
      ms=11,
      color='0.6',
      mec='k',
      mew=0.5,
      label="the paper's figure (its table)",
    )
  )
  if reference is not None:
    handles.append(Line2D([], [], color='0.45', ls='--', label=f'{reference.name} (paper)'))
  fig.legend(handles=handles, loc='outside right upper', fontsize=8)
  n = '-'.join(str(s) for s in (min(seeds), max(seeds))) if len(seeds) > 1 else str(min(seeds))
  fig.suptitle(
    f'Table {table} ({tables.dataset_of(table)}): mean over {n} seed(s), band = min-max '
    '(cf. Figs. 5-6 of the paper)'
  )
  fig.savefig(path, dpi=110)
  return True
