"""Test-time scales and flip (issue 55): one pass at scale 1 is the plain prediction; other
scales and the mirror average maps resized back to the photo."""

from __future__ import annotations

import numpy as np
import pytest

from crackjax.deploy import predictor
from crackjax.evaluation import inference


def _image(h=40, w=56, seed=0):
  return np.random.default_rng(seed).random((h, w, 3)).astype(np.float32)


def test_scale_one_is_the_plain_prediction():
  image = _image()
  calls = []

  def predict(x):
    calls.append(x.shape)
    return x[..., 0] * 0.5 + x[..., 1] * 0.25

  out = inference.test_time_average(predict, image)
  np.testing.assert_array_equal(out, predict(image))
  assert calls[0] == image.shape


def test_scales_and_flip_average_resized_maps():
  image = _image()
  shapes = []

  def predict(x):
    shapes.append(x.shape[:2])
    # Depends on the column: a mirrored copy's map differs before it is mirrored back.
    return x[..., 0] + np.linspace(0, 1, x.shape[1])[None, :]

  out = inference.test_time_average(predict, image, scales=(0.5, 1.0), flip=True)
  assert out.shape == image.shape[:2] and out.dtype == np.float32
  assert shapes == [(20, 28), (20, 28), (40, 56), (40, 56)]
  # By hand: each copy's map, mirrored back and resized back, then their mean.
  maps = []
  for h, w in ((20, 28), (40, 56)):
    copy = inference.resize(image, h, w)
    maps.append(inference.resize(predict(copy), 40, 56))
    maps.append(inference.resize(predict(np.ascontiguousarray(copy[:, ::-1]))[:, ::-1], 40, 56))
  np.testing.assert_allclose(out, np.mean(maps, axis=0), rtol=1e-6)
  # The column term is mirrored back: the mirrored scale-1 map is not the plain one.
  assert not np.allclose(maps[2], maps[3])


def test_bad_scales_named():
  for bad in ((), (0.0,), (5.0,), (True,)):
    with pytest.raises(ValueError, match='test-time scales'):
      inference.check_test_time(bad, False)
  with pytest.raises(ValueError, match='--scales=a: expected numbers'):
    inference.test_time_of(['a'], None, {})
  assert inference.test_time_of(None, None, {}) == ((1.0,), False)
  assert inference.test_time_of(None, None, {'scales': [0.5, 1], 'flip': True}) == (
    (0.5, 1.0),
    True,
  )
  assert inference.test_time_of(['1'], False, {'scales': [0.5], 'flip': True}) == ((1.0,), False)


def test_predictor_and_evaluation_path_at_scale_one(smoke_run):
  import crackjax

  photo = (np.random.default_rng(1).random((48, 72, 3)) * 255).astype(np.uint8)
  plain = crackjax.Predictor.from_workdir(smoke_run)
  assert (plain.scales, plain.flip) == ((1.0,), False)  # the run's eval group's defaults
  one = crackjax.Predictor.from_workdir(smoke_run, scales=(1.0,), flip=False)
  np.testing.assert_array_equal(plain(photo), one(photo))
  multi = crackjax.Predictor.from_workdir(smoke_run, scales=(0.5, 1.0), flip=True)
  out = multi(photo)
  assert out.shape == photo.shape[:2] and 0 <= out.min() and out.max() <= 1
  assert not np.array_equal(out, plain(photo))
  # The evaluation's path: the same map at scale 1, with or without the arguments.
  run = plain
  image = photo.astype(np.float32) / 255
  [a] = inference.predict_probabilities(run.params, run.model, [image])
  [b] = inference.predict_probabilities(run.params, run.model, [image], scales=(1.0,))
  np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match='test-time scales'):
    predictor.Predictor(run.model, run.params, scales=(0.0,))
