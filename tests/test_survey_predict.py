"""A survey predicted end to end (crackjax-survey with photos): in one process, in shards
merged into one folder (here, and on a one-node SLURM), a shard that fails and the same
command finishing it, a killed prediction resumed; every photo once, none lost."""

from __future__ import annotations

import filecmp
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax.deploy import photos as photo_files
from crackjax.deploy import predict_outputs as written
from crackjax.survey import geojson, shards, survey_command
from tests import survey_fixtures as sf

REPO = Path(__file__).resolve().parents[1]
#: Files that may differ between a folder written in one process and one merged from shards:
#: the lock, the manifests (the order their lines were written in) and the shards' own logs.
OWN = {'.lock', photo_files.PROGRESS_FILE, '.crackjax-outputs.json', shards.SHARDS_DIR}


def _tree(out: Path) -> dict[str, bytes]:
  return {
    p.relative_to(out).as_posix(): p.read_bytes()
    for p in sorted(out.rglob('*'))
    if p.is_file() and p.relative_to(out).parts[0] not in OWN
  }


def _args(run: Path, out: Path, photos: Path, sidecar: Path, *extra: str) -> list[str]:
  return [
    f'--workdir={run}',
    f'--out={out}',
    '--notune_malloc',
    '--mm_per_pixel=0.5',
    f'--positions={sidecar}',
    *extra,
    str(photos),
  ]


def _same_outputs(one: Path, other: Path, count: int, *, grey_levels: int = 0) -> None:
  """Every file of `one` and `other` alike, byte for byte; the probability maps within
  `grey_levels` of each other (XLA's CPU threads may sum in another order in a process with
  fewer cores: a SLURM task's)."""
  a, b = _tree(one), _tree(other)
  assert sorted(a) == sorted(b)
  different = [k for k in a if a[k] != b[k]]
  if grey_levels:
    for k in [k for k in different if k.startswith('probs/')]:
      x, y = (np.asarray(PIL.Image.open(io.BytesIO(t[k]))).astype(int) for t in (a, b))
      assert np.abs(x - y).max() <= grey_levels, k
      different.remove(k)
  assert not different, different
  rows = sf.read_csv(one / 'measurements.csv')
  assert len(rows) == count == len({r['name'] for r in rows})
  collection = json.loads((one / 'survey.geojson').read_text())
  assert geojson.problems(collection) == [] and len(collection['features']) == count
  table = sf.read_csv(one / 'sections.csv')
  assert sum(int(r['photos']) for r in table) == count


def test_merge_takes_each_shards_finished_photos_and_names_the_rest(tmp_path):
  # No model: shard folders as their tasks leave them, one finished, one killed half-way.
  out = tmp_path / 'out'
  settings = {'model': 'model m', 'threshold': 0.5}
  parts = [['a', 'b'], ['c', 'd', 'e']]
  for k, part in enumerate(parts):
    folder = shards.shard_folder(out, k)
    folder.mkdir(parents=True)
    (folder / shards.PHOTOS_FILE).write_text('\n'.join(part) + '\n')
    progress = written.Progress(folder, settings, restart=False)
    for name in part[: 2 if k else None]:
      progress.start(name)
      for f in photo_files.map_files(folder, name):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(name.encode())
      progress.add(name, {'name': name}, [])
    if k == 0:  # its task ended: tables written, the manifest finished
      (folder / 'measurements.csv').write_text('name\n')
      written.finish(folder)
    else:
      progress.start('e')  # killed while predicting e
  merged = shards.merge(out)
  assert merged.merged == 4 and merged.left == {1: ['e']}
  assert not shards.shard_folder(out, 0).exists()  # finished: merged and gone
  assert shards.done_in(out) == {'a', 'b', 'c', 'd'}
  assert (out / 'probs' / 'c.png').read_bytes() == b'c'
  # Again: nothing merged twice, e still left.
  assert shards.merge(out) == shards.Merged(0, {1: ['e']})
  other = shards.shard_folder(out, 2)
  other.mkdir()
  (other / shards.PHOTOS_FILE).write_text('f\n')
  written.Progress(other, {**settings, 'threshold': 0.4}, restart=False).add('f', {}, [])
  with pytest.raises(written.SettingsDiffer, match='other settings'):
    shards.merge(out)


def test_plan_splits_in_order_without_empty_parts():
  assert shards.plan(list('abcdefg'), 3) == [['a', 'b', 'c'], ['d', 'e'], ['f', 'g']]
  assert shards.plan(['a', 'b'], 4) == [['a'], ['b']]
  assert shards.plan([], 4) == []


