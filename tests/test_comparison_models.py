"""Each comparison model trains end to end at reduced width: with its own loss through
launch.py, and with the paper's exponential WCE (dagger variant) in-process. The BatchNorm
models (SegNet, DeepCrack, DeepLab v3+) also checkpoint and evaluate with their running
averages."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from configs import compare
from crackjax import predict, train
from crackjax import state as state_lib
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]
SIDE_OUTPUTS = {'hed', 'rcf', 'deepcrack'}  # deep supervision: a loss per side output
BATCH_NORM = {'segnet', 'deepcrack', 'deeplabv3plus'}
# CrackSeg and U-CliqueNet train end to end in tests/test_comparison_models_extra.py.
FAMILIES = sorted(set(compare.MODELS) - {'crackseg', 'ucliquenet'})


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp('compare')
  # 32 x 64: multiples of every model's input multiple (SegNet and DeepCrack's 32).
  raw = fixtures.make_fake_crackforest(root / 'raw', n_labelled=6, size=(32, 64))
  return raw, root / 'tfds'


def _train_rows(workdir: Path) -> list[dict]:
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  return [r for r in rows if r['kind'] == 'train']


@pytest.mark.parametrize('model', FAMILIES)
def test_own_loss_through_launch(model, data_dirs, tmp_path):
  raw, tfds_dir = data_dirs
  workdir = tmp_path / model
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / 'launch.py'),
      f'--config=configs/compare.py:{model},smoke',
      f'--workdir={workdir}',
      f'--config.data.manual_dir={raw}',
      f'--config.data.data_dir={tfds_dir}',
      "--config.eval.protocols=('strict',)",
    ],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=REPO,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = _train_rows(workdir)
  assert [r['step'] for r in rows] == [1, 2, 3, 4, 5, 6]
  assert all(r['loss'] > 0 for r in rows)
  if model in SIDE_OUTPUTS:  # deep supervision logs each side output's loss
    assert {'side1_loss', 'fuse_loss'} <= set(rows[-1])
  if model == 'segnet':  # the median-frequency weights, per batch
    assert all(r['w_crack'] > 1 > r['w_background'] for r in rows)
  assert json.loads((workdir / 'eval.json').read_text())['step'] == 6
  run = predict.load_run(workdir)
  if model in BATCH_NORM:  # the running averages were trained and checkpointed
    mean = run.batch_stats['conv1_1' if model != 'deeplabv3plus' else 'conv1']['bn']['mean']
    assert np.all(np.isfinite(mean)) and np.any(mean != 0)
  else:
    assert run.batch_stats is None


@pytest.mark.parametrize('model', FAMILIES)
def test_dagger_variant_trains(model, data_dirs, tmp_path):
  raw, tfds_dir = data_dirs
  config = compare.get_config(f'{model},dagger,smoke')
  config.data.manual_dir, config.data.data_dir = str(raw), str(tfds_dir)
  config.num_epochs = 1
  state = train.train_and_evaluate(config, tmp_path / model, evaluate_after=False)
  assert int(state.step) == 3
  assert isinstance(state, state_lib.BatchNormTrainState) == (model in BATCH_NORM)
  rows = _train_rows(tmp_path / model)
  assert all(r['loss'] > 0 and r['q'] > 1 for r in rows)  # q of the exponential WCE is logged


def test_unknown_arguments_are_named():
  with pytest.raises(ValueError, match='one of'):
    compare.get_config('nosuchmodel')
  with pytest.raises(ValueError, match="'tiny'"):
    compare.get_config('hed,tiny')
