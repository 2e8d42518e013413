"""Re-runs rows of the paper's Tables I-VIII, seed by seed, evaluating after every epoch.

  python -m crackjax.paper.runner --list
  python -m crackjax.paper.runner --table=1 --seeds=5 --workdir=repro/gpu
  python -m crackjax.paper.runner --table=1 --rows=wce_xie_e20,wce_exp_0.75_e5 \\
      --variant=cpu_scale --set=data.manual_dir=../shared/datasets/crackforest --workdir=repro/cpu
  python -m crackjax.paper.report repro/cpu    # the tables beside the paper's

Rows that differ only in epochs form a training group (`crackjax.paper.tables.training_groups`):
each (group, seed) is one job that trains once, to the longest epoch count among the chosen
rows of the group, and evaluates the test split after every epoch, so the shorter rows and the
curves of Figs. 5-6 come from the same run. A job lives in
``<workdir>/table<T>/<group>/seed<S>/``: the usual workdir of `crackjax.training.loop` (checkpoints,
config.json, metrics) plus ``run.json`` (the rows, seed, config, hardware, versions) and one
``epoch_<NNN>.json`` per epoch: the evaluation record that every evaluation writes
(`crackjax.evaluation.scoring.RECORD_FIELDS`: wall seconds of training and evaluation, and per
protocol ODS / OIS / AP and the per-threshold curve), here by ``config.eval.every_epochs`` = 1.

Resuming: run the same command again. Finished jobs are skipped, an interrupted one continues
from its last checkpoint (`loop.train_and_evaluate` saves one at every epoch and on
SIGTERM / Ctrl-C), and an epoch whose checkpoint was saved but not evaluated is evaluated
first. ``--max_minutes`` ends the command after that much wall time (running jobs get SIGTERM
and save), so a campaign can be run in chunks that fit a time limit.

Side by side: ``--parallel=N`` runs N jobs at once, each in its own process. Processes are
spread over the GPUs (``--gpus``, default all that ``nvidia-smi -L`` lists; one process per GPU
when N <= GPUs) and share a GPU with ``XLA_PYTHON_CLIENT_MEM_FRACTION`` = 0.9 / (processes on
it). Timings of side-by-side jobs are recorded as such (``run.json``: ``side_by_side``).

The configs come from the config files (``configs/table<T>.py:<row>[,<variant>]`` plus
``--set`` overrides), found next to the crackjax package (``--configs_dir``), so a run here is
exactly `python launch.py --config=configs/table1.py:<row>` with the seed set.

Tables V-VIII (the comparison models, `crackjax.paper.tables.COMPARE_TABLES`) run the same way,
``--table=7 --rows=hed,hed_dagger``: every row is its own training group (a model with its
original loss or the paper's dagger loss) and loads ``configs/table<T>.py:<key>[,<variant>]``
(variants: configs/base.py VARIANTS, ``cpu`` and ``smoke`` for every model, ``cpu_scale`` for
the U-Net rows). Their epochs are partly assumed (`crackjax.paper.tables`, ``epochs_basis``).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import flags

from crackjax.config import flags as config_flags
from crackjax.paper import tables as paper
from crackjax.runs import identity

PROG = 'python -m crackjax.paper.runner'
USAGE = f'{PROG} --table=T --workdir=DIR [--rows=KEY,...] [--seeds=N] [flags]  |  {PROG} --list'
DEFAULT_PROTOCOLS = ('strict', 'tolerance_thin_gt')


def define_flags(fv: flags.FlagValues) -> None:
  """The runner's flags."""
  flags.DEFINE_bool(
    'list', False, 'Print the rows (all tables, or --table) and exit.', flag_values=fv
  )
  flags.DEFINE_integer('table', None, 'Table of the paper (1-8).', flag_values=fv)
  flags.DEFINE_list(
    'rows', [], 'Row keys (default: every trainable row of the table).', flag_values=fv
  )
  flags.DEFINE_integer('seeds', 5, 'Seeds per row.', flag_values=fv)
  flags.DEFINE_integer(
    'first_seed', 0, 'Seeds are first_seed ... first_seed+seeds-1.', flag_values=fv
  )
  flags.DEFINE_string('workdir', None, 'Directory of the campaign.', flag_values=fv)
  flags.DEFINE_string(
    'variant',
    '',
    'Config variant appended to every row (configs/base.py VARIANTS: cpu, cpu_scale, smoke).',
    flag_values=fv,
  )
  flags.DEFINE_multi_string(
    'set', [], 'Config override field=value, as --config.field=value (repeatable).', flag_values=fv
  )
  flags.DEFINE_list(
    'protocols',
    list(DEFAULT_PROTOCOLS),
    "Evaluation protocols at the rows' epochs (and, unless --curve_protocols says otherwise, "
    'at every epoch).',
    flag_values=fv,
  )
  flags.DEFINE_list(
    'curve_protocols',
    None,
    "Protocols of the epochs that are no row's (the curves); default: --protocols. A cheaper "
    'subset saves time where evaluation dominates (the tolerance protocols on a CPU).',
    flag_values=fv,
  )
  flags.DEFINE_integer('parallel', 1, 'Jobs run side by side, one process each.', flag_values=fv)
  flags.DEFINE_list(
    'gpus', None, 'GPU indices to use (default: all nvidia-smi lists).', flag_values=fv
  )
  flags.DEFINE_float(
    'max_minutes',
    0.0,
    'Stop after this wall time (0: no limit); run again to go on.',
    flag_values=fv,
  )
  flags.DEFINE_string(
    'configs_dir',
    None,
    'Directory of the table<T>.py config files (default: beside crackjax).',
    flag_values=fv,
  )
  flags.DEFINE_multi_string(
    'done',
    [],
    'Results files of `crackjax.paper.report --export`: jobs complete there are skipped (a '
    'campaign run in chunks on machines that do not keep the workdir).',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'shortest_first',
    False,
    'Run the jobs with the fewest epochs first, and among equal epochs the lowest seeds of '
    'every row first (a chunk cut short leaves the rows with equal numbers of seeds).',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'plan',
    False,
    'Print which jobs fit --max_minutes, from the rates of the --done runs on this GPU kind, '
    'and exit (a dry run; nothing is prepared or trained).',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'fit',
    False,
    'Start only the jobs that --plan says fit --max_minutes (no job is cut at the limit); '
    'without measured rates for this GPU kind every job is started, as without --fit.',
    flag_values=fv,
  )
  flags.DEFINE_string(
    'device_kind',
    None,
    "GPU kind the plan assumes (default: nvidia-smi's name of GPU 0), e.g. "
    "'NVIDIA H100 80GB HBM3' to plan a chunk on a machine without it.",
    flag_values=fv,
  )
  flags.DEFINE_string('job', None, 'Internal: run one job, table:group:seed.', flag_values=fv)


