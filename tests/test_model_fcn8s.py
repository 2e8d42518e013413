"""FCN-8s: parameter count (Li et al. 2021, Table V), shapes, bilinear start (a train step:
tests/test_contracts.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crackjax.models.fcn8s import FCN8s, bilinear_kernel

# A comparison model's own checks: the slow tier (tests/fixtures.FAST_TIER_MODELS).
pytestmark = pytest.mark.slow

PAPER_PARAMS = 134.27e6


def _abstract_params(model, shape=(1, 64, 64, 3)):
  return jax.eval_shape(model.init, jax.random.key(0), jnp.zeros(shape))


def _count(params):
  return sum(x.size for x in jax.tree.leaves(params))


def test_parameter_count_matches_the_paper():
  # Backbone 134,260,544 + head 4867 n + 288 n**2 (bias-free transposed convs).
  n_default = _count(_abstract_params(FCN8s()))
  assert n_default == 134_271_430
  assert abs(n_default - PAPER_PARAMS) / PAPER_PARAMS < 1e-3
  assert round(n_default / 1e6, 2) == 134.27
  assert _count(_abstract_params(FCN8s(n_classes=1))) == 134_265_699


# Any size (the paper's 320x480: tests/test_contracts.py), down to one pixel.
@pytest.mark.parametrize('shape', [(1, 100, 130, 3), (1, 1, 1, 3)])
def test_output_is_one_logit_at_input_size(shape):
  model = FCN8s()
  assert model.input_multiple == 1
  params = _abstract_params(model, shape)
  y = jax.eval_shape(model.apply, params, jnp.zeros(shape))
  assert y.shape == shape[:3] + (1,)
  assert y.dtype == jnp.float32


def test_layers_follow_caffe():
  params = _abstract_params(FCN8s())['params']
  assert params['conv1_1']['kernel'].shape == (3, 3, 3, 64)
  assert params['conv5_3']['kernel'].shape == (3, 3, 512, 512)
  assert params['fc6']['kernel'].shape == (7, 7, 512, 4096)
  assert params['fc7']['kernel'].shape == (1, 1, 4096, 4096)
  assert params['score_pool3']['kernel'].shape == (1, 1, 256, 2)
  for name, k in [('upscore2', 4), ('upscore_pool4', 4), ('upscore8', 16)]:
    assert set(params[name]) == {'kernel'}  # no bias, as Caffe's bias_term: false
    assert params[name]['kernel'].shape == (k, k, 2, 2)
  # width_scale shrinks the fully connected layers too.
  fc6 = _abstract_params(FCN8s(width_scale=1 / 16))['params']['fc6']['kernel']
  assert fc6.shape == (7, 7, 32, 256)


def test_upsampling_kernels_start_bilinear():
  # The narrowest model on a tiny input: the up-sampling layers have n_classes channels at
  # any width, and conv1_1's 100-pixel padding makes any input a 200+ pixel map.
  model = FCN8s(width_scale=1 / 64)
  params = jax.jit(model.init)(jax.random.key(0, impl='rbg'), jnp.zeros((1, 8, 8, 3)))['params']
  np.testing.assert_allclose(bilinear_kernel(4), np.outer(*2 * [[0.25, 0.75, 0.75, 0.25]]))
  for name, k in [('upscore2', 4), ('upscore_pool4', 4), ('upscore8', 16)]:
    kernel = np.asarray(params[name]['kernel'])
    for i in range(2):
      for o in range(2):
        expected = bilinear_kernel(k) if i == o else np.zeros((k, k))
        np.testing.assert_allclose(kernel[:, :, i, o], expected)
  # Each output phase sums to 1: a constant map stays constant away from the borders.
  for k, s in [(4, 2), (16, 8)]:
    kernel = bilinear_kernel(k)
    for p in range(s):
      for q in range(s):
        assert np.isclose(kernel[p::s, q::s].sum(), 1)


def test_rejects_more_than_two_classes():
  with pytest.raises(ValueError, match='n_classes'):
    FCN8s(n_classes=21)
