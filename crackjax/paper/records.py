"""A campaign's results as data: reading the runner's job directories and ``--export`` files,
merging copies of one job, which jobs are complete, and writing the small export file.

The runner's records (``run.json`` and the evaluation records ``epoch_<NNN>.json``,
`crackjax.trainer.eval_records.RECORD_FIELDS`) are read as they are; `load` returns one dict per run
(the export format of one run), which `crackjax.paper.report` renders and `crackjax.paper.plan`
reads timings from.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from crackjax.evaluation.result import (
  AP,
  F1,
  FIXED,
  NUM_THRESHOLDS,
  ODS,
  OIS,
  POOLING,
  PRECISION,
  RECALL,
)
from crackjax.runs import outputs

EXPORT_FORMAT = 'crackjax.reproduce/1'
# What an exported epoch keeps of each protocol's result (no curves, no per-image rows).
_EXPORT_KEYS = (ODS, OIS, AP, FIXED, NUM_THRESHOLDS)


# ------------------------------------------------------------------------------------- loading


def _compact(results: dict[str, Any]) -> dict[str, Any]:
  # OIS's 'pooling' is one fixed sentence (docs/evaluation.md), not repeated in every epoch.
  return {
    p: {
      k: {n: v for n, v in r[k].items() if n != POOLING} if k == OIS else r[k]
      for k in _EXPORT_KEYS
      if k in r
    }
    for p, r in results.items()
  }


def _read_json(path: Path) -> Any:
  """The JSON in `path`; a damaged file is a ValueError that names it (the report reads and
  never moves files: the runner sets damaged records aside and evaluates their epochs again
  where the checkpoints are kept)."""
  try:
    return json.loads(path.read_text())
  except ValueError as e:
    raise ValueError(
      f'{path} is not valid JSON ({e}); a runner record: rerun the runner, which sets it '
      'aside and evaluates its epoch again if its checkpoint is kept; an export: export it '
      'again.'
    ) from None


#: The fields every run must have (run.json: all but 'epochs'), and every epoch of it
#: (an epoch without 'results' counts as not evaluated, as
#: `crackjax.runs.identity.evaluated_epochs` counts).
RUN_KEYS = ('table', 'group', 'seed', 'rows', 'epochs')
EPOCH_KEYS = ('epoch',)
#: What an export's run holds beyond RUN_KEYS: `load_run` writes them (empty where a run.json
#: lacks them) and the report names them beside every number, so an export without them is
#: damaged, not old.
EXPORT_KEYS = (*RUN_KEYS, 'hardware', 'versions', 'setting')
#: Every row of a run, and every protocol's result of an epoch (what the report reads of it).
ROW_KEYS = ('key', 'epochs')
RESULT_KEYS = (ODS, OIS)
SCORE_KEYS = (PRECISION, RECALL, F1)

_INTEGER = ((int,), 'an integer')
_NUMBER = ((int, float), 'a number')
_OBJECT = ((dict,), 'an object')
# A time that may be unknown: null (NaN in records written before strict JSON).
_TIME = ((int, float, type(None)), 'a number or null')
# The type of each field that the report, the records or the plan read, in a run and in an
# epoch entry (a field absent is checked by the *_KEYS above, or read with a fallback).
_RUN_TYPES = {
  'table': _INTEGER,
  'group': ((str,), 'a string'),
  'seed': _INTEGER,
  'rows': ((list,), 'a list'),
  'hardware': _OBJECT,
  'versions': _OBJECT,
  'setting': _OBJECT,
  'config': _OBJECT,
  'side_by_side': _INTEGER,
}
_EPOCH_TYPES = {
  'epoch': _INTEGER,
  'results': _OBJECT,
  'params': _NUMBER,
  'train_seconds': _TIME,
  'eval_seconds': _NUMBER,
  'first_in_process': ((bool,), 'true or false'),
}
_ROW_TYPES = {'key': ((str,), 'a string'), 'epochs': _INTEGER}
_SCORE_TYPES = dict.fromkeys(SCORE_KEYS, _NUMBER)
_AGAIN = 'export it again with python -m crackjax.paper.report --export, or rerun the runner.'


def _check_keys(
  record: Any,
  keys: Sequence[str],
  what: str,
  types: dict[str, tuple[tuple[type, ...], str]] | None = None,
) -> None:
  """A ValueError naming `what` (a file, or a run in a file) unless `record` is a dict with
  every key of `keys` and, of the keys of `types` that it has, values of those types."""
  if not isinstance(record, dict):
    raise ValueError(f'{what} is not a record (a JSON object); export it again.')
  missing = [k for k in keys if k not in record]
  if missing:
    raise ValueError(f'{what} lacks {missing} (a record of another program or version?); {_AGAIN}')
  for k, (kinds, name) in (types or {}).items():
    v = record.get(k)
    # bool is an int to Python, never a seed or a time to us.
    wrong = not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds)
    if k in record and wrong:
      raise ValueError(f'{what}: {k!r} is {json.dumps(v)}, not {name}; {_AGAIN}')


def _check_epoch(e: Any, what: str) -> None:
  """An epoch entry: EPOCH_KEYS, the types of its fields and, per protocol of its 'results',
  RESULT_KEYS each with SCORE_KEYS as numbers."""
  _check_keys(e, EPOCH_KEYS, what, _EPOCH_TYPES)
  for protocol, r in e.get('results', {}).items():
    where = f'{what}, results[{protocol!r}]'
    _check_keys(r, RESULT_KEYS, where)
    for k in RESULT_KEYS:
      _check_keys(r[k], SCORE_KEYS, f'{where}[{k!r}]', _SCORE_TYPES)


def _check_run(run: Any, keys: Sequence[str], what: str) -> None:
  """A run (an export's, or a run.json): `keys`, the types of its fields, and ROW_KEYS in
  every row."""
  _check_keys(run, keys, what, _RUN_TYPES)
  for j, row in enumerate(run['rows']):
    _check_keys(row, ROW_KEYS, f'{what}, row entry {j}', _ROW_TYPES)


def _check_export_run(run: Any, what: str) -> None:
  """An export's run: EXPORT_KEYS, 'epochs' a list and every epoch (`_check_epoch`)."""
  _check_run(run, EXPORT_KEYS, what)
  if not isinstance(run['epochs'], list):
    raise ValueError(f"{what}: 'epochs' is {json.dumps(run['epochs'])}, not a list; {_AGAIN}")
  for i, e in enumerate(run['epochs']):
    _check_epoch(e, f'{what}, epoch entry {i}')


def load_run(directory: Path) -> dict[str, Any]:
  """One job's run.json and its epochs, compacted (the export format of one run).

  Raises:
    ValueError: a damaged or incomplete run.json or epoch record (named in the message).
  """
  run = _read_json(directory / 'run.json')
  _check_run(run, RUN_KEYS[:-1], str(directory / 'run.json'))
  epochs = []
  for path in sorted(directory.glob('epoch_[0-9][0-9][0-9].json')):
    e = _read_json(path)
    if not isinstance(e, dict) or 'results' not in e:
      raise ValueError(f'{path} is not a whole epoch record (no results); rerun the runner.')
    _check_epoch(e, str(path))
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


def set_aside(inputs: Iterable[str | Path]) -> dict[tuple[int, str, int], dict[int, Path]]:
  """(table, group, seed) -> epoch -> the newest damaged copy of that epoch's record that the
  runner set aside (`crackjax.runs.identity.read_record`), in the campaign directories of
  `inputs` (an export holds none): why an epoch has no record, for the report's notes."""
  found: dict[tuple[int, str, int], dict[int, Path]] = {}
  for item in map(Path, inputs):
    if not item.is_dir():
      continue
    for run_json in sorted(item.glob('table*/*/seed*/run.json')):
      copies = run_json.parent.glob('epoch_[0-9][0-9][0-9].json.damaged*')
      # Oldest first (.damaged, .damaged-2, ...), so the newest stays in the dict.
      copies = sorted(copies, key=lambda p: (p.name[:9], len(p.name), p.name))
      if not copies:
        continue
      run = _read_json(run_json)  # `load` has checked it
      key = (run['table'], run['group'], run['seed'])
      for copy in copies:
        found.setdefault(key, {})[int(copy.name[6:9])] = copy
  return found


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
    FileNotFoundError / ValueError: an input that is neither, or a damaged or incomplete one
      (named in the message).
  """
  runs: list[tuple[dict[str, Any], str]] = []  # (run, the input it came from)
  for item in inputs:
    item = Path(item)
    if item.is_dir():
      found = sorted(p.parent for p in item.glob('table*/*/seed*/run.json'))
      if not found:
        raise FileNotFoundError(
          f'No crackjax.paper.runner run (table*/*/seed*/run.json) under {item}.'
        )
      runs += [(load_run(d), str(item)) for d in found]
    elif item.is_file():
      data = _read_json(item)
      if not isinstance(data, dict) or data.get('format') != EXPORT_FORMAT:
        raise ValueError(f'{item} is not a crackjax.paper.report --export file ({EXPORT_FORMAT}).')
      if not isinstance(data.get('runs'), list):
        raise ValueError(f"{item} has no list of 'runs'; export it again.")
      if not data['runs']:
        # --export never writes one (report.main refuses to report nothing).
        raise ValueError(f"{item} holds no runs ('runs' is empty); export a campaign with results.")
      for i, run in enumerate(data['runs']):
        _check_export_run(run, f'{item}, run {i}')
      runs += [(run, str(item)) for run in data['runs']]
    else:
      raise FileNotFoundError(f'No such file or directory: {item}.')
  _check_one_setting_per_row(runs)
  return _dedupe(runs)


def _check_one_setting_per_row(runs: Sequence[tuple[dict[str, Any], str]]) -> None:
  """A ValueError naming the row and the fields that differ when the runs of one training group
  (a row's seeds, or two copies of one seed) come from different settings (`setting_of`: model,
  widths, input size, steps per epoch, batch, dtype): a row's mean over them would mix two
  experiments (was: GPU seeds of widths 64..1024 and a CPU-scale seed of widths 8..128 averaged
  into one row, the only note a differing eval time). A field one of them lacks (an older
  export), or a run.json without its config, is unknown, not different."""
  by_group: dict[tuple[int, str], dict[str, list[tuple[dict[str, Any], str]]]] = {}
  for run, source in runs:
    setting = run.get('setting') or {}
    if not any(v is not None for v in setting.values()):
      continue
    key = outputs.dumps(setting, sort_keys=True)
    by_group.setdefault((run['table'], run['group']), {}).setdefault(key, []).append((run, source))
  for (_, group), settings in by_group.items():
    sides = list(settings.values())
    a = sides[0][0][0]['setting']
    for members in sides[1:]:
      b = members[0][0]['setting']
      fields = [k for k in sorted(set(a) & set(b)) if a[k] != b[k]]
      if fields:
        raise ValueError(
          f'{group} mixes settings that one row would average: {_side(sides[0], fields)} but '
          f"{_side(members, fields)}; report each setting on its own (one command per setting's "
          'inputs, each with its own --out).'
        )


def _side(members: Sequence[tuple[dict[str, Any], str]], fields: Sequence[str]) -> str:
  """'seed(s) 0, 1 of A.json (widths [...], ...)': the runs of one setting, in words."""
  seeds = ', '.join(str(s) for s in sorted({r['seed'] for r, _ in members}))
  sources = ', '.join(sorted({s for _, s in members}))
  setting = members[0][0]['setting']
  values = ', '.join(f'{k} {outputs.dumps(setting[k])}' for k in fields)
  return f'seed(s) {seeds} of {sources} ({values})'


def _same_key(x: Any) -> str:
  # An export keeps floats to eight decimals: a campaign and its export compare equal after
  # the same rounding; JSON text, since NaN (an epoch's unknown training time) != NaN.
  return outputs.dumps(_rounded(x), sort_keys=True)


def _difference(a: dict[str, Any], source_a: str, b: dict[str, Any], source_b: str) -> str:
  """How two copies of a run differ, in words: their epoch counts, else the first field (of an
  epoch, then of the run) whose values differ after the export's rounding."""
  if len(a['epochs']) != len(b['epochs']):
    return f'{source_a} has {len(a["epochs"])} epochs, {source_b} {len(b["epochs"])}'

  def first(x: Any, y: Any, path: str) -> str | None:
    if isinstance(x, dict) and isinstance(y, dict):
      for k in sorted(set(x) | set(y), key=str):
        if k not in x or k not in y:
          return f'{path}{k} is only in {source_a if k in x else source_b}'
        found = first(x[k], y[k], f'{path}{k}.')
        if found:
          return found
      return None
    if _same_key(x) != _same_key(y):
      return f'{path[:-1]} is {_same_key(x)} in {source_a}, {_same_key(y)} in {source_b}'
    return None

  for ea, eb in zip(a['epochs'], b['epochs'], strict=True):
    found = first(ea, eb, '')
    if found:
      return f'epoch {ea.get("epoch")}: {found}'
  found = first(*({k: v for k, v in r.items() if k != 'epochs'} for r in (a, b)), '')
  return found or 'they differ'


def _dedupe(runs: Sequence[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
  """One run per (table, group, seed), of (run, input) pairs: the one with the most epochs, or
  the first of equal ones (a campaign directory and an export of it may both hold a run).
  Copies equal up to the export's rounding are one; others get a note on stderr."""
  best: dict[tuple, tuple[dict[str, Any], str]] = {}
  for run, source in runs:
    key = (run['table'], run['group'], run['seed'])
    if key not in best:
      best[key] = (run, source)
      continue
    old, old_source = best[key]
    if _same_key(old) == _same_key(run):
      continue
    # Stable: of equal epoch counts, the first input's.
    kept = max((old, old_source), (run, source), key=lambda c: len(c[0]['epochs']))
    print(
      f'note: {run["group"]} seed {run["seed"]} is in two inputs with different records '
      f'({_difference(old, old_source, run, source)}); using the one in {kept[1]}.',
      file=sys.stderr,
    )
    best[key] = kept
  return [run for run, _ in best.values()]


def complete_jobs(runs: Sequence[dict[str, Any]]) -> set[tuple[int, str, int, int]]:
  """(table, group, seed, epochs) of the runs evaluated at every epoch 1..epochs (an epoch
  entry without 'results' was not evaluated)."""
  return {
    (r['table'], r['group'], r['seed'], e)
    for r in runs
    for e in [max((row['epochs'] for row in r['rows']), default=0)]
    if {x['epoch'] for x in r['epochs'] if 'results' in x} >= set(range(1, e + 1))
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
  lines = [outputs.dumps(_rounded(run), separators=(',', ':')) for run in runs]
  Path(path).write_text(
    f'{{"format": "{EXPORT_FORMAT}", "runs": [\n' + ',\n'.join(lines) + '\n]}\n'
  )
