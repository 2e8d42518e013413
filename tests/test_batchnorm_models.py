"""SegNet, DeepCrack and DeepLab v3+ (Li et al. 2021, Tables VII-VIII): parameter counts and
structure (built abstractly, no full-size weights), their BatchNorm behaviour, SegNet's pooling
indices, and SegNet's median-frequency balanced loss (output shapes in both modes:
tests/test_contracts.py)."""

import functools
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from crackjax import losses
from crackjax.losses import frequency
from crackjax.models import apply_model, model_from_config
from crackjax.models.batchnorm import max_pool_with_indices, max_unpool
from crackjax.models.deepcrack import DeepCrack
from crackjax.models.deeplabv3plus import DeepLabV3Plus
from crackjax.models.segnet import SegNet
from tests import fixtures

# A comparison model's own checks: the slow tier (tests/fixtures.FAST_TIER_MODELS).
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
  ('model', 'exact', 'paper'),
  [
    # VGG16 convs 14,714,688 + BN 8,448; decoder convs 14,712,448 + BN 7,424; 3x3 64 -> n.
    (SegNet(), 29_444_162, 29.44),
    (SegNet(n_classes=1), 29_443_585, 29.44),
    # The SegNet body without its classifier, conv1_1_D 64 -> 64 + BN, five side 1x1s, fusion.
    (DeepCrack(), 29_482_571, 29.48),
    # ResNet-50 without fc 23,508,032; ASPP 15,535,104; decoder 1,303,648; 1x1 256 -> n.
    (DeepLabV3Plus(), 40_347_298, 40.35),
    (DeepLabV3Plus(n_classes=1), 40_347_041, 40.35),
    (DeepLabV3Plus(output_stride=8), 40_347_298, 40.35),
  ],
  ids=['segnet', 'segnet-1class', 'deepcrack', 'deeplabv3plus', 'deeplab-1class', 'deeplab-os8'],
)
def test_parameter_counts_match_the_paper(model, exact, paper):
  variables = fixtures.abstract_variables(model)
  n = fixtures.tree_size(variables['params'])
  assert n == exact
  assert round(n / 1e6, 2) == paper  # the tables print millions to two decimals
  # The running mean and variance are state, not parameters: one of each per BN scale.
  leaves = jax.tree_util.tree_leaves_with_path(variables['params'])
  scales = [x for path, x in leaves if 'scale' in str(path)]
  assert fixtures.tree_size(variables['batch_stats']) == 2 * fixtures.tree_size(scales) > 0


def test_built_from_config():
  config = ml_collections.ConfigDict(
    {'name': 'deeplabv3plus', 'width_scale': 0.25, 'blocks': [1, 1, 1, 1], 'dtype': 'bfloat16'}
  )
  model = model_from_config(config.to_dict())
  assert model.blocks == (1, 1, 1, 1) and model.dtype == jnp.bfloat16
  with pytest.raises(ValueError, match='n_classes must be 1 or 2'):
    model_from_config({'name': 'segnet', 'n_classes': 21})
  with pytest.raises(ValueError, match='output_stride'):
    DeepLabV3Plus(output_stride=32)
  with pytest.raises(ValueError, match='blocks'):
    DeepLabV3Plus(blocks=(3, 4, 6))


def test_structure_follows_the_papers():
  params = fixtures.abstract_variables(SegNet())['params']
  assert params['conv1_1']['conv']['kernel'].shape == (3, 3, 3, 64)
  assert params['conv4_1_D']['conv']['kernel'].shape == (3, 3, 512, 256)
  assert params['conv1_2_D']['conv']['kernel'].shape == (3, 3, 64, 64)
  assert params['conv1_1_D']['kernel'].shape == (3, 3, 64, 2)  # the classifier, no BN
  params = fixtures.abstract_variables(DeepCrack())['params']
  assert params['conv1_1_D']['conv']['kernel'].shape == (3, 3, 64, 64)  # ends 64 -> 64
  sides = [params[f'side{k}']['kernel'].shape[2] for k in range(1, 6)]
  assert sides == [64 + 64, 128 + 64, 256 + 128, 512 + 256, 512 + 512]
  assert params['fuse']['kernel'].shape == (1, 1, 5, 1)
  params = fixtures.abstract_variables(DeepLabV3Plus())['params']
  assert 'bias' not in params['aspp1']['conv']  # no bias before a BatchNorm
  assert params['aspp1']['conv']['kernel'].shape == (3, 3, 2048, 256)
  assert params['aspp_project']['conv']['kernel'].shape == (1, 1, 1280, 256)
  assert params['low_level']['conv']['kernel'].shape == (1, 1, 256, 48)
  assert params['decoder_conv1']['conv']['kernel'].shape == (3, 3, 304, 256)
  assert params['decoder_conv2']['conv']['kernel'].shape == (3, 3, 256, 256)
  assert params['classifier']['kernel'].shape == (1, 1, 256, 2)
  assert sum(k.startswith('layer') for k in params) == 3 + 4 + 6 + 3
  # Five 2x2 poolings; DeepLab v3+ and its output stride 16.
  assert SegNet().input_multiple == DeepCrack().input_multiple == 32
  assert DeepLabV3Plus().input_multiple == 16