@pytest.mark.slow
def test_shards_here_give_the_outputs_of_one_process_and_a_failed_one_is_finished(
  smoke_run, tmp_path, monkeypatch, capsys
):
  photos, sidecar = sf.make_survey(tmp_path, n=24)
  one, four = tmp_path / 'one', tmp_path / 'four'
  assert survey_command.main(_args(smoke_run, one, photos, sidecar)) == 0
  # Shard 2's task is killed half-way: its first photos done, the rest not.
  real = subprocess.run

  def run(command, **kwargs):
    if '--job=shard-0002' not in command:
      return real(command, **kwargs)
    folder = shards.shard_folder(four, 2)
    part = (folder / shards.PHOTOS_FILE).read_text()
    (folder / shards.PHOTOS_FILE).write_text('\n'.join(part.split()[:3]) + '\n')
    real(command, **kwargs)
    (folder / shards.PHOTOS_FILE).write_text(part)
    (folder / 'measurements.csv').unlink()
    settings = written.read_progress(folder)[0]
    written.Progress(folder, settings, restart=False).start(part.split()[3])  # died in it
    return subprocess.CompletedProcess(command, -9)

  monkeypatch.setattr(shards.subprocess, 'run', run)
  args = _args(smoke_run, four, photos, sidecar, '--shards=4')
  assert survey_command.main(args) == 1
  err = capsys.readouterr().err
  assert (
    'shard 2 (exit -9) did not finish: 3 photo(s) not done (day2/img_0015, day2/img_0016, ' in err
  )
  assert 'run the same command again to predict them' in err
  assert not (four / 'measurements.csv').exists()
  done = {n: (four / 'probs' / f'{n}.png').stat().st_mtime_ns for n in shards.done_in(four)}
  assert len(done) == 21
  monkeypatch.undo()
  assert survey_command.main(args) == 0  # the same command: the 3 left, then the tables
  assert {n: (four / 'probs' / f'{n}.png').stat().st_mtime_ns for n in done} == done
  assert not (four / shards.SHARDS_DIR).exists()
  _same_outputs(one, four, 24)


@pytest.mark.slow
def test_a_killed_prediction_resumes_without_a_photo_lost_or_predicted_twice(smoke_run, tmp_path):
  photos, sidecar = sf.make_survey(tmp_path, n=200)
  out = tmp_path / 'out'
  args = _args(smoke_run, out, photos, sidecar)
  env = {**os.environ, 'PYTHONPATH': str(REPO)}
  code = 'import sys; from crackjax.survey import survey_command as c; sys.exit(c.main())'
  proc = subprocess.Popen([sys.executable, '-c', code, *args], env=env, cwd=tmp_path)
  manifest = out / photo_files.PROGRESS_FILE
  deadline = time.monotonic() + 300
  while time.monotonic() < deadline and proc.poll() is None:
    lines = manifest.read_text().splitlines() if manifest.exists() else []
    if sum('"row"' in line for line in lines) >= 30:
      break
    time.sleep(0.2)
  assert proc.poll() is None, 'the prediction ended before it could be killed'
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  before = written.read_progress(out)[1]
  assert 30 <= len(before) < 200
  times = {n: (out / 'probs' / f'{n}.png').stat().st_mtime_ns for n in before}
  assert survey_command.main(args) == 0
  after = written.read_progress(out)[1]
  assert sorted(after) == sorted(before.keys() | after.keys()) and len(after) == 200
  # Done before the kill: kept as they were, not predicted again.
  assert {n: (out / 'probs' / f'{n}.png').stat().st_mtime_ns for n in before} == times
  reference = tmp_path / 'reference'
  assert survey_command.main(_args(smoke_run, reference, photos, sidecar)) == 0
  _same_outputs(reference, out, 200)
  assert filecmp.cmp(reference / 'measurements.csv', out / 'measurements.csv', shallow=False)


@pytest.mark.slow
def test_four_shards_on_slurm_give_the_outputs_of_one_process(smoke_run, tmp_path):
  from tests.test_slurm import START, _slurm_problem

  problem = _slurm_problem()
  if problem:
    pytest.skip(f'{problem}; start one with: {START}')
  photos, sidecar = sf.make_survey(tmp_path, n=200)
  one, four = tmp_path / 'one', tmp_path / 'four'
  assert survey_command.main(_args(smoke_run, one, photos, sidecar)) == 0
  args = _args(
    smoke_run, four, photos, sidecar, '--executor=slurm', '--shards=4', '--slurm_time=10'
  )
  # In a process of its own, as a user runs it (submitit's submission, in pytest's process,
  # closed pytest's capture file).
  command = [sys.executable, '-m', 'crackjax.survey.survey_command', *args]
  env = {**os.environ, 'PYTHONPATH': str(REPO)}
  ran = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
  assert ran.returncode == 0, ran.stderr[-3000:]
  assert '4 shard(s) submitted as SLURM array tasks' in ran.stderr
  # A task has one core here, this process two: a probability may differ by a grey level.
  _same_outputs(one, four, 200, grey_levels=1)
  # The same command again: every photo done, nothing submitted.
  again = subprocess.run(
    command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900
  )
  assert again.returncode == 0 and 'submitted' not in again.stderr, again.stderr[-3000:]
  _same_outputs(one, four, 200, grey_levels=1)


@pytest.mark.slow
def test_the_survey_bench_runs_and_its_merge_gives_the_same_tables(smoke_run, tmp_path, capsys):
  import importlib.util

  spec = importlib.util.spec_from_file_location('survey_speed', REPO / 'bench' / 'survey_speed.py')
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)
  result = bench.main(
    [f'--workdir={smoke_run}', '--photos=6', '--shards=2', f'--work={tmp_path / "w"}']
  )
  assert result['same_tables'] and result['merge']['photos'] == 6
  assert len(result['shard_tasks']) == 2 and result['one_process']['cpu_s'] > 0
  out = capsys.readouterr().out
  assert out.startswith('CPU: ') and 'CPU-s a photo' in out and 'merge: ' in out
