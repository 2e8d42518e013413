"""Faults at the edges (issue 29): config mistakes and damaged runner records, each ending in
one line that names the file, field or value, exit status 1, and nothing written or lost.

In-process parse and validation checks are fast; anything that launches a command is
`slow`."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags

from crackjax import cli
from crackjax.experiment import build as experiment
from crackjax.experiment.validation import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _parse(*args: str):
  argv = ['prog', *args]
  flag_values = cli.new_flag_values(argv)
  cli.parse_flags(flag_values, argv, prog='prog')
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


@pytest.mark.parametrize('overrides', [(), ('--config.num_epochs=2',)])
def test_an_os_error_of_the_config_file_is_named_with_overrides_too(monkeypatch, overrides):
  """configs/finetune.py:<unknown name>: ml_collections keeps the not-found error until an
  override touches the config; it was then told as 'get_config() returned a _ErrorConfig'."""
  monkeypatch.chdir(REPO)
  monkeypatch.delitem(sys.modules, 'config_config', raising=False)
  line = _exit_line('--config=configs/finetune.py:no-such-model', *overrides)
  assert "loading the config file raised ModelNotFoundError: --model 'no-such-model'" in line
  assert 'configs/finetune.py, line' in line and '_ErrorConfig' not in line


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
    f'prog: flag --config={config}: Error whilst parsing config file: {says}\n{cli.HELP_HINT}'
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
  from crackjax.experiment import validation

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


def test_a_required_flag_left_out_is_named_as_such():
  # absl says 'Flag --workdir must have a value other than None', which was once taken for a
  # config file whose get_config() returned None.
  argv = ['prog', '--config=configs/smoke.py']
  flag_values = cli.new_flag_values(argv)
  flags.DEFINE_string('out', None, 'where', flag_values=flag_values)
  flags.mark_flag_as_required('out', flag_values=flag_values)
  with pytest.raises(SystemExit) as e:
    cli.parse_flags(flag_values, argv, prog='prog')
  assert e.value.code == f'prog: --out is required.\n{cli.HELP_HINT}'
  assert _exit_line() == 'prog: --config=configs/<name>.py[:arg] is required.'


@pytest.mark.parametrize(
  ('argv', 'workdir'),
  [
    (['--config=configs/crack360_exp.py'], 'workdirs/crack360_exp'),
    (['--config', 'configs/table1.py:wce_xie_e5', '--mode=eval'], 'workdirs/table1_wce_xie_e5'),
    (['--config=/x/configs/release/crackforest_unet_cpu.py'], 'workdirs/crackforest_unet_cpu'),
    (['--config=configs/compare.py:a/b c'], 'workdirs/compare_a_b_c'),
    (['--mode=eval'], None),
  ],
)
def test_the_default_workdir_is_named_after_the_config(argv, workdir):
  got = cli.default_workdir(['launch.py', *argv])
  assert (None if got is None else got.as_posix()) == workdir


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


@pytest.mark.slow
def test_launch_without_a_workdir_says_its_default_and_reaches_the_dataset(tmp_path):
  # The design card's command, as written: no --workdir.
  env = {**os.environ, 'PYTHONPATH': str(REPO)}
  command = [
    sys.executable,
    str(REPO / 'launch.py'),
    f'--config={REPO / "configs" / "crack360_exp.py"}',
    f'--config.data.data_dir={tmp_path / "tfds"}',
  ]
  for _ in range(2):  # the same command, the same workdir
    out = subprocess.run(
      command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    assert out.returncode == 1
    lines = _own_lines(out.stderr)
    assert lines[0] == (
      'launch.py: no --workdir given: the run is in workdirs/crack360_exp (the same command '
      'resumes there).'
    )
    assert lines[1].startswith("launch.py: Dataset 'crack360' needs files you download")
  assert not (tmp_path / 'workdirs').exists()  # nothing made before the data is there


# ------------------------------------------------------------ damaged runner records (fast)

RESULTS = REPO / 'results' / 'gpu_table1.json'


EXP_JACCARD = 'table1:exp_0.75_a20_wj'  # seeds 1 and 2, 5 epochs (26 Nov)


def _campaign(workdir: Path) -> Path:
  """The exp_0.75_a20_wj_e5 run of seed 1 (5 epochs) of results/gpu_table1.json as a
  runner's job directory under `workdir`; returns the job directory."""
  from crackjax.paper import records

  run = next(r for r in records.load([RESULTS]) if (r['group'], r['seed']) == (EXP_JACCARD, 1))
  job = workdir / 'table1' / run['group'].split(':')[1] / f'seed{run["seed"]}'
  job.mkdir(parents=True)
  info = {k: run[k] for k in ('table', 'group', 'seed', 'rows', 'hardware', 'versions')}
  (job / 'run.json').write_text(json.dumps(info))
  for e in run['epochs']:
    (job / f'epoch_{e["epoch"]:03d}.json').write_text(json.dumps(e))
  return job


