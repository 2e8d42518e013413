"""Fault injection on a training run: Ctrl-C at several points, a non-finite step at step 1
and later, a full or read-only disk during a checkpoint save, two writers of one workdir, a
finished run relaunched, a run killed between its metrics and its checkpoint. Each case
asserts the one line the command ends with, its exit status, and that nothing was lost.

The commands run as users run them (launch.py in a subprocess, real signals, a real full
tmpfs where this machine lets a test mount one); the cases that need a fault at an exact step
inject it in process through the same entry point (`train_command.run_or_exit`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp
import pytest

from crackjax import cli
from crackjax.data import loader
from crackjax.engine import checkpoint_saves, checkpoints
from crackjax.experiment.build import build
from crackjax.paper import scheduler
from crackjax.runs import exits, identity
from crackjax.trainer import evaluate_command, loop, train_command
from tests import fixtures

REPO = Path(__file__).resolve().parents[2]
TRACEBACK = 'Traceback (most recent call last)'


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  """A fake CrackForest and its prepared TFDS copy, shared by this module."""
  return fixtures.smoke_data_dirs(tmp_path_factory.mktemp('data'))


def _launch_argv(workdir: Path, data_dirs, *flags: str) -> list[str]:
  raw, tfds_dir = data_dirs
  return [
    sys.executable,
    str(REPO / 'launch.py'),
    '--config=configs/smoke.py',
    f'--workdir={workdir}',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={tfds_dir}',
    *flags,
  ]


class _Reader:
  """The stderr of a running process, collected by a thread, for waiting on its progress."""

  def __init__(self, proc: subprocess.Popen):
    self.text = ''
    self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
    self._thread.start()

  def _read(self, proc):
    for chunk in iter(lambda: proc.stderr.read(64), ''):
      self.text += chunk

  def wait_for(self, pattern: str, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not re.search(pattern, self.text):
      assert time.monotonic() < end, f'{pattern!r} not seen in time:\n{self.text[-3000:]}'
      time.sleep(0.05)

  def finish(self) -> str:
    self._thread.join(timeout=60)
    return self.text


def _last_line(text: str) -> str:
  return [line for line in re.split(r'[\r\n]', text) if line.strip()][-1]


def _interrupt(
  workdir, data_dirs, when: str, env=None, signum=signal.SIGINT, settle: float = 0.0
) -> tuple[int, str]:
  """Starts launch.py (100 epochs of 3 steps), sends `signum` `settle` seconds after stderr
  matches `when` (or, for 'checkpoint 3', once step 3's checkpoint is complete), returns
  (status, stderr)."""
  proc = subprocess.Popen(
    _launch_argv(workdir, data_dirs, '--config.num_epochs=100', '--mode=train'),
    cwd=REPO,
    stderr=subprocess.PIPE,
    stdout=subprocess.DEVNULL,
    text=True,
    # A process that does not end dumps its threads' stacks on SIGABRT (below): the report of
    # a hang names where it waits.
    env=dict(env if env is not None else os.environ, PYTHONFAULTHANDLER='1'),
  )
  reader = _Reader(proc)
  try:
    if when == 'checkpoint 3':
      end = time.monotonic() + 300
      while not (workdir / 'checkpoints' / '3').is_dir():
        assert time.monotonic() < end and proc.poll() is None, reader.text[-3000:]
        time.sleep(0.05)
    else:
      reader.wait_for(when)
    time.sleep(settle)
    proc.send_signal(signum)
    try:
      status = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGABRT)
      proc.wait(timeout=60)
      pytest.fail(f'no exit within 300 s of {signum!r}; its threads:\n{reader.finish()[-6000:]}')
  finally:
    if proc.poll() is None:
      proc.kill()
  return status, reader.finish()


@pytest.mark.slow
def test_ctrl_c_during_the_first_compilation_ends_in_one_line(data_dirs, tmp_path):
  # An empty compilation cache, so that the first step really compiles when Ctrl-C comes: a
  # Ctrl-C then used to crash the interpreter at exit (SIGSEGV in jaxlib's compile thread).
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / 'no-cache'))
  # Half a second after the bar shows, so the Ctrl-C lands in the first step's compilation (some
  # seconds here), not in the instant between the bar's first print and the loop (a loaded CI
  # machine sent it there once: the command's general Ctrl-C line, not the loop's).
  status, err = _interrupt(tmp_path / 'run', data_dirs, r'train:\s+0%', env=env, settle=0.5)
  assert status == exits.INTERRUPTED, err[-3000:]
  assert TRACEBACK not in err and 'Segmentation fault' not in err
  assert re.fullmatch(
    r'launch\.py: interrupted \(Ctrl-C\) (before step \d+ of 300 finished|at step \d+ of 300);'
    r' (no checkpoint was saved yet: run the same command again to start|the checkpoint of '
    r'step \d+ in \S+ is kept: run the same command again to resume from it)\.',
    _last_line(err),
  ), _last_line(err)


@pytest.mark.slow
@pytest.mark.parametrize(
  'signum,status,said',
  [
    (signal.SIGINT, exits.INTERRUPTED, r'interrupted \(Ctrl-C\)'),
    # A time limit's SIGTERM (a cluster's, or scripts/release_gpu.sh's `timeout`): it said
    # 'Received signal 15'.
    (signal.SIGTERM, exits.TERMINATED, r'stopped by SIGTERM \(a time limit or kill\)'),
  ],
  ids=['SIGINT', 'SIGTERM'],
)
def test_a_signal_mid_training_keeps_a_checkpoint_and_says_which(
  data_dirs, tmp_path, signum, status, said
):
  workdir = tmp_path / 'run'
  code, err = _interrupt(workdir, data_dirs, 'checkpoint 3', signum=signum)
  assert code == status, err[-3000:]
  assert TRACEBACK not in err
  line = _last_line(err)
  found = re.fullmatch(
    rf'launch\.py: {said} at step (\d+) of 300; the checkpoint of step (\d+) '
    rf'in {re.escape(str(workdir / "checkpoints"))} is kept: run the same command again to '
    r'resume from it\.',
    line,
  )
  assert found, line
  kept = int(found.group(2))
  assert kept >= 3 and (workdir / 'checkpoints' / str(kept)).is_dir()
  assert not list((workdir / 'checkpoints').glob(f'*{checkpoints.TMP_SUFFIX}*'))
  # What it names is what a relaunch resumes from.
  mngr = checkpoints.existing_manager(workdir, 2)
  assert mngr.latest_step() == kept


def test_a_sigterm_outside_the_loop_says_what_is_kept(capsys):
  """SIGTERM where the loop did not word it (data preparation, the final evaluation): the
  command's Ctrl-C line, worded for SIGTERM, status 143 (128 + SIGTERM, not an error's 1)."""
  with pytest.raises(SystemExit) as e:
    with exits.one_line_exits(
      'launch.py', interrupted='interrupted (Ctrl-C); every checkpoint saved so far is kept.'
    ):
      raise exits.Terminated('Received signal 15')
  assert e.value.code == exits.TERMINATED == 143
  err = capsys.readouterr().err
  assert err == 'launch.py: stopped by SIGTERM; every checkpoint saved so far is kept.\n'
  with pytest.raises(SystemExit) as e:
    with exits.one_line_exits('launch.py'):
      raise exits.Terminated('stopped by SIGTERM (a time limit or kill) at step 4 of 9; ...')
  assert e.value.code == 143
  err = capsys.readouterr().err
  assert err == 'launch.py: stopped by SIGTERM (a time limit or kill) at step 4 of 9; ...\n'


def _poisoned_at(step_to_poison: int):
  real = loader.create_train_iterator

  def poisoned(config, source, *, start_step=0, **kwargs):
    for step, batch in enumerate(
      real(config, source, start_step=start_step, **kwargs), start_step + 1
    ):
      if step == step_to_poison:
        batch = dict(batch, image=np.full_like(batch['image'], np.nan))
      yield batch

  return poisoned


@pytest.mark.slow
def test_nan_at_step_1_leaves_the_workdir_free_for_another_config(data_dirs, tmp_path, monkeypatch):
  config = fixtures.smoke_config(data_dirs)
  monkeypatch.setattr(loader, 'create_train_iterator', _poisoned_at(1))
  workdir = tmp_path / 'run'
  with pytest.raises(SystemExit) as stopped:
    train_command.run_or_exit(build(config), workdir, 'train')
  assert stopped.value.code == (
    'launch.py: non-finite loss or gradient at step 1 (loss=nan, grad_norm=nan); training '
    f'stopped. No checkpoint was saved, so --workdir={workdir} takes another config: run again '
    'with a lower --config.learning_rate (or check the data).'
  )
  assert not list((workdir / 'checkpoints').iterdir())
  # As it says: another learning rate is accepted there (no fingerprint refusal).
  other = fixtures.smoke_config(data_dirs)
  other.learning_rate = config.learning_rate / 10
  other.num_epochs = 1
  monkeypatch.undo()  # clean data again
  train_command.run_or_exit(build(other), workdir, 'train')
  assert checkpoints.existing_manager(workdir, 2).all_steps() == [3]


@pytest.mark.slow
def test_nan_later_keeps_the_last_good_checkpoint_and_says_where_to_go_on(
  data_dirs, tmp_path, monkeypatch
):
  config = fixtures.smoke_config(data_dirs)
  monkeypatch.setattr(loader, 'create_train_iterator', _poisoned_at(5))
  workdir = tmp_path / 'run'
  with pytest.raises(SystemExit) as stopped:
    train_command.run_or_exit(build(config), workdir, 'train')
  assert stopped.value.code == (
    'launch.py: non-finite loss or gradient at step 5 (loss=nan, grad_norm=nan); training '
    f'stopped. The last good checkpoint is step 3 in {workdir / "checkpoints"} (kept). To go '
    'on with a lower --config.learning_rate, start a new --workdir (this one resumes only its '
    'own config), or check the data.'
  )
  assert checkpoints.existing_manager(workdir, 2).all_steps() == [3]


def _failing_save(fail_at: int, error: BaseException):
  real = ocp.CheckpointManager.save

  def save(self, step, *args, **kwargs):
    if step == fail_at:
      # As orbax fails: the step's temporary folder is left behind.
      (Path(self.directory) / f'{step}{checkpoints.TMP_SUFFIX}' / 'default').mkdir(parents=True)
      raise error
    return real(self, step, *args, **kwargs)

  return save


ENOSPC_AS_ORBAX_SAYS = ValueError(
  'RESOURCE_EXHAUSTED: Error writing "params.Conv_0.kernel/0" in OCDBT database at local file '
  '"{dir}/6.orbax-checkpoint-tmp/default.orbax-checkpoint-tmp/ocdbt.process_0/": Failed '
  'writing: "...": Failed to write 85279 bytes to file 17: No space left on device '
  "[os_error_code='28']"
)


@pytest.mark.slow
@pytest.mark.parametrize(
  'error, reason',
  [
    (ENOSPC_AS_ORBAX_SAYS, r'No space left on device \([\d.]+ MB free now\)'),
    (OSError(errno.EROFS, 'Read-only file system', 'ckpt'), 'Read-only file system'),
  ],
  ids=['full', 'read-only'],
)
def test_a_failed_save_stops_at_once_and_removes_its_temporary_folder(
  data_dirs, tmp_path, monkeypatch, error, reason
):
  config = fixtures.smoke_config(data_dirs)
  config.num_epochs = 3
  monkeypatch.setattr(ocp.CheckpointManager, 'save', _failing_save(6, error))
  workdir = tmp_path / 'run'
  with pytest.raises(SystemExit) as stopped:
    train_command.run_or_exit(build(config), workdir, 'train')
  assert re.fullmatch(
    rf'launch\.py: cannot save the checkpoint of step 6 in {re.escape(str(workdir))}/checkpoints: '
    rf'{reason}\. Training stopped; the last complete checkpoint, step 3, is kept\. Free space '
    r'there \(or make it writable\) and run the same command again to resume\.',
    stopped.value.code,
  ), stopped.value.code
  assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == ['3']
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  assert max(r['step'] for r in rows) <= 6  # stopped there, not an epoch later


def _save_failing_in_the_background(monkeypatch, fail_at: int, error: BaseException) -> None:
  """Step `fail_at`'s save starts (orbax's half-written folder) and fails later, as a disk
  filled by another writer while orbax writes fails it: raised by the next wait for it."""
  real_save, real_wait = ocp.CheckpointManager.save, ocp.CheckpointManager.wait_until_finished
  armed = []

  def save(self, step, *args, **kwargs):
    if step != fail_at:
      return real_save(self, step, *args, **kwargs)
    (Path(self.directory) / f'{step}{checkpoints.TMP_SUFFIX}' / 'default').mkdir(parents=True)
    armed.append(error)
    return True

  def wait_until_finished(self):
    if armed:
      raise armed.pop()
    return real_wait(self)

  monkeypatch.setattr(ocp.CheckpointManager, 'save', save)
  monkeypatch.setattr(ocp.CheckpointManager, 'wait_until_finished', wait_until_finished)


def _full_during_the_save(directory: Path) -> str:
  """The line (a regular expression) of step 6's save failed by a full disk, step 3 kept."""
  return (
    rf'cannot save the checkpoint of step 6 in {re.escape(str(directory))}: No space left on '
    r'device \([\d.]+ MB free now\)\. Training stopped; the last complete checkpoint, step 3, '
    r'is kept\. Free space there \(or make it writable\) and run the same command again to '
    r'resume\.'
  )


