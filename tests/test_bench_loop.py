"""bench/loop_vs_step.py (the training loop against the isolated step) and
bench/launch_breakdown.py (launch.py to eval.json), on a fake CrackForest; bench/gpu_perf.sh
parses, the Python it and scripts/reproduce_gpu.sh run imports what exists, and (slow) its
TINY stages of the data and the table row run on a fake CrackForest."""

import ast
import gzip
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, folder: str = 'bench'):
  spec = importlib.util.spec_from_file_location(f'{folder}_{name}', REPO / folder / f'{name}.py')
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


def test_kernels_by_kind_and_name_from_a_trace(tmp_path):
  """bench/trace_summary.py's kernel table: device time per step by kernel and by kind, from
  the stream tracks only (XLA's module track spans the kernels it holds)."""
  ts = _load('trace_summary')
  names = {
    'sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc': 30,
    'sm90_xmma_dgrad_implicit_gemm_bf16bf16': 20,
    'sm90_xmma_wgrad_implicit_gemm_bf16bf16': 25,
    'loop_add_fusion': 3,
    'loop_convert_fusion': 2,  # a dtype conversion, not a convolution
    'input_reduce_fusion_3': 10,
    'nchwToNhwcKernel': 4,
    'cutlass3x_sm90_tensorop_gemm_bf16': 6,
    'some_new_kernel': 0,
  }
  spans, at = [], 0
  for _step in range(2):
    for name, dur in names.items():
      spans.append((1, at, dur, name))
      at += dur
  events = [{'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}}]
  events += [
    {'ph': 'M', 'pid': 1, 'tid': 1, 'name': 'thread_name', 'args': {'name': 'Stream #7'}},
    {'ph': 'M', 'pid': 1, 'tid': 2, 'name': 'thread_name', 'args': {'name': 'XLA Modules'}},
    {'ph': 'X', 'pid': 1, 'tid': 2, 'ts': 0, 'dur': at + 100, 'name': 'jit_step'},
  ]
  events += [
    {'ph': 'X', 'pid': 1, 'tid': tid, 'ts': t, 'dur': d, 'name': n} for tid, t, d, n in spans
  ]
  folder = tmp_path / 'plugins' / 'profile' / 'run'
  folder.mkdir(parents=True)
  with gzip.open(folder / 'perfetto_trace.json.gz', 'wt') as f:
    json.dump({'traceEvents': events}, f)
  r = ts.kernels(tmp_path, steps=2, top=3)
  assert r['kernel_ms_per_step'] == pytest.approx(0.1) and r['launches_per_step'] == 9
  assert r['idle_fraction'] == pytest.approx(0.0) and r['distinct_kernels'] == 9
  assert [k['name'][:14] for k in r['top']] == [
    'sm90_xmma_fpro',
    'sm90_xmma_wgra',
    'sm90_xmma_dgra',
  ]
  assert r['top'][0]['ms_per_step'] == pytest.approx(0.03) and r['top'][0]['share'] == 0.3
  kinds = {c['kind']: c['share'] for c in r['categories']}
  assert kinds == pytest.approx(
    {
      'convolution forward (fprop)': 0.30,
      'convolution weight gradient (wgrad)': 0.25,
      'convolution data gradient (dgrad)': 0.20,
      'reductions': 0.10,
      'other cuDNN / CUTLASS / GEMM': 0.06,
      'XLA fusions (elementwise)': 0.05,
      'layout transposes': 0.04,
      'other': 0.0,
    }
  )
  text = '\n'.join(ts.report_lines(r))
  assert '30.0%' in text and 'convolution forward (fprop)' in text
  assert ts.kernels(tmp_path / 'absent', steps=1) is None
  assert ts.report_lines(None) == [
    'profile: no device tracks in the trace (the CPU backend records none)'
  ]


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


@pytest.mark.slow  # a preparation subprocess; the fast tier is at its 3-minute line
def test_launch_breakdown_names_missing_data_in_one_line(tmp_path, capfd):
  with pytest.raises(SystemExit) as e:
    _load('launch_breakdown').main(
      [
        f'--workdir={tmp_path / "row"}',
        '--prepare_first',
        '--config=configs/smoke.py',
        f'--config.data.data_dir={tmp_path / "tfds"}',
        f'--config.data.manual_dir={tmp_path / "absent"}',
      ]
    )
  message = str(e.value.code)
  assert message.startswith('bench/launch_breakdown.py: dataset preparation failed (exit 1): ')
  assert f'manual_dir={tmp_path / "absent"} does not exist' in message and '\n' not in message
  assert 'Traceback' not in capfd.readouterr().err


SHELL_SCRIPTS = (
  'bench/gpu_perf.sh',
  'scripts/reproduce_gpu.sh',
  'scripts/release_gpu.sh',
  'scripts/release_roads_gpu.sh',
  'scripts/lodo_gpu.sh',
)


def _python_snippets(script: str) -> list[tuple[str, str]]:
  """(where, code) of every Python program a shell script runs: here-documents and -c
  strings (shell variables in double-quoted ones read as 1), and the code a snippet takes
  from a bench script (`runpy.run_path('bench/X.py')['NAME']`)."""
  text = (REPO / script).read_text()
  # What it sources runs too: script_help.sh (sourced by a path of several spellings) and
  # any `. scripts/X.sh`.
  sourced = set(re.findall(r'^\. (scripts/[\w.]+\.sh)$', text, re.M))
  if 'script_help.sh' in text and not script.endswith('script_help.sh'):
    sourced.add('scripts/script_help.sh')
  for path in sorted(sourced):
    text += (REPO / path).read_text()
  found = [
    (f'{script} <<{tag}', body) for tag, body in re.findall(r"<<'?(\w+)'?\n(.*?)\n\1\n", text, re.S)
  ]
  for body in re.findall(r'-c "((?:[^"\\]|\\.)*)"', text, re.S):
    found.append((f'{script} -c', re.sub(r'\$\{?\w+\}?', '1', body)))
  found += [(f'{script} -c', body) for body in re.findall(r"-c '([^']*)'", text)]
  for _where, code in list(found):
    for path, name in re.findall(r"run_path\('([^']+)'\)\['(\w+)'\]", code):
      value = getattr(_load(Path(path).stem, Path(path).parent.name), name)
      # A string of code (PREPARE_CODE) or a function (its source: its imports run too).
      found.append(
        (f'{path} {name}', value if isinstance(value, str) else inspect.getsource(value))
      )
  return found


@pytest.mark.parametrize('script', SHELL_SCRIPTS)
def test_gpu_scripts_run_what_exists(script):
  """What the one-shot GPU scripts start exists here: the Python they run compiles and its
  imports resolve (crackjax.datasets moved to crackjax.data.registry: the prepare_data stage
  failed with an ImportError on the GPU), and the modules, bench scripts and configs they name
  are there. bash -n: the script parses."""
  subprocess.run(['bash', '-n', str(REPO / script)], check=True)
  text = (REPO / script).read_text()
  snippets = _python_snippets(script)
  assert len(snippets) >= (4 if script.startswith('bench') else 3), snippets
  for where, code in snippets:
    tree = ast.parse(code, filename=where)
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    try:
      exec(compile(ast.Module(body=imports, type_ignores=[]), where, 'exec'), {})
    except ImportError as e:
      pytest.fail(f'{where}: {e}')
  for module in re.findall(r' -m ([\w.]+)', text):
    assert importlib.util.find_spec(module), f'{script}: python -m {module}: no such module'
  for path in re.findall(r'\b((?:bench|configs)/\w+\.py)', text):
    assert (REPO / path).is_file(), f'{script}: {path} does not exist'


@pytest.mark.slow
def test_gpu_script_tiny_data_and_table_row_on_fake_crackforest(tmp_path):
  """TINY=1 bench/gpu_perf.sh, setup + prepare_data + table_row + fps_f32 (a minute or so):
  each stage exits 0 and the archive holds the table row's breakdown and eval.json."""
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=10, size=(64, 96))
  env = dict(
    os.environ,
    TINY='1',
    STAGES='table_row fps_f32',
    OUT=str(tmp_path / 'out'),
    RES=str(tmp_path / 'res'),
    WORK=str(tmp_path / 'work'),
    CRACKFOREST_DIR=str(raw),
    PYTHON=sys.executable,
  )
  proc = subprocess.run(
    ['bash', 'bench/gpu_perf.sh'], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  res = tmp_path / 'res' / 'gpu_perf'
  summary = (res / 'summary.txt').read_text()
  stages = dict(re.findall(r'^(\w+) rc=(\d+) ', summary, re.M))
  assert stages == dict.fromkeys(['setup', 'prepare_data', 'table_row', 'fps_f32'], '0'), summary
  row = json.loads((res / 'table_row.json').read_text())
  assert row['prepare_s'] > 0 and row['steps'] > 0 and row['launch_to_eval_json_s'] > 0
  with tarfile.open(tmp_path / 'out' / 'gpu_perf.tar.gz') as tar:
    names = set(tar.getnames())
  for name in ('summary.txt', 'env.txt', 'table_row.eval.json', 'fps_f32.json'):
    assert f'gpu_perf/{name}' in names


@pytest.mark.slow
def test_gpu_script_names_an_absent_crackforest(tmp_path):
  """An explicit CRACKFOREST_DIR that does not exist is not replaced by another copy: setup
  and prepare_data fail, saying where they looked (7 s: the script's setup imports jax)."""
  env = dict(
    os.environ,
    STAGES='prepare_data',
    OUT=str(tmp_path / 'out'),
    RES=str(tmp_path / 'res'),
    WORK=str(tmp_path / 'work'),
    CRACKFOREST_DIR=str(tmp_path / 'absent'),
    PYTHON=sys.executable,
  )
  subprocess.run(
    ['bash', 'bench/gpu_perf.sh'], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
  )
  res = tmp_path / 'res' / 'gpu_perf'
  summary = (res / 'summary.txt').read_text()
  assert re.search(r'^setup rc=1 ', summary, re.M) and re.search(
    r'^prepare_data rc=1 ', summary, re.M
  )
  assert f'no CrackForest archive at {tmp_path / "absent"}' in (res / 'setup.log').read_text()
  log = (res / 'prepare_data.log').read_text()
  assert f'manual_dir={tmp_path / "absent"} does not exist' in log and 'Traceback' not in log


@pytest.mark.slow
def test_reproduce_gpu_script_smoke_chunk_on_fake_crackforest(tmp_path):
  """scripts/reproduce_gpu.sh as on the GPU (its default eval.background_workers, >= 1), the
  smoke variant of one row, one seed, on a fake CrackForest (about 45 s): the job completes
  and the chunk's export and report come back."""
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=10, size=(64, 96))
  _, out = fixtures.run_gpu_script(
    'scripts/reproduce_gpu.sh',
    tmp_path,
    CAMPAIGN='fake_campaign',  # no results/<campaign>.json: nothing counts as done
    VARIANT='smoke',
    ROWS='wce_xie_e5',
    SEEDS='1',
    PARALLEL='1',
    MINUTES='3',
    DATA=str(raw),
    BACKGROUND_WORKERS=None,
  )
  assert '1 of 1 jobs complete.' in out and 'reproduce exit code 0' in out, out[-4000:]
  export = json.loads((tmp_path / 'out' / 'fake_campaign.json').read_text())
  assert len(export['runs']) == 1, export
  with tarfile.open(tmp_path / 'out' / 'report.tar.gz') as tar:
    assert 'report/report.md' in tar.getnames()


def test_cpu_perf_script_parses_and_names_what_exists():
  """bench/cpu_perf.sh parses, prints its usage, and the bench scripts and configs it runs exist."""
  subprocess.run(['bash', '-n', str(REPO / 'bench/cpu_perf.sh')], check=True)
  out = subprocess.run(
    ['bash', 'bench/cpu_perf.sh', '--help'], capture_output=True, text=True, cwd=REPO, check=True
  ).stdout
  assert out.startswith('usage: [STAGES=... TINY=1 RES=DIR] bash bench/cpu_perf.sh')
  text = (REPO / 'bench/cpu_perf.sh').read_text()
  for path in re.findall(r'\b((?:bench|configs)/\w+\.py)', text):
    assert (REPO / path).is_file(), f'bench/cpu_perf.sh: {path} does not exist'


@pytest.mark.slow
def test_cpu_perf_script_tiny_step(tmp_path):
  """TINY=1 bench/cpu_perf.sh, the float32 step stage: a log with the interleaved figures and the
  CPU profile, the JSON, and a summary line with the stage's exit status."""
  env = dict(
    os.environ, TINY='1', STAGES='step_f32', RES=str(tmp_path / 'res'), PYTHON=sys.executable
  )
  out = subprocess.run(
    ['bash', 'bench/cpu_perf.sh'], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
  )
  assert out.returncode == 0, out.stderr
  res = tmp_path / 'res'
  summary = (res / 'summary.txt').read_text()
  assert 'step_f32: rc 0,' in summary, summary + (res / 'step_f32.log').read_text()[-2000:]
  log = (res / 'step_f32.log').read_text()
  assert 'jax CPU time:' in log and 'CPU profile, op time per step by kind' in log
  assert (res / 'step_f32.json').is_file() and 'jax' in (res / 'env.txt').read_text()