def test_a_damaged_record_is_set_aside_without_replacing_an_earlier_copy(tmp_path, capsys):
  from crackjax.runs import identity

  record = identity.epoch_path(tmp_path, 3)
  (tmp_path / 'epoch_003.json.damaged').write_text('the first damaged copy')
  record.write_text('{"epoch": 3, "resu')
  assert identity.read_record(record, required=('epoch', 'results')) is None
  err = capsys.readouterr().err
  assert err == (
    f'{record}: damaged record (Unterminated string starting at: line 1 column 14 (char 13)); '
    'set aside as epoch_003.json.damaged-2; its epoch counts as not evaluated.\n'
  )  # it says what happened; what follows (evaluated again or not) its caller says
  assert (tmp_path / 'epoch_003.json.damaged').read_text() == 'the first damaged copy'
  assert (tmp_path / 'epoch_003.json.damaged-2').read_text() == '{"epoch": 3, "resu'
  assert identity.why_not_evaluated(tmp_path, 3) == (
    'its record was damaged and set aside as epoch_003.json.damaged-2'
  )
  assert identity.why_not_evaluated(tmp_path, 4) == (
    'it has no record (the run stopped before its evaluation was written)'
  )
  record.write_text(json.dumps({'epoch': 3, 'results': {'strict': {}}}))
  assert identity.why_not_evaluated(tmp_path, 3, ['strict', 'tolerance']) == (
    "its record epoch_003.json lacks protocol(s) ['tolerance']"
  )


@pytest.mark.slow  # seconds: the report draws its curves
def test_the_report_names_every_seed_of_a_row_it_leaves_out(tmp_path, capsys):
  from crackjax.paper import report

  job = _campaign(tmp_path / 'campaign')
  damaged = job / 'epoch_005.json.damaged'
  (job / 'epoch_005.json').rename(damaged)  # as the runner sets a damaged record aside
  before = {p.name: p.read_bytes() for p in job.iterdir()}
  assert report.main([str(tmp_path / 'campaign'), f'--out={tmp_path / "report"}']) == 0
  note = (
    f"table1:exp_0.75_a20_wj_e5 seed 1: epoch 5's record was damaged and set aside as "
    f'{damaged}; run the runner again: it evaluates that epoch again if its checkpoint is kept, '
    'and otherwise says how to train the job afresh.'
  )
  assert capsys.readouterr().err == f'note: left out {note}\n'  # was: dropped without a word
  assert (
    f'## Left out\n\nSeeds of rows that are not in the tables above, and why:\n\n- {note}\n'
    in ((tmp_path / 'report' / 'report.md').read_text())
  )
  assert {p.name: p.read_bytes() for p in job.iterdir()} == before  # the report moves nothing


def test_left_out_says_why_each_seed_is_missing(tmp_path):
  # In process and without plots (the report itself is in the slow test above).
  from crackjax.paper import records, report_stats

  def left(edit) -> list[str]:
    data = json.loads(RESULTS.read_text())
    data['runs'] = [r for r in data['runs'] if r['group'] == EXP_JACCARD]  # seeds 1, 2
    edit(data['runs'])
    export = tmp_path / 'edited.json'
    export.write_text(json.dumps(data))
    runs = records.load([export])
    return report_stats.left_out(runs, ['strict', 'tolerance_thin_gt'], records.set_aside([export]))

  assert left(lambda runs: None) == []

  def cut(runs):  # seed 1 cut at a time limit after epoch 3
    runs[0]['epochs'] = runs[0]['epochs'][:3]

  assert left(cut) == [
    'table1:exp_0.75_a20_wj_e5 seed 1: epoch 5 is not evaluated yet (the run reached epoch 3: '
    'still running, or cut at a time limit; the runner resumes it).'
  ]
  assert left(lambda runs: runs[1]['epochs'][4]['results'].pop('tolerance_thin_gt')) == [
    "table1:exp_0.75_a20_wj_e5 seed 2: epoch 5 was not evaluated under ['tolerance_thin_gt'] "
    "(its record holds ['strict'])."
  ]
  job = _campaign(tmp_path / 'campaign')
  (job / 'epoch_005.json').rename(job / 'epoch_005.json.damaged')
  runs = records.load([tmp_path / 'campaign'])
  assert report_stats.left_out(runs, ['strict'], records.set_aside([tmp_path / 'campaign'])) == [
    f"table1:exp_0.75_a20_wj_e5 seed 1: epoch 5's record was damaged and set aside as "
    f'{job / "epoch_005.json.damaged"}; run the runner again: it evaluates that epoch again if '
    'its checkpoint is kept, and otherwise says how to train the job afresh.'
  ]
  assert report_stats.left_out(runs, ['strict']) == [  # no campaign directory to look in
    'table1:exp_0.75_a20_wj_e5 seed 1: epoch 5 is not evaluated yet (the run reached epoch 4: '
    'still running, or cut at a time limit; the runner resumes it).'
  ]
  later = {**json.loads((job / 'epoch_004.json').read_text()), 'epoch': 6}  # past the row's 5
  (job / 'epoch_006.json').write_text(json.dumps(later))
  assert report_stats.left_out(records.load([tmp_path / 'campaign']), ['strict']) == [
    'table1:exp_0.75_a20_wj_e5 seed 1: epoch 5 has no evaluation record.'
  ]


