"""The reproduction runner on a SLURM cluster (``--executor=slurm``), through submitit.

One command submits one array job (a campaign chunk): each task of the array is one job of
the campaign (a training group and a seed) and runs the runner's own worker,
``python -m crackjax.paper.runner <the command's flags> --job=<id>``, in a child process whose
output goes to the job's ``worker.log``, exactly as a local worker (`crackjax.paper.scheduler`)
does; each job keeps its own workdir, ``<workdir>/table<T>/<group>/seed<S>/``, so the records,
the resume and the report are those of a local campaign.

Resuming. submitit asks SLURM for ``--signal=USR2@90``: 90 s before the time limit, or when the
job is preempted, the task gets USR2 and submitit calls `Task.checkpoint`: the worker gets
SIGTERM and saves its checkpoint (`crackjax.runs.exits.exit_on_sigterm`), then submitit
requeues the job (``scontrol requeue``), and the requeued job continues from that checkpoint.
A job that ended otherwise (``scancel``, a crash, a node lost) is resubmitted by running the
same command again: finished jobs and jobs still queued or running are left alone, every other
one continues from its last checkpoint.

Where things are: the submission's files (sbatch script, pickled task, submitit's logs
``<array>_<index>_0_log.out`` and ``.err``) under ``<workdir>/slurm/``, which job went to which
SLURM id in ``<workdir>/slurm/submitted.json``, and the training's own lines in each job's
``worker.log``. `status_lines` (``--status``) reads them with the queue's states.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from crackjax.paper.jobs import ArrayJob, Job
from crackjax.runs import identity

#: The folder of the submission's files, under the campaign's workdir.
FOLDER = 'slurm'
#: Which campaign job went to which SLURM job id (`record_submission`).
SUBMITTED_FILE = 'submitted.json'
#: SLURM states of a job that is still to run or running (squeue's long names).
LIVE_STATES = frozenset(
  'PENDING CONFIGURING RUNNING COMPLETING REQUEUED REQUEUE_HOLD REQUEUE_FED RESIZING SUSPENDED '
  'STOPPED SIGNALING STAGE_OUT'.split()
)
#: Seconds a worker has to save its checkpoint after USR2 (submitit's signal comes 90 s before
#: the time limit).
SAVE_SECONDS = 75
#: Set in a worker's environment by its SLURM task (`Task`): the SLURM job id.
TASK_ENV = 'CRACKJAX_SLURM_TASK'
#: The shortest time limit of a job, minutes: submitit asks for USR2 90 s before it.
MIN_TIME_MIN = 3
#: Seconds between two looks at the queue while --wait waits.
POLL_SECONDS = 5.0

NO_CLIENT = '--executor=slurm needs sbatch, srun and squeue (or: scripts/slurm_local.sh start).'
NO_SUBMITIT = "--executor=slurm needs submitit: pip install 'crackjax[slurm]' (or submitit)."
NO_SLURM = (
  'no sbatch on PATH: --executor=slurm runs where SLURM jobs are submitted (a login node); '
  'for a one-node SLURM on this machine: sudo bash scripts/slurm_local.sh start.'
)


class SlurmError(RuntimeError):
  """A submission or a query SLURM refused; the message is one line naming SLURM's own."""


