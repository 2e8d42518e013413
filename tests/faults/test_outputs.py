"""Faults at the outputs (issue 29): a user's files are replaced only with --overwrite, nothing
is written or removed through a link planted in an output folder, linked input folders are
followed or skipped with a word, and every name a file system allows gives valid HTML and
strict JSON.

Each command case asserts the one line it exits with (`sys.exit(message)`: Python prints it to
stderr and exits with status 1; one case runs the command in a subprocess to see exactly
that), and that nothing was lost. The commands run in-process under the slow tier; the pure
parts (JSON, the link and manifest checks, the HTML page, the input walk) are fast.
"""

import ast
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from crackjax.deploy import predictor as predict
from crackjax.evaluation import scoring
from crackjax.experiment import build
from crackjax.paper import records, report
from crackjax.runs import identity, outputs

REPO = Path(__file__).resolve().parents[2]


COMMITTED = REPO / 'results' / 'cpu_scale_table1.json'


def strict_json(text: str):
  """`text` parsed as strict JSON: NaN / Infinity (Python's extension) are an error."""

  def refuse(name):
    raise ValueError(f'{name} is not JSON')

  return json.loads(text, parse_constant=refuse)


def test_dumps_writes_non_finite_numbers_as_null():
  value = {
    'nan': math.nan,
    'inf': [math.inf, -math.inf],
    'numpy': [np.float32('nan'), np.float64(1.5), np.int64(3), np.bool_(True)],
    'array': np.array([1.0, np.nan]),
    'nested': ({'x': float('-inf')},),
  }
  assert strict_json(outputs.dumps(value)) == {
    'nan': None,
    'inf': [None, None],
    'numpy': [None, 1.5, 3, True],
    'array': [1.0, None],
    'nested': [{'x': None}],
  }
  # What JSON cannot hold at all is still an error, never written some other way.
  with pytest.raises(TypeError):
    outputs.dumps({'x': object()})


def test_records_are_strict_json_and_a_null_time_reads_as_unknown(tmp_path, capsys):
  # eval.json and epoch_<NNN>.json of a run evaluated without training (--mode=eval, a
  # finished run relaunched) held "train_seconds": NaN.
  identity.write_json(tmp_path / 'eval.json', {'train_seconds': math.nan, 'eval_seconds': 2.0})
  assert strict_json((tmp_path / 'eval.json').read_text())['train_seconds'] is None
  # Readers take null: the report shows an unknown time, and a run recorded with NaN (before
  # strict JSON) and the same run exported with null are one run, without a note.
  data = json.loads(COMMITTED.read_text())
  data['runs'] = data['runs'][:1]
  old, new = json.loads(json.dumps(data)), json.loads(json.dumps(data))
  old['runs'][0]['epochs'][0]['train_seconds'] = math.nan
  new['runs'][0]['epochs'][0]['train_seconds'] = None
  (tmp_path / 'old.json').write_text(json.dumps(old))
  (tmp_path / 'new.json').write_text(outputs.dumps(new))
  runs = records.load([str(tmp_path / 'old.json'), str(tmp_path / 'new.json')])
  assert len(runs) == 1 and 'note:' not in capsys.readouterr().err
  rows = report.row_results(records.load([str(tmp_path / 'new.json')]), 'strict')
  assert rows and all(math.isnan(t) for r in rows for t in r.values['time_s'])
  records.export(runs, tmp_path / 'again.json')
  strict_json((tmp_path / 'again.json').read_text())


def _json_writes(tree: ast.Module) -> list[tuple[str, int]]:
  """(enclosing function, line) of every json.dump / json.dumps call in a module."""
  found = []

  def visit(node, function):
    for child in ast.iter_child_nodes(node):
      name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
      if (
        isinstance(child, ast.Call)
        and isinstance(child.func, ast.Attribute)
        and child.func.attr in ('dump', 'dumps')
        and isinstance(child.func.value, ast.Name)
        and child.func.value.id == 'json'
      ):
        found.append((function, child.lineno))
      visit(child, name)

  visit(tree, '<module>')
  return found


#: json.dumps calls whose text is never written to a file: keys and messages (NaN there is
#: harmless), and the helper itself. Every other JSON the project writes goes through
#: crackjax.runs.outputs.dumps.
NOT_WRITTEN = {
  ('crackjax/runs/outputs.py', 'dumps'): 'the helper',
  ('crackjax/runs/identity.py', '_as_dict'): 'a config as plain data, read back at once',
  ('crackjax/runs/identity.py', 'differences'): 'values in a message',
  ('crackjax/evaluation/scoring.py', '_data_key'): 'a comparison key',
  ('crackjax/evaluation/scoring.py', 'other_results_dir'): 'a hash of a key',
  ('crackjax/paper/records.py', '_check_keys'): 'a value in a message',
  ('crackjax/paper/records.py', '_check_export_run'): 'a value in a message',
  ('crackjax/paper/report.py', '_describe_runs'): 'a set key',
  ('crackjax/paper/jobs.py', 'prepare'): 'a cache key',
}


def test_every_json_the_project_writes_goes_through_the_strict_helper():
  files = [REPO / 'launch.py', *(REPO / 'crackjax').rglob('*.py'), *(REPO / 'bench').rglob('*.py')]
  raw = []
  for path in files:
    rel = str(path.relative_to(REPO))
    for function, line in _json_writes(ast.parse(path.read_text(), rel)):
      if (rel, function) not in NOT_WRITTEN:
        raw.append(f'{rel}:{line} ({function})')
  assert not raw, f'json.dump(s) outside crackjax.runs.outputs.dumps: {raw}'
  # The check sees a call: one planted in a function is found, by name.
  planted = ast.parse('import json\ndef f(x):\n  open("a", "w").write(json.dumps(x))\n')
  assert _json_writes(planted) == [('f', 3)]


@pytest.mark.slow
def test_an_evaluation_without_training_writes_strict_json(smoke_run, tmp_path):
  # --mode=eval, or a finished run relaunched: no training time, written null (was NaN).
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  scoring.evaluate_checkpoint(build(predict.read_config(run)), run)
  assert strict_json((run / 'eval.json').read_text())['train_seconds'] is None
  # Every JSON file of the run, and every line of metrics.jsonl, is strict JSON.
  for path in run.glob('*.json'):
    strict_json(path.read_text())
  for line in (run / 'metrics.jsonl').read_text().splitlines():
    strict_json(line)
