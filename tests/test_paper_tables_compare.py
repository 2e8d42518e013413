"""crackjax/paper/tables.py Tables V-VIII, configs/table5.py ... table8.py, and their path
through `crackjax.paper.runner` (--list, jobs, configs) and `crackjax.paper.report` (on
synthetic runs: nothing trains here).

The expected betas and epochs below are written by hand (betas read off the paper's LaTeX,
epochs worked out by hand from the rule documented in crackjax/paper/table_rules.py); every printed
figure is also checked against the LaTeX, parsed independently of the data module.
"""

import csv
import importlib
import inspect
import math
import re
from pathlib import Path

import pytest

from crackjax import losses
from crackjax.configs import compare, paper_tables
from crackjax.experiment import validation
from crackjax.models import MODELS, model_group
from crackjax.paper import jobs as campaign_jobs
from crackjax.paper import records, report, report_stats, report_tables, runner, tables

PAPER = Path(__file__).resolve().parents[2] / 'shared' / 'paper' / '000_8dd8ac6a7f50eb79.txt'
TABLE_MODULES = {t: importlib.import_module(f'crackjax.configs.table{t}') for t in (5, 6, 7, 8)}
ROWS = [(t, r.key) for t, rows in tables.COMPARE_TABLES.items() for r in rows]

# Epochs per row (see crackjax.paper.tables: U-Net rows from Tables I-IV; originals the second
# baseline's epochs; daggers round(anchor x TT_dagger / TT_original)), worked out by hand.
EPOCHS = {
  5: {'unet': 70, 'ucliquenet': 70, 'unet_dagger': 20, 'ucliquenet_dagger': 40},  # 70*85/149
  6: {'unet': 50, 'ucliquenet': 50, 'unet_dagger': 15, 'ucliquenet_dagger': 25},  # 50*620/1240
  7: {
    **dict.fromkeys(
      ['fcn8s', 'hed', 'rcf', 'segnet', 'deepcrack', 'deeplabv3plus', 'crackseg', 'unet'], 70
    ),
    'ucliquenet': 70,
    'fcn8s_dagger': 35,  # 70 * 87 / 174
    'hed_dagger': 23,  # 70 * 34 / 102 = 23.3
    'rcf_dagger': 35,  # 70 * 117 / 235 = 34.9
    'segnet_dagger': 29,  # 70 * 64 / 152 = 29.5
    'deepcrack_dagger': 47,  # 70 * 129 / 193 = 46.8
    'deeplabv3plus_dagger': 70,  # same TT
    'crackseg_dagger': 35,  # 70 * 114 / 228
    'unet_dagger': 10,  # Table III wce_exp_1_e10
    'ucliquenet_dagger': 20,  # 70 * 68 / 238
  },
  8: {
    **dict.fromkeys(
      ['fcn8s', 'hed', 'rcf', 'segnet', 'deepcrack', 'deeplabv3plus', 'crackseg', 'unet'], 30
    ),
    'ucliquenet': 30,
    'fcn8s_dagger': 20,  # 30 * 128 / 189 = 20.3
    'rcf_dagger': 23,  # 30 * 255 / 332 = 23.0
    'deeplabv3plus_dagger': 27,  # 30 * 60 / 66 = 27.3
    'crackseg_dagger': 20,  # 30 * 40 / 60
    'unet_dagger': 15,  # Table IV wce_exp_0.75_e15
    'ucliquenet_dagger': 18,  # 30 * 31 / 52 = 17.9
  },
}

# The printed beta of every dagger row (the original rows print '-').
BETAS = {
  5: {'unet_dagger': 0.75, 'ucliquenet_dagger': 1},
  6: {'unet_dagger': 1, 'ucliquenet_dagger': 1},
  7: {
    'fcn8s_dagger': 1,
    'hed_dagger': 1,
    'rcf_dagger': 0.75,
    'segnet_dagger': 0.5,
    'deepcrack_dagger': 0.75,
    'deeplabv3plus_dagger': 1,
    'crackseg_dagger': 0.75,
    'unet_dagger': 1,
    'ucliquenet_dagger': 1,
  },
  8: {
    'fcn8s_dagger': 0.75,
    'rcf_dagger': 1,
    'deeplabv3plus_dagger': 0.75,
    'crackseg_dagger': 0.75,
    'unet_dagger': 0.75,
    'ucliquenet_dagger': 0.75,
  },
}

