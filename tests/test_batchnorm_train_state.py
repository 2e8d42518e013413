"""BatchNorm state in training, checkpoints, evaluation, prediction and export.

A model with BatchNorm trains with a `state.BatchNormTrainState` (its running averages beside
the parameters), whose train step updates them from the global batch; evaluation, prediction
and export use the running averages. Models without BatchNorm keep flax's TrainState, so
checkpoints written before BatchNorm models existed still restore.
"""

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax.training import train_state as flax_train_state

from crackjax import losses
from crackjax.configs import compare, smoke
from crackjax.deploy import export, predictor
from crackjax.engine import checkpoints, train_state
from crackjax.engine import mesh as mesh_lib
from crackjax.engine import step as step_lib
from crackjax.experiment import restored
from crackjax.experiment.build import build
from crackjax.models import model_variables
from crackjax.trainer import scoring

REPO = Path(__file__).resolve().parents[1]


class TinyBN(nn.Module):
  """conv -> BatchNorm -> ReLU -> 1x1 conv: the smallest model with batch statistics."""

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = nn.Conv(4, (3, 3), name='conv')(x)
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9, name='bn')(x)
    return nn.Conv(1, (1, 1), name='head')(nn.relu(x))


def tiny_state(seed: int = 0) -> train_state.BatchNormTrainState:
  model = TinyBN()
  variables = model.init(jax.random.key(seed), jnp.zeros((1, 8, 8, 3)))
  return train_state.BatchNormTrainState.create(
    apply_fn=model.apply,
    params=variables['params'],
    tx=optax.adam(1e-2),
    batch_stats=variables['batch_stats'],
  )


def tiny_batch(n: int = 4) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(0)
  return {
    'image': rng.random((n, 8, 8, 3), np.float32),
    'mask': (rng.random((n, 8, 8, 1)) < 0.2).astype(np.float32),
  }


def tiny_step():
  return jax.jit(
    functools.partial(
      step_lib.train_step,
      loss_fn=losses.holistic(weighting='ce'),
      augment_fn=lambda rng, image, mask: (image, mask),
      seed=0,
    )
  )


def expected_running_mean(state, images):
  """0.9 * old + 0.1 * the batch mean of the conv's output over every image given."""
  conv = nn.Conv(4, (3, 3)).apply({'params': state.params['conv']}, jnp.asarray(images))
  return 0.9 * state.batch_stats['bn']['mean'] + 0.1 * conv.mean(axis=(0, 1, 2))


def test_train_step_updates_running_averages_and_keeps_them_on_a_nonfinite_step():
  state, batch, step = tiny_state(), tiny_batch(), tiny_step()
  new, metrics = step(state, batch)
  assert isinstance(new, train_state.BatchNormTrainState)
  assert int(new.step) == 1 and float(metrics['finite']) == 1
  np.testing.assert_allclose(
    new.batch_stats['bn']['mean'], expected_running_mean(state, batch['image']), rtol=1e-5
  )
  assert not np.allclose(new.params['conv']['kernel'], state.params['conv']['kernel'])
  # A non-finite loss: neither the parameters nor the running averages move.
  bad = dict(batch, image=np.full_like(batch['image'], np.nan))
  kept, metrics = step(new, bad)
  assert float(metrics['finite']) == 0
  jax.tree.map(np.testing.assert_array_equal, kept.batch_stats, new.batch_stats)
  jax.tree.map(np.testing.assert_array_equal, kept.params, new.params)