def test_a_disk_filled_during_a_background_save_is_the_checkpoints_line(tmp_path, monkeypatch):
  # Another writer fills the disk while orbax writes step 6: the save fails in orbax's
  # threads, and the next write of the loop (the epoch record) fails too. The line to end on
  # is the checkpoint's (the folder, the reason, the step kept, how to resume), not the record's.
  directory = tmp_path / 'checkpoints'
  mngr = checkpoints.checkpoint_manager(tmp_path, 2)
  checkpoint_saves.save(mngr, 3, {'w': np.arange(4.0)})
  _save_failing_in_the_background(monkeypatch, 6, ENOSPC_AS_ORBAX_SAYS)
  checkpoint_saves.save(mngr, 6, {'w': np.arange(4.0)})
  record = OSError(errno.ENOSPC, 'No space left on device', str(tmp_path / 'epoch_002.json'))
  failed = checkpoint_saves.save_failure(mngr, record)
  assert re.fullmatch(_full_during_the_save(directory), str(failed)), failed
  assert sorted(p.name for p in directory.iterdir()) == ['3']  # nothing half-written left

  # Stopped by something else (Ctrl-C): that stays the news, the save's failure a warning.
  mngr = checkpoints.checkpoint_manager(tmp_path, 2)
  _save_failing_in_the_background(monkeypatch, 9, ENOSPC_AS_ORBAX_SAYS)
  checkpoint_saves.save(mngr, 9, {'w': np.arange(4.0)})
  assert checkpoint_saves.save_failure(mngr, KeyboardInterrupt()) is None
  assert checkpoints.complete_steps(directory) == [3]


