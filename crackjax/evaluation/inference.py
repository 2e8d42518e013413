"""A trained model's crack probability maps for whole images: the evaluation's path.

`predict_probabilities` edge-pads each image to the model's input multiple, applies the fused
map of the model's outputs (`predict_step`, jitted once per model) and crops back. Evaluation
(`crackjax.trainer.scoring`) uses it; the user-facing `crackjax.deploy.predictor.Predictor`
builds tiles, reflection padding and shape buckets on `predict_step`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from crackjax.models import apply_model, fused_logits, input_multiple


def predict_step(
  params: Any, images: jax.Array, *, apply_fn: Callable[..., Any], batch_stats: Any = None
) -> jax.Array:
  """Crack probabilities [B, H, W, 1] for images [B, H, W, 3] (the fused map of side outputs).

  A model with BatchNorm is given its running averages `batch_stats` and applied with
  ``train=False``; without them (None or empty) the model is applied to its parameters alone.
  """
  outputs, _ = apply_model(apply_fn, params, images, batch_stats=batch_stats, train=False)
  return jax.nn.sigmoid(fused_logits(outputs))


@functools.lru_cache(maxsize=8)
def _jitted_predict_step(model: nn.Module):
  # One jitted function per (equal) model, so that evaluating every epoch of a run (the
  # reproduction runner) compiles once per image shape, not once per call.
  return jax.jit(functools.partial(predict_step, apply_fn=model.apply))


def predict_probabilities(
  params: Any, model: nn.Module, images: Iterable[np.ndarray], *, batch_stats: Any = None
) -> Iterator[np.ndarray]:
  """Crack probability maps [H, W] for images [H, W, 3] (float, in [0, 1]) of any size.

  Each image is edge-padded to a multiple of the model's `input_multiple` and the
  prediction cropped back, so sizes need not be multiples of 16 for the U-Net. This is the
  evaluation protocol's path (unchanged since the results in docs/results.md); `Predictor`
  is the one for users' photos. `batch_stats`: the running averages of a model with
  BatchNorm (None for the others).
  """
  multiple = input_multiple(model)
  apply = _jitted_predict_step(model)
  for image in images:
    h, w = image.shape[:2]
    ph, pw = -h % multiple, -w % multiple
    padded = np.pad(image, ((0, ph), (0, pw), (0, 0)), mode='edge')
    prob = apply(params, padded[None], batch_stats=batch_stats)[0, :h, :w, 0]
    yield np.asarray(prob)
