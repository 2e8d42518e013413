"""bench/width_scale.py: each photo's predicted crack width and the scale rule built on it."""

from __future__ import annotations

import numpy as np
import pytest

from tests import fixtures


@pytest.fixture(scope='module')
def bench():
  return fixtures.load_bench('width_scale')


def _crack(width: int) -> np.ndarray:
  mask = np.zeros((64, 96), bool)
  mask[30 : 30 + width, 8:88] = True
  return mask


def test_width_is_what_predict_measures_and_nan_without_a_crack(bench):
  assert bench.width(_crack(3)) == pytest.approx(3, abs=1)
  assert bench.width(_crack(9)) == pytest.approx(9, abs=1.5)
  assert np.isnan(bench.width(np.zeros((8, 8), bool)))


def test_the_rule_enlarges_thin_cracks_and_shrinks_wide_ones(bench):
  assert bench.rule_scale(2.5, thin=4, wide=8) == 2.0
  assert bench.rule_scale(6.0, thin=4, wide=8) == 1.0
  assert bench.rule_scale(12.0, thin=4, wide=8) == 0.5
  assert bench.rule_scale(float('nan'), thin=4, wide=8) == 1.0


class _Stub:
  """A predictor at one scale: its map is the label, blurred into the next rows at scale 1."""

  def __init__(self, scale, threshold=0.5):
    self.scale, self.threshold = scale, threshold

  def __call__(self, image):
    gt = image[..., 0] > 127
    if self.scale == 1.0:  # a thin crack predicted three times too wide
      return np.maximum(gt, np.roll(gt, 1, 0) | np.roll(gt, -1, 0)).astype(np.float32)
    return gt.astype(np.float32)  # the other scales: exact


def test_score_set_counts_each_scale_and_the_rule_pools_each_photos_choice(bench):
  thin, wide = _crack(1), _crack(12)
  source = [
    {'image': np.repeat((m * 255).astype(np.uint8)[..., None], 3, -1), 'mask': m[..., None]}
    for m in (thin, wide)
  ]
  predictors = {s: _Stub(s) for s in (0.5, 1.0, 2.0)}
  row = bench.score_set(predictors, source, [0, 1], thin=4, wide=8)
  assert row['photos'] == 2 and row['f1_at_scale']['2.0'] == 1.0
  assert row['f1_at_scale']['1.0'] < 1.0  # the thin crack's two extra rows
  # Predicted 3 px wide: the thin photo goes to scale 2 (exact); the wide one (14 px) to 0.5.
  assert row['rule_scales'] == {'0.5': 1, '2.0': 1} and row['f1_width_rule'] == 1.0


def test_medians_leave_out_photos_without_a_crack(bench):
  assert bench._median([float('nan'), 3.0, 5.0]) == 4.0
  assert bench._median([float('nan')]) is None  # written as null, never as NaN


# --choose: the downward rule's width, chosen on validation parts (issue 76 item 3).


def test_choose_refuses_a_test_split(bench):
  for spec in ('crack500:test', 'crackforest:test[:6]', 'deepcrack:TEST'):
    with pytest.raises(SystemExit) as e:
      bench.refuse_test_splits(['deepcrack:valid', spec])
    assert f'{spec}: a test split' in str(e.value.code) and 'deepcrack:valid' not in str(e.value)
  bench.refuse_test_splits(list(bench.VALIDATION))  # CrackForest's is train[58:]
  assert 'crackforest:train[58:]' in bench.VALIDATION


def test_choose_predicts_half_size_only_where_a_candidate_would_take_it(bench):
  thin, wide = _crack(3), _crack(13)
  source = [
    {'image': np.repeat(m[..., None] * 255, 3, -1).astype(np.uint8), 'mask': m[..., None]}
    for m in (thin, wide)
  ]
  halves = []

  def half(image):
    halves.append(image)
    return (image[..., 0] > 127).astype(np.float32)

  plain = lambda image: (image[..., 0] > 127).astype(np.float32)  # noqa: E731
  out = bench.rule_photos(plain, half, source, [0, 1], 0.5, narrowest=4.0)
  assert len(halves) == 1  # the wide photo's; the thin one (3 px) stays under every candidate
  (thin_found, thin_plain, thin_half), (wide_found, _, wide_half) = out
  assert thin_found.width_px == 3 and thin_found.skeleton_pixels >= 70 and thin_half is None
  assert wide_found.width_px == 13 and wide_half is not None
  assert list(thin_plain) == [3 * 80, 0, 0]


def _figures(width, plain, half, skeleton=80):
  return (
    bench_measured(width, skeleton),
    np.array(plain),
    None if half is None else np.array(half),
  )


def bench_measured(width, skeleton):
  from crackjax.evaluation import width_rule

  return width_rule.Measured(width, skeleton)


def test_choose_scores_every_width_from_the_two_maps_and_takes_the_best_mean(bench):
  photos = {
    # Wide cracks (median 9 px at scale 1): found whole only at half size.
    'wide:valid': [_figures(9.0, (10, 0, 30), (35, 5, 5)), _figures(3.0, (20, 0, 0), None)],
    # Thin ones drawn 5 px wide: half size loses them.
    'thin:valid': [_figures(5.0, (30, 10, 0), (5, 5, 25)), _figures(None, (0, 4, 0), None, 0)],
  }
  rows = bench.rule_rows(photos, [4.0, 6.0, 10.0])
  by_width = {r['width_rule']: r for r in rows}
  assert [r['width_rule'] for r in rows] == [None, 4.0, 6.0, 10.0]
  off, at6 = by_width[None], by_width[6.0]
  assert off['f1']['wide:valid'] == pytest.approx(2 * 30 / (2 * 30 + 0 + 30))
  assert at6['f1']['wide:valid'] == pytest.approx(2 * 55 / (2 * 55 + 5 + 5))
  assert at6['f1']['thin:valid'] == off['f1']['thin:valid']  # the 5 px photo stays
  assert by_width[4.0]['halved'] == 2 and at6['halved'] == 1 and by_width[10.0]['halved'] == 0
  assert by_width[10.0]['f1'] == off['f1']
  assert bench.best_row(rows)['width_rule'] == 6.0
  # A tie goes to off, then to the wider width (fewer photos changed).
  assert bench.best_row([by_width[10.0], off])['width_rule'] is None
  tied = [{**at6, 'width_rule': 5.0}, at6]
  assert bench.best_row(tied)['width_rule'] == 6.0
  # Too little skeleton: a wide median over a few pixels takes no photo to half size.
  few = {'x:valid': [_figures(20.0, (1, 0, 0), (1, 0, 0), skeleton=5)]}
  assert all(r['halved'] == 0 for r in bench.rule_rows(few, [4.0]))
