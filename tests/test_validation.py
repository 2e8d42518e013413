"""One validation pass: every config problem named at once, before data or compilation."""

import subprocess
import sys
from pathlib import Path

import pytest

from crackjax.configs import base, smoke
from crackjax.experiment import validation
from crackjax.experiment.build import build, check_data
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


def _launch_smoke(*args: str) -> subprocess.CompletedProcess:
  """launch.py with configs/smoke.py and `args`, in a subprocess (stderr as text)."""
  command = [sys.executable, str(REPO / 'launch.py'), '--config=configs/smoke.py', *args]
  return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_the_shipped_configs_pass():
  validation.check_config(base.get_config())
  validation.check_config(smoke.get_config())


def test_every_problem_is_listed_with_its_field():
  config = base.get_config()
  config.data.name = 'nope'
  config.data.input_size = (321, 480)
  config.loss.weighting = 'bogus'
  config.batch_size = 0
  config.eval.protocols = ('strict', 'fuzzy')
  config.model.dtype = 'float16'
  config.data.folder.mask_polarity = 'inverted'
  config.eval.photo_threshold = 1.5
  with pytest.raises(validation.ConfigError) as info:
    validation.check_config(config)
  lines = str(info.value).splitlines()
  for field in (
    'config.data.name=',
    'config.loss.weighting=',
    'config.batch_size=0',
    'config.eval.protocols=',
    'config.model.dtype=',
    'config.data.folder.mask_polarity=',
    'config.eval.photo_threshold=1.5: expected null (off) or a weight in [0, 1]',
  ):
    assert any(field in line for line in lines), (field, lines)
  # input_size cannot be checked against an unknown model; with a valid model it is:
  config.model.dtype = 'float32'
  with pytest.raises(
    validation.ConfigError,
    match=r'input_size=\(321, 480\) must be multiples of '
    r'16.*321 -> 320 or 336',
  ):
    validation.check_config(config)


def test_the_config_is_checked_as_plain_data():
  # check_config reads one plain conversion of the config (specs.plain): a ConfigDict and
  # its plain data get the same verdict, line for line, and the same parts.
  config = base.get_config()
  config.data.name, config.batch_size, config.eval.protocols = 'nope', 0, ('fuzzy',)
  config.augment.zoom_range = -1.0
  verdicts = []
  for given in (config, config.to_dict()):
    with pytest.raises(validation.ConfigError) as info:
      validation.check_config(given)
    verdicts.append(str(info.value))
  assert verdicts[0] == verdicts[1] and len(verdicts[0].splitlines()) == 4, verdicts
  good = smoke.get_config()
  parts, plain_parts = validation.check_config(good), validation.check_config(good.to_dict())
  assert parts.model == plain_parts.model
  # The validation module reads no ConfigDict (tests/test_architecture.py's rule allows it).
  assert 'ml_collections' not in Path(validation.__file__).read_text()


def test_a_pretrained_path_that_is_no_file_is_a_config_error(tmp_path):
  # Checked with the config (seconds), not when the model is initialised after the data.
  config = smoke.get_config()
  config.model_init.pretrained = str(tmp_path / 'vgg16.npz')
  with pytest.raises(validation.ConfigError, match=r"vgg16.npz': no such file"):
    validation.check_config(config)
  config.model_init.pretrained = str(tmp_path)
  with pytest.raises(validation.ConfigError, match='is a folder; name the .npz file in it'):
    validation.check_config(config)


@pytest.fixture(scope='module')
def mixed_folder(tmp_path_factory):
  root = tmp_path_factory.mktemp('mixed')
  return fixtures.fake_folder_config(root, n=6, sizes={0: (48, 64), 3: (40, 80)})


def test_mixed_sizes_need_input_size(mixed_folder):
  config = mixed_folder.copy_and_resolve_references()
  with pytest.raises(
    validation.ConfigError,
    match=r'differ in size.*input_size is None; set '
    r"--config.data.input_size='\(32, 48\)'",
  ):
    check_data(build(config))
  config.data.input_size = (32, 48)
  check_data(build(config))
  config.data.input_size = (48, 64)
  with pytest.raises(validation.ConfigError, match='larger than the smallest train image'):
    check_data(build(config))


@pytest.mark.slow
def test_launch_rejects_a_bad_input_size_before_any_data(tmp_path):
  proc = _launch_smoke(
    f'--workdir={tmp_path / "run"}',
    '--config.data.input_size=(321, 480)',
    f'--config.data.data_dir={tmp_path / "tfds"}',
  )
  assert proc.returncode == 1
  assert 'launch.py: bad config: config.data.input_size=(321, 480)' in proc.stderr
  assert 'Traceback' not in proc.stderr
  assert not (tmp_path / 'run').exists() and not (tmp_path / 'tfds').exists()


@pytest.mark.slow
def test_launch_eval_on_an_empty_workdir_is_one_line(tmp_path):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=4, size=(32, 48))
  workdir = tmp_path / 'never_trained'
  proc = _launch_smoke(
    '--mode=eval',
    f'--workdir={workdir}',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={tmp_path / "tfds"}',
  )
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
    f'launch.py: No checkpoint in {workdir / "checkpoints"}; train first '
    '(--mode=train or train_and_eval).'
  )
  assert 'Traceback' not in proc.stderr and not workdir.exists()


@pytest.mark.slow  # a launch subprocess; outputs.unwritable itself is in the fast tier
def test_launch_with_a_workdir_that_cannot_be_written_is_one_line_before_any_data(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a folder')  # as root, a file in the path stands for read-only
  proc = _launch_smoke(f'--workdir={blocker}', f'--config.data.data_dir={tmp_path / "tfds"}')
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (
    f'launch.py: cannot write --workdir={blocker}: {blocker} is a file, not a folder.'
  )
  assert 'Traceback' not in proc.stderr and not (tmp_path / 'tfds').exists()


@pytest.mark.slow
def test_launch_with_a_data_dir_that_cannot_be_written_is_one_line(tmp_path):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=4, size=(32, 48))
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a folder')  # as root, a file in the path stands for read-only
  proc = _launch_smoke(
    f'--workdir={tmp_path / "run"}',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={blocker / "tfds"}',
  )
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1] == (  # was: [Errno 20] Not a directory: 'PATH'
    f'launch.py: bad config: --config.data.data_dir={blocker / "tfds"} is inside {blocker}, a '
    'file, not a folder; name a folder (created if missing) for the prepared datasets.'
  )
  assert 'Traceback' not in proc.stderr


def test_an_argument_to_the_smoke_config_is_named():
  with pytest.raises(ValueError, match=r"Unknown config argument 'smok': configs/smoke.py takes"):
    smoke.get_config('smok')
  assert smoke.get_config('').to_dict() == smoke.get_config().to_dict()
