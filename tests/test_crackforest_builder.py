"""Tests of the CrackForest TFDS builder: fake archive, error cases and the real dataset."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from crackjax.tfds_builders.crackforest import CrackForest, splits
from crackjax.tfds_builders.errors import DatasetError, DatasetNotFoundError
from tests import fixtures

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_DATA_CANDIDATES = (
  Path('/work/shared/datasets/crackforest'),
  REPO_ROOT.parent / 'shared' / 'datasets' / 'crackforest',
)


def build(manual_dir: Path, data_dir: Path) -> CrackForest:
  builder = CrackForest(data_dir=str(data_dir))
  builder.download_and_prepare(
    download_config=tfds.download.DownloadConfig(manual_dir=str(manual_dir))
  )
  return builder


def read_split(builder: CrackForest, split: str) -> list[dict]:
  source = builder.as_data_source(split)
  return [source[i] for i in range(len(source))]


@pytest.fixture(scope='module')
def fake_build(tmp_path_factory) -> tuple[Path, CrackForest]:
  tmp = tmp_path_factory.mktemp('crackforest')
  raw = fixtures.make_fake_crackforest(tmp / 'raw', n_labelled=10, n_unlabelled=2)
  return raw, build(raw, tmp / 'tfds')


def test_split_counts_names_and_format(fake_build):
  _, builder = fake_build
  assert builder.info.file_format.value == 'array_record'
  train, test = read_split(builder, 'train'), read_split(builder, 'test')
  assert (len(train), len(test)) == (6, 4)  # round(10 * 72/118) = 6.
  names = [r['name'].decode() for r in train + test]
  # Every labelled stem exactly once; unlabelled 011, 012 are in no split.
  assert sorted(names) == [f'{i:03d}' for i in range(1, 11)]
  expected_train, expected_test = splits.split_stems([f'{i:03d}' for i in range(1, 11)])
  assert [r['name'].decode() for r in train] == expected_train  # Stored in sorted order.
  assert [r['name'].decode() for r in test] == expected_test


def test_features_and_crack_mapping(fake_build):
  _, builder = fake_build
  expected_mask = fixtures.fake_crack_mask((32, 48))
  for record in read_split(builder, 'train') + read_split(builder, 'test'):
    assert record['image'].shape == (32, 48, 3) and record['image'].dtype == np.uint8
    mask = record['mask']
    assert mask.shape == (32, 48, 1) and mask.dtype == np.uint8
    assert set(np.unique(mask).tolist()) <= {0, 1}
    np.testing.assert_array_equal(mask[..., 0], expected_mask)
    assert mask[fixtures.CRACK_ROW, 7, 0] == 1  # Label 2.
    assert mask[fixtures.FAINT_CRACK_PIXEL][0] == 1  # Label 4.
    assert mask[fixtures.PATCH_PIXEL][0] == 0  # Label 3 is background.
    assert mask[fixtures.BACKGROUND_PIXEL][0] == 0  # Label 1.
    # Cracks were drawn dark in the JPEG, so the image matches its mask.
    assert record['image'][fixtures.CRACK_ROW].mean() < 80 < record['image'][0].mean()


def test_split_deterministic_across_builds(fake_build, tmp_path):
  raw, builder = fake_build
  again = build(raw, tmp_path / 'tfds2')
  for split in ('train', 'test'):
    a, b = read_split(builder, split), read_split(again, split)
    assert [r['name'] for r in a] == [r['name'] for r in b]
    for ra, rb in zip(a, b, strict=True):
      np.testing.assert_array_equal(ra['image'], rb['image'])


def test_manual_dir_may_contain_extracted_archive_folder(tmp_path):
  raw = fixtures.make_fake_crackforest(
    tmp_path / 'dl' / 'CrackForest-dataset-master', n_labelled=5, n_unlabelled=0
  )
  builder = build(raw.parent, tmp_path / 'tfds')
  assert len(builder.as_data_source('train')) + len(builder.as_data_source('test')) == 5


def test_registered_and_reads_without_tensorflow(fake_build):
  _, builder = fake_build
  assert 'crackforest' in tfds.list_builders(with_community_datasets=False)
  # A fresh interpreter: build + read must not import TensorFlow (it is not even installed
  # here, but the check also holds where it is).
  code = (
    'import sys, tensorflow_datasets as tfds, crackjax.tfds_builders\n'
    f'b = tfds.builder("crackforest", data_dir={str(builder.data_dir_root)!r})\n'
    'src = b.as_data_source("train"); src[0]["image"]\n'
    'src = tfds.data_source("crackforest", split="test", '
    f'data_dir={str(builder.data_dir_root)!r}); src[0]["mask"]\n'
    'assert "tensorflow" not in sys.modules, "TensorFlow was imported"\n'
  )
  subprocess.run([sys.executable, '-c', code], check=True, cwd=REPO_ROOT, timeout=60)
  assert 'tensorflow' not in sys.modules


def test_rule_reproduces_recorded_real_split():
  train, test = splits.split_stems([f'{i:03d}' for i in range(1, 119)])
  assert (len(train), len(test)) == (72, 46)
  assert tuple(train) == splits.CRACKFOREST_TRAIN
  assert tuple(test) == splits.CRACKFOREST_TEST


def _chain(e: BaseException | None):
  while e is not None:
    yield e
    e = e.__cause__ or e.__context__


def _expect_build_error(raw: Path, data_dir: Path, filename: str) -> None:
  with pytest.raises(Exception) as excinfo:
    build(raw, data_dir)
  # TFDS may wrap the builder's error; the file name must survive in the chain.
  errors = list(_chain(excinfo.value))
  assert any(filename in str(e) for e in errors), [str(e) for e in errors]
  assert any(isinstance(e, DatasetError) for e in errors)


def test_truncated_jpeg_names_file(tmp_path):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=4, n_unlabelled=0)
  path = raw / 'image' / '003.jpg'
  path.write_bytes(path.read_bytes()[:200])
  _expect_build_error(raw, tmp_path / 'tfds', '003.jpg')


def test_garbage_image_names_file(tmp_path):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=4, n_unlabelled=0)
  (raw / 'image' / '002.jpg').write_bytes(b'not a jpeg at all')
  _expect_build_error(raw, tmp_path / 'tfds', '002.jpg')


def test_mat_size_mismatch_names_file(tmp_path):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=4, n_unlabelled=0)
  fixtures.write_mat(raw / 'groundTruth' / '004.mat', fixtures.fake_segmentation((40, 48)))
  _expect_build_error(raw, tmp_path / 'tfds', '004.mat')


def test_missing_image_names_file(tmp_path):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=4, n_unlabelled=0)
  (raw / 'image' / '001.jpg').unlink()
  _expect_build_error(raw, tmp_path / 'tfds', '001.jpg')


def test_not_a_dataset_dir(tmp_path):
  (tmp_path / 'empty').mkdir()
  (tmp_path / 'empty' / 'x.txt').write_text('x')
  with pytest.raises(Exception) as excinfo:
    build(tmp_path / 'empty', tmp_path / 'tfds')
  assert any(
    isinstance(x, DatasetNotFoundError) and 'groundTruth' in str(x) for x in _chain(excinfo.value)
  )


def _real_data_dir() -> Path | None:
  for path in REAL_DATA_CANDIDATES:
    if (path / 'groundTruth').is_dir():
      return path
  return None


# Builds the real archive (~10 s): the slow tier.
@pytest.mark.slow
@pytest.mark.skipif(_real_data_dir() is None, reason='real CrackForest data not available')
def test_real_crackforest(tmp_path):
  builder = build(_real_data_dir(), tmp_path / 'tfds')
  train, test = builder.as_data_source('train'), builder.as_data_source('test')
  assert (len(train), len(test)) == (72, 46)
  crack = total = 0
  names = []
  for source in (train, test):
    for i in range(len(source)):
      record = source[i]
      names.append(record['name'].decode())
      assert record['image'].shape == (320, 480, 3)
      mask = record['mask']
      crack += int(mask.sum(dtype=np.int64))
      total += mask.size
  assert names == list(splits.CRACKFOREST_TRAIN) + list(splits.CRACKFOREST_TEST)
  # README: crack = {2, 4} is 1.623% of all pixels of the 118 labelled images.
  assert crack / total * 100 == pytest.approx(1.623, abs=0.001)
  shutil.rmtree(tmp_path / 'tfds')  # ~24 MB; don't keep it in pytest's tmp dirs.
