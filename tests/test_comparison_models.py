"""Each comparison model trains at reduced width: with its own loss through launch.py
(--mode=train: evaluation, prediction and export of the BatchNorm models with their running
averages are tested in tests/test_batchnorm_state.py), and its dagger config (the paper's
exponential WCE) takes finite optimisation steps in the jitted train step."""

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
      '--mode=train',
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
  assert not (workdir / 'eval.json').exists()  # --mode=train
  run = predict.load_run(workdir)
  if model in BATCH_NORM:  # the running averages were trained and checkpointed
    mean = run.batch_stats['conv1_1' if model != 'deeplabv3plus' else 'conv1']['bn']['mean']
    assert np.all(np.isfinite(mean)) and np.any(mean != 0)
  else:
    assert run.batch_stats is None


@pytest.mark.parametrize('model', FAMILIES)
def test_dagger_variant_takes_finite_steps(model):
  config = compare.get_config(f'{model},dagger,smoke')
  mesh = state_lib.make_mesh()
  state = state_lib.init_train_state(config, (32, 64, 3), mesh)
  assert isinstance(state, state_lib.BatchNormTrainState) == (model in BATCH_NORM)
  step = train.make_train_step(config, mesh, state)
  rng = np.random.default_rng(0)
  batch = {
    'image': rng.random((2, 32, 64, 3), np.float32),
    'mask': (rng.random((2, 32, 64, 1)) < 0.05).astype(np.float32),
  }
  for _ in range(2):
    state, metrics = step(state, batch)
    assert float(metrics['finite']) == 1 and float(metrics['loss']) > 0
    assert float(metrics['q']) > 1  # the exponential WCE's weight is logged
  assert int(state.step) == 2


def test_unknown_arguments_are_named():
  with pytest.raises(ValueError, match='one of'):
    compare.get_config('nosuchmodel')
  with pytest.raises(ValueError, match="'tiny'"):
    compare.get_config('hed,tiny')
