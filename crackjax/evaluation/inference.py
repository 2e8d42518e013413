"""A trained model's crack probability maps for whole images: the evaluation's path.

`predict_probabilities` edge-pads each image to the model's input multiple, applies the fused
map of the model's outputs (`predict_step`, jitted once per model) and crops back; with
``scales`` / ``flip`` it averages the maps of resized and mirrored copies
(`test_time_average`). Evaluation
(`crackjax.trainer.scoring`) uses it; the user-facing `crackjax.deploy.predictor.Predictor`
builds tiles, reflection padding and shape buckets on `predict_step`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import PIL.Image

from crackjax.models import apply_model, fused_logits, input_multiple, model_schema


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


def resize(array: np.ndarray, height: int, width: int) -> np.ndarray:
  """A float [H, W] or [H, W, C] array resized bilinearly (PIL's 'F' mode, channel by
  channel; antialiased when it shrinks)."""
  if array.shape[:2] == (height, width):
    return array
  if array.ndim == 3:
    return np.stack([resize(array[..., k], height, width) for k in range(array.shape[2])], -1)
  image = PIL.Image.fromarray(np.ascontiguousarray(array, np.float32), mode='F')
  return np.asarray(image.resize((width, height), PIL.Image.BILINEAR), np.float32)


def check_test_time(
  scales: Sequence[float], flip: bool, prefix: str = 'test-time '
) -> tuple[tuple[float, ...], bool]:
  """`scales` and `flip` as `test_time_average` takes them, judged by the model file's schema
  (`model_schema.TEST_TIME`: scales in `model_schema.SCALE_RANGE`, flip a bool, not a string).

  Args:
    scales: the factors of a photo's size.
    flip: whether each copy is also predicted mirrored.
    prefix: what the message names them by: ``<prefix>scales``, ``<prefix>flip`` (``--`` for
      a command's flags, ``config.eval.`` for a config's fields).

  Raises:
    ValueError: one line naming the value at fault and what is expected.
  """
  if isinstance(scales, np.ndarray):
    scales = scales.tolist()
  if isinstance(scales, list | tuple):
    scales = [float(s) if isinstance(s, np.floating | np.integer) else s for s in scales]
  found = model_schema.test_time_problems({'scales': scales, 'flip': flip}, prefix)
  if found:
    raise ValueError(found[0] + '.')
  return tuple(float(s) for s in scales), flip


class ScaleTooSmallError(ValueError):
  """A test-time scale that makes a photo smaller than one model input (`check_scaled_size`)."""


def check_scaled_size(height: int, width: int, scales: Sequence[float], min_side: int) -> None:
  """Refuses a scale below 1 that makes an `height` x `width` photo smaller than one model
  input (`min_side`, the model's input multiple) on a side: the model would see a copy of a
  few pixels, reflection-padded to its input, and the map would be noise. (The width rule's
  half size is its own choice, made only for photos with enough crack to measure.)

  Raises:
    ScaleTooSmallError: one line naming the scale, the photo's size and the smallest scale it
      takes.
  """
  for scale in scales:
    sh, sw = max(1, round(height * scale)), max(1, round(width * scale))
    if scale < 1 and min(sh, sw) < min_side:
      least = min(1.0, min_side / min(height, width))
      raise ScaleTooSmallError(
        f'scale {scale:g} makes a {height}x{width} photo {sh}x{sw} px, smaller than one model '
        f'input ({min_side} px a side); use scales >= {math.ceil(least * 100) / 100:g} for it.'
      )


def test_time_of(
  scales: Sequence[str] | None, flip: bool | None, eval_group: Any
) -> tuple[tuple[float, ...], bool]:
  """The test-time scales and flip of a command: its ``--scales`` (strings) and ``--flip``
  where given (not None), else the run's or model file's ``eval`` group's (`eval_group`, a
  mapping; a config from before the fields has neither: once, as it is).

  Raises:
    ValueError: a scale out of `model_schema.SCALE_RANGE`, or a flip that is no bool (the
      eval group's string 'false' is not False), one line naming it.
  """
  ev = eval_group or {}
  if scales is not None:
    try:
      values = tuple(float(x) for x in scales)
    except ValueError:
      raise ValueError(f'--scales={",".join(scales)}: expected numbers') from None
    check_test_time(values, False, '--')
  else:
    values = ev.get('scales')
    if values is None or (isinstance(values, list | tuple) and not values):
      values = (1.0,)  # a config from before the field: once, as it is
    values, _ = check_test_time(values, False, 'eval.')
  if flip is None:
    return check_test_time(values, ev.get('flip', False), 'eval.')
  return check_test_time(values, flip, '--')


def test_time_average(
  predict: Callable[[np.ndarray], np.ndarray],
  image: np.ndarray,
  *,
  scales: Sequence[float] = (1.0,),
  flip: bool = False,
) -> np.ndarray:
  """The mean of `predict`'s maps of `image` at each of `scales` (resized, the map resized
  back to the image's size) and, with `flip`, of each copy mirrored left-right (its map
  mirrored back).

  Args:
    predict: ``image [h, w, 3] float -> map [h, w]``, any size.
    image: [H, W, 3] float in [0, 1].
    scales: factors of the image's size (1.0: as it is; at least one).
    flip: also predict every copy mirrored.

  Returns:
    The [H, W] float32 map; with ``scales=(1.0,)`` and no flip exactly ``predict(image)``.
  """
  scales, flip = check_test_time(scales, flip)
  h, w = image.shape[:2]
  total = None
  count = 0
  for scale in scales:
    sh, sw = max(1, round(h * scale)), max(1, round(w * scale))
    copy = resize(image, sh, sw)
    maps = [predict(copy)]
    if flip:
      maps.append(predict(np.ascontiguousarray(copy[:, ::-1]))[:, ::-1])
    for m in maps:
      m = resize(np.asarray(m, np.float32), h, w)
      total = m.copy() if total is None else total + m
      count += 1
  if count == 1:
    return total
  return total / count


def predict_probabilities(
  params: Any,
  model: nn.Module,
  images: Iterable[np.ndarray],
  *,
  batch_stats: Any = None,
  scales: Sequence[float] = (1.0,),
  flip: bool = False,
) -> Iterator[np.ndarray]:
  """Crack probability maps [H, W] for images [H, W, 3] (float, in [0, 1]) of any size.

  Each image is edge-padded to a multiple of the model's `input_multiple` and the
  prediction cropped back, so sizes need not be multiples of 16 for the U-Net. This is the
  evaluation protocol's path (unchanged since the results in docs/results.md); `Predictor`
  is the one for users' photos. `batch_stats`: the running averages of a model with
  BatchNorm (None for the others). `scales` / `flip`: test-time averaging over resized and
  mirrored copies (`test_time_average`; the defaults predict the image once, as it is).
  """
  multiple = input_multiple(model)
  apply = _jitted_predict_step(model)
  scales, flip = check_test_time(scales, flip)

  def one(image: np.ndarray) -> np.ndarray:
    h, w = image.shape[:2]
    ph, pw = -h % multiple, -w % multiple
    padded = np.pad(image, ((0, ph), (0, pw), (0, 0)), mode='edge')
    return np.asarray(apply(params, padded[None], batch_stats=batch_stats)[0, :h, :w, 0])

  for image in images:
    if scales == (1.0,) and not flip:
      yield one(image)
    else:
      yield test_time_average(one, image, scales=scales, flip=flip)
