"""The four recipes of docs/architecture.md, run exactly as written there.

Each recipe ("Add a model", "Add a dataset", "Add a loss", "Add a protocol") shows two python
blocks, a plugin module and a config file naming it in ``c.plugins``, each headed by a
``# <file>.py`` comment. The tests read the blocks from the document and write them to files,
so the document and what is tested cannot drift apart. The fast tier imports each plugin and
builds its config's experiment in-process (seconds); the slow tier trains each recipe through
``launch.py`` (which ends with the evaluation's eval.json), then predicts and exports the run
with the commands in fresh processes, which find the plugin by its name in config.json.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import PIL.Image
import pytest

from crackjax import evaluation, losses, models
from crackjax.data import registry as data_registry
from crackjax.experiment import validation
from crackjax.experiment.build import build, check_data
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / 'docs' / 'architecture.md'


@dataclasses.dataclass(frozen=True)
class Recipe:
  """One recipe of the document: its heading and the two files its blocks are."""

  heading: str
  plugin: str  # the module's name: its file is <plugin>.py
  config: str  # the config file's name (no suffix)


MODEL = Recipe('Add a model', 'tiny_net', 'tiny_net_config')
DATASET = Recipe('Add a dataset', 'my_roads', 'my_roads_config')
LOSS = Recipe('Add a loss', 'focal_loss', 'focal_config')
PROTOCOL = Recipe('Add a protocol', 'strict_1px', 'strict_1px_config')
RECIPES = (MODEL, DATASET, LOSS, PROTOCOL)


def recipe_blocks(heading: str) -> dict[str, str]:
  """File name -> source of the python blocks under ``### <heading>`` of the document."""
  text = DOC.read_text()
  start = text.index(f'\n### {heading}\n')
  end = min(i for i in (text.find('\n## ', start + 1), text.find('\n### ', start + 1)) if i > 0)
  blocks = re.findall(r'```python\n(.*?)```', text[start:end], flags=re.DOTALL)
  named = {}
  for block in blocks:
    first = block.splitlines()[0]
    match = re.fullmatch(r'# (\w+\.py)', first)
    assert match, f'a block of {heading!r} does not start with "# <file>.py": {first!r}'
    named[match.group(1)] = block
  return named


def write_recipe(recipe: Recipe, root: Path) -> tuple[Path, Path]:
  """Writes the recipe's plugin module to ``root/plugins/`` (the folder to put on the path)
  and its config file to ``root/``; returns (plugins folder, config file)."""
  blocks = recipe_blocks(recipe.heading)
  assert set(blocks) == {f'{recipe.plugin}.py', f'{recipe.config}.py'}, sorted(blocks)
  plugins = root / 'plugins'
  plugins.mkdir(parents=True, exist_ok=True)
  (plugins / f'{recipe.plugin}.py').write_text(blocks[f'{recipe.plugin}.py'])
  config = root / f'{recipe.config}.py'
  config.write_text(blocks[f'{recipe.config}.py'])
  return plugins, config


def test_every_recipe_is_a_plugin_module_and_a_config_that_names_it():
  text = DOC.read_text()
  for recipe in RECIPES:
    blocks = recipe_blocks(recipe.heading)
    assert set(blocks) == {f'{recipe.plugin}.py', f'{recipe.config}.py'}, recipe
    assert f"c.plugins = ('{recipe.plugin}',)" in blocks[f'{recipe.config}.py'], recipe
    register = {MODEL: 'register_model', DATASET: 'register_dataset', LOSS: 'register_loss'}
    assert register.get(recipe, 'register_protocol') + '(' in blocks[f'{recipe.plugin}.py']
    # The recipe's note for contributors is there too.
    section = text[text.index(f'### {recipe.heading}') :]
    assert 'In crackjax itself:' in section.split('\n### ')[0], recipe


# ------------------------------------------------------------------- fast: in this process


