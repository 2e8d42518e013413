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


def test_photo_threshold_blends_the_stored_one_with_the_photos_otsu():
  # A map of two values: Otsu splits them (its threshold sits just above the lower value).
  probs = np.full((6, 6), 0.1, np.float32)
  probs[:, :2] = 0.9
  otsu = threshold_choice.photo_threshold(probs, 0.8, 0.0)
  assert 0.1 <= otsu < 0.9
  assert ((probs > otsu) == (probs == np.float32(0.9))).all()
  assert threshold_choice.photo_threshold(probs, 0.8, 1.0) == 0.8
  assert threshold_choice.photo_threshold(probs, 0.8, 0.5) == pytest.approx(0.4 + otsu / 2)
  # A map of one value has no histogram to split: the stored threshold.
  assert threshold_choice.photo_threshold(np.full((4, 4), 0.3), 0.8, 0.0) == 0.8
  with pytest.raises(ValueError, match=r'weight must be in \[0, 1\], got 1.5'):
    threshold_choice.photo_threshold(probs, 0.8, 1.5)


def test_photo_threshold_counts_by_hand():
  # Photo a: cracks at 0.6 (two columns), background 0.1: the stored 0.8 misses them, the
  # photo's own Otsu threshold finds them. Photo b: a crack at 0.95, a stain at 0.5 (one
  # column each), background 0: the stored threshold keeps the stain out, Otsu lets it in.
  a = np.full((4, 4), 0.1, np.float32)
  a[:, :2] = 0.6
  a_gt = a > 0.5
  b = np.zeros((4, 4), np.float32)
  b[:, 0], b[:, 1] = 0.95, 0.5
  b_gt = b > 0.9
  images = {1: a, 2: b}
  pairs = [(1, a_gt), (2, b_gt)]
  out = threshold_choice.photo_threshold_counts(images.__getitem__, pairs, 0.8, (0.0, 1.0))
  assert out['photos'] == 2 and out['weights'] == [0.0, 1.0]
  # Weight 1 (stored 0.8): a: 8 cracks missed; b: 4 found. TP 4, FP 0, FN 8.
  # Weight 0 (each photo's Otsu): a: 8 found; b: Otsu between 0 and 0.5, so 4 + 4 stain pixels.
  assert (out['tp'], out['fp'], out['fn']) == ([12, 4], [4, 0], [0, 8])
  assert out['f1'] == pytest.approx([24 / 28, 8 / 16])
