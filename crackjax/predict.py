"""Crack probability maps from a trained model, for images of any size."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from crackjax.models import fused_logits, input_multiple


def predict_step(params: Any, images: jax.Array, *, apply_fn: Callable[..., Any]) -> jax.Array:
  """Crack probabilities [B, H, W, 1] for images [B, H, W, 3] (the fused map of side outputs)."""
  return jax.nn.sigmoid(fused_logits(apply_fn({'params': params}, images)))


def predict_probabilities(
  params: Any, model: nn.Module, images: Iterable[np.ndarray]
) -> Iterator[np.ndarray]:
  """Crack probability maps [H, W] for images [H, W, 3] (float, in [0, 1]) of any size.

  Each image is edge-padded to a multiple of the model's `input_multiple` and the
  prediction cropped back, so sizes need not be multiples of 16 for the U-Net.
  """
  multiple = input_multiple(model)
  apply = jax.jit(functools.partial(predict_step, apply_fn=model.apply))
  for image in images:
    h, w = image.shape[:2]
    ph, pw = -h % multiple, -w % multiple
    padded = np.pad(image, ((0, ph), (0, pw), (0, 0)), mode='edge')
    prob = apply(params, padded[None])[0, :h, :w, 0]
    yield np.asarray(prob)