@pytest.mark.slow
def test_a_disk_filled_during_a_save_ends_training_on_the_checkpoints_line(
  data_dirs, tmp_path, monkeypatch, capfd
):
  config = fixtures.smoke_config(data_dirs)
  config.num_epochs, config.eval.every_epochs, config.eval.protocols = 3, 1, ('strict',)
  _save_failing_in_the_background(monkeypatch, 6, ENOSPC_AS_ORBAX_SAYS)
  write_json = identity.write_json

  def full_disk(path, *args, **kwargs):
    if Path(path).name == 'epoch_002.json':  # the disk is full by now
      raise OSError(errno.ENOSPC, 'No space left on device', str(path))
    return write_json(path, *args, **kwargs)

  monkeypatch.setattr(identity, 'write_json', full_disk)
  workdir = tmp_path / 'run'
  with pytest.raises(SystemExit) as stopped:
    train_command.run_or_exit(build(config), workdir, 'train')
  line = stopped.value.code
  assert re.fullmatch(r'launch\.py: ' + _full_during_the_save(workdir / 'checkpoints'), line), line
  assert sorted(p.name for p in (workdir / 'checkpoints').iterdir()) == ['3']
  assert TRACEBACK not in capfd.readouterr().err


# A user and mount namespace of its own, where a test may mount a tmpfs without root.
UNSHARE = ['unshare', '--user', '--map-root-user', '--mount']


