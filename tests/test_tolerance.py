"""Tests of the tolerance protocols of crackjax.evaluation (the BSDS benchmark's matching): the
counts against a naive reference, thinning against scikit-image, the maximum matching, the
BSDS conventions of max F and AP."""

from __future__ import annotations

import math

import numpy as np
import pytest

from crackjax.evaluation import (
  aggregate,
  evaluate,
  get_protocol,
  matching,
  thin,
  tolerance_counts,
)
from tests.test_evaluation import BOTTOM, TOP, assert_finite_json, at

# ---------------------------------------------------------------------------
# Tolerance protocol (BSDS boundary benchmark)
# ---------------------------------------------------------------------------

# 240 x 320 has a diagonal of exactly 400 px, so maxDist = 0.0075 * 400 = 3.0 px.
TH, TW = 240, 320
T99 = 99
TOL_GRID = get_protocol('tolerance').thresholds(T99)  # 0.01 .. 0.99, 0.5 and the tails
I50 = at(TOL_GRID, 0.5)


def _canvas():
  return np.zeros((TH, TW), np.float32), np.zeros((TH, TW), bool)


def naive_tolerance_counts(prob, gt, thresholds=TOL_GRID, max_dist=0.0075, thin_fn=thin):
  """Reference: per threshold, thin, pairs within distance by a KD-tree, matching."""
  from scipy import sparse
  from scipy.sparse.csgraph import maximum_bipartite_matching
  from scipy.spatial import cKDTree

  h, w = prob.shape
  radius = max_dist * math.hypot(h, w)
  g = np.argwhere(gt)
  tree = cKDTree(g) if len(g) else None
  matched, num_pred = [], []
  for t in thresholds:
    pred = np.argwhere(thin_fn(prob >= prob.dtype.type(t)))
    num_pred.append(len(pred))
    if tree is None or len(pred) == 0:
      matched.append(0)
      continue
    pairs = cKDTree(pred).sparse_distance_matrix(tree, radius, output_type='coo_matrix')
    graph = sparse.csr_matrix(
      (np.ones(pairs.nnz), (pairs.row, pairs.col)), shape=(len(pred), len(g))
    )
    matched.append(int(np.sum(maximum_bipartite_matching(graph, perm_type='column') >= 0)))
  return np.array(matched), np.array(num_pred), len(g)


@pytest.mark.parametrize(
  ('dy', 'dx', 'matched'),
  [
    (0, 0, True),
    (0, 3, True),
    (3, 0, True),
    (-2, 2, True),  # 2.83 px
    (1, 3, False),  # 3.16 px
    (0, 4, False),
    (-2, -3, False),  # 3.61 px
    (3, 3, False),  # 4.24 px
  ],
)
def test_tolerance_single_pixel_distance(dy, dx, matched):
  prob, gt = _canvas()
  gt[120, 160] = True
  prob[120 + dy, 160 + dx] = 0.9
  c = tolerance_counts(prob, gt)
  # Predicted at t = 0.003 .. 0.90 (prob >= t), nothing above.
  below = int(np.sum(TOL_GRID <= 0.9))
  above = len(TOL_GRID) - below
  assert c.num_pred.tolist() == [1] * below + [0] * above
  assert c.num_gt.tolist() == [1] * len(TOL_GRID)
  assert c.matched_pred.tolist() == [int(matched)] * below + [0] * above
  assert c.matched_gt.tolist() == c.matched_pred.tolist()


