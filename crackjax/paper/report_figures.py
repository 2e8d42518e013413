"""The report's figures: ODS and OIS F1 against the epoch per training group of a table, mean
and min-max over seeds (Figs. 5-6 of the paper)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crackjax.paper import tables


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
    f'Table {table} ({tables.dataset_of(table)}): mean over seeds, band = min-max '
    '(cf. Figs. 5-6 of the paper)'
  )
  fig.savefig(path, dpi=110)
  return True
