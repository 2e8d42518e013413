"""Issue 38's training / data / report faults: results of different settings in one report,
photos with an EXIF orientation, a damaged newest checkpoint under --mode=eval, a damaged
prepared dataset, an interrupted TFDS preparation."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / 'results' / 'gpu_table1.json'
CPU = REPO / 'results' / 'cpu_scale_table1.json'


# ------------------------------------------------------------------ 1: one setting per row


def _export(path: Path, runs: list[dict]) -> Path:
  from crackjax.paper import records

  records.export(runs, path)
  return path


def test_a_report_over_two_settings_of_one_row_refuses_naming_what_differs(tmp_path, capsys):
  from crackjax.paper import report

  out = tmp_path / 'report'
  with pytest.raises(SystemExit) as e:
    report.main([str(GPU), str(CPU), f'--out={out}'])
  line = str(e.value.code)
  # was: GPU seeds (widths 64..1024) and a CPU-scale seed (widths 8..128) in one mean
  assert line == (
    'python -m crackjax.paper.report: table1:wce_exp_0.75 mixes settings that one row would '
    f'average: seed(s) 0, 1, 2 of {GPU} (input_size null, steps_per_epoch 300, widths '
    f'[64, 128, 256, 512, 1024]) but seed(s) 0, 1, 2 of {CPU} (input_size [160, 240], '
    'steps_per_epoch 100, widths [8, 16, 32, 64, 128]); report each setting on its own (one '
    "command per setting's inputs, each with its own --out)."
  )
  assert not out.exists()  # nothing written


@pytest.mark.parametrize(
  'field, value', [('dtype', 'bfloat16'), ('model', 'hed'), ('steps_per_epoch', 7)]
)
def test_seeds_of_one_row_with_another_setting_are_never_averaged(tmp_path, field, value):
  from crackjax.paper import records

  runs = [r for r in records.load([GPU]) if r['group'] == 'table1:wce_xie']
  other = copy.deepcopy(runs[0])
  other['seed'], other['setting'][field] = 7, value
  a, b = _export(tmp_path / 'a.json', runs), _export(tmp_path / 'b.json', [other])
  with pytest.raises(ValueError, match=rf'table1:wce_xie mixes settings .*\({field} '):
    records.load([a, b])
  # Another setting for another row is fine: each row keeps its own seeds.
  other['group'] = 'table1:wce_log_0.9'
  records.load([a, _export(tmp_path / 'b.json', [other])])


def test_each_setting_line_names_its_rows_when_the_rows_differ(tmp_path):
  from crackjax.paper import records
  from crackjax.paper.report_tables import markdown

  runs = records.load([GPU])
  log = [r for r in records.load([CPU]) if r['group'] == 'table1:wce_log_0.9']
  md = markdown(runs + log, ['strict'])
  settings = [line for line in md.splitlines() if line.startswith('- Setting')]
  assert sorted(s.split(', batch')[0] for s in settings) == [
    '- Setting (rows table1:exp_0.75_a20_wj, table1:wce_exp_0.75, table1:wce_xie): widths '
    '[64, 128, 256, 512, 1024], training input full images, 300 steps/epoch',
    '- Setting (rows table1:wce_log_0.9): widths [8, 16, 32, 64, 128], training input '
    '[160, 240], 100 steps/epoch',
  ]
  assert '(rows' not in markdown(runs, ['strict'])  # one setting: one line, as before
