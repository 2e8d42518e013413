"""bench/loop_vs_step.py (the training loop against the isolated step) and
bench/launch_breakdown.py (launch.py to eval.json), on a fake CrackForest; bench/gpu_perf.sh
parses."""

import gzip
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
  spec = importlib.util.spec_from_file_location(f'bench_{name}', REPO / 'bench' / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _rows(*step_time):
  return [{'kind': 'train', 'step': s, 'time': t, 'steps_per_sec': 0.0} for s, t in step_time]


def test_steady_rate_leaves_out_the_first_record_and_the_profiler():
  lvs = _load('loop_vs_step')
  rows = _rows((10, 100.0), (20, 101.0), (30, 102.0), (40, 112.0), (50, 113.0))
  rows.insert(2, {'kind': 'eval', 'step': 20, 'time': 101.5})
  r = lvs.steady_rate(rows)
  assert r['steps_per_s'] == pytest.approx(40 / 13) and r['intervals'] == 4
  assert r['median_logged_steps_per_s'] == pytest.approx(10.0)
  # The slow interval (30 -> 40) held the profiler's start and stop: left out.
  r = lvs.steady_rate(rows, [(105.0, 110.0)])
  assert r['steps_per_s'] == pytest.approx(10.0) and r['intervals'] == 3
  with pytest.raises(ValueError, match='no metric interval'):
    lvs.steady_rate(rows[:1])


def _trace(
  path: Path, process: str, threads: dict[int, str], spans: list[tuple[int, float, float]]
):
  events = [{'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': process}}]
  events += [
    {'ph': 'M', 'pid': 1, 'tid': tid, 'name': 'thread_name', 'args': {'name': name}}
    for tid, name in threads.items()
  ]
  events += [
    {'ph': 'X', 'pid': 1, 'tid': tid, 'ts': ts, 'dur': dur, 'name': 'k'} for tid, ts, dur in spans
  ]
  path.mkdir(parents=True)
  with gzip.open(path / 'perfetto_trace.json.gz', 'wt') as f:
    json.dump({'traceEvents': events}, f)


def test_device_idle_from_a_trace(tmp_path):
  lvs = _load('loop_vs_step')
  # Stream kernels busy 0-40 and 30-60 and 80-100 us of a 100 us window: 20% idle. The
  # module-level track spanning everything is not a stream and is ignored.
  _trace(
    tmp_path / 'gpu' / 'run',
    '/device:GPU:0',
    {1: 'Stream #7(compute)', 2: 'XLA Modules'},
    [(1, 0, 40), (1, 30, 30), (1, 80, 20), (2, 0, 100)],
  )
  r = lvs.device_idle(tmp_path / 'gpu')
  assert r['idle_fraction'] == pytest.approx(0.2) and r['tracks'] == 'streams'
  assert r['devices'] == ['/device:GPU:0'] and r['window_ms'] == pytest.approx(0.1)
  _trace(tmp_path / 'cpu' / 'run', '/host:CPU', {1: 'python'}, [(1, 0, 10)])
  assert lvs.device_idle(tmp_path / 'cpu') is None


@pytest.mark.slow
def test_loop_vs_step_on_fake_crackforest(tmp_path, capsys):
  raw, tfds_dir = fixtures.smoke_data_dirs(tmp_path / 'data')
  r = _load('loop_vs_step').main(
    [
      '--config=configs/crackforest_exp.py:smoke',
      f'--config.data.manual_dir={raw}',
      f'--config.data.data_dir={tfds_dir}',
      '--config.steps_per_epoch=5',
      '--config.num_epochs=1',
      '--bench_steps=1',
      '--host_batches=2',
      '--profile_steps=2,4',
      f'--workdir={tmp_path / "wd"}',
      f'--json={tmp_path / "r.json"}',
    ]
  )
  out = capsys.readouterr().out
  assert r['setup']['hw'] == [32, 48] and r['setup']['batch'] == 2
  assert r['host']['per_batch_s'] > 0 and r['bench']['images_per_s'] > 0
  loop = r['loop']
  assert loop['steps'] == 5 and loop['images_per_s'] > 0
  assert loop['input_wait_mean_s'] >= 0 and r['ratio'] > 0 and r['ratio_pipelined'] > 0
  # Records at steps 1..5; the profiler ran over steps 3-4, whose intervals are left out.
  assert loop['intervals'] < 4
  assert r['device_idle'] is None or 0 <= r['device_idle']['idle_fraction'] <= 1
  assert 'loop / bench:' in out and 'waits for input' in out
  assert json.loads((tmp_path / 'r.json').read_text())['ratio'] == r['ratio']


def test_loop_vs_step_refuses_a_used_workdir(tmp_path):
  (tmp_path / 'wd').mkdir()
  (tmp_path / 'wd' / 'metrics.jsonl').write_text('')
  raw, tfds_dir = fixtures.smoke_data_dirs(tmp_path / 'data')
  with pytest.raises(SystemExit, match='is not empty'):
    _load('loop_vs_step').main(
      [
        '--config=configs/crackforest_exp.py:smoke',
        f'--config.data.manual_dir={raw}',
        f'--config.data.data_dir={tfds_dir}',
        f'--workdir={tmp_path / "wd"}',
      ]
    )


def test_launch_breakdown_reads_compile_logs():
  lb = _load('launch_breakdown')
  log = (
    'Finished XLA compilation of jit(train_step) in 21.5 sec\n'
    'Finished tracing + transforming train_step for pjit in 0.4 sec\n'
    'Finished XLA compilation of jit(predict_step) in 1.25 sec\n'
    'Finished XLA compilation of jit(train_step) in 0.5 sec\n'
  )
  assert lb.compile_times(log) == {'jit(train_step)': 22.0, 'jit(predict_step)': 1.25}


def test_gpu_script_parses():
  subprocess.run(['bash', '-n', str(REPO / 'bench' / 'gpu_perf.sh')], check=True)
