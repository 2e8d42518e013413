"""Each comparison model trains end to end at reduced width: with its own loss through
launch.py, and with the paper's exponential WCE (dagger variant) in-process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from configs import compare
from crackjax import train
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp('compare')
  raw = fixtures.make_fake_crackforest(root / 'raw', n_labelled=6, size=(32, 48))
  return raw, root / 'tfds'


def _train_rows(workdir: Path) -> list[dict]:
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  return [r for r in rows if r['kind'] == 'train']


@pytest.mark.parametrize('model', sorted(compare.MODELS))
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
  if model != 'fcn8s':  # deep supervision logs each side output's loss
    assert {'side1_loss', 'fuse_loss'} <= set(rows[-1])
  assert json.loads((workdir / 'eval.json').read_text())['step'] == 6


@pytest.mark.parametrize('model', sorted(compare.MODELS))
def test_dagger_variant_trains(model, data_dirs, tmp_path):
  raw, tfds_dir = data_dirs
  config = compare.get_config(f'{model},dagger,smoke')
  config.data.manual_dir, config.data.data_dir = str(raw), str(tfds_dir)
  config.num_epochs = 1
  state = train.train_and_evaluate(config, tmp_path / model, evaluate_after=False)
  assert int(state.step) == 3
  rows = _train_rows(tmp_path / model)
  assert all(r['loss'] > 0 and r['q'] > 1 for r in rows)  # q of the exponential WCE is logged


def test_unknown_arguments_are_named():
  with pytest.raises(ValueError, match='one of'):
    compare.get_config('segnet')
  with pytest.raises(ValueError, match="'tiny'"):
    compare.get_config('hed,tiny')