# The U-Net rows are these Table I-IV rows (identical ODS / OIS F1).
UNET = {
  5: ('wce_xie_e70', 'wce_exp_0.75_e20'),
  6: ('wce_xie_ls_e50', 'wce_exp_1_e15'),
  7: ('wce_xie_e70', 'wce_exp_1_e10'),
  8: ('wce_xie_e30', 'wce_exp_0.75_e15'),
}


def test_row_counts():
  counts = {t: len(rows) for t, rows in tables.COMPARE_TABLES.items()}
  assert counts == {5: 4, 6: 4, 7: 18, 8: 15}
  assert sum(counts.values()) == 41  # the count
  assert tables.TABLES.keys() == {1, 2, 3, 4}  # Tables I-IV unchanged
  for t, rows in tables.COMPARE_TABLES.items():
    assert all(r.table == t and not r.reference for r in rows)
    keys = [r.key for r in rows]
    assert len(set(keys)) == len(keys)
    assert set(keys) == set(EPOCHS[t])
    # Table VIII prints no HED, SegNet or DeepCrack dagger row.
  assert {'hed_dagger', 'segnet_dagger', 'deepcrack_dagger'}.isdisjoint(tables.rows_by_key(8))


@pytest.mark.parametrize(('table', 'key'), ROWS)
def test_row_hyper_parameters(table, key):
  r = tables.rows_by_key(table)[key]
  assert r.epochs == EPOCHS[table][key]
  assert r.dagger == key.endswith('_dagger')
  assert r.model == key.removesuffix('_dagger')
  assert r.model in MODELS
  assert r.model == 'unet' or r.model in compare.DAGGER_LOSSES
  assert r.beta == BETAS[table].get(key)
  assert r.base_table == table - 4
  assert r.dataset == tables.SETTINGS[table - 4].dataset == tables.dataset_of(table)
  assert r.training_group == f'table{table}:{key}'
  assert r.time_s > 0 and r.params_count > 0 and r.gflops > 0 and r.fps > 0
  assert r.epochs_basis
  if r.dagger:  # eq. 7-8: the exponential WCE with the printed beta
    assert (r.weighting, r.gamma, r.base, r.a, r.b) == ('exp', 1.0, 10.0, 1.0, 0.0)
  elif r.model != 'unet':  # the model's own loss (configs/compare.py)
    assert r.weighting is None and r.loss == 'original loss'


def test_one_row_type_for_all_eight_tables():
  rows = [r for t in range(1, 9) for r in tables.table_rows(t)]
  assert {type(r) for r in rows} == {tables.Row} and len(rows) == 56 + 41
  assert {r.model for t in tables.TABLES for r in tables.table_rows(t)} == {'unet', None}
  assert all(r.epochs_basis == 'printed' for t in tables.TABLES for r in tables.table_rows(t))


def test_epoch_rule_reproduces_the_unet_rows():
  """anchor x TT_dagger / TT_original gives the known U-Net dagger epochs of Tables I-IV."""
  for t in tables.COMPARE_TABLES:
    rows = tables.rows_by_key(t)
    anchor = tables.rows_by_key(t - 4)[UNET[t][0]].epochs
    for r in rows.values():
      if r.dagger:
        ratio = r.time_s / rows[r.model].time_s
        assert r.epochs == math.floor(anchor * ratio + 0.5), r.key
        assert abs(anchor * ratio - r.epochs) < 0.5
    assert rows['unet'].epochs == anchor