# Runs with two forced CPU devices: one train step on a 1-device and a 2-device mesh.
_DEVICES_SCRIPT = textwrap.dedent("""
  import json, sys
  import jax, ml_collections, numpy as np
  from crackjax import losses
  from crackjax.trainer import loop
  from crackjax.engine import step as step_lib
  from crackjax.engine import checkpoints
  from crackjax.engine import mesh as mesh_lib
  from crackjax.engine import train_state
  from tests.test_batchnorm_train_state import expected_running_mean, tiny_batch, tiny_state

  assert jax.device_count() == 2, jax.devices()
  config = ml_collections.ConfigDict({'seed': 0})
  batch = tiny_batch(4)
  out = {}
  for n in (1, 2):
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:n]), ('data',))
    state = jax.device_put(tiny_state(), mesh_lib.replicated(mesh))
    step = step_lib.make_train_step(
      mesh, state, loss_fn=losses.holistic(weighting='ce'),
      augment_fn=lambda rng, image, mask: (image, mask), seed=0)
    new, _ = step(state, mesh_lib.global_batch(batch, mesh))
    out[n] = {
      'mean': np.asarray(new.batch_stats['bn']['mean']).tolist(),
      'var': np.asarray(new.batch_stats['bn']['var']).tolist(),
      'kernel': np.asarray(new.params['conv']['kernel']).ravel().tolist(),
    }
  out['expected'] = np.asarray(expected_running_mean(tiny_state(), batch['image'])).tolist()
  json.dump(out, sys.stdout)
""")


# A subprocess with two CPU devices: the slow tier (tests/test_sharding.py is its peer).
@pytest.mark.slow
def test_batch_statistics_are_over_the_global_batch_on_any_number_of_devices():
  env = dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS='--xla_force_host_platform_device_count=2')
  env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO), env.get('PYTHONPATH')]))
  proc = subprocess.run(
    [sys.executable, '-c', _DEVICES_SCRIPT],
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
    cwd=REPO,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout)
  one, two = out['1'], out['2']
  # Each device holds half the batch; the statistics are still those of all four images.
  np.testing.assert_allclose(two['mean'], out['expected'], rtol=1e-5, atol=1e-7)
  for key in ('mean', 'var', 'kernel'):
    np.testing.assert_allclose(two[key], one[key], rtol=1e-5, atol=1e-7)


def _save(workdir: Path, config, state, step: int) -> None:
  (workdir / 'config.json').parent.mkdir(parents=True, exist_ok=True)
  (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2))
  with checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep) as mngr:
    mngr.save(step, args=ocp.args.StandardSave(state))
    mngr.wait_until_finished()


def test_checkpoint_of_the_old_train_state_layout_restores(tmp_path):
  """A U-Net checkpoint as the code before BatchNorm models wrote it (flax's TrainState:
  step, params, opt_state) restores, onto the same layout, and predicts."""
  config = smoke.get_config()
  shape = (32, 48, 3)
  mesh = mesh_lib.make_mesh()
  model = build(config).model
  rng = np.random.default_rng(0)
  abstract_params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, *shape)))
  params = jax.tree.map(
    lambda p: jnp.asarray(rng.standard_normal(p.shape), p.dtype), abstract_params['params']
  )
  old = flax_train_state.TrainState.create(
    apply_fn=model.apply, params=params, tx=optax.adam(config.learning_rate)
  ).replace(step=7)
  _save(tmp_path, config, old, 7)

  abstract = build(config).states.abstract(mesh, shape)
  assert type(abstract) is flax_train_state.TrainState  # no batch_stats field for the U-Net
  mngr = checkpoints.checkpoint_manager(tmp_path, config.max_checkpoints_to_keep)
  state_back = checkpoints.restore_latest_readable(mngr, abstract)
  assert type(state_back) is flax_train_state.TrainState and int(state_back.step) == 7
  jax.tree.map(np.testing.assert_array_equal, state_back.params, params)
  jax.tree.map(np.testing.assert_array_equal, state_back.opt_state, old.opt_state)
  assert train_state.batch_stats_of(state_back) is None

  run = restored.load_run(tmp_path)
  assert run.step == 7 and run.batch_stats is None
  jax.tree.map(np.testing.assert_array_equal, run.params, params)


@pytest.fixture(scope='module')
def segnet_run(tmp_path_factory):
  """A SegNet smoke checkpoint whose running averages are far from their initial values."""
  workdir = tmp_path_factory.mktemp('segnet') / 'run'
  config = compare.get_config('segnet,smoke')
  config.data.input_size = (32, 32)
  state = build(config).states.fresh((32, 32, 3), mesh=mesh_lib.make_mesh())
  assert isinstance(state, train_state.BatchNormTrainState)
  rng = np.random.default_rng(0)
  batch_stats = jax.tree.map(
    lambda x: jnp.asarray(rng.uniform(0.5, 1.5, x.shape), x.dtype), state.batch_stats
  )
  state = state.replace(step=5, batch_stats=batch_stats)
  _save(workdir, config, state, 5)
  return workdir, config, state


