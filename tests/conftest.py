"""Session-wide test settings: one persistent XLA compilation cache for the whole run.

Many tests compile the same tiny programs (the smoke U-Net's train and predict steps), in this
process, in the xdist workers and in the subprocesses that run the commands; with a shared
cache each program compiles once per run instead of once per test and process.
"""

import os
from pathlib import Path

import jax

_CACHE = Path(__file__).resolve().parents[1] / '.pytest_cache' / 'jax-compilation-cache'
_CACHE.mkdir(parents=True, exist_ok=True)
# Subprocesses (launch.py, the runner's workers, the CLIs) inherit these.
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', str(_CACHE))
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
jax.config.update('jax_compilation_cache_dir', os.environ['JAX_COMPILATION_CACHE_DIR'])
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)
