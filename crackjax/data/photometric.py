"""Photometric and sensor augmentation of training images, as a pure JAX function.

What a new road's camera changes and the crack does not: exposure, contrast, tone curve,
colour, focus and sensor noise. Each example draws its own changes, keyed like the affine
augmentation (`crackjax.data.augment`: ``fold_in(key(seed), step)``), so a resumed run draws
what an uninterrupted one would. Masks are never touched: only the image passes through here.

Applied in this order to an image in [0, 1] (each change's strength drawn uniformly):
gamma ``x ** exp(U(-gamma, gamma))``; brightness ``x + U(-brightness, brightness)``; contrast
about the image's mean by ``1 + U(-contrast, contrast)``; saturation about the grey value by
``1 + U(-saturation, saturation)``; greyscale with probability ``greyscale``; a Gaussian blur of
sigma ``U(0.3, blur_sigma)`` with probability ``blur``; Gaussian noise of std
``U(0, noise_std)`` with probability ``noise``; then clipped to [0, 1].
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Strengths:
  """How strongly `photometric` changes images: ``config.augment.photometric`` less its
  ``enabled`` switch. The defaults change nothing.

  Attributes:
    brightness: largest shift of every value.
    contrast: largest relative change of the contrast about the image's mean.
    gamma: largest |log| of the gamma exponent.
    saturation: largest relative change of the colour about the grey value.
    greyscale: probability of making the image grey.
    blur: probability of a Gaussian blur.
    blur_sigma: the largest sigma of that blur (pixels).
    noise: probability of Gaussian sensor noise.
    noise_std: the largest std of that noise.
  """

  brightness: float = 0.0
  contrast: float = 0.0
  gamma: float = 0.0
  saturation: float = 0.0
  greyscale: float = 0.0
  blur: float = 0.0
  blur_sigma: float = 1.5
  noise: float = 0.0
  noise_std: float = 0.0

  def __post_init__(self):
    for name in ('greyscale', 'blur', 'noise'):
      value = getattr(self, name)
      if not 0.0 <= value <= 1.0:
        raise ValueError(f'augment.photometric.{name} is a probability, got {value}.')


#: The ``augment.photometric`` fields and their neutral values (configs/base.py): with
#: ``enabled`` False nothing is drawn and the image is unchanged.
FIELDS: dict[str, Any] = {'enabled': False, **dataclasses.asdict(Strengths())}
# ITU-R BT.601 luma, the grey value of PIL's 'L' mode.
_LUMA = (0.299, 0.587, 0.114)
_MIN_SIGMA = 0.3


def _grey(image: jax.Array) -> jax.Array:
  """[H, W, 1] grey value of an RGB image (the image itself if it has one channel)."""
  if image.shape[-1] != 3:
    return jnp.mean(image, axis=-1, keepdims=True)
  return jnp.tensordot(image, jnp.asarray(_LUMA, image.dtype), axes=([-1], [0]))[..., None]


def _blur(image: jax.Array, sigma: jax.Array, radius: int) -> jax.Array:
  """Separable Gaussian blur of [H, W, C] with a traced `sigma`, a kernel of 2*radius+1 taps,
  edges replicated."""
  x = jnp.arange(-radius, radius + 1, dtype=image.dtype)
  k = jnp.exp(-0.5 * (x / sigma) ** 2)
  k = k / jnp.sum(k)
  h, w = image.shape[:2]
  padded = jnp.pad(image, ((radius, radius), (0, 0), (0, 0)), mode='edge')
  rows = sum(k[i] * padded[i : i + h] for i in range(2 * radius + 1))
  padded = jnp.pad(rows, ((0, 0), (radius, radius), (0, 0)), mode='edge')
  return sum(k[i] * padded[:, i : i + w] for i in range(2 * radius + 1))


def photometric(rng: jax.Array, image: jax.Array, strengths: Strengths = Strengths()) -> jax.Array:
  """Random photometric changes of a batch of images, each example its own.

  Args:
    rng: PRNG key; each example gets its own split of it.
    image: [B, H, W, C] float images in [0, 1].
    strengths: how strongly (`Strengths`; static under jit).

  Returns:
    The images, same shape and dtype, in [0, 1].
  """
  t = strengths
  radius = max(1, math.ceil(3 * t.blur_sigma))

  def one(key: jax.Array, x: jax.Array) -> jax.Array:
    k_u, k_noise = jax.random.split(key)
    u = jax.random.uniform(k_u, (10,))
    s = 2.0 * u - 1.0  # signed draws in [-1, 1)
    x = jnp.clip(x, 0.0, 1.0) ** jnp.exp(s[0] * t.gamma)
    x = x + s[1] * t.brightness
    mean = jnp.mean(x)
    x = (x - mean) * (1.0 + s[2] * t.contrast) + mean
    grey = _grey(x)
    x = grey + (x - grey) * (1.0 + s[3] * t.saturation)
    x = jnp.where(u[4] < t.greyscale, jnp.broadcast_to(_grey(x), x.shape), x)
    sigma = _MIN_SIGMA + u[5] * max(t.blur_sigma - _MIN_SIGMA, 0.0)
    x = jnp.where(u[6] < t.blur, _blur(x, sigma, radius), x)
    std = u[7] * t.noise_std
    x = jnp.where(u[8] < t.noise, x + std * jax.random.normal(k_noise, x.shape, x.dtype), x)
    return jnp.clip(x, 0.0, 1.0).astype(image.dtype)

  return jax.vmap(one)(jax.random.split(rng, image.shape[0]), image)


def fields(aug: Mapping[str, Any]) -> dict[str, Any]:
  """The ``photometric`` group of an ``augment`` group (plain data), its defaults filled in:
  a recorded config from before the group has none (nothing changed then)."""
  return {**FIELDS, **dict(aug.get('photometric') or {})}


def problems(aug: Mapping[str, Any]) -> list[str]:
  """What is wrong with ``config.augment.photometric``, one line each (empty if nothing)."""
  given = dict(aug.get('photometric') or {})
  out = [
    f'config.augment.photometric.{k}: unknown field; known: {sorted(FIELDS)}.'
    for k in sorted(set(given) - set(FIELDS))
  ]
  f = {**FIELDS, **given}
  for k in sorted(FIELDS):
    v = f[k]
    if k == 'enabled':
      continue
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
      out.append(f'config.augment.photometric.{k}={v!r} must be a number >= 0.')
    elif k in ('greyscale', 'blur', 'noise') and v > 1:
      out.append(f'config.augment.photometric.{k}={v!r} is a probability: at most 1.')
  if isinstance(f['blur_sigma'], int | float) and f['blur_sigma'] > 10:
    out.append(f'config.augment.photometric.blur_sigma={f["blur_sigma"]!r}: at most 10 pixels.')
  return out
