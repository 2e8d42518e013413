"""The runner's SLURM executor without a SLURM: its settings, the worker command, the one-line
refusals, --status of a campaign, and the task's checkpoint protocol on a fake worker
(tests/test_slurm.py runs it on a real one-node SLURM)."""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from crackjax.paper import jobs, runner, slurm
from crackjax.runs import identity


def test_settings_become_submitits_parameters():
  params = slurm.Settings(
    partition='gpu',
    time_min=90,
    gpus=1,
    account='lab',
    array_parallelism=8,
    cpus=10,
    mem_gb=32,
    options=('qos=high', '--constraint=a100', 'hold'),
  ).parameters()
  assert params == {
    'job_name': 'crackjax',
    'time': 90,
    'array_parallelism': 8,
    'stderr_to_stdout': False,
    'partition': 'gpu',
    'account': 'lab',
    'gpus_per_node': 1,
    'cpus_per_task': 10,
    'mem': '32768MB',
    'additional_parameters': {'qos': 'high', 'constraint': 'a100', 'hold': True},
  }
  # The cluster's defaults where nothing is asked for.
  assert set(slurm.Settings().parameters()) == {
    'job_name',
    'time',
    'array_parallelism',
    'stderr_to_stdout',
  }


@pytest.mark.parametrize(
  'settings, says',
  [
    (slurm.Settings(options=('qos=',)), '--slurm_option=qos=: expected NAME=VALUE'),
    (slurm.Settings(options=('=high',)), '--slurm_option==high: expected NAME=VALUE'),
    (slurm.Settings(time_min=2), '--slurm_time=2: at least 3 minutes'),
    (slurm.Settings(gpus=-1), '--slurm_gpus'),
  ],
)
def test_bad_settings_are_one_line(settings, says):
  with pytest.raises(ValueError, match=says):
    settings.parameters()


def test_the_worker_command_drops_the_scheduling_and_slurm_flags():
  full = [
    runner.PROG,
    '--table=1',
    '--rows=wce_xie_e5',
    '--workdir=w',
    '--executor=slurm',
    '--slurm_partition=gpu',
    '--slurm_time=30',
    '--wait',
    '--set=data.manual_dir=d',
  ]
  assert slurm.worker_command(full) == [
    sys.executable,
    '-m',
    'crackjax.paper.runner',
    '--table=1',
    '--rows=wce_xie_e5',
    '--workdir=w',
    '--set=data.manual_dir=d',
    '--parallel=1',
  ]


def test_slurm_with_local_scheduling_flags_is_one_line(tmp_path):
  with pytest.raises(SystemExit, match=r'--parallel, --max_minutes schedule local jobs'):
    runner.main(
      ['--table=1', f'--workdir={tmp_path}', '--executor=slurm', '--parallel=2', '--max_minutes=3']
    )


def test_slurm_without_sbatch_is_one_line_naming_the_script(tmp_path, monkeypatch):
  monkeypatch.setenv('PATH', str(tmp_path))  # no sbatch
  with pytest.raises(SystemExit) as stopped:
    runner.main(['--table=1', f'--workdir={tmp_path / "w"}', '--executor=slurm'])
  message = str(stopped.value.code)
  assert 'no sbatch on PATH' in message and 'scripts/slurm_local.sh start' in message
  assert '\n' not in message


def test_sbatch_without_srun_is_one_line(tmp_path, monkeypatch):
  fake = tmp_path / 'bin'
  fake.mkdir()
  sbatch = fake / 'sbatch'
  sbatch.write_text('#!/bin/sh\nexit 0\n')
  sbatch.chmod(0o755)
  monkeypatch.setenv('PATH', str(fake))  # sbatch alone: no srun, no squeue
  with pytest.raises(SystemExit) as stopped:
    runner.main(['--table=1', f'--workdir={tmp_path / "w"}', '--executor=slurm'])
  message = str(stopped.value.code)
  assert 'sbatch is on PATH but srun and squeue not' in message and '\n' not in message


def test_sbatchs_error_line_is_kept():
  text = (
    'Command [sbatch, /w/slurm/.submission_file.sh] failed with return code 1 and stderr:\n'
    'sbatch: error: invalid partition specified: gpu\n'
    'sbatch: error: Batch job submission failed: Invalid partition name specified\n'
  )
  assert slurm.sbatch_error(text) == (
    'sbatch: error: Batch job submission failed: Invalid partition name specified'
  )


def _record(directory: Path, epoch: int) -> None:
  directory.mkdir(parents=True, exist_ok=True)
  identity.write_json(identity.epoch_path(directory, epoch), {'epoch': epoch, 'results': {}})


