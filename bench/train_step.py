"""Wall time of crackjax's jitted train step, and of PyTorch's on the same device.

Builds the model and Adam state the way training does
(`crackjax.engine.train_state.init_train_state`, `make_mesh`, `global_batch`,
`crackjax.engine.step.make_train_step`), feeds one random batch of the configured shape (images
uniform in [0, 1], masks ~2% crack), compiles, runs `--warmup` steps and then times `--steps`
steps, blocking on the result of each. The step is the full training step: on-device augmentation,
forward, loss, backward and the Adam update. Any model of `crackjax.models.MODELS` can be
benchmarked; the PyTorch comparison knows the U-Net only.

Prints compile time, median / min / max step time, images per second at the median (each
step waited for) and pipelined (the same number of steps dispatched back to back, one wait at
the end, as the training loop runs), and:

* **FLOP/s from the analytic count** (`crackjax.paper.flops`): a step is 3 x the forward
  FLOPs, 2 per MAC of the model's convolutions and matrix products (112.89 G MACs per
  480x320 image for the paper's U-Net, so 677 GFLOP per image per step), and its fraction
  of the device's dense peak for the compute dtype (`flops.PEAK_FLOPS`). Two
  cross-checks, labelled as such: the same count over the jaxpr of the whole step (the
  backward pass as autodiff writes it) and XLA's cost analysis of the compiled step, which
  on GPUs misses the cuDNN convolutions and is then flagged, never used.
* **Peak memory**: the device's, `memory_stats()['peak_bytes_in_use']`, where the backend
  reports it (GPU, TPU; the process's peak on the device, compilation's scratch
  included); on the CPU, which reports nothing, XLA's compiled memory analysis of the step
  (arguments + outputs - donated + temporaries), labelled as that. The process's host peak
  RSS (VmHWM) is printed too, labelled host. Where the device reports allocator figures, the
  peak and the bytes in use are also read **by phase** (state on the device before
  compiling, after compiling, after the warm-up steps, after the timed steps): a peak
  already reached after compiling was set by the compilation (XLA's autotuning allocates its
  trial buffers from the same allocator), not by the step. Whether the step's executable came
  from the persistent compilation cache (hit / miss / not used) is recorded too.
* **Steady-state peak memory** (`--fresh_memory`): after the JAX run (before PyTorch), the
  same JAX step again in a **fresh process** whose step executable comes from the persistent
  compilation cache the first run wrote (`JAX_COMPILATION_CACHE_DIR`, or a temporary folder
  when none is set; entries written whatever their compile time), so nothing is compiled or
  autotuned there: its device peak after the warm-up and timed steps is the step's own
  steady-state peak (state, batch, program temporaries and the allocator's fragmentation).
  The fresh process allocates on demand (`XLA_PYTHON_CLIENT_PREALLOCATE=false`) beside the
  first, which still holds its share; a cache miss there is reported as such (its peak then
  includes compilation again).

* **Profile** (`--profile_steps=N`): N more steps after the timed ones, traced with
  `jax.profiler` into `--profile_dir`; the device time per step by kind of kernel (cuDNN's
  convolution passes, other GEMMs, transposes, reductions, XLA's fusions, copies) and the top
  kernels (bench/trace_summary.py, from the trace's Perfetto file). The CPU backend records
  no device tracks: there the profile says so.

PyTorch (never a dependency; `import torch` is checked in a subprocess): the same U-Net,
loss and Adam, in a separate process per mode after the JAX run, on `--torch_device`
(auto: CUDA when torch sees a GPU, else the CPU), in the config's precision: float32
(PyTorch's defaults: cuDNN may use TF32, as XLA does) or, with
`--config.model.dtype=bfloat16`, bf16 autocast with channels_last. Eager always;
`--torch_compile` adds `torch.compile` (of the model and loss; `--torch_compile_mode`).
On CUDA: Adam(fused=True), `torch.cuda.synchronize()` around every timed step and
`torch.cuda.max_memory_allocated()` as the peak memory; on the CPU the peak RSS (host).
The speed ratios crackjax/torch come from the same invocation. `--notorch` skips PyTorch.

On a GPU, JAX preallocates 75% of the device memory and keeps it while the PyTorch
processes run; give PyTorch room with e.g. `XLA_PYTHON_CLIENT_MEM_FRACTION=0.5`.

Usage (the config and its ``--config.*`` overrides as for launch.py)::

    python bench/train_step.py --config=configs/crackforest_exp.py \
        [--config.model.widths='(16, 32, 64, 128, 256)'] [--config.model.conv_impl=xla] \
        [--config.model.dtype=bfloat16] [--hw=320,480] [--batch=2] [--steps=5] [--warmup=1] \
        [--torch_device=auto|cpu|cuda] [--torch_compile] [--fresh_memory] [--json=PATH] \
        [--profile_steps=5 --profile_dir=DIR]
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from absl import flags

from crackjax import cli
from crackjax.runs import outputs
from crackjax.trainer.loop import train_step_of

REPO = Path(__file__).resolve().parents[1]


def _load_peer():
  """bench/torch_peer.py as a module (bench/ is not a package; loaded by path, as tests and
  bench/loop_vs_step.py load this file)."""
  import importlib.util

  path = Path(__file__).with_name('torch_peer.py')
  spec = importlib.util.spec_from_file_location('bench_torch_peer', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


_peer = _load_peer()
# The PyTorch peer's names, reachable here too (tests and users load this file).
CRACK_FRACTION = _peer.CRACK_FRACTION
TORCH_COMPILE_MODES = _peer.TORCH_COMPILE_MODES
_peak_rss_mb = _peer._peak_rss_mb
_time_stats = _peer._time_stats
_torch_unet = _peer._torch_unet
bench_torch = _peer.bench_torch
random_batch = _peer.random_batch
resolve_torch_device = _peer.resolve_torch_device
torch_available = _peer.torch_available
torch_unsupported = _peer.torch_unsupported

CACHE_EVENT_PREFIX = '/jax/compilation_cache/'


@contextlib.contextmanager
def compile_cache_events():
  """Collects the names of JAX's persistent-compilation-cache events (`jax.monitoring`)
  recorded inside the block, e.g. '/jax/compilation_cache/cache_hits'."""
  import jax.monitoring

  events: list[str] = []

  def listener(event: str, **kwargs) -> None:
    if event.startswith(CACHE_EVENT_PREFIX):
      events.append(event)

  jax.monitoring.register_event_listener(listener)
  try:
    yield events
  finally:
    jax.monitoring.unregister_event_listener(listener)


def cache_status(events: list[str]) -> str:
  """'hit', 'miss' or 'not used' (no cache configured) from `compile_cache_events`."""
  if CACHE_EVENT_PREFIX + 'cache_hits' in events:
    return 'hit'
  if CACHE_EVENT_PREFIX + 'cache_misses' in events:
    return 'miss'
  return 'not used'


MEMORY_PHASES = ('before_compile', 'after_compile', 'after_warmup', 'after_steps')


class JaxStep:
  """crackjax's train step of `experiment` (`crackjax.experiment.build`), compiled once for
  batches of `batch` random images of `hw`, and timed in blocks (see the module doc).

  With `use_cache=False` the step is compiled without the persistent compilation cache: a
  cached executable keeps the op names of the code that wrote it (the cache key leaves the
  names out), which the CPU profile reads.
  """

  def __init__(self, experiment, hw, batch, use_cache: bool = True):
    import jax

    from crackjax.engine import mesh as mesh_lib
    from crackjax.engine import prefetch
    from crackjax.paper import complexity

    self.experiment, self.hw, self.batch = experiment, tuple(hw), batch
    self.state = experiment.states.fresh((*hw, 3))
    self.n_params = sum(int(x.size) for x in jax.tree.leaves(self.state.params))
    step = train_step_of(experiment, self.state)
    self.data = mesh_lib.global_batch(random_batch(batch, *hw), experiment.states.mesh)
    self.device = jax.devices()[0]
    # The allocator's figures by phase (None where the backend has none, e.g. the CPU).
    self.phases = {'before_compile': complexity.device_memory(self.device)}
    t0 = time.perf_counter()
    self.traced = step.trace(self.state, self.data)
    self.lowered = self.traced.lower()
    was_enabled = jax.config.jax_enable_compilation_cache
    jax.config.update('jax_enable_compilation_cache', was_enabled and use_cache)
    try:
      with compile_cache_events() as events:
        self.compiled = self.lowered.compile()
    finally:
      jax.config.update('jax_enable_compilation_cache', was_enabled)
    self.compile_s = time.perf_counter() - t0
    self.cache = cache_status(events)
    self.phases['after_compile'] = complexity.device_memory(self.device)
    prefetch.release_freed_host_memory()  # as train_and_evaluate does after compiling
    self.metrics = None
    self.cpu_times: list[float] = []  # process CPU seconds (all threads) of each timed step

  def _run(self, n: int) -> None:
    for _ in range(n):
      self.state, self.metrics = self.compiled(self.state, self.data)

  def warm(self, n: int) -> None:
    """`n` untimed steps."""
    import jax

    from crackjax.paper import complexity

    for _ in range(n):
      self._run(1)
      jax.block_until_ready((self.state, self.metrics))
    self.phases['after_warmup'] = complexity.device_memory(self.device)

  def time_steps(self, n: int) -> list[float]:
    """Wall times of `n` steps, each waited for."""
    import jax

    times = []
    for _ in range(n):
      t0, c0 = time.perf_counter(), time.process_time()
      self._run(1)
      jax.block_until_ready((self.state, self.metrics))
      times.append(time.perf_counter() - t0)
      self.cpu_times.append(time.process_time() - c0)
    return times

  def pipelined(self, n: int) -> float:
    """Seconds per step of `n` steps dispatched back to back with one wait at the end, as the
    training loop runs them: host dispatch overlaps the device's work."""
    import jax

    from crackjax.paper import complexity

    t0 = time.perf_counter()
    self._run(n)
    jax.block_until_ready((self.state, self.metrics))
    seconds = (time.perf_counter() - t0) / n
    self.phases['after_steps'] = complexity.device_memory(self.device)
    return seconds

  def profile(self, n: int, profile_dir: str | None) -> dict:
    """`n` more steps traced with `jax.profiler` into `profile_dir` (a new temporary folder
    when None), dispatched back to back; the device kernels by kind (bench/trace_summary.py,
    None on the CPU, which has no device tracks) and, on the CPU, the op time by kind of work
    (bench/cpu_profile.py, from the host's per-instruction events)."""
    import jax

    profile_dir = profile_dir or tempfile.mkdtemp(prefix='bench_profile_')
    jax.profiler.start_trace(profile_dir, create_perfetto_trace=True)
    self._run(n)
    jax.block_until_ready((self.state, self.metrics))
    jax.profiler.stop_trace()
    traces = load_bench('trace_summary')
    summary = traces.kernels(profile_dir, n, top=25)
    cpu = None
    if jax.default_backend() == 'cpu':
      events = traces.trace_events(traces.newest_trace(profile_dir))
      cpu = load_bench('cpu_profile').jax_kinds(events, self.compiled.as_text(), n)
    return {'dir': profile_dir, 'steps': n, 'kernels': summary, 'cpu_kinds': cpu}

  def result(self, times: list[float], warmup: int, pipelined_s: float, profile=None) -> dict:
    """The figures of the timed steps `times` (see the module doc)."""
    import flax
    import jax

    from crackjax.models.conv import resolve_impl
    from crackjax.paper import complexity, flops

    config, hw, batch = self.experiment.config, self.hw, self.batch
    forward = flops.forward_macs(self.experiment.model, *hw)  # per image
    step_flops = flops.train_step_flops(forward['total'], batch)
    jaxpr_flops = 2.0 * flops.jaxpr_macs(self.traced.jaxpr)['total']
    xla = flops.hlo_flops(self.lowered)  # before XLA swaps convolutions for cuDNN calls
    median = statistics.median(times)
    model_fields = {k: v for k, v in config.model.items() if k != 'name'}
    dtype = config.model.get('dtype', 'float32')
    result = {
      'framework': 'jax',
      'jax': jax.__version__,
      'flax': flax.__version__,
      'backend': jax.default_backend(),
      'device_kind': self.device.device_kind,
      'device_count': jax.device_count(),
      'model': config.model.name,
      'model_fields': {k: list(v) if isinstance(v, tuple) else v for k, v in model_fields.items()},
      'hw': list(hw),
      'batch': batch,
      'steps': len(times),
      'warmup': warmup,
      'params': self.n_params,
      'loss': float(self.metrics['loss']),
      'compute_dtype': dtype,
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
      'compile_s': self.compile_s,
      'compile_cache': self.cache,
      **_time_stats(times, batch),
      'cpu_s_per_step': statistics.median(self.cpu_times) if self.cpu_times else None,
      'pipelined_step_s': pipelined_s,
      'pipelined_images_per_s': batch / pipelined_s,
      'peak_rss_mb': _peak_rss_mb(),
      'memory': {**complexity.memory_figures(self.compiled, self.device), 'phases': self.phases},
      'forward_macs_per_image': forward['total'],
      'flops_per_step': step_flops,
      'tflops': step_flops / median / 1e12,
      'peak_fraction': flops.peak_fractions(step_flops / median, self.device.device_kind, dtype),
      'jaxpr_flops_per_step': jaxpr_flops,
      'xla_flops_per_step': xla,
      'xla_cross_check': flops.cross_check(step_flops, xla),
      'profile': profile,
    }
    if 'conv_impl' in config.model:
      result['conv_impl'] = f'{config.model.conv_impl} ({resolve_impl(config.model.conv_impl)})'
    if 'widths' in config.model:
      result['widths'] = list(config.model.widths)
    return result


