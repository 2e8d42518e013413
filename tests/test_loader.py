"""Tests of crackjax.data.loader and crackjax.data.registry: batches, determinism, resuming,
processes."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from crackjax.data import registry as data_registry
from crackjax.experiment.build import build
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
  bad.data.name = 'nope'
  with pytest.raises(ValueError, match='config.data.name=.nope.*crackforest'):
    data_registry.get_data_source(bad.data.to_dict(), 'train')


def test_batch_shapes_dtypes_and_no_tensorflow(config):
  batch = next(build(config).splits.train_iterator())
  assert set(batch) == {'image', 'mask'}
  assert batch['image'].shape == (2, *SIZE, 3) and batch['image'].dtype == np.float32
  assert batch['mask'].shape == (2, *SIZE, 1) and batch['mask'].dtype == np.float32
  assert 0.0 <= batch['image'].min() and batch['image'].max() <= 1.0
  assert set(np.unique(batch['mask']).tolist()) == {0.0, 1.0}
  assert 'tensorflow' not in sys.modules


def test_deterministic_and_epochs_cover_split(config):
  a = take(build(config).splits.train_iterator(), 6)
  b = take(build(config).splits.train_iterator(), 6)
  assert_batches_equal(a, b)
  # 6 train images, batch 2: batches 0-2 are epoch 0, a permutation of all images.
  epoch0 = np.concatenate([x['image'] for x in a[:3]])
  epoch1 = np.concatenate([x['image'] for x in a[3:]])
  key = lambda imgs: sorted(img.tobytes() for img in imgs)
  assert key(epoch0) == key(epoch1)
  assert len(set(key(epoch0))) == 6
  other = config.copy_and_resolve_references()
  other.seed = 1
  c = take(build(other).splits.train_iterator(), 6)
  assert any(not np.array_equal(x['image'], y['image']) for x, y in zip(a, c, strict=True))


def test_resume_equals_continuing(config):
  full = take(build(config).splits.train_iterator(), 8)
  for k in (1, 3, 5):
    resumed = take(build(config).splits.train_iterator(start_step=k), 8 - k)
    assert_batches_equal(resumed, full[k:])


def test_processes_concatenate_to_global_batch(config):
  four = config.copy_and_resolve_references()
  four.batch_size = 4
  single = take(build(four).splits.train_iterator(process_index=0, process_count=1), 4)
  parts = [
    take(build(four).splits.train_iterator(start_step=1, process_index=p, process_count=2), 3)
    for p in range(2)
  ]
  for k in range(3):
    for key in ('image', 'mask'):
      assert parts[0][k][key].shape[0] == 2
      np.testing.assert_array_equal(
        np.concatenate([parts[0][k][key], parts[1][k][key]]), single[k + 1][key]
      )
  with pytest.raises(ValueError, match='divisible'):
    build(four).splits.train_iterator(process_index=0, process_count=3)


def test_random_crop_and_noise(config):
  cropped = config.copy_and_resolve_references()
  cropped.data.input_size = (16, 32)
  cropped.data.noise_std = 0.1
  a = take(build(cropped).splits.train_iterator(), 3)
  b = take(build(cropped).splits.train_iterator(start_step=2), 1)
  assert a[0]['image'].shape == (2, 16, 32, 3) and a[0]['mask'].shape == (2, 16, 32, 1)
  assert_batches_equal(a[2:], b)
  assert 0.0 <= min(x['image'].min() for x in a) and max(x['image'].max() for x in a) <= 1.0
  assert set(np.unique(np.concatenate([x['mask'] for x in a])).tolist()) <= {0.0, 1.0}
  too_big = config.copy_and_resolve_references()
  too_big.data.input_size = (64, 48)
  with pytest.raises(ValueError, match='larger than image'):
    next(build(too_big).splits.train_iterator())


def test_eval_examples(config):
  examples = list(build(config).splits.examples())
  assert [ex['name'] for ex in examples] == ['001', '002', '009', '010']  # Stored (sorted).
  ex = examples[0]
  assert ex['image'].shape == (*SIZE, 3) and ex['image'].dtype == np.float32
  assert ex['mask'].shape == (*SIZE, 1) and ex['mask'].dtype == np.float32
  np.testing.assert_array_equal(ex['mask'][..., 0], fixtures.fake_crack_mask(SIZE))
  assert len(list(build(config).splits.examples('train'))) == 6
