"""Damaged checkpoints: fall back to the newest readable step, set the damaged one aside, and
say so in one line; a different model configuration or no readable step is a clear error."""

import logging
import shutil
from pathlib import Path

import pytest

from crackjax.data import loader
from crackjax.data.splits import Splits
from crackjax.engine import checkpoints
from crackjax.experiment import restored
from crackjax.experiment.build import build
from crackjax.runs import identity
from crackjax.trainer import loop
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]

# A failed orbax restore abandons its other reads; state.py collects them quietly, but under
# load a few finish later and Python reports them as unraisable ('Event loop is closed').
pytestmark = pytest.mark.filterwarnings('ignore::pytest.PytestUnraisableExceptionWarning')


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  """A fake CrackForest archive and its prepared TFDS copy, shared by this module."""
  return fixtures.smoke_data_dirs(tmp_path_factory.mktemp('data'))


smoke_config = fixtures.smoke_config


@pytest.fixture(scope='module')
def trained(smoke_run):
  """The session's finished smoke run (checkpoints of steps 3 and 6), copied before use."""
  return smoke_run


@pytest.fixture
def run_copy(trained, tmp_path):
  workdir = tmp_path / 'run'
  shutil.copytree(trained, workdir)
  return workdir


def largest_file(step_dir: Path) -> Path:
  return max((p for p in step_dir.rglob('*') if p.is_file()), key=lambda p: p.stat().st_size)


