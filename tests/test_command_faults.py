"""The commands' last tracebacks (issue 57): each ends in one line (or the right result)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not os.path.exists('/dev/full'), reason='needs /dev/full')
def test_docs_to_an_unwritable_stdout_is_one_line():
  with open('/dev/full', 'w') as full:
    done = subprocess.run(
      [sys.executable, '-m', 'crackjax.runs.docs', 'troubleshooting'],
      stdout=full,
      stderr=subprocess.PIPE,
      text=True,
      timeout=60,
    )
  assert done.returncode == 1
  assert done.stderr.strip().splitlines() == [
    'crackjax-docs: cannot write the page to standard output (No space left on device).'
  ]
  # A reader that stops early (| head) is no error.
  piped = subprocess.run(
    f'{sys.executable} -m crackjax.runs.docs troubleshooting | head -1',
    shell=True,
    capture_output=True,
    text=True,
    timeout=60,
  )
  assert piped.stdout.startswith('# ') and 'Traceback' not in piped.stderr


def test_colour_masks_keep_their_cracks(tmp_path):
  import numpy as np
  import PIL.Image

  from crackjax.tfds_builders import reading

  red = np.zeros((20, 30, 3), np.uint8)
  red[10:12, :, 0] = 255  # pure red cracks on black: luma read them at 30% and lost them
  PIL.Image.fromarray(red).save(tmp_path / 'red.png')
  mask = reading.load_mask(tmp_path / 'red.png')
  assert mask.sum() == 60 and set(np.unique(mask)) == {0, 1}
  # Blue cracks on white, read with the dark polarity: the darkest channel.
  white = np.full((20, 30, 3), 255, np.uint8)
  white[5, :, :2] = 0  # (0, 0, 255)
  PIL.Image.fromarray(white).save(tmp_path / 'blue.png')
  assert reading.load_mask(tmp_path / 'blue.png', polarity='dark').sum() == 30
  # A JPEG of red cracks: its noisy channels thresholded the same way.
  PIL.Image.fromarray(red).save(tmp_path / 'red.jpg', quality=90)
  assert abs(int(reading.load_mask(tmp_path / 'red.jpg').sum()) - 60) <= 6


def test_a_builder_refuses_another_datasets_folder(tmp_path):
  from crackjax.configs import base
  from crackjax.data import registry as data_registry
  from tests import fixtures

  def data(manual_dir):
    d = base.get_config().data
    d.name, d.data_dir, d.manual_dir = 'deepcrack', str(tmp_path / 'tfds'), str(manual_dir)
    return d.to_dict()

  # CRACK500's crops (213x121) under their own folder, handed to the DeepCrack builder.
  raw = fixtures.make_fake_public_set(tmp_path / 'a', 'crack500', size=(121, 213))
  with pytest.raises(data_registry.DatasetError, match="named as crack500's folder"):
    data_registry.prepare_dataset(data(raw / 'Datasets' / 'Crack500'))
  # The same crops in a folder named DeepCrack: their sizes tell.
  (raw / 'Datasets' / 'Crack500').rename(raw / 'Datasets' / 'DeepCrack')
  with pytest.raises(data_registry.DatasetError) as e:
    data_registry.prepare_dataset(data(raw / 'Datasets'))
  message = str(e.value)
  assert '\n' not in message and "the sizes of crack500's, not of deepcrack's" in message
  assert not (tmp_path / 'tfds' / 'deepcrack' / '1.0.0').exists()
  # DeepCrack's own sizes pass.
  ok = fixtures.make_fake_public_set(tmp_path / 'b', 'deepcrack', size=(128, 181))
  assert data_registry.prepare_dataset(data(ok / 'Datasets')).is_prepared()
