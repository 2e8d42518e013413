"""Subprocess helper of tests/test_sharding.py and tests/test_multihost.py.

JAX fixes the number of CPU devices (and the distributed setup) when it is first imported,
so these checks run in fresh processes. The pytest process writes the fake CrackForest
archive under ``<data_root>/raw`` first; this script prepares/reads it from there.

  python tests/multihost_worker.py sharding --data_root=D --out=O
      4 CPU devices. Runs `--steps` train steps of the smoke config on a 1-device mesh and
      on a 4-device mesh in this process; writes O/sharding.npz and O/sharding.json.

  python tests/multihost_worker.py train --data_root=D --workdir=W --out=O --devices=N
      [--coordinator=127.0.0.1:PORT --num_processes=P --process_id=I]
      N CPU devices (per process). Runs `loop.train_and_evaluate(build(config), W,
      evaluate_after=False)`, restores W's latest checkpoint, and writes
      O/params_<process_id>.npz (final and restored parameters) and O/info_<process_id>.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Defaults of the runs the tests compare; `config()` turns the smoke config into them.
BATCH_SIZE = 4
STEPS_PER_EPOCH = 2
NUM_EPOCHS = 2


def _parse() -> argparse.Namespace:
  p = argparse.ArgumentParser()
  p.add_argument('mode', choices=('sharding', 'train'))
  p.add_argument('--data_root', required=True)
  p.add_argument('--out', required=True)
  p.add_argument('--workdir')
  p.add_argument('--devices', type=int, default=4)
  p.add_argument('--steps', type=int, default=3)
  p.add_argument('--coordinator')
  p.add_argument('--num_processes', type=int)
  p.add_argument('--process_id', type=int, default=0)
  return p.parse_args()


ARGS = _parse()
# Before jax is imported: the device count is read once, at backend initialisation.
# XLA's CPU backend optimisation level 0 halves the compile time of the U-Net train step,
# which dominates these runs; every run a test compares uses the same flags.
os.environ['XLA_FLAGS'] = ' '.join(
  [
    os.environ.get('XLA_FLAGS', ''),
    f'--xla_force_host_platform_device_count={ARGS.devices}',
    '--xla_backend_optimization_level=0',
  ]
).strip()
os.environ['JAX_PLATFORMS'] = 'cpu'

import jax  # noqa: E402
import numpy as np  # noqa: E402

from crackjax.configs import smoke  # noqa: E402
from crackjax.data import loader  # noqa: E402
from crackjax.engine import checkpoints, train_state  # noqa: E402
from crackjax.engine import mesh as mesh_lib  # noqa: E402
from crackjax.experiment.build import build  # noqa: E402
from crackjax.trainer import loop  # noqa: E402
from tests import fixtures  # noqa: E402


def config():
  """configs/smoke.py (widths 4..64) on the fake data of --data_root, batch 4."""
  c = smoke.get_config()
  data = fixtures.fake_data_config(Path(ARGS.data_root))
  c.data.data_dir = data.data.data_dir
  c.data.manual_dir = data.data.manual_dir
  c.batch_size = BATCH_SIZE
  c.steps_per_epoch = STEPS_PER_EPOCH
  c.num_epochs = NUM_EPOCHS
  return c


def _flat(tree, prefix: str) -> dict[str, np.ndarray]:
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  return {prefix + jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves}


def _sharding_info(x: jax.Array) -> dict:
  return {
    'num_devices': len(x.sharding.device_set),
    'num_addressable_shards': len(x.addressable_shards),
    'shard_shapes': sorted({tuple(s.data.shape) for s in x.addressable_shards}),
    'shard_devices': sorted(s.device.id for s in x.addressable_shards),
    'fully_replicated': bool(x.sharding.is_fully_replicated),
  }


def run_sharding() -> None:
  """`--steps` steps on a 1-device and a 4-device mesh through the code of loop.py."""
  experiment = build(config())
  input_shape = experiment.splits.train_image_shape
  devices = jax.devices()
  assert len(devices) == ARGS.devices, devices
  arrays, info = {}, {}
  for n in (1, len(devices)):
    # The mesh of mesh_lib.make_mesh() restricted to the first n devices.
    mesh = jax.sharding.Mesh(np.asarray(devices[:n]), ('data',))
    state = experiment.states.fresh(input_shape, mesh=mesh)
    step_fn = loop.train_step_of(experiment, state, mesh)
    batches = experiment.splits.train_iterator()
    losses, grad_norms, batch_info = [], [], []
    for _ in range(ARGS.steps):
      batch = mesh_lib.global_batch(next(batches), mesh)
      batch_info.append({k: _sharding_info(v) for k, v in batch.items()})
      state, metrics = step_fn(state, batch)
      losses.append(float(metrics['loss']))
      grad_norms.append(float(metrics['grad_norm']))
    arrays[f'mesh{n}/losses'] = np.asarray(losses)
    arrays[f'mesh{n}/grad_norms'] = np.asarray(grad_norms)
    arrays.update(_flat(train_state.local_params(state), f'mesh{n}/params'))
    info[f'mesh{n}'] = {
      'batch': batch_info,
      'params': _sharding_info(jax.tree.leaves(state.params)[0]),
      'step': int(jax.device_get(state.step)),
    }
  out = Path(ARGS.out)
  np.savez(out / 'sharding.npz', **arrays)
  (out / 'sharding.json').write_text(json.dumps(info, indent=1))


def run_train() -> None:
  """train_and_evaluate in one process, or in this process of a distributed run."""
  if ARGS.num_processes:
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(
      coordinator_address=ARGS.coordinator,
      num_processes=ARGS.num_processes,
      process_id=ARGS.process_id,
      initialization_timeout=120,
    )
  cfg = config()
  expected_local = cfg.batch_size // jax.process_count()

  # Check every local batch the training loop loads: this process's slice only.
  seen_rows = []
  create = loader.create_train_iterator

  def checked_iterator(*args, **kwargs):
    for batch in create(*args, **kwargs):
      for value in batch.values():
        if value.shape[0] != expected_local:
          raise AssertionError(
            f'process {jax.process_index()} loaded {value.shape[0]} rows, expected {expected_local}'
          )
      seen_rows.append(int(batch['image'].shape[0]))
      yield batch

  loader.create_train_iterator = checked_iterator
  try:
    state = loop.train_and_evaluate(build(cfg), ARGS.workdir, evaluate_after=False)
  finally:
    loader.create_train_iterator = create

  # The checkpoint every process wrote its part of, restored by every process.
  restored = build(cfg).states.restore(ARGS.workdir)
  mngr = checkpoints.checkpoint_manager(ARGS.workdir, cfg.max_checkpoints_to_keep)
  arrays = _flat(train_state.local_params(state), 'final')
  arrays.update(_flat(train_state.local_params(restored), 'restored'))
  info = {
    'process_index': jax.process_index(),
    'process_count': jax.process_count(),
    'local_device_count': jax.local_device_count(),
    'device_count': jax.device_count(),
    'local_batch_rows': seen_rows,
    'step': int(jax.device_get(state.step)),
    'restored_step': int(jax.device_get(restored.step)),
    'checkpoint_steps': list(mngr.all_steps()),
    'params_sharding': _sharding_info(jax.tree.leaves(state.params)[0]),
  }
  mngr.close()
  out = Path(ARGS.out)
  out.mkdir(parents=True, exist_ok=True)
  i = jax.process_index()
  np.savez(out / f'params_{i}.npz', **arrays)
  (out / f'info_{i}.json').write_text(json.dumps(info, indent=1))
  if ARGS.num_processes:
    jax.distributed.shutdown()


if __name__ == '__main__':
  {'sharding': run_sharding, 'train': run_train}[ARGS.mode]()
