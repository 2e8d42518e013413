"""Adaptive cost-sensitive losses of Li, Wang, Tian and Qi (IEEE T-Cybernetics 2021).

Every loss here is a pure, jittable function of `(logits, labels, ...)` in the style of
optax: the per-pixel loss `weighted_bce` returns an array shaped like `logits` and the
caller reduces it. Batch-level quantities (the background ratio alpha of eq. 1-7, the
Jaccard distance of eq. 9-10 and so the holistic loss of eq. 8) are computed over the whole
array passed in, which in the train step is the *global* batch, and return scalars.

The train step itself receives a `LossFn` built from the config's `loss` group by
`crackjax.losses.loss_from_config` (explicit table `LOSSES`), so a model or loss never
edits the loop.

Notation: y is the binary label (1 = crack, the minority class), z the logit,
p = sigmoid(z), alpha the fraction of background pixels in the batch.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from crackjax.models import fused_logits

Array = jax.Array


def background_ratio(labels: Array) -> Array:
  """Fraction alpha of non-crack pixels in the batch, Laplace-smoothed.

  alpha = (N_background + 1) / (N + 2), so that alpha / (1 - alpha) =
  (N_background + 1) / (N_crack + 1) stays finite for a crack-free batch (the paper's
  footnote on AigleRN; the authors' code smooths the same way).

  Args:
    labels: binary labels of the whole batch, any shape.

  Returns:
    A float32 scalar in (0, 1).
  """
  labels = labels.astype(jnp.float32)
  n = labels.size
  n_crack = jnp.sum(labels)
  return (n - n_crack + 1.0) / (n + 2.0)


def _odds(alpha: Array) -> Array:
  return alpha / (1.0 - alpha)


def q_xie(alpha: Array) -> Array:
  """q(alpha) = alpha / (1 - alpha), the HED weighting of Xie et al. (eq. 3)."""
  return _odds(alpha)


def q_power(alpha: Array, beta: float, gamma: float) -> Array:
  """q(alpha) = beta * (alpha / (1 - alpha)) ** gamma (eq. 4)."""
  return beta * _odds(alpha) ** gamma


def q_log(alpha: Array, beta: float) -> Array:
  """q(alpha) = beta * ln(alpha / (1 - alpha)) (eq. 5)."""
  return beta * jnp.log(_odds(alpha))


def q_exp(alpha: Array, beta: float, base: float = 10.0, gamma: float = 1.0) -> Array:
  """q(alpha) = beta * base ** (gamma * (2 alpha - 1)) (eq. 6; eq. 7 is base=10, gamma=1).

  For 0 < alpha <= 1 and gamma <= 1 this is at most beta * base, i.e. <= 10 beta.
  """
  return beta * jnp.power(base, gamma * (2.0 * alpha - 1.0))


def weighted_bce(logits: Array, labels: Array, q: Array | float) -> Array:
  """Per-pixel weighted cross-entropy (eq. 2).

  l = -[q * y * log(sigmoid(z)) + (1 - y) * log(1 - sigmoid(z))], computed from logits with
  log-sigmoid so it is stable for large |z|. q is treated as a constant for the gradient
  (stop_gradient), as in the paper where it is a batch statistic of the labels; the
  gradient is then dl/dz = (1 - y) p - q y (1 - p) (Appendix A, eq. pde2).

  Args:
    logits: pre-sigmoid scores z, any shape.
    labels: binary labels y, same shape as logits.
    q: minority (crack) weight, a scalar.

  Returns:
    The per-pixel loss, shaped like logits.
  """
  labels = labels.astype(logits.dtype)
  q = jax.lax.stop_gradient(jnp.asarray(q, logits.dtype))
  log_p = jax.nn.log_sigmoid(logits)
  log_not_p = jax.nn.log_sigmoid(-logits)
  return -(q * labels * log_p + (1.0 - labels) * log_not_p)


def jaccard_distance(logits: Array, labels: Array, smooth: float = 1.0) -> Array:
  """Soft Jaccard distance over the whole batch (eq. 9-10).

  d = 1 - (sum y p + lambda) / (sum y + sum p - sum y p + lambda), with p = sigmoid(z).

  Args:
    logits: pre-sigmoid scores, any shape.
    labels: binary labels, same shape.
    smooth: Laplace smoothing lambda.

  Returns:
    A scalar in [0, 1).
  """
  p = jax.nn.sigmoid(logits.astype(jnp.float32))
  y = labels.astype(jnp.float32)
  inter = jnp.sum(y * p)
  union = jnp.sum(y) + jnp.sum(p) - inter
  return 1.0 - (inter + smooth) / (union + smooth)


def minority_weight(
  labels: Array,
  weighting: str,
  *,
  beta: float = 1.0,
  gamma: float = 1.0,
  base: float = 10.0,
) -> Array:
  """q(alpha) of the named family, with alpha from `labels` (the whole batch).

  Args:
    labels: binary labels of the batch.
    weighting: one of WEIGHTINGS: 'ce' (q=1), 'xie', 'power', 'log', 'exp'.
    beta: fine-tuning coefficient (power, log, exp).
    gamma: exponent (power, exp).
    base: base `a` of the exponential family (exp).

  Returns:
    A float32 scalar.

  Raises:
    ValueError: for an unknown weighting name.
  """
  if weighting not in WEIGHTINGS:
    raise ValueError(f'Unknown loss weighting {weighting!r}; expected one of {sorted(WEIGHTINGS)}.')
  alpha = background_ratio(labels)
  return WEIGHTINGS[weighting](alpha, beta=beta, gamma=gamma, base=base)


# Explicit table of the weight families; each takes alpha and the keyword parameters it
# needs (ignoring the rest) so callers can pass one config block to any of them.
WEIGHTINGS: dict[str, Callable[..., Array]] = {
  'ce': lambda alpha, **_: jnp.ones_like(alpha),
  'xie': lambda alpha, **_: q_xie(alpha),
  'power': lambda alpha, *, beta, gamma, **_: q_power(alpha, beta, gamma),
  'log': lambda alpha, *, beta, **_: q_log(alpha, beta),
  'exp': lambda alpha, *, beta, gamma, base, **_: q_exp(alpha, beta, base, gamma),
}


def holistic_loss(
  logits: Array,
  labels: Array,
  q: Array | float,
  *,
  a: float = 1.0,
  b: float = 0.0,
  smooth: float = 1.0,
) -> Array:
  """Holistic loss a * mean(WCE) + b * Jaccard distance (eq. 8), a scalar.

  Like the Jaccard distance this is a batch-level loss, so it reduces itself. The paper's L
  is a sum over pixels; we average it so the learning rate does not depend on the image
  size (Adam is nearly scale-invariant anyway).

  Args:
    logits: pre-sigmoid scores of the batch, e.g. [B, H, W, 1].
    labels: binary labels of the same shape.
    q: minority (crack) weight, e.g. `minority_weight(labels, 'exp', beta=0.75)`.
    a: weight of the weighted cross-entropy.
    b: weight of the Jaccard distance.
    smooth: Jaccard smoothing lambda.

  Returns:
    A float32 scalar.
  """
  wce = jnp.mean(weighted_bce(logits.astype(jnp.float32), labels, q))
  return a * wce + b * jaccard_distance(logits, labels, smooth)


# ----------------------------------------------------------------------------- train-step losses
# A train-step loss is built from the config's `loss` group and handed to the train step
# (crackjax.engine.step.make_train_step), which calls it as `loss_fn(outputs, labels)`:
#   outputs: what the model returned (logits [B, H, W, 1], or a dict with 'logits' and side
#     outputs, see crackjax.models),
#   labels: the (augmented) binary masks [B, H, W, 1] of the global batch,
# and gets back the scalar loss and a dict of scalar metrics to log. A new loss is a factory
# taking the loss fields as keyword arguments, added to LOSSES; the training loop never
# changes.

LossFn = Callable[[Any, Array], tuple[Array, dict[str, Array]]]


def holistic(
  *,
  weighting: str = 'exp',
  beta: float = 1.0,
  gamma: float = 1.0,
  base: float = 10.0,
  a: float = 1.0,
  b: float = 0.0,
  jaccard_smooth: float = 1.0,
) -> LossFn:
  """The paper's loss as a train-step loss: a * WCE with q(alpha) + b * Jaccard distance.

  alpha and q are computed once per step, over the global batch, and logged.

  Args:
    weighting: q(alpha) family, a key of WEIGHTINGS.
    beta: see `minority_weight`.
    gamma: see `minority_weight`.
    base: see `minority_weight`.
    a: weight of the weighted cross-entropy.
    b: weight of the Jaccard distance.
    jaccard_smooth: Jaccard smoothing lambda.

  Returns:
    `loss_fn(outputs, labels) -> (loss, {'alpha': ..., 'q': ...})`.

  Raises:
    ValueError: for an unknown weighting (raised here, before anything is compiled).
  """
  if weighting not in WEIGHTINGS:
    raise ValueError(f'config.loss.weighting={weighting!r} is not one of {sorted(WEIGHTINGS)}.')

  def loss_fn(outputs: Any, labels: Array) -> tuple[Array, dict[str, Array]]:
    alpha = background_ratio(labels)
    q = WEIGHTINGS[weighting](alpha, beta=beta, gamma=gamma, base=base)
    loss = holistic_loss(fused_logits(outputs), labels, q, a=a, b=b, smooth=jaccard_smooth)
    return loss, {'alpha': alpha, 'q': q}

  return loss_fn