def _can_mount_tmpfs(where: Path) -> bool:
  probe = subprocess.run(
    [
      'unshare',
      '--user',
      '--map-root-user',
      '--mount',
      'sh',
      '-c',
      f'mount -t tmpfs tmpfs {where}',
    ],
    capture_output=True,
  )
  return probe.returncode == 0


@pytest.mark.slow
def test_a_full_disk_for_real(data_dirs, tmp_path):
  """launch.py with its workdir on a 2 MB tmpfs (a user and mount namespace: no root needed
  where the kernel allows it): a smoke checkpoint is ~1.5 MB, so the second save fails."""
  disk = tmp_path / 'disk'
  disk.mkdir()
  if shutil.which('unshare') is None or not _can_mount_tmpfs(disk):
    pytest.skip('no tmpfs can be mounted here; the simulated full disk above still runs')
  # The data is prepared outside the small disk first.
  fixtures.train_through_launch(
    'configs/smoke.py', tmp_path / 'warm', data_dirs, '--config.num_epochs=1'
  )
  argv = ' '.join(_launch_argv(disk / 'run', data_dirs, '--config.num_epochs=5', '--mode=train'))
  script = textwrap.dedent(f"""
    mount -t tmpfs -o size=2m tmpfs {disk} || exit 99
    cd {REPO}
    {argv} 2> {tmp_path}/first.err; echo $? > {tmp_path}/first.status
    ls -a {disk}/run/checkpoints > {tmp_path}/first.ls
    {argv} 2> {tmp_path}/second.err; echo $? > {tmp_path}/second.status
    ls -a {disk}/run/checkpoints > {tmp_path}/second.ls
  """)
  subprocess.run(
    [*UNSHARE, 'bash', '-c', script],
    check=True,
    timeout=900,
  )
  for attempt in ('first', 'second'):  # the relaunch resumes from step 3 and fails again
    err = (tmp_path / f'{attempt}.err').read_text()
    assert (tmp_path / f'{attempt}.status').read_text().strip() == '1', err[-3000:]
    assert TRACEBACK not in err and 'Event loop is closed' not in err
    assert re.fullmatch(
      rf'launch\.py: cannot save the checkpoint of step 6 in {re.escape(str(disk / "run"))}'
      r'/checkpoints: No space left on device \([\d.]+ MB free, a checkpoint takes [\d.]+ MB\)\. '
      r'Training stopped; the last complete checkpoint, step 3, is kept\. Free space there \(or '
      r'make it writable\) and run the same command again to resume\.',
      _last_line(err),
    ), _last_line(err)
    assert (tmp_path / f'{attempt}.ls').read_text().split() == ['.', '..', '3']


