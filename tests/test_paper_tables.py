"""crackjax/paper/tables.py and configs/table1.py ... table4.py against the paper's Tables I-IV.

The expected hyper-parameters below are read off the paper's LaTeX by hand, not copied from
the data module.
"""

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from crackjax.experiment import validation
from crackjax.paper import table_rules
from crackjax.paper import tables as paper_tables

PAPER = Path(__file__).resolve().parents[2] / 'shared' / 'paper' / '000_8dd8ac6a7f50eb79.txt'
TABLE_MODULES = {t: importlib.import_module(f'crackjax.configs.table{t}') for t in (1, 2, 3, 4)}

TRAINABLE = [(t, r.key) for t, rows in paper_tables.TABLES.items() for r in rows if not r.reference]


def test_row_counts():
  # With the RSF reference row; the 16/13/12/11 are the trainable rows.
  assert {t: len(rows) for t, rows in paper_tables.TABLES.items()} == {1: 17, 2: 14, 3: 13, 4: 12}
  trainable = {t: sum(not r.reference for r in rows) for t, rows in paper_tables.TABLES.items()}
  assert trainable == {1: 16, 2: 13, 3: 12, 4: 11}
  for t, rows in paper_tables.TABLES.items():
    assert [r.key for r in rows if r.reference] == ['rsf']
    assert all(r.table == t for r in rows)


def test_keys_are_unique_lower_case_and_carry_the_epochs():
  for rows in paper_tables.TABLES.values():
    keys = [r.key for r in rows]
    assert len(set(keys)) == len(keys)
    for r in rows:
      assert re.fullmatch(r'[a-z0-9_.]+', r.key), r.key
      if not r.reference:
        assert r.key.endswith(f'_e{r.epochs}'), r.key


@pytest.mark.parametrize(('table', 'key'), TRAINABLE)
def test_every_trainable_row_builds_a_valid_config(table, key):
  row = paper_tables.rows_by_key(table)[key]
  settings = paper_tables.SETTINGS[table]
  c = TABLE_MODULES[table].get_config(key)
  validation.check_config(c)
  assert c.data.name == settings.dataset
  assert c.model.widths == settings.widths
  assert c.steps_per_epoch == settings.steps_per_epoch
  assert c.batch_size == settings.batch_size
  assert c.data.input_size == settings.input_size
  assert c.data.noise_std == settings.noise_std
  assert c.loss.name == 'holistic'
  assert c.loss.weighting == row.weighting
  assert (c.loss.a, c.loss.b, c.num_epochs) == (row.a, row.b, row.epochs)
  if row.beta is not None:
    assert c.loss.beta == row.beta
  if row.gamma is not None:
    assert c.loss.gamma == row.gamma


@pytest.mark.parametrize('table', [1, 2, 3, 4])
def test_variants_apply(table):
  key = next(k for t, k in TRAINABLE if t == table)
  smoke = TABLE_MODULES[table].get_config(f'{key},smoke')
  validation.check_config(smoke)
  assert smoke.model.widths == (4, 8, 16, 32, 64) and smoke.steps_per_epoch == 3
  cpu = TABLE_MODULES[table].get_config(f'{key},cpu')
  assert cpu.model.widths == (16, 32, 64, 128, 256) and cpu.num_epochs == 2
  assert cpu.data.name == paper_tables.SETTINGS[table].dataset
  with pytest.raises(ValueError, match='Unknown config argument'):
    TABLE_MODULES[table].get_config(f'{key},gpu')