def truncate(path: Path) -> None:
  with open(path, 'r+b') as f:
    f.truncate(path.stat().st_size // 2)


def truncate_arrays(step_dir: Path) -> None:
  """Cuts every OCDBT data file of a step short: an inference restore reads only the
  parameters, so damage in the largest file alone (which may hold only optimiser state) can
  go unseen by it (rightly: the parameters it needs are whole)."""
  data = [p for p in step_dir.rglob('*') if p.is_file() and p.parent.name == 'd']
  assert data, f'no OCDBT data files under {step_dir}'
  for path in data:
    truncate(path)


def set_aside(workdir: Path, step: int) -> list[Path]:
  return sorted((workdir / 'checkpoints').glob(f'{step}.damaged-*'))


def warnings_about_damage(caplog) -> list[str]:
  return [r.getMessage() for r in caplog.records if 'cannot be read' in r.getMessage()]


def assert_one_line(message: str) -> None:
  assert '\n' not in message and 'Traceback' not in message, message


@pytest.mark.slow
def test_truncated_latest_step_resume_falls_back_and_trains_on(data_dirs, run_copy, caplog):
  config = smoke_config(data_dirs)
  truncate(largest_file(run_copy / 'checkpoints' / '6'))
  with caplog.at_level(logging.WARNING):
    state = loop.train_and_evaluate(build(config), run_copy, evaluate_after=False)
  assert int(state.step) == 6
  [message] = warnings_about_damage(caplog)
  assert_one_line(message)
  directory = run_copy.absolute() / 'checkpoints'
  assert message.startswith(f'Checkpoint step 6 in {directory} cannot be read (')
  assert 'falling back to step 3' in message
  [aside] = set_aside(run_copy, 6)
  assert str(aside) in message
  assert (aside / 'default').is_dir()  # kept whole, not deleted
  steps = checkpoints.checkpoint_manager(run_copy, config.max_checkpoints_to_keep).all_steps()
  assert steps == [
    3,
    6,
  ]


@pytest.mark.parametrize('name', ['largest', 'default/_METADATA', 'default/manifest.ocdbt'])
def test_deleted_file_eval_falls_back(data_dirs, run_copy, caplog, name):
  config = smoke_config(data_dirs)
  step_dir = run_copy / 'checkpoints' / '6'
  (largest_file(step_dir) if name == 'largest' else step_dir / name).unlink()
  with caplog.at_level(logging.WARNING):
    state = build(config).states.restore(run_copy)
  assert int(state.step) == 3
  [message] = warnings_about_damage(caplog)
  assert_one_line(message)
  assert 'step 6' in message and 'falling back to step 3' in message
  assert len(set_aside(run_copy, 6)) == 1
  steps = checkpoints.checkpoint_manager(run_copy, config.max_checkpoints_to_keep).all_steps()
  assert steps == [3]


def test_a_damaged_step_of_a_read_only_run_is_left_in_place(data_dirs, run_copy, caplog):
  # Prediction and export read runs they may not write (a read-only mount): the damaged step
  # cannot be moved, and the older one is used all the same.
  config = smoke_config(data_dirs)
  (run_copy / 'checkpoints' / '6' / 'default' / 'manifest.ocdbt').unlink()
  real_rename = Path.rename

  def read_only(self, target):
    if self.parent.name == 'checkpoints':
      raise OSError(30, 'Read-only file system', str(self))
    return real_rename(self, target)

  with caplog.at_level(logging.WARNING), pytest.MonkeyPatch.context() as m:
    m.setattr(Path, 'rename', read_only)
    state = build(config).states.restore(run_copy)
  assert int(state.step) == 3
  [message] = warnings_about_damage(caplog)
  assert_one_line(message)
  assert 'left in place (Read-only file system) and falling back to step 3' in message
  assert not set_aside(run_copy, 6) and (run_copy / 'checkpoints' / '6').is_dir()


def test_every_step_damaged_is_one_clear_error(data_dirs, run_copy, caplog):
  config = smoke_config(data_dirs)
  for step in (3, 6):
    truncate(largest_file(run_copy / 'checkpoints' / str(step)))
  with caplog.at_level(logging.WARNING), pytest.raises(checkpoints.CheckpointError) as e:
    build(config).states.restore(run_copy)
  message = str(e.value)
  assert_one_line(message)
  directory = run_copy.absolute() / 'checkpoints'
  assert message.startswith(f'No readable checkpoint in {directory}:')
  assert 'step 6' in message and 'step 3' in message and 'delete or move' in message
  assert len(set_aside(run_copy, 3)) == len(set_aside(run_copy, 6)) == 1
  assert len(warnings_about_damage(caplog)) == 2
  # A relaunch does not silently start afresh next to the steps set aside.
  with pytest.raises(checkpoints.CheckpointError) as e:
    loop.train_and_evaluate(build(config), run_copy, evaluate_after=False)
  assert_one_line(str(e.value))
  assert str(e.value).startswith(f'No readable checkpoint in {directory}: only damaged steps')
  assert '6.damaged-' in str(e.value) and 'delete or move' in str(e.value)


def test_training_on_an_all_damaged_run_is_one_clear_error(data_dirs, run_copy):
  config = smoke_config(data_dirs)
  for step in (3, 6):
    truncate(largest_file(run_copy / 'checkpoints' / str(step)))
  with pytest.raises(checkpoints.CheckpointError) as e:
    loop.train_and_evaluate(build(config), run_copy, evaluate_after=False)
  assert_one_line(str(e.value))
  assert str(e.value).startswith(f'No readable checkpoint in {run_copy.absolute()}/checkpoints:')


def test_different_model_configuration_is_not_damage(data_dirs, run_copy):
  config = smoke_config(data_dirs)
  config.model.widths = tuple(2 * w for w in config.model.widths)
  with pytest.raises(checkpoints.CheckpointError) as e:
    build(config).states.restore(run_copy)
  message = str(e.value)
  assert_one_line(message)
  directory = run_copy.absolute() / 'checkpoints'
  assert f'The checkpoint in {directory} (step 6) was written by a different model' in message
  assert 'configuration: params/' in message and 'in the checkpoint but' in message
  assert not list((run_copy / 'checkpoints').glob('*.damaged-*'))  # nothing moved
  steps = checkpoints.checkpoint_manager(run_copy, config.max_checkpoints_to_keep).all_steps()
  assert steps == [
    3,
    6,
  ]
  # Training stops earlier, at the run's config fingerprint, naming the fields.
  with pytest.raises(identity.RunMismatchError, match=r'model.widths: \[4, 8'):
    loop.train_and_evaluate(build(config), run_copy, evaluate_after=False)
  assert not list((run_copy / 'checkpoints').glob('*.damaged-*'))


def test_failure_at_the_first_batch_leaves_no_checkpoint(data_dirs, tmp_path, monkeypatch):
  config = smoke_config(data_dirs)

  def broken(config, source, *, start_step=0, **kwargs):
    raise ValueError('bad batch')
    yield  # a generator, like the real iterator

  monkeypatch.setattr(loader, 'create_train_iterator', broken)
  workdir = tmp_path / 'fresh'
  with pytest.raises(ValueError, match='bad batch'):
    loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
  steps = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep).all_steps()
  assert steps == []