def bench_jax(
  experiment, hw, batch, steps, warmup, profile_steps: int = 0, profile_dir: str | None = None
) -> dict:
  """Compiles and times the train step of `experiment` (`crackjax.experiment.build`) on
  batches of `batch` images of `hw`; returns the figures (see the module doc). With
  `profile_steps`, that many more steps are traced into `profile_dir` after the timed ones
  and summarised by kernel (bench/trace_summary.py) under 'profile'."""
  side = JaxStep(experiment, hw, batch, use_cache=not profile_steps)
  side.warm(warmup)
  times = side.time_steps(steps)
  pipelined_s = side.pipelined(steps)
  # After the timed steps, so the trace costs them nothing.
  profile = side.profile(profile_steps, profile_dir) if profile_steps else None
  return side.result(times, warmup, pipelined_s, profile)


def load_bench(name: str):
  """bench/<name>.py as a module (bench/ is not a package)."""
  import importlib.util

  spec = importlib.util.spec_from_file_location(f'bench_{name}', REPO / 'bench' / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def prepare_fresh_cache() -> str:
  """The persistent compilation cache folder that `--fresh_memory` reads back: JAX's own
  (`JAX_COMPILATION_CACHE_DIR`) or a new temporary one; every entry is written (no minimum
  compile time). Call before anything is compiled."""
  import jax

  cache_dir = jax.config.jax_compilation_cache_dir or tempfile.mkdtemp(prefix='bench_jax_cache_')
  jax.config.update('jax_compilation_cache_dir', cache_dir)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  return cache_dir


def _jax_fresh_subprocess(argv, cache_dir: str) -> dict:
  """Runs the JAX side of the same command line (argv[1:]) in a fresh process whose
  compilation cache is `cache_dir` and whose device memory is allocated on demand (the
  parent keeps its share); returns its `bench_jax` result, or {'error': ...} with the end of
  its stderr."""
  cmd = [
    sys.executable,
    str(Path(__file__).resolve()),
    *argv[1:],
    '--jax_fresh_worker',
    '--nofresh_memory',
    '--notorch',
  ]
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(p for p in (str(REPO), env.get('PYTHONPATH')) if p)
  env['JAX_COMPILATION_CACHE_DIR'] = cache_dir
  env['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'
  env['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'false'
  out = subprocess.run(cmd, capture_output=True, text=True, env=env)
  if out.returncode != 0:
    tail = [line for line in out.stderr.strip().splitlines() if line.strip()][-3:]
    return {'error': ' / '.join(tail) or f'exit status {out.returncode}'}
  return json.loads(out.stdout.strip().splitlines()[-1])


class TorchServer:
  """The PyTorch peer in a process of its own (bench/torch_peer.py `serve`), started with the
  same command line (argv[1:]) and kept alive, so its timed blocks can alternate with the JAX
  process's. A worker that fails is reported as {'mode': ..., 'error': its last stderr lines}
  and the rest goes on."""

  def __init__(self, argv, expect_params, mode: str):
    self.mode = 'eager' if mode == 'eager' else 'torch.compile'
    cmd = [
      sys.executable,
      str(Path(__file__).resolve()),
      *argv[1:],
      f'--torch_worker={expect_params}',
      f'--torch_worker_mode={mode}',
    ]
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(p for p in (str(REPO), env.get('PYTHONPATH')) if p)
    # stderr to a file: a pipe nobody reads would block a chatty worker.
    self._stderr = tempfile.TemporaryFile(mode='w+')
    self.proc = subprocess.Popen(
      cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env
    )
    self.error: str | None = None
    self.times: list[float] = []
    self._answer()  # 'ready' after the first call and the warm-up steps

  def _fail(self) -> None:
    self.proc.kill()
    self.proc.wait()
    self._stderr.seek(0)
    tail = [line for line in self._stderr.read().strip().splitlines() if line.strip()][-3:]
    self.error = ' / '.join(tail) or f'exit status {self.proc.returncode}'

  def _answer(self) -> dict | None:
    """The worker's next JSON line (other output skipped); None once it has failed."""
    while self.error is None:
      line = self.proc.stdout.readline()
      if not line:
        self._fail()
        break
      try:
        answer = json.loads(line)
      except ValueError:
        continue
      if isinstance(answer, dict):
        return answer
    return None

  def ask(self, request: str) -> dict | None:
    """Sends one request ('run N', 'profile N', 'done') and returns the answer."""
    if self.error is not None:
      return None
    try:
      self.proc.stdin.write(request + '\n')
      self.proc.stdin.flush()
    except OSError:
      self._fail()
      return None
    return self._answer()

  def run(self, n: int) -> dict | None:
    """Times `n` steps in the worker: {'times': wall s, 'cpu_times': process CPU s}; None if
    it failed."""
    return self.ask(f'run {n}')

  def done(self) -> dict:
    """The worker's figures of every step it timed; ends the worker."""
    answer = self.ask('done')
    if answer is None:
      return {'mode': self.mode, 'error': self.error}
    self.proc.stdin.close()
    self.proc.wait()
    return answer


def block_sizes(steps: int, blocks: int) -> list[int]:
  """`steps` timed steps split into `blocks` blocks (at most one per step) as evenly as
  possible, the larger blocks first."""
  blocks = max(1, min(blocks, steps))
  return [steps // blocks + (1 if i < steps % blocks else 0) for i in range(blocks)]


def interleave(jax_side: JaxStep, servers: list[TorchServer], sizes: list[int]) -> dict:
  """Times the JAX step and each PyTorch worker alternately, block by block: in even blocks
  JAX first, in odd blocks last (ABBA), so a load that drifts during the run hits both. Returns
  the JAX step times, and per worker mode the step-time ratio crackjax/torch of each block
  (the ratio of the two block medians: < 1 means crackjax is faster) and their median, min
  and max; the same for the process CPU time per step (both threads: less sensitive to other
  processes' load than the wall time)."""
  jax_times: list[float] = []
  ratios: dict[str, list[float]] = {s.mode: [] for s in servers}
  cpu_ratios: dict[str, list[float]] = {s.mode: [] for s in servers}
  median = statistics.median
  for b, size in enumerate(sizes):
    sides = [jax_side, *servers]
    block = {}
    for side in sides if b % 2 == 0 else reversed(sides):
      if side is jax_side:
        wall = side.time_steps(size)
        block[id(side)] = {'times': wall, 'cpu_times': side.cpu_times[-size:]}
      else:
        block[id(side)] = side.run(size)
    jax_block = block[id(jax_side)]
    jax_times += jax_block['times']
    for server in servers:
      theirs = block[id(server)]
      if theirs is not None:
        ratios[server.mode].append(median(jax_block['times']) / median(theirs['times']))
        cpu_ratios[server.mode].append(median(jax_block['cpu_times']) / median(theirs['cpu_times']))

  def summary(per_mode):
    return {
      mode: {'median': median(r), 'min': min(r), 'max': max(r), 'blocks': r}
      for mode, r in per_mode.items()
      if r
    }

  return {
    'jax_times': jax_times,
    'block_sizes': sizes,
    'ratios': summary(ratios),
    'cpu_ratios': summary(cpu_ratios),
  }


# ----------------------------------------------------------------------------- main


def _fmt_times(r) -> str:
  return (
    f'median {r["median_s"]:.4f} s (min {r["min_s"]:.4f}, max {r["max_s"]:.4f}; '
    f'{len(r["step_times_s"])} steps)'
  )


def _mib(n: float | None) -> str:
  return 'n/a' if n is None else f'{n / 2**20:.0f} MiB'


def _phase_lines(mem: dict) -> list[str]:
  """The allocator's peak / in-use figures by phase, and the first phase by which the final
  peak was reached ([] where the backend has no allocator figures)."""
  phases = mem.get('phases') or {}
  have = [k for k in MEMORY_PHASES if phases.get(k)]
  if not have:
    return []
  names = {k: k.replace('_', ' ').replace('warmup', 'warm-up') for k in MEMORY_PHASES}
  cells = ', '.join(
    f'{names[k]} {_mib(phases[k]["peak_bytes_in_use"])} / {_mib(phases[k]["bytes_in_use"])}'
    for k in have
  )
  final = phases[have[-1]]['peak_bytes_in_use']
  first = next(k for k in have if phases[k]['peak_bytes_in_use'] == final)
  when = {
    'before_compile': 'before compiling (state and batch on the device)',
    'after_compile': 'by the end of compiling, before the step first ran',
    'after_warmup': 'in the warm-up steps',
    'after_steps': 'in the timed steps',
  }[first]
  return [
    f'  by phase (device peak / in use): {cells}',
    f'  the peak was reached {when}',
  ]


def _fresh_lines(fresh: dict | None) -> list[str]:
  """The `--fresh_memory` process's figures."""
  if fresh is None:
    return []
  if 'error' in fresh:
    return [f'jax fresh process: FAILED: {fresh["error"]}']
  mem, cache = fresh['memory'], fresh['compile_cache']
  how = (
    'step executable from the persistent compilation cache: nothing compiled or autotuned'
    if cache == 'hit'
    else f'compilation cache {cache}: the step was compiled again, its peak included'
  )
  steps = f'{fresh["warmup"]} warm-up + {2 * fresh["steps"]} timed steps'
  if mem['source'] != 'device':
    return [
      f'jax fresh process: no device allocator figures on {fresh["backend"]} ({how}; '
      f'compile {fresh["compile_s"]:.2f} s; {fresh["images_per_s"]:.2f} images/s)'
    ]
  dev = mem['device']
  return [
    f'jax fresh process: steady-state device peak {_mib(dev["peak_bytes_in_use"])} after '
    f'{steps}; in use after them {_mib(dev["bytes_in_use"])} ({how}; compile '
    f'{fresh["compile_s"]:.2f} s; {fresh["images_per_s"]:.2f} images/s)',
    *_phase_lines(mem),
  ]


def _interleaved_lines(interleaved: dict | None) -> list[str]:
  """The per-block step-time ratios of `interleave`."""
  if not interleaved or not interleaved['ratios']:
    return []
  sizes = interleaved['block_sizes']
  lines = [
    f'interleaved: {len(sizes)} blocks of {"/".join(map(str, sizes))} steps per side, '
    'crackjax first in even blocks and last in odd ones'
  ]
  for what, key in (('step time', 'ratios'), ('CPU time per step', 'cpu_ratios')):
    for mode, r in interleaved.get(key, {}).items():
      cells = ' '.join(f'{x:.2f}' for x in r['blocks'])
      lines.append(
        f'  {what} crackjax/torch {mode}: median {r["median"]:.2f}x (min {r["min"]:.2f}, '
        f'max {r["max"]:.2f}; blocks {cells}; <1: crackjax faster)'
      )
  return lines


def report(
  jr: dict,
  torch_results: list[dict] | dict | None = None,
  fresh: dict | None = None,
  interleaved: dict | None = None,
  torch_profile: dict | None = None,
) -> str:
  """The text report of `bench_jax`'s result, the PyTorch results (eager, compile), the
  `--fresh_memory` process's result, the interleaved ratios and the CPU profile."""
  from crackjax.paper import complexity

  if isinstance(torch_results, dict):
    torch_results = [torch_results]
  fields = ', '.join(
    f'{k} {tuple(v) if isinstance(v, list) else v}' for k, v in jr['model_fields'].items()
  )
  lines = [
    f'{jr["model"]} ({fields}), input {jr["hw"][0]}x{jr["hw"][1]}, batch {jr["batch"]}, '
    f'{jr["params"]:,} parameters',
    f'jax {jr["jax"]}, flax {jr["flax"]}, backend {jr["backend"]}, device '
    f'{jr["device_kind"]} x{jr["device_count"]}, python {platform.python_version()}, '
    f'{os.cpu_count()} CPUs',
    f'jax conv_impl {jr.get("conv_impl", "n/a")}, compute_dtype {jr["compute_dtype"]}',
    f'jax compile:      {jr["compile_s"]:.2f} s (persistent compilation cache: '
    f'{jr.get("compile_cache", "n/a")})',
    f'jax step:         {_fmt_times(jr)}',
    f'jax CPU time:     {jr["cpu_s_per_step"]:.3f} s per step (process, all threads; median)',
    f'jax images/s:     {jr["images_per_s"]:.2f} (median step, synchronised each step); '
    f'{jr["pipelined_images_per_s"]:.2f} pipelined ({jr["steps"]} steps, one sync)',
    f'analytic FLOPs:   {jr["flops_per_step"] / 1e9:.4g} GFLOP/step (3 x forward: '
    f'{jr["batch"]} x {jr["forward_macs_per_image"] / 1e9:.4g} G MACs x 2 FLOPs x 3)',
    f'achieved:         {jr["tflops"]:.3f} TFLOP/s (analytic FLOPs / median step)',
  ]
  for prec, frac in jr['peak_fraction'].items():
    lines.append(f'  fraction of {jr["device_kind"]} dense {prec} peak: {frac:.1%}')
  lines += [
    f'  check, jaxpr of the whole step:  {jr["jaxpr_flops_per_step"] / 1e9:.4g} GFLOP '
    f'({jr["jaxpr_flops_per_step"] / jr["flops_per_step"]:.2f} x analytic)',
    '  check, XLA cost analysis:        '
    + (
      'n/a'
      if not jr['xla_flops_per_step']
      else f'{jr["xla_flops_per_step"] / 1e9:.4g} GFLOP ({jr["xla_cross_check"]})'
    ),
    f'jax peak memory:  {complexity.format_memory(jr["memory"])}',
    *_phase_lines(jr['memory']),
    *_fresh_lines(fresh),
    f'jax host RSS:     {jr["peak_rss_mb"]:.0f} MB (process peak RSS, VmHWM; host memory)',
  ]
  if jr.get('profile'):
    lines += load_bench('trace_summary').report_lines(jr['profile']['kernels'])
    if jr['backend'] == 'cpu':
      cpu = load_bench('cpu_profile')
      lines += cpu.report_lines(jr['profile'].get('cpu_kinds'), torch_profile)
    lines.append(f'  trace: {jr["profile"]["dir"]}')
  for tr in torch_results or []:
    name = tr['mode'] if tr['mode'].startswith('torch.compile') else f'torch {tr["mode"]}'
    if 'error' in tr:
      lines.append(f'{name}: FAILED: {tr["error"]}')
      continue
    lines += [
      f'{name} ({tr["torch"]} on {tr["device"]}, {tr["precision"]}'
      + (f', {tr["threads"]} threads' if tr['device'] == 'cpu' else '')
      + ')',
      f'  first call:     {tr["first_call_s"]:.2f} s',
      f'  step:           {_fmt_times(tr)}',
      f'  CPU time:       {tr["cpu_s_per_step"]:.3f} s per step (process, all threads)',
      f'  images/s:       {tr["images_per_s"]:.2f}',
      f'  peak memory:    {_mib(tr["memory"]["peak_bytes"])} ({tr["memory"]["label"]})',
      f'  host RSS:       {tr["peak_rss_mb"]:.0f} MB (separate process, VmHWM)',
      f'  speed crackjax/{name}: {tr["median_s"] / jr["median_s"]:.2f}x '
      '(images/s ratio, same invocation; >1: crackjax faster)',
    ]
    if jr['memory']['source'] == 'device' and tr['memory']['peak_bytes']:
      ratio = jr['memory']['peak_bytes'] / tr['memory']['peak_bytes']
      lines.append(f'  device memory crackjax/{name}: {ratio:.2f}x')
    if tr.get('peak_rss_mb'):
      lines.append(f'  host RSS crackjax/{name}: {jr["peak_rss_mb"] / tr["peak_rss_mb"]:.2f}x')
  lines += _interleaved_lines(interleaved)
  return '\n'.join(lines)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_list('hw', ['320', '480'], 'H,W of the input', flag_values=fv)
  flags.DEFINE_integer('batch', 2, 'global batch size', flag_values=fv)
  flags.DEFINE_integer(
    'steps',
    15,
    'timed steps of each side (crackjax, each PyTorch mode)',
    lower_bound=1,
    flag_values=fv,
  )
  flags.DEFINE_integer(
    'blocks',
    5,
    'the timed steps are split into this many blocks, run alternately by crackjax and '
    'PyTorch; the speed ratio is reported per block (median, min, max)',
    lower_bound=1,
    flag_values=fv,
  )
  flags.DEFINE_integer('warmup', 1, 'untimed steps after compiling', flag_values=fv)
  flags.DEFINE_bool(
    'torch', True, 'compare with PyTorch if it is importable (--notorch: skip)', flag_values=fv
  )
  flags.DEFINE_enum(
    'torch_device',
    'auto',
    ['auto', 'cpu', 'cuda'],
    'device of the PyTorch run (auto: CUDA if torch sees a GPU)',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'torch_compile', False, 'also time torch.compile of the model and loss', flag_values=fv
  )
  flags.DEFINE_enum(
    'torch_compile_mode', 'default', list(TORCH_COMPILE_MODES), 'torch.compile mode', flag_values=fv
  )
  flags.DEFINE_string(
    'torch_compile_backend',
    'inductor',
    "torch.compile backend ('aot_eager': no kernel generation, for tests)",
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'fresh_memory',
    False,
    'after the JAX run, run the JAX step again in a fresh process from the persistent '
    'compilation cache (nothing compiled or autotuned there) and report its device peak: '
    'the steady-state peak',
    flag_values=fv,
  )
  flags.DEFINE_integer(
    'profile_steps',
    0,
    'after the timed steps, trace this many more (jax.profiler) and print the device time '
    'per step by kind of kernel and the top kernels (bench/trace_summary.py); 0: no trace',
    lower_bound=0,
    flag_values=fv,
  )
  flags.DEFINE_string(
    'profile_dir', None, 'where the trace goes (default: a new temporary folder)', flag_values=fv
  )
  flags.DEFINE_string('json', None, 'also write the results here', flag_values=fv)
  flags.DEFINE_bool(
    'jax_fresh_worker', False, 'internal: the fresh process of --fresh_memory', flag_values=fv
  )
  flags.DEFINE_integer('torch_worker', None, 'internal: run the PyTorch side only', flag_values=fv)
  flags.DEFINE_enum(
    'torch_worker_mode', 'eager', ['eager', 'compile'], 'internal: PyTorch mode', flag_values=fv
  )


def main(argv=None) -> dict:
  """Runs the benchmark and prints the report.

  Args:
    argv: the command line without the program name (default: sys.argv[1:]).

  Returns:
    {'jax': bench_jax's result, 'torch': the eager PyTorch result or None,
    'torch_compile': the torch.compile result or None, 'jax_fresh': the `--fresh_memory`
    process's bench_jax result or None}; a failed PyTorch run is {'mode': ..., 'error': ...},
    a failed fresh process {'error': ...}.
  """
  prog = 'bench/train_step.py'
  default = str(REPO / 'configs' / 'crackforest_exp.py')
  fv, argv = cli.parse_command(prog, argv, _define_flags, default_config=default)
  config = fv.config
  hw = tuple(int(v) for v in fv.hw)
  if len(hw) != 2:
    sys.exit(f'{prog}: --hw takes H,W, got {fv.hw}')

  if fv.torch_worker is not None:
    compile_mode = fv.torch_compile_mode if fv.torch_worker_mode == 'compile' else None
    step = _peer.TorchStep(
      config,
      hw,
      fv.batch,
      expect_params=fv.torch_worker,
      device=fv.torch_device,
      compile_mode=compile_mode,
      compile_backend=fv.torch_compile_backend,
    )
    step.warm(fv.warmup)
    r = _peer.serve(step, sys.stdin, lambda line: print(line, flush=True))
    return {'jax': None, 'torch': r, 'torch_compile': None, 'jax_fresh': None}

  from crackjax.experiment.build import build

  cache_dir = prepare_fresh_cache() if fv.fresh_memory and not fv.jax_fresh_worker else None
  try:
    experiment = build(config)
  except ValueError as e:
    sys.exit(f'{prog}: bad config: {" / ".join(str(e).splitlines())}')
  # The fresh process of --fresh_memory measures memory only: it traces nothing.
  profile_steps = 0 if fv.jax_fresh_worker else fv.profile_steps
  side = JaxStep(experiment, hw, fv.batch, use_cache=not profile_steps)
  side.warm(fv.warmup)
  servers = [] if fv.jax_fresh_worker else _start_torch(fv, config, argv, side.n_params)
  interleaved = interleave(side, servers, block_sizes(fv.steps, fv.blocks))
  pipelined_s = side.pipelined(fv.steps)
  # After the timed steps, so the trace costs them nothing.
  profile = side.profile(profile_steps, fv.profile_dir) if profile_steps else None
  jr = side.result(interleaved['jax_times'], fv.warmup, pipelined_s, profile)
  if not math.isfinite(jr['median_s']) or not math.isfinite(jr['loss']):
    raise FloatingPointError(f'non-finite result: {jr}')
  if fv.jax_fresh_worker:
    print(outputs.dumps(jr))
    return {'jax': jr, 'torch': None, 'torch_compile': None, 'jax_fresh': None}
  torch_profile = None
  if profile_steps and servers and jr['backend'] == 'cpu':
    answer = servers[0].ask(f'profile {profile_steps}')
    if answer is not None:
      torch_profile = load_bench('cpu_profile').torch_kinds(answer['profile'])
  result = {
    'jax': jr,
    'torch': None,
    'torch_compile': None,
    'jax_fresh': None,
    'interleaved': {k: v for k, v in interleaved.items() if k != 'jax_times'},
    'torch_profile': torch_profile,
  }
  for server in servers:  # before the fresh process, which would otherwise share the GPU
    result['torch' if server.mode == 'eager' else 'torch_compile'] = server.done()

  def save() -> None:  # after every part, so a run cut short keeps what it finished
    if fv.json:
      Path(fv.json).write_text(outputs.dumps(result, indent=1, default=str))

  save()
  if cache_dir is not None:
    result['jax_fresh'] = _jax_fresh_subprocess(argv, cache_dir)
    save()
  torch_results = [r for r in (result['torch'], result['torch_compile']) if r is not None]
  print(report(jr, torch_results, result['jax_fresh'], result['interleaved'], torch_profile))
  return result


def _start_torch(fv, config, argv, n_params: int) -> list[TorchServer]:
  """The PyTorch workers the flags ask for (eager; torch.compile with --torch_compile), each
  past its first call and warm-up steps; [] without PyTorch (the reason printed)."""
  if not fv.torch:
    return []
  why_not = torch_unsupported(config)
  if why_not:
    print(f'(no PyTorch comparison: {why_not})')
    return []
  if not torch_available():
    print('(torch not importable: no PyTorch comparison)')
    return []
  modes = ['eager', 'compile'] if fv.torch_compile else ['eager']
  return [TorchServer(argv, n_params, mode) for mode in modes]


if __name__ == '__main__':
  main()
