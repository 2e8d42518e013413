"""Adaptive cost-sensitive losses of Li, Wang, Tian and Qi (IEEE T-Cybernetics 2021).

Every loss here is a pure, jittable function of `(logits, labels, ...)` in the style of
optax: per-pixel losses return an array shaped like `logits` and the reduction happens in
the caller (the train step). Batch-level quantities (the background ratio alpha of
eq. 1-7 and the Jaccard distance of eq. 9-10) are computed over the whole array passed in,
which in the train step is the *global* batch.

Notation: y is the binary label (1 = crack, the minority class), z the logit,
p = sigmoid(z), alpha the fraction of background pixels in the batch.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

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
    raise ValueError(
        f'Unknown loss weighting {weighting!r}; expected one of {sorted(WEIGHTINGS)}.')
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
    *,
    weighting: str = 'exp',
    a: float = 1.0,
    b: float = 0.0,
    beta: float = 1.0,
    gamma: float = 1.0,
    base: float = 10.0,
    smooth: float = 1.0,
) -> Array:
  """Holistic loss a * mean(WCE) + b * Jaccard distance (eq. 8), a scalar.

  The paper's L is a sum over pixels; we average it so the learning rate does not depend
  on the image size (Adam is nearly scale-invariant anyway). alpha and the Jaccard index
  are computed over the whole batch passed in.

  Args:
    logits: pre-sigmoid scores of the batch, e.g. [B, H, W, 1].
    labels: binary labels of the same shape.
    weighting: q(alpha) family, see `minority_weight`.
    a: weight of the weighted cross-entropy.
    b: weight of the Jaccard distance.
    beta: see `minority_weight`.
    gamma: see `minority_weight`.
    base: see `minority_weight`.
    smooth: Jaccard smoothing lambda.

  Returns:
    A float32 scalar.
  """
  q = minority_weight(labels, weighting, beta=beta, gamma=gamma, base=base)
  wce = jnp.mean(weighted_bce(logits.astype(jnp.float32), labels, q))
  return a * wce + b * jaccard_distance(logits, labels, smooth)