@pytest.mark.parametrize('shift', [1, 2, 3, 4, 5])
def test_tolerance_shifted_line(shift):
  # Vertical GT line of 100 px; the prediction is the same line `shift` px to the right.
  prob, gt = _canvas()
  gt[50:150, 100] = True
  prob[50:150, 100 + shift] = 0.8
  r = evaluate([prob], [gt], protocol='tolerance')
  assert r['num_thresholds'] == T99
  if shift <= 3:  # within maxDist = 3 px: every pixel matched, one-to-one
    # (F = 1 from the lowest threshold up to 0.8; BSDS reports the first maximum.)
    assert r['ods'] == pytest.approx(
      {'precision': 1.0, 'recall': 1.0, 'f1': 1.0, 'threshold': BOTTOM}
    )
    assert r['fixed'] == {'threshold': 0.5, 'precision': 1.0, 'recall': 1.0, 'f1': 1.0}
  else:
    assert r['ods']['f1'] == 0.0 and r['ods']['recall'] == 0.0
    assert r['ods']['precision'] == 0.0
  # The strict protocol sees no overlap at all for any shift.
  assert evaluate([prob], [gt])['ods']['f1'] == 0.0
  assert_finite_json(r)


def test_tolerance_one_to_one():
  # Two predicted pixels next to one GT pixel: only one of them is matched.
  prob, gt = _canvas()
  gt[120, 160] = True
  prob[120, 159] = prob[120, 161] = 0.9
  c = tolerance_counts(prob, gt)
  assert c.num_pred[I50] == 2 and c.matched_pred[I50] == 1 and c.matched_gt[I50] == 1
  r = evaluate([prob], [gt], protocol='tolerance')
  assert r['ods_grid'] == pytest.approx(
    {'precision': 0.5, 'recall': 1.0, 'f1': 2 / 3, 'threshold': 0.90}
  )
  # And the other way round: one prediction cannot match two GT pixels.
  prob, gt = _canvas()
  gt[120, 159] = gt[120, 161] = True
  prob[120, 160] = 0.9
  c = tolerance_counts(prob, gt)
  assert (c.matched_pred[I50], c.num_pred[I50], c.num_gt[I50]) == (1, 1, 2)


def test_tolerance_thins_thick_prediction():
  # 1-px GT line of 200 px; a 3-px-thick prediction centred on it.
  prob, gt = _canvas()
  gt[120, 50:250] = True
  prob[119:122, 50:250] = 0.9
  thinned = thin(prob >= 0.5)
  assert thinned.sum() < 200 + 10  # one pixel wide
  assert np.all(thinned.sum(axis=0) <= 1)
  c = tolerance_counts(prob, gt)
  k = int(thinned.sum())
  assert c.num_pred[I50] == k and c.matched_pred[I50] == k  # all within 1 px
  r = evaluate([prob], [gt], protocol='tolerance')
  assert r['ods']['precision'] == pytest.approx(1.0)
  assert r['ods']['recall'] == pytest.approx(k / 200)
  # Strict: 200 of 600 predicted pixels are crack.
  assert evaluate([prob], [gt])['ods']['precision'] == pytest.approx(1 / 3)


def test_thin_matches_skimage_docstring_example():
  square = np.zeros((7, 7), bool)
  square[1:-1, 2:-2] = True
  square[0, 1] = True
  expected = np.zeros((7, 7), bool)
  expected[0, 1] = expected[1, 2] = expected[2, 3] = expected[3, 3] = expected[4, 3] = True
  assert np.array_equal(thin(square), expected)


def test_thin_equals_skimage():
  morphology = pytest.importorskip('skimage.morphology')
  from scipy import ndimage as ndi

  rng = np.random.default_rng(3)
  for k in range(12):
    if k % 3 == 0:
      m = rng.random((30, 41)) < 0.5
    else:
      m = ndi.gaussian_filter(rng.random((50, 70)), 1.5 + k % 2) > 0.5
    assert np.array_equal(thin(m), morphology.thin(m)), k
  assert np.array_equal(thin(np.ones((23, 31))), morphology.thin(np.ones((23, 31))))


