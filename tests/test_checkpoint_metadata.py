"""Self-describing checkpoints: each step records its run's config, so a run's checkpoints/
folder copied alone predicts and evaluates; inference restores no optimiser state."""

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import numpy as np
import optax
import PIL.Image
import pytest

from crackjax.deploy import model_export, predict_command
from crackjax.engine import checkpoints
from crackjax.experiment import restored
from crackjax.experiment.build import build
from crackjax.trainer import evaluate_command


def _copy_checkpoints(run: Path, where: Path) -> Path:
  """Only RUN/checkpoints, copied to `where`/checkpoints: no config.json, no threshold.json."""
  return Path(shutil.copytree(run / 'checkpoints', where / 'checkpoints'))


def _leaves_equal(a, b) -> bool:
  pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
  return all(np.array_equal(x, y) for x, y in pairs)


def test_every_step_records_the_run(smoke_run):
  config = json.loads((smoke_run / 'config.json').read_text())
  shape = build(restored.read_config(smoke_run), training=False).restore_spec.image_shape
  for step in (3, 6):
    recorded = checkpoints.step_metadata(smoke_run / 'checkpoints', step)
    assert recorded['config'] == config
    assert recorded['model'] == config['model']
    assert recorded['image_shape'] == list(shape)
  assert checkpoints.run_metadata(smoke_run)['config'] == config


def test_checkpoints_alone_predict_as_the_run(smoke_run, tmp_path):
  whole = restored.load_run(smoke_run)
  copied = _copy_checkpoints(smoke_run, tmp_path / 'elsewhere')
  assert not (copied.parent / 'config.json').exists()
  for given in (copied.parent, copied):  # the folder holding checkpoints/, or checkpoints/ itself
    alone = restored.load_run(given)
    assert alone.step == whole.step == 6
    assert alone.config.to_dict() == whole.config.to_dict()
    assert _leaves_equal(alone.params, whole.params)
    assert 'no threshold.json' in alone.threshold_source  # it stayed with the run
  # A copy under another name, the steps directly inside it.
  renamed = Path(shutil.copytree(copied, tmp_path / 'my_model'))
  assert restored.load_run(renamed).step == 6


def test_checkpoints_alone_through_the_commands(smoke_run, tmp_path, capsys):
  copied = _copy_checkpoints(smoke_run, tmp_path / 'cfd_run')
  image = np.random.default_rng(0).integers(100, 200, (40, 56, 3), dtype=np.uint8)
  PIL.Image.fromarray(image).save(tmp_path / 'road.png')
  out = tmp_path / 'out'
  argv = [f'--workdir={copied}', f'--out={out}', '--notune_malloc', str(tmp_path / 'road.png')]
  assert predict_command.main(argv) == 0
  page = (out / 'index.html').read_text()
  # The page names the run by its folder, never where the author keeps it.
  assert '<title>crackjax-predict: run cfd_run</title>' in page
  assert str(tmp_path) not in page.split('<body>')[0]
  capsys.readouterr()
  assert evaluate_command.main([f'--workdir={copied}', '--protocols=strict', '--workers=1']) == 0
  assert '| crackforest:test | strict | 4 |' in capsys.readouterr().out
  record = json.loads((copied.parent / 'eval' / 'crackforest_test' / 'eval.json').read_text())
  assert record['step'] == 6
  assert not (copied / 'eval').exists()  # the records go beside checkpoints/, not into it
  path, _, meta = model_export.export_model(copied, tmp_path / 'model.safetensors')
  assert path.is_file() and meta['card']['training']['step'] == 6


def test_old_checkpoints_without_the_record_restore_through_config_json(smoke_run, tmp_path):
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  for meta in (run / 'checkpoints').glob('*/_CHECKPOINT_METADATA'):
    data = json.loads(meta.read_text())
    data.pop('custom_metadata', None)  # as a step saved before steps recorded their run
    meta.write_text(json.dumps(data))
  assert checkpoints.run_metadata(run) is None
  assert restored.load_run(run).step == 6
  alone = _copy_checkpoints(run, tmp_path / 'elsewhere')
  with pytest.raises(FileNotFoundError, match='no checkpoint in .* records its config'):
    restored.read_config(alone)


def test_inference_does_not_read_the_optimiser_state(smoke_run):
  experiment = build(restored.read_config(smoke_run), training=False)
  # Another optimiser: its state has another structure than the saved Adam moments.
  other = dataclasses.replace(
    experiment, states=dataclasses.replace(experiment.states, optimizer=optax.sgd(0.1))
  )
  with pytest.raises(checkpoints.CheckpointError, match='opt_state'):
    other.states.restore(smoke_run)
  state = other.states.restore(smoke_run, inference=True)
  full = experiment.states.restore(smoke_run)
  assert int(state.step) == 6 and _leaves_equal(state.params, full.params)
  assert state.opt_state == optax.identity().init(None)