_HOLD = textwrap.dedent("""
  import sys, time
  from crackjax.runs import identity
  with identity.lock(sys.argv[1]):
    print('held', flush=True)
    time.sleep(120)
""")


@pytest.fixture
def held_run(smoke_run, tmp_path):
  """A copy of the session's finished smoke run, held by another process (as by training)."""
  workdir = tmp_path / 'run'
  shutil.copytree(smoke_run, workdir)
  holder = subprocess.Popen(
    [sys.executable, '-c', _HOLD, str(workdir)], cwd=REPO, stdout=subprocess.PIPE, text=True
  )
  assert holder.stdout.readline().strip() == 'held'
  yield workdir
  holder.kill()
  holder.wait()


def _smoke_run_config(smoke_run: Path):
  root = smoke_run.parent / 'data'
  config = fixtures.smoke_config((root / 'raw', root / 'tfds'))
  config.eval.protocols = ('strict',)
  return config


def _files(workdir: Path) -> dict[str, float]:
  return {
    str(p.relative_to(workdir)): p.stat().st_mtime_ns
    for p in workdir.rglob('*')
    if p.is_file() and p.name not in (identity.LOCK_FILE, identity.HOLDER_FILE)
  }


@pytest.mark.slow
def test_evaluation_of_a_run_in_use_is_refused_in_one_line(smoke_run, held_run):
  before = _files(held_run)
  with pytest.raises(SystemExit) as stopped:
    train_command.run_or_exit(build(_smoke_run_config(smoke_run)), held_run, 'eval')
  assert re.fullmatch(
    rf'launch\.py: {re.escape(str(held_run.resolve()))} is in use by .*\. Wait for it to end or '
    r'stop it; a second process there would mix two runs\.',
    stopped.value.code,
  ), stopped.value.code
  with pytest.raises(SystemExit) as stopped:
    evaluate_command.main([f'--workdir={held_run}', '--protocols=strict'])
  assert stopped.value.code.startswith(f'crackjax-evaluate: {held_run.resolve()} is in use by ')
  assert _files(held_run) == before  # nothing written by either