def test_thin_prefixes_thins_each_prefix_on_its_own():
  # The tolerance protocols thin the nested predictions of one photo in one call: each
  # prefix as skimage thins it alone, survivors in the order given.
  morphology = pytest.importorskip('skimage.morphology')
  from scipy import ndimage as ndi

  from crackjax.evaluation.thinning import thin_prefixes

  rng = np.random.default_rng(5)
  prob = ndi.gaussian_filter(rng.random((60, 80)), 2.0)
  order = np.argsort(-prob, axis=None, kind='stable')
  ys, xs = np.divmod(order, 80)
  ks = np.array([0, 1, 300, 300, 1700, 2400, 4800])
  pos, starts = thin_prefixes(ys, xs, ks)
  assert starts.tolist()[0] == 0 and len(starts) == len(ks) + 1
  for j, k in enumerate(ks):
    mask = np.zeros((60, 80), bool)
    mask[ys[:k], xs[:k]] = True
    kept = pos[starts[j] : starts[j + 1]]
    assert np.all(np.diff(kept) > 0)  # the order given
    got = np.zeros_like(mask)
    got[ys[kept], xs[kept]] = True
    assert np.array_equal(got, morphology.thin(mask)), k


def test_thin_large_blob_equals_skimage():
  # Low thresholds of real maps give one blob over most of the image, with holes.
  morphology = pytest.importorskip('skimage.morphology')
  from scipy import ndimage as ndi

  rng = np.random.default_rng(5)
  m = ndi.gaussian_filter(rng.random((120, 170)), 2.5) > 0.47
  assert m.mean() > 0.7
  assert np.array_equal(thin(m), morphology.thin(m))


def _ladder_graph(depth):
  """Bipartite graph on which scipy's Hopcroft-Karp takes ~2**depth steps.

  A ladder of ``depth`` levels (left p_k, q_k; right a_k, b_k; p_k, q_k adjacent to
  a_k, b_k of their own level and to both of the next) hangs off a free left vertex
  w, and the only augmenting path, from z, runs along a chain of ``depth`` levels.
  scipy's depth-first search re-expands every ladder path without marking dead ends
  (scipy issue #26147). Returns (neighbour lists padded with -1, number of right
  vertices); the maximum matching covers every right vertex.
  """
  rows = []
  for k in range(depth):
    nxt = [2 * k + 2, 2 * k + 3] if k + 1 < depth else []
    rows += [[2 * k, *nxt], [2 * k + 1, *nxt]]
  c0 = 2 * depth
  rows += [[c0 + k - 1, c0 + k] for k in range(1, depth + 1)]  # chain y_k
  rows += [[0, 1], [c0]]  # w, z
  nbr = np.full((len(rows), 3), -1)
  for i, r in enumerate(rows):
    nbr[i, : len(r)] = r
  return nbr, c0 + depth + 1


def test_max_matching_size_layered_graph_is_fast():
  # scipy.sparse.csgraph.maximum_bipartite_matching needs ~2**40 steps here (it
  # doubles per level: 0.04 s at depth 20); the max-flow matching is instant.
  nbr, num_right = _ladder_graph(40)
  assert matching.max_matching_size(nbr, num_right) == num_right


