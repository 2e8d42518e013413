"""Fine-tuning a model file on a folder (configs/finetune.py): the model as shipped is scored on
the held-out part before training, the run after, and the table of both printed
(crackjax/trainer/before_after.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crackjax.models import hub, model_file
from crackjax.runs import outputs
from crackjax.trainer.before_after import start_model
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]
TRAIN = [f'img_{i:02d}' for i in range(8)]
HELD_OUT = ['img_08', 'img_09']


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
  path = tmp_path / 'cache'
  monkeypatch.setenv(hub.CACHE_ENV, str(path))
  return path


def roads(root: Path) -> Path:
  """A user's folder of 10 labelled photos, 8 to train on and 2 held out (train.txt,
  test.txt), and the 2 again in a folder of their own (heldout/)."""
  images, masks = fixtures.make_fake_folder(root, n=10, size=(32, 48))
  (root / 'train.txt').write_text('\n'.join(TRAIN) + '\n')
  (root / 'test.txt').write_text('\n'.join(HELD_OUT) + '\n')
  for sub, src in (('images', images), ('masks', masks)):
    (root / 'heldout' / sub).mkdir(parents=True)
    for name in HELD_OUT:
      (file,) = src.glob(f'{name}.*')
      shutil.copy(file, root / 'heldout' / sub / file.name)
  return root


def finetune_config(model: Path, folder: Path, data_dir: Path, protocols=('strict',)):
  from crackjax.configs import finetune

  c = finetune.get_config(str(model))
  c.data.folder.images = str(folder / 'images')
  c.data.folder.masks = str(folder / 'masks')
  c.data.folder.train_list = str(folder / 'train.txt')
  c.data.folder.test_list = str(folder / 'test.txt')
  c.data.data_dir = str(data_dir)
  c.data.input_size = None
  c.batch_size = 2
  c.steps_per_epoch = 2
  c.num_epochs = 1
  c.eval.protocols = protocols
  c.eval.num_qualitative = 0
  return c


@pytest.mark.slow
def test_the_finetune_config_scores_before_and_after_on_the_held_out_part(
  exported, tmp_path, capsys, monkeypatch
):
  from crackjax.experiment import restored
  from crackjax.experiment.build import build
  from crackjax.trainer import before_after, evaluate_command, train_command

  folder = roads(tmp_path / 'roads')
  config = finetune_config(exported, folder, tmp_path / 'tfds')
  experiment = build(config)
  reads = []
  real_read = model_file.read
  monkeypatch.setattr(
    model_file, 'read', lambda path, **kw: reads.append(path) or real_read(path, **kw)
  )
  assert start_model(experiment).spec == str(exported)
  assert (
    start_model(experiment).threshold
    == model_file.read_metadata(exported)['threshold']['threshold']
  )
  run = tmp_path / 'run'
  train_command.run(experiment, run, 'train_and_eval')
  printed = capsys.readouterr().out
  # The start model is read once (issue 58): its before-score and the initial weights share it.
  assert [str(p) for p in reads] == [str(exported)]

  before = json.loads((run / 'before' / 'eval.json').read_text())
  after = json.loads((run / 'eval.json').read_text())
  # before: the file's own step (the smoke run's 6), after: the fine-tuning's.
  assert before['step'] == 6 and after['step'] == 2
  assert before['num_images'] == after['num_images'] == len(HELD_OUT)
  assert sorted(r['name'] for r in before['results']['strict']['per_image']) == HELD_OUT
  stored = before['results']['strict']['operating_points']['stored']
  assert stored['threshold'] == start_model(experiment).threshold
  # The "before" is the model file as shipped: crackjax-evaluate --model on the same photos
  # gives the same scores (its F1 @run t is at the file's stored threshold).
  out = tmp_path / 'evaluated'
  heldout = f'{folder}/heldout/images:{folder}/heldout/masks'
  assert (
    evaluate_command.main(
      [f'--model={exported}', f'--folder={heldout}', f'--out={out}', '--protocols=strict']
      + ['--workers=1']
    )
    == 0
  )
  (record,) = [json.loads(p.read_text()) for p in out.glob('*/eval.json')]
  shipped = record['results']['strict']
  assert shipped['ods']['f1'] == pytest.approx(before['results']['strict']['ods']['f1'])
  assert shipped['operating_points']['run']['f1'] == pytest.approx(stored['f1'])
  assert restored.load_model(exported).threshold == stored['threshold']

  table = (run / before_after.TABLE_FILE).read_text()
  assert table.strip() in printed
  (row,) = [line for line in table.splitlines() if line.startswith('| strict |')]
  cells = [c.strip() for c in row.strip('|').split('|')]
  assert cells[1] == f'{100 * stored["f1"]:.1f} (t={stored["threshold"]:.3g})'
  ods_before, ods_after = before['results']['strict']['ods'], after['results']['strict']['ods']
  assert cells[2].startswith(f'{100 * ods_before["f1"]:.1f} ')
  assert cells[3].startswith(f'{100 * ods_after["f1"]:.1f} ')
  assert 'after 2 steps' in table and 'smoke' in table

  # The finished run, launched again, prints the table again without training or scoring;
  # --mode=eval scores the run again and prints it with that evaluation.
  stamp = (run / 'before' / 'eval.json').stat().st_mtime_ns
  train_command.run(build(config), run, 'train_and_eval')
  assert table.strip() in capsys.readouterr().out
  train_command.run(build(config), run, 'eval')
  assert table.strip() in capsys.readouterr().out
  assert (run / 'before' / 'eval.json').stat().st_mtime_ns == stamp
  # Training alone (--mode=train) scores nothing, so has no table.
  other = tmp_path / 'train_only'
  train_command.run(build(config), other, 'train')
  assert not (other / 'before').exists() and not (other / before_after.TABLE_FILE).exists()


def test_a_run_from_scratch_has_no_before(tmp_path, capsys):
  from crackjax.experiment.build import build

  config = fixtures.fake_folder_config(tmp_path)
  assert start_model(build(config)) is None
  config.model_init.pretrained = str(tmp_path / 'weights.npz')  # a .npz: not a model file
  assert start_model(build(config, training=False)) is None


def test_the_table_reads_both_records():
  from crackjax.trainer import before_after

  before = fixtures.typed_eval_record(
    6,
    {'strict': (0.25, 0.003), 'tolerance_thin_gt': (0.22, 0.01)},
    stored={'strict': (0.106, 0.93), 'tolerance_thin_gt': (0.1, 0.93)},
    start_model={'name': 'crackforest-unet-cpu', 'threshold': 0.93},
  )
  after = fixtures.typed_eval_record(
    300, {'strict': (0.58, 0.41)}, dataset='crack_folder', names=[f'p{i}' for i in range(20)]
  )
  lines = before_after.table(before, after).splitlines()
  assert lines[0].startswith('Fine-tuning crackforest-unet-cpu: 20 held-out images')
  assert lines[2].endswith('| after 300 steps: best threshold (ODS) |')
  assert lines[4] == '| strict | 10.6 (t=0.93) | 25.0 (t=0.003) | 58.0 (t=0.41) |'
  assert lines[5] == '| tolerance_thin_gt | 10.0 (t=0.93) | 22.0 (t=0.01) | not scored |'


@pytest.mark.slow
def test_the_recipe_through_launch_prints_the_table(exported, tmp_path):
  """docs/datasets.md's command, end to end: launch.py --config=configs/finetune.py:FILE on a
  folder with a held-out list; both protocols of the config in the printed table."""
  folder = roads(tmp_path / 'roads')
  run = tmp_path / 'run'
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / 'launch.py'),
      f'--config=configs/finetune.py:{exported}',
      f'--workdir={run}',
      f'--config.data.folder.images={folder}/images',
      f'--config.data.folder.masks={folder}/masks',
      f'--config.data.folder.train_list={folder}/train.txt',
      f'--config.data.folder.test_list={folder}/test.txt',
      f'--config.data.data_dir={tmp_path / "tfds"}',
      '--config.data.input_size=(32, 48)',
      '--config.batch_size=2',
      '--config.steps_per_epoch=2',
      '--config.num_epochs=2',
    ],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=REPO,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  table = (run / 'before_after.md').read_text()
  assert table.strip() in proc.stdout
  rows = [line.split('|')[1].strip() for line in table.splitlines() if line.startswith('| t')]
  assert rows == ['tolerance_thin_gt']
  assert '| strict |' in table and 'after 4 steps' in table
  before = json.loads((run / 'before' / 'eval.json').read_text())
  assert before['step'] == 6 and before['protocols'] == ['strict', 'tolerance_thin_gt']


def test_the_table_is_of_the_same_images_only(tmp_path, capsys):
  from crackjax.trainer import before_after

  def record(names, start=None):
    typed = fixtures.typed_eval_record(
      3,
      {'strict': (0.5, 0.5)},
      dataset='crack_folder',
      names=names,
      stored={'strict': (0.5, 0.5)},
      start_model=start,
      per_image=True,
    )
    return outputs.dumps(typed.to_json())

  (tmp_path / 'before').mkdir()
  start = {'name': 'm', 'spec': 'm', 'threshold': 0.9}
  (tmp_path / 'before' / 'eval.json').write_text(record(['a', 'b'], start))
  (tmp_path / 'eval.json').write_text(record(['a', 'c']))
  assert before_after.report(tmp_path) is None  # other photos: no table
  assert not (tmp_path / before_after.TABLE_FILE).exists()
  (tmp_path / 'eval.json').write_text(record(['b', 'a']))
  text = before_after.report(tmp_path)
  assert text and text in capsys.readouterr().out
  assert (tmp_path / before_after.TABLE_FILE).read_text() == text + '\n'
