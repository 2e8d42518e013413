"""The experiment is built once: one validation pass, one model, one dataset builder and one
source per split, whoever asks for them (crackjax/experiment/build.py)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crackjax.experiment.build import build, check_data, on_other_data
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]

# Installs counters on the one place each part is made, then runs what it is given: the
# model registry's build of the config's model, the dataset registry's builder constructor,
# the validation pass and a builder's opening of a split. Prints the counts as JSON at exit.
_COUNTERS = textwrap.dedent("""
    import atexit, collections, dataclasses, json, sys
    import crackjax.tfds_builders.crackforest as crackforest
    from crackjax import models
    from crackjax.experiment import validation
    from crackjax.data import registry as data_registry

    COUNTS = collections.Counter()

    def counted(name, fn):
      def wrapper(*args, **kwargs):
        COUNTS[name] += 1
        return fn(*args, **kwargs)
      return wrapper

    for key, entry in list(models.MODELS.items()):
      models.MODELS[key] = dataclasses.replace(entry, build=counted('model', entry.build))
    data_registry.get_builder = counted('builder', data_registry.get_builder)
    validation.check_config = counted('validation', validation.check_config)
    real_source = crackforest.CrackForest.as_data_source

    def as_data_source(self, split, *args, **kwargs):
      COUNTS[f'source {split}'] += 1
      return real_source(self, split, *args, **kwargs)

    crackforest.CrackForest.as_data_source = as_data_source
    atexit.register(lambda: print('COUNTS ' + json.dumps(COUNTS), flush=True))