@pytest.fixture
def registries():
  """The registries as they were before the test, restored in place afterwards (the recipes
  register into the real dicts, which every module holds by reference)."""
  tables = (models.MODELS, losses.LOSSES, data_registry.DATASETS, evaluation.PROTOCOLS)
  saved = [dict(t) for t in tables]
  yield
  for table, old in zip(tables, saved, strict=True):
    table.clear()
    table.update(old)


@pytest.fixture
def load_recipe(tmp_path, monkeypatch, registries):
  """`load(recipe, arg)`: the recipe's files written and its plugin folder on sys.path; the
  config file loaded from its path (as --config=FILE:arg is) and ``get_config(arg)``
  returned. The plugin module is forgotten afterwards."""
  loaded = []

  def load(recipe: Recipe, arg: str | None = 'smoke') -> ml_collections.ConfigDict:
    plugins, config_file = write_recipe(recipe, tmp_path)
    monkeypatch.syspath_prepend(str(plugins))
    loaded.append(recipe.plugin)
    spec = importlib.util.spec_from_file_location(f'recipe_config_{recipe.plugin}', config_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)

  yield load
  for name in loaded:
    sys.modules.pop(name, None)


def test_model_recipe_builds_its_model_from_its_entry(load_recipe):
  config = load_recipe(MODEL)
  experiment = build(config)
  entry = models.MODELS['tiny_net']
  assert entry.module == 'tiny_net'
  # compare.py made the config from the entry: its group at the smoke size, its loss.
  assert config.model.to_dict() == {'name': 'tiny_net', 'features': 4}
  assert config.loss.to_dict() == dict(entry.original_loss)
  model = experiment.model
  assert type(model).__name__ == 'TinyNet' and models.input_multiple(model) == 2
  images = jax.ShapeDtypeStruct((2, 32, 48, 3), jnp.float32)
  variables = jax.eval_shape(model.init, jax.random.key(0), images)
  logits = jax.eval_shape(model.apply, variables, images)
  assert logits.shape == (2, 32, 48, 1) and logits.dtype == jnp.float32
  with pytest.raises(ValueError, match='multiples of 2'):
    jax.eval_shape(model.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 33, 48, 3), jnp.float32))


def test_loss_recipe_is_the_focal_loss(load_recipe):
  config = load_recipe(LOSS)
  loss_fn = build(config).loss_fn
  assert losses.LOSSES['focal'].module == 'focal_loss'
  assert losses.LOSSES['focal'].fields == ('gamma', 'alpha')
  logits = jnp.array([2.0, -1.0, 0.5, 0.0]).reshape(1, 2, 2, 1)
  labels = jnp.array([1.0, 0.0, 0.0, 0.0]).reshape(1, 2, 2, 1)
  p = 1 / (1 + np.exp(-np.array([2.0, -1.0, 0.5, 0.0])))
  p_t = np.where([1, 0, 0, 0], p, 1 - p)
  expected = np.mean(np.where([1, 0, 0, 0], 0.75, 0.25) * (1 - p_t) ** 2 * -np.log(p_t))
  loss, metrics = jax.jit(loss_fn)(logits, labels)
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(metrics['p_t']) == pytest.approx(np.mean(p_t), rel=1e-5)
  grads = jax.grad(lambda z: loss_fn({'logits': z, 'side_logits': ()}, labels)[0])(logits)
  assert np.all(np.isfinite(grads)) and np.any(grads != 0)
  # A bad value is the config's problem, named, before any data.
  config.loss.gamma = -1.0
  with pytest.raises(validation.ConfigError, match=r'gamma=-1.0 must be >= 0'):
    build(config)


def test_dataset_recipe_prepares_its_splits(load_recipe, tmp_path):
  images, _ = fixtures.make_fake_folder(tmp_path / 'roads', n=10)
  config = load_recipe(DATASET)
  config.data.manual_dir = str(images.parent)
  config.data.data_dir = str(tmp_path / 'tfds')
  experiment = build(config)
  assert data_registry.DATASETS['my_roads'].module == 'my_roads'
  experiment.splits.prepare()
  check_data(experiment)
  names = {
    split: sorted(data_registry.record_name(r) for r in experiment.splits.source(split))
    for split in ('train', 'test')
  }
  assert names['test'] == ['img_00', 'img_05'] and len(names['train']) == 8
  assert experiment.splits.train_image_shape == (32, 48, 3)
  # Without its files: the builder's instructions, before anything is prepared.
  config.data.manual_dir = None
  config.data.data_dir = str(tmp_path / 'other_tfds')
  with pytest.raises(data_registry.DatasetNotFoundError, match='Arrange the files as'):
    build(config).splits.prepare()


