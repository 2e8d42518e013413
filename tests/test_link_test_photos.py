"""scripts/link_test_photos.py: the release scripts' PHOTOS folder from MTSCrack's copies of the
authors' test photos, without the photos whose crops the cropped copy's train split holds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def script():
  spec = importlib.util.spec_from_file_location(
    'link_test_photos', REPO / 'scripts' / 'link_test_photos.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _touch(folder: Path, *names: str) -> None:
  folder.mkdir(parents=True, exist_ok=True)
  for name in names:
    (folder / name).write_bytes(name.encode())


def test_trained_photos_are_left_out_and_the_rest_linked(script, tmp_path, capsys):
  mts, public, out = tmp_path / 'mts' / 'dataset', tmp_path / 'Datasets', tmp_path / 'photos'
  _touch(mts / 'dc_544_384' / 'test_img', '11111.jpg', '11289-1.jpg', 'notes.txt')
  _touch(mts / 'dc_544_384' / 'test_lab', '11111.png', '11289-1.png')
  _touch(mts / 'c5_640_360' / 'test_img', 'a.jpg', 'b.jpg')
  _touch(mts / 'c5_640_360' / 'test_lab', 'a_mask.png', 'b_mask.png')
  # Crops <photo>-<n>: 11289-1's crop 7 and b's crop 10 were trained on (11300-2: another
  # photo's crop).
  _touch(public / 'DeepCrack' / 'train', '11289-1-7.jpg', '11300-2.jpg')
  _touch(public / 'Crack500' / 'train', 'b-10.jpg')
  argv = [f'--mts={mts.parent}', f'--public={public}', f'--out={out}']
  assert script.main(argv) == 0
  assert capsys.readouterr().out.splitlines() == [
    f'{out}/DeepCrack: 1 test photos (left out, their crops in DeepCrack/train: 11289-1)',
    f'{out}/CRACK500: 1 test photos (left out, their crops in Crack500/train: b)',
  ]
  assert sorted(p.name for p in (out / 'DeepCrack' / 'test_img').iterdir()) == ['11111.jpg']
  assert sorted(p.name for p in (out / 'CRACK500' / 'test_lab').iterdir()) == ['a_mask.png']
  link = out / 'CRACK500' / 'test_img' / 'a.jpg'
  assert link.is_symlink() and link.read_bytes() == b'a.jpg'  # the source, not a copy
  # Again: the same folder, nothing doubled.
  assert script.main(argv) == 0
  assert len(list((out / 'DeepCrack' / 'test_lab').iterdir())) == 1


def test_a_photo_without_its_mask_is_named(script, tmp_path, capsys):
  mts = tmp_path / 'mts' / 'dataset'
  _touch(mts / 'dc_544_384' / 'test_img', 'x.jpg')
  (mts / 'dc_544_384' / 'test_lab').mkdir()
  argv = [f'--mts={mts.parent}', f'--public={tmp_path}', f'--out={tmp_path / "o"}']
  assert script.main(argv) == 1
  err = capsys.readouterr().err
  assert err.startswith('link_test_photos: ') and 'x.jpg: no mask x.png or x_mask.png in ' in err
  assert script.main([f'--mts={tmp_path}', f'--public={tmp_path}', f'--out={tmp_path}']) == 1
  assert 'no test_img/ and test_lab/' in capsys.readouterr().err
