"""Data-parallel sharding does not change training: a 1-device and a 4-device mesh agree.

The pytest process has already initialised JAX with one CPU device, so the check runs in a
subprocess (tests/multihost_worker.py) started with 4 forced host devices. It drives the
code of crackjax (the experiment's `init_state`, `train_step` and `train_iterator`,
`mesh.global_batch`) on a mesh of the first device and on a mesh of all 4.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import fixtures

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name('multihost_worker.py')
STEPS = 3
TIMEOUT_S = 240
# Same computation, but the 4-device run sums per-device partial losses and gradients in
# another order; float32 rounding differs in the last bits.
RTOL, ATOL = 1e-5, 1e-6


def _run_worker(args: list[str]) -> subprocess.CompletedProcess:
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  # The worker imports tests.fixtures: the repository root must be importable.
  env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(WORKER.parents[1]), env.get('PYTHONPATH')]))
  try:
    proc = subprocess.run(
      [sys.executable, str(WORKER), *args],
      env=env,
      capture_output=True,
      text=True,
      timeout=TIMEOUT_S,
    )
  except subprocess.TimeoutExpired as e:
    pytest.fail(f'worker timed out after {TIMEOUT_S}s; stderr:\n{e.stderr}')
  assert proc.returncode == 0, f'worker failed ({proc.returncode}); stderr:\n{proc.stderr}'
  return proc


@pytest.fixture(scope='module')
def result(tmp_path_factory):
  root = tmp_path_factory.mktemp('sharding')
  fixtures.make_fake_crackforest(root / 'raw')
  out = root / 'out'
  out.mkdir()
  _run_worker(
    ['sharding', f'--data_root={root}', f'--out={out}', '--devices=4', f'--steps={STEPS}']
  )
  with np.load(out / 'sharding.npz') as z:
    arrays = dict(z)
  return arrays, json.loads((out / 'sharding.json').read_text())


def test_losses_agree(result):
  arrays, _ = result
  one, four = arrays['mesh1/losses'], arrays['mesh4/losses']
  assert one.shape == (STEPS,)
  assert np.all(np.isfinite(one))
  np.testing.assert_allclose(four, one, rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(
    arrays['mesh4/grad_norms'], arrays['mesh1/grad_norms'], rtol=RTOL, atol=ATOL
  )


def test_final_params_agree(result):
  arrays, info = result
  assert info['mesh1']['step'] == info['mesh4']['step'] == STEPS
  names = sorted(k.removeprefix('mesh1/') for k in arrays if k.startswith('mesh1/params'))
  assert names, sorted(arrays)
  for name in names:
    np.testing.assert_allclose(
      arrays[f'mesh4/{name}'], arrays[f'mesh1/{name}'], rtol=RTOL, atol=ATOL, err_msg=name
    )


def test_params_changed(result):
  # Guards against a vacuous comparison (e.g. every update skipped as non-finite).
  arrays, _ = result
  assert not np.allclose(arrays['mesh1/losses'][0], arrays['mesh1/losses'][-1], rtol=0, atol=1e-7)


def test_batch_is_sharded_over_four_devices(result):
  _, info = result
  for batch in info['mesh4']['batch']:
    for key, channels in (('image', 3), ('mask', 1)):
      sharding = batch[key]
      assert sharding['num_devices'] == 4
      assert sharding['num_addressable_shards'] == 4
      assert sharding['shard_devices'] == [0, 1, 2, 3]
      assert not sharding['fully_replicated']
      # batch_size 4 over 4 devices: one row of the (32, 48) fixture images per device.
      assert sharding['shard_shapes'] == [[1, 32, 48, channels]]
  params = info['mesh4']['params']
  assert params['num_devices'] == 4 and params['fully_replicated']
  for batch in info['mesh1']['batch']:
    assert batch['image']['num_devices'] == 1
    assert batch['image']['shard_shapes'] == [[4, 32, 48, 3]]