@pytest.mark.parametrize('table', [5, 6, 7, 8])
def test_unet_rows_are_table_1_to_4_rows(table):
  rows = tables.rows_by_key(table)
  base = tables.rows_by_key(table - 4)
  for key, unet_row in zip(('unet', 'unet_dagger'), UNET[table], strict=True):
    r, b = rows[key], base[unet_row]
    assert r.unet_row == unet_row
    assert (r.ods.f1.mean, r.ois.f1.mean) == (b.ods.f1.mean, b.ois.f1.mean)
    # The loss is the Table I-IV row's (Xie's WCE, or the exponential WCE for the dagger).
    loss = ('weighting', 'beta', 'gamma', 'base', 'a', 'b', 'laplace')
    assert [getattr(r, f) for f in loss] == [getattr(b, f) for f in loss]
    assert r.epochs == b.epochs
    assert abs(r.time_s - b.time_s) <= 60  # TT printed rounded to the minute
    if r.dagger:
      assert (b.weighting, b.beta, b.b) == ('exp', r.beta, 0)
    else:
      assert b.weighting == 'xie'
    # The config is the Table I-IV row's.
    assert (
      TABLE_MODULES[table].get_config(key).to_dict()
      == importlib.import_module(f'crackjax.configs.table{table - 4}')
      .get_config(unet_row)
      .to_dict()
    )


def test_sample_rows_by_hand():
  r = tables.rows_by_key(7)['fcn8s_dagger']
  assert (r.name, r.ods.f1.mean, r.ois.f1.mean, r.params, r.gflops, r.time, r.fps) == (
    'FCN8s†',
    95.01,
    96.56,
    '134.27M',
    189.5,
    '1h 27min',
    13.92,
  )
  assert r.params_count == 134_270_000 and r.time_s == 87 * 60
  r = tables.rows_by_key(8)['crackseg']
  assert (r.ods.f1.mean, r.ois.f1.mean, r.params, r.gflops, r.time, r.fps) == (
    47.34,
    48.10,
    '53.87M',
    116.67,
    '1h',
    15.96,
  )
  assert r.time_s == 3600 and r.beta is None
  r = tables.rows_by_key(6)['ucliquenet_dagger']
  assert (r.ods.f1.mean, r.ois.f1.mean, r.params, r.gflops, r.time, r.fps) == (
    83.34,
    90.82,
    '487.77K',
    34.06,
    '10min 20s',
    9.97,
  )
  assert r.params_count == 487_770 and r.time_s == 620


def _clean(cell: str) -> str:
  cell = re.sub(r'\{?\$\^\\dag\$\}?', '†', cell)
  cell = re.sub(r'\\cite\{[^}]*\}', '', cell)
  cell = re.sub(r'\\textbf|\\textcolor\{green\}', '', cell)
  cell = cell.replace('{', '').replace('}', '').replace('\\\\', '').replace('$', '')
  return ' '.join(cell.split())


def _latex_tables() -> list[list[list[str]]]:
  lines = PAPER.read_text().splitlines()
  starts = [i for i, line in enumerate(lines) if 'Comparison with other models on' in line]
  found = []
  for start in starts:
    end = next(i for i in range(start, len(lines)) if r'\end{tabular' in lines[i])
    rows = []
    for line in lines[start:end]:
      cells = [_clean(c) for c in line.split('&')]
      if len(cells) == 8 and re.fullmatch(r'\d+\.\d+', cells[2]):  # not the header
        rows.append(cells)
    found.append(rows)
  return found


