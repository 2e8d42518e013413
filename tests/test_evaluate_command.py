"""crackjax-evaluate: a run scored on its own test split and on a labelled folder, beside its
own results, with the cross-dataset table; and the metrics it builds on (one threshold, the
parallel count)."""

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax import evaluation
from crackjax.trainer import evaluate_command
from tests import fixtures


def test_a_run_scored_on_its_test_split_and_a_folder(smoke_run, tmp_path, capsys):
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))  # the shared run stays as it is
  own = {f: (run / f).read_bytes() for f in ('eval.json', 'threshold.json')}
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=5)
  argv = [f'--workdir={run}', '--data=test', f'--folder={images}:{masks}', '--protocols=strict']
  assert evaluate_command.main([*argv, '--workers=1']) == 0
  out = capsys.readouterr().out
  assert 'run threshold' in out and '| crackforest:test | strict | 4 |' in out
  # Every image of the folder is scored (no split), beside the run's own results.
  assert f'| folder:{images} | strict | 5 |' in out
  assert {f: (run / f).read_bytes() for f in own} == own
  records = {p.parent.name: json.loads(p.read_text()) for p in (run / 'eval').glob('*/eval.json')}
  assert set(records) == {'crackforest_test', f'crack_folder_test_{_hash(records)}'}
  folder_record = next(r for name, r in records.items() if name.startswith('crack_folder'))
  assert folder_record['num_images'] == 5 and folder_record['step'] == 6
  rows = list(csv.DictReader((run / 'eval' / 'cross_dataset.csv').open()))
  assert [(r['data'], r['protocol']) for r in rows] == [
    ('crackforest:test', 'strict'),
    (f'folder:{images}', 'strict'),
  ]
  threshold = json.loads(own['threshold.json'])['threshold']
  strict = records['crackforest_test']['results']['strict']
  # The run's own threshold was chosen on this split: its F1 there is the ODS F1.
  assert strict['operating_points']['run']['threshold'] == threshold
  assert float(rows[0]['f1_run']) == pytest.approx(strict['ods']['f1'])
  assert float(rows[0]['f1_05']) == strict['fixed']['f1']
  assert (run / 'eval' / 'cross_dataset.md').read_text().count('| strict |') == 2


def _hash(records):
  return next(n for n in records if n.startswith('crack_folder')).rsplit('_', 1)[1]


def test_bad_arguments_are_one_line(smoke_run, tmp_path):
  for argv, message in [
    ([], '--workdir=RUN is required'),
    ([f'--workdir={tmp_path}'], 'is not a crackjax run directory'),
    ([f'--workdir={smoke_run}', '--data=nope:test'], "unknown dataset 'nope'"),
    ([f'--workdir={smoke_run}', f'--folder={tmp_path}'], 'expected IMAGES_DIR:MASKS_DIR'),
    ([f'--workdir={smoke_run}', '--protocols=bogus'], "unknown --protocols ['bogus']"),
    ([f'--workdir={smoke_run}', '--step=5'], 'No checkpoint of step 5'),
    ([f'--workdir={smoke_run}', f'--out={smoke_run / "config.json"}'], 'is a file; name a folder'),
    (
      [f'--workdir={smoke_run}', '--data=crackforest:test', '--data=crackforest:valid'],
      "has the splits ['test', 'train'], not 'valid'",
    ),
  ]:
    with pytest.raises(SystemExit) as e:
      evaluate_command.main(argv)
    assert message in str(e.value) and '\n' not in str(e.value), (argv, e.value)


def test_one_threshold_and_the_parallel_count_agree_with_evaluate():
  rng = np.random.default_rng(0)
  probs = [rng.random((24, 32)) for _ in range(5)]
  gts = [rng.random((24, 32)) < 0.1 for _ in range(5)]
  for protocol in ('strict', 'tolerance'):
    whole = evaluation.evaluate(probs, gts, protocol=protocol)
    assert evaluation.at_threshold(probs, gts, protocol=protocol, threshold=0.5) == whole['fixed']
  assert evaluation.evaluate(probs, gts, protocol='tolerance', workers=2) == whole
  with pytest.raises(ValueError, match='threshold must be in'):
    evaluation.at_threshold(probs, gts, protocol='strict', threshold=1.5)


@pytest.mark.slow
def test_a_folder_of_dark_cracks_is_told_the_flag_of_this_command(smoke_run, tmp_path):
  # White-background masks: the advice names crackjax-evaluate's own --mask_polarity (the
  # builders name the training config's field, which this command does not take), and it works.
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=4)
  for path in masks.iterdir():  # black cracks on white
    with PIL.Image.open(path) as im:
      inverted = 255 - np.asarray(im)
    PIL.Image.fromarray(inverted.astype(np.uint8)).save(path)
  argv = [f'--workdir={run}', f'--folder={images}:{masks}', '--protocols=strict', '--workers=1']
  with pytest.raises(SystemExit) as e:
    evaluate_command.main(argv)
  message = str(e.value)
  assert '--mask_polarity=dark' in message and '--config.data' not in message, message
  assert '\n' not in message
  assert evaluate_command.main([*argv, '--mask_polarity=dark']) == 0


