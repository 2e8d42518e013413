"""Faults at the edges (issue 29): config mistakes and damaged runner records, each ending in
one line that names the file, field or value, exit status 1, and nothing written or lost.

In-process parse and validation checks are fast; anything that launches a command is
`slow`."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crackjax import experiment
from crackjax.config import flags as config_flags
from crackjax.config.validation import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _parse(*args: str):
  argv = ['prog', *args]
  flag_values = config_flags.new_flag_values(argv)
  config_flags.parse_flags(flag_values, argv, prog='prog')
  return flag_values


def _exit_line(*args: str) -> str:
  with pytest.raises(SystemExit) as e:
    _parse(*args)
  message = str(e.value.code)
  assert isinstance(e.value.code, str)  # sys.exit(message): printed on stderr, exit status 1
  return message


# ------------------------------------------------------------------------ the config file


@pytest.mark.parametrize(
  ('config', 'says'),
  [
    (
      'configs/tabel1.py:wce_xie_e5',
      'configs/tabel1.py does not exist; did you mean configs/table1.py?',
    ),
    ('confgs/table1.py', 'confgs/table1.py does not exist; did you mean configs/table1.py?'),
    ('configs/table1', 'configs/table1 does not exist; did you mean configs/table1.py?'),
    ('configs/zzzzzz.py', 'configs/zzzzzz.py does not exist.'),
    ('configs/', 'configs/ is a folder; name a config file in it, e.g. configs/<name>.py.'),
    (':smoke', 'no config file named; expected configs/<name>.py[:arg].'),
  ],
)
def test_a_missing_config_file_is_named_with_a_close_one(monkeypatch, config, says):
  monkeypatch.chdir(REPO)
  assert _exit_line(f'--config={config}') == f'prog: --config={config}: {says}'


def test_a_missing_config_file_is_named_before_its_overrides(monkeypatch):
  # ml_collections defers the missing file's error to the config's first use: a 55-line
  # traceback when an override was applied to it.
  monkeypatch.chdir(REPO)
  line = _exit_line('--config', 'configs/tabel1.py', '--config.learning_rate=1')
  assert line == (
    'prog: --config=configs/tabel1.py: configs/tabel1.py does not exist; did you mean '
    'configs/table1.py?'
  )


@pytest.mark.parametrize(
  ('source', 'says'),
  [
    (
      "def get_config(arg=None):\n  raise RuntimeError('no GPU here')\n",
      'loading the config file raised RuntimeError: no GPU here (CFG, line 2, in get_config).',
    ),
    # A KeyError inside the file used to be called an unknown field on the command line.
    (
      "def get_config(arg=None):\n  return {}['widths']\n",
      "loading the config file raised KeyError: 'widths' (CFG, line 2, in get_config).",
    ),
    (
      'import not_a_module_here\n\ndef get_config(arg=None):\n  return None\n',
      "loading the config file raised ModuleNotFoundError: No module named 'not_a_module_here' "
      '(CFG, line 1, in <module>).',
    ),
    (
      'def get_config(arg=None)\n  return None\n',
      "the config file does not parse: SyntaxError: expected ':' (CFG, line 1).",
    ),
    # ml_collections keeps an OSError of the file until the config is used (a traceback then).
    (
      "def get_config(arg=None):\n  return open('/nonexistent/list.txt')\n",
      'loading the config file raised FileNotFoundError: [Errno 2] No such file or directory: '
      "'/nonexistent/list.txt' (CFG, line 2, in get_config).",
    ),
    ('x = 1\n', 'the config file defines no get_config() function.'),
    (
      'def get_config(arg=None):\n  pass\n',
      "the config file's get_config() returned None (a missing return?).",
    ),
  ],
)
def test_a_config_file_that_raises_is_one_line_naming_where(tmp_path, monkeypatch, source, says):
  # ml_collections loads every config file as module 'config_config', into the module object
  # of the previous load if there is one (a command loads one; these tests several).
  monkeypatch.delitem(sys.modules, 'config_config', raising=False)
  config = tmp_path / 'my_config.py'
  config.write_text(source)
  line = _exit_line(f'--config={config}')
  assert line == f'prog: --config={config}: ' + says.replace('CFG', str(config))


@pytest.mark.parametrize(
  ('config', 'says'),
  [
    (
      'configs/smoke.py:x',
      "Unknown config argument 'x': configs/smoke.py takes none; for another size use "
      'configs/crackforest_exp.py:<variant> (cpu, cpu_scale, smoke).',
    ),
    (
      'configs/crackforest_exp.py:smok',
      "Unknown config argument 'smok' for the unet model; known: ['cpu', 'cpu_scale', 'smoke'].",
    ),
  ],
)
def test_a_bad_config_argument_stays_one_line(monkeypatch, config, says):
  monkeypatch.chdir(REPO)
  line = _exit_line(f'--config={config}')
  assert line == (
    f'prog: flag --config={config}: Error whilst parsing config file: {says}\n'
    f'{config_flags.HELP_HINT}'
  )


# --------------------------------------------------------------- field types (validation)


@pytest.mark.parametrize(
  ('config', 'override', 'says'),
  [
    (
      'smoke.py',
      'model.widths=abc',
      "config.model.widths=('abc',): expected a tuple of positive integers.",
    ),
    (
      'smoke.py',
      'model.widths=(16.5, 32, 64, 128, 256)',
      'config.model.widths=(16.5, 32, 64, 128, 256): expected a tuple of positive integers.',
    ),
    (
      'smoke.py',
      'model.widths=(0, 8, 16, 32, 64)',
      'config.model.widths=(0, 8, 16, 32, 64): expected a tuple of positive integers.',
    ),
    (
      'smoke.py',
      'model.widths=()',
      'config.model.widths=(): expected a tuple of positive integers.',
    ),
    (
      'compare.py:crackseg,smoke',
      'model.rates=(1,x)',
      "config.model.rates=('(1,x)',): expected a tuple of positive integers.",
    ),
    (
      'compare.py:deeplabv3plus,smoke',
      'model.blocks=abc',
      "config.model.blocks=('abc',): expected a tuple of positive integers.",
    ),
  ],
)
def test_a_wrong_type_in_a_tuple_field_is_a_config_error(monkeypatch, config, override, says):
  # ml_collections takes any elements into a tuple field; the model took them until JAX did
  # not, in the first step, after the workdir's fingerprint was written.
  monkeypatch.chdir(REPO)
  config = _parse(f'--config=configs/{config}', f'--config.{override}').config
  with pytest.raises(ConfigError) as e:
    experiment.build(config)
  assert str(e.value) == says


def test_every_field_of_the_model_and_loss_is_checked_against_its_declared_default():
  from crackjax.config import validation

  problems = validation.type_problems(
    'model',
    {'widths': [8, 16], 'dtype': 3, 'width_scale': 'big', 'image_pooling': 1, 'other': 'x'},
    {'widths': (4, 8), 'dtype': 'float32', 'width_scale': 1.0, 'image_pooling': False},
  )
  assert problems == [
    'config.model.dtype=3: expected a string.',
    "config.model.width_scale='big': expected a number.",
    'config.model.image_pooling=1: expected True or False.',
  ]  # a list for a tuple (config.json) is fine; a field without a default is not judged
  assert validation.type_problems('loss', {'beta': 1}, {'beta': 1.0}) == []  # an int is a number


# -------------------------------------------------------------------- whole commands (slow)


def _launch(workdir: Path, *args: str) -> subprocess.CompletedProcess:
  env = {**os.environ, 'PYTHONPATH': str(REPO)}
  command = [sys.executable, 'launch.py', *args, f'--workdir={workdir}']
  return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)


def _own_lines(stderr: str) -> list[str]:
  """stderr without absl's log lines (the run header, 'I1127 12:00:00.000000 ...')."""
  return [line for line in stderr.splitlines() if not re.match(r'[IWEF]\d{4} \d\d:', line)]


@pytest.mark.slow
def test_launch_with_a_mistyped_config_file_is_one_line_and_creates_nothing(tmp_path):
  out = _launch(tmp_path / 'run', '--config=configs/tabel1.py:wce_xie_e5')
  assert out.returncode == 1
  assert out.stderr.splitlines() == [
    'launch.py: --config=configs/tabel1.py:wce_xie_e5: configs/tabel1.py does not exist; did '
    'you mean configs/table1.py?'
  ]
  assert not (tmp_path / 'run').exists()


@pytest.mark.slow
def test_launch_with_a_wrong_tuple_type_leaves_the_workdir_untouched(tmp_path):
  workdir = tmp_path / 'run'
  workdir.mkdir()
  (workdir / 'notes.txt').write_text('mine')
  out = _launch(workdir, '--config=configs/smoke.py', '--config.model.widths=abc')
  assert out.returncode == 1
  assert _own_lines(out.stderr) == [
    "launch.py: bad config: config.model.widths=('abc',): expected a tuple of positive integers."
  ]
  assert sorted(p.name for p in workdir.iterdir()) == ['notes.txt']  # no fingerprint.json
  assert (workdir / 'notes.txt').read_text() == 'mine'