# ------------------------------------------------------------------------------------- the jobs


@dataclasses.dataclass(frozen=True)
class Job:
  """One training run: a training group of a table (its chosen rows, longest first), one seed."""

  table: int
  rows: tuple[paper.Row, ...]
  seed: int

  @property
  def group(self) -> str:
    """The group's name without the table: the longest row's key without its epochs."""
    return self.rows[0].training_group.split(':', 1)[1]

  @property
  def epochs(self) -> int:
    return self.rows[0].epochs

  @property
  def id(self) -> str:
    return f'{self.table}:{self.group}:{self.seed}'

  def directory(self, workdir: str | Path) -> Path:
    return Path(workdir) / f'table{self.table}' / self.group / f'seed{self.seed}'


def select_jobs(table: int, row_keys: Sequence[str], seeds: Sequence[int]) -> list[Job]:
  """The jobs that cover `row_keys` of `table` (all trainable rows if empty) for every seed,
  group by group in the paper's order, seeds innermost.

  Raises:
    ValueError: unknown table, unknown key or a reference row (the message lists the keys).
  """
  if table not in paper.TABLES and table not in paper.COMPARE_TABLES:
    tables = sorted(paper.TABLES) + sorted(paper.COMPARE_TABLES)
    raise ValueError(f'--table must be one of {tables}, got {table}.')
  rows = paper.rows_by_key(table)
  trainable = [k for k, r in rows.items() if not r.reference]
  unknown = [k for k in row_keys if k not in trainable]
  if unknown:
    raise ValueError(f'Not a trainable row of Table {table}: {unknown}; rows: {trainable}.')
  chosen = set(row_keys or trainable)
  jobs = []
  for group_rows in paper.training_groups(table).values():
    picked = tuple(r for r in group_rows if r.key in chosen)  # longest first
    jobs += [Job(table, picked, s) for s in seeds] if picked else []
  return jobs


