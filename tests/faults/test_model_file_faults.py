"""Hostile model files (issue 44): a file never imports the code it names, and every field and
tensor is checked before anything is built.

Each file is forged in the test from the session's smoke run exported as a model file: its
metadata or tensors changed and its content checksum recomputed, as anyone can (the checksum
detects damage, not tampering). Every case must end in one line naming the file and the field
(or tensor), through `Predictor.from_pretrained`, crackjax-predict, crackjax-evaluate,
crackjax-export and fine-tuning (configs/finetune.py and ``model_init.pretrained``). The
commands run in-process (their ``main``); every case through every command, and the commands
as processes, in the slow tier.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from crackjax.deploy import export_command, predict_command, predictor
from crackjax.experiment import restored
from crackjax.models import hub, model_file, pretrained
from crackjax.trainer import evaluate_command
from tests import fixtures

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path / 'cache'))


def forge(src: Path, dst: Path, *, meta=None, tensors=None, drop=()) -> Path:
  """A copy of model file `src` with metadata fields replaced (`meta`: field -> value), tensors
  replaced or added (`tensors`: name -> array) or dropped, and its checksum recomputed."""
  from safetensors.numpy import save_file

  loaded = model_file.read(src)
  values = {**loaded.meta, **(meta or {})}
  arrays = model_file.flatten(loaded.params, 'params')
  arrays.update(model_file.flatten(loaded.batch_stats or {}, 'batch_stats'))
  arrays.update(tensors or {})
  arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items() if k not in drop}
  metadata = {model_file.PREFIX + k: json.dumps(v) for k, v in values.items()}
  metadata[model_file.CHECKSUM_KEY] = model_file.content_sha256(arrays, metadata)
  save_file(arrays, str(dst), metadata=metadata)
  return dst


def a_kernel(src: Path) -> str:
  """The first 3x3 kernel by name (safetensors hands tensors back in no fixed order)."""
  params = model_file.flatten(model_file.read(src).params, 'params')
  return min(n for n, a in params.items() if n.endswith('kernel') and a.shape[0] == 3)


# (case id, what to change, words the line must hold)
def cases(src: Path) -> dict[str, tuple[dict, str]]:
  loaded = model_file.read(src)
  model, card = loaded.model, loaded.card
  kernel = a_kernel(src)
  shape = model_file.flatten(loaded.params, 'params')[kernel].shape
  return {
    'format string': ({'meta': {'format': '1'}}, "crackjax.format='1': expected an integer >= 1"),
    'format zero': ({'meta': {'format': 0}}, 'crackjax.format=0: expected an integer >= 1'),
    'threshold nan': (
      {'meta': {'threshold': {'threshold': math.nan}}},
      'crackjax.threshold.threshold=nan: expected a finite number in [0, 1]',
    ),
    'threshold 7.5': (
      {'meta': {'threshold': {'threshold': 7.5}}},
      'crackjax.threshold.threshold=7.5: expected a finite number in [0, 1]',
    ),
    'threshold text': (
      {'meta': {'threshold': {'threshold': 'abc'}}},
      "crackjax.threshold.threshold='abc': expected a finite number",
    ),
    'threshold without threshold': (
      {'meta': {'threshold': {'chosen_by': 'me'}}},
      "crackjax.threshold lacks 'threshold'",
    ),
    'threshold a number': (
      {'meta': {'threshold': 0.5}},
      'crackjax.threshold=0.5: expected a JSON object',
    ),
    'card a list': ({'meta': {'card': [1, 2]}}, 'crackjax.card=[1, 2]: expected a JSON object'),
    'card step text': (
      {'meta': {'card': {**card, 'training': {**card['training'], 'step': 'six'}}}},
      "crackjax.card.training.step='six': expected an integer >= 0",
    ),
    'model a list': (
      {'meta': {'model': ['unet']}},
      "crackjax.model=['unet']: expected a JSON object",
    ),
    'model widths text': (
      {'meta': {'model': {**model, 'widths': ['abc']}}},
      "crackjax.model.widths=('abc',): expected a tuple of positive integers",
    ),
    'model widths zero': (
      {'meta': {'model': {**model, 'widths': [0, *model['widths'][1:]]}}},
      'expected a tuple of positive integers',
    ),
    'model unknown': (
      {'meta': {'model': {**model, 'name': 'nosuch'}}},
      "crackjax.model.name='nosuch'",
    ),
    'plugins a string': ({'meta': {'plugins': 'os'}}, "crackjax.plugins='os': expected a list"),
    'input a list': ({'meta': {'input': []}}, 'crackjax.input=[]: expected a JSON object'),
    'config a list': ({'meta': {'config': []}}, 'crackjax.config=[]: expected a JSON object'),
    'widths contradict the tensors': (
      {'meta': {'model': {**model, 'widths': [w * 2 for w in model['widths']]}}},
      'its tensors do not fit crackjax.model',
    ),
    'a tensor missing': ({'drop': (kernel,)}, f'tensor {kernel} is missing'),
    'a tensor too many': (
      {'tensors': {'params/extra/kernel': np.zeros((3,), np.float32)}},
      'tensor params/extra/kernel is not a variable of the model',
    ),
    'a tensor of another shape': (
      {'tensors': {kernel: np.zeros((1, *shape[1:]), np.float32)}},
      f'tensor {kernel} has shape (1,',
    ),
    'a tensor of another dtype': (
      {'tensors': {kernel: np.zeros(shape, np.int32)}},
      f'tensor {kernel} has dtype int32',
    ),
  }


CASES = [
  'format string', 'format zero', 'threshold nan', 'threshold 7.5', 'threshold text',
  'threshold without threshold', 'threshold a number', 'card a list', 'card step text',
  'model a list', 'model widths text', 'model widths zero', 'model unknown', 'plugins a string',
  'input a list', 'config a list', 'widths contradict the tensors', 'a tensor missing',
  'a tensor too many', 'a tensor of another shape', 'a tensor of another dtype',
]  # fmt: skip
TENSOR_CASES = {'widths contradict the tensors', 'a tensor missing', 'a tensor too many'}
TENSOR_CASES |= {'a tensor of another shape', 'a tensor of another dtype'}


def hostile(exported, tmp_path, case) -> tuple[Path, str]:
  change, says = cases(exported)[case]
  return forge(exported, tmp_path / 'hostile.safetensors', **change), says


def one_line(message: str, path: Path, says: str) -> None:
  assert '\n' not in message, message
  assert str(path) in message and says in message, message


def test_the_unchanged_forgery_loads(exported, tmp_path):
  """The forging itself changes nothing: the cases below fail for their change alone."""
  path = forge(exported, tmp_path / 'same.safetensors')
  assert (
    predictor.Predictor.from_pretrained(path).threshold
    == model_file.read(exported).threshold['threshold']
  )


@pytest.mark.parametrize('case', CASES)
def test_from_pretrained_refuses_each_hostile_field_in_one_line(exported, tmp_path, case):
  path, says = hostile(exported, tmp_path, case)
  with pytest.raises(model_file.ModelFileError) as e:
    predictor.Predictor.from_pretrained(path)
  one_line(str(e.value), path, says)


@pytest.mark.parametrize('case', CASES)
def test_fine_tuning_refuses_each_hostile_field_in_one_line(exported, tmp_path, case):
  from crackjax.configs import finetune

  path, says = hostile(exported, tmp_path, case)
  if case not in TENSOR_CASES:  # the metadata: configs/finetune.py reads it first
    with pytest.raises(model_file.ModelFileError) as e:
      finetune.get_config(str(path))
    one_line(str(e.value), path, says)
  with pytest.raises(pretrained.PretrainedError) as e:  # model_init.pretrained=FILE
    restored.start_run(pretrained.InitSpec('unet', str(path)))
  one_line(str(e.value), path, says)


def run_command(which: str, path: Path, tmp_path: Path) -> str:
  """The one line `which` ends with on model file `path` (in-process)."""
  if which == 'predict':
    fixtures.write_image(tmp_path / 'photos' / 'a.png', np.full((40, 56, 3), 128, np.uint8))
    argv = [f'--model={path}', f'--out={tmp_path / "pred"}', str(tmp_path / 'photos')]
    main = predict_command.main
  elif which == 'evaluate':
    images, masks = fixtures.make_fake_folder(tmp_path / 'folder', n=2)
    argv = [f'--model={path}', f'--folder={images}:{masks}', f'--out={tmp_path / "scores"}']
    main = evaluate_command.main
  else:
    argv = [f'--model={path}', f'--out={tmp_path / "m.jaxexport"}']
    main = export_command.main
  with pytest.raises(SystemExit) as e:
    main(argv)
  message = e.value.code
  assert isinstance(message, str) and message.startswith(f'crackjax-{which}: '), message
  return message


@pytest.mark.parametrize('which', ['predict', 'evaluate', 'export'])
@pytest.mark.parametrize('case', ['threshold nan', 'card a list', 'a tensor of another shape'])
def test_commands_refuse_hostile_files_in_one_line(exported, tmp_path, which, case):
  path, says = hostile(exported, tmp_path, case)
  one_line(run_command(which, path, tmp_path), path, says)
  assert not (tmp_path / 'pred').exists() and not (tmp_path / 'm.jaxexport').exists()


@pytest.mark.slow
@pytest.mark.parametrize('which', ['predict', 'evaluate', 'export'])
@pytest.mark.parametrize('case', CASES)
def test_every_hostile_case_through_every_command(exported, tmp_path, which, case):
  path, says = hostile(exported, tmp_path, case)
  one_line(run_command(which, path, tmp_path), path, says)


def test_a_header_that_is_a_json_list_is_one_line(tmp_path):
  path = tmp_path / 'list.safetensors'
  header = b'[1, 2, 3]'
  path.write_bytes(len(header).to_bytes(8, 'little') + header)
  with pytest.raises(model_file.ModelFileError) as e:
    predictor.Predictor.from_pretrained(path)
  one_line(str(e.value), path, 'the header is a JSON list, not an object')


def test_a_newer_format_is_still_told_as_newer(exported, tmp_path):
  path = forge(exported, tmp_path / 'newer.safetensors', meta={'format': 2})
  with pytest.raises(model_file.ModelFileError, match='of format 2, newer than this crackjax'):
    model_file.read(path)


def test_a_nan_threshold_never_reaches_a_predictor():
  with pytest.raises(ValueError, match=r'threshold must be a number in \[0, 1\]'):
    predictor.Predictor(None, {}, threshold=math.nan)


# ------------------------------------------------------------------ a file never imports code

MARKER_PLUGIN = """
from pathlib import Path
Path({marker!r}).write_text('imported')
"""


@pytest.fixture
def marker_plugin(tmp_path, monkeypatch):
  """A module on sys.path that writes a marker file when imported: (its name, the marker)."""
  name = f'marker_plugin_{tmp_path.name}'.replace('-', '_')
  marker = tmp_path / 'IMPORTED'
  folder = tmp_path / 'plugin'
  folder.mkdir()
  (folder / f'{name}.py').write_text(MARKER_PLUGIN.format(marker=str(marker)))
  monkeypatch.syspath_prepend(str(folder))
  yield name, marker
  sys.modules.pop(name, None)


def naming_plugin(exported, tmp_path, name) -> Path:
  config = {**model_file.read(exported).config, 'plugins': [name]}
  return forge(
    exported, tmp_path / 'plugin.safetensors', meta={'plugins': [name], 'config': config}
  )


def test_a_file_never_imports_the_module_it_names(exported, tmp_path, marker_plugin, monkeypatch):
  from crackjax.configs import finetune

  name, marker = marker_plugin
  path = naming_plugin(exported, tmp_path, name)
  with pytest.raises(model_file.ModelFileError) as e:
    predictor.Predictor.from_pretrained(path)
  one_line(str(e.value), path, f'--allow_plugins={name}')
  assert 'never imports' in str(e.value)
  for which in ('predict', 'evaluate', 'export'):
    one_line(run_command(which, path, tmp_path), path, f'--allow_plugins={name}')
  with pytest.raises(ValueError) as e:
    finetune.get_config(str(path))
  one_line(str(e.value), path, 'a config file of your own')
  with pytest.raises(pretrained.PretrainedError) as e:
    restored.start_run(pretrained.InitSpec('unet', str(path)))
  one_line(str(e.value), path, 'config.plugins')
  # By URL too.
  from tests.test_model_file import serve

  with serve(tmp_path) as base:
    url = f'{base}/plugin.safetensors'
    with pytest.raises(model_file.ModelFileError, match='never imports'):
      predictor.Predictor.from_pretrained(url)
  assert not marker.exists() and name not in sys.modules


def test_a_plugin_is_used_when_allowed_or_already_imported(exported, tmp_path, marker_plugin):
  import importlib

  name, marker = marker_plugin
  path = naming_plugin(exported, tmp_path, name)
  assert predictor.Predictor.from_pretrained(path, allow_plugins=[name]).threshold <= 1
  assert marker.read_text() == 'imported'
  marker.unlink()
  sys.modules.pop(name)
  importlib.import_module(name)  # the user's own import
  marker.unlink()
  predictor.Predictor.from_pretrained(path)
  assert not marker.exists()  # not imported again


def test_released_models_name_no_plugins():
  for entry in hub.released():
    loaded = model_file.read(hub.resolve(entry['name']))
    assert loaded.meta['plugins'] == [] and not loaded.config.get('plugins')


@pytest.mark.slow
def test_crackjax_predict_as_a_process_never_imports_the_named_module(
  exported, tmp_path, marker_plugin
):
  import os

  name, marker = marker_plugin
  path = naming_plugin(exported, tmp_path, name)
  fixtures.write_image(tmp_path / 'photos' / 'a.png', np.full((40, 56, 3), 128, np.uint8))
  env = {**os.environ, 'PYTHONPATH': str(tmp_path / 'plugin')}
  proc = subprocess.run(
    [sys.executable, '-m', 'crackjax.deploy.predict_command', f'--model={path}',
     f'--out={tmp_path / "pred"}', str(tmp_path / 'photos')],
    capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
  )  # fmt: skip
  assert proc.returncode == 1 and not marker.exists(), proc.stderr[-2000:]
  (line,) = [s for s in proc.stderr.splitlines() if s.strip()]
  assert f'--allow_plugins={name}' in line and 'Traceback' not in proc.stderr
  proc = subprocess.run(
    [sys.executable, '-m', 'crackjax.deploy.predict_command', f'--model={path}',
     f'--allow_plugins={name}', f'--out={tmp_path / "pred"}', str(tmp_path / 'photos')],
    capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
  )  # fmt: skip
  assert proc.returncode == 0 and marker.exists(), proc.stderr[-2000:]


# ------------------------------------------------------------------------ the download cache


def test_a_damaged_cached_copy_is_moved_aside_and_downloaded_again_once(exported, tmp_path, capsys):
  import shutil

  from tests.test_model_file import flip_byte, serve

  served = tmp_path / 'served'
  served.mkdir()
  shutil.copyfile(exported, served / 'smoke.safetensors')
  with serve(served) as base:
    url = f'{base}/smoke.safetensors'
    cached = hub.resolve(url, progress=False)
    flip_byte(cached, cached.stat().st_size - 3)
    assert hub.resolve(url, progress=False) == cached
    err = capsys.readouterr().err
    assert f'the cached copy of {url} is damaged' in err and 'downloading it again' in err
    assert model_file.read(cached).sha256 == model_file.read(exported).sha256
    (aside,) = cached.parent.glob('*.damaged-*')
  flip_byte(cached, cached.stat().st_size - 3)  # the server is gone: one try, one line
  with pytest.raises(OSError, match=f'cannot download {url}'):
    hub.resolve(url, progress=False)
  assert 'moved aside' in capsys.readouterr().err and not cached.exists()


@pytest.mark.parametrize('how', ['a file', 'read-only'])
def test_a_cache_that_cannot_hold_a_download_names_the_variable(
  exported, tmp_path, monkeypatch, how
):
  import errno
  import pathlib

  if how == 'a file':
    (tmp_path / 'cachefile').write_text('x')
    monkeypatch.setenv(hub.CACHE_ENV, str(tmp_path / 'cachefile'))
  else:
    real = pathlib.Path.mkdir

    def mkdir(self, *args, **kwargs):
      if self.is_relative_to(tmp_path / 'cache'):  # this test's $CRACKJAX_CACHE
        raise OSError(errno.EROFS, 'Read-only file system', str(self))
      return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, 'mkdir', mkdir)
  fixtures.write_image(tmp_path / 'photos' / 'a.png', np.full((40, 56, 3), 128, np.uint8))
  url = 'http://127.0.0.1:9/smoke.safetensors'  # never reached
  with pytest.raises(SystemExit) as e:
    predict_command.main([f'--model={url}', f'--out={tmp_path / "o"}', str(tmp_path / 'photos')])
  line = e.value.code
  assert '\n' not in line and f'${hub.CACHE_ENV}=' in line and f'set {hub.CACHE_ENV}' in line
  assert ('Not a directory' if how == 'a file' else 'Read-only file system') in line


def test_evaluate_names_a_recorded_config_it_cannot_rebuild(exported, tmp_path):
  path = forge(exported, tmp_path / 'noconfig.safetensors', meta={'config': {}})
  line = run_command('evaluate', path, tmp_path)
  one_line(line, path, 'its crackjax.config cannot be rebuilt')
