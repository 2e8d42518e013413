"""Tests of the AigleRN, Crack360 and BJN260 builders on fixtures in their documented
layouts, their configs, and the clear error when their manual files are absent."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import tensorflow_datasets as tfds

from crackjax.data import registry as data_registry
from crackjax.tfds_builders.aiglern import AigleRN, aiglern_dataset_builder
from crackjax.tfds_builders.bjn260 import BJN260, bjn260_dataset_builder
from crackjax.tfds_builders.crack360 import Crack360
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


def build(cls, manual_dir: Path | None, data_dir: Path):
  builder = cls(data_dir=str(data_dir))
  builder.download_and_prepare(
    download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir) if manual_dir else None)
  )
  return builder


def read(builder, split: str) -> list[dict]:
  source = builder.as_data_source(split)
  return [source[i] for i in range(len(source))]


def chain(e):
  while e is not None:
    yield e
    e = e.__cause__ or e.__context__


# ----------------------------------------------------------------------------- AigleRN


def test_aiglern_ids_split_polarity_and_sizes(tmp_path):
  raw = fixtures.make_fake_aiglern(tmp_path / 'raw', n=8, dark_cracks=True)
  builder = build(AigleRN, raw, tmp_path / 'tfds')
  train, test = read(builder, 'train'), read(builder, 'test')
  assert (len(train), len(test)) == (5, 3)  # round(8 * 0.6) = 5; ESAR's image is ignored.
  ids = [f'F{i:02d}A' for i in range(8)]
  assert [r['name'].decode() for r in train] + [r['name'].decode() for r in test] == sum(
    aiglern_dataset_builder.split_ids(ids), []
  )
  for record in train + test:
    i = int(record['name'].decode()[1:3])
    size = (46, 31) if i % 2 == 0 else (46, 99)
    assert record['image'].shape == (*size, 3)
    # Black-on-white ground truth: the minority (black) pixels are the crack.
    np.testing.assert_array_equal(record['mask'][..., 0], fixtures.folder_crack_mask(size))
  assert aiglern_dataset_builder.split_ids([f'{i}' for i in range(38)])[0].__len__() == 23


def test_aiglern_white_cracks_and_flat_layout(tmp_path):
  # White-on-black copy, manual dir = a folder holding images/ and gt/ directly.
  raw = fixtures.make_fake_aiglern(tmp_path / 'raw', n=4, dark_cracks=False)
  flat = tmp_path / 'flat'
  (raw / 'DATASET' / 'IMAGES' / 'AIGLE_RN').rename(flat.mkdir() or flat / 'images')
  (raw / 'DATASET' / 'GROUND_TRUTH' / 'AIGLE_RN').rename(flat / 'gt')
  builder = build(AigleRN, flat, tmp_path / 'tfds')
  for record in read(builder, 'train') + read(builder, 'test'):
    size = record['image'].shape[:2]
    np.testing.assert_array_equal(record['mask'][..., 0], fixtures.folder_crack_mask(size))


def test_aiglern_image_id():
  f = aiglern_dataset_builder.image_id
  assert (
    f('Im_F01Aor') == f('Im_F01A') == f('GT_AIGLE_RN_F01A') == f('Im_GT_AIGLE_RN_F01Aor') == 'F01A'
  )


def test_aiglern_missing_gt_names_file(tmp_path):
  raw = fixtures.make_fake_aiglern(tmp_path / 'raw', n=4)
  (raw / 'DATASET' / 'GROUND_TRUTH' / 'AIGLE_RN' / 'GT_AIGLE_RN_F02A.png').unlink()
  with pytest.raises(Exception) as excinfo:
    build(AigleRN, raw, tmp_path / 'tfds')
  assert any(
    isinstance(e, DatasetError) and 'Im_F02Aor.png' in str(e) for e in chain(excinfo.value)
  )


# ----------------------------------------------------------------------------- Crack360


@pytest.mark.parametrize('variant', ['subdirs', 'siblings'])
def test_crack360_layouts(tmp_path, variant):
  raw = fixtures.make_fake_crack360(tmp_path / 'raw', n_train=5, n_test=3, variant=variant)
  builder = build(Crack360, raw, tmp_path / 'tfds')
  train, test = read(builder, 'train'), read(builder, 'test')
  assert [r['name'].decode() for r in train] == [str(6000 + i) for i in range(5)]
  assert [r['name'].decode() for r in test] == [str(1000 + i) for i in range(3)]
  for records, size in ((train, fixtures.CRACKTREE_SIZE), (test, fixtures.CRKWH_SIZE)):
    for record in records:
      assert record['image'].shape == (*size, 3)
      np.testing.assert_array_equal(record['mask'][..., 0], fixtures.folder_crack_mask(size))


def test_crack360_size_mismatch_and_missing_test_set(tmp_path):
  raw = fixtures.make_fake_crack360(tmp_path / 'raw', n_train=3, n_test=2)
  fixtures.write_image(raw / 'CRKWH100' / 'gt' / '1001.bmp', np.zeros((32, 30), np.uint8))
  with pytest.raises(Exception) as excinfo:
    build(Crack360, raw, tmp_path / 'tfds')
  assert any('1001.bmp' in str(e) and '1001.png' in str(e) for e in chain(excinfo.value))
  import shutil

  shutil.rmtree(raw / 'CRKWH100')
  with pytest.raises(Exception) as excinfo:
    build(Crack360, raw, tmp_path / 'tfds2')
  errors = list(chain(excinfo.value))
  assert any(isinstance(e, DatasetNotFoundError) and "'crkwh100'" in str(e) for e in errors)


# ----------------------------------------------------------------------------- BJN260


def test_bjn260_resize_split_and_thin_cracks(tmp_path):
  raw = fixtures.make_fake_bjn260(tmp_path / 'raw', n=6)
  builder = build(BJN260, raw, tmp_path / 'tfds')
  train, test = read(builder, 'train'), read(builder, 'test')
  assert (len(train), len(test)) == (5, 1)  # round(6 * 200 / 260) = 5.
  names = sorted(r['name'].decode() for r in train + test)
  assert names[0] == 'IMG_20180501_213000'
  h, w = fixtures.BJN_SIZE
  for record in train + test:
    assert record['image'].shape == (320, 480, 3) and record['mask'].shape == (320, 480, 1)
    mask = record['mask'][..., 0]
    assert set(np.unique(mask).tolist()) == {0, 1}
    # The one-pixel crack row/column of the original survive as full lines.
    row = fixtures.CRACK_ROW * 320 // h
    col = fixtures.FOLDER_CRACK_COL * 480 // w
    assert mask[row].all() and mask[:, col].all()
    # ... at most 2 pixels wide, and nothing else is crack.
    assert mask.sum() <= 2 * (480 + 320)
    i = int(record['name'].decode()[10:12]) - 1
    image, _ = fixtures.fake_pair(fixtures.BJN_SIZE, i)
    expected = np.asarray(
      PIL.Image.fromarray(image).resize((480, 320), PIL.Image.Resampling.LANCZOS)
    )
    np.testing.assert_array_equal(record['image'], expected)
  train_names, test_names = bjn260_dataset_builder.split_names([str(i) for i in range(260)])
  assert (len(train_names), len(test_names)) == (200, 60)


def test_bjn260_mask_resize_is_any_overlap():
  rng = np.random.default_rng(0)
  src = (rng.random((224, 397)) < 0.01).astype(np.uint8)
  out = bjn260_dataset_builder.resize_mask(src, (48, 32))
  sy, sx = 224 / 32, 397 / 48
  expected = np.zeros((32, 48), np.uint8)
  for i in range(32):
    for j in range(48):
      block = src[
        int(np.floor(i * sy)) : int(np.ceil((i + 1) * sy)),
        int(np.floor(j * sx)) : int(np.ceil((j + 1) * sx)),
      ]
      expected[i, j] = block.any()
  np.testing.assert_array_equal(out, expected)


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
  'name,dataset,beta,epochs',
  [
    ('aiglern_exp', 'aiglern', 1.0, 15),
    ('crack360_exp', 'crack360', 1.0, 10),
    ('bjn260_exp', 'bjn260', 0.75, 15),
  ],
)
def test_configs(name, dataset, beta, epochs):
  config = importlib.import_module(f'crackjax.configs.{name}').get_config()
  assert config.data.name == dataset and config.data.name in data_registry.DATASETS
  assert (config.loss.weighting, config.loss.beta, config.num_epochs) == ('exp', beta, epochs)
  for h_w in [config.data.input_size] if config.data.input_size else []:
    assert all(x % 16 == 0 for x in h_w)
  if dataset == 'aiglern':
    assert config.model.widths == (32, 64, 128, 256, 512) and config.steps_per_epoch == 200
    assert config.data.input_size == (448, 304) and config.data.noise_std == pytest.approx(0.1)
  if dataset == 'crack360':
    assert config.data.input_size == (512, 512)


@pytest.mark.parametrize('name', ['aiglern_exp', 'crack360_exp', 'bjn260_exp'])
def test_manual_files_absent_clear_error(tmp_path, name):
  data = importlib.import_module(f'crackjax.configs.{name}').get_config().data
  data.data_dir = str(tmp_path / 'tfds')
  with pytest.raises(data_registry.DatasetNotFoundError) as excinfo:
    data_registry.get_data_source(data.to_dict(), 'train')
  msg = str(excinfo.value)
  assert 'config.data.manual_dir is not set' in msg and 'not downloaded automatically' in msg
  assert '--config.data.manual_dir=DIR' in msg and 'README.md' in msg
  (tmp_path / 'empty').mkdir()
  data.manual_dir = str(tmp_path / 'empty')
  with pytest.raises(data_registry.DatasetNotFoundError, match='is empty'):
    data_registry.get_data_source(data.to_dict(), 'train')
  # A manual dir with the wrong contents: the builder's layout error, as DatasetNotFoundError.
  (tmp_path / 'empty' / 'something.txt').write_text('x')
  with pytest.raises(data_registry.DatasetNotFoundError, match='Expected layout'):
    data_registry.get_data_source(data.to_dict(), 'train')


@pytest.mark.slow
def test_launch_reports_missing_manual_files(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / 'launch.py'),
      f'--config={REPO / "configs/crack360_exp.py"}',
      f'--workdir={tmp_path / "w"}',
      f'--config.data.data_dir={tmp_path / "tfds"}',
    ],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=REPO,
  )
  assert proc.returncode != 0
  assert 'CrackTree260' in proc.stderr and 'config.data.manual_dir is not set' in proc.stderr
  assert 'Traceback' not in proc.stderr  # a message, not a crash
  assert not (tmp_path / 'w').exists()  # stopped before writing anything


def test_prepare_dataset_fails_fast(tmp_path):
  data = importlib.import_module('crackjax.configs.aiglern_exp').get_config().data
  data.data_dir = str(tmp_path / 'tfds')
  with pytest.raises(data_registry.DatasetNotFoundError, match='CrackDataset'):
    data_registry.prepare_dataset(data.to_dict())
  raw = fixtures.make_fake_aiglern(tmp_path / 'raw', n=4)
  data.manual_dir = str(raw)
  assert data_registry.prepare_dataset(data.to_dict()).is_prepared()
  data.manual_dir = None  # Prepared: no manual dir needed any more.
  assert len(data_registry.get_data_source(data.to_dict(), 'test')) == 2


def test_aiglern_crack_free_crops_give_finite_loss():
  # §IV-B footnote: a 448x304 crop may hold no crack pixel; the loss must stay finite.
  import jax.numpy as jnp

  from crackjax import losses

  config = importlib.import_module('crackjax.configs.aiglern_exp').get_config()
  loss_fn = losses.loss_from_config(config.loss.to_dict())
  labels = jnp.zeros((2, 448, 304, 1))
  logits = jnp.zeros_like(labels)
  loss, metrics = loss_fn(logits, labels)
  assert np.isfinite(float(loss)) and np.isfinite(float(metrics['q']))