def shortest_first(jobs: Sequence[Job]) -> list[Job]:
  """`jobs` with the fewest epochs first and, among equal epochs, seed by seed: every row's
  seed 0, then every row's seed 1, ... (the paper's order within a seed), so that a chunk cut
  at its time limit leaves the rows with equal numbers of seeds."""
  return sorted(jobs, key=lambda j: (j.epochs, j.seed))


def list_rows(table: int | None = None) -> str:
  """One line per row: table, key, epochs, training group and the paper's ODS F1 (%)."""
  lines = []
  for t, rows in paper.TABLES.items():
    if table not in (None, t):
      continue
    for r in rows:
      what = 'reference row, not trainable' if r.reference else f'group {r.training_group}'
      epochs = '' if r.epochs is None else f'{r.epochs} epochs'
      lines.append(
        f'table{t}  {r.key:<28} {epochs:<10} paper ODS F1 {r.ods.f1.mean:6.2f}  '
        f'({paper.SETTINGS[t].dataset}; {what})'
      )
  lines += _list_compare_rows(table)
  return '\n'.join(lines)


def _list_compare_rows(table: int | None) -> list[str]:
  """The lines of `list_rows` for Tables V-VIII: one per row, like Tables I-IV's, plus the
  model, its loss and where its epochs come from."""
  lines = []
  for t, rows in paper.COMPARE_TABLES.items():
    if table not in (None, t):
      continue
    for r in rows:
      epochs = f'{r.epochs} epochs'
      known = f'as Table {r.base_table} {r.unet_row}' if r.unet_row else 'epochs assumed'
      pending = '' if r.model_implemented else '; model not in crackjax.models yet'
      lines.append(
        f'table{t}  {r.key:<28} {epochs:<10} paper ODS F1 {r.ods.f1.mean:6.2f}  '
        f'({r.dataset}; {r.name}: {r.loss}; {known}{pending})'
      )
  return lines


# ------------------------------------------------------------------------------- configuration


def configs_dir(flag_value: str | None = None) -> Path:
  """The directory of configs/table<T>.py: the flag, else the `configs` folder beside the
  crackjax package (the repository, or site-packages for an installed wheel)."""
  return Path(flag_value) if flag_value else Path(__file__).resolve().parents[2] / 'configs'


def _parse_config(path: Path, arg: str, overrides: Sequence[str]) -> flags.FlagValues | Exception:
  """`path`:`arg` with `overrides` applied (ml_collections' parser, as ``--config=path:arg
  --config.<override>``), or why not: the parser's error. A field that the (locked) config
  lacks is an AttributeError or KeyError that names the last part of its path only; anything
  else a flags.Error that names the flag (``--config=...`` or ``--config.<override>``)."""
  argv = [PROG, f'--config={path}:{arg}', *(f'--config.{o}' for o in overrides)]
  fv = config_flags.new_flag_values(argv)
  try:
    fv(argv)
  except (AttributeError, KeyError, flags.Error) as e:
    return e
  return fv


def _config_error(
  error: Exception, job: Job, variant: str, overrides: Sequence[str], directory: Path
) -> str:
  """`_parse_config`'s `error` in one line naming what the user typed: the --set override or
  the --variant at fault, or else the config file (the row keys were checked before)."""
  path = directory / f'table{job.table}.py'
  row_alone = _parse_config(path, job.rows[0].key, ())
  if not isinstance(error, flags.Error):
    # Which override names a field the config lacks: walk each one's path in the config.
    config = None if isinstance(row_alone, Exception) else row_alone.config
    for o in overrides:
      node, field = config, o.split('=', 1)[0]
      for part in field.split('.'):
        if not hasattr(node, 'keys') or part not in node:
          return f'--set={o}: no config field {field!r}; configs/base.py lists every field.'
        node = node[part]
    return f'a --set field is not in the config ({error}); configs/base.py lists every field.'
  message = str(error)
  for o in overrides:
    if message.startswith(f'flag --config.{o}: '):
      return f'--set={o}: {config_flags.exception_line(message[len(f"flag --config.{o}: ") :])}'
  detail = config_flags.exception_line(
    message.split(': ', 1)[1] if message.startswith('flag --') else message
  )
  detail = detail.removeprefix('Error whilst parsing config file: ')
  if variant and not isinstance(row_alone, Exception):
    return f'--variant={variant}: {detail}'  # the row alone loads: the variant is at fault
  return f'{path}:{job.rows[0].key}: {detail}'


