"""Tests for crackjax.evaluation: the strict counts, ODS/OIS/AP conventions, edge cases and input
checks (the tolerance protocols: tests/test_tolerance.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from crackjax import evaluation
from crackjax.evaluation import (
  PROTOCOLS,
  aggregate,
  counts_per_threshold,
  evaluate,
  get_protocol,
)

N = 100
# The default grids: the uniform part (strict i/100, i = 0..99; tolerance i/100, i = 1..99),
# 0.5 and the tail thresholds near 0 and 1.
STRICT_GRID = get_protocol('strict').thresholds(N)
TOP = 0.99999  # the highest threshold of every default grid
BOTTOM = 0.003  # the lowest nonzero one


def at(grid, t):
  """Index of the nominal threshold ``t`` in ``grid``."""
  (i,) = np.flatnonzero(np.abs(np.asarray(grid) - t) < 1e-12)
  return int(i)


def naive_counts(prob, gt, thresholds=STRICT_GRID):
  """Reference: the obvious per-threshold loop (``prob > t`` with t in prob's dtype)."""
  prob = np.asarray(prob)
  gt = np.asarray(gt).astype(bool).reshape(prob.shape)
  tp, fp, fn = [], [], []
  for t in thresholds:
    pred = prob > prob.dtype.type(t)
    tp.append(np.count_nonzero(pred & gt))
    fp.append(np.count_nonzero(pred & ~gt))
    fn.append(np.count_nonzero(~pred & gt))
  return np.array(tp), np.array(fp), np.array(fn)


def hand_example():
  """4x4 image, 4 crack pixels on the diagonal.

  crack probs:      0.9, 0.7, 0.5, 0.2
  non-crack probs:  0.6, 0.3, all others 0.

  By hand (pred = prob > t):
    t in [0.00, 0.20): TP 4 FP 2 FN 0 -> P 2/3, R 1,   F1 8/10 = 0.8
    t in [0.20, 0.30): TP 3 FP 2 FN 1 -> P 3/5, R 3/4, F1 6/9
    t in [0.30, 0.50): TP 3 FP 1 FN 1 -> P 3/4, R 3/4, F1 6/8
    t in [0.50, 0.60): TP 2 FP 1 FN 2 -> P 2/3, R 1/2, F1 4/7   (0.5 > 0.5 is False)
    t in [0.60, 0.70): TP 2 FP 0 FN 2 -> P 1,   R 1/2, F1 4/6
    t in [0.70, 0.90): TP 1 FP 0 FN 3 -> P 1,   R 1/4, F1 2/5
    t in [0.90, 1.00): TP 0 FP 0 FN 4 -> P 0 (nothing predicted), R 0, F1 0
  Max F1 0.8 at t = 0.00 .. 0.19 (tails included), all with FP+FN = 2 -> highest: t = 0.19.
  AP: recalls 1, 3/4, 1/2, 1/4 with interpolated precision 2/3, 3/4, 1, 1:
    0.25 * (1 + 1 + 3/4 + 2/3) = 41/48.
  """
  gt = np.eye(4, dtype=np.uint8)
  prob = np.zeros((4, 4), np.float32)
  prob[0, 0], prob[1, 1], prob[2, 2], prob[3, 3] = 0.9, 0.7, 0.5, 0.2
  prob[0, 1], prob[2, 3] = 0.6, 0.3
  return prob, gt


def assert_finite_json(result):
  # allow_nan=False raises on NaN/inf anywhere; also proves JSON-serialisability.
  json.dumps(result, allow_nan=False)


# ---------------------------------------------------------------------------
# counts_per_threshold
# ---------------------------------------------------------------------------


def test_hand_example_counts():
  prob, gt = hand_example()
  tp, fp, fn = counts_per_threshold(prob, gt)
  assert tp.dtype == fp.dtype == fn.dtype == np.int64
  assert tp.shape == STRICT_GRID.shape
  # Spot checks from the table in hand_example.
  for t, want in [
    (0.0, (4, 2, 0)),
    (BOTTOM, (4, 2, 0)),
    (0.007, (4, 2, 0)),
    (0.19, (4, 2, 0)),
    (0.20, (3, 2, 1)),
    (0.49, (3, 1, 1)),
    (0.50, (2, 1, 2)),
    (0.60, (2, 0, 2)),
    (0.70, (1, 0, 3)),
    (0.90, (0, 0, 4)),
    (TOP, (0, 0, 4)),
  ]:
    i = at(STRICT_GRID, t)
    assert (tp[i], fp[i], fn[i]) == want, t
  # The uniform grid alone, given explicitly (the grid of earlier versions).
  tp, fp, fn = counts_per_threshold(prob, gt, thresholds=np.arange(N) / N)
  assert tp.shape == (N,)
  assert (tp[19], fp[19], fn[19]) == (4, 2, 0)
  assert (tp[20], fp[20], fn[20]) == (3, 2, 1)
  assert (tp[50], fp[50], fn[50]) == (2, 1, 2)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('seed', [0, 1, 2, 3])
def test_counts_match_naive_loop(dtype, seed):
  rng = np.random.default_rng(seed)
  h, w = rng.integers(1, 40, size=2)
  gt = rng.random((h, w)) < 0.3
  prob = rng.random((h, w)).astype(dtype)
  # A third of the pixels exactly on thresholds (the grid's and 1, in the dtype), plus 0 and 1.
  on = rng.random((h, w)) < 0.33
  prob[on] = rng.choice(np.append(STRICT_GRID, 1.0), size=on.sum()).astype(dtype)
  prob.flat[0] = 0.0
  prob.flat[-1] = 1.0
  got = counts_per_threshold(prob, gt)
  want = naive_counts(prob, gt)
  for g, e in zip(got, want, strict=True):
    np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize('dtype', [np.float16, np.float32, np.float64])
def test_every_threshold_value_and_neighbours(dtype):
  # Every grid point and 1, plus their nextafter neighbours, for several n: the float edge
  # cases (in float16 some tail thresholds coincide, e.g. 0.9998 and 0.9999).
  for n in (1, 3, 7, 10, 100, 255):
    grid = get_protocol('strict').thresholds(n)
    t = np.append(grid, 1.0).astype(dtype)
    vals = np.concatenate([t, np.nextafter(t, dtype(0)), np.nextafter(t, dtype(1))]).astype(dtype)
    prob = vals.reshape(1, -1)
    gt = (np.arange(prob.size) % 2).reshape(prob.shape)
    got = counts_per_threshold(prob, gt, num_thresholds=n)
    want = naive_counts(prob, gt, grid)
    for g, e in zip(got, want, strict=True):
      np.testing.assert_array_equal(g, e)
    # And the plain uniform grid i/n, given explicitly.
    uniform = np.arange(n) / n
    got = counts_per_threshold(prob, gt, thresholds=uniform)
    for g, e in zip(got, naive_counts(prob, gt, uniform), strict=True):
      np.testing.assert_array_equal(g, e)


def test_strictness_at_threshold():
  # 0.5 is not > 0.5: predicted at t=0.49, not at t=0.5, in both float dtypes.
  for dtype in (np.float32, np.float64):
    prob = np.array([[0.5]], dtype)
    tp, fp, fn = counts_per_threshold(prob, np.ones((1, 1), bool))
    i50 = at(STRICT_GRID, 0.5)
    assert tp[i50 - 1] == 1 and tp[i50] == 0 and fn[i50] == 1


# ---------------------------------------------------------------------------
# evaluate: exact values
# ---------------------------------------------------------------------------


def test_hand_example_evaluate():
  prob, gt = hand_example()
  r = evaluate([prob], [gt])
  assert r['protocol'] == 'strict'
  assert 'prob > t' in r['protocol_description']
  assert r['num_images'] == 1
  assert r['ods']['f1'] == pytest.approx(0.8)
  assert r['ods']['precision'] == pytest.approx(2 / 3)
  assert r['ods']['recall'] == pytest.approx(1.0)
  assert r['ods']['threshold'] == pytest.approx(0.19)
  assert r['ois']['f1'] == pytest.approx(0.8)
  assert r['ois_mean_f1'] == pytest.approx(0.8)
  assert r['ap'] == pytest.approx(41 / 48)
  curve = r['curve']
  assert curve['thresholds'] == STRICT_GRID.tolist()
  assert r['num_thresholds'] == N and r['grid_size'] == len(STRICT_GRID) > N
  assert curve['f1'][at(STRICT_GRID, 0.5)] == pytest.approx(4 / 7)
  assert curve['f1'][at(STRICT_GRID, 0.3)] == pytest.approx(6 / 8)
  assert curve['precision'][at(STRICT_GRID, 0.95)] == 0.0
  assert curve['recall'][at(STRICT_GRID, 0.95)] == 0.0
  # At the fixed threshold 0.5 (0.5 > 0.5 is False): TP 2 FP 1 FN 2.
  assert r['fixed'] == pytest.approx(
    {'threshold': 0.5, 'precision': 2 / 3, 'recall': 0.5, 'f1': 4 / 7}
  )
  (im,) = r['per_image']
  assert im == pytest.approx(
    {
      'index': 0,
      'threshold': 0.19,
      'precision': 2 / 3,
      'recall': 1.0,
      'f1': 0.8,
      'fixed_precision': 2 / 3,
      'fixed_recall': 0.5,
      'fixed_f1': 4 / 7,
    }
  )
  assert_finite_json(r)


def test_perfect_prediction():
  rng = np.random.default_rng(5)
  gts = [rng.random((9, 13)) < 0.2, rng.random((20, 7, 1)) < 0.5]
  probs = [g.astype(np.float32) for g in gts]
  r = evaluate(probs, gts)
  assert r['ods']['f1'] == 1.0 and r['ois']['f1'] == 1.0 and r['ois_mean_f1'] == 1.0
  assert r['ap'] == pytest.approx(1.0)
  # Every threshold ties with no errors -> the highest one.
  assert r['ods']['threshold'] == TOP
  assert r['fixed']['f1'] == 1.0


def test_ois_mean_f1_vs_pooled():
  # Image 0: the hand example (best F1 0.8). Image 1: perfect (F1 1).
  prob0, gt0 = hand_example()
  gt1 = np.zeros((3, 3), bool)
  gt1[1] = True
  prob1 = np.where(gt1, 0.95, 0.05)
  r = evaluate([prob0, prob1], [gt0, gt1])
  assert r['ois_mean_f1'] == pytest.approx((0.8 + 1.0) / 2)
  f1s = [im['f1'] for im in r['per_image']]
  assert f1s == pytest.approx([0.8, 1.0])
  # Pooled: image 0 at t=0.19 (TP 4 FP 2 FN 0) + image 1 (TP 3 FP 0 FN 0)
  # -> TP 7 FP 2 FN 0: P 7/9, R 1, F1 14/16.
  assert r['ois']['precision'] == pytest.approx(7 / 9)
  assert r['ois']['recall'] == pytest.approx(1.0)
  assert r['ois']['f1'] == pytest.approx(14 / 16)
  assert r['ois']['pooling'] == "counts pooled over images at each image's best threshold"


# ---------------------------------------------------------------------------
# Degenerate images: no NaN, documented values, no threshold-0 default
# ---------------------------------------------------------------------------


def test_all_background_gt():
  rng = np.random.default_rng(0)
  prob = rng.random((8, 8))
  r = evaluate([prob], [np.zeros((8, 8), bool)])
  assert_finite_json(r)
  # No crack pixel anywhere: R = 0 and F1 = 0 at every threshold, AP 0.
  assert r['ods']['f1'] == 0.0 and r['ods']['recall'] == 0.0
  assert r['ap'] == 0.0
  # Ties -> fewest errors (= fewest FP) -> the highest threshold, not 0.
  assert r['ods']['threshold'] == TOP
  (im,) = r['per_image']
  assert im['threshold'] == TOP and im['f1'] == 0.0
  assert r['fixed']['f1'] == 0.0 and r['fixed']['recall'] == 0.0


def test_empty_prediction():
  gt = np.eye(5, dtype=bool)
  r = evaluate([np.zeros((5, 5))], [gt])
  assert_finite_json(r)
  # Nothing predicted anywhere (0 > 0 is False): P = 0 by convention, R = 0, F1 = 0.
  assert r['curve']['precision'] == [0.0] * len(STRICT_GRID)
  assert r['curve']['recall'] == [0.0] * len(STRICT_GRID)
  assert r['ods'] == pytest.approx({'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'threshold': TOP})
  assert r['fixed'] == {'threshold': 0.5, 'precision': 0.0, 'recall': 0.0, 'f1': 0.0}
  assert r['ois']['f1'] == 0.0 and r['ois_mean_f1'] == 0.0 and r['ap'] == 0.0


def test_all_crack_prediction():
  gt = np.eye(4, dtype=bool)  # 4 of 16 pixels are crack
  r = evaluate([np.ones((4, 4), np.float32)], [gt])
  assert_finite_json(r)
  # 1 > t for every t: everything predicted. P = 1/4, R = 1, F1 = 2/5 everywhere.
  assert r['curve']['precision'] == pytest.approx([0.25] * len(STRICT_GRID))
  assert r['curve']['recall'] == pytest.approx([1.0] * len(STRICT_GRID))
  assert r['ods']['f1'] == pytest.approx(0.4)
  assert r['ap'] == pytest.approx(0.25)


def test_f1_zero_image_does_not_pick_threshold_zero():
  prob0, gt0 = hand_example()  # ODS threshold of the pair is > 0
  # Image 1 has cracks but only background is scored: TP = 0 at every threshold.
  gt1 = np.zeros((6, 6), bool)
  gt1[:, 0] = True
  prob1 = np.where(gt1, 0.0, 0.8)
  r = evaluate([prob0, prob1], [gt0, gt1])
  assert_finite_json(r)
  im1 = r['per_image'][1]
  assert im1['f1'] == 0.0
  assert im1['threshold'] != 0.0
  assert im1['threshold'] == r['ods']['threshold']
  # Image 0 alone would choose t = 0.19; image 1's 30 background pixels at 0.8 make
  # any t < 0.8 costly, so the ODS threshold moves up to where image 1 is silent.
  assert r['ods']['threshold'] >= 0.8


def test_background_only_image_adds_minimal_false_positives():
  prob0, gt0 = hand_example()
  # No crack; scores up to 0.5 -> FP is 0 for t >= 0.5; rule picks the highest t.
  prob1 = np.linspace(0, 0.5, 16).reshape(4, 4)
  r = evaluate([prob0, prob1], [gt0, np.zeros((4, 4))])
  im1 = r['per_image'][1]
  assert im1['threshold'] == TOP
  assert im1 == pytest.approx(
    {
      'index': 1,
      'threshold': TOP,
      'precision': 0.0,
      'recall': 0.0,
      'f1': 0.0,
      'fixed_precision': 0.0,
      'fixed_recall': 0.0,
      'fixed_f1': 0.0,
    }
  )
  # Pooled OIS equals image 0 alone (image 1 contributes no FP at its threshold).
  assert r['ois']['f1'] == pytest.approx(0.8)


def test_results_are_python_types():
  prob, gt = hand_example()
  r = evaluate([prob, prob[:3]], [gt, gt[:3]], num_thresholds=10)
  assert r['num_thresholds'] == 10 and r['tail_thresholds'] is True
  assert type(r['grid_size']) is int
  assert len(r['curve']['f1']) == r['grid_size'] == len(get_protocol('strict').thresholds(10))
  for key in ('precision', 'recall', 'f1', 'threshold'):
    assert type(r['fixed'][key]) is float
  for key in ('precision', 'recall', 'f1', 'threshold'):
    assert type(r['ods'][key]) is float
  assert type(r['ap']) is float and type(r['ois_mean_f1']) is float
  assert all(type(v) is float for v in r['curve']['precision'])
  assert type(r['per_image'][1]['index']) is int


def test_evaluate_matches_naive_aggregation():
  # ODS/OIS recomputed from the naive loop for a random dataset of mixed sizes.
  rng = np.random.default_rng(11)
  probs, gts = [], []
  for _ in range(5):
    h, w = rng.integers(5, 30, size=2)
    g = rng.random((h, w)) < 0.2
    p = np.clip(g * 0.4 + rng.random((h, w)) * 0.6, 0, 1).round(2).astype(np.float32)
    probs.append(p)
    gts.append(g)
  r = evaluate(probs, gts)
  tp, fp, fn = (
    sum(c) for c in zip(*(naive_counts(p, g) for p, g in zip(probs, gts, strict=True)), strict=True)
  )
  f1 = np.where(tp > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)
  assert r['ods']['f1'] == pytest.approx(f1.max())
  assert r['curve']['f1'] == pytest.approx(f1.tolist())
  best = [
    max(2 * t / max(2 * t + a + b, 1) for t, a, b in zip(*naive_counts(p, g), strict=True))
    for p, g in zip(probs, gts, strict=True)
  ]
  assert r['ois_mean_f1'] == pytest.approx(np.mean(best))
  assert not any(math.isnan(v) for v in r['curve']['precision'])


# ---------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------


def _good():
  return np.full((4, 4), 0.5), np.zeros((4, 4), bool)


def test_channel_dim_accepted():
  prob, gt = hand_example()
  a = evaluate([prob[..., None]], [gt])
  b = evaluate([prob], [gt[..., None]])
  assert a['ods'] == b['ods']


@pytest.mark.parametrize(
  ('bad_prob', 'bad_gt', 'match'),
  [
    (np.full((4, 5), 0.5), np.zeros((4, 4)), r'image 2: shape mismatch'),
    (np.full((4, 4), 1.5), np.zeros((4, 4)), r'image 2: probs must lie in \[0, 1\]'),
    (np.full((4, 4), -0.1), np.zeros((4, 4)), r'image 2: probs must lie in \[0, 1\]'),
    (np.full((4, 4), np.nan), np.zeros((4, 4)), r'image 2: probs contain NaN'),
    (np.full((4, 4), 0.5), np.full((4, 4), 255), r'image 2: gt must be binary'),
    (np.full((4, 4), 0.5), np.full((4, 4), 0.5), r'image 2: gt must be binary'),
    (np.full((2, 4, 4), 0.5), np.zeros((2, 4, 4)), r'image 2: probs must have shape'),
  ],
)
def test_bad_inputs_name_image_index(bad_prob, bad_gt, match):
  probs = [_good()[0], _good()[0], bad_prob]
  gts = [_good()[1], _good()[1], bad_gt]
  with pytest.raises(ValueError, match=match):
    evaluate(probs, gts)


def test_length_mismatch():
  p, g = _good()
  with pytest.raises(ValueError, match='2 probability maps but 1 ground truths'):
    evaluate([p, p], [g])


def test_unknown_protocol_lists_supported():
  p, g = _good()
  with pytest.raises(ValueError, match=r"supported protocols: \['strict', 'tolerance'"):
    evaluate([p], [g], protocol='fuzzy')


def test_strict_and_tolerance_protocols_differ_as_documented():
  # Every entry's name, grid and report: tests/test_contracts.py.
  strict, tol, tol_thin = map(get_protocol, ('strict', 'tolerance', 'tolerance_thin_gt'))
  assert strict.follows_config_grid and strict.writes_threshold_file
  assert strict.threshold_rule == 'crack where probability > threshold'
  for spec in (tol, tol_thin):
    assert spec.bsds and not spec.follows_config_grid and not spec.writes_threshold_file
    assert spec.threshold_rule == 'crack where probability >= threshold, then thinned to one pixel'
  # Exactly one protocol records a mask threshold (threshold.json).
  assert [n for n, s in PROTOCOLS.items() if s.writes_threshold_file] == ['strict']


def test_protocol_num_thresholds():
  strict, tol, tol_thin = map(get_protocol, ('strict', 'tolerance', 'tolerance_thin_gt'))
  # strict follows the configured grid; the tolerance protocols keep BSDS's 99.
  assert strict.num_thresholds(50) == 50
  assert strict.num_thresholds(None) == strict.default_num_thresholds == 100
  for spec in (tol, tol_thin):
    assert spec.num_thresholds(50) == spec.num_thresholds(None) == 99
  p, g = _good()
  r = evaluate([p], [g], protocol='strict', num_thresholds=strict.num_thresholds(20))
  assert r['num_thresholds'] == 20
  # The uniform part i/20 plus 0.5 (already there) and the tails.
  assert r['grid_size'] == len(r['curve']['thresholds']) == 20 + 14
  r = evaluate([p], [g], protocol='strict', num_thresholds=20, tail_thresholds=False)
  assert r['curve']['thresholds'] == (np.arange(20) / 20).tolist()
  assert r['grid_size'] == 20 and r['tail_thresholds'] is False


def test_get_protocol_unknown_name():
  with pytest.raises(
    ValueError, match=r"unknown protocol 'fuzzy'; supported protocols: \['strict'"
  ):
    get_protocol('fuzzy')


def test_package_reexports():
  # Old flat-module names keep working on the package.
  assert evaluation.evaluate is aggregate.evaluate
  assert evaluation.TOLERANCE_MAX_DIST == 0.0075
  assert evaluation.ThresholdCounts._fields == ('matched_pred', 'num_pred', 'matched_gt', 'num_gt')


def test_bad_num_thresholds():
  p, g = _good()
  with pytest.raises(ValueError, match='num_thresholds'):
    evaluate([p], [g], num_thresholds=0)
