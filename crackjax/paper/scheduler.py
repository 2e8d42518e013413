"""How the reproduction runner runs its jobs: here one by one, or side by side in worker
processes spread over the GPUs; within a time limit; and which jobs of a chunk fit it.

Side by side (``--parallel=N``): each job runs in its own process, the runner's command with
``--job=<id>`` (`run_workers`). Processes are spread over the GPUs (``--gpus``, default all
that ``nvidia-smi -L`` lists; one process per GPU when N <= GPUs) and share a GPU with
``XLA_PYTHON_CLIENT_MEM_FRACTION`` = 0.9 / (processes on it) (`worker_env`). A worker ends with
its runner (`end_with_runner`). At the deadline (``--max_minutes``) running jobs get SIGTERM and
save a checkpoint; nothing new starts. The plan (`plan_chunk`, `crackjax.paper.plan`) says which
jobs fit the time from the epoch timings of earlier runs on the same GPU kind.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from crackjax import cli
from crackjax.paper.jobs import Job, run_job
from crackjax.runs import exits, identity


class RunnerEndedError(RuntimeError):
  """A worker's runner has ended before the worker could tie its end to the runner's."""


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

  Raises:
    RunnerEndedError: the runner has ended already.
  """
  runner = os.environ.get(RUNNER_PID_ENV, '')
  if not runner.isdigit():
    return
  # A Ctrl-C in the terminal reaches the whole process group; the runner answers it with one
  # SIGTERM to each worker (`run_workers`), so that a worker saving its checkpoint is never
  # interrupted by a second signal.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    return  # not Linux: the worker outlives a killed runner
  if os.getppid() != int(runner):
    raise RunnerEndedError(f'the runner (pid {runner}) has ended; this worker stops too.')


def run_workers(
  jobs: Sequence[Job],
  command: Sequence[str],
  workdir: Path,
  *,
  parallel: int,
  gpus: Sequence[str],
  deadline: float | None,
  env: dict[str, str] | None = None,
) -> dict[str, str]:
  """Runs every job in a subprocess, `command` (the runner's command line) plus
  `--job=<job id>`, `parallel` at a time; at the deadline the running ones get SIGTERM (they
  save a checkpoint) and nothing new starts.

  Returns:
    job id -> 'done', 'failed (exit N: <the log's last line>), see <log>' or 'not started' /
    'stopped at the time limit'.
  """
  pending = list(jobs)
  running: dict[int, tuple[Job, subprocess.Popen, Any]] = {}
  status: dict[str, str] = {}
  exits.clear_interrupt()
  try:
    _schedule(pending, running, status, command, workdir, parallel, gpus, deadline, env)
  except KeyboardInterrupt:
    raise exits.Interrupted(_stop_workers(running, status)) from None
  return status


def _stop_workers(running: dict[int, tuple[Job, subprocess.Popen, Any]], status) -> str:
  """After Ctrl-C: SIGTERM to each running worker (it saves its checkpoint), a wait of up to
  two minutes each; returns the one line that says what was kept."""
  print(f'Ctrl-C: stopping {len(running)} running job(s); each saves its checkpoint.', flush=True)
  for _, proc, _ in running.values():
    proc.send_signal(signal.SIGTERM)
  stopped = []
  for job, proc, log in running.values():
    try:
      proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
      proc.kill()  # did not save within two minutes of SIGTERM
      proc.wait()
    log.close()
    stopped.append(job.id)
  done = sum(v == 'done' for v in status.values())
  kept = f'; {", ".join(stopped)} saved their checkpoints' if stopped else ''
  return (
    f'interrupted (Ctrl-C) with {done} job(s) done{kept}: run the same command again to resume.'
  )


