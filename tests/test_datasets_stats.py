"""Tests of crackjax.data_stats on fixtures with known crack proportions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crackjax import data_stats
from tests import fixtures


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


def test_cli_crackforest_fixture(tmp_path, capsys):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=5, n_unlabelled=0)
  rc = data_stats.main(['--dataset=crackforest', f'--data_dir={tmp_path / "tfds"}',
                        f'--manual_dir={raw}'])
  out = capsys.readouterr().out
  assert rc == 0
  assert 'crackforest/train: 3 images; sizes (WxH) 48x32 (3)' in out
  assert 'crackforest/test: 2 images' in out
  expected = fixtures.fake_crack_mask((32, 48)).mean() * 100
  assert f'crack pixels {expected:.2f}% of the split' in out


def test_cli_crack_folder_and_missing_data(tmp_path, capsys):
  images, masks = fixtures.make_fake_folder(tmp_path / 'f', n=5)
  rc = data_stats.main(['--dataset=crack_folder', f'--images={images}', f'--masks={masks}',
                        f'--data_dir={tmp_path / "tfds"}', '--json', '--splits=train'])
  assert rc == 0
  assert '"num_images": 4' in capsys.readouterr().out
  rc = data_stats.main(['--dataset=aiglern', f'--data_dir={tmp_path / "tfds"}'])
  assert rc == 1
  assert 'manual_dir is not set' in capsys.readouterr().err


REAL = Path('/work/shared/datasets/crackforest')


@pytest.mark.skipif(not (REAL / 'groundTruth').is_dir(), reason='real CrackForest not here')
def test_real_crackforest_figures_in_docs(tmp_path, capsys):
  # The figures docs/datasets.md quotes.
  rc = data_stats.main(['--dataset=crackforest', f'--data_dir={tmp_path / "tfds"}',
                        f'--manual_dir={REAL}'])
  out = capsys.readouterr().out
  assert rc == 0
  assert 'crack pixels 1.73% of the split (191004 / 11059200)' in out
  assert 'densest image 097: 6.33%' in out and 'densest image 101: 5.77%' in out
  docs = (Path(__file__).resolve().parents[1] / 'docs' / 'datasets.md').read_text()
  assert out[out.index('crackforest/train:'):].strip() in docs