@dataclasses.dataclass(frozen=True)
class Settings:
  """The sbatch settings of every job of a submission (the runner's --slurm_* flags).

  Attributes:
    partition: SLURM partition (sbatch --partition); None: the cluster's default.
    time_min: time limit of one job, minutes (--time); a job that reaches it is requeued and
      resumes from its checkpoint.
    gpus: GPUs per job (--gpus-per-node); 0 for none.
    account: account charged (--account); None: the user's default.
    array_parallelism: jobs of the array running at once at most (--array=0-N%P).
    cpus: CPU cores per job (--cpus-per-task); None: the cluster's default.
    mem_gb: memory per job in GB (--mem); None: the cluster's default.
    options: further sbatch options, each 'name=value' (e.g. 'qos=high', 'constraint=a100'),
      or a name alone for a flag ('hold').
  """

  partition: str | None = None
  time_min: int = 60
  gpus: int = 0
  account: str | None = None
  array_parallelism: int = 256
  cpus: int | None = None
  mem_gb: float | None = None
  options: tuple[str, ...] = ()

  def parameters(self) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters.

    Raises:
      ValueError: a setting out of range or an option without '=' (one line).
    """
    if self.time_min < MIN_TIME_MIN:
      raise ValueError(
        f'--slurm_time={self.time_min}: at least {MIN_TIME_MIN} minutes (a job is warned 90 s '
        'before its limit, to save its checkpoint and be requeued).'
      )
    if self.gpus < 0 or self.array_parallelism < 1:
      raise ValueError('--slurm_array_parallelism must be >= 1 and --slurm_gpus >= 0.')
    extra = {}
    for option in self.options:
      name, sep, value = option.partition('=')
      name = name.removeprefix('--')
      if not name or (sep and not value):
        raise ValueError(
          f'--slurm_option={option}: expected NAME=VALUE (e.g. qos=high) or a NAME alone (hold).'
        )
      extra[name] = value if sep else True
    params: dict[str, Any] = {
      'job_name': 'crackjax',
      'time': self.time_min,
      'array_parallelism': self.array_parallelism,
      'stderr_to_stdout': False,
    }
    optional = {
      'partition': self.partition,
      'account': self.account,
      'gpus_per_node': self.gpus or None,
      'cpus_per_task': self.cpus,
      'mem': f'{int(self.mem_gb * 1024)}MB' if self.mem_gb else None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    if extra:
      params['additional_parameters'] = extra
    return params


# ----------------------------------------------------------------------------- inside the job

# The worker of the task running in this process (one per SLURM job), for `Task.checkpoint`.
_RUNNING: dict[str, subprocess.Popen] = {}


class Task:
  """One campaign job inside its SLURM job: the runner's worker in a child process.

  submitit pickles it with the job's arguments, runs it on the node, and on USR2 (time limit,
  preemption) calls `checkpoint`, which lets the worker save and returns the same call for the
  requeued job (submitit's checkpointing protocol: a `checkpoint` method returning a
  `submitit.helpers.DelayedSubmission`).
  """

  def __init__(self, command: Sequence[str], cwd: str) -> None:
    """
    Args:
      command: the runner's worker command without --job (`worker_command`).
      cwd: the folder the command was typed in (relative paths of the flags).
    """
    self.command = list(command)
    self.cwd = cwd

  def __call__(self, job_id: str, directory: str) -> str:
    """Runs the worker of `job_id` (its workdir `directory`) to its end; returns 'done'.

    Raises:
      RuntimeError: the worker failed (its exit status and its log's last line).
    """
    from crackjax.paper import scheduler

    log_path = Path(directory) / 'worker.log'
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, 'a') as log:
      slurm_id = _own_slurm_id()
      log.write(f'\n==== {time.strftime("%Y-%m-%d %H:%M:%S")} SLURM job {slurm_id}\n')
      log.flush()
      proc = subprocess.Popen(
        [*self.command, f'--job={job_id}'],
        cwd=self.cwd,
        env={**os.environ, scheduler.RUNNER_PID_ENV: str(os.getpid()), TASK_ENV: slurm_id},
        stdout=log,
        stderr=subprocess.STDOUT,
      )
      _RUNNING[job_id] = proc
      # poll, not wait: a blocking wait holds Popen's lock, which `checkpoint` (run by the
      # USR2 handler in this thread) needs to see the worker end.
      while proc.poll() is None:
        time.sleep(0.5)
    _RUNNING.pop(job_id, None)
    if proc.returncode:
      raise RuntimeError(
        f'{job_id} failed (exit {proc.returncode}: {scheduler.last_log_line(log_path)}), '
        f'see {log_path}'
      )
    return 'done'

  def checkpoint(self, job_id: str, directory: str) -> Any:
    """submitit's hook on USR2: SIGTERM to the worker, which saves a checkpoint (up to
    `SAVE_SECONDS`); returns the same call, which the requeued job makes (it resumes)."""
    from submitit.helpers import DelayedSubmission

    outcome = 'the worker saved its checkpoint; the job is requeued and resumes from it'
    proc = _RUNNING.get(job_id)
    if proc is not None and proc.poll() is None:
      proc.send_signal(signal.SIGTERM)
      deadline = time.monotonic() + SAVE_SECONDS
      while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
      if proc.poll() is None:
        proc.kill()
        proc.wait()
        outcome = (
          f'the worker had not saved {SAVE_SECONDS} s after SIGTERM and was killed; the job is '
          "requeued and resumes from its last saved checkpoint (an epoch's)"
        )
    with open(Path(directory) / 'worker.log', 'a') as log:
      log.write(
        f'==== {time.strftime("%Y-%m-%d %H:%M:%S")} SLURM job {_own_slurm_id()}: USR2 (its time '
        f'limit is near, or it is preempted): {outcome}.\n'
      )
    return DelayedSubmission(self, job_id, directory)


def leave_preemption_to_the_task() -> None:
  """In a worker started by a SLURM task (`TASK_ENV`), first thing: ignore USR2. SLURM signals
  every process of the job (``scancel --signal=USR2``, the time limit's warning); USR2's default
  action would end the worker at once, in the middle of a checkpoint's save (seen: a
  ``<step>.orbax-checkpoint-tmp`` left behind). Its task handles it: `Task.checkpoint` sends
  the worker SIGTERM, which saves and ends it."""
  if os.environ.get(TASK_ENV):
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def _own_slurm_id() -> str:
  """This process's SLURM job as squeue names it: <array>_<index> in an array, else the id."""
  array, index = os.environ.get('SLURM_ARRAY_JOB_ID'), os.environ.get('SLURM_ARRAY_TASK_ID')
  if array and index:
    return f'{array}_{index}'
  return os.environ.get('SLURM_JOB_ID', '?')