""")


# One validation pass, one model, one dataset builder, one source per split.
ONCE = {'validation': 1, 'model': 1, 'builder': 1, 'source train': 1, 'source test': 1}


def _counts(stdout: str) -> dict[str, int]:
  [line] = [ln for ln in stdout.splitlines() if ln.startswith('COUNTS ')]
  return json.loads(line[len('COUNTS ') :])


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  raw, tfds_dir = fixtures.smoke_data_dirs(tmp_path_factory.mktemp('data'))
  config = fixtures.smoke_config((raw, tfds_dir))
  build(config).splits.prepare()  # prepared once here: the launch below finds it ready
  return raw, tfds_dir


def test_parts_are_built_once_and_sources_opened_once(data_dirs, monkeypatch):
  """In process: what build() makes, and what the data accessors open, are made once."""
  import collections
  import dataclasses

  import crackjax.tfds_builders.crackforest as crackforest
  from crackjax import models
  from crackjax.data import registry as data_registry
  from crackjax.experiment import validation

  counts = collections.Counter()

  def counted(name, fn):
    def wrapper(*args, **kwargs):
      counts[name] += 1
      return fn(*args, **kwargs)

    return wrapper

  entry = models.MODELS['unet']
  monkeypatch.setitem(
    models.MODELS, 'unet', dataclasses.replace(entry, build=counted('model', entry.build))
  )
  monkeypatch.setattr(data_registry, 'get_builder', counted('builder', data_registry.get_builder))
  monkeypatch.setattr(validation, 'check_config', counted('validation', validation.check_config))
  real_source = crackforest.CrackForest.as_data_source

  def as_data_source(self, split, *args, **kwargs):
    counts[f'source {split}'] += 1
    return real_source(self, split, *args, **kwargs)

  monkeypatch.setattr(crackforest.CrackForest, 'as_data_source', as_data_source)
  experiment = build(fixtures.smoke_config(data_dirs))
  experiment.splits.prepare()
  check_data(experiment)
  assert experiment.splits.train_image_shape == experiment.splits.train_image_shape
  assert experiment.splits.train_source is experiment.splits.train_source
  assert len(list(experiment.splits.examples())) == len(list(experiment.splits.examples()))
  assert experiment.fingerprint is experiment.fingerprint
  assert experiment.states.mesh is experiment.states.mesh
  other = on_other_data(experiment, experiment.config)  # crackjax-evaluate's: no new model
  assert other.model is experiment.model
  assert dict(counts) == ONCE


@pytest.mark.slow
def test_one_launch_builds_each_part_once(tmp_path):
  """The count of the issue: one launch of the smoke config (preparing the dataset, training,
  a periodic evaluation of every epoch, the final evaluation) validates once, builds one model
  and one dataset builder, and opens each split once."""
  raw, tfds_dir = fixtures.smoke_data_dirs(tmp_path / 'data')  # not prepared yet
  code = _COUNTERS + textwrap.dedent("""
    from crackjax.trainer import train_command
    train_command.main('launch.py')
  """)
  argv = [
    '--config=configs/smoke.py',
    f'--workdir={tmp_path / "run"}',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={tfds_dir}',
    '--config.eval.every_epochs=1',
    "--config.eval.protocols=('strict',)",
  ]
  r = subprocess.run(
    [sys.executable, '-c', code, *argv], cwd=REPO, capture_output=True, text=True, timeout=600
  )
  assert r.returncode == 0, r.stderr[-3000:]
  assert (tmp_path / 'run' / 'eval.json').is_file()
  assert (tmp_path / 'run' / 'epoch_001.json').is_file()  # the periodic evaluation ran
  assert _counts(r.stdout) == ONCE


def test_the_narrow_inputs_are_read_from_the_config_once():
  from crackjax.configs import smoke
  from crackjax.experiment.build import eval_plan_of, schedule_of
  from crackjax.models import input_multiple

  config = smoke.get_config()
  config.steps_per_epoch, config.num_epochs, config.log_every_steps = 3, 4, 2
  config.eval.every_epochs, config.eval.full_epochs = 2, (1,)
  config.eval.protocols, config.eval.curve_protocols = ('strict', 'tolerance'), ('strict',)
  experiment = build(config)
  schedule, plan = experiment.schedule, experiment.eval_plan
  c = config.to_dict()
  assert schedule == schedule_of(c) and plan == eval_plan_of(c)
  # No data.input_size: the abstract state's image is a square of about 256 px the model takes.
  side = experiment.restore_spec.image_shape[0]
  assert experiment.restore_spec.image_shape == (side, side, 3) and 256 <= side
  assert (
    side % input_multiple(experiment.model) == 0 and side - input_multiple(experiment.model) < 256
  )
  assert experiment.restore_spec.max_to_keep == config.max_checkpoints_to_keep
  config.data.input_size = (96, 64)
  assert build(config).restore_spec.image_shape == (96, 64, 3)
  assert schedule.total_steps == 12
  assert [schedule.epoch_of(s) for s in (1, 3, 4, 12)] == [1, 1, 2, 4]
  assert [s for s in range(1, 13) if schedule.saves_at(s)] == [3, 6, 9, 12]
  assert [s for s in range(1, 13) if schedule.logs_at(s)] == [2, 4, 6, 8, 10, 12]
  assert [e for e in range(1, 5) if schedule.evaluates(e)] == [2, 4]
  assert [e for e in range(1, 5) if schedule.full_at(e)] == [1, 4]
  assert plan.split == config.data.test_split and plan.protocols == ('strict', 'tolerance')
  assert plan.with_protocols(('strict',)).protocols == ('strict',)
  assert plan.thresholds_of('strict') == config.eval.num_thresholds
  # Scoring elsewhere re-derives the plan from the other data's config.
  other = config.copy_and_resolve_references()
  other.eval.protocols = ('strict',)
  assert on_other_data(experiment, other).eval_plan.protocols == ('strict',)


def test_on_other_data_records_the_other_config():
  """crackjax-evaluate's experiment on other data: its plan, splits and records (TensorBoard's
  hyper-parameters, config.json's text, the fingerprint) are the other config's; its model and
  states are the run's own objects."""
  from crackjax.configs import smoke

  config = smoke.get_config()
  experiment = build(config)
  other = config.copy_and_resolve_references()
  other.data.name = 'crack_folder'
  other.data.test_split = 'all'
  other.eval.protocols = ('strict',)
  scored = on_other_data(experiment, other)
  assert scored.model is experiment.model and scored.states is experiment.states
  assert scored.splits is not experiment.splits and scored.splits.test_split == 'all'
  assert scored.hparams['data']['name'] == 'crack_folder'
  assert scored.hparams['eval']['protocols'] == ['strict']
  assert scored.fingerprint['data.name'] == 'crack_folder'
  assert '"crack_folder"' in scored.config_json
  assert scored.checkpoint_metadata['config'] == scored.hparams
  assert experiment.hparams['data']['name'] == config.data.name  # the run's own unchanged


def test_a_restore_only_build_reads_no_training_field():
  """A run's recorded config rebuilt for inference (`training=False`) builds without the
  fields only training reads (here ``data.train_split``): nothing of the loader is read then."""
  from crackjax.configs import smoke

  config = smoke.get_config()
  with config.unlocked():
    del config.data['train_split']
  assert build(config, training=False).splits.train_split == 'train'
