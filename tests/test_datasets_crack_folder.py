"""Tests of the crack_folder builder (a user's own images): formats, sizes, masks, splits,
validation errors naming the file, data_dir separation, and crackjax.data.registry / loader reading
config.data.folder."""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax.data import registry as data_registry
from crackjax.experiment.build import build as build_experiment
from crackjax.tfds_builders.crack_folder import CrackFolder, crack_folder_dataset_builder
from crackjax.tfds_builders.errors import CrackDataWarning, DatasetError, DatasetNotFoundError
from tests import fixtures

SIZE = (32, 48)


def build(images: Path, masks: Path, data_dir: Path, **kwargs) -> CrackFolder:
  builder = CrackFolder(
    data_dir=str(data_dir), image_dir=str(images), mask_dir=str(masks), **kwargs
  )
  builder.download_and_prepare()
  return builder


def read(builder: CrackFolder, split: str) -> list[dict]:
  source = builder.as_data_source(split)
  return [source[i] for i in range(len(source))]


def chain(e: BaseException | None):
  while e is not None:
    yield e
    e = e.__cause__ or e.__context__


def expect_error(fn, text: str, cls=DatasetError) -> str:
  """Runs fn; asserts it raises ``cls`` somewhere in the chain with ``text`` in a message."""
  with pytest.raises(Exception) as excinfo:
    fn()
  errors = list(chain(excinfo.value))
  assert any(isinstance(e, cls) for e in errors), errors
  assert any(text in str(e) for e in errors), [str(e) for e in errors]
  return str(excinfo.value)


def test_formats_sizes_masks_and_default_split(tmp_path):
  # Mixed formats and sizes; 0/255 masks in PNG; image 3 is a BMP, 4 a TIFF, 5 a PNG.
  sizes = {1: (48, 64), 2: (20, 30)}
  exts = {3: '.bmp', 4: '.tif', 5: '.png'}
  images, masks = fixtures.make_fake_folder(
    tmp_path / 'f', n=10, size=SIZE, sizes=sizes, image_exts=exts
  )
  builder = build(images, masks, tmp_path / 'tfds')
  assert builder.info.file_format.value == 'array_record'
  train, test = read(builder, 'train'), read(builder, 'test')
  assert (len(train), len(test)) == (8, 2)
  names = [r['name'].decode() for r in train + test]
  assert sorted(names) == [f'img_{i:02d}' for i in range(10)]
  expected = crack_folder_dataset_builder.split_names(sorted(names), None, None)
  assert ([r['name'].decode() for r in train], [r['name'].decode() for r in test]) == expected
  for record in train + test:
    i = int(record['name'].decode()[4:])
    shape = sizes.get(i, SIZE)
    assert record['image'].shape == (*shape, 3) and record['image'].dtype == np.uint8
    assert record['mask'].shape == (*shape, 1) and record['mask'].dtype == np.uint8
    np.testing.assert_array_equal(record['mask'][..., 0], fixtures.folder_crack_mask(shape))
    if exts.get(i) in ('.bmp', '.tif', '.png'):  # Lossless: stored pixels are the originals.
      np.testing.assert_array_equal(record['image'], fixtures.fake_pair(shape, i)[0])
  assert 'tensorflow' not in sys.modules


def test_building_and_preparing_leaves_no_temporary_directory(tmp_path, monkeypatch):
  # TFDS's DatasetInfo.initialize_from_bucket makes an empty mkdtemp() per builder built before
  # its data is prepared (contract._LocalDatasetInfo turns it off).
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=3, size=SIZE)
  tmp = tmp_path / 'tmp'
  tmp.mkdir()
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp))
  builder = build(images, masks, tmp_path / 'tfds')
  assert len(read(builder, 'train')) + len(read(builder, 'test')) == 3
  assert list(tmp.iterdir()) == []


def test_zero_one_masks_grey_images_and_mask_suffix(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=3, mask_high=1, mask_ext='.bmp')
  for p in sorted(masks.iterdir()):  # Rename to <stem>_mask.bmp.
    p.rename(p.with_name(p.stem + '_mask.bmp'))
  grey = images / 'img_00.jpg'
  PIL.Image.open(grey).convert('L').save(grey)
  builder = build(images, masks, tmp_path / 'tfds', mask_suffix='_mask')
  records = read(builder, 'train') + read(builder, 'test')
  assert len(records) == 3
  for record in records:
    assert record['image'].shape == (*SIZE, 3)
    np.testing.assert_array_equal(record['mask'][..., 0], fixtures.folder_crack_mask(SIZE))