# ---------------------------------------------------------------------------------- submitting


def check_available() -> None:
  """Raises SlurmError (one line) where jobs cannot be submitted: no submitit, no sbatch."""
  try:
    import submitit  # noqa: F401
  except ImportError:
    raise SlurmError(NO_SUBMITIT) from None
  if shutil.which('sbatch') is None:
    raise SlurmError(NO_SLURM)
  # submitit's job scripts run the task with srun (sbatch alone ended in its traceback).
  if missing := [c for c in ('srun', 'squeue') if shutil.which(c) is None]:
    raise SlurmError(f'sbatch is on PATH but {" and ".join(missing)} not: {NO_CLIENT}')


def folder(workdir: str | Path) -> Path:
  """The submission's files of the campaign in `workdir`."""
  return Path(workdir) / FOLDER


def submitted(workdir: str | Path) -> dict[str, dict[str, Any]]:
  """Campaign job id -> its latest submission ({'slurm_id', 'submitted'}); {} if none."""
  path = folder(workdir) / SUBMITTED_FILE
  if not path.exists():
    return {}
  record = identity.read_record(path, required=('jobs',))
  return dict(record['jobs']) if record else {}


def record_submission(workdir: str | Path, ids: Mapping[str, str]) -> None:
  """Adds `ids` (campaign job id -> SLURM job id) to the campaign's submitted.json."""
  jobs = submitted(workdir)
  now = time.strftime('%Y-%m-%d %H:%M:%S %Z')
  jobs.update({k: {'slurm_id': v, 'submitted': now} for k, v in ids.items()})
  folder(workdir).mkdir(parents=True, exist_ok=True)
  identity.write_json(folder(workdir) / SUBMITTED_FILE, {'jobs': jobs})


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
  """os.environ is `env` meanwhile: sbatch hands the submitter's environment to the jobs."""
  saved = dict(os.environ)
  os.environ.clear()
  os.environ.update(env)
  try:
    yield
  finally:
    os.environ.clear()
    os.environ.update(saved)