def test_status_reads_the_records_and_the_submissions(tmp_path, monkeypatch, capsys):
  todo = jobs.select_jobs(1, ['wce_xie_e5', 'wce_exp_0.75_e5'], [0])
  xie, exp = todo
  for e in range(1, 6):
    _record(xie.directory(tmp_path), e)
  _record(exp.directory(tmp_path), 1)
  # A local campaign: epochs only.
  assert runner.main(['--table=1', '--rows=wce_xie_e5,wce_exp_0.75_e5', '--seeds=1',
                      f'--workdir={tmp_path}', '--status']) == 0  # fmt: skip
  out = capsys.readouterr().out.splitlines()
  assert out[0] == f'{tmp_path}: 2 jobs: 1 complete, 1 unfinished'
  assert out[1].split() == ['1:wce_xie:0', '5/5', 'epochs', 'not', 'submitted']
  assert out[2].split() == ['1:wce_exp_0.75:0', '1/5', 'epochs', 'not', 'submitted']
  # Submitted: the queue's state, else the ended job's.
  slurm.record_submission(tmp_path, {xie.id: '7_0', exp.id: '7_1'})
  monkeypatch.setattr(slurm, 'queue', lambda: {'7_1': ('RUNNING', 'None')})
  monkeypatch.setattr(slurm, 'ended_state', lambda i: {'7_0': 'COMPLETED'}.get(i))
  lines = slurm.status_lines(todo, tmp_path)
  assert lines[0] == f'{tmp_path}: 2 jobs: 1 complete, 1 running'
  assert lines[1].split()[-3:] == ['SLURM', '7_0', 'COMPLETED']
  assert lines[2].split()[-3:] == ['SLURM', '7_1', 'RUNNING']
  assert 'worker.log' in lines[-1]
  recorded = json.loads((tmp_path / 'slurm' / 'submitted.json').read_text())
  assert recorded['jobs'][xie.id]['slurm_id'] == '7_0'
  assert slurm.live(tmp_path) == {exp.id: '7_1'}
  # A job that waits says why (here: held, `scontrol release 7_1` lets it go).
  monkeypatch.setattr(slurm, 'queue', lambda: {'7_1': ('PENDING', 'JobHeldUser')})
  lines = slurm.status_lines(todo, tmp_path)
  assert lines[0] == f'{tmp_path}: 2 jobs: 1 complete, 1 queued'
  assert lines[2].endswith('SLURM 7_1 PENDING (JobHeldUser)')


# A worker that saves on SIGTERM, as the runner's (`exit_on_sigterm`), and says so.
FAKE_WORKER = """
import signal, sys, time
def stop(*_):
  print('saved', flush=True)
  sys.exit(1)
signal.signal(signal.SIGTERM, stop)
print('started', sys.argv[-1], flush=True)
time.sleep(60)
"""


def _checkpointed(tmp_path: Path, worker: str, job_id: str) -> tuple[slurm.Task, Path, dict, Any]:
  """A `slurm.Task` of the script `worker` running `job_id` in a thread, as submitit runs it,
  sent `checkpoint` (USR2's hook) once its worker has printed 'started'. Returns the task, its
  worker's log, the call's outcome ('result', or its RuntimeError's 'error') and what
  `checkpoint` returned."""
  script = tmp_path / 'worker.py'
  script.write_text(worker)
  task = slurm.Task([sys.executable, str(script)], str(tmp_path))
  directory = tmp_path / 'table1' / 'wce_xie' / 'seed0'
  outcome = {}

  def call():
    try:
      outcome['result'] = task(job_id, str(directory))
    except RuntimeError as e:
      outcome['error'] = str(e)

  thread = threading.Thread(target=call)
  thread.start()
  log = directory / 'worker.log'
  deadline = time.monotonic() + 30
  while 'started' not in (log.read_text() if log.exists() else ''):
    assert time.monotonic() < deadline, 'the worker did not start'
    time.sleep(0.1)
  again = task.checkpoint(job_id, str(directory))
  thread.join(30)
  assert not thread.is_alive()
  return task, log, outcome, again


def test_the_tasks_checkpoint_lets_the_worker_save_and_resubmits_the_same_call(tmp_path):
  pytest.importorskip('submitit')
  task, log, outcome, again = _checkpointed(tmp_path, FAKE_WORKER, '1:wce_xie:0')
  lines = log.read_text().splitlines()
  assert lines[-3:-1] == ['started --job=1:wce_xie:0', 'saved']
  assert lines[-1].endswith(
    'the worker saved its checkpoint; the job is requeued and resumes from it.'
  )
  # (In a SLURM job submitit ends the task after `checkpoint`, before this.)
  assert outcome['error'].startswith('1:wce_xie:0 failed (exit 1: ')
  # The requeued job makes the same call (and the worker resumes from its checkpoint).
  assert again.function is task and again.args == ('1:wce_xie:0', str(log.parent))
  # Picklable without its process (submitit dumps it for the requeued job).
  import pickle

  assert pickle.loads(pickle.dumps(task)).command == task.command


def test_a_slurm_tasks_worker_ignores_usr2(monkeypatch):
  before = signal.getsignal(signal.SIGUSR2)
  try:
    monkeypatch.delenv(slurm.TASK_ENV, raising=False)
    slurm.leave_preemption_to_the_task()
    assert signal.getsignal(signal.SIGUSR2) == before
    monkeypatch.setenv(slurm.TASK_ENV, '7_0')
    slurm.leave_preemption_to_the_task()
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGUSR2)  # would end this process otherwise
  finally:
    signal.signal(signal.SIGUSR2, before)


# A worker that does not end on SIGTERM (stuck, as the CI's worker whose SIGTERM JAX's gc
# callback swallowed).
STUCK_WORKER = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('started', sys.argv[-1], flush=True)
time.sleep(60)
"""


def test_the_tasks_checkpoint_kills_a_worker_that_does_not_save_and_says_so(tmp_path, monkeypatch):
  pytest.importorskip('submitit')
  monkeypatch.setattr(slurm, 'SAVE_SECONDS', 1)
  _, log, outcome, _ = _checkpointed(tmp_path, STUCK_WORKER, 'j')
  assert outcome['error'].startswith('j failed (exit -9: '), outcome  # SIGKILL
  last = log.read_text().splitlines()[-1]
  assert 'saved its checkpoint' not in last
  assert last.endswith(
    'the worker had not saved 1 s after SIGTERM and was killed; the job is requeued and resumes '
    "from its last saved checkpoint (an epoch's)."
  )