@pytest.mark.slow
def test_a_finished_run_relaunched_does_nothing_and_says_so(smoke_run, tmp_path, caplog):
  workdir = tmp_path / 'run'
  shutil.copytree(smoke_run, workdir)
  # The run's identity files are written again, with the same text.
  identity_files = ('config.json', 'fingerprint.json')
  texts = {name: (workdir / name).read_text() for name in identity_files}
  before = {k: v for k, v in _files(workdir).items() if k not in identity_files}
  caplog.set_level('INFO')
  loop.train_and_evaluate(build(_smoke_run_config(smoke_run)), workdir)
  assert f'The run in {workdir} is finished (step 6 of 6) and evaluated (eval.json)' in caplog.text
  after = {k: v for k, v in _files(workdir).items() if k not in identity_files}
  assert after == before  # no evaluation, no metrics rows, no TensorBoard file
  assert {name: (workdir / name).read_text() for name in identity_files} == texts
  assert json.loads((workdir / 'eval.json').read_text())['step'] == 6


@pytest.mark.slow
def test_a_run_killed_before_its_checkpoint_logs_each_step_once(smoke_run, tmp_path):
  # Killed (SIGKILL) while saving step 6: its metrics rows were written, its checkpoint not.
  workdir = tmp_path / 'run'
  shutil.copytree(smoke_run, workdir)
  shutil.rmtree(workdir / 'checkpoints' / '6')
  (workdir / 'eval.json').unlink()
  loop.train_and_evaluate(build(_smoke_run_config(smoke_run)), workdir, evaluate_after=False)
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  train_steps = [r['step'] for r in rows if r['kind'] == 'train']
  assert train_steps == sorted(set(train_steps)) and max(train_steps) == 6


def test_metric_rows_of_replayed_steps_are_dropped(tmp_path):
  from crackjax.runs.metric_writer import MetricWriter

  log = tmp_path / 'metrics.jsonl'
  rows = [{'kind': 'train', 'step': s, 'loss': 1.0} for s in (1, 2, 3, 4)]
  log.write_text(''.join(json.dumps(r) + '\n' for r in rows) + '{"kind": "tra')  # cut short
  writer = MetricWriter(tmp_path, resume_step=2)
  writer.write_scalars(3, {'loss': 0.5})
  writer.close()
  steps = [json.loads(line)['step'] for line in log.read_text().splitlines()]
  assert steps == [1, 2, 3]


