"""Deeply supervised train-step losses for models with side outputs (HED, RCF, DeepCrack).

These are the original losses of the comparison models of Li et al. (2021), Table V, and the
paper's dagger variant (its exponential WCE on every side output). Each factory takes keyword
arguments only (the fields of config.loss), checks them, and returns
`loss_fn(outputs, labels) -> (loss, metrics)` like `crackjax.losses.holistic`, where
`outputs` is the model's dict `{'logits': fused, 'side_logits': (side_1, ..., side_K)}` and
`labels` the global batch's masks [B, H, W, 1].

Reduction: the papers sum the per-pixel loss over the image; as in `crackjax.losses` every
per-map loss here is a mean over the batch's pixels, so the learning rate does not depend
on the image size. The deep-supervision total is then
    side_weight * sum_k loss(side_k) + fuse_weight * loss(fused)
(HED, RCF and DeepCrack all weight every map by 1).
"""

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from crackjax.losses.core import LossFn, holistic, weighted_bce
from crackjax.models import fused_logits

Array = jax.Array
# A per-map loss: (logits [B, H, W, 1], labels) -> scalar, or -> (scalar, metrics).
PerMapLoss = Callable[[Array, Array], Array | tuple[Array, dict[str, Array]]]


def _check_nonnegative(name: str, value: float) -> None:
  if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
    raise ValueError(f'config.loss.{name}={value!r} must be a finite number.')
  if value < 0:
    raise ValueError(f'config.loss.{name}={value!r} must be >= 0.')


def _check_positive(name: str, value: float) -> None:
  _check_nonnegative(name, value)
  if value <= 0:
    raise ValueError(f'config.loss.{name}={value!r} must be > 0.')


def side_maps(outputs: Any) -> tuple[Array, ...]:
  """The side logit maps of a model's outputs (empty for a plain logit array)."""
  if isinstance(outputs, Mapping):
    return tuple(outputs.get('side_logits', ()))
  return ()


def _as_loss_and_metrics(result: Any) -> tuple[Array, dict[str, Array]]:
  if isinstance(result, tuple):
    loss, metrics = result
    return loss, dict(metrics)
  return result, {}


def deep_supervision(
  per_map_loss: PerMapLoss, *, side_weight: float = 1.0, fuse_weight: float = 1.0
) -> LossFn:
  """Applies a per-map loss to every side map and the fused map and sums them.

  Args:
    per_map_loss: `(logits, labels) -> scalar` or `-> (scalar, metrics)`, applied to each
      map at the labels' resolution (a train-step loss such as `crackjax.losses.holistic(...)`
      fits, since it reads a plain array as the fused map).
    side_weight: weight of each side map's loss.
    fuse_weight: weight of the fused map's loss.

  Returns:
    `loss_fn(outputs, labels) -> (loss, metrics)`; metrics: 'side{k}_loss' (k = 1 ... K),
    'fuse_loss', and the per-map loss's own metrics from the fused map (e.g. 'alpha', 'q').

  Raises:
    ValueError: for a negative or non-finite weight (naming config.loss.side_weight /
      config.loss.fuse_weight).
  """
  _check_nonnegative('side_weight', side_weight)
  _check_nonnegative('fuse_weight', fuse_weight)

  def loss_fn(outputs: Any, labels: Array) -> tuple[Array, dict[str, Array]]:
    fuse_loss, metrics = _as_loss_and_metrics(per_map_loss(fused_logits(outputs), labels))
    total = fuse_weight * fuse_loss
    metrics['fuse_loss'] = fuse_loss
    for k, side in enumerate(side_maps(outputs), start=1):
      side_loss, _ = _as_loss_and_metrics(per_map_loss(side, labels))
      total = total + side_weight * side_loss
      metrics[f'side{k}_loss'] = side_loss
    return total, metrics

  return loss_fn


# ------------------------------------------------------------------------------ per-map losses


def _plain_ce(logits: Array, labels: Array) -> Array:
  """Per-pixel unweighted sigmoid cross-entropy (weighted_bce with q = 1)."""
  return weighted_bce(logits.astype(jnp.float32), labels.astype(jnp.float32), 1.0)


def hed_balanced_map(logits: Array, labels: Array) -> tuple[Array, dict[str, Array]]:
  """HED's class-balanced sigmoid cross-entropy of one map (Xie and Tu 2015, eq. 2).

  l = -[beta y log p + (1 - beta)(1 - y) log(1 - p)], beta = |Y-| / |Y| over the batch
  (unsmoothed, as in HED; a crack-free batch has beta = 1 and so a zero loss). This is
  (1 - beta) * weighted_bce(q = beta / (1 - beta)), i.e. the paper's Xie weighting
  q_xie(alpha) with alpha = beta, up to the batch-constant factor (1 - alpha); the
  factor changes the loss's scale per batch, not the balance of the two classes.

  Returns:
    The mean over pixels and {'beta': beta}.
  """
  y = labels.astype(jnp.float32)
  beta = 1.0 - jnp.mean(y)
  weights = beta * y + (1.0 - beta) * (1.0 - y)
  return jnp.mean(weights * _plain_ce(logits, y)), {'beta': beta}


