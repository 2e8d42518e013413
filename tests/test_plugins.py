"""A new model (with a side output) and a new loss plug in from a module of their own; datasets
and protocols register the same way (tests/test_recipes.py runs all four recipes).

The plugin module registers both (`crackjax.models.register_model`,
`crackjax.losses.register_loss`) and the config names it in ``config.plugins``, so that every
process that builds the model from the run's config.json (training, prediction, export)
imports it by name; it trains through the real command line, and crackjax/trainer/loop.py is
not touched. A model registered where a later process could not import it (the config file)
is a config error before anything runs.
"""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from crackjax import evaluation, losses, models, plugins
from crackjax.configs import smoke
from crackjax.data import registry as data_registry
from crackjax.experiment import validation
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]

TOY_PLUGIN = textwrap.dedent('''
    """A toy model with a side output and its loss, registered at import."""

    import flax.linen as nn
    import jax.numpy as jnp

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


    def bce_with_sides(*, side_weight=1.0):
      """Plain BCE on the fused map plus side_weight x BCE on the side output."""
      def loss_fn(outputs, labels):
        fused = jnp.mean(losses.weighted_bce(outputs['logits'], labels, 1.0))
        side = jnp.mean(losses.weighted_bce(outputs['side_logits'][0], labels, 1.0))
        return fused + side_weight * side, {'side_bce': side}
      return loss_fn


    models.register_model(
      'toy_side',
      models.ModelEntry(
        build=SideOutputNet,
        config={'features': 4},
        original_loss={'name': 'bce_sides', 'side_weight': 0.5},
      ),
    )
    losses.register_loss('bce_sides', losses.LossEntry(build=bce_with_sides, side_outputs=True))
''')

TOY_CONFIG = textwrap.dedent("""
    import ml_collections

    from crackjax.configs import smoke


    def get_config():
      c = smoke.get_config()
      c.plugins = ('toy_plugin',)  # importable: tests put its folder on PYTHONPATH
      c.model = ml_collections.ConfigDict({'name': 'toy_side', 'features': 4})
      c.loss = ml_collections.ConfigDict({'name': 'bce_sides', 'side_weight': 0.5})
      c.num_epochs = 1
      c.steps_per_epoch = 2
      c.eval.protocols = ('strict',)
      return c
""")

# What the plugin used to be: the config file registering the model itself.
IN_CONFIG_FILE = textwrap.dedent("""
    from crackjax.configs import smoke
    from crackjax import models
    from crackjax.models.unet import UNet

    models.register_model(
      'unet_in_config', models.ModelEntry(build=UNet, config={}, original_loss={})
    )


    def get_config():
      c = smoke.get_config()
      c.model.name = 'unet_in_config'
      return c
""")


@pytest.fixture(scope='module')
def raw(tmp_path_factory):
  return fixtures.make_fake_crackforest(
    tmp_path_factory.mktemp('toy') / 'raw', n_labelled=6, size=(32, 48)
  )


def _env(*paths: Path) -> dict[str, str]:
  """The environment with `paths` first on PYTHONPATH."""
  current = os.environ.get('PYTHONPATH', '')
  return {**os.environ, 'PYTHONPATH': os.pathsep.join([*map(str, paths), current])}


def _launch(*args, cwd=REPO, env=None):
  return subprocess.run(
    [sys.executable, str(REPO / 'launch.py'), *args],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=cwd,
    env=env,
  )


