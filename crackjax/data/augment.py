"""Random affine augmentation of image and mask together, as a pure JAX function.

It runs inside the jitted train step, keyed by ``fold_in(key(seed), step)``, so a resumed run
draws exactly the transforms an uninterrupted one would. Importing this module needs only
jax: no TFDS, no grain.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from crackjax.data import photometric

AugmentFn = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


def _affine_matrix(
  key: jax.Array,
  height: int,
  width: int,
  *,
  rotation_range: float,
  width_shift_range: float,
  height_shift_range: float,
  shear_range: float,
  zoom_range: float,
  horizontal_flip: bool,
) -> tuple[jax.Array, jax.Array]:
  """Samples one Keras-style transform; returns (3x3 output->input matrix, flip flag).

  Coordinates are (row, col, 1), as in Keras' ``apply_affine_transform`` (which hands the
  matrix to ``scipy.ndimage.affine_transform``, i.e. it maps output pixels to input pixels).
  """
  # One draw of 7 numbers in [-1, 1) (a single threefry call compiles much faster than 6).
  u = jax.random.uniform(key, (7,), minval=-1.0, maxval=1.0)
  theta = jnp.deg2rad(u[0] * rotation_range)
  tx = u[1] * height_shift_range * height  # Keras: tx shifts rows, from the height range.
  ty = u[2] * width_shift_range * width
  shear = jnp.deg2rad(u[3] * shear_range)
  zx, zy = 1.0 + u[4] * zoom_range, 1.0 + u[5] * zoom_range  # Independent zoom per axis.
  one, zero = jnp.ones(()), jnp.zeros(())
  rotation = jnp.array(
    [
      [jnp.cos(theta), -jnp.sin(theta), zero],
      [jnp.sin(theta), jnp.cos(theta), zero],
      [zero, zero, one],
    ]
  )
  shift = jnp.array([[one, zero, tx], [zero, one, ty], [zero, zero, one]])
  shear_m = jnp.array(
    [[one, -jnp.sin(shear), zero], [zero, jnp.cos(shear), zero], [zero, zero, one]]
  )
  zoom = jnp.array([[zx, zero, zero], [zero, zy, zero], [zero, zero, one]])
  matrix = rotation @ shift @ shear_m @ zoom  # Same composition order as Keras.
  # About the image centre. Keras uses h/2 + 0.5, one pixel off; (h-1)/2 is the true centre
  # of pixel-centred coordinates, and keeps the identity transform exact.
  cr, cc = (height - 1) / 2.0, (width - 1) / 2.0
  to_centre = jnp.array([[1.0, 0.0, cr], [0.0, 1.0, cc], [0.0, 0.0, 1.0]])
  from_centre = jnp.array([[1.0, 0.0, -cr], [0.0, 1.0, -cc], [0.0, 0.0, 1.0]])
  matrix = to_centre @ matrix @ from_centre
  flip = jnp.logical_and(horizontal_flip, u[6] < 0.0)  # Probability 1/2.
  return matrix, flip


def _sample(image: jax.Array, rows: jax.Array, cols: jax.Array, order: int) -> jax.Array:
  """Samples image [H, W, C] at float coordinates [H', W'] with 'nearest' edge fill."""
  h, w = image.shape[:2]
  if order == 0:
    r = jnp.clip(jnp.round(rows), 0, h - 1).astype(jnp.int32)
    c = jnp.clip(jnp.round(cols), 0, w - 1).astype(jnp.int32)
    return image[r, c]
  if order != 1:
    raise ValueError(f'order must be 0 or 1, got {order}')
  # Bilinear; clipping the corner indices is scipy's mode='nearest' (edge replication).
  r0, c0 = jnp.floor(rows), jnp.floor(cols)
  fr, fc = (rows - r0)[..., None], (cols - c0)[..., None]
  r0i = jnp.clip(r0, 0, h - 1).astype(jnp.int32)
  r1i = jnp.clip(r0 + 1, 0, h - 1).astype(jnp.int32)
  c0i = jnp.clip(c0, 0, w - 1).astype(jnp.int32)
  c1i = jnp.clip(c0 + 1, 0, w - 1).astype(jnp.int32)
  top = image[r0i, c0i] * (1 - fc) + image[r0i, c1i] * fc
  bottom = image[r1i, c0i] * (1 - fc) + image[r1i, c1i] * fc
  return (top * (1 - fr) + bottom * fr).astype(image.dtype)


def augment(
  rng: jax.Array,
  image: jax.Array,
  mask: jax.Array,
  *,
  rotation_range: float = 0.0,
  width_shift_range: float = 0.0,
  height_shift_range: float = 0.0,
  shear_range: float = 0.0,
  zoom_range: float = 0.0,
  horizontal_flip: bool = False,
  image_order: int = 1,
) -> tuple[jax.Array, jax.Array]:
  """Random affine transform of a batch, the same per example for image and mask.

  Keras ``ImageDataGenerator`` semantics (the zhixuhao/unet recipe): rotation by
  U(-rotation_range, rotation_range) degrees, shifts by U(-r, r) * size, shear by
  U(-shear_range, shear_range) degrees, zoom factors U(1 - zoom_range, 1 + zoom_range)
  drawn independently per axis, all about the image centre, then a horizontal flip with
  probability 1/2 if enabled; fill_mode 'nearest' (edge pixels extend outward).

  Args:
    rng: PRNG key; each example gets its own split of it.
    image: [B, H, W, C] float images.
    mask: [B, H, W, Cm] masks; sampled with nearest neighbour so binary stays binary.
    rotation_range: degrees.
    width_shift_range: fraction of the width.
    height_shift_range: fraction of the height.
    shear_range: degrees (Keras' shear angle).
    zoom_range: fraction.
    horizontal_flip: whether to flip left-right with probability 1/2.
    image_order: 1 (bilinear, like Keras) or 0 (nearest) interpolation for the image.

  Returns:
    (image, mask) transformed, same shapes and dtypes.
  """
  batch, height, width = image.shape[:3]
  if mask.shape[:3] != (batch, height, width):
    raise ValueError(f'image {image.shape} and mask {mask.shape} differ in [B, H, W].')
  rows, cols = jnp.meshgrid(
    jnp.arange(height, dtype=jnp.float32), jnp.arange(width, dtype=jnp.float32), indexing='ij'
  )

  def one(key, img, msk):
    matrix, flip = _affine_matrix(
      key,
      height,
      width,
      rotation_range=rotation_range,
      width_shift_range=width_shift_range,
      height_shift_range=height_shift_range,
      shear_range=shear_range,
      zoom_range=zoom_range,
      horizontal_flip=horizontal_flip,
    )
    # Keras flips after the affine transform: output column c reads affine column W-1-c.
    out_cols = jnp.where(flip, width - 1 - cols, cols)
    src_rows = matrix[0, 0] * rows + matrix[0, 1] * out_cols + matrix[0, 2]
    src_cols = matrix[1, 0] * rows + matrix[1, 1] * out_cols + matrix[1, 2]
    return (_sample(img, src_rows, src_cols, image_order), _sample(msk, src_rows, src_cols, 0))

  return jax.vmap(one)(jax.random.split(rng, batch), image, mask)


def _identity(rng: jax.Array, image: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  del rng
  return image, mask


def augment_fn(aug: Mapping[str, Any]) -> AugmentFn:
  """`augment` with the ranges of ``config.augment`` bound, then the photometric changes of its
  ``photometric`` group where enabled (`crackjax.data.photometric`); the identity if neither.

  Args:
    aug: the config's ``augment`` group as plain data (``config.augment.to_dict()``, or the
      ``augment`` of a recorded config.json; one from before the photometric group has none).

  The train step receives the result and calls it as ``augment_fn(rng, image, mask)``. The
  affine transform keeps its key (runs without photometric changes draw what they always
  did); the photometric changes draw from ``fold_in(rng, 1)``.
  """
  affine = _identity
  if aug['enabled']:
    affine = functools.partial(
      augment,
      rotation_range=aug['rotation_range'],
      width_shift_range=aug['width_shift_range'],
      height_shift_range=aug['height_shift_range'],
      shear_range=aug['shear_range'],
      zoom_range=aug['zoom_range'],
      horizontal_flip=aug['horizontal_flip'],
    )
  colour = photometric.fields(aug)
  if not (aug['enabled'] and colour.pop('enabled')):
    return affine

  strengths = photometric.Strengths(**colour)

  def both(rng: jax.Array, image: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    image, mask = affine(rng, image, mask)
    return photometric.photometric(jax.random.fold_in(rng, 1), image, strengths), mask

  return both