@pytest.mark.skipif(not PAPER.exists(), reason='paper source not in ../shared/paper')
def test_all_rows_match_the_latex():
  latex = _latex_tables()
  assert [len(t) for t in latex] == [4, 4, 18, 15]
  model_of = {
    'FCN8s': 'fcn8s',
    'HED': 'hed',
    'RCF': 'rcf',
    'SegNet': 'segnet',
    'DeepCrack': 'deepcrack',
    'Deeplab v3+': 'deeplabv3plus',
    'CrackSeg': 'crackseg',
    'U-Net': 'unet',
    'U-CliqueNet': 'ucliquenet',
  }
  for t, printed in zip((5, 6, 7, 8), latex, strict=True):
    ours = tables.COMPARE_TABLES[t]
    assert len(ours) == len(printed)
    for r, (name, beta, ods, ois, params, gflops, tt, fps) in zip(ours, printed, strict=True):
      assert r.name == name
      assert r.model == model_of[name.removesuffix('†')]
      assert r.dagger == name.endswith('†')
      assert r.beta == (None if beta == '-' else float(beta))
      assert (r.ods.f1.mean, r.ois.f1.mean) == (float(ods), float(ois))
      assert (r.ods.p, r.ods.r, r.ods.f1.std) == (None, None, None)  # F1 only, no std
      assert (r.gflops, r.fps) == (float(gflops), float(fps))
      assert r.params == params
      assert r.time == tt


@pytest.mark.parametrize(('table', 'key'), ROWS)
def test_every_row_config_loads(table, key):
  r = tables.rows_by_key(table)[key]
  s = tables.SETTINGS[table - 4]
  get_config = TABLE_MODULES[table].get_config
  full, smoke = get_config(key), get_config(f'{key},smoke')
  assert full.num_epochs == r.epochs
  for c in (full, smoke):
    assert c.model.name == r.model
    assert c.data.name == s.dataset
    assert c.data.input_size == s.input_size
    assert c.data.noise_std == s.noise_std
    assert c.learning_rate == s.learning_rate
  assert (full.batch_size, full.steps_per_epoch) == (s.batch_size, s.steps_per_epoch)
  assert smoke.steps_per_epoch == 3
  if r.model == 'unet':
    assert full.model.widths == s.widths and smoke.model.widths == (4, 8, 16, 32, 64)
    assert full.loss.weighting == ('exp' if r.dagger else 'xie')
  else:
    assert full.model.width_scale == 1 and smoke.model.width_scale == 1 / 16
    assert full.model.to_dict() == model_group(r.model)
    loss = compare.DAGGER_LOSSES[r.model] if r.dagger else MODELS[r.model].original_loss
    assert full.loss.name == loss['name']
  if r.dagger:
    assert full.loss.beta == r.beta
    assert full.loss.name in ('holistic', 'side_exp_wce')
    assert full.loss.get('weighting', 'exp') == 'exp'
    # side_exp_wce's config leaves them at the factory's defaults.
    factory = inspect.signature(losses.LOSSES[full.loss.name].build).parameters
    loss = {**{k: p.default for k, p in factory.items()}, **full.loss.to_dict()}
    assert (loss['base'], loss['gamma'], loss['a'], loss['b']) == (10, 1, 1, 0)
  if r.model_implemented:
    validation.check_config(full)
    validation.check_config(smoke)
  cpu = get_config(f'{key},cpu')
  assert cpu.data.name == s.dataset and cpu.num_epochs == 2


@pytest.mark.parametrize('table', [5, 6, 7, 8])
def test_unknown_key_and_variant_are_rejected(table):
  get_config = TABLE_MODULES[table].get_config
  with pytest.raises(ValueError, match='Unknown row') as e:
    get_config('no_such_row')
  assert 'unet_dagger' in str(e.value)
  with pytest.raises(ValueError, match='Unknown row'):
    get_config()
  with pytest.raises(ValueError, match='Unknown config argument'):
    get_config('unet,gpu')
  with pytest.raises(ValueError, match='Unknown config argument'):
    get_config('ucliquenet,gpu')


def test_apply_compare_row_needs_the_exp_wce_for_a_dagger_row():
  c = compare.get_config('hed')  # HED's original loss, no beta
  with pytest.raises(ValueError, match='dagger row'):
    paper_tables.apply_compare_row(c, 7, 'hed_dagger')
  c = paper_tables.apply_compare_row(compare.get_config('hed'), 7, 'hed')
  assert (c.data.name, c.data.input_size, c.num_epochs) == ('crack360', (512, 512), 70)


