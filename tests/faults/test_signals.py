"""Signals end everything a command started (issue 78 item 4).

A hostile user's trial at commit dea2c5b: SIGTERM to crackjax-evaluate printed nothing and left
its worker processes and multiprocessing's resource tracker running, orphaned; SIGTERM during a
dataset's re-preparation left the old prepared copy set aside as ``<version>.stale``, never
put back, and the next run asked for the dataset's files. Each command here is started in a
process group of its own on tiny fixture data and sent the signal once it is working: it
prints one line (what was done, how to go on), exits 143 (SIGTERM) or 130 (Ctrl-C), and no
process of its group survives it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from tests import fixtures

REPO = Path(__file__).resolve().parents[2]
STOPPED = {signal.SIGTERM: (143, 'stopped by SIGTERM'), signal.SIGINT: (130, 'interrupted')}


def group(pgid: int) -> list[str]:
  """The live processes of process group `pgid` (zombies left out), each as 'pid cmdline'."""
  found = []
  for entry in Path('/proc').iterdir():
    if not entry.name.isdigit():
      continue
    try:
      stat = (entry / 'stat').read_text()
      cmdline = (entry / 'cmdline').read_bytes().replace(b'\0', b' ').decode(errors='replace')
    except OSError:
      continue  # ended meanwhile
    fields = stat[stat.rindex(')') + 2 :].split()  # after '(comm) ': state, ppid, pgrp, ...
    if fields[0] != 'Z' and int(fields[2]) == pgid:
      found.append(f'{entry.name} {cmdline.strip()}')
  return found


def wait_until(condition: Callable[[], object], timeout: float, what: str, proc=None) -> None:
  end = time.monotonic() + timeout
  while not condition():
    if proc is not None and proc.poll() is not None:
      pytest.fail(f'the command ended ({proc.returncode}) before {what}')
    if time.monotonic() > end:
      pytest.fail(f'not within {timeout} s: {what}')
    time.sleep(0.1)


class Command:
  """A command started in a process group of its own (its pid is the group's id), its output
  in files; whatever of the group is left at the end is killed (after the test's checks)."""

  def __init__(self, argv: list[str], tmp_path: Path, env: dict[str, str] | None = None):
    self.stdout, self.stderr = tmp_path / 'stdout.txt', tmp_path / 'stderr.txt'
    with self.stdout.open('w') as out, self.stderr.open('w') as err:
      self.proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=out,
        stderr=err,
        start_new_session=True,
        env={**os.environ, 'PYTHONPATH': str(REPO), **(env or {})},
      )
    self.pgid = self.proc.pid

  def stop(self, signum: signal.Signals) -> tuple[int, list[str]]:
    """Sends `signum` to the command's own process (not its group: as `kill PID` does) and
    returns its exit status and the lines of its stderr."""
    self.proc.send_signal(signum)
    code = self.proc.wait(timeout=120)
    return code, self.stderr.read_text().splitlines()

  def survivors(self, timeout: float = 20) -> list[str]:
    """The processes of its group still alive `timeout` seconds after it ended."""
    end = time.monotonic() + timeout
    while group(self.pgid) and time.monotonic() < end:
      time.sleep(0.2)
    return group(self.pgid)

  def clean_up(self) -> None:
    try:
      os.killpg(self.pgid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    if self.proc.poll() is None:
      self.proc.wait(timeout=30)


def check_stopped(command: Command, signum: signal.Signals, prog: str, says: str) -> None:
  """`command`, sent `signum`, ends in one line of `prog` saying `says`, with the right exit
  status, and no process of its group survives it."""
  code, lines = command.stop(signum)
  status, how = STOPPED[signum]
  assert code == status, lines[-20:]
  assert lines and lines[-1].startswith(f'{prog}: {how}') and says in lines[-1], lines[-20:]
  assert not any('Traceback' in line for line in lines), lines[-40:]
  assert command.survivors() == []


def module(name: str, *args: str) -> list[str]:
  return [sys.executable, '-m', name, *args]


# ---------------------------------------------------------------------------- evaluation


def _workers_started(pgid: int) -> bool:
  """Whether the evaluation's worker processes (spawned: multiprocessing.spawn) are up."""
  return sum('spawn_main' in p for p in group(pgid)) >= 2


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'SIGINT'])
def test_a_signal_to_crackjax_evaluate_ends_its_worker_pool(smoke_run, tmp_path, signum):
  # At dea2c5b SIGTERM printed nothing and left the workers and the resource tracker running.
  run = tmp_path / 'run'
  shutil.copytree(smoke_run, run)  # the command locks and writes its run folder
  images, masks = fixtures.make_fake_folder(tmp_path / 'folder', n=60, size=(96, 128))
  command = Command(
    module(
      'crackjax.trainer.evaluate_command',
      f'--workdir={run}',
      f'--folder={images}:{masks}',
      '--protocols=strict,tolerance',
      '--workers=2',
      f'--out={tmp_path / "out"}',
    ),
    tmp_path,
  )
  try:
    wait_until(lambda: _workers_started(command.pgid), 300, 'its workers started', command.proc)
    check_stopped(command, signum, 'crackjax-evaluate', 'nothing was lost: run the same command')
  finally:
    command.clean_up()