def submit(
  jobs: Sequence[ArrayJob],
  workdir: str | Path,
  settings: Settings,
  command: Sequence[str],
  *,
  env: Mapping[str, str] | None = None,
) -> dict[str, str]:
  """Submits `jobs` as one array job, one task each (`Task`), and records them.

  Args:
    jobs: the campaign's jobs to run.
    workdir: the campaign's workdir.
    settings: the sbatch settings.
    command: the worker command without --job (`worker_command`).
    env: the jobs' environment (default this process's); sbatch passes it on.

  Returns:
    campaign job id -> SLURM job id (<array>_<index>).

  Raises:
    SlurmError: sbatch refused (its error line).
    ValueError: a setting out of range.
  """
  import submitit

  executor = submitit.SlurmExecutor(folder=folder(workdir))
  executor.update_parameters(**settings.parameters())
  task = Task(command, os.getcwd())
  directories = [str(j.directory(workdir)) for j in jobs]
  try:
    # submitit prints sbatch's refusal to stderr, then raises it: said once, in our line.
    with _environ(os.environ if env is None else env), contextlib.redirect_stderr(io.StringIO()):
      handles = executor.map_array(task, [j.id for j in jobs], directories)
  except (submitit.core.utils.FailedJobError, subprocess.SubprocessError, OSError) as e:
    raise SlurmError(f'sbatch refused the jobs: {sbatch_error(str(e))}') from None
  ids = {j.id: h.job_id for j, h in zip(jobs, handles, strict=True)}
  record_submission(workdir, ids)
  return ids


def sbatch_error(text: str) -> str:
  """sbatch's own error line out of submitit's message (the last 'error:' line)."""
  lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
  errors = [ln for ln in lines if 'error' in ln.lower()]
  return (errors or lines or ['no output'])[-1]


def worker_command(full_argv: Sequence[str]) -> list[str]:
  """The runner's worker command for a SLURM task: this interpreter, the command's own flags
  (`full_argv` without the program) without the scheduling and SLURM ones, --parallel=1 (a job
  alone on its allocation)."""
  from crackjax.paper import scheduler

  drop = ('--executor', '--slurm_', '--wait', '--status', '--noslurm', '--nowait', '--nostatus')
  own = [a for a in scheduler.worker_argv(full_argv) if not a.startswith(drop)]
  return [sys.executable, '-m', 'crackjax.paper.runner', *own, '--parallel=1']


# ------------------------------------------------------------------------------------ states


def _run(command: Sequence[str]) -> subprocess.CompletedProcess | None:
  try:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.SubprocessError):
    return None


def queue() -> dict[str, tuple[str, str]]:
  """SLURM id (<array>_<index> for array tasks) -> (state, squeue's reason: why it waits, e.g.
  'Resources', 'JobHeldUser', 'PartitionTimeLimit'; 'None' when running), of this user's jobs
  in the queue."""
  out = _run(['squeue', '-h', '-r', '-u', getpass.getuser(), '-o', '%i|%T|%r'])
  if out is None or out.returncode:
    return {}
  jobs = {}
  for line in out.stdout.splitlines():
    slurm_id, state, reason = (line.strip().split('|') + ['', ''])[:3]
    if slurm_id:
      jobs[slurm_id] = (state.strip(), reason.strip())
  return jobs


def queue_states() -> dict[str, str]:
  """SLURM id -> state, of this user's jobs in the queue (`queue`)."""
  return {k: state for k, (state, _) in queue().items()}


def ended_state(slurm_id: str) -> str | None:
  """The state of a job no longer queued: scontrol's (minutes after its end), else sacct's
  (where the cluster keeps accounting); None if neither knows it."""
  out = _run(['scontrol', '-o', 'show', 'job', slurm_id])
  if out is not None and out.returncode == 0:
    for field in out.stdout.split():
      if field.startswith('JobState='):
        return field.split('=', 1)[1]
  out = _run(['sacct', '-n', '-X', '-P', '-o', 'JobID,State', '-j', slurm_id])
  if out is not None and out.returncode == 0:
    for line in out.stdout.splitlines():
      job, _, state = line.partition('|')
      if job.strip() == slurm_id and state.strip():
        return state.split()[0]
  return None