def test_list_prints_the_41_rows(capsys):
  assert runner.main(['--list']) == 0
  lines = capsys.readouterr().out.splitlines()
  compare_lines = [
    line for line in lines if line.split()[0] in ('table5', 'table6', 'table7', 'table8')
  ]
  assert len(compare_lines) == 41
  assert len(lines) == 56 + 41  # Tables I-IV: 52 trainable + 4 RSF rows
  pending = sum(not r.model_implemented for rows in tables.COMPARE_TABLES.values() for r in rows)
  assert sum('model not in crackjax.models yet' in line for line in compare_lines) == pending
  line = next(line for line in compare_lines if line.split()[:2] == ['table7', 'hed_dagger'])
  assert '23 epochs' in line and '92.58' in line and 'beta=1' in line
  assert runner.main(['--list', '--table=7']) == 0
  assert len(capsys.readouterr().out.splitlines()) == 18


def test_jobs_and_configs_of_a_comparison_table():
  jobs = campaign_jobs.select_jobs(7, [], [0, 1])
  assert len(jobs) == 2 * 18
  jobs = campaign_jobs.select_jobs(8, ['rcf', 'rcf_dagger'], [0])
  assert [j.id for j in jobs] == ['8:rcf:0', '8:rcf_dagger:0']
  assert [j.epochs for j in jobs] == [30, 23]
  assert jobs[1].directory('w') == Path('w/table8/rcf_dagger/seed0')
  c = campaign_jobs.load_config(
    jobs[1],
    variant='smoke',
    overrides=['data.manual_dir=/nowhere'],
    directory=campaign_jobs.configs_dir(),
    protocols=['strict'],
  )
  assert (c.model.name, c.loss.name, c.loss.beta) == ('rcf', 'side_exp_wce', 1.0)
  assert (c.num_epochs, c.steps_per_epoch, c.eval.protocols) == (23, 3, ('strict',))
  assert c.data.name == 'bjn260' and c.data.manual_dir == '/nowhere'
  with pytest.raises(ValueError, match='Not a trainable row of Table 8'):
    campaign_jobs.select_jobs(8, ['hed_dagger'], [0])
  with pytest.raises(ValueError, match='--table must be one of'):
    campaign_jobs.select_jobs(9, [], [0])


def _fake_run(table: int, key: str, seed: int, f1: float, seconds: float) -> dict:
  row = tables.rows_by_key(table)[key]

  def prf(x):
    return {'precision': x, 'recall': x, 'f1': x}

  epochs = [
    {
      'epoch': e,
      'step': 3 * e,
      'params': 14_716_171,
      'train_seconds': seconds,
      'eval_seconds': 1.0,
      'first_in_process': e == 1,
      'results': {'strict': {'ods': prf(f1), 'ois': prf(f1 + 0.01), 'fixed': prf(f1 - 0.01)}},
    }
    for e in range(1, row.epochs + 1)
  ]
  return {
    'table': table,
    'group': row.training_group,
    'seed': seed,
    'rows': [{'key': key, 'epochs': row.epochs}],
    'hardware': {'device_kind': 'cpu', 'backend': 'cpu', 'cpu': 'x', 'cpu_count': 2},
    'versions': {'commit': 'abc', 'jax': '0'},
    'side_by_side': 1,
    'setting': {
      'widths': None,
      'input_size': [512, 512],
      'steps_per_epoch': 3,
      'batch_size': 2,
      'dtype': 'float32',
      'model': 'hed',
      'width_scale': 0.0625,
    },
    'epochs': epochs,
  }