_FAKE_WORKER = textwrap.dedent("""
  import signal, sys, time
  from pathlib import Path
  from crackjax.paper import scheduler
  scheduler.end_with_runner()  # as a worker: Ctrl-C ignored, SIGTERM from the runner
  def saved(signum, frame):
    Path(sys.argv[1], sys.argv[-1].split('=')[1].replace(':', '_')).write_text('saved')
    sys.exit(1)
  signal.signal(signal.SIGTERM, saved)
  Path(sys.argv[1], 'ready_' + sys.argv[-1].split('=')[1].replace(':', '_')).write_text('')
  time.sleep(120)
""")


@contextlib.contextmanager
def _ctrl_c_once_ready(folder: Path, workers: int):
  """Sends this process SIGINT once `workers` fake workers are ready (their SIGTERM handler
  in place), unless the block has ended: a fixed delay raced their imports on a cold or
  loaded machine (a worker still importing died of the runner's SIGTERM without saving)."""
  done = threading.Event()
  # Ctrl-C as the runner's command takes it (`exits.watch_interrupts`: a KeyboardInterrupt
  # swallowed by a finalizer is remembered), whatever an earlier test of this worker left.
  previous = signal.getsignal(signal.SIGINT)
  exits.watch_interrupts()

  def wait_then_interrupt():
    end = time.monotonic() + 120
    while len(list(folder.glob('ready_*'))) < workers and time.monotonic() < end:
      if done.wait(0.05):
        return
    os.kill(os.getpid(), signal.SIGINT)

  thread = threading.Thread(target=wait_then_interrupt, daemon=True)
  thread.start()
  try:
    yield
  finally:
    done.set()
    thread.join()
    signal.signal(signal.SIGINT, previous)
    exits.clear_interrupt()


@pytest.mark.slow
def test_ctrl_c_in_the_runner_lets_each_worker_save(tmp_path):
  from crackjax.paper import jobs as jobs_lib

  jobs = jobs_lib.select_jobs(1, [], [0])[:2]
  try:
    with pytest.raises(exits.Interrupted) as stopped, _ctrl_c_once_ready(tmp_path, len(jobs)):
      scheduler.run_workers(
        jobs,
        [sys.executable, '-c', _FAKE_WORKER, str(tmp_path)],
        tmp_path / 'campaign',
        parallel=2,
        gpus=[],
        deadline=None,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
      )
  finally:  # shown only if the test fails: what each fake worker printed
    for log in sorted((tmp_path / 'campaign').rglob('worker.log')):
      print(f'---- {log}\n{log.read_text()[-3000:]}')
    print('files:', sorted(p.name for p in tmp_path.iterdir()))
  saved = sorted(p.name for p in tmp_path.glob('1_*'))
  assert saved == sorted(j.id.replace(':', '_') for j in jobs), saved
  assert str(stopped.value) == (
    f'interrupted (Ctrl-C) with 0 job(s) done; {jobs[0].id}, {jobs[1].id} saved their '
    'checkpoints: run the same command again to resume.'
  )