def states(slurm_ids: Sequence[str]) -> dict[str, str]:
  """SLURM id -> its state (queued, with the reason it waits, e.g. 'PENDING (JobHeldUser)';
  else ended; else 'UNKNOWN')."""
  queued = queue()
  out = {}
  for i in slurm_ids:
    if i in queued:
      state, reason = queued[i]
      out[i] = f'{state} ({reason})' if state == 'PENDING' and reason else state
    else:
      out[i] = ended_state(i) or 'UNKNOWN'
  return out


def live(workdir: str | Path) -> dict[str, str]:
  """Campaign job id -> SLURM id, of the campaign's submissions still queued or running."""
  queued = queue_states()
  return {
    job: s['slurm_id']
    for job, s in submitted(workdir).items()
    if queued.get(s['slurm_id']) in LIVE_STATES
  }


def status_lines(jobs: Sequence[Job], workdir: str | Path) -> list[str]:
  """--status: one line per job (epochs evaluated, and its SLURM id and state if submitted),
  then a summary line and where the logs are."""
  subs = submitted(workdir)
  known = states([subs[j.id]['slurm_id'] for j in jobs if j.id in subs]) if subs else {}
  lines, counts = [], {'complete': 0, 'running': 0, 'queued': 0, 'unfinished': 0}
  width = max((len(j.id) for j in jobs), default=0)
  for job in jobs:
    epochs = len(
      set(identity.evaluated_epochs(job.directory(workdir))) & set(range(1, 1 + job.epochs))
    )
    where = 'not submitted'
    state = None
    if job.id in subs:
      slurm_id = subs[job.id]['slurm_id']
      state = known.get(slurm_id, 'UNKNOWN')
      where = f'SLURM {slurm_id} {state}'
    if epochs == job.epochs:
      counts['complete'] += 1
    elif state == 'RUNNING':
      counts['running'] += 1
    elif state and state.split()[0] in LIVE_STATES:
      counts['queued'] += 1
    else:
      counts['unfinished'] += 1
    lines.append(f'  {job.id:<{width}}  {epochs:>3}/{job.epochs} epochs  {where}')
  summary = ', '.join(f'{v} {k}' for k, v in counts.items() if v)
  lines.insert(0, f'{workdir}: {len(jobs)} jobs: {summary or "none"}')
  if subs:
    lines.append(
      f"Logs: each job's worker.log; submitit's in {folder(workdir)}/<SLURM id>_0_log.out|err. "
      'Unfinished jobs not queued: run the same command again to resubmit them.'
    )
  return lines


def wait(jobs: Sequence[Job], workdir: str | Path, ids: Mapping[str, str]) -> dict[str, str]:
  """Waits until none of `ids` (campaign job id -> SLURM id) is queued or running, printing
  each job as it ends.

  Returns:
    campaign job id -> 'done', or what it ended with (SLURM state, epochs evaluated).
  """
  pending = dict(ids)
  status: dict[str, str] = {}
  by_id = {j.id: j for j in jobs}
  while pending:
    queued = queue_states()
    for job_id, slurm_id in list(pending.items()):
      if queued.get(slurm_id) in LIVE_STATES:
        continue
      job = by_id[job_id]
      epochs = set(identity.evaluated_epochs(job.directory(workdir)))
      if set(range(1, job.epochs + 1)) <= epochs:
        status[job_id] = 'done'
      else:
        state = ended_state(slurm_id) or 'no longer queued'
        status[job_id] = (
          f'{state} after {len(epochs)} of {job.epochs} epochs, see '
          f'{job.directory(workdir) / "worker.log"}'
        )
      del pending[job_id]
      print(f'{job_id} (SLURM {slurm_id}): {status[job_id]}', flush=True)
    if pending:
      time.sleep(POLL_SECONDS)
  return status