def _schedule(pending, running, status, command, workdir, parallel, gpus, deadline, env) -> None:
  stopping = False
  while pending or running:
    # A Ctrl-C whose KeyboardInterrupt landed in a finalizer was swallowed there ('Exception
    # ignored in ...'); `exits.watch_interrupts` remembered it. Seen in the slow tier: the
    # runner went on until its workers had finished.
    if exits.interrupt_requested():
      raise KeyboardInterrupt
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
      cmd = [*command, f'--job={job.id}']
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


def last_log_line(path: Path, limit: int = 200) -> str:
  """The last non-empty line of a worker's log (its error: the exception or the one-line
  message it exited with; a flag error's help hint after it is skipped), cut to `limit`
  characters."""
  try:
    lines = [ln.strip() for ln in path.read_text(errors='replace').splitlines() if ln.strip()]
    lines = [ln for ln in lines if ln != cli.HELP_HINT]
  except OSError:
    return 'no log'
  last = lines[-1] if lines else 'empty log'
  return last if len(last) <= limit else last[: limit - 3] + '...'


# ------------------------------------------------------------------------------------ planning


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


def worker_argv(full_argv: Sequence[str]) -> list[str]:
  """The command's own flags (`full_argv` without the program), without the scheduling ones,
  for the `--job` workers."""
  drop = ('--parallel', '--gpus', '--max_minutes', '--job', '--list', '--plan', '--fit')
  return [a for a in full_argv[1:] if not a.startswith(drop)]


# ----------------------------------------------------------------------------------- all the jobs


def run(
  jobs: Sequence[Job],
  experiments: Mapping[str, Any],
  *,
  workdir: str,
  parallel: int,
  gpus: Sequence[str] | None,
  max_minutes: float,
  command: Sequence[str],
  env: dict[str, str],
) -> int:
  """Runs `jobs` here one by one (`parallel` 1 and no time limit), or else in worker
  processes (`command` plus --job, in environment `env`); prints and returns the outcome: 1 if
  a job failed, else 0."""
  print(f'{len(jobs)} jobs: {", ".join(j.id for j in jobs)}', flush=True)
  deadline = time.monotonic() + 60 * max_minutes if max_minutes > 0 else None
  if parallel == 1 and deadline is None:
    status = run_here(jobs, experiments, workdir)
  else:
    status = run_workers(
      jobs,
      command,
      Path(workdir),
      parallel=parallel,
      gpus=gpus if gpus is not None else available_gpus(),
      deadline=deadline,
      env=env,
    )
  unfinished = {k: v for k, v in status.items() if v not in ('done', 'skipped')}
  print(f'{len(status) - len(unfinished)} of {len(status)} jobs complete.')
  for k, v in unfinished.items():
    print(f'  {k}: {v}')
  return 1 if any(v.startswith('failed') for v in unfinished.values()) else 0


def run_here(jobs: Sequence[Job], experiments: Mapping[str, Any], workdir: str) -> dict[str, str]:
  """Runs `jobs` one after the other in this process; a job that fails ends itself only.

  Returns:
    job id -> 'done', 'skipped' or 'failed (...)'.
  """
  exits.exit_on_sigterm()
  status = {}
  for job in jobs:
    try:
      status[job.id] = run_job(job, workdir, experiments[job.id])
    except (identity.RunMismatchError, identity.RunLockedError) as e:
      status[job.id] = f'failed: {e}'
    except Exception as e:  # noqa: BLE001 (one job's failure ends that job, as a worker's)
      # As with workers: one line here, the traceback in the job's log, the next job goes on.
      log = job.directory(workdir) / 'worker.log'
      log.parent.mkdir(parents=True, exist_ok=True)
      with open(log, 'a') as f:
        f.write(f'\n==== {time.strftime("%Y-%m-%d %H:%M:%S")} in the runner\n')
        f.write(traceback.format_exc())
      first = (str(e).splitlines() or [''])[0]
      status[job.id] = f'failed ({type(e).__name__}: {first}), see {log}'
    print(f'{job.id}: {status[job.id]}', flush=True)
  return status