# A whole launch.py run in a subprocess: the slow tier (the checks below stay).
@pytest.mark.slow
def test_toy_model_and_loss_train_through_launch(raw, tmp_path):
  (tmp_path / 'plugin').mkdir()
  (tmp_path / 'plugin' / 'toy_plugin.py').write_text(TOY_PLUGIN)
  config = tmp_path / 'toy_config.py'
  config.write_text(TOY_CONFIG)
  workdir = tmp_path / 'run'
  proc = _launch(
    f'--config={config}',
    f'--workdir={workdir}',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={tmp_path / "tfds"}',
    '--config.loss.side_weight=0.25',
    env=_env(tmp_path / 'plugin'),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  train_rows = [r for r in rows if r['kind'] == 'train']
  assert [r['step'] for r in train_rows] == [1, 2]
  assert all(r['side_bce'] > 0 and r['loss'] > r['side_bce'] * 0.25 for r in train_rows)
  saved = json.loads((workdir / 'config.json').read_text())
  assert saved['model'] == {'name': 'toy_side', 'features': 4}
  assert saved['loss'] == {'name': 'bce_sides', 'side_weight': 0.25}
  assert saved['plugins'] == ['toy_plugin']
  # Evaluation used the fused map of the dict output.
  result = json.loads((workdir / 'eval.json').read_text())
  assert result['step'] == 2 and result['protocols'] == ['strict']
  # A fresh process rebuilds model and loss from config.json alone, as prediction and export
  # do: config.plugins is all it needs.
  rebuild = textwrap.dedent(f"""
      import json, ml_collections
      from crackjax import losses, models
      from crackjax import plugins
      config = ml_collections.ConfigDict(json.load(open({str(workdir / 'config.json')!r})))
      plugins.import_plugins(config)
      print(type(models.model_from_config(config.model.to_dict())).__name__)
      losses.loss_from_config(config.loss.to_dict())
  """)
  proc = subprocess.run(
    [sys.executable, '-c', rebuild],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=REPO,
    env=_env(tmp_path / 'plugin'),
  )
  assert proc.returncode == 0 and proc.stdout.strip() == 'SideOutputNet', proc.stderr[-3000:]


@pytest.fixture
def registries(monkeypatch):
  """Copies of MODELS and LOSSES for a test to register into, dropped afterwards."""
  monkeypatch.setattr(models, 'MODELS', dict(models.MODELS))
  monkeypatch.setattr(losses, 'LOSSES', dict(losses.LOSSES))


@pytest.fixture
def toy_plugin(tmp_path, monkeypatch, registries):
  """The toy plugin, importable as a module of a unique name; forgotten afterwards."""
  name = f'toy_plugin_{tmp_path.name}'.replace('-', '_')
  (tmp_path / f'{name}.py').write_text(TOY_PLUGIN)
  monkeypatch.syspath_prepend(str(tmp_path))
  yield name
  sys.modules.pop(name, None)


def _toy_config(*plugin_names: str) -> ml_collections.ConfigDict:
  c = smoke.get_config()
  c.plugins = plugin_names
  c.model = ml_collections.ConfigDict({'name': 'toy_side', 'features': 4})
  c.loss = ml_collections.ConfigDict({'name': 'bce_sides', 'side_weight': 0.5})
  return c


def test_config_plugins_register_the_model_and_loss(toy_plugin):
  assert 'toy_side' not in models.MODELS
  parts = validation.check_config(_toy_config(toy_plugin))
  assert type(parts.model).__name__ == 'SideOutputNet' and parts.model.features == 4
  entry = models.MODELS['toy_side']
  assert entry.module == toy_plugin  # recorded by register_model: the plugin's module
  assert losses.LOSSES['bce_sides'].module == toy_plugin
  assert losses.LOSSES['bce_sides'].fields == ('side_weight',)


def test_a_plugin_that_does_not_import_is_named(tmp_path, monkeypatch):
  with pytest.raises(ValueError, match=r"config.plugins names module 'no_such_plugin_mod'"):
    plugins.import_plugins({'plugins': ('no_such_plugin_mod',)})
  (tmp_path / 'broken_plugin_mod.py').write_text('raise RuntimeError("half written")\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  with pytest.raises(ValueError, match="'broken_plugin_mod'.*RuntimeError: half written"):
    plugins.import_plugins({'plugins': ('broken_plugin_mod',)})
  with pytest.raises(ValueError, match='must be a tuple of importable module names'):
    plugins.import_plugins({'plugins': 'toy'})
  plugins.import_plugins({})  # no field: nothing to import


def test_unimportable_plugin_is_a_config_problem():
  c = smoke.get_config()
  c.plugins = ('no_such_plugin_mod',)
  with pytest.raises(validation.ConfigError, match="names module 'no_such_plugin_mod'"):
    validation.check_config(c)


@pytest.mark.slow
def test_model_registered_in_a_config_file_is_caught_before_running(tmp_path):
  # A config file is loaded from its path (ml_collections names it 'config_config'): a later
  # process reading config.json could not register the model again.
  config_file = tmp_path / 'in_config.py'
  config_file.write_text(IN_CONFIG_FILE)
  proc = _launch(f'--config={config_file}', f'--workdir={tmp_path / "never"}')
  assert proc.returncode == 1
  assert "config.model.name='unet_in_config' is registered by module" in proc.stderr
  assert 'could not rebuild it' in proc.stderr and 'config.plugins' in proc.stderr
  assert 'Traceback' not in proc.stderr and not (tmp_path / 'never').exists()


def test_entry_from_a_module_config_plugins_does_not_name(toy_plugin):
  config = _toy_config()
  plugins.import_plugins({'plugins': (toy_plugin,)})  # registered, but not named by config
  with pytest.raises(validation.ConfigError) as e:
    validation.check_config(config)
  lines = str(e.value).splitlines()
  assert any(f"'toy_side' is registered by module {toy_plugin!r}" in x for x in lines)
  assert any(f"'bce_sides' is registered by module {toy_plugin!r}" in x for x in lines)


def test_register_refuses_a_taken_name(registries):
  entry = models.ModelEntry(build=models.MODELS['unet'].build, config={}, original_loss={})
  with pytest.raises(ValueError, match="'unet' is already registered by crackjax"):
    models.register_model('unet', entry)
  models.register_model('unet_again', entry)  # recorded as this test module's
  assert models.MODELS['unet_again'].module == __name__
  models.register_model('unet_again', entry)  # the same module again: re-registered
  with pytest.raises(ValueError, match=f'already registered by module {__name__!r}'):
    models.register_model('unet_again', entry, module='elsewhere')
  with pytest.raises(ValueError, match="'holistic' is already registered by crackjax"):
    losses.register_loss('holistic', losses.LossEntry(build=losses.holistic))


@pytest.mark.slow
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


@pytest.mark.slow
def test_mistyped_config_field_is_one_line(tmp_path):
  proc = _launch('--config=configs/smoke.py', f'--workdir={tmp_path}', '--config.model.widht=3')
  assert proc.returncode == 1
  assert 'unknown config field' in proc.stderr and 'widht' in proc.stderr
  assert 'Traceback' not in proc.stderr


# ------------------------------------------------------------------- datasets and protocols


@pytest.fixture
def all_registries():
  """Every registry as it was before the test, restored in place afterwards."""
  tables = (models.MODELS, losses.LOSSES, data_registry.DATASETS, evaluation.PROTOCOLS)
  saved = [dict(t) for t in tables]
  yield
  for table, old in zip(tables, saved, strict=True):
    table.clear()
    table.update(old)


def test_register_dataset_and_protocol_refuse_a_taken_name(all_registries):
  entry = data_registry.DatasetEntry(builder=data_registry.DATASETS['crackforest'].builder)
  with pytest.raises(ValueError, match="Dataset 'crackforest' is already registered by crackjax"):
    data_registry.register_dataset('crackforest', entry)
  assert data_registry.register_dataset('cfd_again', entry).module == __name__
  data_registry.register_dataset('cfd_again', entry)  # the same module again: re-registered
  with pytest.raises(ValueError, match=f'already registered by module {__name__!r}'):
    data_registry.register_dataset('cfd_again', entry, module='elsewhere')

  strict = evaluation.PROTOCOLS['strict']
  with pytest.raises(ValueError, match="Protocol 'strict' is already registered by crackjax"):
    evaluation.register_protocol('strict', strict)
  mine = dataclasses.replace(strict, name='strict_again')
  assert evaluation.register_protocol('strict_again', mine).module == __name__
  assert evaluation.get_protocol('strict_again').module == __name__
  evaluation.register_protocol('strict_again', mine)
  with pytest.raises(ValueError, match=f'already registered by module {__name__!r}'):
    evaluation.register_protocol('strict_again', mine, module='elsewhere')
  with pytest.raises(ValueError, match="registered as 'other' is named 'strict_again'"):
    evaluation.register_protocol('other', mine)
  with pytest.raises(ValueError, match=r"unknown protocol 'nope'.*'strict_again'"):
    evaluation.get_protocol('nope')  # the message lists the registered ones too


def test_dataset_and_protocol_from_a_module_config_plugins_does_not_name(all_registries):
  entry = data_registry.DatasetEntry(builder=data_registry.DATASETS['crackforest'].builder)
  data_registry.register_dataset('cfd_elsewhere', entry, module='elsewhere_mod')
  protocol = dataclasses.replace(evaluation.PROTOCOLS['strict'], name='strict_elsewhere')
  evaluation.register_protocol('strict_elsewhere', protocol, module='elsewhere_mod')
  c = smoke.get_config()
  c.data.name = 'cfd_elsewhere'
  c.eval.protocols = ('strict', 'strict_elsewhere')
  c.eval.curve_protocols = ('strict_elsewhere',)
  with pytest.raises(validation.ConfigError) as e:
    validation.check_config(c)
  lines = str(e.value).splitlines()
  assert len(lines) == 3, lines
  assert lines[0].startswith("config.data.name='cfd_elsewhere' is registered by module")
  assert lines[1].startswith("'strict_elsewhere' of config.eval.protocols is registered by")
  assert lines[2].startswith("'strict_elsewhere' of config.eval.curve_protocols is registered")
  c.plugins = ('elsewhere_mod',)  # named (and importable): the names are known and accepted
  sys.modules['elsewhere_mod'] = types.ModuleType('elsewhere_mod')
  try:
    validation.check_config(c)
  finally:
    del sys.modules['elsewhere_mod']


PARALLEL_PROTOCOL = textwrap.dedent('''
    """A parallel protocol: strict's counts, registered by a plugin."""

    import dataclasses

    from crackjax import evaluation

    STRICT = evaluation.PROTOCOLS['strict']


    def counts(probs, gts, thresholds):
      return STRICT.counts(probs, gts, thresholds)


    evaluation.register_protocol(
      'strict_in_workers',
      dataclasses.replace(STRICT, name='strict_in_workers', counts=counts, parallel=True),
    )
''')


def test_a_plugin_protocol_counts_in_spawned_workers(tmp_path, monkeypatch, all_registries):
  # Spawned workers start without the plugin's registration: they get its count function
  # (imported there by its module's name), not its name.
  (tmp_path / 'parallel_protocol_mod.py').write_text(PARALLEL_PROTOCOL)
  monkeypatch.syspath_prepend(str(tmp_path))
  plugins.import_plugins({'plugins': ('parallel_protocol_mod',)})
  try:
    rng = np.random.default_rng(0)
    probs = [rng.random((12, 16)).astype(np.float32) for _ in range(4)]
    gts = [rng.random((12, 16)) < 0.2 for _ in range(4)]
    alone = evaluation.evaluate(probs, gts, protocol='strict_in_workers')
    assert evaluation.evaluate(probs, gts, protocol='strict_in_workers', workers=2) == alone
    assert alone['ods'] == evaluation.evaluate(probs, gts, protocol='strict')['ods']
  finally:
    sys.modules.pop('parallel_protocol_mod', None)
