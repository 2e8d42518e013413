"""A new model (with a side output) and a new loss plug in from a config file alone.

The config registers both in the explicit tables (`crackjax.models.MODELS`,
`crackjax.losses.LOSSES`) and trains through the real command line; crackjax/training/loop.py is
not touched.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import fixtures

REPO = Path(__file__).resolve().parents[1]

TOY_CONFIG = textwrap.dedent('''
    import flax.linen as nn
    import jax.numpy as jnp
    import ml_collections

    from configs import smoke
    from crackjax import losses, models


    class SideOutputNet(nn.Module):
      """Two convs; returns the fused map and one side output, as HED-like models do."""

      features: int = 4
      input_multiple = 2  # Declared like the U-Net's; evaluation pads images to it.

      @nn.compact
      def __call__(self, x):
        h = nn.relu(nn.Conv(self.features, (3, 3))(x))
        side = nn.Conv(1, (1, 1), name='side')(h)
        fused = nn.Conv(1, (3, 3), name='fused')(h) + side
        return {'logits': fused, 'side_logits': (side,)}


    def bce_with_sides(*, side_weight):
      """Plain BCE on the fused map plus side_weight x BCE on the side output."""
      def loss_fn(outputs, labels):
        fused = jnp.mean(losses.weighted_bce(outputs['logits'], labels, 1.0))
        side = jnp.mean(losses.weighted_bce(outputs['side_logits'][0], labels, 1.0))
        return fused + side_weight * side, {'side_bce': side}
      return loss_fn


    models.MODELS['toy_side'] = SideOutputNet
    losses.LOSSES['bce_sides'] = bce_with_sides


    def get_config():
      c = smoke.get_config()
      c.model = ml_collections.ConfigDict({'name': 'toy_side', 'features': 4})
      c.loss = ml_collections.ConfigDict({'name': 'bce_sides', 'side_weight': 0.5})
      c.num_epochs = 1
      c.steps_per_epoch = 2
      c.eval.protocols = ('strict',)
      return c
''')


@pytest.fixture(scope='module')
def raw(tmp_path_factory):
  return fixtures.make_fake_crackforest(
    tmp_path_factory.mktemp('toy') / 'raw', n_labelled=6, size=(32, 48)
  )


def _launch(*args, cwd=REPO):
  return subprocess.run(
    [sys.executable, str(REPO / 'launch.py'), *args],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=cwd,
  )


# A whole launch.py run in a subprocess: the slow tier (the two checks below stay).
@pytest.mark.slow
def test_toy_model_and_loss_train_through_launch(raw, tmp_path):
  config = tmp_path / 'toy_config.py'
  config.write_text(TOY_CONFIG)
  workdir = tmp_path / 'run'
  proc = _launch(
    f'--config={config}',
    f'--workdir={workdir}',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={tmp_path / "tfds"}',
    '--config.loss.side_weight=0.25',
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  train_rows = [r for r in rows if r['kind'] == 'train']
  assert [r['step'] for r in train_rows] == [1, 2]
  assert all(r['side_bce'] > 0 and r['loss'] > r['side_bce'] * 0.25 for r in train_rows)
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['model'] == {'name': 'toy_side', 'features': 4}
  assert saved['loss'] == {'name': 'bce_sides', 'side_weight': 0.25}
  # Evaluation used the fused map of the dict output.
  result = json.loads((workdir / 'eval.json').read_text())
  assert result['step'] == 2 and result['protocols'] == ['strict']


def test_bad_loss_field_fails_before_any_data_or_workdir(tmp_path):
  workdir = tmp_path / 'never'
  proc = _launch(
    '--config=configs/smoke.py',
    f'--workdir={workdir}',
    '--config.loss.weighting=bogus',
    f'--config.data.data_dir={tmp_path / "tfds"}',
  )
  assert proc.returncode == 1
  assert "launch.py: bad config: config.loss.weighting='bogus'" in proc.stderr
  assert 'Traceback' not in proc.stderr
  assert not workdir.exists() and not (tmp_path / 'tfds').exists()


def test_mistyped_config_field_is_one_line(tmp_path):
  proc = _launch('--config=configs/smoke.py', f'--workdir={tmp_path}', '--config.model.widht=3')
  assert proc.returncode == 1
  assert 'unknown config field' in proc.stderr and 'widht' in proc.stderr
  assert 'Traceback' not in proc.stderr
