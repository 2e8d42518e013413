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