def test_protocol_recipe_forgives_one_pixel(load_recipe):
  config = load_recipe(PROTOCOL)
  experiment = build(config)
  assert experiment.protocols == ('strict', 'strict_1px')
  spec = evaluation.get_protocol('strict_1px')
  assert spec.module == 'strict_1px' and spec.num_thresholds(20) == 20
  gt = np.zeros((20, 30), bool)
  gt[10, 3:27] = True
  shifted = np.roll(gt, 1, axis=0) * np.float32(0.9)  # the crack, one row lower
  strict = evaluation.evaluate([shifted], [gt], protocol='strict')
  slack = evaluation.evaluate([shifted], [gt], protocol='strict_1px')
  assert strict['ods']['f1'] == 0.0 and slack['ods']['f1'] == slack['ois']['f1'] == 1.0
  assert slack['protocol_description'] == spec.description
  empty = evaluation.evaluate([np.zeros(gt.shape, np.float32)], [gt], protocol='strict_1px')
  assert empty['ods']['f1'] == empty['ap'] == 0.0


# ------------------------------------------------------------- slow: the commands, end to end


def _env(plugins: Path | None) -> dict[str, str]:
  """The environment with `plugins` first on PYTHONPATH (None: the environment as it is)."""
  paths = [str(plugins)] if plugins else []
  current = os.environ.get('PYTHONPATH')
  return {**os.environ, 'PYTHONPATH': os.pathsep.join([*paths, *([current] if current else [])])}


def _run(args: list[str], plugins: Path | None, *, ok: bool = True) -> subprocess.CompletedProcess:
  proc = subprocess.run(
    [sys.executable, *args],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=REPO,
    env=_env(plugins),
  )
  if ok:
    assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


@pytest.fixture(scope='module')
def crackforest(tmp_path_factory):
  """A fake CrackForest (raw, prepared TFDS folder), shared by the recipes that use it."""
  return fixtures.smoke_data_dirs(tmp_path_factory.mktemp('recipes'))


def train_predict_export(
  recipe: Recipe, root: Path, image: Path, data_flags: list[str], protocols: tuple[str, ...]
) -> dict:
  """Writes the recipe, trains its config's ':smoke' run through launch.py (2 epochs of 3
  steps, then the evaluation), predicts `image` with crackjax-predict's module and exports the
  run with crackjax-export's, each in a fresh process; checks each step's files and returns
  the run's eval.json."""
  plugins, config = write_recipe(recipe, root)
  run = root / 'run'
  flags = [*data_flags, f'--config.eval.protocols={protocols!r}']
  _run(['launch.py', f'--config={config}:smoke', f'--workdir={run}', *flags], plugins)
  assert json.loads((run / 'config.json').read_text())['plugins'] == [recipe.plugin]
  trained = [json.loads(line) for line in (run / 'metrics.jsonl').read_text().splitlines()]
  assert [r['step'] for r in trained if r['kind'] == 'train'] == [1, 2, 3, 4, 5, 6]
  result = json.loads((run / 'eval.json').read_text())
  assert result['step'] == 6 and result['protocols'] == list(protocols)
  for protocol in protocols:
    assert 0 <= result['results'][protocol]['ods']['f1'] <= 1

  out = root / 'predictions'
  _run(
    ['-m', 'crackjax.deploy.predict_command', f'--workdir={run}', f'--out={out}', str(image)],
    plugins,
  )
  width, height = PIL.Image.open(image).size
  for folder, suffix in (('probs', 'png'), ('masks', 'png'), ('overlays', 'jpg')):
    assert PIL.Image.open(out / folder / f'{image.stem}.{suffix}').size == (width, height)
  with open(out / 'measurements.csv') as f:
    assert [row['name'] for row in csv.DictReader(f)] == [image.stem]

  exported = root / 'model.jaxexport'
  _run(
    [
      '-m',
      'crackjax.deploy.export_command',
      f'--workdir={run}',
      f'--out={exported}',
      '--platforms=cpu',
    ],
    plugins,
  )
  sidecar = json.loads(exported.with_name(exported.name + '.json').read_text())
  assert sidecar['step'] == 6
  # The file runs without crackjax or the plugin: jax alone.
  fn = jax.export.deserialize(exported.read_bytes())
  probs = np.asarray(fn.call(np.zeros((1, height, width, 3), np.float32)))
  assert probs.shape == (1, height, width, 1) and 0 <= probs.min() <= probs.max() <= 1
  return result