def load_config(
  job: Job,
  *,
  variant: str,
  overrides: Sequence[str],
  directory: Path,
  protocols: Sequence[str],
  curve_protocols: Sequence[str] | None = None,
):
  """The job's config: configs/table<T>.py:<longest row>[,variant], the overrides, the seed,
  the epochs of the longest chosen row and the evaluation: every epoch (``eval.every_epochs``
  = 1), under `protocols` at the rows' epochs and `curve_protocols` (default the same) at the
  others.

  Raises:
    SystemExit: (one line, naming the --set or --variant flag) a mistyped override field, an
      override without '=', an unparsable value or an unknown variant.
  """
  for o in overrides:
    if not o.split('=', 1)[0] or '=' not in o:
      sys.exit(f'{PROG}: --set={o}: expected FIELD=VALUE, e.g. --set=learning_rate=0.001.')
  arg = job.rows[0].key + (f',{variant}' if variant else '')
  fv = _parse_config(directory / f'table{job.table}.py', arg, overrides)
  if isinstance(fv, Exception):
    sys.exit(f'{PROG}: {_config_error(fv, job, variant, overrides, directory)}')
  config = fv.config
  config.seed = job.seed
  # The variant may shorten training (e.g. 'cpu' sets 2 epochs): the rows' epochs win here,
  # since they are what the paper compares; a variant shrinks an epoch's steps instead.
  config.num_epochs = job.epochs
  config.eval.protocols = tuple(protocols)
  config.eval.every_epochs = 1
  config.eval.curve_protocols = tuple(curve_protocols or ())
  config.eval.full_epochs = tuple(sorted({r.epochs for r in job.rows}))
  # Every epoch is evaluated as it ends; keep checkpoints only for resuming.
  config.max_checkpoints_to_keep = 2
  return config


# -------------------------------------------------------------------------------- one job here


def hardware() -> dict[str, Any]:
  """The machine a job ran on: backend, devices, CPU model and core count, host."""
  import jax

  cpu = platform.processor()
  try:
    for line in Path('/proc/cpuinfo').read_text().splitlines():
      if line.startswith('model name'):
        cpu = line.split(':', 1)[1].strip()
        break
  except OSError:
    pass
  devices = jax.local_devices()
  return {
    'backend': jax.default_backend(),
    'device_kind': devices[0].device_kind,
    'num_devices': len(devices),
    'cpu': cpu,
    'cpu_count': os.cpu_count(),
    'host': platform.node(),
  }


def _versions() -> dict[str, str]:
  import flax
  import jax

  commit = None
  try:
    commit = subprocess.run(
      # '-dirty' when the tree differs from the commit (a device copy of a working tree).
      ['git', 'describe', '--always', '--dirty', '--abbrev=7'],
      cwd=Path(__file__).resolve().parent,
      capture_output=True,
      text=True,
      timeout=10,
    ).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    pass
  return {
    'jax': jax.__version__,
    'flax': flax.__version__,
    'python': platform.python_version(),
    'commit': commit or None,
  }


def run_job(job: Job, workdir: str | Path, experiment, *, side_by_side: int = 1) -> str:
  """Trains `job`'s experiment (`crackjax.experiment.build` of its config) to its epochs
  (resuming); `loop.train_and_evaluate` evaluates every epoch (the config's
  ``eval.every_epochs``) and writes its record, epoch_<NNN>.json, the format of every
  evaluation (`scoring.EpochEvaluator`). Returns 'done' or 'skipped' (everything was there).

  Raises:
    run.RunMismatchError: the job's directory holds a run of another config fingerprint.
    run.RunLockedError: another process holds the job's directory.
  """
  directory = job.directory(workdir)
  with identity.lock(directory):
    # Never count or extend a run started under another config as this one.
    identity.check_identity(directory, experiment.fingerprint, record=False)
    if set(range(1, job.epochs + 1)) <= set(identity.evaluated_epochs(directory)):
      return 'skipped'
    return _run_job(job, directory, experiment, side_by_side)


