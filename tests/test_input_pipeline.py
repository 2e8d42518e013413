"""Tests of crackjax.input_pipeline: batches, determinism, resuming, processes, augment."""

from __future__ import annotations

import itertools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crackjax import input_pipeline
from tests import fixtures

SIZE = (32, 48)


@pytest.fixture(scope='module')
def config(tmp_path_factory):
  # Module-scoped: the fake dataset is prepared once; tests copy the config to change it.
  return fixtures.fake_data_config(tmp_path_factory.mktemp('pipeline'), size=SIZE)


def take(iterator, n):
  return list(itertools.islice(iterator, n))


def assert_batches_equal(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b, strict=True):
    assert x.keys() == y.keys()
    for key in x:
      np.testing.assert_array_equal(x[key], y[key])


def test_unknown_dataset(config):
  bad = config.copy_and_resolve_references()
  bad.dataset = 'nope'
  with pytest.raises(ValueError, match='crackforest'):
    input_pipeline.get_data_source(bad, 'train')


def test_batch_shapes_dtypes_and_no_tensorflow(config):
  batch = next(input_pipeline.create_train_iterator(config))
  assert set(batch) == {'image', 'mask'}
  assert batch['image'].shape == (2, *SIZE, 3) and batch['image'].dtype == np.float32
  assert batch['mask'].shape == (2, *SIZE, 1) and batch['mask'].dtype == np.float32
  assert 0.0 <= batch['image'].min() and batch['image'].max() <= 1.0
  assert set(np.unique(batch['mask']).tolist()) == {0.0, 1.0}
  assert 'tensorflow' not in sys.modules


def test_deterministic_and_epochs_cover_split(config):
  a = take(input_pipeline.create_train_iterator(config), 6)
  b = take(input_pipeline.create_train_iterator(config), 6)
  assert_batches_equal(a, b)
  # 6 train images, batch 2: batches 0-2 are epoch 0, a permutation of all images.
  epoch0 = np.concatenate([x['image'] for x in a[:3]])
  epoch1 = np.concatenate([x['image'] for x in a[3:]])
  key = lambda imgs: sorted(img.tobytes() for img in imgs)
  assert key(epoch0) == key(epoch1)
  assert len(set(key(epoch0))) == 6
  other = config.copy_and_resolve_references()
  other.seed = 1
  c = take(input_pipeline.create_train_iterator(other), 6)
  assert any(not np.array_equal(x['image'], y['image']) for x, y in zip(a, c, strict=True))


def test_resume_equals_continuing(config):
  full = take(input_pipeline.create_train_iterator(config), 8)
  for k in (1, 3, 5):
    resumed = take(input_pipeline.create_train_iterator(config, start_step=k), 8 - k)
    assert_batches_equal(resumed, full[k:])


def test_processes_concatenate_to_global_batch(config):
  four = config.copy_and_resolve_references()
  four.batch_size = 4
  single = take(input_pipeline.create_train_iterator(four, process_index=0, process_count=1), 4)
  parts = [take(input_pipeline.create_train_iterator(
      four, start_step=1, process_index=p, process_count=2), 3) for p in range(2)]
  for k in range(3):
    for key in ('image', 'mask'):
      assert parts[0][k][key].shape[0] == 2
      np.testing.assert_array_equal(
          np.concatenate([parts[0][k][key], parts[1][k][key]]), single[k + 1][key])
  with pytest.raises(ValueError, match='divisible'):
    input_pipeline.create_train_iterator(four, process_index=0, process_count=3)


def test_random_crop_and_noise(config):
  cropped = config.copy_and_resolve_references()
  cropped.input_size = (16, 32)
  cropped.noise_std = 0.1
  a = take(input_pipeline.create_train_iterator(cropped), 3)
  b = take(input_pipeline.create_train_iterator(cropped, start_step=2), 1)
  assert a[0]['image'].shape == (2, 16, 32, 3) and a[0]['mask'].shape == (2, 16, 32, 1)
  assert_batches_equal(a[2:], b)
  assert 0.0 <= min(x['image'].min() for x in a) and max(x['image'].max() for x in a) <= 1.0
  assert set(np.unique(np.concatenate([x['mask'] for x in a])).tolist()) <= {0.0, 1.0}
  too_big = config.copy_and_resolve_references()
  too_big.input_size = (64, 48)
  with pytest.raises(ValueError, match='larger than image'):
    next(input_pipeline.create_train_iterator(too_big))


def test_eval_examples(config):
  examples = list(input_pipeline.eval_examples(config))
  assert [ex['name'] for ex in examples] == ['001', '002', '009', '010']  # Stored (sorted).
  ex = examples[0]
  assert ex['image'].shape == (*SIZE, 3) and ex['image'].dtype == np.float32
  assert ex['mask'].shape == (*SIZE, 1) and ex['mask'].dtype == np.float32
  np.testing.assert_array_equal(ex['mask'][..., 0], fixtures.fake_crack_mask(SIZE))
  assert len(list(input_pipeline.eval_examples(config, 'train'))) == 6


# ----------------------------------------------------------------------------- augment

ZERO = dict(rotation_range=0.0, width_shift_range=0.0, height_shift_range=0.0,
            shear_range=0.0, zoom_range=0.0, horizontal_flip=False)
PAPER = dict(rotation_range=0.2, width_shift_range=0.05, height_shift_range=0.05,
             shear_range=0.05, zoom_range=0.05, horizontal_flip=True)
# Jitted once per (kwargs, shapes): much faster than running augment's vmap op by op.
augment = jax.jit(input_pipeline.augment, static_argnames=(*ZERO, 'image_order'))
STRONG = dict(rotation_range=30.0, width_shift_range=0.2, height_shift_range=0.2,
              shear_range=20.0, zoom_range=0.3, horizontal_flip=True)


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
  out_image, out_mask = augment(jax.random.key(4), image, mask, image_order=0,
                                               **STRONG)
  np.testing.assert_array_equal(out_mask, (out_image[..., :1] > 0.5).astype(jnp.float32))


def test_augment_paper_ranges_small_change():
  # The paper's ranges are tiny: most pixels move by well under one pixel.
  image = jnp.broadcast_to(jnp.linspace(0, 1, 40)[None, None, :, None], (4, 24, 40, 1))
  out, _ = augment(jax.random.key(5), image, jnp.zeros_like(image),
                                  **dict(PAPER, horizontal_flip=False))
  assert np.abs(np.asarray(out) - np.asarray(image)).mean() < 0.05


def test_augment_from_config(config):
  image, mask = random_batch()
  off = config.copy_and_resolve_references()
  off.augment.enabled = False
  out = input_pipeline.augment_from_config(jax.random.key(0), image, mask, off)
  assert out[0] is image and out[1] is mask
  fn = jax.jit(lambda key, i, m: input_pipeline.augment_from_config(key, i, m, config))
  out_image, out_mask = fn(jax.random.key(0), image, mask)
  assert out_image.shape == image.shape
  assert set(np.unique(out_mask).tolist()) <= {0.0, 1.0}
