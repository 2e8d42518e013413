"""Tests of crackjax.trainer.data_stats on fixtures with known crack proportions."""

from __future__ import annotations

from pathlib import Path

import ml_collections
import numpy as np
import pytest

from crackjax.configs import base
from crackjax.data import registry as data_registry
from crackjax.trainer import data_stats
from tests import fixtures

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'


def data_config(name: str, data_dir: Path, **fields) -> ml_collections.ConfigDict:
  """``config.data`` of configs/base.py for dataset ``name``; ``folder`` as a dict."""
  data = base.get_config().data
  data.name = name
  data.data_dir = str(data_dir)
  folder = fields.pop('folder', {})
  data.update(fields)
  data.folder.update(folder)
  return data


def test_split_stats_known_values():
  masks = [np.zeros((10, 20, 1), np.uint8), np.zeros((10, 10, 1), np.uint8)]
  masks[0][0, :5] = 1  # 5 / 200 = 2.5%
  masks[1][:2, :] = 1  # 20 / 100 = 20%
  source = [{'mask': m, 'name': n} for m, n in zip(masks, (b'a', b'b'), strict=True)]
  st = data_stats.split_stats(source)
  assert st['num_images'] == 2
  assert st['sizes_wxh'] == {'20x10': 1, '10x10': 1}
  assert st['crack_proportion'] == pytest.approx(25 / 300)
  assert st['mean_image_crack_proportion'] == pytest.approx((0.025 + 0.2) / 2)
  assert (st['densest_image'], st['densest_proportion']) == ('b', pytest.approx(0.2))
  assert st['images_without_crack'] == 0


def test_crackforest_fixture(tmp_path):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=5, n_unlabelled=0)
  data = data_config('crackforest', tmp_path / 'tfds', manual_dir=str(raw))
  out = data_stats.format_stats(
    'crackforest', data_stats.dataset_stats(data.to_dict(), ('train', 'test'))
  )
  assert 'crackforest/train: 3 images; sizes (WxH) 48x32 (3)' in out
  assert 'crackforest/test: 2 images' in out
  expected = fixtures.fake_crack_mask((32, 48)).mean() * 100
  assert f'crack pixels {expected:.2f}% of the split' in out


def test_crack_folder_and_missing_data(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=5)
  data = data_config(
    'crack_folder', tmp_path / 'tfds', folder={'images': str(images), 'masks': str(masks)}
  )
  stats = data_stats.dataset_stats(data.to_dict(), ['train'])
  assert list(stats) == ['train'] and stats['train']['num_images'] == 4
  data = data_config('aiglern', tmp_path / 'tfds')
  with pytest.raises(data_registry.DatasetNotFoundError, match='manual_dir is not set'):
    data_stats.dataset_stats(data.to_dict(), ['train'])


def test_cli_crackforest_fixture(tmp_path, capsys):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=5, n_unlabelled=0)
  rc = data_stats.main(
    [
      f'--config={CONFIGS / "base.py"}',
      '--config.data.name=crackforest',
      f'--config.data.data_dir={tmp_path / "tfds"}',
      f'--config.data.manual_dir={raw}',
    ]
  )
  out = capsys.readouterr().out
  assert rc == 0
  assert 'crackforest/train: 3 images; sizes (WxH) 48x32 (3)' in out
  assert 'crackforest/test: 2 images' in out


def test_cli_crack_folder_and_missing_data(tmp_path, capsys):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=5)
  rc = data_stats.main(
    [
      f'--config={CONFIGS / "crack_folder.py"}',
      f'--config.data.folder.images={images}',
      f'--config.data.folder.masks={masks}',
      f'--config.data.data_dir={tmp_path / "tfds"}',
      '--json',
      '--splits=train',
    ]
  )
  assert rc == 0
  assert '"num_images": 4' in capsys.readouterr().out
  rc = data_stats.main(
    [f'--config={CONFIGS / "aiglern_exp.py"}', f'--config.data.data_dir={tmp_path / "tfds"}']
  )
  assert rc == 1
  assert 'config.data.manual_dir is not set' in capsys.readouterr().err


REAL = Path('/work/shared/datasets/crackforest')


@pytest.mark.slow
@pytest.mark.skipif(not (REAL / 'groundTruth').is_dir(), reason='real CrackForest not here')
def test_real_crackforest_figures_in_docs(tmp_path):
  # The figures docs/datasets.md quotes.
  data = data_config('crackforest', tmp_path / 'tfds', manual_dir=str(REAL))
  out = data_stats.format_stats(
    'crackforest', data_stats.dataset_stats(data.to_dict(), ('train', 'test'))
  )
  assert 'crack pixels 1.73% of the split (191004 / 11059200)' in out
  assert 'densest image 097: 6.33%' in out and 'densest image 101: 5.77%' in out
  docs = (Path(__file__).resolve().parents[1] / 'docs' / 'datasets.md').read_text()
  assert out[out.index('crackforest/train:') :].strip() in docs