# ---------------------------------------------------------------------------- prediction


def test_sigterm_to_crackjax_predict_ends_it_in_one_line(smoke_run, tmp_path):
  photos = tmp_path / 'photos'
  photos.mkdir()
  rng = np.random.default_rng(0)
  for i in range(120):
    image = rng.integers(150, 230, size=(160, 240, 3), dtype=np.uint8)
    PIL.Image.fromarray(image).save(photos / f'{i:03d}.png')
  out = tmp_path / 'out'
  command = Command(
    module(
      'crackjax.deploy.predict_command',
      f'--workdir={smoke_run}',
      f'--out={out}',
      '--notune_malloc',
      str(photos),
    ),
    tmp_path,
  )
  progress = out / '.crackjax-predict.jsonl'

  def photos_done() -> bool:
    return progress.exists() and '"name"' in progress.read_text()

  try:
    wait_until(photos_done, 300, 'a photo was done', command.proc)
    check_stopped(
      command, signal.SIGTERM, 'crackjax-predict', 'the photos done so far are in --out'
    )
  finally:
    command.clean_up()
  assert photos_done()  # kept: the same command finishes the rest


# ------------------------------------------------------------------------- data preparation


def _prepared(tmp_path: Path) -> tuple[dict, Path]:
  """A fake CrackForest prepared here; (its data group, its prepared copy's folder)."""
  from crackjax.data import registry

  raw, tfds_dir = fixtures.smoke_data_dirs(tmp_path)
  data = {'name': 'crackforest', 'manual_dir': str(raw), 'data_dir': str(tfds_dir)}
  builder = registry.prepare_dataset(data)
  return data, Path(os.fspath(builder.data_dir))


def test_a_copy_set_aside_by_a_killed_preparation_is_put_back(tmp_path, capsys):
  # A preparation killed (kill -9) after it set the stale copy aside: the next call puts it
  # back instead of preparing from files it may no longer have (was: it asked for them).
  from crackjax.data import registry

  data, copy = _prepared(tmp_path)
  copy.rename(f'{copy}.stale')
  builder = registry.prepare_dataset({**data, 'manual_dir': None})
  assert Path(os.fspath(builder.data_dir)) == copy and copy.is_dir()
  assert not Path(f'{copy}.stale').exists()
  assert 'put the prepared crackforest back' in capsys.readouterr().err
  assert len(registry.get_data_source({**data, 'manual_dir': None}, 'test')) > 0


# A crackjax-evaluate whose re-preparation of a dataset takes long enough to be signalled: TFDS'
# download_and_prepare waits first (the test's stand-in for a large dataset), saying so.
_SLOW_PREPARATION = textwrap.dedent("""
  import sys, time
  import tensorflow_datasets as tfds
  from crackjax.trainer import evaluate_command

  original = tfds.core.DatasetBuilder.download_and_prepare

  def slow(self, *args, **kwargs):
    print('preparing', flush=True)
    time.sleep(120)
    return original(self, *args, **kwargs)

  tfds.core.DatasetBuilder.download_and_prepare = slow
  sys.exit(evaluate_command.main(sys.argv[1:]))
""")


