"""Data sanity checks: one warning per split and condition (not per file), the refusal of masks
that are mostly crack, high-bit-depth images read by their range, and data_stats' diagnosis."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax.data import registry as data_registry
from crackjax.tfds_builders.errors import CrackDataWarning, DatasetError
from crackjax.trainer import data_stats
from tests import fixtures

SIZE = (32, 48)
CONFIGS = Path(__file__).resolve().parents[1] / 'configs'


def prepare(config) -> tuple[data_registry.tfds.core.DatasetBuilder, list[str]]:
  """Prepares config.data; returns the builder and every CrackDataWarning's message."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    builder = data_registry.prepare_dataset(config.data.to_dict())
  return builder, [str(w.message) for w in caught if issubclass(w.category, CrackDataWarning)]


def records(builder) -> dict[str, dict]:
  out = {}
  for split in ('train', 'test'):
    source = builder.as_data_source(split)
    for i in range(len(source)):
      out[source[i]['name'].decode()] = source[i]
  return out


def invert_masks(masks: Path, indices) -> None:
  for i in indices:
    _, mask = fixtures.fake_pair(SIZE, i, dark_cracks=True)
    fixtures.write_image(masks / f'img_{i:02d}.png', mask)


def test_inverted_polarity_is_refused_naming_the_field(tmp_path, capsys):
  config = fixtures.fake_folder_config(tmp_path, n=5)
  invert_masks(Path(config.data.folder.masks), range(5))
  with pytest.raises(DatasetError) as excinfo:
    prepare(config)
  message = str(excinfo.value)
  assert 'mask(s) are mostly crack' in message
  assert 'img_00.png (95% crack)' in message
  assert '--config.data.folder.mask_polarity=dark' in message
  assert '--config.data.folder.allow_majority_crack=True' in message
  assert excinfo.value.__cause__ is not None  # Re-raised by crackjax.data.registry, message only.
  # The command line: one line on stderr, no traceback.
  rc = data_stats.main(
    [
      f'--config={CONFIGS / "crack_folder.py"}',
      f'--config.data.folder.images={config.data.folder.images}',
      f'--config.data.folder.masks={config.data.folder.masks}',
      f'--config.data.data_dir={config.data.data_dir}',
    ]
  )
  assert rc == 1
  err = capsys.readouterr().err
  last = err.strip().splitlines()[-1]  # TFDS' progress bars come before it.
  assert (
    last.startswith('python -m crackjax.trainer.data_stats: crack_folder/')
    and 'mask_polarity=dark' in last
  )
  assert 'Traceback' not in err


def test_inverted_polarity_with_override_prepares_with_one_warning(tmp_path):
  config = fixtures.fake_folder_config(tmp_path, n=5)
  invert_masks(Path(config.data.folder.masks), [0])
  config.data.folder.allow_majority_crack = True
  builder, messages = prepare(config)
  assert len(messages) == 1, messages
  assert 'crack_folder/' in messages[0] and '1 mask(s) are mostly crack' in messages[0]
  assert 'img_00.png (95% crack)' in messages[0] and 'allow_majority_crack is set' in messages[0]
  assert records(builder)['img_00']['mask'].mean() > 0.9  # Kept as given.
  # mask_polarity=auto reads it right, without any warning.
  config.data.folder.allow_majority_crack = False
  config.data.folder.mask_polarity = 'auto'
  config.data.data_dir = str(tmp_path / 'tfds_auto')
  builder, messages = prepare(config)
  assert messages == []
  np.testing.assert_array_equal(
    records(builder)['img_00']['mask'][..., 0], fixtures.folder_crack_mask(SIZE)
  )


def test_jpeg_masks_give_one_summary_warning_per_split(tmp_path):
  fixtures.make_fake_folder(tmp_path / 'folder', n=10, mask_ext='.jpg')
  config = fixtures.fake_folder_config(tmp_path)
  builder, messages = prepare(config)
  assert len(messages) == 2, messages  # train (8 masks) and test (2), one line each.
  train = next(m for m in messages if m.startswith('crack_folder/train:'))
  test = next(m for m in messages if m.startswith('crack_folder/test:'))
  assert train.startswith('crack_folder/train: 8 mask(s) are not binary')
  assert f'in {config.data.folder.masks}: img_' in train
  assert '.jpg (' in train and 'crack = value > 127.5' in train and '... (3 more)' in train
  assert test.startswith('crack_folder/test: 2 mask(s) are not binary')
  for record in records(builder).values():
    assert set(np.unique(record['mask']).tolist()) <= {0, 1}


def test_split_without_crack_pixels_is_named(tmp_path):
  config = fixtures.fake_folder_config(tmp_path, n=5)
  masks = Path(config.data.folder.masks)
  for i in (3, 4):
    fixtures.write_image(masks / f'img_{i:02d}.png', np.zeros(SIZE, np.uint8))
  test_list = tmp_path / 'test.txt'
  test_list.write_text('img_03\nimg_04\n')
  config.data.folder.test_list = str(test_list)
  _, messages = prepare(config)
  assert messages == [
    'crack_folder/test: none of its 2 mask(s) has a crack pixel. Training on it learns nothing '
    'and F1 on it is 0 or meaningless; check the mask files, the mask polarity and the mask '
    'threshold.'
  ]


