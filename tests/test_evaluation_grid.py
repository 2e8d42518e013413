"""Tests for the threshold grids (uniform part, 0.5, tails near 0 and 1) and F1 at 0.5."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from crackjax import evaluation
from crackjax.evaluation import (
  FIXED_THRESHOLD,
  HIGH_TAIL_THRESHOLDS,
  LOW_TAIL_THRESHOLDS,
  SUPPORTED_PROTOCOLS,
  aggregate,
  counts_per_threshold,
  evaluate,
  get_protocol,
  tolerance_counts,
)


def _logit(t):
  t = np.asarray(t, np.float64)
  return np.log(t) - np.log1p(-t)


# ---------------------------------------------------------------------------
# The grids
# ---------------------------------------------------------------------------


def test_tail_values():
  assert LOW_TAIL_THRESHOLDS == (0.003, 0.005, 0.007)
  assert HIGH_TAIL_THRESHOLDS == (
    0.993,
    0.995,
    0.997,
    0.998,
    0.999,
    0.9993,
    0.9995,
    0.9997,
    0.9998,
    0.9999,
    0.99999,
  )
  assert FIXED_THRESHOLD == 0.5
  # Between 0.003 and 0.01, and between 0.99 and 0.9999, neighbouring thresholds are at
  # most ~ln 2 apart in logit (0.694): finer than the uniform grid's own end steps
  # (0.01 -> 0.02, 0.98 -> 0.99: 0.703).
  end_step = _logit(0.02) - _logit(0.01)
  assert end_step == pytest.approx(_logit(0.99) - _logit(0.98))
  low = np.array([*LOW_TAIL_THRESHOLDS, 0.01])
  high = np.array([0.99] + [t for t in HIGH_TAIL_THRESHOLDS if t <= 0.9999])
  for part in (low, high):
    assert np.diff(_logit(part)).max() < 0.695 < end_step
  # The top tail stays clear of float32 saturation (spacing 6e-8 below 1).
  assert np.float32(HIGH_TAIL_THRESHOLDS[-1]) < np.nextafter(np.float32(1), np.float32(0))
  assert len(set(np.float32(HIGH_TAIL_THRESHOLDS))) == len(HIGH_TAIL_THRESHOLDS)


@pytest.mark.parametrize('name', SUPPORTED_PROTOCOLS)
@pytest.mark.parametrize('n', [1, 7, 20, 99, 100, 1000])
def test_grid_is_uniform_plus_half_plus_tails(name, n):
  spec = get_protocol(name)
  uniform = spec.uniform_thresholds(n)
  grid = spec.thresholds(n)
  assert grid.dtype == np.float64 and np.all(np.diff(grid) > 0)
  assert grid.min() >= 0 and grid.max() < 1
  # A superset of the uniform grid (exact values), of 0.5 and of the tails.
  want = set(uniform.tolist()) | {0.5} | set(LOW_TAIL_THRESHOLDS) | set(HIGH_TAIL_THRESHOLDS)
  assert set(grid.tolist()) == want
  # Without the tails: the uniform grid and 0.5, nothing else.
  assert set(spec.thresholds(n, tails=False).tolist()) == set(uniform.tolist()) | {0.5}


def test_default_grids():
  strict = get_protocol('strict')
  np.testing.assert_array_equal(strict.uniform_thresholds(100), np.arange(100) / 100)
  # The grids of earlier versions are exactly the tail-free grids of the defaults.
  np.testing.assert_array_equal(strict.thresholds(100, tails=False), np.arange(100) / 100)
  for name in ('tolerance', 'tolerance_thin_gt'):
    spec = get_protocol(name)
    np.testing.assert_array_equal(spec.thresholds(99, tails=False), np.arange(1, 100) / 100)
    assert len(spec.thresholds(99)) == 99 + 14
  grid = strict.thresholds(100)
  assert len(grid) == 100 + 14 and grid[0] == 0.0 and grid[1] == 0.003
  assert grid[-1] == 0.99999


def test_explicit_grid_is_checked():
  prob, gt = np.full((3, 3), 0.5), np.eye(3)
  for bad, match in [
    ([], 'non-empty'),
    ([[0.1, 0.2]], '1-D'),
    ([0.2, 0.1], 'strictly increasing'),
    ([0.1, 0.1], 'strictly increasing'),
    ([0.1, 1.5], r'\[0, 1\]'),
    ([np.nan], r'\[0, 1\]'),
  ]:
    with pytest.raises(ValueError, match=match):
      counts_per_threshold(prob, gt, thresholds=bad)
    with pytest.raises(ValueError, match=match):
      tolerance_counts(prob, gt, thresholds=bad)


def test_strict_counts_on_tails_equal_naive_loop():
  # Values on and next to every tail threshold, in float32 and float64.
  rng = np.random.default_rng(0)
  grid = get_protocol('strict').thresholds(100)
  for dtype in (np.float32, np.float64):
    t = np.concatenate([grid, [1.0]]).astype(dtype)
    vals = np.concatenate([t, np.nextafter(t, dtype(0)), np.nextafter(t, dtype(1))])
    vals = np.concatenate([vals, rng.random(300).astype(dtype)])
    prob = vals.reshape(1, -1)
    gt = rng.random(prob.shape) < 0.4
    tp, fp, fn = counts_per_threshold(prob, gt)
    for i, thr in enumerate(grid):
      pred = prob > dtype(thr)
      assert (tp[i], fp[i], fn[i]) == (
        np.sum(pred & gt),
        np.sum(pred & ~gt),
        np.sum(~pred & gt),
      ), (dtype, thr)


# ---------------------------------------------------------------------------
# Saturated maps: the tails lift the cap of the uniform grid
# ---------------------------------------------------------------------------


def _saturated(h, w, seed=0):
  """Crack probabilities in [0.995, 0.99995]; background below, a few hard ones near 0.99.

  Cracks are 1-px horizontal lines 20 px apart. 3% of the background, away from the
  cracks (>= 6 px), scores in [0.99, 0.996]: at the old top threshold 0.99 all of them
  are false positives; from 0.996 on, none, while most crack pixels remain.
  """
  rng = np.random.default_rng(seed)
  gt = np.zeros((h, w), bool)
  gt[10::20, 8:-8] = True
  prob = rng.uniform(0.0, 0.9, (h, w))
  prob[gt] = rng.uniform(0.995, 0.99995, gt.sum())
  dist = np.abs((np.arange(h) - 10 + 10) % 20 - 10)[:, None] * np.ones((1, w))
  hard = (rng.random((h, w)) < 0.03) & (dist >= 6)
  prob[hard] = rng.uniform(0.99, 0.996, hard.sum())
  return prob.astype(np.float32), gt


@pytest.mark.parametrize(
  ('protocol', 'shape'),
  [('strict', (64, 96)), ('tolerance', (120, 160)), ('tolerance_thin_gt', (120, 160))],
)
def test_saturated_map_best_threshold_is_interior(protocol, shape):
  prob, gt = _saturated(*shape)
  new = evaluate([prob], [gt], protocol=protocol)
  old = evaluate([prob], [gt], protocol=protocol, tail_thresholds=False)
  grid = new['curve']['thresholds']
  f1 = new['curve']['f1']
  i = grid.index(new['ods_grid']['threshold'])
  # An interior maximum inside the high tail, not the grid's last point.
  assert 0.99 < grid[i] < grid[-1]
  assert f1[i] > f1[i + 1] and f1[i] > f1[i - 1]
  # The uniform grid is capped at 0.99, where every hard negative is predicted.
  assert old['ods_grid']['threshold'] == 0.99
  assert new['ods']['f1'] > old['ods']['f1'] + 0.05
  assert new['ods_grid']['f1'] > old['ods_grid']['f1'] + 0.05
  assert new['ois']['f1'] >= old['ois']['f1']
  # The uniform points are unchanged (a superset grid).
  for t, f in zip(old['curve']['thresholds'], old['curve']['f1'], strict=True):
    assert f1[grid.index(t)] == f
  assert new['fixed'] == old['fixed']


def test_monotone_rescaling_keeps_ods_with_tails():
  # Multiplying the odds by m (what up-weighting the crack class does, roughly; Xie's
  # weighting on CrackForest is m ~ 60) moves the best threshold, here 0.69, to ~0.99 and
  # beyond. With the tails ODS stays within the grid's resolution of the original;
  # without, the uniform grid caps it at 0.99.
  rng = np.random.default_rng(1)
  gt = np.zeros((256, 256), bool)
  gt[8::16, 4:-4] = True
  logit = np.where(gt, 1.0, -1.5) + rng.normal(0, 1.2, gt.shape)
  base = evaluate([1 / (1 + np.exp(-logit))], [gt])['ods']
  assert 0.6 < base['threshold'] < 0.8
  for m in (500, 2000):
    shifted = 1 / (1 + np.exp(-(logit + math.log(m))))
    with_tails = evaluate([shifted], [gt])['ods']
    without = evaluate([shifted], [gt], tail_thresholds=False)['ods']
    assert with_tails['f1'] == pytest.approx(base['f1'], abs=0.01)
    assert 0.99 < with_tails['threshold'] < 0.9999
    assert without['threshold'] == 0.99 and without['f1'] < base['f1'] - 0.3


# ---------------------------------------------------------------------------
# F1 at the fixed threshold 0.5
# ---------------------------------------------------------------------------


@pytest.mark.parametrize('n', [7, 100])
def test_fixed_strict_equals_deployed_rule(n):
  rng = np.random.default_rng(3)
  probs = [rng.random((20, 30)).astype(np.float32) for _ in range(3)]
  probs[0][0, :5] = 0.5  # exactly 0.5 is not crack (prob > 0.5)
  gts = [rng.random((20, 30)) < 0.3 for _ in range(3)]
  r = evaluate(probs, gts, num_thresholds=n)
  assert 0.5 in r['curve']['thresholds']
  tp = sum(np.sum((p > 0.5) & g) for p, g in zip(probs, gts, strict=True))
  fp = sum(np.sum((p > 0.5) & ~g) for p, g in zip(probs, gts, strict=True))
  fn = sum(np.sum((p <= 0.5) & g) for p, g in zip(probs, gts, strict=True))
  p, rec = tp / (tp + fp), tp / (tp + fn)
  assert r['fixed'] == pytest.approx(
    {'threshold': 0.5, 'precision': p, 'recall': rec, 'f1': 2 * p * rec / (p + rec)}
  )
  assert list(r['fixed']) == ['threshold', 'precision', 'recall', 'f1']
  for j, im in enumerate(r['per_image']):
    t = np.sum((probs[j] > 0.5) & gts[j])
    f1 = 2 * t / (np.sum(probs[j] > 0.5) + np.sum(gts[j]))
    assert im['fixed_f1'] == pytest.approx(f1)
  json.dumps(r, allow_nan=False)


def test_fixed_tolerance_is_the_grid_point():
  # The BSDS ODS is interpolated; 'fixed' is the grid point 0.5 itself (prob >= 0.5).
  h, w = 240, 320
  gt = np.zeros((h, w), bool)
  gt[120, 40:280] = True
  prob = np.zeros((h, w), np.float32)
  prob[120, 40:160] = 0.5  # predicted at 0.5 (inclusive)
  prob[121, 160:280] = 0.3  # not predicted at 0.5
  prob[30, 10:70] = 0.7  # false positives far away
  for protocol in ('tolerance', 'tolerance_thin_gt'):
    r = evaluate([prob], [gt], protocol=protocol)
    c = tolerance_counts(prob, gt, thresholds=[0.5], thin_gt=protocol.endswith('thin_gt'))
    p = c.matched_pred[0] / c.num_pred[0]
    rec = c.matched_gt[0] / c.num_gt[0]
    assert r['fixed'] == pytest.approx(
      {'threshold': 0.5, 'precision': p, 'recall': rec, 'f1': 2 * p * rec / (p + rec)}
    )
    assert r['fixed']['precision'] == pytest.approx(120 / 180)
    i = r['curve']['thresholds'].index(0.5)
    assert r['fixed']['f1'] == r['curve']['f1'][i]


# ---------------------------------------------------------------------------
# BSDS aggregation on a non-uniform grid
# ---------------------------------------------------------------------------


def test_bsds_max_f_on_non_uniform_grid():
  # Three thresholds, unevenly spaced; the best F lies on the short last segment.
  thresholds = np.array([0.5, 0.99, 0.9995])
  precision = np.array([0.2, 0.0, 0.9])
  recall = np.array([0.9, 1.0, 0.0])
  t, p, r, f = aggregate.bsds_max_f(thresholds, precision, recall)
  d = np.linspace(0, 1, 100)
  f_seg = 2 * (0.9 * d) * (1 - d) / (0.9 * d + 1 - d)
  best = d[np.argmax(f_seg)]
  assert f == pytest.approx(f_seg.max())
  assert (t, p, r) == pytest.approx((0.99 + 0.0095 * best, 0.9 * best, 1 - best))
  assert 0.99 < t < 0.9995


def test_tails_extend_the_pr_curve():
  # AP is an area over the recall range the grid reaches; the high tail reaches the low
  # recalls of a saturated map that the uniform grid never sees.
  prob, gt = _saturated(64, 96)
  for protocol in ('strict',):
    new = evaluate([prob], [gt], protocol=protocol)
    old = evaluate([prob], [gt], protocol=protocol, tail_thresholds=False)
    assert min(new['curve']['recall']) < min(old['curve']['recall'])
    assert new['ap'] > old['ap']


def test_package_exports_grid_constants():
  for name in ('FIXED_THRESHOLD', 'LOW_TAIL_THRESHOLDS', 'HIGH_TAIL_THRESHOLDS'):
    assert name in evaluation.__all__
