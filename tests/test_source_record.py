"""A prepared copy follows its source (issue 57): prepare, change the source, run again: the copy
is prepared again (one line says why), never the stale one used; a failed re-preparation keeps
the old copy; another dataset added beside it changes nothing."""

from __future__ import annotations

import shutil

import numpy as np
import PIL.Image
import pytest

from crackjax.configs import base
from crackjax.data import registry as data_registry
from crackjax.data import source_record
from tests import fixtures


def _data(tmp_path, counts=None):
  data = base.get_config().data
  data.name = 'deepcrack'
  data.data_dir = str(tmp_path / 'tfds')
  root = fixtures.make_fake_public_set(
    tmp_path / 'raw', 'deepcrack', counts=counts or {'train': 3, 'valid': 2, 'test': 2}
  )
  data.manual_dir = str(root / 'Datasets')
  return data.to_dict()


def _crack_pixels(data, split='train'):
  source = data_registry.get_data_source(data, split)
  return sum(int(np.asarray(source[i]['mask']).sum()) for i in range(len(source)))


def test_a_changed_source_is_prepared_again(tmp_path, capsys):
  data = _data(tmp_path)
  builder = data_registry.prepare_dataset(data)
  record = source_record.read(builder.data_dir)
  assert record['root'].endswith('Datasets/DeepCrack') and record['files'] == 14
  before = _crack_pixels(data)
  assert capsys.readouterr().err.count('no longer follows') == 0
  # Unchanged: used as it is, nothing said.
  data_registry.prepare_dataset(data)
  assert 'no longer follows' not in capsys.readouterr().err
  # Another dataset beside it in Datasets/: nothing of DeepCrack's changed.
  fixtures.make_fake_public_set(tmp_path / 'raw', 'gaps384')
  data_registry.prepare_dataset(data)
  assert 'no longer follows' not in capsys.readouterr().err
  # A mask fixed in the source (all crack now): prepared again, and the new masks are read.
  lab = tmp_path / 'raw' / 'Datasets' / 'DeepCrack' / 'train_lab' / 'train_0.jpg'
  size = PIL.Image.open(lab).size
  PIL.Image.fromarray(np.full(size[::-1], 255, np.uint8)).save(lab, quality=95)
  after = _crack_pixels(data)
  err = capsys.readouterr().err
  said = [line for line in err.splitlines() if 'no longer follows' in line]
  assert len(said) == 1 and '1 file(s) changed' in said[0] and 'preparing it again' in said[0]
  assert after > before
  assert not list((tmp_path / 'tfds' / 'deepcrack').glob('*.stale'))


def test_a_half_copied_source_completed_later_and_another_folder(tmp_path, capsys):
  data = _data(tmp_path, counts={'train': 3, 'valid': 2, 'test': 2})
  test = tmp_path / 'raw' / 'Datasets' / 'DeepCrack' / 'test'
  moved = tmp_path / 'later'
  shutil.move(test, moved / 'test')
  shutil.move(test.parent / 'test_lab', moved / 'test_lab')
  builder = data_registry.prepare_dataset(data)  # no test split yet
  assert 'test' not in builder.info.splits
  shutil.move(moved / 'test', test)
  shutil.move(moved / 'test_lab', test.parent / 'test_lab')
  assert len(data_registry.get_data_source(data, 'test')) == 2
  assert '4 file(s) added' in capsys.readouterr().err
  # Pointed at another copy of the data: prepared again from it.
  other = shutil.copytree(tmp_path / 'raw', tmp_path / 'raw2')
  data_registry.prepare_dataset({**data, 'manual_dir': str(other / 'Datasets')})
  assert 'it was prepared from' in capsys.readouterr().err


def test_a_failed_preparation_keeps_the_old_copy(tmp_path, capsys):
  data = _data(tmp_path)
  builder = data_registry.prepare_dataset(data)
  image = tmp_path / 'raw' / 'Datasets' / 'DeepCrack' / 'train' / 'train_1.jpg'
  image.write_bytes(b'not an image')
  with pytest.raises(data_registry.DatasetError, match='train_1'):
    data_registry.prepare_dataset(data)
  assert (
    builder.is_prepared()
    and len(data_registry.get_data_source({**data, 'manual_dir': None}, 'train')) == 3
  )
  assert not list((tmp_path / 'tfds' / 'deepcrack').glob('*.stale'))