def test_exits_end_in_one_line_with_the_status_of_the_cause(capsys):
  with pytest.raises(SystemExit) as stopped, exits.one_line_exits('cmd'):
    raise KeyboardInterrupt
  assert stopped.value.code == exits.INTERRUPTED
  assert capsys.readouterr().err == (
    'cmd: interrupted (Ctrl-C); nothing was lost: run the same command again.\n'
  )
  with pytest.raises(SystemExit) as stopped, exits.one_line_exits('cmd'):
    raise exits.Interrupted('interrupted at step 3; the checkpoint of step 3 is kept.')
  assert stopped.value.code == exits.INTERRUPTED
  assert (
    capsys.readouterr().err == 'cmd: interrupted at step 3; the checkpoint of step 3 is kept.\n'
  )
  with pytest.raises(SystemExit) as stopped, exits.one_line_exits('cmd'):
    raise OSError(errno.ENOSPC, 'No space left on device', '/data/out.png')
  assert stopped.value.code == (
    'cmd: cannot write /data/out.png: No space left on device; free some space there and run '
    'the same command again.'
  )
  with pytest.raises(SystemExit) as stopped, exits.one_line_exits('cmd'):
    raise OSError(errno.EROFS, 'Read-only file system', '/ro/x.json')
  assert stopped.value.code == (
    'cmd: cannot write /ro/x.json: Read-only file system; make it writable or choose another '
    'folder and run the same command again.'
  )
  with pytest.raises(FileNotFoundError), exits.one_line_exits('cmd'):  # not the disk: a bug
    raise FileNotFoundError(errno.ENOENT, 'No such file or directory', 'x')


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM], ids=['SIGINT', 'SIGTERM'])
def test_a_signal_inside_a_checkpoint_save_waits_until_orbax_started_it(
  signum, tmp_path, monkeypatch
):
  # A Ctrl-C that landed inside orbax's CheckpointManager.save left the save's signal-waiting
  # threads hanging, so launch.py never exited (CI: the Ctrl-C test timed out after 300 s),
  # and its temporary folder half made ('Directory not empty' on the save on the way out).
  mngr = ocp.CheckpointManager(tmp_path / 'checkpoints')
  real_save = mngr.save
  steps_saved = []

  def save_hit_by_a_signal(step, *args, **kwargs):
    signal.raise_signal(signum)  # arrives while orbax is starting the save
    result = real_save(step, *args, **kwargs)
    steps_saved.append(step)
    return result

  monkeypatch.setattr(mngr, 'save', save_hit_by_a_signal)
  previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  exits.watch_interrupts()

  exits.exit_on_sigterm()
  exits.clear_interrupt()
  try:
    with pytest.raises(KeyboardInterrupt if signum == signal.SIGINT else SystemExit):
      checkpoint_saves.save(mngr, 1, {'w': np.arange(4.0)})
    assert steps_saved == [1]  # the signal took effect after orbax had the save in hand
    assert exits.interrupt_requested() == (signum == signal.SIGINT)
    assert exits.termination_requested() == (signum == signal.SIGTERM)
    checkpoint_saves.finish_saves(mngr)
    assert checkpoints.complete_steps(tmp_path / 'checkpoints') == [1]
    assert not list((tmp_path / 'checkpoints').glob(f'*{checkpoints.TMP_SUFFIX}*'))
  finally:
    exits.exit_on_sigterm()  # forgets the SIGTERM it took, before the handlers are put back
    for s, handler in previous.items():
      signal.signal(s, handler)
    exits.clear_interrupt()
    mngr.close()


def test_a_held_signal_without_a_python_handler_acts_as_its_default():
  previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
  try:
    with pytest.raises(KeyboardInterrupt), exits.interrupts_deferred():
      signal.raise_signal(signal.SIGINT)
      held = True
    assert held
  finally:
    signal.signal(signal.SIGINT, previous)
    exits.clear_interrupt()


COMMANDS = {
  'crackjax-predict': 'crackjax.deploy.predict_command',
  'crackjax-export': 'crackjax.deploy.export_command',
  'crackjax-evaluate': 'crackjax.trainer.evaluate_command',
  'python -m crackjax.paper.runner': 'crackjax.paper.runner',
  'python -m crackjax.paper.report': 'crackjax.paper.report',
  'python -m crackjax.trainer.data_stats': 'crackjax.trainer.data_stats',
  'python -m crackjax.paper.complexity': 'crackjax.paper.complexity',
}


@pytest.mark.parametrize('prog', sorted(COMMANDS))
def test_every_command_ends_a_ctrl_c_in_one_line(prog, monkeypatch, capsys):
  import importlib

  module = importlib.import_module(COMMANDS[prog])

  def interrupted(*args):
    raise KeyboardInterrupt

  # The command's body, after its flags (not parsed here: some require --config).
  monkeypatch.setattr(module, '_main', interrupted)
  monkeypatch.setattr(cli.Command, 'parse', lambda self, argv=None: (None, []))
  with pytest.raises(SystemExit) as stopped:
    module.main([])
  assert stopped.value.code == exits.INTERRUPTED
  err = capsys.readouterr().err
  assert err.startswith(f'{prog}: interrupted (Ctrl-C)') and err.count('\n') == 1, err
