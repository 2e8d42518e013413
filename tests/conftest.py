"""Session-wide test settings: one persistent XLA compilation cache for the whole run.

Many tests compile the same tiny programs (the smoke U-Net's train and predict steps), in this
process, in the xdist workers and in the subprocesses that run the commands; with a shared
cache each program compiles once per run instead of once per test and process.
"""

import os
from pathlib import Path

import jax
import pytest

# The tests compile hundreds of tiny programs and run each for milliseconds: LLVM at -O0
# compiles them ~30% faster (tests/test_model_hed_rcf.py + test_batchnorm_models.py from a cold
# cache: 109 s -> 79 s, 26 Nov 2026, this 2-core CPU). Subprocesses inherit it. Benchmarks
# (bench/) and users' runs keep XLA's default optimisation.
if '--xla_backend_optimization_level' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = (
    os.environ.get('XLA_FLAGS', '') + ' --xla_backend_optimization_level=0'
  ).strip()

_CACHE = Path(__file__).resolve().parents[1] / '.pytest_cache' / 'jax-compilation-cache'
_CACHE.mkdir(parents=True, exist_ok=True)
# Subprocesses (launch.py, the runner's workers, the CLIs) inherit these.
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', str(_CACHE))
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
jax.config.update('jax_compilation_cache_dir', os.environ['JAX_COMPILATION_CACHE_DIR'])
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)


@pytest.fixture(scope='session')
def smoke_run(tmp_path_factory) -> Path:
  """One finished smoke run for the whole session (`tests.fixtures.shared_smoke_run`): read
  it, copy it before changing anything."""
  from tests import fixtures

  return fixtures.shared_smoke_run(tmp_path_factory.getbasetemp())


@pytest.fixture(scope='module')
def exported(smoke_run, tmp_path_factory) -> Path:
  """The session's smoke run (scored on its test split) exported as a model file named 'smoke',
  one per test module: a module's tests may read or copy it (the model-file, self-check,
  fine-tuning and fault tests)."""
  from crackjax.deploy import export

  out = tmp_path_factory.mktemp('model') / 'smoke.safetensors'
  export.export_model_file(smoke_run, out, name='smoke')
  return out