def _probs_fn(config):
  """Jitted (params, batch_stats, images) -> probabilities, in evaluation mode."""
  model = build(config).model

  @jax.jit
  def probs(params, batch_stats, x):
    variables = model_variables(params, batch_stats)
    return jax.nn.sigmoid(model.apply(variables, x, train=False))[..., 0]

  return probs


def test_batch_norm_checkpoint_restores_with_its_running_averages(segnet_run):
  workdir, config, state = segnet_run
  mesh = mesh_lib.make_mesh()
  mngr = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep)
  state_back = checkpoints.restore_latest_readable(
    mngr, build(config).states.abstract(mesh, (32, 32, 3))
  )
  assert isinstance(state_back, train_state.BatchNormTrainState) and int(state_back.step) == 5
  jax.tree.map(np.testing.assert_array_equal, state_back.batch_stats, state.batch_stats)
  jax.tree.map(np.testing.assert_array_equal, state_back.params, state.params)
  # A different model configuration is still refused by name (batch statistics included).
  other = compare.get_config('segnet,smoke')
  other.model.width_scale = 1 / 8
  with pytest.raises(checkpoints.CheckpointError, match='different model configuration'):
    checkpoints.restore_latest_readable(mngr, build(other).states.abstract(mesh, (32, 32, 3)))


@pytest.mark.slow
def test_evaluation_prediction_and_export_use_the_running_averages(segnet_run, tmp_path):
  workdir, config, state = segnet_run
  image = np.random.default_rng(1).random((32, 32, 3), np.float32)
  # The running averages matter: the initial ones (mean 0, variance 1) give another map.
  initial = jax.tree_util.tree_map_with_path(
    lambda path, x: jnp.zeros_like(x) if 'mean' in str(path) else jnp.ones_like(x),
    state.batch_stats,
  )
  probs = _probs_fn(config)
  expected = np.asarray(probs(state.params, state.batch_stats, image[None]))[0]
  with_initial = np.asarray(probs(state.params, initial, image[None]))[0]
  assert not np.allclose(with_initial, expected, atol=1e-3)

  [probs] = scoring.predict_examples(build(config).model, state, [{'image': image}])
  np.testing.assert_allclose(probs, expected, rtol=1e-5, atol=1e-6)

  run = restored.load_run(workdir)
  jax.tree.map(np.testing.assert_array_equal, run.batch_stats, state.batch_stats)
  photo_predictor = predictor.Predictor.from_workdir(workdir)
  np.testing.assert_allclose(photo_predictor(image), expected, rtol=1e-5, atol=1e-6)

  out = export.export_run(workdir, tmp_path / 'segnet.jaxexport', platforms=('cpu',))
  exported = jax.export.deserialize(out.read_bytes())
  np.testing.assert_allclose(
    np.asarray(exported.call(image[None]))[0, ..., 0], expected, rtol=1e-5, atol=1e-6
  )


# The command in a subprocess; prediction with the running averages is checked in-process
# by test_evaluation_prediction_and_export_use_the_running_averages.
@pytest.mark.slow
def test_crackjax_predict_uses_the_running_averages(segnet_run, tmp_path):
  import PIL.Image

  from crackjax.deploy import predict_command
  from tests import fixtures

  workdir, _, _ = segnet_run
  photo = np.random.default_rng(2).integers(0, 255, (40, 56, 3), dtype=np.uint8)
  path = fixtures.write_image(tmp_path / 'in' / 'photo.png', photo)
  assert (
    predict_command.main(
      ['--workdir', str(workdir), str(path), '--out', str(tmp_path / 'out'), '--notune_malloc']
    )
    == 0
  )
  written = np.asarray(PIL.Image.open(tmp_path / 'out' / 'probs' / 'photo.png'))
  expected = predictor.Predictor.from_workdir(workdir)(photo)
  np.testing.assert_allclose(written / 255.0, expected, atol=1 / 255 + 1e-6)