def _run_job(job: Job, directory: Path, experiment, side_by_side: int) -> str:
  from crackjax.training import loop

  config = experiment.config

  directory.mkdir(parents=True, exist_ok=True)
  identity.write_json(
    directory / 'run.json',
    {
      'table': job.table,
      'group': job.rows[0].training_group,
      'rows': [{'key': r.key, 'epochs': r.epochs} for r in job.rows],
      'seed': job.seed,
      'epochs': job.epochs,
      'config': json.loads(config.to_json_best_effort()),
      'hardware': hardware(),
      'side_by_side': side_by_side,
      'versions': _versions(),
      'updated': time.strftime('%Y-%m-%d %H:%M:%S %Z'),
    },
  )

  # Epochs evaluated by an earlier run of this job are not announced again.
  announced = {e for e in range(1, job.epochs + 1) if identity.epoch_path(directory, e).exists()}

  def announce(*_) -> None:
    # One line per evaluated epoch for the console / worker.log, as its record appears: an
    # epoch scored in the background (eval.background_workers) has none yet when it ends,
    # so its line comes at a later epoch's end, or after training.
    for epoch in range(1, job.epochs + 1):
      path = identity.epoch_path(directory, epoch)
      if epoch in announced or not path.exists():
        continue
      record = identity.read_record(path, required=('results',))
      if record is None:
        continue
      announced.add(epoch)
      strict = record['results'].get('strict', next(iter(record['results'].values())))
      print(
        f'{job.id} epoch {epoch}: {record["train_seconds"]:.1f} s training, '
        f'{record["eval_seconds"]:.1f} s evaluation, ODS F1 {strict["ods"]["f1"]:.4f} '
        f'({strict["protocol"]} protocol)',
        flush=True,
      )

  loop.train_and_evaluate(experiment, directory, evaluate_after=False, on_epoch_end=announce)
  announce()
  missing = sorted(set(range(1, job.epochs + 1)) - set(identity.evaluated_epochs(directory)))
  if missing:
    # Only if checkpoints were lost between runs; said, not hidden.
    print(
      f'{job.id}: epochs {missing} have no evaluation (their checkpoints are gone).', flush=True
    )
  return 'done'


# ------------------------------------------------------------------------------ many processes


def available_gpus() -> list[str]:
  """GPU indices from CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`; none on a CPU machine."""
  visible = os.environ.get('CUDA_VISIBLE_DEVICES')
  if visible is not None:
    return [g for g in visible.split(',') if g.strip()]
  if not shutil.which('nvidia-smi'):
    return []
  try:
    out = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.SubprocessError):
    return []
  return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith('GPU ')]


