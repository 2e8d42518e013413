"""SegNet's loss: cross-entropy with median-frequency class balancing.

Badrinarayanan et al. (IEEE TPAMI 2017, §4, after Eigen and Fergus 2015) weight each class c
of the cross-entropy by

    w_c = median_freq / freq(c),   freq(c) = (pixels of class c) / (pixels of the images
                                              in which c is present),

with median_freq the median of the classes' frequencies. With the two classes here (crack,
background) the median is their mean, so w_crack = (f_crack + f_bg) / (2 f_crack) and
w_bg = (f_crack + f_bg) / (2 f_bg). SegNet computes the frequencies once over the training
set; here they are either given (`crack_frequency`, e.g. the crack share printed by
``python -m crackjax.trainer.data_stats``; the background's frequency is then 1 - crack_frequency)
or, by default, computed per step over the global batch with SegNet's definition, as HED's
balanced loss computes its beta per batch. A class absent from the batch has no pixels to
weight; the present one then has weight 1 (the median of one frequency is itself).

The per-pixel loss is the sigmoid cross-entropy of the model's single crack logit, which for
the two-class models (n_classes=2, logit_crack - logit_background) is exactly the two-class
softmax cross-entropy; it is averaged over the batch's pixels (Caffe's SoftmaxWithLoss
normalisation), as every loss in crackjax.losses.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp

from crackjax.losses.core import LossFn, weighted_bce
from crackjax.models import fused_logits

Array = jax.Array


def class_frequencies(labels: Array) -> tuple[Array, Array]:
  """SegNet's freq(c) of crack and background over a batch of binary labels [B, ...].

  freq(c) = pixels of class c / pixels of the images (first axis) that contain c; 0 for a
  class no image contains.

  Returns:
    (f_crack, f_background), float32 scalars.
  """
  y = labels.astype(jnp.float32).reshape(labels.shape[0], -1)
  pixels = y.shape[1]
  crack = jnp.sum(y, axis=1)
  background = pixels - crack

  def frequency(count):
    images = jnp.sum((count > 0).astype(jnp.float32))
    return jnp.where(images > 0, jnp.sum(count) / jnp.maximum(images * pixels, 1.0), 0.0)

  return frequency(crack), frequency(background)


def median_frequency_weights(f_crack: Array, f_background: Array) -> tuple[Array, Array]:
  """(w_crack, w_background) = median_freq / freq(c) over the classes present (freq > 0);
  an absent class gets weight 1 (it has no pixels)."""
  f_crack = jnp.asarray(f_crack, jnp.float32)
  f_background = jnp.asarray(f_background, jnp.float32)
  both = (f_crack > 0) & (f_background > 0)
  median = jnp.where(both, 0.5 * (f_crack + f_background), jnp.maximum(f_crack, f_background))

  def weight(f):
    return jnp.where(f > 0, median / jnp.where(f > 0, f, 1.0), 1.0)

  return weight(f_crack), weight(f_background)


def median_frequency_ce(
  logits: Array, labels: Array, w_crack: Array | float, w_background: Array | float
) -> Array:
  """Mean over pixels of w_y * CE: -[w_crack y log p + w_background (1 - y) log(1 - p)].

  The weights are constants for the gradient (stop_gradient), as label statistics.
  """
  logits = logits.astype(jnp.float32)
  w_background = jax.lax.stop_gradient(jnp.asarray(w_background, jnp.float32))
  w_crack = jax.lax.stop_gradient(jnp.asarray(w_crack, jnp.float32))
  # w_bg * weighted_bce(q = w_crack / w_bg) is w_crack y (-log p) + w_bg (1 - y) (-log(1 - p)).
  per_pixel = w_background * weighted_bce(logits, labels, w_crack / w_background)
  return jnp.mean(per_pixel)


def median_frequency(*, crack_frequency: float | None = None) -> LossFn:
  """SegNet's loss as a train-step loss: median-frequency balanced cross-entropy.

  Args:
    crack_frequency: the crack pixels' frequency over the training set, in (0, 1); None
      (default): SegNet's frequencies computed over each global batch.

  Returns:
    `loss_fn(outputs, labels) -> (loss, {'w_crack', 'w_background'})`, applied to the fused
    logits (`fused_logits`).

  Raises:
    ValueError: for a crack_frequency outside (0, 1) (naming config.loss.crack_frequency).
  """
  if crack_frequency is not None:
    if (
      not isinstance(crack_frequency, int | float)
      or isinstance(crack_frequency, bool)
      or not math.isfinite(crack_frequency)
      or not 0 < crack_frequency < 1
    ):
      raise ValueError(
        f'config.loss.crack_frequency={crack_frequency!r} must be None (per batch) or in (0, 1).'
      )
    fixed = median_frequency_weights(crack_frequency, 1.0 - crack_frequency)
  else:
    fixed = None

  def loss_fn(outputs: Any, labels: Array) -> tuple[Array, dict[str, Array]]:
    if fixed is None:
      w_crack, w_background = median_frequency_weights(*class_frequencies(labels))
    else:
      w_crack, w_background = fixed
    loss = median_frequency_ce(fused_logits(outputs), labels, w_crack, w_background)
    return loss, {'w_crack': w_crack, 'w_background': w_background}

  return loss_fn
