"""crackjax-labels: predicted masks to COCO pre-annotations (RLE or polygons) and corrected
COCO labels back to the image and mask folders configs/finetune.py reads."""

from __future__ import annotations

import json

import numpy as np
import PIL.Image
import pytest

from crackjax.survey import coco, labels_command
from tests import survey_fixtures as sf

pytest.importorskip('pycocotools')


def _masks(n: int) -> list[np.ndarray]:
  """Crack-like masks: lines 1-3 px wide, a diagonal, a closed cell (a hole), specks, none."""
  masks = []
  for i in range(n):
    m = np.zeros(sf.SIZE, bool)
    if i % 4 == 0:
      m[10, 5:60] = True  # a 1-px line
      m[20:23, 30] = True
    elif i % 4 == 1:
      for k in range(40):
        m[4 + k, 10 + k] = True  # diagonal: 8-connected only
    elif i % 4 == 2:
      m[10:30, 10:40] = True
      m[13:27, 13:37] = False  # a cell: the ring's hole is background
      m[40, 50] = m[2, 2] = True
    masks.append(m)
  return masks


@pytest.fixture
def predicted(tmp_path):
  """(photos folder, OUT) of 8 photos in two folders with their masks as crackjax-predict
  writes them, and the masks."""
  photos = tmp_path / 'photos'
  files = [sf.gps_photo(photos / f'd{i % 2}' / f'p{i}.jpg', None, None, seed=i) for i in range(8)]
  names = [f.relative_to(photos).with_suffix('').as_posix() for f in files]
  out = tmp_path / 'out'
  sf.fake_prediction(out, files, names)
  masks = _masks(len(files))
  for name, mask in zip(names, masks, strict=True):
    (out / 'masks' / name).parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(mask.astype(np.uint8) * 255).save(out / 'masks' / f'{name}.png')
  return photos, out, dict(zip(names, masks, strict=True))


def test_rle_round_trip_gives_back_the_masks_pixel_for_pixel(predicted, tmp_path, capsys):
  photos, out, masks = predicted
  pre = tmp_path / 'pre.json'
  assert labels_command.main(['export', f'--predictions={out}', f'--coco={pre}']) == 0
  assert '8 image(s), 12 crack component(s) as RLE masks' in capsys.readouterr().err
  data = json.loads(pre.read_text())
  assert data['categories'] == [coco.CATEGORY]
  assert sorted(i['file_name'] for i in data['images']) == sorted(f'{n}.jpg' for n in masks)
  assert all(
    a['iscrowd'] == 1 and isinstance(a['segmentation']['counts'], str) for a in data['annotations']
  )
  dataset = tmp_path / 'dataset'
  args = ['import', f'--coco={pre}', f'--images={photos}', f'--out={dataset}']
  assert labels_command.main(args) == 0
  assert 'wrote 8 image(s) and mask(s)' in capsys.readouterr().err
  for name, mask in masks.items():
    stem = name.replace('/', '__')
    back = np.asarray(PIL.Image.open(dataset / 'masks' / f'{stem}.png')) > 127
    np.testing.assert_array_equal(back, mask)
    assert (dataset / 'images' / f'{stem}.jpg').read_bytes() == (
      photos / f'{name}.jpg'
    ).read_bytes()
  # Again into the same folder: refused without --overwrite.
  with pytest.raises(SystemExit, match='holds files; pass --overwrite'):
    labels_command.main(args)


def test_polygons_for_label_studio_and_cvat_uncompressed_rle(predicted, tmp_path):
  photos, out, masks = predicted
  pre = tmp_path / 'poly.json'
  assert labels_command.main(['export', f'--predictions={out}', f'--coco={pre}', '--polygons']) == 0
  data = json.loads(pre.read_text())
  assert all(a['iscrowd'] == 0 and isinstance(a['segmentation'], list) for a in data['annotations'])
  back = {}
  for image in data['images']:
    mask = np.zeros(sf.SIZE, bool)
    for a in data['annotations']:
      if a['image_id'] == image['id']:
        mask |= coco.decode(a['segmentation'], *sf.SIZE)
    back[image['file_name'][:-4]] = mask
  # Outlines along pixel edges: the lines come back; the cell is filled (no holes).
  np.testing.assert_array_equal(back['d0/p0'], masks['d0/p0'])
  ring = masks['d0/p2']
  assert (back['d0/p2'] & ring).sum() == ring.sum() and back['d0/p2'][20, 20]
  # CVAT writes masks as uncompressed RLE (counts a list): read as well.
  from pycocotools import mask as mask_utils

  target = masks['d1/p1']
  rle = mask_utils.encode(np.asfortranarray(target.astype(np.uint8)))
  counts, value, run = [], 0, 0
  for pixel in target.T.ravel():  # column-major runs, starting with background
    if pixel != value:
      counts.append(run)
      value, run = pixel, 0
    run += 1
  counts.append(run)
  uncompressed = {'size': list(sf.SIZE), 'counts': [int(c) for c in counts]}
  np.testing.assert_array_equal(coco.decode(uncompressed, *sf.SIZE), target)
  assert mask_utils.decode(rle).astype(bool).sum() == target.sum()


def test_coco_images_not_in_the_folder_are_named_and_the_rest_written(predicted, tmp_path, capsys):
  photos, out, masks = predicted
  pre = tmp_path / 'pre.json'
  labels_command.main(['export', f'--predictions={out}', f'--coco={pre}'])
  data = json.loads(pre.read_text())
  data['images'].append({'id': 99, 'file_name': 'elsewhere/gone.jpg', 'height': 48, 'width': 64})
  data['images'].append({'id': 98, 'file_name': 'd0/p0.jpg', 'height': 48, 'width': 64})
  data['images'][1]['height'] = 50  # not the photo's size
  data['images'][2]['file_name'] = 'p2.jpg'  # found by its file name alone (unique)
  pre.write_text(json.dumps(data))
  dataset = tmp_path / 'dataset'
  args = ['import', f'--coco={pre}', f'--images={photos}', f'--out={dataset}']
  assert labels_command.main(args) == 0
  err = capsys.readouterr().err
  assert '1 image(s) of pre.json are not in ' in err and 'left out: elsewhere/gone.jpg' in err
  assert (
    '2 image(s) of pre.json left out: d1/p1.jpg (64x48 in the folder, 64x50 in the file)' in err
  )
  assert 'd0/p0.jpg (the same name as d0/p0.jpg)' in err
  assert 'wrote 7 image(s) and mask(s)' in err
  assert (dataset / 'masks' / 'p2.png').is_file()
  with pytest.raises(SystemExit, match='has no category road'):
    labels_command.main([*args, '--overwrite', '--category=road'])


@pytest.mark.parametrize(
  'args, message',
  [
    (['export', '--coco=x.json'], 'export needs --predictions=OUT and --coco=FILE'),
    (['import', '--coco=x.json', '--images=.'], 'import needs --coco=FILE, --images=DIR and --out'),
    (['import', '--coco=nonexistent.json', '--images=.', '--out=d'], 'cannot read the COCO file'),
    ([], 'say export or import'),
  ],
)
def test_labels_refusals_in_one_line(args, message, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(SystemExit) as exit_:
    labels_command.main(args)
  line = str(exit_.value.code)
  assert line.startswith('crackjax-labels: ') and message in line and '\n' not in line, line