# (table, key): weighting, beta, gamma, a, b, laplace, epochs, time, ODS F1, OIS F1 -- read off
# the LaTeX of Tables I-IV (and the captions for the `_wj` rows).
SAMPLES = {
  (1, 'exp_0.75_a0.5_wj_e10'): ('exp', 0.75, 1, 0.5, 1, False, 10, '7min 54s', 86.42, 87.58),
  (1, 'exp_0.75_a20_wj_e5'): ('exp', 0.75, 1, 20, 1, False, 5, '3min 39s', 85.51, 87.12),
  (1, 'wce_power_0.85_g1_3_e10'): ('power', 0.85, 1 / 3, 1, 0, False, 10, '7min 54s', 85.47, 87.11),
  (1, 'wce_xie_e70'): ('xie', None, None, 1, 0, False, 70, '54min 54s', 85.04, 86.14),
  (1, 'wce_log_0.9_e20'): ('log', 0.9, None, 1, 0, False, 20, '15min 44s', 86.24, 87.58),
  (2, 'wce_xie_ls_e50'): ('xie', None, None, 1, 0, True, 50, '15min 5s', 86.62, 91.18),
  (2, 'wce_log_1_ls_e7'): ('log', 1, None, 1, 0, True, 7, '2min 11s', 86.58, 90.48),
  (2, 'wce_exp_1_e15'): ('exp', 1, 1, 1, 0, False, 15, '4min 35s', 87.74, 92.08),
  (2, 'exp_1_a10_wj_e4'): ('exp', 1, 1, 10, 1, False, 4, '1min 17s', 86.94, 91.45),
  (3, 'wce_power_0.5_g1_2_e5'): ('power', 0.5, 0.5, 1, 0, False, 5, '6min 20s', 89.13, 94.24),
  (3, 'exp_1_a10_wj_e3'): ('exp', 1, 1, 10, 1, False, 3, '3min 50s', 89.57, 93.93),
  (3, 'wce_xie_e3'): ('xie', None, None, 1, 0, False, 3, '3min 50s', 75.46, 89.63),
  (4, 'power_0.5_g1_2_a2_wj_e5'): ('power', 0.5, 0.5, 2, 1, False, 5, '4min', 49.40, 50.37),
  (4, 'wce_exp_0.75_e15'): ('exp', 0.75, 1, 1, 0, False, 15, '12min', 50.85, 50.52),
  (4, 'wce_xie_e30'): ('xie', None, None, 1, 0, False, 30, '24min', 49.94, 49.28),
}


@pytest.mark.parametrize(('table', 'key'), sorted(SAMPLES))
def test_sample_rows_match_the_paper(table, key):
  weighting, beta, gamma, a, b, laplace, epochs, time, ods_f1, ois_f1 = SAMPLES[table, key]
  r = paper_tables.rows_by_key(table)[key]
  assert r.weighting == weighting
  assert r.beta == (None if beta is None else pytest.approx(beta))
  assert r.gamma == (None if gamma is None else pytest.approx(gamma))
  assert (r.a, r.b, r.laplace, r.epochs, r.time) == (a, b, laplace, epochs, time)
  assert r.base == 10
  assert (r.ods.f1.mean, r.ois.f1.mean) == (ods_f1, ois_f1)
  c = TABLE_MODULES[table].get_config(key)
  assert (c.loss.weighting, c.loss.a, c.loss.b, c.num_epochs) == (weighting, a, b, epochs)
  if beta is not None:
    assert c.loss.beta == pytest.approx(beta)


def test_sample_figures_with_std():
  r = paper_tables.rows_by_key(1)['wce_exp_0.75_e20']
  assert r.ods.p == table_rules.Score(96.22, 0.73)
  assert r.ods.r == table_rules.Score(78.34, 1.39)
  assert r.ois.f1 == table_rules.Score(87.62, 0.48)
  r = paper_tables.rows_by_key(3)['wce_power_0.5_g1_2_e5']
  assert r.ois.p == table_rules.Score(92.00, 1.82)  # printed '92.00(1.82)', no space
  rsf = paper_tables.rows_by_key(2)['rsf']
  assert (rsf.ods.f1, rsf.ois.r) == (
    table_rules.Score(86.9, None),
    table_rules.Score(95.46, None),
  )


def test_table_settings_match_section_iv():
  s = paper_tables.SETTINGS
  assert [s[t].dataset for t in (1, 2, 3, 4)] == ['crackforest', 'aiglern', 'crack360', 'bjn260']
  assert s[2].widths == (32, 64, 128, 256, 512) and s[2].steps_per_epoch == 200
  assert s[2].input_size == (448, 304) and s[2].noise_std == pytest.approx(0.1)
  assert s[3].input_size == (512, 512)
  for t in (1, 3, 4):
    assert s[t].widths == (64, 128, 256, 512, 1024) and s[t].steps_per_epoch == 300
    assert s[t].noise_std == 0
  assert all(s[t].batch_size == 2 and s[t].learning_rate == 3e-4 for t in s)


