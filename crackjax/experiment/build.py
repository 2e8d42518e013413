"""One experiment, built once: everything a run needs, derived from a validated config.

`build(config)` validates the config (one pass, `experiment.validation.check_config`) and returns
an `Experiment`: the model, the loss, the augmentation, the optimiser, the evaluation
protocols and the run's identity, each built here and nowhere else. The dataset builder, the
split sources, the train image shape and the device mesh are derived on first use and kept,
so a launch prepares the dataset and opens each split once, whoever asks (the data check, the
loader, the periodic and the final evaluation).

Every consumer takes the experiment instead of the config: launch.py, the training loop (its
jitted step is `Experiment.train_step`), evaluation (`trainer.scoring`), scoring on other
data (crackjax-evaluate), prediction and export of a restored run (`experiment.restored.load_run`:
`build(config.json, training=False)`, then `Experiment.restore`), the reproduction runner's
jobs and the benches. This is the pattern of scenic's and big_vision's trainers: build the
parts once at the top, hand them down; nothing below rebuilds them from the config.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import ml_collections
import numpy as np
import optax
import tensorflow_datasets as tfds
from jax.sharding import Mesh

from crackjax import losses
from crackjax.data import augment, loader, mixture
from crackjax.data import registry as data_registry
from crackjax.engine import checkpoints, step, train_state
from crackjax.engine import mesh as mesh_lib
from crackjax.engine.checkpoints import RestoreSpec
from crackjax.engine.schedule import Schedule
from crackjax.evaluation.eval_plan import EvalPlan
from crackjax.experiment import specs, validation
from crackjax.models import input_multiple, pretrained
from crackjax.runs import identity


def schedule_of(config: ml_collections.ConfigDict) -> Schedule:
  """When the run of `config` steps, logs, saves and evaluates."""
  ev = config.eval
  return Schedule(
    steps_per_epoch=int(config.steps_per_epoch),
    num_epochs=int(config.num_epochs),
    log_every_steps=int(config.log_every_steps),
    eval_every_epochs=int(ev.get('every_epochs', 0) or 0),
    full_eval_epochs=tuple(ev.get('full_epochs', ()) or ()),
  )


def eval_plan_of(config: ml_collections.ConfigDict) -> EvalPlan:
  """What an evaluation of `config`'s data scores and writes."""
  ev = config.eval
  # Plain JSON data, as a recorded config.json holds it (`eval_records.data_key`).
  data = json.loads(json.dumps(config.data.to_dict(), default=str))
  return EvalPlan(
    dataset=config.data.name,
    folder=data.get('folder'),
    split=config.data.get('test_split', 'test'),
    protocols=tuple(ev.protocols),
    curve_protocols=tuple(ev.get('curve_protocols') or ()),
    num_thresholds=ev.num_thresholds,
    tail_thresholds=bool(ev.get('tail_thresholds', True)),
    num_qualitative=int(ev.num_qualitative),
    save_probability_maps=bool(ev.get('save_probability_maps', False)),
    background_workers=int(ev.get('background_workers', 0) or 0),
  )