def test_max_matching_size_equals_hopcroft_karp():
  from scipy import sparse
  from scipy.sparse.csgraph import maximum_bipartite_matching

  rng = np.random.default_rng(0)
  for _ in range(30):
    nl, nr, k = rng.integers(1, 40), rng.integers(1, 40), rng.integers(1, 6)
    nbr = rng.integers(-nr // 2, nr, size=(nl, k))  # < 0: padding; repeats allowed
    edge = nbr >= 0
    graph = sparse.csr_matrix(
      (np.ones(edge.sum()), nbr[edge], np.r_[0, np.cumsum(edge.sum(axis=1))]),
      shape=(nl, nr),
    )
    expected = int(np.sum(maximum_bipartite_matching(graph, perm_type='column') >= 0))
    assert matching.max_matching_size(nbr, nr) == expected
  assert matching.max_matching_size(np.full((3, 2), -1), 5) == 0


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_tolerance_counts_equal_naive(seed):
  from scipy import ndimage as ndi

  rng = np.random.default_rng(seed)
  h, w = rng.integers(40, 90, size=2)
  gt = np.zeros((h, w), bool)
  gt[rng.integers(0, h), :] = True
  gt[:, rng.integers(0, w)] = rng.random() < 0.7
  blur = ndi.gaussian_filter(gt.astype(float), 1.5)
  noise = ndi.gaussian_filter(rng.random((h, w)), 2)
  prob = np.clip(blur * 2 + noise - 0.35, 0, 1).astype(np.float32)
  n = 25
  grid = get_protocol('tolerance').thresholds(n)  # i/26 for i = 1..25, 0.5 and the tails
  c = tolerance_counts(prob, gt, num_thresholds=n)
  matched, num_pred, num_gt = naive_tolerance_counts(prob, gt, grid)
  assert c.matched_pred.tolist() == matched.tolist()
  assert c.num_pred.tolist() == num_pred.tolist()
  assert c.num_gt.tolist() == [num_gt] * len(grid)
  c2 = tolerance_counts(prob, gt, num_thresholds=n, thin_gt=True)
  matched2, num_pred2, num_gt2 = naive_tolerance_counts(prob, thin(gt), grid)
  assert c2.matched_pred.tolist() == matched2.tolist()
  assert c2.num_gt.tolist() == [num_gt2] * len(grid)
  # An explicit grid (here the uniform part alone, as in earlier versions).
  uniform = np.arange(1, n + 1) / (n + 1)
  c3 = tolerance_counts(prob, gt, thresholds=uniform)
  assert c3.matched_pred.tolist() == naive_tolerance_counts(prob, gt, uniform)[0].tolist()


def test_tolerance_threshold_is_inclusive():
  prob, gt = _canvas()
  gt[120, 160] = True
  prob[120, 160] = 0.5
  c = tolerance_counts(prob, gt)
  assert c.matched_pred[I50] == 1  # 0.5 >= 0.50
  assert c.matched_pred[at(TOL_GRID, 0.51)] == 0  # 0.5 < 0.51
  assert I50 + 1 == at(TOL_GRID, 0.51)


def test_tolerance_perfect_prediction():
  prob, gt = _canvas()
  gt[40, 10:300] = True  # horizontal
  gt[50:200, 20] = True  # vertical
  idx = np.arange(100)
  gt[100 + idx, 100 + idx] = True  # diagonal
  r = evaluate([gt.astype(np.float32)], [gt], protocol='tolerance')
  for key in ('ods', 'ods_grid', 'ois'):
    assert r[key]['f1'] == 1.0, key
  assert r['ois_mean_f1'] == 1.0
  assert r['ods']['threshold'] == BOTTOM  # BSDS: the first maximum
  # A single distinct recall on the curve: BSDS's Area_PR is 0 (documented).
  assert r['ap'] == 0.0


def test_tolerance_thin_gt_protocol():
  # A 5-px-thick GT band and a 1-px prediction on its centre line.
  prob, gt = _canvas()
  gt[118:123, 50:250] = True
  prob[120, 50:250] = 0.9
  plain = evaluate([prob], [gt], protocol='tolerance')
  assert plain['ods_grid']['precision'] == 1.0
  assert plain['ods_grid']['recall'] == pytest.approx(200 / 1000)  # 1 match per GT column
  thin_gt = evaluate([prob], [gt], protocol='tolerance_thin_gt')
  k = int(thin(gt).sum())
  assert thin_gt['ods_grid']['recall'] == pytest.approx(k / k)
  assert thin_gt['ods_grid']['precision'] == pytest.approx(min(k, 200) / 200)
  assert 'thinned' in thin_gt['protocol_description']


def test_tolerance_degenerate_images():
  rng = np.random.default_rng(0)
  prob_line, gt_line = _canvas()
  gt_line[120, 50:250] = True
  prob_line[120, 50:250] = 0.6
  # No GT crack (random prediction); empty prediction; all-crack prediction.
  no_gt = (rng.random((30, 40)).astype(np.float32), np.zeros((30, 40), bool))
  empty = (np.zeros((TH, TW), np.float32), gt_line)
  full = (np.ones((TH, TW), np.float32), gt_line)
  r = evaluate([no_gt[0]], [no_gt[1]], protocol='tolerance')
  assert_finite_json(r)
  assert r['ods']['f1'] == 0.0 and r['ap'] == 0.0 and r['ois']['f1'] == 0.0
  assert r['per_image'][0]['threshold'] == TOP  # rule 1: fewest predictions
  r = evaluate([empty[0]], [empty[1]], protocol='tolerance')
  assert_finite_json(r)
  zeros = [0.0] * len(TOL_GRID)
  assert r['curve']['precision'] == zeros and r['curve']['recall'] == zeros
  assert r['ods']['f1'] == 0.0 and r['ap'] == 0.0
  # All-crack: the same (thinned) map at every threshold, so a flat curve.
  r = evaluate([full[0]], [full[1]], protocol='tolerance')
  assert_finite_json(r)
  # The full 240x320 rectangle thins to row 120, columns 119..199: all on the GT line.
  ys, xs = np.nonzero(thin(np.ones((TH, TW), bool)))
  assert set(ys.tolist()) == {120} and xs.tolist() == list(range(119, 200))
  assert r['ods_grid']['precision'] == 1.0
  assert r['ods_grid']['recall'] == pytest.approx(81 / 200)
  assert len(set(r['curve']['f1'])) == 1 and r['ap'] == 0.0

  # Mixed dataset: an image with GT but F1 = 0 everywhere (prediction far away)
  # takes the grid ODS threshold (rule 2), never threshold 0.01.
  far, gt_far = _canvas()
  gt_far[10, 10:40] = True
  far[200, 200:260] = 0.95
  r = evaluate([prob_line, far], [gt_line, gt_far], protocol='tolerance')
  assert r['per_image'][1]['f1'] == 0.0
  assert r['per_image'][1]['threshold'] == r['ods_grid']['threshold'] != BOTTOM
  assert_finite_json(r)


def test_bsds_max_f_interpolates():
  # Two thresholds with (R, P) = (1, 0) and (0, 0.9): F is 0 at both grid points but
  # positive on the segment between them, sampled at d = linspace(0, 1, 100).
  t, p, r, f = aggregate.bsds_max_f(
    np.array([0.1, 0.2]), np.array([0.0, 0.9]), np.array([1.0, 0.0])
  )
  d = np.linspace(0, 1, 100)
  f_all = 2 * (0.9 * d) * (1 - d) / (0.9 * d + 1 - d)
  best = d[np.argmax(f_all)]
  assert 0 < best < 1
  assert f == pytest.approx(f_all.max())
  assert (t, p, r) == pytest.approx((0.1 + 0.1 * best, 0.9 * best, 1 - best))


def test_bsds_average_precision():
  # Thresholds ascending: R = 1, 0.5, 0.5, 0 with P = 0.5, 0.9, 1, 1. For the repeated
  # recall 0.5, the last occurrence (P = 1) is used. Ru = 0, .5, 1; Pu = 1, 1, .5.
  ap = aggregate.bsds_average_precision(
    np.array([0.5, 0.9, 1.0, 1.0]), np.array([1.0, 0.5, 0.5, 0.0])
  )
  # 0:0.01:1 -> 51 points at 1 up to 0.5, then 1 - (r - 0.5) at 0.51 .. 1.00.
  assert ap == pytest.approx(0.01 * (51 + sum(1 - k / 100 for k in range(1, 51))))
  # Points outside the recall range reached count 0.
  ap = aggregate.bsds_average_precision(np.array([1.0, 1.0]), np.array([0.5, 0.25]))
  assert ap == pytest.approx(0.01 * 26)
  assert aggregate.bsds_average_precision(np.array([0.3]), np.array([0.7])) == 0.0


def test_tolerance_result_keys_match_strict():
  prob, gt = _canvas()
  gt[120, 50:250] = True
  prob[120, 50:250] = 0.6
  a = evaluate([prob], [gt])
  b = evaluate([prob], [gt], protocol='tolerance')
  assert set(a) == set(b)
  assert set(a['ods']) == set(b['ods']) and set(a['ois']) == set(b['ois'])
  assert set(a['fixed']) == set(b['fixed']) == {'threshold', 'precision', 'recall', 'f1'}
  assert b['curve']['thresholds'] == TOL_GRID.tolist()
  assert b['num_thresholds'] == T99 and b['grid_size'] == T99 + 14  # 0.5 is i/100
  assert b['curve']['thresholds'][0] == BOTTOM
  assert b['curve']['thresholds'][-1] == TOP
  assert b['protocol'] == 'tolerance' and 'prob >= t' in b['protocol_description']


def flow_matching_size(graph) -> int:
  """Reference maximum matching of a bipartite scipy graph (left x right) by scipy's maximum
  flow (polynomial, unlike maximum_bipartite_matching on layered pixel graphs)."""
  from scipy import sparse
  from scipy.sparse.csgraph import maximum_flow

  nl, nr = graph.shape
  coo = sparse.coo_matrix(graph)
  rows = np.r_[np.zeros(nl, int), 1 + coo.row, 1 + nl + np.arange(nr)]
  cols = np.r_[1 + np.arange(nl), 1 + nl + coo.col, np.full(nr, 1 + nl + nr)]
  n = nl + nr + 2
  net = sparse.csr_array((np.ones(rows.size, np.int32), (rows, cols)), shape=(n, n))
  return int(maximum_flow(net, 0, n - 1).flow_value)


def reference_tolerance_counts(prob, gt, thresholds, thin_gt):
  """The tolerance counts computed the plain way with the field's libraries: skimage's
  thinning at each threshold, a KD-tree's pairs within the radius, scipy's maximum flow."""
  from scipy import sparse
  from scipy.spatial import cKDTree
  from skimage.morphology import thin as skimage_thin

  radius = 0.0075 * math.hypot(*prob.shape)
  g = np.argwhere(skimage_thin(gt) if thin_gt else gt)
  matched, num_pred = [], []
  for t in thresholds:
    pred = np.argwhere(skimage_thin(prob >= prob.dtype.type(t)))
    num_pred.append(len(pred))
    if not len(g) or not len(pred):
      matched.append(0)
      continue
    pairs = cKDTree(pred).sparse_distance_matrix(cKDTree(g), radius, output_type='coo_matrix')
    graph = sparse.csr_matrix(
      (np.ones(pairs.nnz), (pairs.row, pairs.col)), shape=(len(pred), len(g))
    )
    matched.append(flow_matching_size(graph))
  return np.array(matched), np.array(num_pred), len(g)


@pytest.mark.slow
def test_tolerance_counts_on_real_photos_equal_the_plain_computation():
  # Issue 59: the compiled thinning and matching change no count. Real CrackForest photos as a
  # released model predicts them: thick blobs at low thresholds, broken lines at high ones.
  from pathlib import Path

  from crackjax.deploy.predictor import Predictor
  from crackjax.tfds_builders.crackforest import crackforest_dataset_builder as cf

  root = Path(__file__).resolve().parents[2] / 'shared' / 'datasets' / 'crackforest'
  if not root.is_dir():
    pytest.skip(f'the real CrackForest is not at {root}')
  import PIL.Image

  predictor = Predictor.from_pretrained('crackforest-unet-cpu')
  grid = get_protocol('tolerance_thin_gt').thresholds(99)
  for pair in cf.list_records(cf.find_dataset_root(root))[:4]:
    prob = predictor(np.asarray(PIL.Image.open(pair.image_path).convert('RGB')))
    gt = cf.load_crack_mask(pair.mask_path).astype(bool)
    for thin_gt in (False, True):
      c = tolerance_counts(prob, gt, thresholds=grid, thin_gt=thin_gt)
      matched, num_pred, num_gt = reference_tolerance_counts(prob, gt, grid, thin_gt)
      assert c.matched_pred.tolist() == matched.tolist(), (pair.name, thin_gt)
      assert c.num_pred.tolist() == num_pred.tolist(), (pair.name, thin_gt)
      assert set(c.num_gt.tolist()) == {num_gt}