def test_figures_are_percentages_with_std_where_printed():
  for rows in paper_tables.TABLES.values():
    for r in rows:
      for score in (r.ods.p, r.ods.r, r.ods.f1, r.ois.p, r.ois.r, r.ois.f1):
        assert 0 < score.mean <= 100, r
        if r.reference:
          assert score.std is None, r
        else:
          assert score.std is not None and 0 <= score.std < 10, r
      if r.reference:
        assert (r.epochs, r.time, r.time_s, r.training_group) == (None, None, None, None)
      else:
        assert r.time_s > 0


def test_time_s():
  rows = paper_tables.rows_by_key(1)
  assert rows['wce_xie_e70'].time_s == 54 * 60 + 54
  assert paper_tables.rows_by_key(4)['wce_xie_e30'].time_s == 24 * 60


def _loss_fields(r):
  d = dataclasses.asdict(r)
  for field in ('key', 'epochs', 'time', 'ods', 'ois', 'note'):
    d.pop(field)
  return d


def test_training_groups_differ_only_in_epochs():
  for t, rows in paper_tables.TABLES.items():
    groups = paper_tables.training_groups(t)
    assert sum(len(g) for g in groups.values()) == sum(not r.reference for r in rows)
    for name, group in groups.items():
      assert all(r.training_group == name for r in group)
      assert len({_loss_fields(r)['name'] for r in group}) == 1
      assert all(_loss_fields(r) == _loss_fields(group[0]) for r in group)
      epochs = [r.epochs for r in group]
      assert epochs == sorted(set(epochs), reverse=True)  # longest first, no duplicates
    # Conversely, rows with the same loss are in one group.
    by_loss = {}
    for r in rows:
      if not r.reference:
        by_loss.setdefault(repr(_loss_fields(r)), set()).add(r.training_group)
    assert all(len(g) == 1 for g in by_loss.values())
  groups = paper_tables.training_groups(1)
  assert [r.epochs for r in groups['table1:wce_xie']] == [70, 20, 10, 5]
  assert [r.epochs for r in groups['table1:wce_exp_0.75']] == [20, 10, 5]
  assert len(paper_tables.training_groups(3)['table3:exp_1_a10_wj']) == 2
  # Different a: different runs.
  assert len({r.training_group for r in paper_tables.TABLES[1] if r.b == 1}) == 3


@pytest.mark.parametrize('table', [1, 2, 3, 4])
def test_unknown_key_and_reference_row_are_rejected(table):
  get_config = TABLE_MODULES[table].get_config
  with pytest.raises(ValueError, match='Unknown row') as e:
    get_config('no_such_row')
  assert 'wce_xie_' in str(e.value)
  with pytest.raises(ValueError, match='Unknown row'):
    get_config()
  with pytest.raises(ValueError, match='reference row, not trainable'):
    get_config('rsf')
  with pytest.raises(ValueError, match='reference row'):
    get_config('rsf,cpu')


@pytest.mark.skipif(not PAPER.exists(), reason='paper source not in ../shared/paper')
def test_all_figures_match_the_latex():
  lines = PAPER.read_text().splitlines()
  starts = [i for i, line in enumerate(lines) if 'average results {with 5 runs}' in line]
  assert len(starts) == 4
  for t, start in zip((1, 2, 3, 4), starts, strict=True):
    end = next(i for i in range(start, len(lines)) if r'\end{tabular' in lines[i])
    printed = []
    for line in lines[start:end]:
      cells = re.sub(r'\\textbf\{([^}]*)\}', r'\1', line).replace('{', '').replace('}', '')
      cells = [c.strip() for c in cells.replace('\\\\', '').split('&')]
      if len(cells) >= 6 and all(
        re.fullmatch(r'\d+\.\d+\s*(\(\d+\.\d+\))?', c) for c in cells[-6:]
      ):
        printed.append([re.match(r'\d+\.\d+', c).group() for c in cells[-6:]])
    ours = [
      [f'{s.mean}' for s in (r.ods.p, r.ods.r, r.ods.f1, r.ois.p, r.ois.r, r.ois.f1)]
      for r in paper_tables.TABLES[t]
    ]
    assert [[float(v) for v in row] for row in printed] == [
      [float(v) for v in row] for row in ours
    ], t
