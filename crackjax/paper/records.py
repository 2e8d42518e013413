"""A campaign's results as data: reading the runner's job directories and ``--export`` files,
merging copies of one job, which jobs are complete, and writing the small export file.

The runner's records (``run.json`` and the evaluation records ``epoch_<NNN>.json``,
`crackjax.evaluate.RECORD_FIELDS`) are read as they are; `load` returns one dict per run (the
export format of one run), which `crackjax.paper.report` renders and `crackjax.paper.plan`
reads timings from.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

EXPORT_FORMAT = 'crackjax.reproduce/1'
# What an exported epoch keeps of each protocol's result (no curves, no per-image rows).
_EXPORT_KEYS = ('ods', 'ois', 'ap', 'fixed', 'num_thresholds')


# ------------------------------------------------------------------------------------- loading


def _compact(results: dict[str, Any]) -> dict[str, Any]:
  # OIS's 'pooling' is one fixed sentence (docs/evaluation.md), not repeated in every epoch.
  return {
    p: {
      k: {n: v for n, v in r[k].items() if n != 'pooling'} if k == 'ois' else r[k]
      for k in _EXPORT_KEYS
      if k in r
    }
    for p, r in results.items()
  }


def _read_json(path: Path) -> Any:
  """The JSON in `path`; a damaged file is a ValueError that names it (the report reads and
  never moves files: the runner sets damaged records aside and redoes them)."""
  try:
    return json.loads(path.read_text())
  except ValueError as e:
    raise ValueError(
      f'{path} is not valid JSON ({e}); a runner record: rerun the runner, which sets it '
      'aside and redoes it; an export: export it again.'
    ) from None


#: The fields every run must have (run.json: all but 'epochs'; an export's run: all), and
#: every epoch of it (an epoch without 'results' counts as not evaluated).
RUN_KEYS = ('table', 'group', 'seed', 'rows', 'epochs')
EPOCH_KEYS = ('epoch',)


def _check_keys(record: Any, keys: Sequence[str], what: str) -> None:
  """A ValueError naming `what` (a file, or a run in a file) unless `record` is a dict with
  every key of `keys`."""
  if not isinstance(record, dict):
    raise ValueError(f'{what} is not a record (a JSON object); export it again.')
  missing = [k for k in keys if k not in record]
  if missing:
    raise ValueError(
      f'{what} lacks {missing} (a record of another program or version?); export it again '
      'with python -m crackjax.paper.report --export, or rerun the runner.'
    )


def _check_export_run(run: Any, what: str) -> None:
  """An export's run: RUN_KEYS, and EPOCH_KEYS in every epoch."""
  _check_keys(run, RUN_KEYS, what)
  if not isinstance(run['epochs'], list):
    raise ValueError(f"{what}: 'epochs' is not a list; export it again.")
  for i, e in enumerate(run['epochs']):
    _check_keys(e, EPOCH_KEYS, f'{what}, epoch entry {i}')


def load_run(directory: Path) -> dict[str, Any]:
  """One job's run.json and its epochs, compacted (the export format of one run).

  Raises:
    ValueError: a damaged or incomplete run.json or epoch record (named in the message).
  """
  run = _read_json(directory / 'run.json')
  _check_keys(run, RUN_KEYS[:-1], str(directory / 'run.json'))
  epochs = []
  for path in sorted(directory.glob('epoch_[0-9][0-9][0-9].json')):
    e = _read_json(path)
    if not isinstance(e, dict) or 'results' not in e:
      raise ValueError(f'{path} is not a whole epoch record (no results); rerun the runner.')
    epochs.append(
      {**{k: v for k, v in e.items() if k != 'results'}, 'results': _compact(e['results'])}
    )
  return {
    'table': run['table'],
    'group': run['group'],
    'seed': run['seed'],
    'rows': run['rows'],
    'hardware': run.get('hardware', {}),
    'versions': run.get('versions', {}),
    'side_by_side': run.get('side_by_side', 1),
    'setting': setting_of(run.get('config', {})),
    'epochs': epochs,
  }