def test_report_shows_the_comparison_tables(tmp_path):
  runs = [
    _fake_run(7, 'hed', 0, 0.90, 2.0),
    _fake_run(7, 'hed', 1, 0.92, 2.0),
    _fake_run(7, 'hed_dagger', 0, 0.93, 2.0),
    _fake_run(7, 'hed_dagger', 1, 0.95, 2.0),
  ]
  assert report_stats.row_results(runs, 'strict') == []  # Tables I-IV: nothing
  results = report_stats.compare_results(runs, 'strict')
  assert [(r.row.key, r.seeds) for r in results] == [('hed', [0, 1]), ('hed_dagger', [0, 1])]
  md = (report.write_report(runs, tmp_path, ['strict'])).read_text()
  assert '# Reproduction of Tables I-VIII' in md
  assert '## Table 7 (crack360, comparison models), `strict` protocol' in md
  assert '- Setting: hed (width_scale 0.0625), training input [512, 512]' in md
  # Ours (ODS 91.00 (1.41), time 70 x 2 s) beside the paper's ODS, OIS, params, GFLOPS, TT, FPS.
  assert (
    '| HED | - | 70 | 2 | 91.00 (1.41) | 92.00 (1.41) | 90.00 (1.41) | 2min 20s | 14.72M '
    '| 92.48 | -1.48 | 95.22 | -3.22 | 1h 42min | 14.72M | 80.46 | 31.80 |'
  ) in md
  assert '| HED† | 1 | 23 | 2 | 94.00 (1.41) |' in md
  # The dagger against the original: ours +3.00 points, the paper's +0.10; TT ratio 34/102.
  line = next(line for line in md.splitlines() if line.startswith('| HED | +3.00 |'))
  assert '| +0.10 | 0.33 | 0.33 |' in line
  with (tmp_path / 'report_compare.csv').open() as f:
    rows = list(csv.DictReader(f))
  assert [(r['key'], r['protocol']) for r in rows] == [('hed', 'strict'), ('hed_dagger', 'strict')]
  hed = rows[0]
  assert float(hed['ods_f1_mean']) == pytest.approx(91.0)
  assert float(hed['time_s_mean']) == pytest.approx(140.0)
  assert float(hed['params_mean']) == 14_716_171
  assert (hed['paper_ods_f1'], hed['paper_params'], hed['paper_gflops']) == (
    '92.48',
    '14720000',
    '80.46',
  )
  assert (hed['paper_time_s'], hed['paper_fps']) == ('6120', '31.8')
  assert (tmp_path / 'curves_table7_strict.png').stat().st_size > 10_000
  # Runs of Tables I-IV only: no comparison section, no report_compare.csv.
  results = Path(__file__).resolve().parents[1] / 'results' / 'gpu_table1.json'
  table1 = report_tables.markdown(records.load([results]), ['strict'])
  assert '## Table 1 ' in table1 and 'comparison models' not in table1
  # One renderer: both row kinds are tables of their columns, and one description of the
  # columns gives both the Markdown and the CSV table.
  assert report_tables.markdown_table([], report_tables.COMPARE_COLUMNS)[0].startswith(
    '| method | β |'
  )
  assert report_tables.markdown_table([], report_tables.TABLE_COLUMNS)[0].startswith(
    '| method | epochs |'
  )
  report_tables.csv_table(
    tmp_path / 'only.csv',
    report_stats.compare_results(runs, 'strict'),
    report_tables.COMPARE_COLUMNS,
  )
  assert (tmp_path / 'only.csv').read_text() == (tmp_path / 'report_compare.csv').read_text()


def test_one_variant_system_for_every_model():
  # configs/base.py VARIANTS shrinks every model alike, by the overrides its entry declares.
  from crackjax.configs import base

  smoke = compare.get_config('crackseg,smoke')
  assert smoke.model.width_scale == MODELS['crackseg'].small['smoke']['width_scale'] == 1 / 16
  assert tuple(smoke.model.blocks) == (1, 1, 1, 1) and smoke.steps_per_epoch == 3
  assert base.apply_variant(compare.get_config('crackseg'), 'smoke').to_dict() == smoke.to_dict()
  with pytest.raises(
    ValueError, match="'cpu_scale' for the hed model; known: \\['cpu', 'smoke'\\]"
  ):
    base.apply_variant(compare.get_config('hed'), 'cpu_scale')
