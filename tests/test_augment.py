"""Tests of crackjax.data.augment: the Keras-style random affine as a pure JAX function."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from crackjax.configs import base
from crackjax.data import augment as augment_lib

ZERO = dict(
  rotation_range=0.0,
  width_shift_range=0.0,
  height_shift_range=0.0,
  shear_range=0.0,
  zoom_range=0.0,
  horizontal_flip=False,
)
PAPER = dict(
  rotation_range=0.2,
  width_shift_range=0.05,
  height_shift_range=0.05,
  shear_range=0.05,
  zoom_range=0.05,
  horizontal_flip=True,
)
# Jitted once per (kwargs, shapes): much faster than running augment's vmap op by op.
augment = jax.jit(augment_lib.augment, static_argnames=(*ZERO, 'image_order'))
STRONG = dict(
  rotation_range=30.0,
  width_shift_range=0.2,
  height_shift_range=0.2,
  shear_range=20.0,
  zoom_range=0.3,
  horizontal_flip=True,
)


def random_batch(seed=0, b=4, h=24, w=40):
  rng = np.random.default_rng(seed)
  image = rng.random((b, h, w, 3), dtype=np.float32)
  mask = (rng.random((b, h, w, 1)) < 0.3).astype(np.float32)
  return jnp.asarray(image), jnp.asarray(mask)


def test_augment_identity():
  image, mask = random_batch()
  out_image, out_mask = augment(jax.random.key(0), image, mask, **ZERO)
  np.testing.assert_array_equal(out_image, image)
  np.testing.assert_array_equal(out_mask, mask)


def test_augment_jit_binary_mask_and_deterministic():
  image, mask = random_batch()
  fn = lambda key, i, m: augment(key, i, m, **STRONG)
  out_image, out_mask = fn(jax.random.key(1), image, mask)
  assert out_image.shape == image.shape and out_mask.shape == mask.shape
  assert out_image.dtype == image.dtype and out_mask.dtype == mask.dtype
  assert set(np.unique(out_mask).tolist()) <= {0.0, 1.0}
  assert not np.array_equal(out_image, image)
  again = fn(jax.random.key(1), image, mask)
  np.testing.assert_array_equal(again[0], out_image)
  # Independent transform per example: two copies of one image come out different.
  twins = jnp.stack([image[0], image[0]])
  twin_out, _ = fn(jax.random.key(2), twins, jnp.stack([mask[0], mask[0]]))
  assert not np.array_equal(twin_out[0], twin_out[1])


def test_augment_horizontal_flip_pattern():
  image, _ = random_batch(b=16)
  # Known mask pattern: the left column is 1, all else 0.
  mask = jnp.zeros(image.shape[:3] + (1,)).at[:, :, 0].set(1.0)
  # With flip only, every example is either unchanged or exactly mirrored left-right.
  flip_only = dict(ZERO, horizontal_flip=True)
  out_image, out_mask = augment(jax.random.key(3), image, mask, **flip_only)
  width = image.shape[2]
  flipped = 0
  for i in range(image.shape[0]):
    if np.array_equal(out_image[i], image[i][:, ::-1]):
      flipped += 1
      expected = np.zeros(mask.shape[1:])
      expected[:, width - 1] = 1.0  # The left column became the right one.
      np.testing.assert_array_equal(out_mask[i], expected)
    else:
      np.testing.assert_array_equal(out_image[i], image[i])
      np.testing.assert_array_equal(out_mask[i], mask[i])
  assert 0 < flipped < image.shape[0]


def test_augment_same_transform_for_image_and_mask():
  image, _ = random_batch(seed=5, b=8)
  mask = (image[..., :1] > 0.5).astype(jnp.float32)
  out_image, out_mask = augment(jax.random.key(4), image, mask, image_order=0, **STRONG)
  np.testing.assert_array_equal(out_mask, (out_image[..., :1] > 0.5).astype(jnp.float32))


def test_augment_paper_ranges_small_change():
  # The paper's ranges are tiny: most pixels move by well under one pixel.
  image = jnp.broadcast_to(jnp.linspace(0, 1, 40)[None, None, :, None], (4, 24, 40, 1))
  out, _ = augment(
    jax.random.key(5), image, jnp.zeros_like(image), **dict(PAPER, horizontal_flip=False)
  )
  assert np.abs(np.asarray(out) - np.asarray(image)).mean() < 0.05


def test_augment_fn_from_config():
  config = base.get_config()
  image, mask = random_batch()
  off = config.copy_and_resolve_references()
  off.augment.enabled = False
  out = augment_lib.augment_fn(off.augment.to_dict())(jax.random.key(0), image, mask)
  assert out[0] is image and out[1] is mask
  fn = jax.jit(augment_lib.augment_fn(config.augment.to_dict()))
  out_image, out_mask = fn(jax.random.key(0), image, mask)
  assert out_image.shape == image.shape
  assert set(np.unique(out_mask).tolist()) <= {0.0, 1.0}
  # The paper's ranges move the image; the same key gives the same transform.
  assert not np.array_equal(np.asarray(out_image), np.asarray(image))
  np.testing.assert_array_equal(fn(jax.random.key(0), image, mask)[0], out_image)


def test_augment_imports_neither_tfds_nor_grain():
  import subprocess

  code = (
    'import sys, crackjax.data.augment; '
    'assert "tensorflow_datasets" not in sys.modules and "grain" not in sys.modules'
  )
  subprocess.run([sys.executable, '-c', code], check=True)
