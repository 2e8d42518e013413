"""A degenerate best threshold (issue 56): nothing found, or every pixel crack, is named and
never stored as the run's threshold without config.eval.store_degenerate_threshold."""

from __future__ import annotations

import json

import numpy as np

from crackjax.evaluation import aggregate
from crackjax.evaluation.result import degenerate_threshold
from crackjax.trainer import eval_records


def _record(result):
  """The evaluation record `write_threshold` reads the dataset, split and step of."""
  return eval_records.evaluation_record(
    lambda step: 1, 'crack_folder', (300, 0), 'test', ['a', 'b', 'c'], {'strict': result},
    eval_seconds=0.0,
  )  # fmt: skip


def _gts(n=3, size=(32, 40)):
  rng = np.random.default_rng(0)
  gts = []
  for _ in range(n):
    gt = np.zeros(size, bool)
    gt[rng.integers(4, 28), :] = True  # one crack row
    gts.append(gt)
  return gts


def _result(probs, gts):
  return aggregate.protocol_result(probs, gts, protocol='strict')


def test_a_model_that_finds_nothing_is_named(tmp_path, capsys):
  gts = _gts()
  rng = np.random.default_rng(1)
  # Maps unrelated to the cracks: the best F1 is reached by calling every pixel crack.
  blind = [rng.random(g.shape).astype(np.float32) * 0.01 for g in gts]
  r = _result(blind, gts)
  why = degenerate_threshold(r)
  assert why and 'every pixel crack' in why
  threshold = eval_records.write_threshold(tmp_path, {'strict': r}, _record(r))
  assert threshold == 0.5 and not (tmp_path / 'threshold.json').exists()
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and 'crack_folder test, strict: the best threshold calls every' in err
  assert 'store_degenerate_threshold=True' in err
  # With the flag it is stored as before.
  eval_records.write_threshold(tmp_path, {'strict': r}, _record(r), store_degenerate=True)
  assert json.loads((tmp_path / 'threshold.json').read_text())['threshold'] == r.ods.threshold
  # Zero maps: no threshold finds anything.
  zero = _result([np.zeros(g.shape, np.float32) for g in gts], gts)
  assert 'no threshold finds a crack pixel' in degenerate_threshold(zero)


def test_a_useful_threshold_is_stored(tmp_path, capsys):
  gts = _gts()
  good = [np.where(g, 0.8, 0.1).astype(np.float32) for g in gts]
  r = _result(good, gts)
  assert degenerate_threshold(r) is None
  threshold = eval_records.write_threshold(tmp_path, {'strict': r}, _record(r))
  assert 0.1 <= threshold < 0.8
  assert json.loads((tmp_path / 'threshold.json').read_text())['threshold'] == threshold
  assert capsys.readouterr().err == ''


def test_every_reader_of_a_runs_threshold_leaves_a_degenerate_one_out(tmp_path):
  """Issue 78 item 5: crackjax-predict --workdir (`restored.run_threshold`) and crackjax-export
  (`model_export.step_threshold`) read the epoch record's threshold by the rule threshold.json
  is written by: a degenerate one gives the fallback 0.5, said, unless the run stores them."""
  from types import SimpleNamespace

  from crackjax.deploy import model_export
  from crackjax.experiment import restored

  gts = _gts()
  rng = np.random.default_rng(1)
  r = _result([rng.random(g.shape).astype(np.float32) * 0.01 for g in gts], gts)
  assert degenerate_threshold(r) and r.ods.threshold != 0.5
  eval_records.write_epoch_record(tmp_path, _record(r), steps_per_epoch=300)
  (tmp_path / 'config.json').write_text(json.dumps({'eval': {'threshold_over': 'pooled'}}))
  threshold, source = restored.run_threshold(tmp_path, 300)
  assert threshold == 0.5
  assert 'epoch_001.json' in source and 'degenerate' in source and 'every pixel crack' in source
  run = SimpleNamespace(step=300, threshold=threshold, threshold_source=source)
  assert model_export.step_threshold(run, tmp_path) == (0.5, source)
  # A run that stores degenerate thresholds takes it, as its threshold.json would.
  (tmp_path / 'config.json').write_text(json.dumps({'eval': {'store_degenerate_threshold': True}}))
  assert restored.run_threshold(tmp_path, 300)[0] == r.ods.threshold
  assert model_export.step_threshold(run, tmp_path)[0] == r.ods.threshold