def worker_env(
  slot: int, parallel: int, gpus: Sequence[str], base: dict[str, str] | None = None
) -> dict[str, str]:
  """Environment of the worker in `slot` (`base`, default this process's, plus its GPU and
  its share of that GPU's memory)."""
  env = dict(os.environ if base is None else base)
  if gpus:
    env['CUDA_VISIBLE_DEVICES'] = gpus[slot % len(gpus)]
    per_gpu = -(-parallel // len(gpus))  # processes sharing one GPU
    if per_gpu > 1:
      env['XLA_PYTHON_CLIENT_MEM_FRACTION'] = f'{0.9 / per_gpu:.3f}'
  return env


#: A worker's environment: the runner's pid (`end_with_runner`).
RUNNER_PID_ENV = 'CRACKJAX_PAPER_RUNNER_PID'


def end_with_runner() -> None:
  """In a worker, first thing: SIGTERM when the runner dies, kill -9 or a `timeout` included
  (Linux's PR_SET_PDEATHSIG), so no orphan keeps training and holding a GPU; it saves its
  checkpoint on the way out, as at the time limit. Set here, not between fork and exec
  (Popen's preexec_fn): that runs Python in a fork of the runner, multithreaded by then (JAX),
  which can deadlock, and JAX warned of it at every start. A runner that died before this
  line sends no signal: the worker then ends here. A --job started by hand (no runner's pid in
  its environment) is left alone: its parent is a shell, which may end first on purpose.
  """
  runner = os.environ.get(RUNNER_PID_ENV, '')
  if not runner.isdigit():
    return
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    return  # not Linux: the worker outlives a killed runner
  if os.getppid() != int(runner):
    sys.exit(f'{PROG}: the runner (pid {runner}) has ended; this worker stops too.')


def run_workers(
  jobs: Sequence[Job],
  argv: Sequence[str],
  workdir: Path,
  *,
  parallel: int,
  gpus: Sequence[str],
  deadline: float | None,
  env: dict[str, str] | None = None,
) -> dict[str, str]:
  """Runs every job in a `--job` subprocess of this command, `parallel` at a time; at the
  deadline the running ones get SIGTERM (they save a checkpoint) and nothing new starts.

  Returns:
    job id -> 'done', 'failed (exit N: <the log's last line>), see <log>' or 'not started' /
    'stopped at the time limit'.
  """
  pending = list(jobs)
  running: dict[int, tuple[Job, subprocess.Popen, Any]] = {}
  status: dict[str, str] = {}
  stopping = False
  while pending or running:
    now = time.monotonic()
    if deadline is not None and now >= deadline and not stopping:
      stopping = True
      for _, proc, _ in running.values():
        proc.send_signal(signal.SIGTERM)
    free = [s for s in range(parallel) if s not in running]
    while pending and free and not stopping:
      slot, job = free.pop(0), pending.pop(0)
      directory = job.directory(workdir)
      directory.mkdir(parents=True, exist_ok=True)
      log = open(directory / 'worker.log', 'a')  # noqa: SIM115 (closed when the job ends)
      log.write(f'\n==== {time.strftime("%Y-%m-%d %H:%M:%S")} slot {slot}\n')
      log.flush()
      cmd = [sys.executable, '-m', 'crackjax.paper.runner', *argv, f'--job={job.id}']
      # No preexec_fn: the worker sets its own end with the runner (`end_with_runner`).
      proc = subprocess.Popen(
        cmd,
        env={**worker_env(slot, parallel, gpus, env), RUNNER_PID_ENV: str(os.getpid())},
        stdout=log,
        stderr=subprocess.STDOUT,
      )
      running[slot] = (job, proc, log)
      print(f'started {job.id} (slot {slot}, log {directory / "worker.log"})', flush=True)
    for slot, (job, proc, log) in list(running.items()):
      code = proc.poll()
      if code is None and stopping and time.monotonic() > deadline + 120:
        proc.kill()  # did not save within two minutes of SIGTERM
        code = proc.wait()
      if code is not None:
        log.close()
        del running[slot]
        if stopping and code != 0:
          status[job.id] = 'stopped at the time limit (resumes next time)'
        elif code:
          path = job.directory(workdir) / 'worker.log'
          status[job.id] = f'failed (exit {code}: {last_log_line(path)}), see {path}'
        else:
          status[job.id] = 'done'
        print(f'{job.id}: {status[job.id]}', flush=True)
    if pending and stopping:
      status.update({j.id: 'not started (time limit)' for j in pending})
      pending.clear()
    time.sleep(0.5)
  return status


# ---------------------------------------------------------------------------------------- main


def schedules_only(job: str | None, parallel: int, max_minutes: float) -> bool:
  """Whether this process only hands jobs to workers (and so must stay off the GPUs).

  A worker (`--job`) is started with the scheduler's `--parallel`, so the flag alone does not
  tell: the workers of 26 Nov's first H100 chunk took it for themselves and trained on the CPU.
  """
  return not job and (parallel > 1 or max_minutes > 0)


def gpu_name() -> str | None:
  """nvidia-smi's name of GPU 0 (what jax calls its device_kind), without starting jax."""
  if not shutil.which('nvidia-smi'):
    return None
  try:
    out = subprocess.run(
      ['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'],
      capture_output=True,
      text=True,
      timeout=30,
    ).stdout
  except (OSError, subprocess.SubprocessError):
    return None
  names = [line.strip() for line in out.splitlines() if line.strip()]
  return names[0] if names else None


def plan_chunk(
  jobs: Sequence[Job],
  config_of,
  earlier: Sequence[dict[str, Any]],
  device_kind: str | None,
  parallel: int,
  budget_seconds: float,
) -> tuple[list[Job], str]:
  """The jobs expected to end within `budget_seconds` (crackjax.paper.plan) and the plan
  as text; all `jobs` when the `earlier` runs hold no rates for this kind and setting."""
  from crackjax.paper import plan as campaign_plan
  from crackjax.paper import records

  if not jobs:
    return [], 'No jobs to plan.'
  rates = None
  if device_kind and earlier:
    setting = records.setting_of(json.loads(config_of(jobs[0]).to_json_best_effort()))
    rates = campaign_plan.measured_rates(earlier, device_kind, parallel, setting)
  if rates is None:
    return list(jobs), (
      f'No measured rates for {device_kind or "this machine (no GPU found)"} with {parallel} '
      'jobs side by side at this setting in the --done runs: every job is started, and those '
      f'still running at --max_minutes are cut: {", ".join(j.id for j in jobs)}.'
    )
  planned = campaign_plan.plan(
    [(j.id, j.epochs, len({r.epochs for r in j.rows})) for j in jobs],
    rates,
    slots=parallel,
    budget_seconds=budget_seconds,
  )
  fitting = {p.job_id for p in planned if p.fits}
  return [j for j in jobs if j.id in fitting], campaign_plan.describe(
    planned, rates, budget_seconds
  )


def _worker_argv(full_argv: Sequence[str]) -> list[str]:
  """The command's own flags, without the scheduling ones, for the `--job` workers."""
  drop = ('--parallel', '--gpus', '--max_minutes', '--job', '--list', '--plan', '--fit')
  return [a for a in full_argv[1:] if not a.startswith(drop)]


def main(argv: Sequence[str] | None = None) -> int:
  full = [PROG, *(sys.argv[1:] if argv is None else argv)]
  fv = flags.FlagValues()
  define_flags(fv)
  rest = config_flags.parse_flags(fv, full, prog=PROG, usage=USAGE)
  if len(rest) > 1:
    sys.exit(f'{PROG}: unexpected arguments {rest[1:]}.')
  if fv.job:
    end_with_runner()
  if fv.list:
    print(list_rows(fv.table))
    return 0
  if fv.table is None or not fv.workdir:
    sys.exit(f'{PROG}: --table and --workdir are required (or --list).')
  if fv.seeds < 1 or fv.parallel < 1:
    sys.exit(f'{PROG}: --seeds and --parallel must be >= 1.')
  problem = config_flags.unwritable(fv.workdir)
  if problem:
    sys.exit(f'{PROG}: cannot write --workdir={fv.workdir}: {problem}.')
  seeds = range(fv.first_seed, fv.first_seed + fv.seeds)
  try:
    jobs = select_jobs(fv.table, fv.rows, seeds)
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')
  earlier: list[dict[str, Any]] = []
  if fv.done:
    from crackjax.paper import records

    try:
      earlier = records.load(fv.done)
    except (OSError, ValueError) as e:
      sys.exit(f'{PROG}: {e}')
    finished = records.complete_jobs(earlier)
    skipped = [j for j in jobs if (j.table, j.rows[0].training_group, j.seed, j.epochs) in finished]
    if skipped:
      print(f'{len(skipped)} jobs complete in {", ".join(fv.done)}: skipped.')
    jobs = [j for j in jobs if j not in skipped]
  if fv.shortest_first:
    jobs = shortest_first(jobs)
  directory = configs_dir(fv.configs_dir)
  if not (directory / f'table{fv.table}.py').is_file():
    sys.exit(f'{PROG}: no table{fv.table}.py in {directory}; pass --configs_dir.')

  def config_of(job):
    return load_config(
      job,
      variant=fv.variant,
      overrides=fv.set,
      directory=directory,
      protocols=fv.protocols,
      curve_protocols=fv.curve_protocols,
    )

  if (fv.plan or fv.fit) and not fv.job:
    if fv.max_minutes <= 0:
      sys.exit(f'{PROG}: --plan and --fit need --max_minutes (the time to plan for).')
    for job in jobs:  # a bad --set or --variant fails the dry run too, not only the real one
      config_of(job)
    jobs, message = plan_chunk(
      jobs, config_of, earlier, fv.device_kind or gpu_name(), fv.parallel, 60 * fv.max_minutes
    )
    print(message, flush=True)
    if fv.plan:
      return 0

  parent_env = dict(os.environ)
  if schedules_only(fv.job, fv.parallel, fv.max_minutes):
    # This process only schedules: keep it off the GPUs the workers need (jax would grab most
    # of a GPU's memory if anything here initialised a GPU backend).
    os.environ['JAX_PLATFORMS'] = 'cpu'
  from crackjax.data import registry as data_registry
  from crackjax.experiment import build
  from crackjax.runs import logs

  logs.quiet_third_party_logs()
  if fv.job:  # a worker: one job in this process
    job = next((j for j in jobs if j.id == fv.job), None)
    if job is None:
      sys.exit(f'{PROG}: unknown job {fv.job!r}.')
    config_flags.exit_on_sigterm()
    try:
      status = run_job(job, fv.workdir, build(config_of(job)), side_by_side=fv.parallel)
    except (identity.RunMismatchError, identity.RunLockedError, ValueError) as e:
      sys.exit(f'{PROG}: {e}')
    print(status, flush=True)
    return 0

  try:
    configs = {j.id: config_of(j) for j in jobs}
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')
  with contextlib.ExitStack() as held:
    # One runner per campaign; no job resumed or counted under another config; every config
    # checked and the data prepared once; all before any job starts.
    try:
      held.enter_context(identity.lock(fv.workdir))
      experiments = {k: build(c) for k, c in configs.items()}
      for job in jobs:
        identity.check_identity(
          job.directory(fv.workdir), experiments[job.id].fingerprint, record=False
        )
      prepared = set()
      for experiment in experiments.values():
        key = json.dumps(experiment.config.data.to_dict(), sort_keys=True, default=str)
        if key not in prepared:
          experiment.prepare_data()
          experiment.check_data()
          prepared.add(key)
    except (data_registry.DatasetError, ValueError, identity.RunLockedError, OSError) as e:
      # OSError: a workdir or data_dir that cannot be written (the message names the path).
      sys.exit(f'{PROG}: {e}')
    return _schedule(jobs, experiments, fv, full, parent_env)


def last_log_line(path: Path, limit: int = 200) -> str:
  """The last non-empty line of a worker's log (its error: the exception or the one-line
  message it exited with; a flag error's help hint after it is skipped), cut to `limit`
  characters."""
  try:
    lines = [ln.strip() for ln in path.read_text(errors='replace').splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln != config_flags.HELP_HINT]
  except OSError:
    return 'no log'
  last = lines[-1] if lines else 'empty log'
  return last if len(last) <= limit else last[: limit - 3] + '...'


def _schedule(jobs: Sequence[Job], experiments, fv, full: Sequence[str], parent_env) -> int:
  """Runs `jobs` here one by one, or in worker processes; prints and returns the outcome."""
  print(f'{len(jobs)} jobs: {", ".join(j.id for j in jobs)}', flush=True)
  deadline = time.monotonic() + 60 * fv.max_minutes if fv.max_minutes > 0 else None
  if fv.parallel == 1 and deadline is None:
    config_flags.exit_on_sigterm()
    status = {}
    for job in jobs:
      try:
        status[job.id] = run_job(job, fv.workdir, experiments[job.id])
      except (identity.RunMismatchError, identity.RunLockedError) as e:
        status[job.id] = f'failed: {e}'
      except Exception as e:  # noqa: BLE001 (one job's failure ends that job, as a worker's)
        # As with workers: one line here, the traceback in the job's log, the next job goes on.
        log = job.directory(fv.workdir) / 'worker.log'
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, 'a') as f:
          f.write(f'\n==== {time.strftime("%Y-%m-%d %H:%M:%S")} in the runner\n')
          f.write(traceback.format_exc())
        first = (str(e).splitlines() or [''])[0]
        status[job.id] = f'failed ({type(e).__name__}: {first}), see {log}'
      print(f'{job.id}: {status[job.id]}', flush=True)
  else:
    gpus = fv.gpus if fv.gpus is not None else available_gpus()
    worker_argv = [*_worker_argv(full), f'--parallel={fv.parallel}']
    status = run_workers(
      jobs,
      worker_argv,
      Path(fv.workdir),
      parallel=fv.parallel,
      gpus=gpus,
      deadline=deadline,
      env=parent_env,
    )
  unfinished = {k: v for k, v in status.items() if v not in ('done', 'skipped')}
  print(f'{len(status) - len(unfinished)} of {len(status)} jobs complete.')
  for k, v in unfinished.items():
    print(f'  {k}: {v}')
  return 1 if any(v.startswith('failed') for v in unfinished.values()) else 0


if __name__ == '__main__':
  sys.exit(main())