def test_data_arguments_keep_a_sliced_split_and_a_mixture_member_its_own_data(tmp_path):
  from crackjax.configs.release import roads_unet_cpu

  config = roads_unet_cpu.get_config('smoke')
  config.data.mix.deepcrack.manual_dir = '/copies/Datasets'
  targets = evaluate_command.data_configs(
    config, ['deepcrack:test[:6]', 'crackforest:test'], [], {'crackforest': '/cfd'}, tmp_path
  )
  (label, c, split), (label2, c2, split2) = targets
  # The first ':' ends the dataset's name (was: 'unknown dataset crackforest:test[').
  assert (label, split) == ('deepcrack:test[:6]', 'test[:6]')
  # A member of the run's mixture: its own data group, its manual dir from the run's config.
  assert c.data.name == 'deepcrack' and 'mix' not in c.data
  assert c.data.manual_dir == '/copies/Datasets'
  assert (label2, split2, c2.data.manual_dir) == ('crackforest:test', 'test', '/cfd')


def test_a_folder_path_holding_a_colon_needs_no_escape_and_has_one(tmp_path, monkeypatch):
  """--folder=IMAGES:MASKS split at the first ':' broke a path holding one (issue 44)."""
  images, masks = tmp_path / 'site:2024' / 'images', tmp_path / 'masks'
  images.mkdir(parents=True)
  masks.mkdir()
  assert evaluate_command.split_folder(f'{images}:{masks}') == (str(images), str(masks))
  # Two ways to split into folders ('a' + 'b:c', 'a:b' + 'c'): the escape decides.
  monkeypatch.chdir(tmp_path)
  for name in ('a', 'a:b', 'b:c', 'c'):
    (tmp_path / name).mkdir()
  with pytest.raises(ValueError, match=r'in 2 ways; write the colons .* as \\:'):
    evaluate_command.split_folder('a:b:c')
  assert evaluate_command.split_folder('a\\:b:c') == ('a:b', 'c')
  assert evaluate_command.split_folder('a:b\\:c') == ('a', 'b:c')
  with pytest.raises(ValueError, match='expected IMAGES_DIR:MASKS_DIR'):
    evaluate_command.split_folder(str(images).replace(':', '\\:'))


def test_out_takes_the_records_with_one_data_argument(smoke_run, tmp_path, capsys):
  """--out was ignored, silently, with one data argument (issue 44)."""
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=2)
  out = tmp_path / 'scores'
  argv = [f'--workdir={run}', f'--folder={images}:{masks}', '--protocols=strict', f'--out={out}']
  assert evaluate_command.main([*argv, '--workers=1']) == 0
  (record,) = out.glob('*/eval.json')
  assert json.loads(record.read_text())['num_images'] == 2
  assert not (run / 'eval').exists() or not list((run / 'eval').glob('*/eval.json'))
  assert str(record.parent) in capsys.readouterr().out


def test_photo_threshold_adds_each_photos_own_threshold_as_a_column(smoke_run, tmp_path):
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=3)
  argv = [f'--workdir={run}', f'--folder={images}:{masks}', '--protocols=strict', '--workers=1']
  assert evaluate_command.main([*argv, f'--out={tmp_path / "a"}', '--photo_threshold=0.4']) == 0
  assert evaluate_command.main([*argv, f'--out={tmp_path / "b"}']) == 0
  (with_it,) = (tmp_path / 'a').glob('*/eval.json')
  (without,) = (tmp_path / 'b').glob('*/eval.json')
  points = json.loads(with_it.read_text())['results']['strict']['operating_points']
  run_t = points['run']['threshold']
  assert set(points) == {'run', 'photo'} and points['photo']['threshold'] != run_t
  assert json.loads(without.read_text())['results']['strict']['operating_points'].keys() == {'run'}
  with pytest.raises(SystemExit):
    evaluate_command.main([*argv, f'--out={tmp_path / "c"}', '--photo_threshold=2'])


def test_masks_named_with_a_suffix_are_hinted_and_paired(smoke_run, tmp_path):
  images, masks = tmp_path / 'img', tmp_path / 'msk'
  for i in range(3):
    fixtures.write_image(images / f'p{i}.png', (np.full((40, 48, 3), 120 + i)).astype(np.uint8))
    mask = np.zeros((40, 48), np.uint8)
    mask[20:22] = 255
    fixtures.write_image(masks / f'p{i}_mask.png', mask)
  argv = [f'--workdir={smoke_run}', f'--folder={images}:{masks}', f'--out={tmp_path / "o"}']
  with pytest.raises(SystemExit) as e:
    evaluate_command.main([*argv, '--protocols=strict', '--workers=1'])
  message = str(e.value)
  assert '\n' not in message and 'have no mask' in message
  assert message.endswith(
    'the masks are named <image name>_mask (e.g. p0_mask.png): set --mask_suffix=_mask'
  )
  assert (
    evaluate_command.main([*argv, '--mask_suffix=_mask', '--protocols=strict', '--workers=1']) == 0
  )
