"""One experiment, built once: everything a run needs, derived from a validated config.

`build(config)` validates the config (one pass, `experiment.validation.check_config`) and returns
an `Experiment`: the model, the loss, the augmentation, the optimiser, the evaluation plan,
the schedule and the run's identity as plain data, each built here and nowhere else, and two
objects: `splits` (`crackjax.data.splits`: the dataset prepared on first use, each split
opened once, whoever asks) and `states` (`crackjax.engine.states`: fresh, abstract and
restored TrainStates on the device mesh).

Every consumer takes the experiment instead of the config: launch.py, the training loop,
evaluation (`trainer.scoring`), scoring on other data (crackjax-evaluate, `on_other_data`),
prediction and export of a restored run (`experiment.restored.load_run`: `build(config.json,
training=False)`, then ``states.restore``), the reproduction runner's jobs and the benches.
This is the pattern of scenic's and big_vision's trainers: build the parts once at the top,
hand them down; nothing below rebuilds them from the config.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

import flax.linen as nn
import ml_collections

from crackjax import losses
from crackjax.data import augment, mixture
from crackjax.data.loader import LoaderSpec
from crackjax.data.splits import Splits
from crackjax.engine import learning_rate, train_state
from crackjax.engine.checkpoints import RestoreSpec
from crackjax.engine.mesh import one_device_mesh  # noqa: F401 (its name here before it moved)
from crackjax.engine.schedule import Schedule
from crackjax.engine.states import States
from crackjax.evaluation.eval_plan import EvalPlan
from crackjax.experiment import restored, specs, validation
from crackjax.models import init_image_shape, pretrained
from crackjax.runs import identity


def schedule_of(c: specs.Plain) -> Schedule:
  """When the run of config `c` (plain data, `specs.plain`) steps, logs, saves and
  evaluates."""
  ev = c['eval']
  return Schedule(
    steps_per_epoch=int(c['steps_per_epoch']),
    num_epochs=int(c['num_epochs']),
    log_every_steps=int(c['log_every_steps']),
    eval_every_epochs=int(ev.get('every_epochs', 0) or 0),
    full_eval_epochs=tuple(ev.get('full_epochs', ()) or ()),
  )


def eval_plan_of(c: specs.Plain) -> EvalPlan:
  """What an evaluation of config `c`'s data (plain data, `specs.plain`) scores and writes."""
  ev = c['eval']
  # JSON data, as a recorded config.json holds it (`eval_records.data_key`).
  data = json.loads(json.dumps(c['data'], default=str))
  return EvalPlan(
    dataset=data['name'],
    folder=data.get('folder'),
    split=data.get('test_split', 'test'),
    protocols=tuple(ev['protocols']),
    curve_protocols=tuple(ev.get('curve_protocols') or ()),
    num_thresholds=ev['num_thresholds'],
    tail_thresholds=bool(ev.get('tail_thresholds', True)),
    num_qualitative=int(ev['num_qualitative']),
    save_probability_maps=bool(ev.get('save_probability_maps', False)),
    background_workers=int(ev.get('background_workers', 0) or 0),
    scales=tuple(float(x) for x in ev.get('scales') or (1.0,)),
    flip=bool(ev.get('flip', False)),
    store_degenerate_threshold=bool(ev.get('store_degenerate_threshold', False)),
    threshold_over=str(ev.get('threshold_over', 'pooled')),
  )


@dataclasses.dataclass(frozen=True, eq=False)
class Experiment:
  """The parts of one run, built once from a validated config (`build`): plain data and the
  two objects that open the run's data (`splits`) and make its states (`states`). Nothing
  here reads the config again.

  Attributes:
    config: the config the parts were built from (read-only by convention: a changed field
      would no longer match the parts); the commands' own use (records, other data).
    model: the linen Module of ``config.model`` (`crackjax.models`).
    loss_fn: ``(model outputs, masks) -> (scalar loss, metrics)`` of ``config.loss``.
    augment_fn: ``(rng, images, masks) -> (images, masks)`` of ``config.augment``.
    protocols: the evaluation protocols of ``config.eval.protocols``.
    schedule: steps, epochs and when to log, save and evaluate (`schedule_of`).
    eval_plan: the split, protocols, grids and outputs of an evaluation (`eval_plan_of`).
    restore_spec: the image shape of the abstract state (`crackjax.models.init_image_shape`)
      and the checkpoints kept.
    hparams: the config as plain JSON data, as config.json holds it (TensorBoard's
      hyper-parameters, each checkpoint's record).
    config_json: config.json's text.
    fingerprint: the config fields that define the computation (`runs.identity.fingerprint`).
    checkpoint_metadata: what each checkpoint step records of its run
      (`checkpoint_saves.save`'s `metadata`): the config as config.json holds it, its model
      group and the image shape of the abstract state, so that a ``checkpoints/`` folder
      alone rebuilds the run (`crackjax.experiment.restored.read_config`).
    init: where a fresh state's weights come from (``config.model_init``; `pretrained.InitSpec`).
    splits: the dataset, prepared on first use, each split opened once (`data.splits.Splits`).
    states: fresh, abstract and restored TrainStates and the device mesh
      (`engine.states.States`; it holds the run's optimiser, Adam at ``config.learning_rate``).
    start: a fine-tuning's start model file as a `restored.Run`, read on first use.
    init_arrays: the named arrays of a fresh state's initial weights, read on first use.
  """

  config: ml_collections.ConfigDict
  model: nn.Module
  loss_fn: losses.LossFn
  augment_fn: augment.AugmentFn
  protocols: tuple[str, ...]
  schedule: Schedule
  eval_plan: EvalPlan
  restore_spec: RestoreSpec
  hparams: dict[str, Any]
  config_json: str
  fingerprint: dict[str, Any]
  checkpoint_metadata: dict[str, Any]
  init: pretrained.InitSpec
  splits: Splits
  states: States

  @functools.cached_property
  def start(self) -> restored.Run | None:
    """The model file a fine-tuning starts from (``config.model_init.pretrained`` naming a
    released model, a .safetensors file or a URL), read on first use and then kept: its
    initial weights, and its scores as shipped before training, come from this one read
    (`restored.start_run`). None for a run from scratch or from a .npz.

    Raises:
      pretrained.PretrainedError: the file cannot be found, fetched or verified (one line).
    """
    return restored.start_run(self.init)

  @functools.cached_property
  def init_arrays(self) -> dict[str, Any] | None:
    """The named arrays a fresh state takes (``config.model_init.pretrained``: the start
    model's, or a .npz's), read on first use (`restored.initial_arrays`); None: from scratch.

    Raises:
      pretrained.PretrainedError: the file cannot be read (one line).
    """
    return restored.initial_arrays(self.init, self.start)


