"""Two processes x 2 CPU devices train exactly like one process x 4 devices.

Three fresh processes run tests/multihost_worker.py at once, all calling the real
`loop.train_and_evaluate(build(config), workdir, evaluate_after=False)` on the smoke config
(widths 4..64, batch 4, 2 epochs of 2 steps, fake 32x48 CrackForest):

* two processes joined by `jax.distributed.initialize` on 127.0.0.1 with gloo CPU
  collectives, 2 devices each, sharing one workdir (one orbax checkpoint written together);
* one reference process with 4 devices and its own workdir.

All three share one TFDS data_dir, so the dataset is prepared once under
crackjax.data.registry' file lock while the others wait. Each worker checks that every local
batch it loads has batch_size / process_count rows, restores the final checkpoint after
training and dumps its final and restored parameters; process 0 writes metrics.jsonl.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import fixtures

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name('multihost_worker.py')
TIMEOUT_S = 240
RTOL, ATOL = 1e-5, 1e-6  # Cross-process all-reduces may sum in another order.
BATCH_SIZE, STEPS_PER_EPOCH, NUM_EPOCHS = 4, 2, 2  # As in multihost_worker.config().
TOTAL_STEPS = STEPS_PER_EPOCH * NUM_EPOCHS


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _tail(path: Path, n: int = 4000) -> str:
  text = path.read_text(errors='replace') if path.exists() else '<no output>'
  return text[-n:]


def _run_all(runs: dict[str, list[str]], logs: Path) -> None:
  """Starts every worker, waits for all; on a failure or timeout kills the rest and fails."""
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  # The worker imports tests.fixtures: the repository root must be importable.
  env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(WORKER.parents[1]), env.get('PYTHONPATH')]))
  procs = {}
  for name, args in runs.items():
    with open(logs / f'{name}.log', 'w') as log:
      procs[name] = subprocess.Popen(
        [sys.executable, str(WORKER), *args], env=env, stdout=log, stderr=subprocess.STDOUT
      )
  deadline = time.monotonic() + TIMEOUT_S
  failed = None
  try:
    while procs and failed is None:
      for name, proc in list(procs.items()):
        rc = proc.poll()
        if rc is not None:
          del procs[name]
          if rc:
            failed = f'worker {name} exited with {rc}'
      if time.monotonic() > deadline:
        failed = f'workers {sorted(procs)} still running after {TIMEOUT_S}s'
      time.sleep(0.2)
  finally:
    for proc in procs.values():  # Only non-empty on failure (or an interrupt).
      proc.kill()
      proc.wait()
  if failed:
    outputs = '\n'.join(
      f'----- {name} (last lines)\n{_tail(logs / f"{name}.log")}' for name in runs
    )
    pytest.fail(f'{failed}\n{outputs}')


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp('multihost')
  fixtures.make_fake_crackforest(root / 'raw')
  out, logs = root / 'out', root / 'logs'
  logs.mkdir()
  common = ['train', f'--data_root={root}']
  coordinator = f'127.0.0.1:{_free_port()}'
  workers = {
    'reference': [*common, f'--workdir={root / "ref"}', f'--out={out / "ref"}', '--devices=4'],
    **{
      f'process{i}': [
        *common,
        f'--workdir={root / "multi"}',
        f'--out={out / "multi"}',
        '--devices=2',
        f'--coordinator={coordinator}',
        '--num_processes=2',
        f'--process_id={i}',
      ]
      for i in range(2)
    },
  }
  _run_all(workers, logs)

  def load(run: str, process: int):
    with np.load(out / run / f'params_{process}.npz') as z:
      params = dict(z)
    info = json.loads((out / run / f'info_{process}.json').read_text())
    return params, info

  return {
    'root': root,
    'reference': load('ref', 0),
    'process0': load('multi', 0),
    'process1': load('multi', 1),
  }


def _params(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
  return {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}


def _train_losses(workdir: Path) -> dict[int, dict]:
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  return {r['step']: r for r in rows if r['kind'] == 'train'}


def test_topology_and_local_batches(runs):
  _, ref = runs['reference']
  assert (ref['process_count'], ref['local_device_count'], ref['device_count']) == (1, 4, 4)
  assert ref['local_batch_rows'] == [BATCH_SIZE] * TOTAL_STEPS
  for i in range(2):
    _, info = runs[f'process{i}']
    assert info['process_index'] == i
    assert (info['process_count'], info['local_device_count'], info['device_count']) == (2, 2, 4)
    # Each process loaded only its half of every global batch.
    assert info['local_batch_rows'] == [BATCH_SIZE // 2] * TOTAL_STEPS
    # Parameters are replicated over all 4 devices; this process holds 2 of the copies.
    assert info['params_sharding']['num_devices'] == 4
    assert info['params_sharding']['num_addressable_shards'] == 2
    assert info['params_sharding']['fully_replicated']


def test_processes_hold_identical_params(runs):
  p0, _ = runs['process0']
  p1, _ = runs['process1']
  assert p0.keys() == p1.keys()
  for name in p0:
    np.testing.assert_array_equal(p1[name], p0[name], err_msg=name)


def test_shared_checkpoint_restores_final_state(runs):
  for run in ('reference', 'process0', 'process1'):
    arrays, info = runs[run]
    assert info['step'] == info['restored_step'] == TOTAL_STEPS, run
    # One checkpoint per epoch.
    assert info['checkpoint_steps'] == [STEPS_PER_EPOCH * (e + 1) for e in range(NUM_EPOCHS)]
    final, restored = _params(arrays, 'final'), _params(arrays, 'restored')
    assert final and final.keys() == restored.keys()
    for name in final:
      np.testing.assert_array_equal(restored[name], final[name], err_msg=f'{run} {name}')
  ckpts = runs['root'] / 'multi' / 'checkpoints'
  assert sorted(p.name for p in ckpts.iterdir() if p.is_dir()) == ['2', '4']


def test_final_params_match_single_process(runs):
  ref, _ = runs['reference']
  multi, _ = runs['process0']
  ref, multi = _params(ref, 'final'), _params(multi, 'final')
  assert ref.keys() == multi.keys()
  for name in ref:
    np.testing.assert_allclose(multi[name], ref[name], rtol=RTOL, atol=ATOL, err_msg=name)


def test_losses_match_single_process(runs):
  ref = _train_losses(runs['root'] / 'ref')
  multi = _train_losses(runs['root'] / 'multi')
  assert sorted(ref) == sorted(multi) == list(range(1, TOTAL_STEPS + 1))
  for key in ('loss', 'grad_norm', 'q'):
    np.testing.assert_allclose(
      [multi[s][key] for s in sorted(multi)],
      [ref[s][key] for s in sorted(ref)],
      rtol=RTOL,
      atol=ATOL,
      err_msg=key,
    )
  # Training moved: the comparison is not between two untouched states.
  assert ref[TOTAL_STEPS]['loss'] < ref[1]['loss']
