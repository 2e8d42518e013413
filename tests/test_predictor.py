"""Prediction on photos of any size: padding, buckets, tiling, the command line and bad files."""

import csv
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import PIL.Image
import pytest
import skimage.filters

import crackjax
from crackjax.deploy import measure, predict_command, predict_outputs, predictor
from crackjax.evaluation import inference, threshold_choice
from crackjax.experiment import restored
from crackjax.experiment.build import build
from crackjax.runs import outputs
from crackjax.trainer import scoring

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def run_dir(smoke_run):
  """The session's smoke run (6 steps, strict evaluation so threshold.json exists)."""
  return smoke_run


@pytest.fixture(scope='module')
def run(run_dir):
  return restored.load_run(run_dir)


def photo(h, w, seed=0):
  """A pavement-like uint8 photo with a dark diagonal crack."""
  rng = np.random.default_rng(seed)
  image = rng.integers(150, 230, size=(h, w, 3), dtype=np.uint8)
  rows = np.arange(h)
  image[rows, (rows * w // max(h, 1)) % w] = 30
  return image


def direct(run, image_float):
  """The model applied to one already padded float image (jitted: one compilation, not one
  per operation)."""
  step = jax.jit(functools.partial(inference.predict_step, apply_fn=run.model.apply))
  probs = step(run.params, image_float[None])
  return np.asarray(probs)[0, ..., 0]


def test_load_run_and_threshold(run, run_dir, caplog, monkeypatch):
  saved = json.loads((run_dir / 'threshold.json').read_text())
  assert run.step == 6 and run.threshold == saved['threshold']
  assert 'threshold.json' in run.threshold_source
  assert crackjax.Predictor is predictor.Predictor
  # A healthy run restores without a word, from the API too (without the commands' filter).
  monkeypatch.setattr(logging.getLogger('absl'), 'filters', [])
  with caplog.at_level(logging.WARNING):
    assert predictor.Predictor.from_workdir(run_dir).threshold == saved['threshold']
  assert not caplog.records, [r.getMessage() for r in caplog.records]
  with pytest.raises(FileNotFoundError, match='not a crackjax run directory'):
    restored.load_run(run_dir.parent)
  with pytest.raises(FileNotFoundError, match=r'No checkpoint of step 5.*\[3, 6\]'):
    restored.load_run(run_dir, step=5)
  assert 'step 6, crackforest, test' in run.threshold_source
  # The threshold was chosen for step 6's parameters: step 3 does not get it silently.
  older = restored.load_run(run_dir, step=3)
  assert older.threshold == 0.5
  assert 'was chosen for step 6, not step 3' in older.threshold_source


def test_an_older_step_takes_its_epoch_records_threshold(run_dir, tmp_path):
  """A step with an epoch record (eval.every_epochs) has its own threshold, chosen by the same
  rule as threshold.json (strict ODS on the run's test split): crackjax-evaluate / -predict /
  -export of that step use it, not 0.5."""
  run_dir = Path(shutil.copytree(run_dir, tmp_path / 'run'))
  # The run's own epoch record (a whole one, as scoring writes it), moved to step 3.
  record = json.loads(sorted(run_dir.glob('epoch_*.json'))[-1].read_text())
  record.update(epoch=1, step=3, dataset='crackforest', split='test')
  record['results']['strict']['ods']['threshold'] = 0.73
  (run_dir / 'epoch_001.json').write_text(json.dumps(record))
  threshold, source = restored.run_threshold(run_dir, 3)
  assert threshold == 0.73
  assert source == 'ODS F1 on the test split, strict protocol, crackforest, step 3 (epoch_001.json)'
  assert restored.load_run(run_dir, step=3).threshold == 0.73
  # threshold.json still decides for its own step; a step with neither keeps 0.5, said.
  assert (
    restored.load_run(run_dir).threshold
    == json.loads((run_dir / 'threshold.json').read_text())['threshold']
  )
  (run_dir / 'epoch_001.json').write_text('{damaged')
  threshold, source = restored.run_threshold(run_dir, 3)
  assert threshold == 0.5 and 'was chosen for step 6, not step 3' in source


def test_scoring_other_data_keeps_the_runs_own_results(run_dir, tmp_path):
  run_dir = Path(shutil.copytree(run_dir, tmp_path / 'run'))  # the shared run stays as it is
  own = ('eval.json', 'threshold.json', 'eval_per_image.csv', 'pr_curve.png')
  before = {f: (run_dir / f).read_bytes() for f in own}
  config = restored.read_config(run_dir)
  config.data.test_split = 'train'  # other images than the run's own test split
  scoring.evaluate_checkpoint(build(config), run_dir)
  out = run_dir / 'eval' / 'crackforest_train'
  assert json.loads((out / 'eval.json').read_text())['split'] == 'train'
  assert json.loads((out / 'threshold.json').read_text())['split'] == 'train'
  assert {f: (run_dir / f).read_bytes() for f in own} == before
  saved = json.loads(before['threshold.json'])
  assert restored.load_run(run_dir).threshold == saved['threshold'] and saved['split'] == 'test'


def test_any_size_is_reflection_padded_and_cropped_back(run):
  photo_predictor = predictor.Predictor(run.model, run.params)
  image = photo(37, 53)
  prob = photo_predictor(image)
  assert prob.shape == (37, 53) and prob.dtype == np.float32
  assert 0.0 <= prob.min() and prob.max() <= 1.0
  # The same as the model on the image reflected out to its 64 x 64 bucket.
  padded = predictor.reflect_pad(image.astype(np.float32) / 255.0, 64, 64)
  np.testing.assert_allclose(prob, direct(run, padded)[:37, :53], atol=1e-6)
  assert np.array_equal(padded[37:40, :53], padded[35:32:-1, :53])  # reflected, not zeros


def test_one_compile_per_bucket(run):
  photo_predictor = predictor.Predictor(run.model, run.params, bucket=32)
  for h, w in [(40, 50), (33, 64), (64, 40), (60, 60)]:  # all pad to 64 x 64
    photo_predictor(photo(h, w))
  assert photo_predictor.num_traces == 1
  photo_predictor(photo(65, 64))  # 96 x 64: a new bucket
  assert photo_predictor.num_traces == 2


@pytest.mark.parametrize('blend', predictor.BLENDS)
def test_tiles_blend_to_the_untiled_prediction_away_from_borders(run, blend):
  image = photo(160, 224, seed=3)
  whole = predictor.Predictor(run.model, run.params, tile_size=1024)(image)
  tiled = predictor.Predictor(
    run.model, run.params, tile_size=96, overlap=0.5, batch_size=3, blend=blend
  )(image)
  assert tiled.shape == whole.shape == (160, 224)
  assert whole.std() > 0.01  # the comparison is not between two constant maps
  interior = np.s_[24:-24, 24:-24]
  diff = np.abs(tiled - whole)[interior]
  # Each tile sees less context than the whole image, so values differ a little; the
  # blend leaves no seam: the difference is small everywhere inside.
  assert diff.mean() < 0.02 and diff.max() < 0.1, (diff.mean(), diff.max())


def test_tile_geometry():
  assert predictor.tile_layout(100, 512, 64, 16) == (100, [0])
  tile, starts = predictor.tile_layout(3000, 512, 64, 16)
  # ceil((3000 - 64) / (512 - 64)) = 7 tiles, shrunk to round_up(ceil(2936 / 7) + 64, 16).
  assert tile == 496 and len(starts) == 7
  assert starts[0] == 0 and starts[-1] == 3000 - tile
  assert all(tile - (b - a) >= 64 for a, b in zip(starts, starts[1:], strict=False))
  tile, starts = predictor.tile_layout(1000, 256, 32, 16)
  assert tile <= 256 and starts[-1] + tile == 1000
  assert all(tile - (b - a) >= 32 for a, b in zip(starts, starts[1:], strict=False))
  w = predictor.gaussian_weights(64, 96)
  assert w.shape == (64, 96) and w.max() == pytest.approx(1.0) and w.min() >= 1e-3
  assert w[32, 48] > w[0, 0]


def test_cosine_weights_cross_fade_over_the_overlap():
  w = predictor.cosine_weights(40, 60, 8, 12)
  assert w.shape == (40, 60) and w.dtype == np.float32 and w.min() >= 1e-3
  assert np.all(w[8:-8, 12:-12] == 1.0)  # outside the ramps every pixel counts whole
  assert w[0, 30] < 0.05 and w[20, 0] < 0.05  # a tile's own edge, where it lacks context
  # Two tiles of 60 columns overlapping by 12: their weights sum to 1 across the overlap,
  # so the blend is a pure cross-fade (hand-computed: 0.5 - 0.5 cos(pi (d + 0.5) / 12)).
  row = predictor.cosine_weights(1, 60, 0, 12)[0]
  left, right = row[48:], row[:12]
  np.testing.assert_allclose(left + right, 1.0, atol=1e-6)
  np.testing.assert_allclose(right[0], 0.5 - 0.5 * np.cos(np.pi * 0.5 / 12), rtol=1e-6)
  # No neighbour along an axis (ramp 0): flat along it.
  assert np.all(predictor.cosine_weights(5, 7, 0, 0) == 1.0)


def test_tiles_follow_the_layout_and_a_bad_blend_is_named(run):
  photo_predictor = predictor.Predictor(run.model, run.params, tile_size=96, overlap=0.25)
  th, ys, tw, xs = photo_predictor.layout(160, 224)
  assert (th, tw) == (96, 96) and ys[-1] + th == 160 and xs[-1] + tw == 224
  assert photo_predictor.pixels_predicted(160, 224) == len(ys) * len(xs) * 96 * 96 / (160 * 224)
  assert photo_predictor.layout(40, 50) == (64, [0], 64, [0])  # not tiled: one bucket-sized tile
  with pytest.raises(ValueError, match="blend must be one of.*'feather'"):
    predictor.Predictor(run.model, run.params, blend='feather')


def _write_inputs(folder: Path) -> None:
  folder.mkdir(parents=True)
  PIL.Image.fromarray(photo(45, 70)).save(folder / 'plain.jpg')
  rgba = np.concatenate([photo(40, 40), np.full((40, 40, 1), 128, np.uint8)], axis=2)
  PIL.Image.fromarray(rgba).save(folder / 'alpha.png')
  grey16 = photo(50, 30)[..., 0].astype(np.uint16) * 16  # 12-bit range in a 16-bit file
  PIL.Image.fromarray(grey16).save(folder / 'deep.png')
  PIL.Image.fromarray(photo(30, 20)[..., 0]).save(folder / 'grey.png')
  rotated = PIL.Image.fromarray(photo(20, 60))
  exif = rotated.getexif()
  exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
  rotated.save(folder / 'rotated.jpg', exif=exif)
  (folder / 'broken.png').write_bytes(b'\x89PNG\r\n\x1a\n' + b'\x00' * 40)
  (folder / 'notes.txt').write_text('not an image')


def test_command_line_on_a_mixed_folder(run_dir, tmp_path, capsys):
  folder = tmp_path / 'photos'
  _write_inputs(folder)
  out = tmp_path / 'out'
  # --notune_malloc: the setting is process-wide, and this is pytest's process.
  args = [
    f'--workdir={run_dir}',
    f'--out={out}',
    '--mm_per_pixel=0.5',
    '--notune_malloc',
    str(folder),
  ]
  assert predict_command.main(args) == 0
  captured = capsys.readouterr()
  assert 'skipped' in captured.err and 'broken.png: cannot read image' in captured.err
  assert 'images: crack length' in captured.out
  # Throughput over the 5 images read: 45x70 + 40x40 + 50x30 + 30x20 + 60x20 pixels.
  assert ' 0.0 MP in ' in captured.err and 'images/s' in captured.err and 'MP/s' in captured.err
  sizes = {
    'plain': (45, 70),
    'alpha': (40, 40),
    'deep': (50, 30),
    'grey': (30, 20),
    'rotated': (60, 20),
  }  # EXIF orientation 6: displayed 60 high, 20 wide
  for name, (h, w) in sizes.items():
    for kind, ext in (('probs', 'png'), ('masks', 'png'), ('overlays', 'jpg')):
      with PIL.Image.open(out / kind / f'{name}.{ext}') as im:
        assert (im.height, im.width) == (h, w), (name, kind)
  rows = list(csv.DictReader((out / 'measurements.csv').open()))
  assert sorted(r['name'] for r in rows) == sorted(sizes)
  assert all(r['length_mm'] != '' and float(r['crack_ratio']) >= 0 for r in rows)
  # Speckle (components under --min_length) is left out of the row and counted apart: its
  # segments are the cracks of cracks.csv.
  assert all(r['segments'] == r['cracks'] and int(r['speckles']) >= 0 for r in rows)
  # The 12-bit image is read by its range, not as a nearly black 16-bit one.
  assert predict_command.load_photo(folder / 'deep.png').max() > 200

  # The same command again predicts nothing: every photo is done (OUT's manifest, the
  # progress file kept once finished); with --overwrite, the run is repeated.
  capsys.readouterr()
  assert predict_command.main(args) == 0
  assert 'wrote 5 image(s) (5 of them done by an earlier run' in capsys.readouterr().err
  assert predict_command.main([*args, '--overwrite']) == 0


def _one_line(self, image, progress=None):
  """A Predictor's map of one crack line across the middle of any photo (0 elsewhere): at
  --threshold=0 --min_length=0 each photo is one crack. (A whole map of crack is no road
  photo, measure.not_road, and has no crack row.)"""
  prob = np.zeros(np.asarray(image).shape[:2], np.float32)
  prob[prob.shape[0] // 2] = 1.0
  return prob


def test_output_names_are_unique_and_keep_subfolders(run_dir, tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(predictor.Predictor, '_predict', _one_line)
  folder = tmp_path / 'photos'
  (folder / 'sub' / 'deeper').mkdir(parents=True)
  PIL.Image.fromarray(photo(20, 30)).save(folder / 'road.jpg')
  PIL.Image.fromarray(photo(20, 30)).save(folder / 'road.png')
  PIL.Image.fromarray(photo(24, 20)).save(folder / 'sub' / 'road.png')
  PIL.Image.fromarray(photo(22, 26)).save(folder / 'sub' / 'deeper' / 'x.png')
  frames = [PIL.Image.fromarray(photo(16, 16)), PIL.Image.fromarray(photo(16, 16)[::-1])]
  frames[0].save(folder / 'anim.gif', save_all=True, append_images=frames[1:])
  (folder / 'notes.txt').write_text('not an image')
  (folder / '.hidden').mkdir()
  PIL.Image.fromarray(photo(16, 16)).save(folder / '.hidden' / 'skip.png')
  out = tmp_path / 'out'
  args = [f'--workdir={run_dir}', f'--out={out}', '--notune_malloc', str(folder)]
  # Threshold 0 over one line (`_one_line`): every photo is one crack (min_length 0) of cracks.csv.
  assert predict_command.main([*args, '--overwrite', '--threshold=0', '--min_length=0']) == 0
  err = capsys.readouterr().err
  names = {'road_jpg', 'road_png', 'sub/road', 'sub/deeper/x', 'anim'}
  rows = list(csv.DictReader((out / 'measurements.csv').open()))
  assert sorted(r['name'] for r in rows) == sorted(names)  # one row each, none hidden
  for name in names:
    assert (out / 'probs' / f'{name}.png').is_file() and (
      out / 'overlays' / f'{name}.jpg'
    ).is_file()
  with PIL.Image.open(out / 'probs' / 'sub' / 'road.png') as im:
    assert (im.height, im.width) == (24, 20)  # its own map, not road.png's
  assert 'skipped 1 file(s) that are not images (notes.txt)' in err
  cracks = list(csv.DictReader((out / 'cracks.csv').open()))
  assert sorted(c['name'] for c in cracks) == sorted(names)
  assert all(c['crack_id'] == '1' and c['type'] in measure.CRACK_TYPES for c in cracks)
  assert all(r['cracks'] == '1' for r in rows)
  assert 'anim.gif is animated (2 frames): predicted its first frame' in err
  page = (out / 'index.html').read_text()
  assert page.count('<div class="card"') == len(names)
  assert all(f'href="overlays/{n}.jpg"' in page for n in names)

  # The same inputs give the same names; a clash of the same name from two folders is told
  # apart by the folder.
  a, b = tmp_path / 'a', tmp_path / 'b'
  inputs = [
    predict_command.Input(a / 'road.jpg', Path('road.jpg')),
    predict_command.Input(a / 'road.png', Path('road.png')),
    predict_command.Input(b / 'Road.png', Path('Road.png')),
  ]
  assert predict_command.output_names(inputs) == ['road_jpg', 'a_road_png', 'b_Road_png']
  assert predict_command.output_names(inputs) == predict_command.output_names(list(inputs))
  # One extension in the group: the folder tells them apart, without the extension.
  same = [
    predict_command.Input(a / 'road.jpg', Path('road.jpg')),
    predict_command.Input(b / 'road.jpg', Path('road.jpg')),
  ]
  assert predict_command.output_names(same) == ['a_road', 'b_road']

  # --overwrite replaces the earlier prediction whole: the maps of images it no longer holds
  # go, and are named; probs/ and measurements.csv then list the same images.
  fewer = [*args[:-1], '--overwrite', str(folder / 'road.jpg'), str(folder / 'sub')]
  assert predict_command.main(fewer) == 0
  err = capsys.readouterr().err
  now = sorted(r['name'] for r in csv.DictReader((out / 'measurements.csv').open()))
  for kind, ext in (('probs', 'png'), ('masks', 'png'), ('overlays', 'jpg')):
    written = sorted(
      p.relative_to(out / kind).with_suffix('').as_posix() for p in (out / kind).rglob(f'*.{ext}')
    )
    assert written == now, (kind, written, now)
  assert 'removed the maps of 3 image(s) of the earlier prediction' in err

  # A photo over --max_megapixels is refused from its header, by name, with the way past it.
  big = tmp_path / 'big'
  big.mkdir()
  PIL.Image.fromarray(photo(40, 60)).save(big / 'wide.png')
  limited = [f'--workdir={run_dir}', f'--out={tmp_path / "out_big"}', '--notune_malloc']
  assert predict_command.main([*limited, '--max_megapixels=0.001', str(big)]) == 1
  err = capsys.readouterr().err
  assert 'wide.png: 60x40 (0.002 MP) is over the 0.001 MP limit' in err
  PIL.Image.fromarray(photo(320, 480)).save(big / 'wide.png')  # 0.15 MP: not "the 0 MP limit"
  assert predict_command.main([*limited, '--overwrite', '--max_megapixels=0.001', str(big)]) == 1
  assert 'wide.png: 480x320 (0.2 MP) is over the 0.001 MP limit' in capsys.readouterr().err
  assert '--max_megapixels=1 if the file is trusted' in err


def test_large_photos_report_progress_per_tile(run):
  photo_predictor = predictor.Predictor(run.model, run.params, tile_size=32, overlap=0.25)
  image = photo(70, 90)
  done = []
  prob = photo_predictor(image, progress=done.append)
  assert sum(done) == photo_predictor.num_tiles(70, 90) > 4
  np.testing.assert_array_equal(prob, photo_predictor(image))


def test_an_unwritable_out_is_one_line_before_any_work(run_dir, tmp_path):
  # A path under a file stands in for a read-only folder (root may write anywhere).
  (tmp_path / 'file.txt').write_text('')
  PIL.Image.fromarray(photo(20, 30)).save(tmp_path / 'p.png')
  out = tmp_path / 'file.txt' / 'out'
  with pytest.raises(SystemExit) as e:
    predict_command.main([f'--workdir={run_dir}', f'--out={out}', str(tmp_path / 'p.png')])
  assert str(e.value) == (
    f'crackjax-predict: cannot write --out={out}: {tmp_path / "file.txt"} is a file, not a folder.'
  )
  assert outputs.unwritable(tmp_path / 'new' / 'out') is None
  assert not (tmp_path / 'new').exists()  # nothing is created to find out
  assert outputs.unwritable(tmp_path) is None
  assert sorted(p.name for p in tmp_path.iterdir()) == ['file.txt', 'p.png']  # probe removed


def test_each_photo_its_own_threshold(run, run_dir, tmp_path, capsys):
  """--photo_threshold / Predictor(photo_threshold=w): each photo's mask at w x the threshold +
  (1 - w) x the Otsu threshold of its map; None (the default) and w = 1: the threshold."""
  image = photo(48, 64)
  plain = predictor.Predictor.from_workdir(run_dir)
  prob = plain(image)
  assert plain.photo_threshold is None and plain.threshold_of(prob) == run.threshold
  own = predictor.Predictor.from_workdir(run_dir, photo_threshold=0.25)
  t = own.threshold_of(prob)
  assert t == threshold_choice.photo_threshold(prob, run.threshold, 0.25)
  assert t == pytest.approx(0.25 * run.threshold + 0.75 * skimage.filters.threshold_otsu(prob))
  assert (own.mask(prob) == (prob > t)).all()
  assert (
    predictor.Predictor.from_workdir(run_dir, photo_threshold=1.0).threshold_of(prob)
    == run.threshold
  )
  with pytest.raises(ValueError, match=r'photo_threshold must be None or a weight in \[0, 1\]'):
    predictor.Predictor.from_workdir(run_dir, photo_threshold=2)
  # The command: the photo's own threshold in measurements.csv, its mask at it.
  folder = tmp_path / 'photos'
  folder.mkdir()
  PIL.Image.fromarray(image).save(folder / 'road.png')
  out = tmp_path / 'out'
  args = [f'--workdir={run_dir}', f'--out={out}', '--photo_threshold=0.25', str(folder)]
  assert predict_command.main(args) == 0
  assert (
    "each photo's own: 0.25 x that + 0.75 x its map's Otsu threshold" in capsys.readouterr().err
  )
  (row,) = csv.DictReader((out / 'measurements.csv').open())
  assert float(row['threshold']) == pytest.approx(t, abs=1e-4)
  mask = np.asarray(PIL.Image.open(out / 'masks' / 'road.png')) > 0
  assert (mask == (prob > t)).all()


def test_command_line_errors(run_dir, tmp_path):
  empty = tmp_path / 'empty'
  empty.mkdir()
  with pytest.raises(SystemExit, match='no image files to predict'):
    predict_command.main([f'--workdir={run_dir}', f'--out={tmp_path / "o"}', str(empty)])
  with pytest.raises(SystemExit, match='not a crackjax run directory'):
    predict_command.main([f'--workdir={tmp_path}', f'--out={tmp_path / "o"}', str(empty)])
  with pytest.raises(SystemExit, match='blend'):
    predict_command.main([f'--workdir={run_dir}', '--blend=feather', str(empty)])
  # Every flag is checked before any image is read or written.
  PIL.Image.fromarray(photo(20, 30)).save(tmp_path / 'p.png')
  for flag, named in [
    ('--threshold=1.5', 'threshold'),
    ('--mm_per_pixel=-1', 'mm_per_pixel must be a finite number > 0'),
    ('--mm_per_pixel=0', 'mm_per_pixel must be a finite number > 0'),
    ('--overlap=1', r'--overlap=1.0: --overlap must be in \[0, 1\)'),
    ('--tile_size=0', '--tile_size=0: 0 is not a positive integer'),
    # NaN passes every bound (no comparison with it holds): each pixel was non-crack, exit 0.
    ('--threshold=nan', r'--threshold=nan: --threshold must be a number in \[0, 1\]'),
    ('--min_length=nan', '--min_length must be a finite number >= 0'),
    # Tiles smaller than what the model sees at once: 805 tiles of 16 px for --tile_size=7.
    ('--tile_size=7', '--tile_size=7: --tile_size must be at least 128'),
    ('--batch_size=0', '--batch_size=0: 0 is not a positive integer'),
    ('--step=0', 'step must be >= 1'),
    ('--photo_threshold=1.5', r'--photo_threshold must be a weight in \[0, 1\]'),
  ]:
    out = tmp_path / 'never'
    with pytest.raises(SystemExit, match=named):
      predict_command.main([f'--workdir={run_dir}', f'--out={out}', flag, str(tmp_path / 'p.png')])
    assert not out.exists()


# The installed command in a subprocess: the slow tier (the in-process tests cover its work).
@pytest.mark.slow
def test_console_script_is_installed(run_dir, tmp_path):
  proc = subprocess.run(
    [sys.executable, '-m', 'crackjax.deploy.predict_command', '--help'],
    capture_output=True,
    text=True,
  )
  assert proc.returncode == 0 and '--mm_per_pixel' in proc.stdout
  assert '--blend' in proc.stdout and 'cosine' in proc.stdout
  assert jax.__version__  # the command runs under the same jax
  # A real run in its own process, with the defaults (tune_malloc on: process-wide).
  PIL.Image.fromarray(photo(40, 60)).save(tmp_path / 'one.png')
  proc = subprocess.run(
    [
      sys.executable,
      '-m',
      'crackjax.deploy.predict_command',
      f'--workdir={run_dir}',
      f'--out={tmp_path / "out"}',
      str(tmp_path / 'one.png'),
    ],
    capture_output=True,
    text=True,
    cwd=REPO,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert 'wrote 1 image(s)' in proc.stderr and (tmp_path / 'out' / 'masks' / 'one.png').is_file()
  assert 'WARNING' not in proc.stderr, proc.stderr  # quiet unless something is wrong


_TWO_DEVICES = """
import os
os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'
import jax, numpy as np
from crackjax.deploy import predictor
from crackjax.models import get_model
assert jax.local_device_count() == 2
model = get_model('unet', widths=(4, 8, 16, 32, 64))
params = model.init(jax.random.key(0), np.zeros((1, 32, 32, 3), np.float32))['params']
image = np.random.default_rng(0).integers(0, 256, (70, 90, 3), dtype=np.uint8)
both = predictor.Predictor(model, params, tile_size=48, overlap=0.25)
assert both.batch_size == 2
one = predictor.Predictor(model, params, tile_size=48, overlap=0.25, devices=jax.devices()[:1])
np.testing.assert_allclose(both(image), one(image), atol=1e-6)
print('ok', both.batch_size)
"""


@pytest.mark.slow
def test_tiles_are_split_over_all_local_devices():
  proc = subprocess.run(
    [sys.executable, '-c', _TWO_DEVICES],
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, 'JAX_PLATFORMS': 'cpu'},
  )
  assert proc.returncode == 0 and 'ok 2' in proc.stdout, proc.stderr[-2000:]


def test_names_a_spreadsheet_would_run_stay_text_in_the_csv_files(run_dir, tmp_path, monkeypatch):
  # OWASP "CSV injection": a photo named like a formula is written behind a quote.
  monkeypatch.setattr(predictor.Predictor, '_predict', _one_line)
  folder = tmp_path / 'photos'
  folder.mkdir()
  names = ['=HYPERLINK(1)', '+1', '-road', '@sum', 'road']
  for name in names:
    PIL.Image.fromarray(photo(16, 16)).save(folder / f'{name}.png')
  out = tmp_path / 'out'
  args = [f'--workdir={run_dir}', f'--out={out}', '--notune_malloc', str(folder)]
  assert predict_command.main([*args, '--threshold=0', '--min_length=0']) == 0
  for table in ('measurements.csv', 'cracks.csv'):
    cells = sorted(r['name'] for r in csv.DictReader((out / table).open()))
    assert cells == sorted(["'=HYPERLINK(1)", "'+1", "'-road", "'@sum", 'road']), table
  for name in names:  # the files keep the photos' own names
    assert (out / 'probs' / f'{name}.png').is_file()
  # A second prediction over it finds the earlier outputs by their real names.
  assert sorted(predict_outputs.earlier_names(out / 'measurements.csv')) == sorted(names)


def test_a_frame_the_model_calls_crack_whole_is_no_road_photo(
  run_dir, tmp_path, monkeypatch, capsys
):
  """Issue 78: an all-black frame whose map is crack everywhere was measured as one transverse
  crack 479 px wide, ratio 1.0; it is flagged in measurements.csv and on the page instead, and
  has no row in cracks.csv."""
  folder = tmp_path / 'photos'
  folder.mkdir()
  PIL.Image.fromarray(np.zeros((48, 64, 3), np.uint8)).save(folder / 'black.png')
  PIL.Image.fromarray(photo(48, 64)).save(folder / 'road.png')

  def stub(self, image, progress=None):  # crack everywhere on the black frame alone
    return np.full(image.shape[:2], float(np.asarray(image).max() == 0), np.float32)

  monkeypatch.setattr(predictor.Predictor, '_predict', stub)
  out = tmp_path / 'out'
  args = [f'--workdir={run_dir}', f'--out={out}', '--notune_malloc', str(folder)]
  assert predict_command.main(args) == 0
  rows = {r['name']: r for r in csv.DictReader((out / 'measurements.csv').open())}
  assert rows['black']['not_road'].startswith('not a road photo: almost all of it crack (100.0%')
  assert rows['black']['crack_ratio'] == rows['black']['max_width_px'] == ''
  assert rows['black']['cracks'] == '0' and rows['road']['not_road'] == ''
  assert not [r for r in csv.DictReader((out / 'cracks.csv').open()) if r['name'] == 'black']
  assert 'not a road photo: almost all of it crack' in (out / 'index.html').read_text()
  assert '2 images, 1 not a road photo (not measured): ' in capsys.readouterr().out


def test_a_frame_almost_all_one_value_is_no_road_photo_in_crackjax_predict(
  run_dir, tmp_path, monkeypatch
):
  """Issue 78: a grey frame (a lens cap, an exposure gone wrong) whose map has a few crack
  pixels is flagged by its photo, not only by its mask: crackjax-predict hands the photo to
  `measure.measure_photo`."""
  folder = tmp_path / 'photos'
  folder.mkdir()
  PIL.Image.fromarray(np.full((48, 64, 3), 90, np.uint8)).save(folder / 'grey.png')
  PIL.Image.fromarray(photo(48, 64)).save(folder / 'road.png')

  def stub(self, image, progress=None):  # one thin crack line on every photo
    out = np.zeros(image.shape[:2], np.float32)
    out[20, 5:60] = 1.0
    return out

  monkeypatch.setattr(predictor.Predictor, '_predict', stub)
  out = tmp_path / 'out'
  args = [f'--workdir={run_dir}', f'--out={out}', '--notune_malloc', '--min_length=0']
  assert predict_command.main([*args, str(folder)]) == 0
  rows = {r['name']: r for r in csv.DictReader((out / 'measurements.csv').open())}
  assert rows['grey']['not_road'].startswith('not a road photo: almost all one value'), rows
  assert rows['road']['not_road'] == '' and rows['road']['cracks'] == '1'