# ---------------------------------------------------- damaged runner records, the runner (slow)


@pytest.mark.slow
def test_the_runner_says_what_it_does_with_each_damaged_record(tmp_path, capsys, caplog):
  from crackjax.paper import report, runner
  from crackjax.runs import identity
  from tests import fixtures

  raw, tfds_dir = fixtures.smoke_data_dirs(tmp_path / 'data')
  workdir = tmp_path / 'campaign'
  argv = [
    '--table=1',
    '--rows=wce_exp_0.75_e5,wce_exp_0.75_e10',  # one job of 10 epochs, a row at epoch 5
    '--seeds=1',
    '--variant=smoke',
    f'--set=data.manual_dir={raw}',
    f'--set=data.data_dir={tfds_dir}',
    f'--workdir={workdir}',
    '--curve_protocols=strict',
  ]
  assert runner.main(argv) == 0
  job = workdir / 'table1' / 'wce_exp_0.75' / 'seed0'
  assert identity.evaluated_epochs(job) == list(range(1, 11))
  capsys.readouterr()
  # The runner keeps the newest two checkpoints (steps 27 and 30): damage the records of
  # epoch 10 (the one training ended at), 9 (an older one, checkpoint kept) and 5 (gone).
  texts = {e: identity.epoch_path(job, e).read_text() for e in (5, 9, 10)}
  for e, text in texts.items():
    identity.epoch_path(job, e).write_text(text[:100])
  others = {p.name: p.read_text() for p in job.glob('epoch_*.json')} | {}
  others = {k: v for k, v in others.items() if k not in {f'epoch_{e:03d}.json' for e in texts}}
  with caplog.at_level('WARNING'):
    assert runner.main(argv) == 0
  out, err = capsys.readouterr()
  for e in (5, 9, 10):
    assert (
      f'epoch_{e:03d}.json: damaged record (' in err
      and f'set aside as epoch_{e:03d}.json.damaged; its epoch counts as not evaluated.' in err
    )
  assert 'redone' not in err and 'before an interruption' not in caplog.text
  assert (
    'Evaluating epoch 10 from its checkpoint (step 30): its record was damaged and set aside as '
    'epoch_010.json.damaged.' in caplog.text
  )
  assert (
    '1:wce_exp_0.75:0: evaluating epoch 9 again from its checkpoint (step 27): its record was '
    'damaged and set aside as epoch_009.json.damaged.' in out
  )
  assert (
    '1:wce_exp_0.75:0: epoch 5 has no evaluation: its record was damaged and set aside as '
    'epoch_005.json.damaged, and its checkpoint is no longer kept (the newest 2 are); the '
    f'report leaves it out. To have it, move {job} aside and run the runner again (the job '
    'trains afresh, with the same seed).' in out
  )
  assert 'epoch 9: training time not measured (evaluated later from its checkpoint)' in out
  # Nothing lost: every damaged copy kept as it was, every other record untouched.
  for e, text in texts.items():
    assert (job / f'epoch_{e:03d}.json.damaged').read_text() == text[:100]
  assert identity.evaluated_epochs(job) == [e for e in range(1, 11) if e != 5]
  assert all((job / name).read_text() == text for name, text in others.items())
  # The report names the seed it leaves out, on stderr and in report.md.
  assert report.main([str(workdir)]) == 0
  err = capsys.readouterr().err
  assert err.startswith(
    "note: left out table1:wce_exp_0.75_e5 seed 0: epoch 5's record was damaged and set aside "
    f'as {job / "epoch_005.json.damaged"}; '
  )
  assert '## Left out' in (workdir / 'report' / 'report.md').read_text()
