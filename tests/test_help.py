"""Every command's --help: its own usage line and its own flags, exit status 0 (issue: the
commands without a config printed the config usage line and no flag at all)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from crackjax.deploy import export_command, models_command, predict_command
from crackjax.paper import complexity, report, runner
from crackjax.runs import docs
from crackjax.trainer import data_stats, evaluate_command

REPO = Path(__file__).resolve().parents[1]


def _bench(name: str):
  spec = importlib.util.spec_from_file_location(f'bench_{name}', REPO / 'bench' / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.main


# (command, its main with --help, the start of its usage line, flags it must list)
COMMANDS = [
  (
    'runner',
    lambda: runner.main(['--help']),
    'usage: python -m crackjax.paper.runner --table=T --workdir=DIR',
    ['--table', '--rows', '--seeds', '--parallel', '--max_minutes', '--curve_protocols'],
  ),
  (
    'report',
    lambda: report.main(['--help']),
    'usage: python -m crackjax.paper.report CAMPAIGN_DIR_OR_EXPORT.json',
    ['--out', '--export', '--protocols', '--complete_only'],
  ),
  (
    'predict',
    lambda: predict_command.main(['--help']),
    'usage: crackjax-predict (--model=NAME|FILE|URL | --workdir=RUN) --out=DIR IMAGE_OR_FOLDER',
    ['--workdir', '--model', '--out', '--threshold', '--mm_per_pixel', '--tile_size'],
  ),
  (
    'evaluate',
    lambda: evaluate_command.main(['--help']),
    'usage: crackjax-evaluate (--workdir=RUN | --model=NAME|FILE|URL --out=DIR)',
    ['--workdir', '--model', '--data', '--folder', '--protocols', '--step', '--workers'],
  ),
  (
    'export',
    lambda: export_command.main(['--help']),
    'usage: crackjax-export (--workdir=RUN | --model=NAME|FILE|URL) --out=FILE',
    ['--workdir', '--model', '--out', '--format', '--dtype', '--hw'],
  ),
  (
    'models',
    lambda: models_command.main(['--help']),
    'usage: crackjax-models',
    ['--json'],
  ),
  (
    'docs',
    lambda: docs.main(['--help']),
    'usage: crackjax-docs',
    ['--path', 'page'],
  ),
  (
    'data stats',
    lambda: data_stats.main(['--help']),
    'usage: python -m crackjax.trainer.data_stats --config=configs/<name>.py',
    ['--config', '--splits', '--json'],
  ),
  (
    'complexity',
    lambda: complexity.main(['--help']),
    'usage: python -m crackjax.paper.complexity --config=configs/<name>.py',
    ['--config', '--hw', '--fps'],
  ),
  (
    'bench train_step',
    lambda: _bench('train_step')(['--help']),
    'usage: bench/train_step.py --config=',
    ['--config'],
  ),
  (
    'bench loop_vs_step',
    lambda: _bench('loop_vs_step')(['--help']),
    'usage: bench/loop_vs_step.py --config=',
    ['--config'],
  ),
  (
    'bench predict_speed',
    lambda: _bench('predict_speed')(['--help']),
    'usage: bench/predict_speed.py --config=',
    ['--config'],
  ),
  (
    'bench tile_fidelity',
    lambda: _bench('tile_fidelity')(['--help']),
    'usage: bench/tile_fidelity.py --workdir=RUN --image=PHOTO',
    ['--workdir', '--image', '--overlaps', '--blends'],
  ),
  (
    'bench min_length',
    lambda: _bench('min_length')(['--help']),
    'usage: bench/min_length.py (--workdir=RUN [--split=test] | --model=NAME|FILE|URL',
    ['--workdir', '--split', '--lengths', '--model', '--folder', '--mask_suffix', '--limit'],
  ),
  (
    'bench matching_vs_correspond',
    lambda: _bench('matching_vs_correspond')(['--help']),
    'usage: bench/matching_vs_correspond.py --workdir=RUN',
    ['--workdir', '--num_images', '--protocols'],
  ),
  (
    'bench launch_breakdown',
    lambda: _bench('launch_breakdown')(['--help']),
    'usage: bench/launch_breakdown.py',
    ['--workdir', '--prepare_first'],
  ),
  (
    'bench peer_mtscrack',
    lambda: _bench('peer_mtscrack')(['--help']),
    'usage: bench/peer_mtscrack.py --models=',
    ['--models', '--mtscrack_onnx', '--set', '--data', '--max_images', '--fp_window'],
  ),
]


@pytest.mark.parametrize('name,call,usage,flags', COMMANDS, ids=[c[0] for c in COMMANDS])
def test_help_shows_the_command_s_usage_and_flags(name, call, usage, flags, capsys):
  with pytest.raises(SystemExit) as e:
    call()
  assert e.value.code in (0, None)
  out = capsys.readouterr().out
  assert out.startswith(usage), out[:300]
  for flag in flags:
    assert f'{flag}' in out, (name, flag, out)
  # Not the flags of the libraries a command imports (absl's logging, grain, array_record).
  assert '--verbosity' not in out and '--array_record_reader_pool_size' not in out


def test_bench_eval_speed_help(monkeypatch, capsys):
  monkeypatch.setattr(sys, 'argv', ['bench/eval_speed.py', '--help'])
  with pytest.raises(SystemExit) as e:
    _bench('eval_speed')()
  assert e.value.code == 0
  out = capsys.readouterr().out
  assert out.startswith('usage: eval_speed.py') and '--num_images' in out


@pytest.mark.slow
def test_launch_help():
  # launch.py runs under absl.app: the global flag set holds its imports' flags too.
  out = subprocess.run(
    [sys.executable, 'launch.py', '--help'],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=REPO,
  )
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith('usage: launch.py --config=configs/<name>.py')
  for flag in ('--config', '--workdir', '--mode', '--coordinator_address'):
    assert flag in out.stdout
  assert '--array_record_reader_pool_size' not in out.stdout and '--verbosity' not in out.stdout


@pytest.mark.slow
def test_crackjax_train_is_the_launch_command():
  # The console script's entry point (pyproject.toml) under its own name; the same flags.
  argv = [sys.executable, '-c', 'from crackjax.trainer import train_command; train_command.main()']
  out = subprocess.run([*argv, '--help'], capture_output=True, text=True, timeout=120, cwd=REPO)
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith('usage: crackjax-train --config=configs/<name>.py')
  for flag in ('--config', '--workdir', '--mode', '--coordinator_address'):
    assert flag in out.stdout
  missing = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
  assert missing.returncode == 1
  assert missing.stderr.startswith('crackjax-train: --config=configs/<name>.py[:arg] is required.')


@pytest.mark.parametrize(
  'script,knobs',
  [
    ('bench/gpu_perf.sh', ['STAGES', 'TINY', 'BUDGET_S']),
    ('scripts/reproduce_gpu.sh', ['ROWS', 'PLAN=1']),
    ('scripts/release_gpu.sh', ['STAGES', 'TINY', 'TRAIN_MINUTES', 'FILE']),
    ('scripts/release_roads_gpu.sh', ['STAGES', 'TINY', 'TRAIN_MINUTES', 'DATA', 'FILE']),
    ('scripts/lodo_gpu.sh', ['RECIPES', 'BUDGET', 'TINY', 'TRAIN_MINUTES', 'RETURN_MODELS']),
    ('scripts/lodo.sh', ['PUBLIC', 'RECIPES', 'BUDGET', 'HELD_OUT', 'STATUS=1']),
    ('scripts/wheel_smoke.sh', ['PYTHON', 'CRACKFOREST_DIR', 'KEEP']),
    ('scripts/peer_table.sh', ['MODELS', 'MTS_ONNX', 'MTS_DIR', 'MAX_IMAGES']),
  ],
)
def test_shell_scripts_help_starts_nothing(script, knobs, tmp_path):
  env = {'PATH': '/usr/bin:/bin', 'OUT': str(tmp_path / 'out'), 'WORK': str(tmp_path / 'work')}
  proc = subprocess.run(
    ['bash', script, '--help'], capture_output=True, text=True, cwd=REPO, env=env, timeout=30
  )
  assert proc.returncode == 0 and proc.stdout.startswith('usage: '), proc.stdout + proc.stderr
  for knob in knobs:
    assert knob in proc.stdout
  # The header comment only, not the code after it (release_gpu.sh's `set -euo pipefail`
  # once let it print the whole script).
  assert 'script_help "usage' not in proc.stdout and not proc.stdout.count('\nset -')
  assert not list(tmp_path.iterdir())  # no output or work folder: the setup did not run
  proc = subprocess.run(
    ['bash', script, '--rows=x'], capture_output=True, text=True, cwd=REPO, env=env, timeout=30
  )
  assert proc.returncode == 2 and 'takes no arguments' in proc.stderr
  assert not list(tmp_path.iterdir())