def rcf_robust_map(
  logits: Array, labels: Array, *, eta: float = 0.5, lam: float = 1.1
) -> tuple[Array, dict[str, Array]]:
  """RCF's annotator-robust balanced cross-entropy of one map (Liu et al. 2017, eq. 1).

  A pixel with label probability y >= eta is a positive (target 1), y == 0 a negative, and
  0 < y < eta is ignored. Positives are weighted beta = |Y-| / (|Y+| + |Y-|), negatives
  alpha = lam * |Y+| / (|Y+| + |Y-|), counted over the batch's non-ignored pixels. With
  binary masks nothing is ignored and this is HED's balanced loss with the negatives'
  weight multiplied by lam (1.1 in RCF).

  Returns:
    The mean over all pixels (ignored ones count as 0) and {'rcf_alpha', 'rcf_beta'}.
  """
  y = labels.astype(jnp.float32)
  positive = (y >= eta).astype(jnp.float32)
  negative = (y == 0).astype(jnp.float32)
  n_pos, n_neg = jnp.sum(positive), jnp.sum(negative)
  counted = jnp.maximum(n_pos + n_neg, 1.0)
  beta = n_neg / counted
  alpha = lam * n_pos / counted
  weights = beta * positive + alpha * negative
  return jnp.mean(weights * _plain_ce(logits, positive)), {'rcf_alpha': alpha, 'rcf_beta': beta}


# --------------------------------------------------------------------------- train-step losses


def hed_balanced(*, side_weight: float = 1.0, fuse_weight: float = 1.0) -> LossFn:
  """HED's loss: class-balanced sigmoid CE (`hed_balanced_map`) on every side and the fused map.

  Args:
    side_weight: weight of each side map's loss.
    fuse_weight: weight of the fused map's loss.

  Returns:
    `loss_fn(outputs, labels) -> (loss, metrics)` (metrics: per-map losses and 'beta').

  Raises:
    ValueError: for a bad weight, naming its config.loss field.
  """
  return deep_supervision(hed_balanced_map, side_weight=side_weight, fuse_weight=fuse_weight)


def rcf_robust(
  *, eta: float = 0.5, lam: float = 1.1, side_weight: float = 1.0, fuse_weight: float = 1.0
) -> LossFn:
  """RCF's loss: the annotator-robust balanced CE (`rcf_robust_map`) on every map.

  Args:
    eta: label-probability threshold in (0, 1]: y >= eta is a positive, 0 < y < eta ignored.
    lam: RCF's lambda, the extra weight of the negatives (1.1 in RCF).
    side_weight: weight of each side map's loss.
    fuse_weight: weight of the fused map's loss.

  Returns:
    `loss_fn(outputs, labels) -> (loss, metrics)` (metrics: per-map losses, 'rcf_alpha',
    'rcf_beta').

  Raises:
    ValueError: for a bad value, naming its config.loss field.
  """
  _check_positive('eta', eta)
  if eta > 1:
    raise ValueError(f'config.loss.eta={eta!r} must be in (0, 1].')
  _check_positive('lam', lam)

  def per_map(logits, labels):
    return rcf_robust_map(logits, labels, eta=eta, lam=lam)

  return deep_supervision(per_map, side_weight=side_weight, fuse_weight=fuse_weight)


def deepcrack_plain(*, side_weight: float = 1.0, fuse_weight: float = 1.0) -> LossFn:
  """DeepCrack's loss: unweighted sigmoid CE (mean over pixels) on every side and fused map.

  Args:
    side_weight: weight of each side map's loss.
    fuse_weight: weight of the fused map's loss.

  Returns:
    `loss_fn(outputs, labels) -> (loss, metrics)` (metrics: per-map losses).

  Raises:
    ValueError: for a bad weight, naming its config.loss field.
  """

  def per_map(logits, labels):
    return jnp.mean(_plain_ce(logits, labels))

  return deep_supervision(per_map, side_weight=side_weight, fuse_weight=fuse_weight)


def side_exp_wce(
  *,
  beta: float = 1.0,
  gamma: float = 1.0,
  base: float = 10.0,
  a: float = 1.0,
  b: float = 0.0,
  jaccard_smooth: float = 1.0,
  side_weight: float = 1.0,
  fuse_weight: float = 1.0,
) -> LossFn:
  """The paper's dagger variant: its exponential WCE (`crackjax.losses.holistic` with
  weighting 'exp', q = beta * base ** (gamma (2 alpha - 1))) on every side and fused map.

  Args:
    beta: fine-tuning coefficient of q_exp (> 0).
    gamma: exponent of q_exp.
    base: base of q_exp (> 0).
    a: weight of the weighted cross-entropy (>= 0).
    b: weight of the Jaccard distance (>= 0; 0 is the pure WCE).
    jaccard_smooth: Jaccard smoothing lambda (> 0).
    side_weight: weight of each side map's loss.
    fuse_weight: weight of the fused map's loss.

  Returns:
    `loss_fn(outputs, labels) -> (loss, metrics)` (metrics: per-map losses, 'alpha', 'q').

  Raises:
    ValueError: for a bad value, naming its config.loss field.
  """
  _check_positive('beta', beta)
  if not isinstance(gamma, int | float) or isinstance(gamma, bool) or not math.isfinite(gamma):
    raise ValueError(f'config.loss.gamma={gamma!r} must be a finite number.')
  _check_positive('base', base)
  _check_nonnegative('a', a)
  _check_nonnegative('b', b)
  _check_positive('jaccard_smooth', jaccard_smooth)
  per_map = holistic(
    weighting='exp', beta=beta, gamma=gamma, base=base, a=a, b=b, jaccard_smooth=jaccard_smooth
  )
  return deep_supervision(per_map, side_weight=side_weight, fuse_weight=fuse_weight)
