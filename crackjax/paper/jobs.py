"""The reproduction runner's jobs: which to run, their configs, and one trained here.

A job is one training run: the chosen rows of a training group of a table
(`crackjax.paper.tables.training_groups`: rows that differ only in epochs, longest first) and a
seed. It trains once, to the longest chosen row's epochs, and evaluates the test split after
every epoch (``config.eval.every_epochs`` = 1), so the shorter rows and the curves come from the
same run; it lives in ``<workdir>/table<T>/<group>/seed<S>/`` (`Job.directory`). Its config is
the config file's, ``configs/table<T>.py:<longest row>[,<variant>]`` with the ``--set``
overrides (`load_config`), so a job is exactly `python launch.py --config=...` with the seed
set. `crackjax.paper.scheduler` runs many; `crackjax.paper.runner` is the command.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from absl import flags

from crackjax import cli
from crackjax.evaluation.result import EVAL_SECONDS, F1, ODS, PROTOCOL, RESULTS, TRAIN_SECONDS
from crackjax.experiment.build import check_data
from crackjax.paper import records, tables
from crackjax.runs import config_files, identity

# The program name of the config parser's command line (never shown: ml_collections reads the
# --config flags only).
_ARGV0 = 'crackjax.paper.jobs'


class JobConfigError(ValueError):
  """A job's config cannot be loaded; the message (one line) names what the user typed: the
  --set override or the --variant at fault, or else the config file."""


# ------------------------------------------------------------------------------------- the jobs


class ArrayJob(Protocol):
  """What `crackjax.paper.slurm.submit` reads of a job it submits: a `Job`, or another
  campaign's unit of work (a LODO fold, `crackjax.lodo.folds.Fold`)."""

  @property
  def id(self) -> str: ...

  def directory(self, workdir: str | Path) -> Path: ...


@dataclasses.dataclass(frozen=True)
class Job:
  """One training run: a training group of a table (its chosen rows, longest first), one seed."""

  table: int
  rows: tuple[tables.Row, ...]
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
  if table not in tables.TABLES and table not in tables.COMPARE_TABLES:
    known = sorted(tables.TABLES) + sorted(tables.COMPARE_TABLES)
    raise ValueError(f'--table must be one of {known}, got {table}.')
  rows = tables.rows_by_key(table)
  trainable = [k for k, r in rows.items() if not r.reference]
  unknown = [k for k in row_keys if k not in trainable]
  if unknown:
    raise ValueError(f'Not a trainable row of Table {table}: {unknown}; rows: {trainable}.')
  chosen = set(row_keys or trainable)
  jobs = []
  for group_rows in tables.training_groups(table).values():
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
  for t, rows in tables.TABLES.items():
    if table not in (None, t):
      continue
    for r in rows:
      what = 'reference row, not trainable' if r.reference else f'group {r.training_group}'
      epochs = '' if r.epochs is None else f'{r.epochs} epochs'
      lines.append(
        f'table{t}  {r.key:<28} {epochs:<10} paper ODS F1 {r.ods.f1.mean:6.2f}  '
        f'({tables.SETTINGS[t].dataset}; {what})'
      )
  lines += _list_compare_rows(table)
  return '\n'.join(lines)


def _list_compare_rows(table: int | None) -> list[str]:
  """The lines of `list_rows` for Tables V-VIII: one per row, like Tables I-IV's, plus the
  model, its loss and where its epochs come from."""
  lines = []
  for t, rows in tables.COMPARE_TABLES.items():
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


def without_complete(
  jobs: Sequence[Job], earlier: Sequence[dict[str, Any]]
) -> tuple[list[Job], list[Job]]:
  """(`jobs` still to run, those complete in `earlier`: runs of `records.load`, e.g. the
  exports of earlier chunks), each in the order of `jobs`."""
  finished = records.complete_jobs(earlier)
  done = [j for j in jobs if (j.table, j.rows[0].training_group, j.seed, j.epochs) in finished]
  return [j for j in jobs if j not in done], done


# ------------------------------------------------------------------------------- configuration


def configs_dir(flag_value: str | None = None) -> Path:
  """The directory of configs/table<T>.py: the flag, else the configs crackjax ships
  (`crackjax.runs.config_files.shipped_configs_dir`: the repository's configs/ or the installed
  crackjax/configs/)."""
  return Path(flag_value) if flag_value else config_files.shipped_configs_dir()