def setting_of(c: dict[str, Any]) -> dict[str, Any]:
  """The fields of a run's config (as JSON) that set its scale: what a report names and what
  timings are compared by."""
  return {
    'widths': c.get('model', {}).get('widths'),
    'input_size': c.get('data', {}).get('input_size'),
    'steps_per_epoch': c.get('steps_per_epoch'),
    'batch_size': c.get('batch_size'),
    'dtype': c.get('model', {}).get('dtype'),
    'model': c.get('model', {}).get('name'),
    'width_scale': c.get('model', {}).get('width_scale'),
  }


def load(inputs: Iterable[str | Path]) -> list[dict[str, Any]]:
  """Every run under the campaign directories and in the export files of `inputs`.

  Raises:
    FileNotFoundError / ValueError: an input that is neither (named in the message).
  """
  runs = []
  for item in inputs:
    item = Path(item)
    if item.is_dir():
      found = sorted(p.parent for p in item.glob('table*/*/seed*/run.json'))
      if not found:
        raise FileNotFoundError(
          f'No crackjax.paper.runner run (table*/*/seed*/run.json) under {item}.'
        )
      runs += [load_run(d) for d in found]
    elif item.is_file():
      data = _read_json(item)
      if not isinstance(data, dict) or data.get('format') != EXPORT_FORMAT:
        raise ValueError(f'{item} is not a crackjax.paper.report --export file ({EXPORT_FORMAT}).')
      if not isinstance(data.get('runs'), list):
        raise ValueError(f"{item} has no list of 'runs'; export it again.")
      for i, run in enumerate(data['runs']):
        _check_export_run(run, f'{item}, run {i}')
      runs += data['runs']
    else:
      raise FileNotFoundError(f'No such file or directory: {item}.')
  return _dedupe(runs)


def _dedupe(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """One run per (table, group, seed): the one with the most epochs (a campaign directory and
  an earlier export of it may both hold a run)."""
  best: dict[tuple, dict[str, Any]] = {}
  for run in runs:
    key = (run['table'], run['group'], run['seed'])
    if key in best and best[key]['epochs'] != run['epochs']:
      kept, other = sorted((best[key], run), key=lambda r: len(r['epochs']), reverse=True)
      print(
        f'note: {run["group"]} seed {run["seed"]} is in two inputs with different records; '
        f'using the one with {len(kept["epochs"])} epochs (the other has '
        f'{len(other["epochs"])}).',
        file=sys.stderr,
      )
    if key not in best or len(run['epochs']) > len(best[key]['epochs']):
      best[key] = run
  return list(best.values())


def complete_jobs(runs: Sequence[dict[str, Any]]) -> set[tuple[int, str, int, int]]:
  """(table, group, seed, epochs) of the runs evaluated at every epoch 1..epochs."""
  return {
    (r['table'], r['group'], r['seed'], e)
    for r in runs
    for e in [max((row['epochs'] for row in r['rows']), default=0)]
    if {x['epoch'] for x in r['epochs']} >= set(range(1, e + 1))
  }


def complete_runs(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
  """The runs of `runs` that `complete_jobs` counts (evaluated at every epoch)."""
  done = {job[:3] for job in complete_jobs(runs)}
  return [r for r in runs if (r['table'], r['group'], r['seed']) in done]


def _rounded(x: Any) -> Any:
  # Eight decimals: the report prints fractions as percent with two (and a std from them).
  if isinstance(x, float):
    return round(x, 8)
  if isinstance(x, dict):
    return {k: _rounded(v) for k, v in x.items()}
  if isinstance(x, list | tuple):
    return [_rounded(v) for v in x]
  return x


def export(runs: Sequence[dict[str, Any]], path: str | Path) -> None:
  """Writes `runs` as one small JSON file that `load` reads back: floats to eight decimals,
  one run per line (a committed export diffs run by run)."""
  Path(path).parent.mkdir(parents=True, exist_ok=True)
  lines = [json.dumps(_rounded(run), separators=(',', ':')) for run in runs]
  Path(path).write_text(
    f'{{"format": "{EXPORT_FORMAT}", "runs": [\n' + ',\n'.join(lines) + '\n]}\n'
  )
