"""Each comparison model trains at reduced width through launch.py (--mode=train), with its
own loss and with its dagger config (the paper's exponential WCE); evaluation, prediction and
export of the BatchNorm models with their running averages are tested in
tests/test_batchnorm_train_state.py."""

import numpy as np
import pytest

from crackjax.configs import compare
from crackjax.experiment import restored
from tests import fixtures

SIDE_OUTPUTS = {'hed', 'rcf', 'deepcrack'}  # deep supervision: a loss per side output
BATCH_NORM = {'segnet', 'deepcrack', 'deeplabv3plus'}
# CrackSeg and U-CliqueNet train end to end in tests/test_comparison_models_extra.py.
FAMILIES = sorted(set(compare.DAGGER_LOSSES) - {'crackseg', 'ucliquenet'})


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp('compare')
  # 32 x 64: multiples of every model's input multiple (SegNet and DeepCrack's 32).
  raw = fixtures.make_fake_crackforest(root / 'raw', n_labelled=6, size=(32, 64))
  return raw, root / 'tfds'


@pytest.mark.slow
@pytest.mark.parametrize('dagger', [False, True], ids=['own_loss', 'dagger'])
@pytest.mark.parametrize('model', FAMILIES)
def test_trains_through_launch(model, dagger, data_dirs, tmp_path):
  workdir = tmp_path / model
  variant = ',dagger' if dagger else ''
  _, rows = fixtures.train_through_launch(
    f'configs/compare.py:{model}{variant},smoke', workdir, data_dirs
  )
  assert [r['step'] for r in rows] == [1, 2, 3, 4, 5, 6]
  assert all(r['loss'] > 0 for r in rows)
  if dagger:  # the exponential WCE logs its weight q
    assert all(r['q'] > 1 for r in rows)
  elif model in SIDE_OUTPUTS:  # deep supervision logs each side output's loss
    assert {'side1_loss', 'fuse_loss'} <= set(rows[-1])
  if model == 'segnet' and not dagger:  # the median-frequency weights, per batch
    assert all(r['w_crack'] > 1 > r['w_background'] for r in rows)
  assert not (workdir / 'eval.json').exists()  # --mode=train
  run = restored.load_run(workdir)
  if model in BATCH_NORM:  # the running averages were trained and checkpointed
    mean = run.batch_stats['conv1_1' if model != 'deeplabv3plus' else 'conv1']['bn']['mean']
    assert np.all(np.isfinite(mean)) and np.any(mean != 0)
  else:
    assert run.batch_stats is None


def test_unknown_arguments_are_named():
  with pytest.raises(ValueError, match='one of'):
    compare.get_config('nosuchmodel')
  with pytest.raises(ValueError, match="'tiny'"):
    compare.get_config('hed,tiny')
