"""HED and RCF (Li et al. 2021, Table V) and their deeply supervised losses."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from crackjax import losses
from crackjax.losses import side as side_losses
from crackjax.models.hed import HED
from crackjax.models.rcf import RCF

# A comparison model's own checks: the slow tier (tests/fixtures.FAST_TIER_MODELS).
pytestmark = pytest.mark.slow


def _num_params(model):
  params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
  return sum(x.size for x in jax.tree.leaves(params))


@pytest.mark.parametrize(
  ('model', 'exact', 'paper'),
  [
    # VGG16 convolutions 14,714,688 + five side 1x1s 1,477 + fusion 6.
    (HED(), 14_716_171, 14.72e6),
    # VGG16 14,714,688 + thirteen 1x1 to 21 88,977 + five 21 -> 1 110 + fusion 6.
    (RCF(), 14_803_781, 14.8e6),
  ],
)
def test_parameter_counts_match_table_v(model, exact, paper):
  n = _num_params(model)
  assert n == exact
  assert abs(n - paper) / paper < 1e-3


def test_bfloat16_compute_keeps_float32_outputs():
  model = HED(dtype=jnp.bfloat16)
  x = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
  params = jax.eval_shape(model.init, jax.random.key(0), x)
  out = jax.eval_shape(model.apply, params, x)
  assert out['logits'].dtype == jnp.float32
  assert all(s.dtype == jnp.float32 for s in out['side_logits'])


def test_input_multiple_and_structure():
  assert HED().input_multiple == 16
  assert RCF().input_multiple == 8
  with pytest.raises(ValueError, match='multiples of 16'):
    jax.eval_shape(HED().init, jax.random.key(0), jnp.zeros((1, 40, 48, 3)))
  params = jax.eval_shape(RCF().init, jax.random.key(0), jnp.zeros((1, 32, 32, 3)))['params']
  assert params['conv5_3_down']['kernel'].shape == (1, 1, 512, 21)
  assert params['side5']['kernel'].shape == (1, 1, 21, 1)
  assert params['fuse']['kernel'].shape == (1, 1, 5, 1)
  assert HED(width_scale=0.25).widths == (16, 32, 64, 128, 128)


def test_fusion_starts_as_the_mean_of_the_side_maps():
  # The tiny HED of the training test below (one jitted init, one jitted apply).
  model, params, x, _ = _tiny('HED')
  out = jax.jit(model.apply)(params, x)
  mean = sum(out['side_logits']) / 5
  np.testing.assert_allclose(out['logits'], mean, rtol=1e-5, atol=1e-6)


_LOSSES = {
  'hed_balanced': lambda: side_losses.hed_balanced(),
  'rcf_robust': lambda: side_losses.rcf_robust(),
  'deepcrack_plain': lambda: side_losses.deepcrack_plain(),
  'side_exp_wce': lambda: side_losses.side_exp_wce(beta=0.75),
}


@functools.cache
def _tiny(name: str):
  """A tiny model (widths 4 ... 32), its initial parameters and a synthetic batch."""
  # conv_impl='xla' and rbg keys: the same function, compiled several times faster on the CPU.
  model = {'HED': HED, 'RCF': RCF}[name](width_scale=1 / 16, conv_impl='xla')
  images = jax.random.uniform(jax.random.key(1), (2, 32, 32, 3))
  labels = (jax.random.uniform(jax.random.key(2), (2, 32, 32, 1)) < 0.1).astype(jnp.float32)
  params = jax.jit(model.init)(jax.random.key(0, impl='rbg'), images)
  return model, params, images, labels


# A compilation each (6-12 s on 2 cores): the slow tier. HED with its own loss is left out, as
# tests/test_contracts.py trains every model a step with its own loss; every loss has its
# hand-computed values below and there.
_PAIRS = [
  pytest.param(m, loss, marks=pytest.mark.slow, id=f'{m}-{loss}')
  for m in ('HED', 'RCF')
  for loss in sorted(_LOSSES)
  if (m, loss) != ('HED', 'hed_balanced')
]


@pytest.mark.parametrize(('model_name', 'loss_name'), _PAIRS)
def test_tiny_model_trains_three_adam_steps(model_name, loss_name):
  model, params, images, labels = _tiny(model_name)
  loss_fn = _LOSSES[loss_name]()
  optimizer = optax.adam(1e-3)
  opt_state = optimizer.init(params)

  @jax.jit
  def step(params, opt_state):
    def objective(p):
      return loss_fn(model.apply(p, images), labels)

    (loss, metrics), grads = jax.value_and_grad(objective, has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, metrics

  for _ in range(3):
    params, opt_state, loss, metrics = step(params, opt_state)
    assert np.isfinite(float(loss))
    assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values())
  assert {f'side{k}_loss' for k in range(1, 6)} | {'fuse_loss'} <= set(metrics)


# 2x2 example: one crack pixel with logit 2, background logits -1, 0.5, 0.
_LOGITS = jnp.array([[2.0, -1.0], [0.5, 0.0]]).reshape(1, 2, 2, 1)
_LABELS = jnp.array([[1.0, 0.0], [0.0, 0.0]]).reshape(1, 2, 2, 1)


def _pos(z):  # -log sigmoid(z)
  return math.log1p(math.exp(-z))


def _neg(z):  # -log(1 - sigmoid(z))
  return math.log1p(math.exp(z))


def test_hed_balanced_hand_value():
  beta = 3 / 4  # |Y-| / |Y|
  expected = (beta * _pos(2.0) + (1 - beta) * (_neg(-1.0) + _neg(0.5) + _neg(0.0))) / 4
  loss, metrics = side_losses.hed_balanced_map(_LOGITS, _LABELS)
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  np.testing.assert_allclose(metrics['beta'], beta)
  # The documented relation: (1 - beta) * weighted_bce with q = beta / (1 - beta).
  wce = jnp.mean(losses.weighted_bce(_LOGITS, _LABELS, beta / (1 - beta)))
  np.testing.assert_allclose(loss, (1 - beta) * wce, rtol=1e-6)


def test_rcf_robust_hand_value_ignores_uncertain_pixels():
  labels = jnp.array([[1.0, 0.3], [0.0, 0.0]]).reshape(1, 2, 2, 1)  # 0.3 < eta: ignored
  beta, alpha = 2 / 3, 1.1 * 1 / 3  # |Y-| / (|Y+| + |Y-|), lam |Y+| / (|Y+| + |Y-|)
  expected = (beta * _pos(2.0) + alpha * (_neg(0.5) + _neg(0.0))) / 4
  loss, metrics = side_losses.rcf_robust_map(_LOGITS, labels, eta=0.5, lam=1.1)
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  np.testing.assert_allclose(metrics['rcf_beta'], beta, rtol=1e-6)
  np.testing.assert_allclose(metrics['rcf_alpha'], alpha, rtol=1e-6)
  # Binary labels with lam = 1 are exactly HED's balanced loss.
  hed, _ = side_losses.hed_balanced_map(_LOGITS, _LABELS)
  rcf, _ = side_losses.rcf_robust_map(_LOGITS, _LABELS, lam=1.0)
  np.testing.assert_allclose(rcf, hed, rtol=1e-6)


def _outputs():
  keys = jax.random.split(jax.random.key(3), 6)
  maps = [jax.random.normal(k, (1, 2, 2, 1)) for k in keys]
  return {'logits': maps[0], 'side_logits': tuple(maps[1:])}


@pytest.mark.parametrize(
  ('factory', 'per_map'),
  [
    (side_losses.hed_balanced, lambda z, y: side_losses.hed_balanced_map(z, y)[0]),
    (side_losses.rcf_robust, lambda z, y: side_losses.rcf_robust_map(z, y)[0]),
    (side_losses.deepcrack_plain, lambda z, y: jnp.mean(losses.weighted_bce(z, y, 1.0))),
    (
      lambda **kw: side_losses.side_exp_wce(beta=0.75, **kw),
      lambda z, y: losses.holistic(weighting='exp', beta=0.75)(z, y)[0],
    ),
  ],
)
def test_deep_supervision_sums_the_per_map_losses(factory, per_map):
  outputs = _outputs()
  maps = (outputs['logits'], *outputs['side_logits'])
  each = [float(per_map(m, _LABELS)) for m in maps]
  loss, metrics = factory()(outputs, _LABELS)
  np.testing.assert_allclose(loss, sum(each), rtol=1e-6)
  np.testing.assert_allclose(metrics['fuse_loss'], each[0], rtol=1e-6)
  for k in range(1, 6):
    np.testing.assert_allclose(metrics[f'side{k}_loss'], each[k], rtol=1e-6)
  weighted, _ = factory(side_weight=0.5, fuse_weight=2.0)(outputs, _LABELS)
  np.testing.assert_allclose(weighted, 2.0 * each[0] + 0.5 * sum(each[1:]), rtol=1e-6)


def test_deep_supervision_accepts_scalar_per_map_losses_and_plain_arrays():
  loss_fn = side_losses.deep_supervision(lambda z, y: jnp.sum(z), side_weight=1.0)
  outputs = _outputs()
  loss, metrics = loss_fn(outputs, _LABELS)
  expected = sum(float(jnp.sum(m)) for m in (outputs['logits'], *outputs['side_logits']))
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  loss, metrics = loss_fn(_LOGITS, _LABELS)  # no side outputs: the fused map only
  np.testing.assert_allclose(loss, 1.5)
  assert set(metrics) == {'fuse_loss'}


@pytest.mark.parametrize(
  ('factory', 'kwargs', 'field'),
  [
    (side_losses.hed_balanced, {'side_weight': -1.0}, 'side_weight'),
    (side_losses.deepcrack_plain, {'fuse_weight': float('nan')}, 'fuse_weight'),
    (side_losses.rcf_robust, {'eta': 0.0}, 'eta'),
    (side_losses.rcf_robust, {'eta': 1.5}, 'eta'),
    (side_losses.rcf_robust, {'lam': -1.1}, 'lam'),
    (side_losses.side_exp_wce, {'beta': 0.0}, 'beta'),
    (side_losses.side_exp_wce, {'base': -10.0}, 'base'),
    (side_losses.side_exp_wce, {'b': -1.0}, 'b'),
  ],
)
def test_bad_values_name_the_config_field(factory, kwargs, field):
  with pytest.raises(ValueError, match=f'config.loss.{field}='):
    factory(**kwargs)


def test_factories_take_keyword_arguments_only():
  with pytest.raises(TypeError):
    side_losses.side_exp_wce(0.75)
