"""bench/threshold_rules.py: the mask rules a released model's threshold is compared with."""

from __future__ import annotations

import numpy as np
import pytest

from tests import fixtures


@pytest.fixture(scope='module')
def rules():
  return fixtures.load_bench('threshold_rules')


def test_rules_on_a_map_whose_best_threshold_is_not_the_stored_one(rules):
  gt = np.zeros((32, 32), np.float32)
  gt[10:14, :] = 1
  # Cracks at 0.4, background at 0.1: any threshold in [0.1, 0.4) is perfect, 0.93 finds none.
  prob = np.where(gt > 0, 0.4, 0.1).astype(np.float32)
  scores = rules.rule_scores([prob], [gt], stored=0.93)
  assert scores['stored']['f1'] == 0.0
  assert scores['0.5']['f1'] == 0.0
  assert scores['ods']['f1'] == pytest.approx(1.0)
  # Otsu's threshold (0.1-0.4) lies below its floor, half the stored 0.93: the floor holds and
  # nothing is crack; under a stored 0.3 (floor 0.15) Otsu separates the two levels.
  assert scores['otsu']['f1'] == 0.0
  assert rules.rule_scores([prob], [gt], stored=0.3)['otsu']['f1'] == pytest.approx(1.0)


def test_otsu_masks_leave_a_flat_map_empty(rules):
  flat = np.full((8, 8), 0.2, np.float32)
  (mask,) = rules.otsu_masks([flat], floor=0.4)
  assert not mask.any()


def test_mean_rule_weighs_every_set_alike(rules):
  # Set a: 64 crack pixels at 0.3 over a background of 0.1; set b: 512 at 0.8 over 0.6. A
  # threshold in [0.1, 0.3) finds a's cracks and all of b (b's F1 2/3); one in [0.6, 0.8) is
  # perfect on b and finds nothing of a. Pooled, b's pixels win (F1 0.94 against 0.44); the
  # mean rule serves both: mean F1 (1 + 2/3) / 2 against (0 + 1) / 2.
  def one(lo, hi, rows):
    gt = np.zeros((32, 32), np.float32)
    gt[:rows] = 1
    return [np.where(gt > 0, hi, lo).astype(np.float32)], [gt]

  a, b = one(0.1, 0.3, 2), one(0.6, 0.8, 16)
  chosen = rules.mean_rule_threshold([a, b])
  assert 0.1 <= chosen['threshold'] < 0.3
  assert chosen['mean_f1'] == pytest.approx((1 + 2 / 3) / 2)
  from crackjax import evaluation

  pooled = evaluation.evaluate(a[0] + b[0], a[1] + b[1], protocol='strict')['ods']
  assert 0.6 <= pooled['threshold'] < 0.8 and pooled['f1'] == pytest.approx(2 * 512 / (512 + 576))