def test_bfloat16_compute_keeps_float32_outputs_and_parameters():
  model = DeepCrack(dtype=jnp.bfloat16, width_scale=1 / 16)
  variables = fixtures.abstract_variables(model, (1, 32, 32, 3))
  assert {x.dtype for x in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
  out = jax.eval_shape(model.apply, variables, jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32))
  assert {x.dtype for x in jax.tree.leaves(out)} == {jnp.dtype(jnp.float32)}


# ------------------------------------------------------------------------- pooling indices


def test_max_pool_keeps_indices_and_unpool_puts_values_back():
  x = jnp.array(
    [[1.0, 5.0, 2.0, 2.0], [3.0, 4.0, 2.0, 0.0], [0.0, 0.0, 9.0, 1.0], [-1.0, 0.0, 1.0, 9.0]]
  ).reshape(1, 4, 4, 1)
  pooled, index = max_pool_with_indices(x)
  np.testing.assert_array_equal(pooled[0, ..., 0], [[5.0, 2.0], [0.0, 9.0]])
  # top-right; a tie (2, 2, 2) keeps the first; a tie (0, 0, 0) the first; the first 9.
  np.testing.assert_array_equal(index[0, ..., 0], [[1, 0], [0, 0]])
  np.testing.assert_array_equal(
    max_unpool(pooled, index)[0, ..., 0],
    [[0.0, 5.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 9.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
  )
  # The gradient reaches the kept maximum only (as PyTorch's max_pool2d with indices).
  grad = jax.grad(lambda x: jnp.sum(max_pool_with_indices(x)[0]))(x)
  np.testing.assert_array_equal(
    grad[0, ..., 0], [[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
  )


def test_unpool_matches_nn_max_pool_values():
  x = jax.random.normal(jax.random.key(0), (2, 8, 12, 3))
  pooled, index = max_pool_with_indices(x)
  np.testing.assert_array_equal(
    pooled, jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), 'VALID')
  )
  restored = max_unpool(pooled, index)
  assert restored.shape == x.shape
  # Every window holds its maximum at the original place and zeros elsewhere.
  np.testing.assert_array_equal(jnp.where(restored != 0, x, 0), restored)
  assert int(jnp.sum(restored != 0)) == pooled.size


# ------------------------------------------------------------------------------ BatchNorm


def test_train_mode_uses_batch_statistics_and_eval_mode_the_running_averages():
  model = SegNet(width_scale=1 / 16)
  images = jax.random.uniform(jax.random.key(1), (3, 32, 32, 3))
  # Image 0 beside image 1, and beside image 2: one batch size, so one compilation per mode.
  x, other = images[:2], images[::2]
  variables = jax.jit(model.init)(jax.random.key(0, impl='rbg'), x[:1])
  params, stats = variables['params'], variables['batch_stats']

  @functools.partial(jax.jit, static_argnames='train')
  def apply(stats, x, train):
    return apply_model(model.apply, params, x, batch_stats=stats, train=train)

  out, new_stats = apply(stats, x, train=True)
  beside_other, _ = apply(stats, other, train=True)
  pair, same = apply(new_stats, x, train=False)
  pair_other, _ = apply(new_stats, other, train=False)
  # Running averages move towards the batch's statistics (PyTorch's momentum 0.1).
  conv = jax.lax.conv_general_dilated(
    x,
    params['conv1_1']['conv']['kernel'],
    (1, 1),
    'SAME',
    dimension_numbers=('NHWC', 'HWIO', 'NHWC'),
  )
  conv = conv + params['conv1_1']['conv']['bias']
  np.testing.assert_allclose(
    new_stats['conv1_1']['bn']['mean'], 0.1 * conv.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-6
  )
  # Training mode: an image's output depends on the rest of the batch ...
  assert not np.allclose(beside_other[0], out[0], atol=1e-5)
  # ... evaluation mode: it does not, and the statistics come back unchanged.
  np.testing.assert_allclose(pair_other[0], pair[0], rtol=1e-5, atol=1e-5)
  jax.tree.map(np.testing.assert_array_equal, same, new_stats)


def test_apply_model_calls_models_without_batch_norm_as_before():
  calls = []

  def apply_fn(variables, images, **kwargs):
    calls.append((set(variables), kwargs))
    if kwargs.get('mutable'):
      return 'out', {'batch_stats': 'new'}
    return 'out'

  for train in (True, False):
    for empty in (None, {}):
      assert apply_model(apply_fn, 'p', 'x', batch_stats=empty, train=train) == ('out', empty)
  # Without batch statistics: apply_fn({'params': params}, images), no `train` argument.
  assert calls == [({'params'}, {})] * 4
  calls.clear()
  assert apply_model(apply_fn, 'p', 'x', batch_stats={'a': 1}, train=True) == ('out', 'new')
  assert apply_model(apply_fn, 'p', 'x', batch_stats={'a': 1}) == ('out', {'a': 1})
  assert calls == [
    ({'params', 'batch_stats'}, {'train': True, 'mutable': ['batch_stats']}),
    ({'params', 'batch_stats'}, {'train': False}),
  ]


# ---------------------------------------------------------------- median-frequency balancing

# Two 2 x 2 images: one crack pixel in the first, none in the second.
LABELS = jnp.zeros((2, 2, 2, 1)).at[0, 0, 0, 0].set(1.0)


def test_segnet_frequencies_and_weights_by_hand():
  f_crack, f_background = frequency.class_frequencies(LABELS)
  # Crack: 1 pixel of the 4 of the one image containing crack; background: 7 of 8.
  assert float(f_crack) == pytest.approx(0.25)
  assert float(f_background) == pytest.approx(0.875)
  w_crack, w_background = frequency.median_frequency_weights(f_crack, f_background)
  # median = (0.25 + 0.875) / 2 = 0.5625
  assert float(w_crack) == pytest.approx(0.5625 / 0.25)  # 2.25
  assert float(w_background) == pytest.approx(0.5625 / 0.875)
  # A class absent from the batch: the present one has weight 1.
  weights = frequency.median_frequency_weights(*frequency.class_frequencies(jnp.zeros((2, 4))))
  assert [float(w) for w in weights] == [1.0, 1.0]


def test_median_frequency_loss_by_hand():
  loss_fn = losses.loss_from_config({'name': 'median_frequency'})
  loss, metrics = loss_fn(jnp.zeros_like(LABELS), LABELS)
  # Every pixel costs ln 2 times its class weight: (2.25 + 7 * 0.642857...) / 8 = 0.84375.
  assert float(loss) == pytest.approx(0.84375 * math.log(2), rel=1e-6)
  assert float(metrics['w_crack']) == pytest.approx(2.25)

  logits = jnp.array([2.0, -1.0, 0.5, 1.0, -3.0, 0.0, 0.25, 4.0]).reshape(LABELS.shape)
  z, y = np.asarray(logits).ravel(), np.asarray(LABELS).ravel()
  p = 1 / (1 + np.exp(-z))
  w = np.where(y == 1, 2.25, 0.5625 / 0.875)
  expected = np.mean(-w * (y * np.log(p) + (1 - y) * np.log(1 - p)))
  assert float(loss_fn(logits, LABELS)[0]) == pytest.approx(expected, rel=1e-6)
  assert float(jax.jit(loss_fn)(logits, LABELS)[0]) == pytest.approx(expected, rel=1e-6)

  # The gradient, with the weights constant: (w_bg (1 - y) p - w_crack y (1 - p)) / N.
  grad = jax.grad(lambda z: loss_fn(z, LABELS)[0])(logits)
  np.testing.assert_allclose(
    np.asarray(grad).ravel(), w * ((1 - y) * p - y * (1 - p)) / 8, rtol=1e-5
  )


def test_fixed_crack_frequency_and_two_class_softmax():
  loss_fn = frequency.median_frequency(crack_frequency=0.2)
  _, metrics = loss_fn(jnp.zeros_like(LABELS), LABELS)
  # median of (0.2, 0.8) is 0.5: weights 0.5 / 0.2 and 0.5 / 0.8, whatever the batch.
  assert float(metrics['w_crack']) == pytest.approx(2.5)
  assert float(metrics['w_background']) == pytest.approx(0.625)
  # The sigmoid of the two-class models' logit difference is their softmax: the loss on
  # z1 - z0 is the weighted softmax cross-entropy of (z0, z1).
  scores = jax.random.normal(jax.random.key(0), (*LABELS.shape[:3], 2))
  log_softmax = jax.nn.log_softmax(scores)
  y = LABELS[..., 0].astype(jnp.int32)
  softmax_ce = -jnp.where(y == 1, 2.5 * log_softmax[..., 1], 0.625 * log_softmax[..., 0])
  loss, _ = loss_fn(scores[..., 1:] - scores[..., :1], LABELS)
  assert float(loss) == pytest.approx(float(jnp.mean(softmax_ce)), rel=1e-5)


@pytest.mark.parametrize('bad', [0.0, 1.0, -0.1, float('nan'), True])
def test_bad_crack_frequency_names_the_field(bad):
  config = ml_collections.ConfigDict({'name': 'median_frequency', 'crack_frequency': bad})
  with pytest.raises(ValueError, match='config.loss.crack_frequency'):
    losses.loss_from_config(config.to_dict())