def test_12_bit_data_in_16_bit_file_is_scaled_by_its_range(tmp_path):
  config = fixtures.fake_folder_config(tmp_path, n=5)
  images = Path(config.data.folder.images)
  (images / 'img_00.jpg').unlink()
  grey = np.linspace(0, 4000, SIZE[0] * SIZE[1]).reshape(SIZE).astype(np.uint16)
  fixtures.write_image(images / 'img_00.png', grey)
  assert PIL.Image.open(images / 'img_00.png').mode.startswith('I')
  builder, messages = prepare(config)
  stored = records(builder)['img_00']['image']
  expected = np.round(grey * (255 / 4095)).astype(np.uint8)
  np.testing.assert_array_equal(stored[..., 0], expected)
  assert stored.max() == 249  # Not 16 (4000 / 65535 of 255).
  assert len(messages) == 1, messages
  assert '1 image(s) have more than 8 bits' in messages[0]
  assert 'img_00.png (max 4000: 12-bit)' in messages[0]


def test_nearly_black_image_gives_one_warning(tmp_path):
  config = fixtures.fake_folder_config(tmp_path, n=5)
  images = Path(config.data.folder.images)
  (images / 'img_02.jpg').unlink()
  dark = np.random.default_rng(0).integers(0, 6, size=(*SIZE, 3), dtype=np.uint8)
  fixtures.write_image(images / 'img_02.png', dark)
  _, messages = prepare(config)
  assert len(messages) == 1, messages
  assert '1 image(s) are nearly black (mean brightness < 10 of 255)' in messages[0]
  assert 'img_02.png (mean 2.' in messages[0]


def stats_of(*sizes_and_cracks: tuple[tuple[int, int], float]) -> dict:
  """split_stats of masks of the given (H, W) with the given crack share (first rows)."""
  source = []
  for i, ((h, w), share) in enumerate(sizes_and_cracks):
    mask = np.zeros((h, w, 1), np.uint8)
    mask.reshape(-1)[: round(share * h * w)] = 1
    source.append({'mask': mask, 'name': f'm{i}'.encode()})
  return data_stats.split_stats(source)


def test_diagnose_flags_and_input_size():
  stats = {
    'train': stats_of(((330, 500), 0.02), ((340, 490), 0.0)),
    'test': stats_of(((64, 64), 0.0), ((64, 64), 0.0)),
  }
  lines = data_stats.diagnose(stats)
  assert lines == [
    'train: 1 of 2 images have no crack pixels.',
    'train: sizes are mixed (2 sizes).',
    'test: no crack pixels in any of its 2 masks; training on it learns nothing and F1 on it '
    'is meaningless (check the masks, --config.data.folder.mask_polarity and mask_threshold).',
    'input_size: every train image is at least 330x490 (HxW): --config.data.input_size='
    "'(320, 480)' fits all; sizes are mixed, so training needs it.",
  ]
  inverted = {'train': stats_of(((32, 48), 0.97), ((32, 48), 0.95))}
  lines = data_stats.diagnose(inverted)
  assert lines[0] == (
    'train: crack is the majority (96.0% of the split; 2 masks more than half crack: m0, m1); '
    'black cracks on white? Set --config.data.folder.mask_polarity=dark (or auto).'
  )
  assert lines[1].startswith('input_size: every train image is 32x48 (HxW)')
  assert 'whole images work' in lines[1]
  # A public dataset has no mask settings: the advice names none.
  public = data_stats.diagnose(inverted, dataset='deepcrack')[0]
  assert (
    'mask_polarity' not in public and 'the deepcrack builder reads masks as its source' in public
  )


def test_diagnose_a_few_dense_masks_and_cropped_members():
  # One tight crop of a wide crack among three: not the polarity of the whole split.
  stats = {'train': stats_of(((32, 48), 0.7), ((32, 48), 0.1), ((40, 48), 0.1))}
  assert data_stats.diagnose(stats, dataset='crack500', cropped=True) == []
  lines = data_stats.diagnose(stats)  # a folder's masks: named, with both readings
  assert lines[0] == (
    'train: 1 of 3 masks are more than half crack (m0; the split 28.5%): wide cracks in tight '
    'crops, or masks saved black on white? check the masks, --config.data.folder.mask_polarity '
    'and mask_threshold.'
  )
  assert lines[1:] == [
    'train: sizes are mixed (2 sizes).',
    'input_size: every train image is at least 32x48 (HxW): --config.data.input_size='
    "'(32, 48)' fits all; sizes are mixed, so training needs it.",
  ]
  # Most masks more than half crack is flagged for any dataset, cropped or not.
  most = {'test': stats_of(((32, 48), 0.7), ((32, 48), 0.6), ((32, 48), 0.05))}
  (line,) = data_stats.diagnose(most, dataset='deepcrack', cropped=True)
  assert line.startswith('test: crack is the majority (45.0% of the split; 2 masks more than')


def test_data_stats_cli_suggests_input_size_for_mixed_sizes(tmp_path, capsys):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=5, size=(40, 70), sizes={2: (35, 50)})
  rc = data_stats.main(
    [
      f'--config={CONFIGS / "crack_folder.py"}',
      f'--config.data.folder.images={images}',
      f'--config.data.folder.masks={masks}',
      f'--config.data.data_dir={tmp_path / "tfds"}',
      '--splits=train',
    ]
  )
  out = capsys.readouterr().out
  assert rc == 0
  assert 'train: sizes are mixed (2 sizes).' in out
  assert (
    "input_size: every train image is at least 35x50 (HxW): --config.data.input_size='(32, 48)' "
    'fits all; sizes are mixed, so training needs it.'
  ) in out
