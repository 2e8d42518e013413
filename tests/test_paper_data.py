"""The paper's printed figures as data (crackjax/paper/data/table<T>.csv) and their one loader
(`crackjax.paper.tables.table_rows`): the files parse, their rows are the configs' rows, nothing
is read at import, and the dagger loss is one constant that the configs use."""

import csv
import importlib
import inspect
import json
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from crackjax.configs import compare
from crackjax.losses import side
from crackjax.paper import table_rules, tables

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / 'crackjax' / 'paper' / 'data'
ALL_TABLES = range(1, 9)


def _lines(table: int) -> list[dict[str, str]]:
  with (DATA / f'table{table}.csv').open(newline='', encoding='utf-8') as f:
    return list(csv.DictReader(f))


@pytest.mark.parametrize('table', ALL_TABLES)
def test_every_file_parses_line_for_row(table):
  with (DATA / f'table{table}.csv').open(newline='', encoding='utf-8') as f:
    header, *lines = list(csv.reader(f))
  assert lines and all(len(line) == len(header) for line in lines)
  rows = tables.table_rows(table)
  # One row per printed line, in the paper's order, named as printed.
  assert [r.name for r in rows] == [line['method'] for line in _lines(table)]
  assert all(r.table == table for r in rows)


def test_the_files_are_package_data():
  # A wheel carries them: pyproject names them, and the installed package finds them.
  config = tomllib.loads((REPO / 'pyproject.toml').read_text())
  assert config['tool']['setuptools']['package-data']['crackjax.paper'] == ['data/*.csv']
  found = resources.files('crackjax.paper') / 'data'
  assert sorted(p.name for p in found.iterdir() if p.name.endswith('.csv')) == [
    f'table{t}.csv' for t in ALL_TABLES
  ]


@pytest.mark.parametrize('table', ALL_TABLES)
def test_the_row_keys_are_the_configs(table):
  # Every trainable row's key is a config argument of configs/table<T>.py, with its epochs,
  # and an unknown key lists exactly those keys.
  module = importlib.import_module(f'crackjax.configs.table{table}')
  trainable = [r for r in tables.table_rows(table) if not r.reference]
  with pytest.raises(ValueError, match='Unknown row') as e:
    module.get_config('no_such_row')
  assert str(e.value).endswith(f'with a key of: {[r.key for r in trainable]}.')
  for r in trainable:
    assert module.get_config(r.key).num_epochs == r.epochs


def test_a_malformed_file_is_named(tmp_path, monkeypatch):
  # A hand edit that drops a cell is a one-line error naming the file, not a wrong row.
  bad = tmp_path / 'paper'
  (bad / 'data').mkdir(parents=True)
  text = (DATA / 'table5.csv').read_text(encoding='utf-8').splitlines()
  text[2] = text[2].rsplit(',', 1)[0]
  (bad / 'data' / 'table5.csv').write_text('\n'.join(text) + '\n', encoding='utf-8')
  monkeypatch.setattr(table_rules.resources, 'files', lambda package: bad)
  tables.table_rows.cache_clear()
  try:
    with pytest.raises(ValueError, match=r'table5\.csv, line 3: expected 9 cells'):
      tables.table_rows(5)
  finally:
    monkeypatch.undo()
    tables.table_rows.cache_clear()
  assert len(tables.table_rows(5)) == 4


# Run in a fresh interpreter: records every file opened (an audit hook) while every module of
# crackjax/paper and the paper's config files are imported, then after a first use.
_LAZY = """
import importlib, json, os, sys
from pathlib import Path

opened = []


def hook(event, args):
  if event == 'open' and isinstance(args[0], (str, bytes, os.PathLike)):
    path = os.fsdecode(args[0])
    if path.endswith('.csv'):
      opened.append(Path(path).name)


sys.addaudithook(hook)
modules = [f'crackjax.paper.{p.stem}' for p in sorted(Path('crackjax/paper').glob('*.py'))]
modules += ['crackjax.configs.compare', 'crackjax.configs.paper_tables']
modules += [f'crackjax.configs.table{t}' for t in range(1, 9)]
for m in modules:
  importlib.import_module(m)
from crackjax.paper import tables

at_import = list(opened)
# Which tables exist is known without reading them.
known = (1 in tables.TABLES, 9 in tables.COMPARE_TABLES, list(tables.TABLES),
         len(tables.COMPARE_TABLES))
before_use = list(opened)
tables.rows_by_key(7)
print(json.dumps({'modules': len(modules), 'at_import': at_import, 'known': known,
                  'before_use': before_use, 'after_use': opened,
                  'cached': tables.table_rows.cache_info().currsize}))
"""


def test_importing_reads_no_file():
  out = subprocess.run(
    [sys.executable, '-c', _LAZY], capture_output=True, text=True, cwd=REPO, timeout=120
  )
  assert out.returncode == 0, out.stderr
  r = json.loads(out.stdout.splitlines()[-1])
  assert r['modules'] > 10
  assert r['at_import'] == [] and r['before_use'] == []
  assert r['known'] == [True, False, [1, 2, 3, 4], 4]
  # Table VII is read on first use, with the Table III its U-Net rows and epochs come from.
  assert sorted(r['after_use']) == ['table3.csv', 'table7.csv']
  assert r['cached'] == 2


def test_the_dagger_loss_is_the_one_the_configs_use():
  dagger = dict(table_rules.DAGGER_LOSS)
  assert dagger == {
    'weighting': 'exp',
    'beta': 0.75,
    'gamma': 1.0,
    'base': 10.0,
    'a': 1.0,
    'b': 0.0,
  }  # eq. 7-8, beta of Table I's wce_exp
  # configs/compare.py's dagger losses: the holistic exp-WCE, or side_exp_wce whose unset
  # fields default to the constant's.
  defaults = {
    k: p.default for k, p in inspect.signature(side.side_exp_wce).parameters.items() if k in dagger
  }
  for model, loss in compare.DAGGER_LOSSES.items():
    if loss['name'] == 'side_exp_wce':
      assert {**dagger, **defaults, 'beta': loss['beta']} == dagger, model
    else:
      assert loss == {'name': 'holistic', **dagger, 'jaccard_smooth': 1.0}, model
  # The dagger rows of Tables V-VIII: the constant with the printed beta, in their configs too.
  for table in tables.COMPARE_TABLES:
    for r in tables.table_rows(table):
      if not r.dagger:
        continue
      fields = {k: getattr(r, k) for k in dagger}
      assert fields == {**dagger, 'beta': r.beta}, r.key
      c = importlib.import_module(f'crackjax.configs.table{table}').get_config(r.key)
      assert c.loss.beta == r.beta
      assert {k: c.loss[k] for k in dagger if k in c.loss} | {'beta': r.beta} == {
        k: v for k, v in fields.items() if k in c.loss
      }, r.key