def splits_of(c: specs.Plain, loader_spec: LoaderSpec) -> Splits:
  """The dataset of config `c`'s run (plain data, `specs.plain`; `data.splits.Splits`: nothing
  is read yet), read as `loader_spec` says (`specs.loader_spec_of(c)`)."""
  return Splits(c['data'], loader_spec)


def check_data(experiment: Experiment) -> None:
  """Raises `validation.ConfigError` if the train images do not fit ``data.input_size``
  (decodes every train image once; a mixture's: a sample of each member's, whose ``scale``
  must leave them at least the crop, `mixture.crop_problems`)."""
  source = experiment.splits.train_source
  if mixture.is_mixture(experiment.splits.data):
    # Any size fits a mixture (mirrored up to the crop), unless a member's scale shrinks it.
    sizes = {(1, 1): len(source)}
    problems = mixture.crop_problems(experiment.splits.data, source)
    if problems:
      raise validation.ConfigError('\n'.join(problems))
  else:
    sizes = validation.train_image_sizes(source)
  validation.check_data(experiment.splits.data, sizes, experiment.model)


def on_other_data(experiment: Experiment, config: ml_collections.ConfigDict) -> Experiment:
  """The experiment's parts (the same model object and states) on `config`'s data and
  protocols: scoring a run on another dataset or folder (crackjax-evaluate). Only ``data`` and
  ``eval`` may differ from the experiment's config; the model is not rebuilt. What follows the
  config follows `config`: its plan, protocols, splits and records (`recorded_fields`: the
  hyper-parameters TensorBoard shows, config.json's text, the fingerprint)."""
  c = specs.plain(config)
  return dataclasses.replace(
    experiment,
    config=config,
    protocols=tuple(c['eval']['protocols']),
    eval_plan=eval_plan_of(c),
    splits=splits_of(c, specs.loader_spec_of(c)),
    **recorded_fields(config, experiment.restore_spec, specs.recorded(config)),
  )


def recorded_fields(
  config: ml_collections.ConfigDict, restore_spec: RestoreSpec, hparams: dict[str, Any]
) -> dict[str, Any]:
  """The Experiment's fields that record `config`: ``hparams`` (given: the config as
  config.json holds it, `specs.recorded`), ``config_json`` (that file's text), ``fingerprint``
  and ``checkpoint_metadata`` (each checkpoint step's record of its run, with the image shape
  of `restore_spec`)."""
  return {
    'hparams': hparams,
    'config_json': config.to_json_best_effort(indent=2),
    'fingerprint': identity.fingerprint(hparams),
    'checkpoint_metadata': {
      'format': 1,
      'config': hparams,
      'model': hparams.get('model'),
      'image_shape': list(restore_spec.image_shape),
    },
  }


def build(config: ml_collections.ConfigDict, *, training: bool = True) -> Experiment:
  """Validates `config` and builds its experiment (nothing is read from disk yet).

  Args:
    config: the experiment's config (configs/base.py documents every field).
    training: whether the experiment trains here. False for a run's recorded config rebuilt
      for prediction, export or scoring elsewhere: the checks that concern only a new
      training (the pretrained file, the batch split over this machine's devices, the
      data_dir being a folder) are left out.

  Raises:
    validation.ConfigError: every problem of the config, one per line.
    ValueError: a module of ``config.plugins`` cannot be imported.
  """
  # check_config imports config.plugins first (crackjax/plugins.py), so a plugin's
  # model, loss, dataset or protocol is registered before it is looked up.
  parts = validation.check_config(config, training=training)
  c = specs.plain(config)  # read as plain data from here on
  # What the parts below take of the config, derived together (`specs`).
  init = specs.init_spec_of(c)
  hparams = specs.recorded(config)
  loader_spec = specs.loader_spec_of(c)
  # The abstract state's image shape, from the config alone (never from the data).
  image_shape = init_image_shape(parts.model, c['data'].get('input_size'))
  restore_spec = RestoreSpec(image_shape, max_to_keep=c['max_checkpoints_to_keep'])
  optimizer = train_state.create_optimizer(learning_rate.of_config(c))
  return Experiment(
    config=config,
    model=parts.model,
    loss_fn=parts.loss_fn,
    augment_fn=parts.augment_fn,
    protocols=tuple(c['eval']['protocols']),
    schedule=schedule_of(c),
    eval_plan=eval_plan_of(c),
    restore_spec=restore_spec,
    **recorded_fields(config, restore_spec, hparams),
    init=init,
    splits=splits_of(c, loader_spec),
    states=States(parts.model, optimizer, int(c['seed']), restore_spec),
  )
