"""On a real SLURM (one node; `scripts/slurm_local.sh start`, which .ci/run calls): the runner's
``--executor=slurm`` campaign against the same campaign run locally, cancelled jobs resumed from
their checkpoints (the time limit's USR2, submitit's requeue; and a plain ``scancel``, then the
same command again), and ``crackjax-train --distributed`` in an ``srun`` of 2 tasks against one
process (`jax.distributed.initialize` finds its peers through SLURM's variables).

Without a SLURM whose node is up these tests skip, saying how to start one."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import fixtures
from tests.test_multihost import ATOL, RTOL

REPO = Path(__file__).resolve().parents[1]
START = 'sudo bash scripts/slurm_local.sh start'
TIMEOUT_S = 600


def _slurm_problem() -> str | None:
  """Why the SLURM tests cannot run here, or None."""
  try:
    import submitit  # noqa: F401
  except ImportError:
    return "submitit is not installed (pip install -e '.[dev]')"
  if shutil.which('sbatch') is None or shutil.which('srun') is None:
    return 'SLURM is not installed'
  try:
    out = subprocess.run(
      ['sinfo', '-h', '-N', '-o', '%T'], capture_output=True, text=True, timeout=20
    )
  except (OSError, subprocess.SubprocessError) as e:
    return f'sinfo failed ({e})'
  states = out.stdout.split()
  if out.returncode or not any(s.rstrip('*') in ('idle', 'mixed', 'allocated') for s in states):
    return f'no SLURM node is up (sinfo: {(out.stdout + out.stderr).strip() or "nothing"})'
  return None


pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope='module')
def _needs_slurm() -> None:
  # Asked when a test runs, not when the file is collected: sinfo waits ~10 s for a controller
  # that is down, which the fast tier (these tests deselected) should not.
  problem = _slurm_problem()
  if problem is not None:
    pytest.skip(f'{problem}: start a one-node SLURM with `{START}`')


def _campaign_argv(workdir: Path, data: tuple[Path, Path], rows: str, seeds: int) -> list[str]:
  raw, tfds_dir = data
  return [
    sys.executable,
    '-m',
    'crackjax.paper.runner',
    '--table=1',
    f'--rows={rows}',
    f'--seeds={seeds}',
    '--variant=smoke',
    f'--set=data.manual_dir={raw}',
    f'--set=data.data_dir={tfds_dir}',
    f'--workdir={workdir}',
    '--curve_protocols=strict',
  ]


def _run(argv: list[str], timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
  out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)
  assert out.returncode == 0, f'{argv}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}'
  return out


def _records(workdir: Path) -> dict[str, dict]:
  return {
    str(p.relative_to(workdir)): json.loads(p.read_text())
    for p in sorted(workdir.rglob('epoch_*.json'))
  }


# Wall times in the report's Markdown: '11s', '3min 39s', '1h 2min'.
_DURATION = re.compile(r'\b(\d+h )?(\d+min )?\d+(\.\d+)?(s|min|h)\b')


def _report_without_times(workdir: Path) -> tuple[str, list[dict]]:
  md = (workdir / 'report' / 'report.md').read_text()
  md = _DURATION.sub('<time>', md)
  md = re.sub(r'commit [0-9a-f]+(-dirty)?', 'commit <c>', md)
  rows = list(csv.DictReader(io.StringIO((workdir / 'report' / 'report.csv').read_text())))
  for row in rows:
    row.pop('time_s_mean')
    row.pop('time_s_std')
  return md, rows


def test_a_campaign_on_slurm_reports_as_the_same_campaign_run_here(tmp_path):
  data = fixtures.smoke_data_dirs(tmp_path / 'data')
  rows = 'wce_xie_e5,wce_exp_0.75_e5'
  on_slurm, here = tmp_path / 'slurm_campaign', tmp_path / 'local_campaign'
  # The local run prepares the dataset first (its '2 jobs: ...' line comes after); then both
  # campaigns run at once.
  log = tmp_path / 'local.log'
  with open(log, 'w') as out:
    local = subprocess.Popen(
      _campaign_argv(here, data, rows, 1), stdout=out, stderr=subprocess.STDOUT, cwd=REPO
    )
  _wait_for(lambda: '\n2 jobs: ' in log.read_text() or local.poll() is not None, 'the data')
  submitted = _run([*_campaign_argv(on_slurm, data, rows, 1), '--executor=slurm', '--wait'])
  assert local.wait(timeout=TIMEOUT_S) == 0, log.read_text()[-4000:]
  assert 'Submitted 2 jobs as SLURM job ' in submitted.stdout
  assert '2 of 2 SLURM jobs complete.' in submitted.stdout, submitted.stdout
  # One array job, one task per (row, seed), each in its own workdir.
  ids = {k: v['slurm_id'] for k, v in _submissions(on_slurm).items()}
  assert set(ids) == {'1:wce_xie:0', '1:wce_exp_0.75:0'}
  assert len({i.split('_')[0] for i in ids.values()}) == 1, ids
  status = _run([*_campaign_argv(on_slurm, data, rows, 1), '--status']).stdout
  assert status.splitlines()[0] == f'{on_slurm}: 2 jobs: 2 complete', status
  for job, slurm_id in ids.items():
    assert re.search(rf'{re.escape(job)}\s+5/5 epochs\s+SLURM {slurm_id} COMPLETED', status)
  # The same records, but for the wall times.
  a, b = _records(on_slurm), _records(here)
  assert sorted(a) == sorted(b) and len(a) == 2 * 5
  for name in a:
    for record in (a[name], b[name]):
      record.pop('train_seconds')
      record.pop('eval_seconds')
    assert a[name] == b[name], name
  # And the same report.
  for workdir in (on_slurm, here):
    _run([sys.executable, '-m', 'crackjax.paper.report', str(workdir)])
  assert _report_without_times(on_slurm) == _report_without_times(here)


def _submissions(workdir: Path) -> dict[str, dict]:
  return json.loads((workdir / 'slurm' / 'submitted.json').read_text())['jobs']


def _wait_for(condition, what: str, timeout: float = TIMEOUT_S) -> None:
  deadline = time.monotonic() + timeout
  while not condition():
    assert time.monotonic() < deadline, f'waited {timeout} s for {what}'
    time.sleep(0.2)


def _segments(log: Path) -> list[str]:
  """A worker.log's parts, one per run of the job (each starts with its '==== <time> SLURM job
  <id>' line; the task's line after USR2 stays in the run it ended)."""
  return re.split(r'^==== .* SLURM job \S+$', log.read_text(errors='replace'), flags=re.M)[1:]


def test_cancelled_jobs_resume_from_their_checkpoints(tmp_path):
  data = fixtures.smoke_data_dirs(tmp_path / 'data')
  workdir = tmp_path / 'campaign'
  # 10 epochs of 10 steps, two seeds: long enough to be stopped in the middle.
  argv = [
    *_campaign_argv(workdir, data, 'wce_xie_e10', 2),
    '--set=steps_per_epoch=10',
    '--executor=slurm',
  ]
  _run(argv)
  ids = {k: v['slurm_id'] for k, v in _submissions(workdir).items()}
  preempted, cancelled = ids['1:wce_xie:0'], ids['1:wce_xie:1']
  dirs = {s: workdir / 'table1' / 'wce_xie' / f'seed{s}' for s in (0, 1)}
  # Each job is stopped once its epoch 2 is recorded:
  # - seed 0 by the time limit's (and a preemption's) signal, USR2: submitit saves through the
  #   task and requeues the job, which SLURM starts again by itself;
  # - seed 1 by a plain scancel: the job ends CANCELLED (its worker saves on SIGTERM).
  stops = {0: ['scancel', '--signal=USR2', preempted], 1: ['scancel', cancelled]}
  deadline = time.monotonic() + TIMEOUT_S
  while stops:
    assert time.monotonic() < deadline, 'no epoch 2'
    for seed in [s for s in stops if (dirs[s] / 'epoch_002.json').exists()]:
      subprocess.run(stops.pop(seed), check=True)
    time.sleep(0.1)
  _wait_for(
    lambda: all('stopped by SIGTERM' in (d / 'worker.log').read_text() for d in dirs.values()),
    'both workers to save and stop',
  )
  before = {s: _records(d) for s, d in dirs.items()}
  assert all(2 <= len(r) < 10 for r in before.values()), {s: len(r) for s, r in before.items()}
  status = ''

  def cancelled_shows():
    nonlocal status
    status = _run([*argv, '--status']).stdout
    return re.search(rf'1:wce_xie:1\s+\d+/10 epochs\s+SLURM {cancelled} CANCELLED', status)

  _wait_for(cancelled_shows, 'the cancelled job to show as CANCELLED', timeout=120)
  # The same command again: the cancelled job is submitted again, the requeued one is not (it
  # is queued or running, or already complete); --wait waits for both.
  again = _run([*argv, '--wait'])
  assert f'1:wce_xie:0: queued or running as SLURM job {preempted}' in again.stdout or (
    '1:wce_xie:0: complete, not submitted.' in again.stdout
  ), again.stdout
  assert 'Submitted 1 jobs as SLURM job ' in again.stdout, again.stdout
  assert (
    'of 2 SLURM jobs complete.' in again.stdout or '1 of 1 SLURM jobs complete.' in again.stdout
  )
  assert _submissions(workdir)['1:wce_xie:0']['slurm_id'] == preempted  # requeued, same id
  assert _submissions(workdir)['1:wce_xie:1']['slurm_id'] != cancelled
  requeued_log = (workdir / 'slurm' / f'{preempted}_0_log.out').read_text()
  assert f'Requeued job {preempted}' in requeued_log
  for seed, directory in dirs.items():
    after = _records(directory)
    assert len(after) == 10, seed
    # Nothing evaluated before the cancel was done again ...
    assert all(after[k] == v for k, v in before[seed].items()), seed
    # ... and the second run started at the step its first run saved.
    first, second = _segments(directory / 'worker.log')
    saved = re.search(r'stopped by SIGTERM .* the checkpoint of step (\d+) in', first)
    assert saved, first[-2000:]
    if seed == 0:  # the task said why the job went on by itself
      assert 'the worker saved its checkpoint; the job is requeued and resumes from it.' in first
    assert f'| {saved.group(1)}/100 [' in second, second[:2000]
    steps = [
      json.loads(line)['step']
      for line in (directory / 'metrics.jsonl').read_text().splitlines()
      if json.loads(line)['kind'] == 'train'
    ]
    assert sorted(steps) == list(range(1, 101)), seed


def test_srun_of_two_tasks_trains_as_one_process(tmp_path):
  raw, tfds_dir = fixtures.smoke_data_dirs(tmp_path / 'data')
  # tests/multihost_worker.py's runs: the smoke config, batch 4, 2 epochs of 2 steps.
  common = [
    '--config=configs/smoke.py',
    '--mode=train',
    '--config.batch_size=4',
    '--config.steps_per_epoch=2',
    '--config.num_epochs=2',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={tfds_dir}',
  ]
  train = shutil.which('crackjax-train', path=str(Path(sys.executable).parent)) or 'crackjax-train'
  env = dict(os.environ, JAX_PLATFORMS='cpu')

  def devices(n: int) -> dict[str, str]:
    flags = re.sub(r'--xla_force_host_platform_device_count=\d+', '', env.get('XLA_FLAGS', ''))
    return {**env, 'XLA_FLAGS': f'{flags} --xla_force_host_platform_device_count={n}'.strip()}

  # The dataset is prepared once, by the single process, before the two start.
  single = subprocess.run(
    [train, *common, f'--workdir={tmp_path / "single"}'],
    env=devices(4),
    capture_output=True,
    text=True,
    timeout=TIMEOUT_S,
    cwd=REPO,
  )
  assert single.returncode == 0, single.stderr[-4000:]
  two = subprocess.run(
    [
      'srun',
      '--ntasks=2',
      '--nodes=1',
      '--kill-on-bad-exit=1',
      f'--time={TIMEOUT_S // 60}',
      train,
      *common,
      f'--workdir={tmp_path / "srun"}',
      '--distributed',
    ],
    env=devices(2),
    capture_output=True,
    text=True,
    timeout=TIMEOUT_S,
    cwd=REPO,
  )
  assert two.returncode == 0, two.stdout[-4000:] + two.stderr[-4000:]
  # Joined through SLURM's variables: 2 processes of 2 devices each.
  assert '4 cpu device(s), 2 process(es)' in two.stderr, two.stderr[-4000:]
  assert '4 cpu device(s), 1 process(es)' in single.stderr

  def losses(workdir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
    return {r['step']: r for r in rows if r['kind'] == 'train'}

  a, b = losses(tmp_path / 'srun'), losses(tmp_path / 'single')
  assert sorted(a) == sorted(b) == [1, 2, 3, 4]
  for key in ('loss', 'grad_norm', 'q'):
    np.testing.assert_allclose(
      [a[s][key] for s in sorted(a)], [b[s][key] for s in sorted(b)], rtol=RTOL, atol=ATOL
    )
  # The final parameters, restored from each run's last checkpoint.
  from crackjax.engine import train_state
  from crackjax.experiment.build import build

  config = fixtures.smoke_config((raw, tfds_dir))
  config.batch_size, config.steps_per_epoch, config.num_epochs = 4, 2, 2
  experiment = build(config)
  params = {
    name: train_state.local_params(experiment.states.restore(tmp_path / name, inference=True))
    for name in ('srun', 'single')
  }
  import jax

  flat_a = jax.tree_util.tree_leaves_with_path(params['srun'])
  flat_b = dict(jax.tree_util.tree_leaves_with_path(params['single']))
  assert len(flat_a) == len(flat_b) > 0
  for path, value in flat_a:
    np.testing.assert_allclose(
      np.asarray(value), np.asarray(flat_b[path]), rtol=RTOL, atol=ATOL, err_msg=str(path)
    )
  assert int(experiment.states.restore(tmp_path / 'srun').step) == 4


def test_lodo_folds_on_slurm_score_as_the_same_folds_here(tmp_path):
  """bench/lodo.py --executor=slurm: one task a fold; the same command again, once they end,
  submits nothing and writes the table; a fold trained here scores the same."""
  from crackjax.paper import slurm

  root = tmp_path / 'sources'
  crackforest = fixtures.make_fake_crackforest(root / 'crackforest', n_labelled=10, n_unlabelled=0)
  for name in fixtures.public_set_folders():
    fixtures.make_fake_public_set(root, name, counts={'train': 6, 'valid': 2, 'test': 3})

  def argv(work: Path, held_out: str) -> list[str]:
    return [
      sys.executable,
      'bench/lodo.py',
      '--budget=smoke',
      f'--held_out={held_out}',
      f'--work={work}',
      f'--crackforest={crackforest}',
      f'--public={root / "Datasets"}',
      f'--data_dir={tmp_path / "tfds"}',
      '--workers=1',
      '--protocols=strict',
      '--stages=train,export,score',
      f'--out={work / "table"}',
    ]

  on_slurm = tmp_path / 'slurm'
  command = [*argv(on_slurm, 'aiglern_trimm,gaps384'), '--executor=slurm', '--slurm_time=20']
  first = _run(command)
  assert first.stdout.count('submitted as SLURM job') == 2, first.stdout
  ids = {k: v['slurm_id'] for k, v in _submissions(on_slurm).items()}
  assert set(ids) == {'base:aiglern_trimm', 'base:gaps384'}
  assert len({i.split('_')[0] for i in ids.values()}) == 1, ids  # one array job
  status = [*command, '--status']
  queued = _run(status).stdout.splitlines()
  # Queued, running or just ended: its job named beside its epochs (a smoke fold is quick).
  assert queued[0].startswith('base:aiglern_trimm  '), queued
  assert f'; SLURM job {ids["base:aiglern_trimm"]} ' in queued[0], queued
  _wait_for(lambda: not slurm.live(on_slurm), 'the two folds')
  again = _run(command)
  assert 'submitted' not in again.stdout and '2 of 2 folds done' in again.stdout, again.stdout
  ended = _run(status).stdout.splitlines()
  assert ended[-1] == '2 of 2 folds done or kept.', ended
  assert f'scored (strict), done; SLURM job {ids["base:gaps384"]} COMPLETED' in ended[1], ended
  table = json.loads((on_slurm / 'table.json').read_text())['rows']['base (smoke)']
  assert set(table) == {'aiglern_trimm', 'gaps384'}
  assert 'SLURM job' in (on_slurm / 'base_smoke' / 'gaps384' / 'worker.log').read_text()
  # The same fold trained and scored here: the same numbers (the same config and seed).
  here = tmp_path / 'here'
  _run(argv(here, 'gaps384'))
  local = json.loads((here / 'table.json').read_text())['rows']['base (smoke)']['gaps384']
  assert local['strict'] == table['gaps384']['strict']
  assert local['selected'] == table['gaps384']['selected']
