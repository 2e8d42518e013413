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
``<workdir>/table<T>/<group>/seed<S>/``: the usual workdir of `crackjax.trainer.loop` (checkpoints,
config.json, metrics) plus ``run.json`` (the rows, seed, config, hardware, versions) and one
``epoch_<NNN>.json`` per epoch: the evaluation record that every evaluation writes
(`crackjax.trainer.eval_records.RECORD_FIELDS`: wall seconds of training and evaluation, and per
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
``--set`` overrides), found among the configs crackjax ships (``--configs_dir``), so a run here is
exactly `python launch.py --config=configs/table1.py:<row>` with the seed set.

Tables V-VIII (the comparison models, `crackjax.paper.tables.COMPARE_TABLES`) run the same way,
``--table=7 --rows=hed,hed_dagger``: every row is its own training group (a model with its
original loss or the paper's dagger loss) and loads ``configs/table<T>.py:<key>[,<variant>]``
(variants: configs/base.py VARIANTS, ``cpu`` and ``smoke`` for every model, ``cpu_scale`` for
the U-Net rows). Their epochs are partly assumed (`crackjax.paper.tables`, ``epochs_basis``).

This module is the command: its flags and `main`. What it runs is `crackjax.paper.jobs` (the
jobs of the chosen rows and seeds, their configs, one job trained); how is
`crackjax.paper.scheduler` (here or in worker processes, the time limit, the plan).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from absl import flags

from crackjax import cli
from crackjax.paper import jobs, records, scheduler, slurm
from crackjax.runs import exits, identity, outputs

PROG = 'python -m crackjax.paper.runner'
USAGE = f'{PROG} --table=T --workdir=DIR [--rows=KEY,...] [--seeds=N] [flags]  |  {PROG} --list'
DEFAULT_PROTOCOLS = ('strict', 'tolerance_thin_gt')

#: A job's config by the command's flags (`_config_loader`).
ConfigOf = Callable[[jobs.Job], Any]


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
    'Directory of the table<T>.py config files (default: the configs crackjax ships).',
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
  flags.DEFINE_enum(
    'executor',
    'local',
    ['local', 'slurm'],
    'Where the jobs run: local (here, or --parallel worker processes) or slurm (one array job '
    'submitted through submitit, one task per job; docs/reproduction.md#on-a-slurm-cluster).',
    flag_values=fv,
  )
  flags.DEFINE_string(
    'slurm_partition', None, "SLURM partition (default: the cluster's).", flag_values=fv
  )
  flags.DEFINE_integer(
    'slurm_time',
    60,
    'Time limit of one SLURM job, minutes; a job that reaches it is requeued and resumes from '
    'its checkpoint.',
    flag_values=fv,
  )
  flags.DEFINE_integer('slurm_gpus', 0, 'GPUs per SLURM job.', flag_values=fv)
  flags.DEFINE_string(
    'slurm_account', None, "SLURM account charged (default: the user's).", flag_values=fv
  )
  flags.DEFINE_integer(
    'slurm_array_parallelism',
    256,
    'SLURM jobs of the array running at once, at most.',
    flag_values=fv,
  )
  flags.DEFINE_integer(
    'slurm_cpus', None, "CPU cores per SLURM job (default: the cluster's).", flag_values=fv
  )
  flags.DEFINE_float(
    'slurm_mem_gb', None, "Memory per SLURM job, GB (default: the cluster's).", flag_values=fv
  )
  flags.DEFINE_multi_string(
    'slurm_option',
    [],
    'Another sbatch option NAME=VALUE, e.g. qos=high or constraint=a100 (repeatable).',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'wait',
    False,
    '--executor=slurm: wait until the jobs submitted now or already queued end, printing each; '
    'exit 1 if one did not finish.',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'status',
    False,
    "Print each job's evaluated epochs and, if submitted to SLURM, its SLURM id and state; "
    'then exit.',
    flag_values=fv,
  )
  flags.DEFINE_string('job', None, 'Internal: run one job, table:group:seed.', flag_values=fv)


def main(argv: Sequence[str] | None = None) -> int:
  """The command: the rows, or a plan, or the jobs run (a worker: one job); 1 if a job failed.
  Ctrl-C, a full disk and the like end it in one line (`runs.exits`)."""
  full = COMMAND.command_line(argv)  # the workers' command lines start from it
  return COMMAND.run(lambda fv, rest: _main(fv, rest, full), full[1:])


# Ctrl-C before or between jobs (a job in this process, or the workers, say what they kept).
_INTERRUPTED = (
  'interrupted (Ctrl-C); every checkpoint and epoch record saved so far is kept: run the same '
  'command again to go on.'
)
# A worker ignores Ctrl-C instead (`scheduler.end_with_runner`).
COMMAND = cli.Command(
  PROG, define_flags, usage=USAGE, interrupted=_INTERRUPTED, watch_interrupts=True
)


def _main(fv: flags.FlagValues, rest: list[str], full: list[str]) -> int:
  if rest:
    sys.exit(f'{PROG}: unexpected arguments {rest}.')
  if fv.job:
    slurm.leave_preemption_to_the_task()
    _end_with_runner()
  parent_env = dict(os.environ)  # the workers' environment, without the line below
  if scheduler.schedules_only(fv.job, fv.parallel, fv.max_minutes) or (
    fv.executor == 'slurm' and not fv.job
  ):
    # This process only schedules: keep it off the GPUs the workers need (jax would grab most
    # of a GPU's memory if anything here initialised a GPU backend). Set first, before
    # anything here may import jax.
    os.environ['JAX_PLATFORMS'] = 'cpu'
  if fv.list:
    print(jobs.list_rows(fv.table))
    return 0
  _check(fv)
  todo, earlier = _jobs(fv)
  if fv.status:
    print('\n'.join(slurm.status_lines(todo, fv.workdir)))
    return 0
  config_of = _config_loader(fv)
  if (fv.plan or fv.fit) and not fv.job:
    todo = _plan(fv, todo, earlier, config_of)
    if fv.plan:
      return 0
  from crackjax.runs import logs

  logs.quiet_third_party_logs()
  if fv.job:
    return _work(fv, todo, config_of)
  return _campaign(fv, full, todo, config_of, parent_env)


def _end_with_runner() -> None:
  """A worker, first thing: its end tied to the runner's (`scheduler.end_with_runner`)."""
  try:
    scheduler.end_with_runner()
  except scheduler.RunnerEndedError as e:
    sys.exit(f'{PROG}: {e}')


def _check(fv: flags.FlagValues) -> None:
  """Exits (one line) for flags that no job could run with."""
  if fv.table is None or not fv.workdir:
    sys.exit(f'{PROG}: --table and --workdir are required (or --list).')
  if fv.seeds < 1 or fv.parallel < 1:
    sys.exit(f'{PROG}: --seeds and --parallel must be >= 1.')
  if fv.executor == 'slurm' and not fv.job and not fv.status:
    local_only = [
      f'--{n}' for n in ('parallel', 'max_minutes', 'gpus', 'plan', 'fit') if fv[n].present
    ]
    if local_only:
      sys.exit(
        f'{PROG}: {", ".join(local_only)} schedule local jobs; with --executor=slurm SLURM '
        'schedules them (--slurm_array_parallelism, --slurm_time).'
      )
    try:
      slurm.check_available()
    except slurm.SlurmError as e:
      sys.exit(f'{PROG}: {e}')
  outputs.require_writable(PROG, f'--workdir={fv.workdir}', fv.workdir)


def _jobs(fv: flags.FlagValues) -> tuple[list[jobs.Job], list[dict[str, Any]]]:
  """The jobs to run, in order (those complete in --done left out), and the --done runs."""
  seeds = range(fv.first_seed, fv.first_seed + fv.seeds)
  try:
    todo = jobs.select_jobs(fv.table, fv.rows, seeds)
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')
  earlier: list[dict[str, Any]] = []
  if fv.done:
    try:
      earlier = records.load(fv.done)
    except (OSError, ValueError) as e:
      sys.exit(f'{PROG}: {e}')
    todo, skipped = jobs.without_complete(todo, earlier)
    if skipped:
      print(f'{len(skipped)} jobs complete in {", ".join(fv.done)}: skipped.')
  if fv.shortest_first:
    todo = jobs.shortest_first(todo)
  return todo, earlier


def _config_loader(fv: flags.FlagValues) -> ConfigOf:
  """config_of(job): the job's config by the flags (`jobs.load_config`); a config that does
  not load exits with one line."""
  directory = jobs.configs_dir(fv.configs_dir)
  if not (directory / f'table{fv.table}.py').is_file():
    sys.exit(f'{PROG}: no table{fv.table}.py in {directory}; pass --configs_dir.')

  def config_of(job: jobs.Job):
    try:
      return jobs.load_config(
        job,
        variant=fv.variant,
        overrides=fv.set,
        directory=directory,
        protocols=fv.protocols,
        curve_protocols=fv.curve_protocols,
      )
    except jobs.JobConfigError as e:
      sys.exit(f'{PROG}: {e}')

  return config_of


def _plan(
  fv: flags.FlagValues,
  todo: Sequence[jobs.Job],
  earlier: Sequence[dict[str, Any]],
  config_of: ConfigOf,
) -> list[jobs.Job]:
  """--plan / --fit: the jobs that fit --max_minutes (`scheduler.plan_chunk`), the plan
  printed."""
  if fv.max_minutes <= 0:
    sys.exit(f'{PROG}: --plan and --fit need --max_minutes (the time to plan for).')
  for job in todo:  # a bad --set or --variant fails the dry run too, not only the real one
    config_of(job)
  todo, message = scheduler.plan_chunk(
    todo,
    config_of,
    earlier,
    fv.device_kind or scheduler.gpu_name(),
    fv.parallel,
    60 * fv.max_minutes,
  )
  print(message, flush=True)
  return todo


def _work(fv: flags.FlagValues, todo: Sequence[jobs.Job], config_of: ConfigOf) -> int:
  """A worker (--job): that one job, in this process."""
  job = next((j for j in todo if j.id == fv.job), None)
  if job is None:
    sys.exit(f'{PROG}: unknown job {fv.job!r}.')
  from crackjax.experiment.build import build

  exits.exit_on_sigterm()
  try:
    status = jobs.run_job(job, fv.workdir, build(config_of(job)), side_by_side=fv.parallel)
  except (identity.RunMismatchError, identity.RunLockedError, ValueError) as e:
    sys.exit(f'{PROG}: {e}')
  print(status, flush=True)
  return 0


def _campaign(
  fv: flags.FlagValues,
  full: Sequence[str],
  todo: Sequence[jobs.Job],
  config_of: ConfigOf,
  parent_env: dict[str, str],
) -> int:
  """The jobs, here or in workers (`scheduler.run`), or submitted to SLURM (`_submit`; with
  --wait, waited for), after every config is checked and the data prepared, under the
  campaign's lock (one runner per campaign)."""
  from crackjax.data import registry as data_registry

  try:
    configs = {j.id: config_of(j) for j in todo}
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')
  with contextlib.ExitStack() as held:
    try:
      held.enter_context(identity.lock(fv.workdir))
      experiments = jobs.prepare(todo, configs, fv.workdir)
    except (data_registry.DatasetError, ValueError, identity.RunLockedError, OSError) as e:
      # OSError: a workdir or data_dir that cannot be written (the message names the path).
      sys.exit(f'{PROG}: {e}')
    if fv.executor == 'local':
      return scheduler.run(
        todo,
        experiments,
        workdir=fv.workdir,
        parallel=fv.parallel,
        gpus=fv.gpus,
        max_minutes=fv.max_minutes,
        command=[
          sys.executable,
          '-m',
          'crackjax.paper.runner',
          *scheduler.worker_argv(full),
          f'--parallel={fv.parallel}',
        ],
        env=parent_env,
      )
    ids = _submit(fv, full, todo, parent_env)  # the campaign's lock held while submitting
  if not fv.wait or not ids:
    return 0
  status = slurm.wait(todo, fv.workdir, ids)
  unfinished = {k: v for k, v in status.items() if v != 'done'}
  print(f'{len(status) - len(unfinished)} of {len(status)} SLURM jobs complete.')
  return 1 if unfinished else 0


def _submit(
  fv: flags.FlagValues,
  full: Sequence[str],
  todo: Sequence[jobs.Job],
  parent_env: dict[str, str],
) -> dict[str, str]:
  """--executor=slurm: the jobs neither complete nor queued, submitted as one array job
  (`crackjax.paper.slurm.submit`; a single job as a plain job). Returns campaign job id ->
  SLURM id of the jobs submitted now and of those already queued or running (--wait waits
  for both)."""
  settings = slurm.Settings(
    partition=fv.slurm_partition,
    time_min=fv.slurm_time,
    gpus=fv.slurm_gpus,
    account=fv.slurm_account,
    array_parallelism=fv.slurm_array_parallelism,
    cpus=fv.slurm_cpus,
    mem_gb=fv.slurm_mem_gb,
    options=tuple(fv.slurm_option),
  )
  queued = {k: v for k, v in slurm.live(fv.workdir).items() if k in {j.id for j in todo}}
  complete = [
    j
    for j in todo
    if set(range(1, j.epochs + 1)) <= set(identity.evaluated_epochs(j.directory(fv.workdir)))
  ]
  for job in complete:
    print(f'{job.id}: complete, not submitted.')
  for job_id, slurm_id in queued.items():
    print(f'{job_id}: queued or running as SLURM job {slurm_id}, not submitted again.')
  rest = [j for j in todo if j not in complete and j.id not in queued]
  if not rest:
    print(f'Nothing to submit: {len(complete)} of {len(todo)} jobs complete, {len(queued)} queued.')
    return queued
  try:
    ids = slurm.submit(rest, fv.workdir, settings, slurm.worker_command(full), env=parent_env)
  except (slurm.SlurmError, ValueError) as e:
    sys.exit(f'{PROG}: {e}')
  array = next(iter(ids.values())).split('_')[0]
  print(
    f'Submitted {len(ids)} jobs as SLURM job {array}: '
    + ', '.join(f'{k} -> {v}' for k, v in ids.items()),
    flush=True,
  )
  print(
    f"Follow them with: {PROG} <the same flags> --status; logs: each job's worker.log and "
    f'{slurm.folder(fv.workdir)}/.',
    flush=True,
  )
  return {**queued, **ids}


if __name__ == '__main__':
  sys.exit(main())
