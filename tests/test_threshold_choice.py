"""How a run's threshold is chosen (config.eval.threshold_over): the pooled ODS, or a mixture's
datasets alike (crackjax.evaluation.threshold_choice), in threshold.json and read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from crackjax import evaluation
from crackjax.configs import base
from crackjax.evaluation import threshold_choice
from crackjax.experiment import restored, validation
from crackjax.runs import outputs
from crackjax.trainer import eval_records


def _two_datasets():
  """A 'dense' set (32 crack pixels at 0.9, 16 background pixels at 0.6) and a 'thin' one
  (2 crack pixels at 0.4). Strict F1 (crack where p > t), by hand:

  dense: 0.8 for t < 0.6, 1.0 for 0.6 <= t < 0.9, 0 above; thin: 1.0 for t < 0.4, 0 above.
  Pooled: 68/84 below 0.4, 64/82 below 0.6, 64/66 = 0.97 in [0.6, 0.9): the dense set chooses.
  Datasets alike: mean 0.9 below 0.4 (0.4 and 0.5 above): the highest such grid point, 0.39.
  """
  dense_gt = np.zeros((8, 8), bool)
  dense_gt[:4] = True
  dense_p = np.where(dense_gt, 0.9, 0.0).astype(np.float32)
  dense_p[4:6] = 0.6
  thin_gt = np.zeros((8, 8), bool)
  thin_gt[0, :2] = True
  thin_p = np.where(thin_gt, 0.4, 0.0).astype(np.float32)
  names = ['dense/a', 'thin/b']
  probs, gts = [dense_p, thin_p], [dense_gt, thin_gt]

  def results_of(rows):
    chosen = [probs[i] for i in rows], [gts[i] for i in rows]
    return {'strict': evaluation.protocol_result(*chosen, protocol='strict')}

  pooled = results_of([0, 1])
  record = eval_records.evaluation_record(
    lambda step: 1, 'mixture', (10, 0), 'valid', names, pooled, eval_seconds=0.0
  )
  return eval_records.with_members(record, eval_records.by_member(names, results_of))


def test_datasets_alike_against_pooled_by_hand():
  record = _two_datasets()
  pooled = record.results['strict'].ods
  assert 0.6 <= pooled.threshold < 0.9 and pooled.f1 == pytest.approx(64 / 66)
  t, f1 = threshold_choice.mean_over_datasets(record, 'strict')
  assert (t, f1) == (pytest.approx(0.39), pytest.approx(0.9))
  assert threshold_choice.chosen_threshold(record, 'strict', 'datasets') == (
    pytest.approx(0.39),
    'mean over the 2 datasets of their F1 at one threshold, on the valid split, strict protocol',
  )
  assert threshold_choice.chosen_threshold(record, 'strict') == (
    pooled.threshold,
    'ODS F1 on the valid split, strict protocol',
  )
  # Not a mixture's record: the datasets rule is the pooled one.
  single = record.__class__(**{**vars(record), 'datasets': None, 'selection': None})
  assert threshold_choice.mean_over_datasets(single, 'strict') is None
  assert threshold_choice.chosen_threshold(single, 'strict', 'datasets')[0] == pooled.threshold
  with pytest.raises(ValueError, match=r"threshold_over='mean' must be one of \['pooled'"):
    threshold_choice.chosen_threshold(record, 'strict', 'mean')


def test_threshold_json_and_the_epoch_record_follow_the_runs_rule(tmp_path):
  record = _two_datasets()
  results = record.results
  for over, expected in (('pooled', results['strict'].ods.threshold), ('datasets', 0.39)):
    run = tmp_path / over
    run.mkdir()
    config = base.get_config()
    config.eval.threshold_over = over
    (run / 'config.json').write_text(config.to_json_best_effort())
    written = eval_records.write_threshold(run, results, record, over=over)
    saved = json.loads((run / 'threshold.json').read_text())
    assert written == saved['threshold'] == pytest.approx(expected)
    # The threshold of an epoch record (an export of an earlier epoch): the same rule.
    (run / 'epoch_001.json').write_text(outputs.dumps(record.to_json()))
    threshold, source = restored.epoch_threshold(run, 10)
    assert threshold == pytest.approx(expected)
    assert source.startswith(saved['chosen_by']) and source.endswith('step 10 (epoch_001.json)')
    assert restored.threshold_over(run) == over
  # A run recorded before the field: pooled.
  assert restored.threshold_over(tmp_path / 'nowhere') == 'pooled'


def test_a_mistyped_rule_is_named_with_the_config():
  config = base.get_config()
  config.eval.threshold_over = 'per_set'
  with pytest.raises(validation.ConfigError) as excinfo:
    validation.check_config(config, training=False)
  assert "config.eval.threshold_over='per_set' must be one of" in str(excinfo.value)