def restore_spec_of(config: ml_collections.ConfigDict, model: nn.Module) -> RestoreSpec:
  """What a restore of `config`'s run needs: the image shape of its abstract state, read
  from the config alone (never from the data): ``data.input_size`` if set, else a square of
  about 256 pixels that `model` takes; and how many checkpoints are kept."""
  size = config.get('data', {}).get('input_size')
  if size:
    shape = (int(size[0]), int(size[1]), 3)
  else:
    multiple = input_multiple(model)
    side = multiple * -(-256 // multiple)
    shape = (side, side, 3)
  return RestoreSpec(image_shape=shape, max_to_keep=config.max_checkpoints_to_keep)


@dataclasses.dataclass(frozen=True)
class StartModel:
  """The model file a fine-tuning starts from (`Experiment.start_model`).

  Attributes:
    spec: ``config.model_init.pretrained`` as given (a released name, a path or a URL).
    name: the name its card gives (the spec when it has none).
    threshold: the threshold the file stores (crack where probability > it): the released
      model's own operating point, what a user of the file as shipped gets.
  """

  spec: str
  name: str
  threshold: float


@dataclasses.dataclass(frozen=True, eq=False)
class Experiment:
  """The parts of one run, built once from a validated config (`build`).

  Attributes:
    config: the config the parts were built from (read-only by convention: a changed field
      would no longer match the parts).
    model: the linen Module of ``config.model`` (`crackjax.models`).
    loss_fn: ``(model outputs, masks) -> (scalar loss, metrics)`` of ``config.loss``.
    augment_fn: ``(rng, images, masks) -> (images, masks)`` of ``config.augment``.
    optimizer: the optax transformation of the run (Adam at ``config.learning_rate``).
    protocols: the evaluation protocols of ``config.eval.protocols``.
    schedule: steps, epochs and when to log, save and evaluate (`schedule_of`).
    eval_plan: the split, protocols, grids and outputs of an evaluation (`eval_plan_of`).
    restore_spec: the image shape of the abstract state and the checkpoints kept
      (`restore_spec_of`).
  """

  config: ml_collections.ConfigDict
  model: nn.Module
  loss_fn: losses.LossFn
  augment_fn: augment.AugmentFn
  optimizer: optax.GradientTransformation
  protocols: tuple[str, ...]
  schedule: Schedule
  eval_plan: EvalPlan
  restore_spec: RestoreSpec

  # ------------------------------------------------------------------ identity and devices

  @functools.cached_property
  def fingerprint(self) -> dict[str, Any]:
    """The config fields that define the computation (`runs.identity.fingerprint`)."""
    return identity.fingerprint(self.hparams)

  @functools.cached_property
  def mesh(self) -> Mesh:
    """The 1-D data-parallel mesh over every device of every process."""
    return mesh_lib.make_mesh()

  # ------------------------------------------------------------------------------- data

  @functools.cached_property
  def builder(self) -> tfds.core.DatasetBuilder | list[tfds.core.DatasetBuilder]:
    """The prepared TFDS builder of ``config.data`` (prepared here on first use); a mixture
    of datasets (`crackjax.data.mixture`): its members' builders.

    Raises:
      data.registry.DatasetError: absent or unusable data (the message names what and where).
    """
    data = specs.data_group(self.config)
    if mixture.is_mixture(data):
      return mixture.prepare(data)
    return data_registry.prepare_dataset(data)

  def prepare_data(self) -> tfds.core.DatasetBuilder:
    """Prepares the dataset if needed (once) and returns its builder: launch.py calls it
    early, so absent or invalid data stops a run before a model is compiled."""
    return self.builder

  def source(self, split: str) -> Sequence[dict[str, Any]]:
    """The random-access source of `split`, opened once per split."""
    sources = self.__dict__.setdefault('_sources', {})
    if split not in sources:
      data = specs.data_group(self.config)
      if mixture.is_mixture(data):
        self.prepare_data()
        sources[split] = mixture.open_split(data, split)
      else:
        sources[split] = data_registry.ReadableSource(self.builder, split)
    return sources[split]

  @property
  def train_source(self) -> Sequence[dict[str, Any]]:
    return self.source(self.config.data.train_split)

  @property
  def test_source(self) -> Sequence[dict[str, Any]]:
    return self.source(self.config.data.test_split)

  @functools.cached_property
  def train_image_shape(self) -> tuple[int, int, int]:
    """(H, W, 3) of the images the train step sees: the crop size, else the first train
    image's size."""
    size = loader.crop_size(specs.data_group(self.config))
    if size is not None:
      return *size, 3
    h, w = np.asarray(self.train_source[0]['image']).shape[:2]
    return int(h), int(w), 3

  def check_data(self) -> None:
    """Raises `validation.ConfigError` if the train images do not fit ``data.input_size``
    (decodes every train image once)."""
    if mixture.is_mixture(specs.data_group(self.config)):
      sizes = {(1, 1): len(self.train_source)}  # any size fits a mixture (mirrored up)
    else:
      sizes = validation.train_image_sizes(self.train_source)
    validation.check_data(self.config, sizes, self.model)

  def train_iterator(self, start_step: int = 0, **kwargs):
    """This process's part of global batches `start_step`, `start_step` + 1, ... of the train
    split (`data.loader.create_train_iterator`)."""
    return loader.create_train_iterator(
      specs.loader_spec_of(self.config), self.train_source, start_step=start_step, **kwargs
    )

  def eval_examples(self, split: str | None = None):
    """Every record of `split` (default the test split) once (`data.loader.eval_examples`)."""
    return loader.eval_examples(self.source(split or self.config.data.test_split))

  def on_other_data(self, config: ml_collections.ConfigDict) -> Experiment:
    """These parts (the same model object) on `config`'s data and protocols: scoring a run
    on another dataset or folder (crackjax-evaluate). Only ``data`` and ``eval`` may differ
    from this experiment's config; the model is not rebuilt."""
    return dataclasses.replace(
      self, config=config, protocols=tuple(config.eval.protocols), eval_plan=eval_plan_of(config)
    )

  def config_json(self) -> str:
    """The config as the run records it (``<workdir>/config.json``)."""
    return self.config.to_json_best_effort(indent=2)

  @functools.cached_property
  def hparams(self) -> dict[str, Any]:
    """The config as plain JSON data, as config.json holds it (TensorBoard's hyper-parameters,
    each checkpoint's record)."""
    return json.loads(self.config.to_json_best_effort())

  @functools.cached_property
  def checkpoint_metadata(self) -> dict[str, Any]:
    """What each checkpoint step records of its run (`checkpoint_saves.save`'s `metadata`): the
    config as config.json holds it, its model group and the image shape of the abstract
    state, so that a ``checkpoints/`` folder alone rebuilds the run
    (`crackjax.experiment.restored.read_config`)."""
    return {
      'format': 1,
      'config': self.hparams,
      'model': self.hparams.get('model'),
      'image_shape': list(self.restore_spec.image_shape),
    }

  @functools.cached_property
  def start_model(self) -> StartModel | None:
    """The model file this run's weights start from (``config.model_init.pretrained`` naming
    a released model, a .safetensors file or a URL: a fine-tuning), with the threshold the
    file stores; None for a run from scratch or from a .npz. Read on first use (the file is
    resolved as its weights are: a URL comes from the download cache)."""
    spec = (self.config.get('model_init') or {}).get('pretrained')
    if not spec or not pretrained.is_model_file(spec):
      return None
    from crackjax.models import hub, model_file

    meta = model_file.read_metadata(hub.resolve(spec))
    return StartModel(
      spec=str(spec),
      name=str(meta.get('card', {}).get('name') or spec),
      threshold=float(meta['threshold']['threshold']),
    )

  # ------------------------------------------------------------------------------ state

  def init_state(self, image_shape: tuple[int, int, int] | None = None, *, mesh=None):
    """A freshly initialised TrainState (seed ``config.seed``), replicated over the mesh,
    on `image_shape` (default the train image shape)."""
    return train_state.init_train_state(
      int(self.config.seed),
      image_shape or self.train_image_shape,
      mesh or self.mesh,
      self.model,
      self.optimizer,
    )

  def abstract_state(
    self, mesh: Mesh | None = None, image_shape: tuple[int, int, int] | None = None
  ):
    """Shapes, dtypes and shardings of the TrainState, for a restore (on `image_shape`,
    default one read from the config alone, `restore_spec_of`: no data)."""
    return train_state.abstract_train_state(
      int(self.config.seed),
      image_shape or self.restore_spec.image_shape,
      mesh or self.mesh,
      self.model,
      self.optimizer,
    )

  def checkpoint_manager(self, workdir: str | Path, *, create: bool = True):
    """The orbax manager of ``<workdir>/checkpoints``."""
    return checkpoints.checkpoint_manager(workdir, self.restore_spec.max_to_keep, create=create)

  def restore(
    self,
    workdir: str | Path,
    *,
    step: int | None = None,
    mesh: Mesh | None = None,
    inference: bool = False,
  ):
    """The TrainState of `step` (default the newest readable) of the run in `workdir` (or of
    the checkpoint folder `workdir`; `checkpoints.checkpoint_directory`), by
    `checkpoints.restore`, the one restore path. `inference`: only the parameters (and
    BatchNorm statistics) are read, not the optimiser state (`train_state.inference_state`)."""
    mesh = mesh or self.mesh
    mngr = checkpoints.existing_manager(workdir, self.restore_spec.max_to_keep)
    if not inference:
      return checkpoints.restore(mngr, functools.partial(self.abstract_state, mesh), step=step)

    def abstract():
      return train_state.inference_fields(self.abstract_state(mesh))

    part = checkpoints.restore(mngr, abstract, step=step)
    return train_state.inference_state(
      self.model.apply, part['params'], part.get('batch_stats'), part['step']
    )

  def restore_or_init(self, workdir: str | Path, mngr):
    """The newest readable checkpoint of `mngr`, else a fresh state with the initial weights
    of ``config.model_init`` (logged and written to ``<workdir>/init.json``)."""

    def init():
      return pretrained.initialise(self.init_state(), specs.init_spec_of(self.config), workdir)

    return checkpoints.restore_or_init(
      mngr, functools.partial(self.abstract_state, self.mesh), init
    )

  def train_step(self, state, *, mesh: Mesh | None = None):
    """The jitted train step of this experiment's loss and augmentation for states shaped
    like `state`, over `mesh` (default the experiment's; `engine.step.make_train_step`)."""
    return step.make_train_step(
      mesh or self.mesh,
      state,
      loss_fn=self.loss_fn,
      augment_fn=self.augment_fn,
      seed=int(self.config.seed),
    )


def build(config: ml_collections.ConfigDict, *, training: bool = True) -> Experiment:
  """Validates `config` and builds its experiment (nothing is read from disk yet).

  Args:
    config: the experiment's config (configs/base.py documents every field).
    training: whether the experiment trains here. False for a run's recorded config rebuilt
      for prediction, export or scoring elsewhere: the checks that concern only a new
      training (the pretrained file, the batch split over this machine's devices) are left
      out.

  Raises:
    validation.ConfigError: every problem of the config, one per line.
    ValueError: a module of ``config.plugins`` cannot be imported.
  """
  # check_config imports config.plugins first (crackjax/plugins.py), so a plugin's
  # model, loss, dataset or protocol is registered before it is looked up.
  parts = validation.check_config(config, training=training)
  return Experiment(
    config=config,
    model=parts.model,
    loss_fn=parts.loss_fn,
    augment_fn=parts.augment_fn,
    optimizer=train_state.create_optimizer(config.learning_rate),
    protocols=tuple(config.eval.protocols),
    schedule=schedule_of(config),
    eval_plan=eval_plan_of(config),
    restore_spec=restore_spec_of(config, parts.model),
  )


def one_device_mesh() -> Mesh:
  """A mesh of this process's first device: prediction and export run the parameters as host
  arrays on one device."""
  return Mesh(np.asarray(jax.local_devices()[:1]), ('data',))