def _parse_config(path: Path, arg: str, overrides: Sequence[str]) -> flags.FlagValues | Exception:
  """`path`:`arg` with `overrides` applied (ml_collections' parser, as ``--config=path:arg
  --config.<override>``), or why not: the parser's error. A field that the (locked) config
  lacks is an AttributeError or KeyError that names the last part of its path only; anything
  else a flags.Error that names the flag (``--config=...`` or ``--config.<override>``)."""
  argv = [_ARGV0, f'--config={path}:{arg}', *(f'--config.{o}' for o in overrides)]
  fv = cli.new_flag_values(argv)
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
      return f'--set={o}: {config_files.exception_line(message[len(f"flag --config.{o}: ") :])}'
  detail = config_files.exception_line(
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
    JobConfigError: (one line, naming the --set or --variant flag) a mistyped override field,
      an override without '=', an unparsable value or an unknown variant.
  """
  for o in overrides:
    if not o.split('=', 1)[0] or '=' not in o:
      raise JobConfigError(f'--set={o}: expected FIELD=VALUE, e.g. --set=learning_rate=0.001.')
  arg = job.rows[0].key + (f',{variant}' if variant else '')
  fv = _parse_config(directory / f'table{job.table}.py', arg, overrides)
  if isinstance(fv, Exception):
    raise JobConfigError(_config_error(fv, job, variant, overrides, directory))
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
  evaluation (`periodic.EpochEvaluator`). Returns 'done' or 'skipped' (everything was there).

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
  from crackjax.trainer import loop

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
      record = identity.read_record(path, required=(RESULTS,))
      if record is None:
        continue
      announced.add(epoch)
      print(epoch_line(job.id, epoch, record), flush=True)

  loop.train_and_evaluate(experiment, directory, evaluate_after=False, on_epoch_end=announce)
  announce()
  # The loop evaluates again only the epoch it resumes at; an earlier epoch whose record was
  # damaged (set aside by identity.read_record) is evaluated here while its checkpoint is
  # kept, and otherwise named with what to do.
  missing = sorted(set(range(1, job.epochs + 1)) - set(identity.evaluated_epochs(directory)))
  if missing:
    _evaluate_again(job, directory, experiment, missing)
    announce()
  missing = sorted(set(range(1, job.epochs + 1)) - set(identity.evaluated_epochs(directory)))
  for epoch in missing:
    print(
      f'{job.id}: epoch {epoch} has no evaluation: '
      f'{identity.why_not_evaluated(directory, epoch)}, and its checkpoint is no longer kept '
      f'(the newest {experiment.restore_spec.max_to_keep} are); the report leaves it '
      f'out. To have it, move {directory} aside and run the runner again (the job trains '
      'afresh, with the same seed).',
      flush=True,
    )
  return 'done'


def _evaluate_again(job: Job, directory: Path, experiment, epochs: Sequence[int]) -> None:
  """Evaluates each of `epochs` whose checkpoint is kept from that checkpoint (its record
  then has no training time), saying why."""
  from crackjax.trainer import periodic

  spe = experiment.schedule.steps_per_epoch
  kept = set(experiment.states.manager(directory).all_steps())
  evaluator = periodic.EpochEvaluator(experiment, directory)
  try:
    for epoch in epochs:
      if epoch * spe not in kept:
        continue
      why = identity.why_not_evaluated(directory, epoch)
      print(
        f'{job.id}: evaluating epoch {epoch} again from its checkpoint (step {epoch * spe}): '
        f'{why}.',
        flush=True,
      )
      state = experiment.states.restore(directory, step=epoch * spe, inference=True)
      evaluator(state, epoch, trained=False)
  finally:
    evaluator.close()


def epoch_line(job_id: str, epoch: int, record: Mapping[str, Any]) -> str:
  """The runner's line for an evaluated epoch (its record, epoch_<NNN>.json)."""
  strict = record[RESULTS].get('strict', next(iter(record[RESULTS].values())))
  seconds = record[TRAIN_SECONDS]
  # NaN: the epoch was evaluated later from its checkpoint (its process stopped before its
  # evaluation was written, or its record was damaged), so no training time belongs to it.
  trained = (
    f'{seconds:.1f} s training'
    if isinstance(seconds, int | float) and math.isfinite(seconds)
    else 'training time not measured (evaluated later from its checkpoint)'
  )
  return (
    f'{job_id} epoch {epoch}: {trained}, {record[EVAL_SECONDS]:.1f} s evaluation, '
    f'ODS F1 {strict[ODS][F1]:.4f} ({strict[PROTOCOL]} protocol)'
  )


def prepare(jobs: Sequence[Job], configs: Mapping[str, Any], workdir: str | Path) -> dict[str, Any]:
  """Before any job starts: every config built into its experiment (one validation pass
  each, `crackjax.experiment.build`), no job resumed or counted under another config, and
  every dataset prepared and checked once.

  Returns:
    job id -> the experiment of its config.

  Raises:
    identity.RunMismatchError: a job's directory holds a run of another config.
    ValueError: a config that fails its checks.
    data_registry.DatasetError, OSError: a dataset that cannot be prepared (the message names
      the path).
  """
  from crackjax.experiment.build import build

  experiments = {k: build(c) for k, c in configs.items()}
  for job in jobs:
    identity.check_identity(job.directory(workdir), experiments[job.id].fingerprint, record=False)
  prepared = set()
  for experiment in experiments.values():
    key = json.dumps(experiment.config.data.to_dict(), sort_keys=True, default=str)
    if key not in prepared:
      experiment.splits.prepare()
      check_data(experiment)
      prepared.add(key)
  return experiments