def test_jpeg_mask_is_thresholded_with_warning(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=3)
  _, mask = fixtures.fake_pair(SIZE, 1)
  (masks / 'img_01.png').unlink()
  fixtures.write_image(masks / 'img_01.jpg', mask, quality=60)  # Lossy: values between 0-255.
  assert len(np.unique(np.asarray(PIL.Image.open(masks / 'img_01.jpg')))) > 2
  with pytest.warns(CrackDataWarning, match=r'1 mask\(s\) are not binary.*img_01\.jpg.*> 127\.5'):
    builder = build(images, masks, tmp_path / 'tfds')
  record = next(r for r in read(builder, 'train') + read(builder, 'test') if r['name'] == b'img_01')
  assert set(np.unique(record['mask']).tolist()) <= {0, 1}
  np.testing.assert_array_equal(record['mask'][..., 0], fixtures.folder_crack_mask(SIZE))


def test_dark_polarity_and_auto(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=2)
  for i in range(2):
    _, mask = fixtures.fake_pair(SIZE, i, dark_cracks=True)
    fixtures.write_image(masks / f'img_{i:02d}.png', mask)
  for polarity in ('dark', 'auto'):
    builder = build(images, masks, tmp_path / f'tfds_{polarity}', mask_polarity=polarity)
    for record in read(builder, 'train') + read(builder, 'test'):
      np.testing.assert_array_equal(record['mask'][..., 0], fixtures.folder_crack_mask(SIZE))


def test_split_lists(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=6)
  train_list = tmp_path / 'train.txt'
  train_list.write_text('# my split\nimg_00.jpg\nimg_02\n\nimg_04  # comment\n')
  builder = build(images, masks, tmp_path / 'tfds1', train_list=str(train_list))
  assert [r['name'] for r in read(builder, 'train')] == [b'img_00', b'img_02', b'img_04']
  assert [r['name'] for r in read(builder, 'test')] == [b'img_01', b'img_03', b'img_05']
  test_list = tmp_path / 'test.txt'
  test_list.write_text('img_05\n')
  with pytest.warns(CrackDataWarning, match='img_01, img_03'):
    builder = build(
      images, masks, tmp_path / 'tfds2', train_list=str(train_list), test_list=str(test_list)
    )
  assert [r['name'] for r in read(builder, 'test')] == [b'img_05']
  test_list.write_text('img_05\nimg_99\n')
  expect_error(lambda: build(images, masks, tmp_path / 'tfds3', test_list=str(test_list)), 'img_99')
  test_list.write_text('img_00\n')
  expect_error(
    lambda: build(
      images, masks, tmp_path / 'tfds4', train_list=str(train_list), test_list=str(test_list)
    ),
    'img_00 listed in both',
  )


def test_different_folders_do_not_collide(tmp_path):
  a = fixtures.make_fake_folder(tmp_path / 'a', n=3)
  b = fixtures.make_fake_folder(tmp_path / 'b', n=4)
  data_dir = tmp_path / 'tfds'
  ba, bb = build(*a, data_dir), build(*b, data_dir)
  assert ba.data_dir != bb.data_dir
  assert ba.builder_config.name.startswith('a_') and bb.builder_config.name.startswith('b_')
  assert len(read(ba, 'train')) + len(read(ba, 'test')) == 3
  assert len(read(bb, 'train')) + len(read(bb, 'test')) == 4
  # Same folder, same options: same config (the prepared data is reused).
  again = CrackFolder(data_dir=str(data_dir), image_dir=str(a[0]), mask_dir=str(a[1]))
  assert again.data_dir == ba.data_dir and again.is_prepared()
  # A changed folder is a new config, never stale data.
  fixtures.write_image(a[0] / 'img_09.png', fixtures.fake_pair(SIZE, 9)[0])
  fixtures.write_image(a[1] / 'img_09.png', fixtures.fake_pair(SIZE, 9)[1])
  changed = CrackFolder(data_dir=str(data_dir), image_dir=str(a[0]), mask_dir=str(a[1]))
  assert changed.data_dir != ba.data_dir and not changed.is_prepared()


# ----------------------------------------------------------------------------- bad inputs