def test_sigterm_during_a_re_preparation_puts_the_old_copy_back(smoke_run, tmp_path):
  from crackjax.data import registry, source_record

  data, copy = _prepared(tmp_path / 'data')
  record = source_record.read(copy)
  # A file added to the source: the next use prepares it again, the old copy set aside.
  PIL.Image.fromarray(np.full((32, 48, 3), 200, np.uint8)).save(
    Path(data['manual_dir']) / 'image' / '099.jpg'
  )
  run = tmp_path / 'run'
  shutil.copytree(smoke_run, run)
  command = Command(
    [
      sys.executable,
      '-c',
      _SLOW_PREPARATION,
      f'--workdir={run}',
      '--data=crackforest:test',
      f'--manual_dir=crackforest={data["manual_dir"]}',
      f'--data_dir={data["data_dir"]}',
      '--protocols=strict',
      f'--out={tmp_path / "out"}',
    ],
    tmp_path,
  )
  try:
    wait_until(
      lambda: 'preparing' in command.stdout.read_text(), 300, 'the preparation began', command.proc
    )
    assert Path(f'{copy}.stale').is_dir() and not copy.exists()  # set aside meanwhile
    check_stopped(command, signal.SIGTERM, 'crackjax-evaluate', 'nothing was lost')
  finally:
    command.clean_up()
  # The old copy is back, as it was; nothing half-made is left beside it.
  assert copy.is_dir() and source_record.read(copy) == record
  assert sorted(p.name for p in copy.parent.iterdir()) == [copy.name]
  assert len(registry.get_data_source({**data, 'manual_dir': None}, 'test')) > 0


# -------------------------------------------------------------------------------------- LODO

# bench/lodo.py on one fold whose training is a stand-in: it says it is ready, then waits; on
# SIGTERM it "saves" and exits 143 as launch.py does, on Ctrl-C exits 130.
_CHILD = textwrap.dedent("""
  import signal, sys, time
  from pathlib import Path

  def end(signum, frame):
    Path(sys.argv[1]).write_text(signal.Signals(signum).name)
    sys.exit(143 if signum == signal.SIGTERM else 130)

  signal.signal(signal.SIGTERM, end)
  signal.signal(signal.SIGINT, end)
  print('ready', flush=True)
  time.sleep(120)
""")
_CAMPAIGN = textwrap.dedent("""
  import importlib.util, sys
  from crackjax.lodo import fold_stages

  spec = importlib.util.spec_from_file_location('lodo_bench', 'bench/lodo.py')
  lodo = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = lodo  # its dataclass looks its module up
  spec.loader.exec_module(lodo)
  child, saved, work = sys.argv[1:4]
  fold_stages.train_command = lambda fold, campaign: [sys.executable, '-c', child, saved]
  sys.exit(lodo.main(['--budget=long', '--held_out=gaps384', f'--work={work}', '--public=PUB']))
""")


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT], ids=['SIGTERM', 'SIGINT'])
def test_a_signal_to_lodo_ends_its_stage_and_says_so(tmp_path, signum):
  # At dea2c5b SIGTERM ended it silently (exit 143, no line); SIGINT (kill -INT of its own
  # process) left the training running, orphaned, and printed a traceback.
  saved = tmp_path / 'saved'
  command = Command(
    [sys.executable, '-c', _CAMPAIGN, _CHILD, str(saved), str(tmp_path / 'work')], tmp_path
  )
  try:
    wait_until(
      lambda: 'ready' in command.stdout.read_text().splitlines(),  # not the '+ command' line
      300,
      'the stage started',
      command.proc,
    )
    check_stopped(command, signum, 'bench/lodo.py', 'run the same command again to resume')
  finally:
    command.clean_up()
  assert saved.read_text() == signum.name  # the stage was stopped as the signal stops it


def test_a_worker_of_a_pool_ignores_ctrl_c():
  # The terminal sends Ctrl-C to the whole group: each worker printed its own traceback.
  from crackjax.evaluation import streaming

  previous = signal.getsignal(signal.SIGINT)
  try:
    streaming.worker_start()
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
  finally:
    signal.signal(signal.SIGINT, previous)
