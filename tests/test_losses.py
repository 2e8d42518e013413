"""Losses against hand-computed values, Appendix A's gradient, jit, and degenerate batches."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crackjax import losses
from crackjax.configs import base


def test_background_ratio_is_laplace_smoothed():
  labels = jnp.array([[1, 0, 0, 0], [0, 0, 0, 0]])  # 1 crack, 7 background
  alpha = losses.background_ratio(labels)
  assert alpha == pytest.approx(8 / 10)
  # alpha / (1 - alpha) = (N_bg + 1) / (N_crack + 1) = 8 / 2.
  assert losses.q_xie(alpha) == pytest.approx(4.0)


def test_q_families_hand_values():
  alpha = jnp.float32(0.8)  # odds 4
  assert losses.q_xie(alpha) == pytest.approx(4.0)
  assert losses.q_power(alpha, 0.5, 0.5) == pytest.approx(0.5 * 2.0)
  assert losses.q_log(alpha, 0.9) == pytest.approx(0.9 * math.log(4.0))
  assert losses.q_exp(alpha, 0.75) == pytest.approx(0.75 * 10**0.6, rel=1e-6)
  assert losses.q_exp(alpha, 1.0, base=2.0, gamma=0.5) == pytest.approx(2**0.3, rel=1e-6)


@pytest.mark.parametrize('beta', [0.25, 0.75, 1.0])
def test_q_exp_bounded_by_ten_beta(beta):
  alphas = jnp.linspace(1e-6, 1.0, 1001)
  q = losses.q_exp(alphas, beta)
  assert float(jnp.max(q)) <= 10 * beta * (1 + 1e-6)
  assert float(q[-1]) == pytest.approx(10 * beta, rel=1e-6)


def test_weighted_bce_hand_values():
  logits = jnp.array([0.0, 2.0, -1.0, 3.0])
  labels = jnp.array([1.0, 1.0, 0.0, 0.0])
  q = 3.0
  sig = lambda z: 1 / (1 + math.exp(-z))
  expected = [
    -q * math.log(sig(0.0)),
    -q * math.log(sig(2.0)),
    -math.log(1 - sig(-1.0)),
    -math.log(1 - sig(3.0)),
  ]
  np.testing.assert_allclose(losses.weighted_bce(logits, labels, q), expected, rtol=1e-6)


def test_weighted_bce_stable_for_large_logits():
  logits = jnp.array([-200.0, 200.0, 200.0, -200.0])
  labels = jnp.array([1.0, 0.0, 1.0, 0.0])
  out = losses.weighted_bce(logits, labels, 2.0)
  np.testing.assert_allclose(out, [400.0, 200.0, 0.0, 0.0], rtol=1e-6, atol=1e-6)


def test_gradient_matches_appendix_a():
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(2, 8, 8, 1)) * 3, jnp.float32)
  labels = jnp.asarray(rng.random((2, 8, 8, 1)) < 0.2, jnp.float32)
  q = losses.q_exp(losses.background_ratio(labels), 0.75)
  grad = jax.grad(lambda z: jnp.sum(losses.weighted_bce(z, labels, q)))(logits)
  p = jax.nn.sigmoid(logits)
  expected = (1 - labels) * p - q * labels * (1 - p)  # eq. (pde2)
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


def test_q_is_constant_for_the_gradient():
  # Even when q is computed from the same labels inside the differentiated function,
  # only dl/dz above contributes (labels are not differentiated, q is stop-gradient).
  logits = jnp.array([0.3, -0.2])
  grad_q = jax.grad(lambda q: jnp.sum(losses.weighted_bce(logits, jnp.array([1.0, 0.0]), q)))
  assert float(grad_q(2.0)) == 0.0


def test_jaccard_distance_hand_value():
  logits = jnp.array([0.0, 0.0, 100.0, -100.0])  # p = .5, .5, 1, 0
  labels = jnp.array([1.0, 0.0, 1.0, 0.0])
  inter = 0.5 + 1.0
  union = 2.0 + 2.0 - inter
  expected = 1 - (inter + 1.0) / (union + 1.0)
  assert float(losses.jaccard_distance(logits, labels, 1.0)) == pytest.approx(expected, rel=1e-6)
  # Perfect prediction gives distance 0.
  assert float(losses.jaccard_distance(jnp.array([50.0, -50.0]), jnp.array([1.0, 0.0]))) == (
    pytest.approx(0.0, abs=1e-6)
  )


def holistic_value(logits, labels, **kwargs):
  """The scalar of the train-step loss `losses.holistic(**kwargs)`."""
  return losses.holistic(**kwargs)(logits, labels)[0]


def test_holistic_is_a_wce_plus_b_jaccard():
  rng = np.random.default_rng(1)
  logits = jnp.asarray(rng.normal(size=(2, 4, 4, 1)), jnp.float32)
  labels = jnp.asarray(rng.random((2, 4, 4, 1)) < 0.3, jnp.float32)
  q = losses.q_exp(losses.background_ratio(labels), 0.75)
  wce = jnp.mean(losses.weighted_bce(logits, labels, q))
  jac = losses.jaccard_distance(logits, labels)
  got = losses.holistic_loss(logits, labels, q, a=0.5, b=1.0)
  assert float(got) == pytest.approx(float(0.5 * wce + jac), rel=1e-6)
  loss, metrics = losses.holistic(weighting='exp', a=0.5, b=1.0, beta=0.75)(logits, labels)
  assert float(loss) == float(got)
  assert float(metrics['q']) == float(q)
  assert float(metrics['alpha']) == float(losses.background_ratio(labels))
  ce = holistic_value(logits, labels, weighting='ce', a=1.0, b=0.0)
  assert float(ce) == pytest.approx(float(jnp.mean(losses.weighted_bce(logits, labels, 1.0))))


def test_unknown_weighting_is_a_clear_error():
  with pytest.raises(ValueError, match=r"'expo'.*\['ce', 'exp', 'log', 'power', 'xie'\]"):
    losses.holistic(weighting='expo')


def test_loss_from_config():
  config = base.get_config()
  config.loss.weighting = 'power'
  config.loss.gamma = 0.5
  labels = jnp.asarray(np.random.default_rng(5).random((2, 4, 4, 1)) < 0.2, jnp.float32)
  loss, metrics = losses.loss_from_config(config.loss.to_dict())(jnp.zeros_like(labels), labels)
  q = losses.q_power(losses.background_ratio(labels), 1.0, 0.5)
  assert float(metrics['q']) == pytest.approx(float(q))
  assert np.isfinite(float(loss))


def test_loss_from_config_errors_name_the_field():
  config = base.get_config()
  config.loss.name = 'focal'
  with pytest.raises(ValueError, match=r"config.loss.name='focal'.*holistic"):
    losses.loss_from_config(config.loss.to_dict())
  config = base.get_config()
  with config.unlocked():
    config.loss.alpha = 0.25
  with pytest.raises(ValueError, match=r"\['alpha'\].*'holistic'"):
    losses.loss_from_config(config.loss.to_dict())


@pytest.mark.parametrize('weighting', sorted(losses.WEIGHTINGS))
@pytest.mark.parametrize('fill', [0.0, 1.0])
def test_all_background_and_all_crack_batches_are_finite(weighting, fill):
  logits = jnp.asarray(np.random.default_rng(2).normal(size=(2, 16, 16, 1)), jnp.float32)
  labels = jnp.full((2, 16, 16, 1), fill)
  fn = lambda z: holistic_value(z, labels, weighting=weighting, a=1.0, b=1.0, beta=0.75, gamma=0.5)
  value, grad = jax.value_and_grad(fn)(logits)
  assert np.isfinite(float(value))
  assert np.all(np.isfinite(np.asarray(grad)))


@pytest.mark.parametrize('weighting', sorted(losses.WEIGHTINGS))
def test_same_under_jit(weighting):
  rng = np.random.default_rng(3)
  logits = jnp.asarray(rng.normal(size=(2, 8, 8, 1)), jnp.float32)
  labels = jnp.asarray(rng.random((2, 8, 8, 1)) < 0.1, jnp.float32)
  kw = dict(weighting=weighting, a=2.0, b=1.0, beta=0.5, gamma=0.5)
  eager = holistic_value(logits, labels, **kw)
  jitted = jax.jit(lambda z, y: holistic_value(z, y, **kw))(logits, labels)
  np.testing.assert_allclose(eager, jitted, rtol=1e-6)
  g1 = jax.grad(lambda z: holistic_value(z, labels, **kw))(logits)
  g2 = jax.jit(jax.grad(lambda z: holistic_value(z, labels, **kw)))(logits)
  np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-8)