@pytest.fixture
def folder(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=4)
  return images, masks, tmp_path / 'tfds'


def test_missing_mask_names_image(folder):
  images, masks, data_dir = folder
  (masks / 'img_02.png').unlink()
  expect_error(lambda: build(images, masks, data_dir), str(images / 'img_02.jpg'))


def test_mask_without_image_names_mask(folder):
  images, masks, data_dir = folder
  (images / 'img_03.jpg').unlink()
  expect_error(lambda: build(images, masks, data_dir), str(masks / 'img_03.png'))


def test_mask_size_mismatch_names_both(folder):
  images, masks, data_dir = folder
  fixtures.write_image(masks / 'img_01.png', np.zeros((30, 48), np.uint8))
  msg = expect_error(lambda: build(images, masks, data_dir), 'img_01.png')
  assert 'img_01.jpg' in msg and '48x30' in msg


def test_truncated_image_names_file(folder):
  images, masks, data_dir = folder
  path = images / 'img_00.jpg'
  path.write_bytes(path.read_bytes()[:300])
  expect_error(lambda: build(images, masks, data_dir), 'img_00.jpg')


def test_truncated_png_mask_names_file(folder):
  images, masks, data_dir = folder
  path = masks / 'img_03.png'
  path.write_bytes(path.read_bytes()[:60])
  expect_error(lambda: build(images, masks, data_dir), 'img_03.png')


def test_garbage_file_names_file(folder):
  images, masks, data_dir = folder
  (images / 'img_02.jpg').write_bytes(b'this is not an image')
  expect_error(lambda: build(images, masks, data_dir), 'img_02.jpg')


def test_empty_and_missing_dirs(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=2)
  empty = tmp_path / 'empty'
  empty.mkdir()
  (empty / 'notes.txt').write_text('no images here')
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', CrackDataWarning)  # "Skipped notes.txt".
    expect_error(lambda: build(empty, masks, tmp_path / 'tfds'), f'{empty} holds no image')
    expect_error(lambda: build(images, empty, tmp_path / 'tfds'), f'{empty} holds no image')
  expect_error(
    lambda: build(images, tmp_path / 'nope', tmp_path / 'tfds'),
    f'{tmp_path / "nope"} does not exist',
  )


def test_duplicate_stems_and_skipped_files(folder):
  images, masks, data_dir = folder
  fixtures.write_image(images / 'img_01.png', fixtures.fake_pair(SIZE, 1)[0])
  expect_error(lambda: build(images, masks, data_dir), 'img_01.png')
  (images / 'img_01.png').unlink()
  (images / 'README.txt').write_text('x')
  with pytest.warns(CrackDataWarning, match=r'Skipped 1 file.*README\.txt'):
    build(images, masks, data_dir)


def test_needs_both_dirs(tmp_path):
  with pytest.raises(DatasetNotFoundError):
    CrackFolder(data_dir=str(tmp_path), image_dir=str(tmp_path))


# ----------------------------------------------------------------------------- datasets and loader


def test_loader_reads_config_folder(tmp_path):
  config = fixtures.fake_folder_config(tmp_path, n=5)
  examples = list(build_experiment(config).splits.examples())
  assert len(examples) == 1  # 5 images: 4 train / 1 test.
  batch = next(build_experiment(config).splits.train_iterator())
  assert batch['image'].shape == (2, *SIZE, 3)
  np.testing.assert_array_equal(examples[0]['mask'][..., 0], fixtures.folder_crack_mask(SIZE))


def test_datasets_errors_from_config(tmp_path):
  config = fixtures.fake_folder_config(tmp_path, n=3)
  unset = config.copy_and_resolve_references()
  unset.data.folder.masks = None
  with pytest.raises(data_registry.DatasetNotFoundError, match='--config.data.folder.masks'):
    data_registry.get_data_source(unset.data.to_dict(), 'train')
  (Path(config.data.folder.masks) / 'img_01.png').unlink()
  with pytest.raises(data_registry.DatasetError, match='img_01.jpg') as excinfo:
    data_registry.get_data_source(config.data.to_dict(), 'train')
  # One hierarchy: the builder's error class, re-raised with its message only.
  assert data_registry.DatasetError is DatasetError
  assert type(excinfo.value) is DatasetError
  assert str(excinfo.value).startswith('1 image(s) have no mask')
