"""launch.py's training loop against the isolated train step of bench/train_step.py.

Runs, in one process and at the same model, batch, precision and image size:

1. **the input pipeline alone** (`crackjax.data.loader.create_train_iterator`, host only): seconds
   per batch over `--host_batches` batches after the first, i.e. the host time per batch;
2. **the isolated step** (`bench/train_step.py`'s `bench_jax`: one random batch already on
   the device, `--bench_steps` timed steps): images per second at the median step (each
   waited for) and pipelined (dispatched back to back, as the loop does);
3. **the training loop** (`crackjax.trainer.loop.train_and_evaluate` in a fresh workdir, without
the final evaluation): steady-state steps per second from the metrics it logs
   (`metrics.jsonl`: every record's `time`; the first record, whose interval holds the
   compilation, is left out; epoch-end checkpoints stay in, as in any run), and how long the
   loop waited for its next batch (`next()` of the device prefetcher, timed by wrapping
   `prefetch_to_device`; a loop the input keeps up with waits ~0);

and prints loop / step images per second (goal on a GPU: >= 90%). `--bench_after` times the
isolated step once more after the loop and compares with the mean of both (on a shared
machine the drift between them is the noise of the ratio). With
`--profile_steps=A,B` it also records a `jax.profiler` trace of loop steps A..B (started and
stopped from the batch iterator) under `--profile_dir` and sums, from its Perfetto file, how
long the device's streams were idle in that window (GPU/TPU; the CPU backend has no device
tracks, so n/a there).

Usage (config and overrides as for launch.py; the workdir must be new or empty)::

    python bench/loop_vs_step.py --config=configs/crackforest_exp.py:cpu \\
        --config.data.data_dir=/tmp/tfds --config.data.manual_dir=../shared/datasets/crackforest \\
        --config.steps_per_epoch=30 --config.num_epochs=2 [--bench_steps=10] [--bench_after] \\
        [--host_batches=20] \\
        [--profile_steps=40,50 --profile_dir=/tmp/prof] [--workdir=DIR] [--json=PATH]
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from absl import flags

from crackjax import cli
from crackjax.experiment.build import check_data
from crackjax.runs import outputs

REPO = Path(__file__).resolve().parents[1]


def load_train_step_bench():
  """bench/train_step.py as a module (bench/ is not a package; its `load_bench` loads the
  others)."""
  spec = importlib.util.spec_from_file_location(
    'bench_train_step', REPO / 'bench' / 'train_step.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


# ----------------------------------------------------------------------------- host pipeline


def host_pipeline(experiment, batches: int) -> dict:
  """Host seconds per batch of the training input pipeline alone (no device work)."""
  t0 = time.perf_counter()
  it = experiment.splits.train_iterator()
  next(it)
  first_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  for _ in range(batches):
    next(it)
  per_batch = (time.perf_counter() - t0) / batches
  return {'batches': batches, 'first_batch_s': first_s, 'per_batch_s': per_batch}


# ----------------------------------------------------------------------------- the loop


class TimedBatches:
  """Wraps the loop's device-batch iterator: times each `next()` (the loop's wait for input)
  and optionally starts / stops a jax.profiler trace around batches [start, stop)."""

  def __init__(self, batches: Iterator, profile: tuple[int, int] | None, profile_dir: str | None):
    self._batches = batches
    self.waits: list[float] = []
    self._profile = profile
    self._profile_dir = profile_dir
    self._tracing = False
    self.profile_window: tuple[float, float] | None = None  # wall times of start and stop

  def __iter__(self):
    return self

  def __next__(self):
    import jax

    index = len(self.waits)
    if self._profile and index == self._profile[0]:
      self.profile_window = (time.time(), float('inf'))
      jax.profiler.start_trace(self._profile_dir, create_perfetto_trace=True)
      self._tracing = True
    elif self._tracing and index == self._profile[1]:
      self._stop()
    t0 = time.perf_counter()
    try:
      item = next(self._batches)
    finally:
      self.waits.append(time.perf_counter() - t0)
    return item

  def _stop(self) -> None:
    import jax

    if self._tracing:
      self._tracing = False
      jax.profiler.stop_trace()
      self.profile_window = (self.profile_window[0], time.time())

  def close(self) -> None:
    self._stop()
    self._batches.close()


def steady_rate(rows: list[dict], exclude: list[tuple[float, float]] = ()) -> dict:
  """Steady-state steps/s from the loop's 'train' metric records.

  The intervals between consecutive records are summed, leaving out the first record (its
  interval holds the compilation) and any interval that overlaps a window of `exclude`
  (wall times, e.g. the profiler's start and stop); epoch-end checkpoints stay in.

  Returns:
    {'steps_per_s': steps / seconds over the kept intervals, 'median_logged_steps_per_s':
    the median rate of the kept intervals (insensitive to one slow checkpoint),
    'first_record_step', 'first_record_time', 'last_record_time', 'records', 'intervals'
    (kept)}.
  """
  rows = [r for r in rows if r.get('kind') == 'train']
  kept = [
    (b['step'] - a['step'], b['time'] - a['time'])
    for a, b in itertools.pairwise(rows)
    if not any(a['time'] < stop and b['time'] > start for start, stop in exclude)
  ]
  if not kept:
    raise ValueError(
      f'no metric interval after the first record to measure a steady rate ({len(rows)} '
      'train records): run more steps or log more often (config.log_every_steps)'
    )
  return {
    'steps_per_s': sum(n for n, _ in kept) / sum(dt for _, dt in kept),
    'median_logged_steps_per_s': statistics.median(n / dt for n, dt in kept),
    'first_record_step': rows[0]['step'],
    'first_record_time': rows[0]['time'],
    'last_record_time': rows[-1]['time'],
    'records': len(rows),
    'intervals': len(kept),
  }


def run_loop(
  experiment, workdir: Path, profile: tuple[int, int] | None = None, profile_dir: str | None = None
) -> dict:
  """Runs train_and_evaluate (no evaluation) in `workdir`; returns its throughput figures."""
  from crackjax.trainer import loop

  original = loop.prefetch_to_device
  timed: list[TimedBatches] = []

  def timed_prefetch(*args, **kwargs):
    timed.append(TimedBatches(original(*args, **kwargs), profile, profile_dir))
    return timed[-1]

  loop.prefetch_to_device = timed_prefetch
  try:
    t0 = time.time()
    loop.train_and_evaluate(experiment, workdir, evaluate_after=False)
    wall = time.time() - t0
  finally:
    loop.prefetch_to_device = original
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  window = timed[0].profile_window
  rate = steady_rate(rows, [window] if window else [])
  waits = timed[0].waits
  steady_waits = waits[rate['first_record_step'] :] or waits
  return {
    **rate,
    'images_per_s': rate['steps_per_s'] * experiment.config.batch_size,
    'steps': len(waits),
    'wall_s': wall,
    'start_to_first_record_s': rate['first_record_time'] - t0,
    'input_wait_first_s': waits[0] if waits else None,
    'input_wait_mean_s': statistics.fmean(steady_waits) if steady_waits else None,
    'input_wait_max_s': max(steady_waits) if steady_waits else None,
    'input_wait_total_s': sum(steady_waits),
  }


# ----------------------------------------------------------------------------- profile


def device_idle(profile_dir: str | Path) -> dict | None:
  """Device busy / idle time in the newest Perfetto trace under `profile_dir`
  (bench/trace_summary.py's `device_idle`). None where the trace has no device tracks (the
  CPU backend)."""
  return load_train_step_bench().load_bench('trace_summary').device_idle(profile_dir)


# ----------------------------------------------------------------------------- main


def report(r: dict) -> str:
  """The text report of `main`'s result."""
  c, host, bench, loop = r['setup'], r['host'], r['bench'], r['loop']
  lines = [
    f'{c["model"]}, input {c["hw"][0]}x{c["hw"][1]}, batch {c["batch"]}, dtype {c["dtype"]}, '
    f'backend {bench["backend"]} ({bench["device_kind"]}); loop: {loop["steps"]} steps',
    f'dataset preparation:   {r["dataset_s"]:.2f} s',
    f'input pipeline alone:  {host["per_batch_s"] * 1e3:.1f} ms/batch host time '
    f'(first batch {host["first_batch_s"]:.2f} s; {host["batches"]} batches)',
    f'isolated step (bench): {bench["images_per_s"]:.2f} images/s '
    f'(median step {bench["median_s"] * 1e3:.1f} ms over {len(bench["step_times_s"])}; '
    f'compile {bench["compile_s"]:.1f} s; {bench["tflops"]:.3f} TFLOP/s analytic); '
    f'pipelined {bench["pipelined_images_per_s"]:.2f} images/s',
    f'training loop:         {loop["images_per_s"]:.2f} images/s '
    f'({loop["steps_per_s"]:.3f} steps/s steady over {loop["intervals"]} metric intervals '
    f'after step {loop["first_record_step"]}, checkpoints included, profiling excluded; '
    f'median interval {loop["median_logged_steps_per_s"]:.3f} steps/s)',
    f'  start to first record: {loop["start_to_first_record_s"]:.1f} s (init, compile, first '
    f'{loop["first_record_step"]} steps); loop wall {loop["wall_s"]:.1f} s',
    f'  waits for input:     first batch {loop["input_wait_first_s"]:.2f} s; steady mean '
    f'{loop["input_wait_mean_s"] * 1e3:.2f} ms/step, max {loop["input_wait_max_s"] * 1e3:.1f} ms',
  ]
  after = r.get('bench_after')
  if after is not None:
    lines.append(
      f'isolated step, again:  {after["images_per_s"]:.2f} images/s (median step '
      f'{after["median_s"] * 1e3:.1f} ms); pipelined {after["pipelined_images_per_s"]:.2f}; '
      'the ratios use the mean of both runs'
    )
  lines.append(
    f"loop / bench:          {r['ratio']:.1%} of the isolated step's images/s (goal >= 90%); "
    f'median interval {r["ratio_median_interval"]:.1%}; against the pipelined bench '
    f'{r["ratio_pipelined"]:.1%}'
  )
  idle = r.get('device_idle')
  if idle is not None:
    lines.append(
      f'device idle (profile of loop steps {r["profile_steps"]}): {idle["idle_fraction"]:.1%} '
      f'of {idle["window_ms"]:.1f} ms ({idle["tracks"]}, {", ".join(idle["devices"])})'
    )
  elif r.get('profile_steps'):
    lines.append(
      f'device idle: n/a (no device tracks in the trace on {bench["backend"]}); trace in '
      f'{r["profile_dir"]}'
    )
  return '\n'.join(lines)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string(
    'workdir', None, 'training workdir (new or empty; default: a temp dir)', flag_values=fv
  )
  flags.DEFINE_integer('bench_steps', 10, 'timed steps of the isolated step', flag_values=fv)
  flags.DEFINE_bool(
    'bench_after',
    False,
    'time the isolated step again after the loop (the ratios use the mean)',
    flag_values=fv,
  )
  flags.DEFINE_integer('host_batches', 20, 'batches timed of the input pipeline', flag_values=fv)
  flags.DEFINE_list(
    'profile_steps', [], 'A,B: trace loop steps A..B with jax.profiler', flag_values=fv
  )
  flags.DEFINE_string(
    'profile_dir', None, 'where the trace goes (default: WORKDIR/profile)', flag_values=fv
  )
  flags.DEFINE_string('json', None, 'also write the results here', flag_values=fv)


def main(argv=None) -> dict:
  """Runs the three measurements and prints the report (argv without the program name)."""
  prog = 'bench/loop_vs_step.py'
  fv, _ = cli.parse_command(prog, argv, _define_flags)
  config = fv.config
  profile = tuple(int(v) for v in fv.profile_steps) or None
  if profile is not None and (len(profile) != 2 or not 0 <= profile[0] < profile[1]):
    sys.exit(f'{prog}: --profile_steps takes A,B with 0 <= A < B, got {fv.profile_steps}')

  from crackjax.data import registry as data_registry
  from crackjax.experiment.build import build

  try:
    experiment = build(config)
    t0 = time.perf_counter()
    experiment.splits.prepare()
    dataset_s = time.perf_counter() - t0
    check_data(experiment)
  except (data_registry.DatasetError, ValueError) as e:
    sys.exit(f'{prog}: {" / ".join(str(e).splitlines())}')
  workdir = Path(fv.workdir or tempfile.mkdtemp(prefix='loop_vs_step_'))
  if workdir.exists() and any(workdir.iterdir()):
    sys.exit(f'{prog}: --workdir {workdir} is not empty (the loop would resume from it)')
  profile_dir = fv.profile_dir or str(workdir / 'profile')
  hw = experiment.splits.train_image_shape[:2]

  host = host_pipeline(experiment, fv.host_batches)
  bench = load_train_step_bench().bench_jax(
    experiment, hw, config.batch_size, fv.bench_steps, warmup=1
  )
  loop = run_loop(experiment, workdir, profile, profile_dir)
  bench_after = None
  if fv.bench_after:  # bench, loop, bench: drift of a shared machine shows as a difference
    bench_after = load_train_step_bench().bench_jax(
      experiment, hw, config.batch_size, fv.bench_steps, warmup=1
    )
  runs = [b for b in (bench, bench_after) if b is not None]
  bench_ips = statistics.fmean(b['images_per_s'] for b in runs)
  bench_pipelined = statistics.fmean(b['pipelined_images_per_s'] for b in runs)
  result = {
    'setup': {
      'model': config.model.name,
      'hw': list(hw),
      'batch': config.batch_size,
      'dtype': config.model.get('dtype', 'float32'),
      'workdir': str(workdir),
    },
    'dataset_s': dataset_s,
    'host': host,
    'bench': bench,
    'bench_after': bench_after,
    'bench_images_per_s': bench_ips,
    'bench_pipelined_images_per_s': bench_pipelined,
    'loop': loop,
    'ratio': loop['images_per_s'] / bench_ips,
    'ratio_pipelined': loop['images_per_s'] / bench_pipelined,
    'ratio_median_interval': loop['median_logged_steps_per_s'] * config.batch_size / bench_ips,
    'profile_steps': list(profile) if profile else None,
    'profile_dir': profile_dir if profile else None,
    'device_idle': device_idle(profile_dir) if profile else None,
  }
  print(report(result))
  if fv.json:
    Path(fv.json).write_text(outputs.dumps(result, indent=1, default=str))
  return result


if __name__ == '__main__':
  main()