def test_predict_load_run_falls_back(run_copy, caplog):
  truncate_arrays(run_copy / 'checkpoints' / '6')
  # An explicitly requested damaged step is an error, and nothing is moved.
  with pytest.raises(checkpoints.CheckpointError) as e:
    restored.load_run(run_copy, step=6)
  assert_one_line(str(e.value))
  assert 'Checkpoint step 6 in' in str(e.value) and 'cannot be read' in str(e.value)
  assert not set_aside(run_copy, 6)

  with caplog.at_level(logging.WARNING):
    run = restored.load_run(run_copy)
  assert run.step == 3
  [message] = warnings_about_damage(caplog)
  assert_one_line(message)
  assert 'falling back to step 3' in message
  assert len(set_aside(run_copy, 6)) == 1


def test_restore_reads_no_data(trained, data_dirs, monkeypatch):
  # One restore path for evaluation, prediction and training; none of them reads a split to
  # learn the shape of the state (parameters of these models do not depend on it).
  def no_data(*args, **kwargs):
    raise AssertionError('the restore read the dataset')

  monkeypatch.setattr(Splits, 'source', no_data)  # no split is opened
  monkeypatch.setattr(loader, 'eval_examples', no_data)
  config = smoke_config(data_dirs)
  config.data.input_size = None
  assert int(build(config).states.restore(trained).step) == 6
  assert int(build(config).states.restore(trained, step=3).step) == 3
  assert restored.load_run(trained, step=3).step == 3
  with pytest.raises(checkpoints.NoCheckpointError, match=r'No checkpoint of step 4 .*\[3, 6\]'):
    build(config).states.restore(trained, step=4)


# A command in a subprocess (the slow tier): TensorStore's abandoned reads printed their
# 'Event loop is closed' tracebacks only in a fresh process, never inside pytest's.
@pytest.mark.slow
@pytest.mark.parametrize('name', ['default/manifest.ocdbt', 'default/_METADATA'])
def test_predict_and_export_stay_quiet_on_a_damaged_newest_step(run_copy, tmp_path, name):
  import subprocess
  import sys

  import numpy as np

  photo = fixtures.write_image(
    tmp_path / 'in' / 'photo.png',
    np.random.default_rng(0).integers(0, 255, (40, 56, 3), dtype=np.uint8),
  )
  runs = [tmp_path / 'predict_run', tmp_path / 'export_run']
  for run in runs:  # each command finds the damage (and sets it aside) itself
    shutil.copytree(run_copy, run)
    (run / 'checkpoints' / '6' / name).unlink()
  commands = [
    [sys.executable, '-m', 'crackjax.deploy.predict_command', f'--workdir={runs[0]}', str(photo),
     f'--out={tmp_path / "out"}'],
    [sys.executable, '-m', 'crackjax.deploy.export_command', f'--workdir={runs[1]}',
     f'--out={tmp_path / "m.jaxexport"}'],
  ]  # fmt: skip
  for command in commands:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'Traceback' not in proc.stderr and 'Event loop is closed' not in proc.stderr, (
      proc.stderr[:2000]
    )
    assert 'falling back to step 3' in proc.stderr
    # One warning, naming the missing file; orbax is not asked (its own warning came first).
    assert f'UnreadableMetadataError: {name.split("/")[1]} missing in ' in proc.stderr
    assert proc.stderr.count('WARNING') == 1, proc.stderr[:2000]
