"""A LODO fold's scores as the tables read them (`collect`), kept beside the repository's results
(``--keep``: a small JSON with the date, commit and machine each fold was scored on) so that a
campaign longer than a machine's life keeps every fold scored, and the provenance line that
heads the table.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crackjax.evaluation import result, threshold_choice
from crackjax.lodo import folds as folds_lib
from crackjax.lodo.folds import Fold
from crackjax.runs import outputs


def fold_scores(fold: Fold) -> dict[str, Any] | None:
  """The fold's held-out scores from its eval.json (None if not scored yet):
  {protocol: {'stored': F1 at the file's threshold, 'ods': ODS F1, 'ods_threshold', 'threshold'}}
  in percent for each protocol it holds, plus the strict curve."""
  if not fold.record.exists():
    return None
  record = result.read_record(fold.record)
  out: dict[str, Any] = {'images': record.num_images}
  for protocol in folds_lib.PROTOCOLS:
    if protocol not in record.results:
      continue
    r = record.results[protocol]
    run = r.operating_points['run']
    out[protocol] = {
      'stored': 100 * run.f1,
      'threshold': run.threshold,
      'ods': 100 * r.ods.f1,
      'ods_threshold': r.ods.threshold,
    }
  curve = record.results[folds_lib.THRESHOLD_PROTOCOL].curve
  out['curve'] = {'thresholds': list(curve.thresholds), 'f1': [100 * f for f in curve.f1]}
  return out


def datasets_alike(fold: Fold, step: int, curve: dict[str, list[float]]) -> dict[str, float] | None:
  """The held-out strict F1 at the threshold chosen on the known sets with every set alike
  (``config.eval.threshold_over='datasets'``, `threshold_choice`): from the fold's epoch record
  of `step` (the exported one) and the held-out `curve` (`fold_scores`'), whatever the fold
  stored; None where the record or its threshold is not on the curve's grid."""
  for path in sorted(fold.run.glob('epoch_*.json')):
    record = result.read_record(path)
    if record.step != step:
      continue
    chosen = threshold_choice.mean_over_datasets(record, folds_lib.THRESHOLD_PROTOCOL)
    if chosen is None or chosen[0] not in curve['thresholds']:
      return None
    return {'threshold': chosen[0], 'f1': curve['f1'][curve['thresholds'].index(chosen[0])]}
  return None


def row_name(fold: Fold) -> str:
  """The fold's row of the table: 'RECIPE (BUDGET)[ at TEST TIME]'."""
  return f'{fold.recipe} ({fold.budget})' + (f' at {fold.test_time}' if fold.test_time else '')


def collect(
  folds: Sequence[Fold], keep: Path | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
  """(rows: {row name: {held-out set: its scores}} of the folds scored, detail: the same with
  None for a fold not scored yet). With `keep`, a fold scored in the work folder is kept there
  (`keep_fold`) and a fold not in it is taken from there."""
  from crackjax.deploy import release

  rows: dict[str, dict[str, Any]] = {}
  detail: dict[str, Any] = {}
  for f in folds:
    scores = fold_scores(f)
    name = row_name(f)
    rows.setdefault(name, {})
    if scores is None and (elsewhere := kept_elsewhere(f, keep)):
      scores = elsewhere['scores']
    elif scores:
      best = release.best_epoch(f.run)
      scores['selected'] = {k: best[k] for k in ('epoch', 'step', 'ods_f1', 'threshold')}
      scores['epochs'] = {
        'scored': folds_lib.epochs_scored(f),
        'planned': folds_lib.recorded_epochs(f),
      }
      scores['datasets_alike'] = datasets_alike(f, best['step'], scores['curve'])
      if f.fp_record.exists():
        scores['false_positives'] = json.loads(f.fp_record.read_text())['length_per_mp']
      if f.photo_record.exists():
        photo = json.loads(f.photo_record.read_text())
        scores['photo'] = {'weights': photo['weights'], 'f1': [100 * x for x in photo['f1']]}
      if keep is not None:
        keep_fold(f, scores, keep)
    if scores:
      rows[name][f.held_out] = scores
    detail.setdefault(name, {})[f.held_out] = scores
  return rows, detail


def kept_path(fold: Fold, keep: Path) -> Path:
  """Where ``--keep`` keeps the fold's scores:
  ``KEEP/<recipe>_<budget>[_<test time>]/<held_out>.json``."""
  tag = fold.heldout_dir.name.removeprefix(folds_lib.HELDOUT_DIR)  # '' or e.g. '_2_flip'
  return keep / f'{fold.recipe}_{fold.budget}{tag}' / f'{fold.held_out}.json'


def kept(fold: Fold, keep: Path | None) -> dict[str, Any] | None:
  """The fold's kept record ({'scores', 'scored', 'commit', 'machine'}), None if not kept."""
  if keep is None or not kept_path(fold, keep).exists():
    return None
  return json.loads(kept_path(fold, keep).read_text())


def kept_elsewhere(fold: Fold, keep: Path | None) -> dict[str, Any] | None:
  """The fold's kept record where its work folder lacks its scores (scored on a machine since
  gone): what stands for the fold then; None otherwise."""
  return None if fold.record.exists() else kept(fold, keep)


def machine() -> str:
  """This machine in a line: its CPU, cores and JAX backend (`crackjax.paper.jobs.hardware`)."""
  from crackjax.paper import jobs

  hw = jobs.hardware()
  return f'{hw["cpu"]} ({hw["cpu_count"]} cores, {hw["backend"]} backend)'


def keep_fold(fold: Fold, scores: dict[str, Any], keep: Path) -> None:
  """Keeps the scores of a fold scored in the work folder beside the repository's results, with
  when it was scored, at which commit and on what, so that the table survives the machine
  that trained it; rewritten only when its scores change (a re-scored fold)."""
  previous = kept(fold, keep)
  text = outputs.dumps(scores, indent=1)
  if previous is not None and outputs.dumps(previous['scores'], indent=1) == text:
    return
  when = datetime.datetime.fromtimestamp(fold.record.stat().st_mtime, datetime.UTC)
  record = {
    'fold': fold.config + (f' at {fold.test_time}' if fold.test_time else ''),
    'scored': f'{when:%d %b %Y %H:%M} UTC',
    'commit': git_commit() or 'unknown',
    'machine': machine(),
    'scores': scores,
  }
  path = kept_path(fold, keep)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(outputs.dumps(record, indent=1) + '\n')


def git_commit() -> str:
  """The commit of the checkout this code runs from (`git describe --dirty`), '' outside one
  (an installed wheel)."""
  return subprocess.run(
    ['git', 'describe', '--always', '--dirty', '--abbrev=7'],
    cwd=Path(__file__).parent,
    capture_output=True,
    text=True,
  ).stdout.strip()


def provenance(folds: Sequence[Fold], command: str, keep: Path | None = None) -> str:
  """The .md's first paragraph: the `command` that wrote the table, its commit, the machine and
  when the folds were scored (their eval.json); the kept folds taken from `keep` with their own
  dates, commits and machines."""
  times = [f.record.stat().st_mtime for f in folds if f.record.exists()]
  scored = 'no fold scored yet'
  if times:
    first, last = (
      datetime.datetime.fromtimestamp(t, datetime.UTC) for t in (min(times), max(times))
    )
    scored = f'folds scored {first:%d %b %Y %H:%M} to {last:%d %b %Y %H:%M} UTC (their eval.json)'
  now = datetime.datetime.now(datetime.UTC)
  others = [(f, k) for f in folds if (k := kept_elsewhere(f, keep)) is not None]
  if others:
    scored += f'; kept folds, from {keep}: ' + '; '.join(
      f'{f.recipe} without {f.held_out}{" at " + f.test_time if f.test_time else ""} scored '
      f'{k["scored"]} at {k["commit"]} on {k["machine"]}'
      for f, k in others
    )
  return (
    f'Written by `{command}` at commit {git_commit() or "unknown"}, {now:%d %b %Y %H:%M} UTC, '
    f'on {machine()}; {scored}. Per held-out test split: "strict F1 at the stored threshold / '
    'ODS · tolerance_thin_gt the same" (%).'
  )