@pytest.mark.slow
def test_model_recipe_trains_evaluates_predicts_and_exports(crackforest, tmp_path):
  raw, tfds_dir = crackforest
  data = [f'--config.data.manual_dir={raw}', f'--config.data.data_dir={tfds_dir}']
  train_predict_export(MODEL, tmp_path, raw / 'image' / '001.jpg', data, ('strict',))
  sidecar = json.loads((tmp_path / 'model.jaxexport.json').read_text())
  assert sidecar['input_multiple'] == 2 and sidecar['model_config']['name'] == 'tiny_net'
  # A process that cannot import the plugin says so, naming it, instead of a traceback.
  proc = _run(
    [
      '-m',
      'crackjax.deploy.predict_command',
      f'--workdir={tmp_path / "run"}',
      f'--out={tmp_path / "nowhere"}',
      str(raw / 'image' / '001.jpg'),
    ],
    None,
    ok=False,
  )
  assert proc.returncode != 0 and "names module 'tiny_net'" in proc.stderr
  assert 'Traceback' not in proc.stderr


@pytest.mark.slow
def test_dataset_recipe_trains_evaluates_predicts_and_exports(tmp_path):
  images, _ = fixtures.make_fake_folder(tmp_path / 'roads', n=10)
  data = [
    f'--config.data.manual_dir={images.parent}',
    f'--config.data.data_dir={tmp_path / "tfds"}',
  ]
  result = train_predict_export(DATASET, tmp_path, images / 'img_03.jpg', data, ('strict',))
  assert result['dataset'] == 'my_roads' and result['num_images'] == 2


@pytest.mark.slow
def test_loss_recipe_trains_evaluates_predicts_and_exports(crackforest, tmp_path):
  raw, tfds_dir = crackforest
  data = [f'--config.data.manual_dir={raw}', f'--config.data.data_dir={tfds_dir}']
  train_predict_export(LOSS, tmp_path, raw / 'image' / '001.jpg', data, ('strict',))
  rows = [
    json.loads(line) for line in (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()
  ]
  assert all(0 < r['p_t'] < 1 for r in rows if r['kind'] == 'train')  # the loss's own metric


@pytest.mark.slow
def test_protocol_recipe_trains_evaluates_predicts_and_exports(crackforest, tmp_path):
  raw, tfds_dir = crackforest
  data = [f'--config.data.manual_dir={raw}', f'--config.data.data_dir={tfds_dir}']
  protocols = ('strict', 'strict_1px')
  result = train_predict_export(PROTOCOL, tmp_path, raw / 'image' / '001.jpg', data, protocols)
  slack = result['results']['strict_1px']
  assert slack['protocol_description'].startswith('strict, but a pixel within one pixel')
  # One pixel of slack never scores below the strict protocol at its own ODS threshold.
  assert slack['ods']['f1'] >= result['results']['strict']['ods']['f1']
  # threshold.json stays the strict protocol's.
  chosen = json.loads((tmp_path / 'run' / 'threshold.json').read_text())
  assert chosen['chosen_by'].endswith('strict protocol')
