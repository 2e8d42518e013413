"""End to end through launch.py: train and evaluate on a user's folder of images and masks
(configs/crack_folder.py:smoke), with images of mixed sizes and formats, then --mode=eval."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


def launch(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
  cmd = [
    sys.executable,
    str(REPO / 'launch.py'),
    f'--config={REPO / "configs/crack_folder.py"}:smoke',
    *args,
  ]
  return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.slow
def test_train_and_eval_on_own_folder(tmp_path):
  # 8 pairs: JPEG images with PNG masks, two larger images and a BMP one; 6 train / 2 test.
  images, masks = fixtures.make_fake_folder(
    tmp_path / 'roads', n=8, size=(32, 48), sizes={2: (48, 64), 5: (40, 56)}, image_exts={3: '.bmp'}
  )
  workdir, data_dir = tmp_path / 'work', tmp_path / 'tfds'
  folder_flags = [
    f'--config.data.folder.images={images}',
    f'--config.data.folder.masks={masks}',
    f'--config.data.data_dir={data_dir}',
  ]
  proc = launch(f'--workdir={workdir}', *folder_flags, '--config.data.input_size=(32, 48)')
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == ['3', '6']
  result = json.loads((workdir / 'eval.json').read_text())
  assert result['dataset'] == 'crack_folder' and result['split'] == 'test'
  assert result['num_images'] == 2 and result['step'] == 6
  # (The layout of the metrics themselves is evaluation's business; see test_evaluation.)
  # The prepared folder lives under its own config name in data_dir/crack_folder/.
  assert len(list((data_dir / 'crack_folder').glob('roads_*/1.1.0'))) == 1

  # Evaluation alone, from the checkpoint, on the train split's whole (mixed-size) images.
  proc = launch(
    f'--workdir={workdir}',
    *folder_flags,
    '--config.data.input_size=(32, 48)',
    '--mode=eval',
    '--config.data.test_split=train',
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  # Beside the run's own results, not in their place.
  (other,) = (workdir / 'eval').glob('crack_folder_train_*')
  result = json.loads((other / 'eval.json').read_text())
  assert result['split'] == 'train' and result['num_images'] == 6
  assert json.loads((workdir / 'eval.json').read_text())['split'] == 'test'
  assert json.loads((workdir / 'threshold.json').read_text())['split'] == 'test'


@pytest.mark.slow
def test_bad_folder_names_the_file(tmp_path):
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=4)
  (masks / 'img_02.png').unlink()
  proc = launch(
    f'--workdir={tmp_path / "w"}',
    f'--config.data.folder.images={images}',
    f'--config.data.folder.masks={masks}',
    f'--config.data.data_dir={tmp_path / "tfds"}',
    timeout=120,
  )
  assert proc.returncode != 0
  assert str(images / 'img_02.jpg') in proc.stderr and 'have no mask' in proc.stderr
