"""The model and optimizer state: `TrainState`, its initialisation and its abstract shape.

Parameters and Adam state are created once per run from the model the experiment built
(`create_train_state(rng, image_shape, model, tx)`), jitted with replicated out-shardings
(`init_train_state`) or traced without values for a restore (`abstract_train_state`).

Models with BatchNorm (a 'batch_stats' collection: SegNet, DeepCrack, DeepLab v3+, CrackSeg,
U-CliqueNet) train with a `BatchNormTrainState`, a TrainState with one more field,
``batch_stats`` (the running averages, replicated like the parameters and checkpointed with
them). Every other model keeps the plain flax `TrainState`, so its checkpoints have exactly the
layout they always had and those written before BatchNorm models existed restore unchanged
(orbax refuses to restore a checkpoint onto a state with a field the checkpoint lacks, even an
empty one).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from flax.training import train_state as flax_train_state
from jax.sharding import Mesh

from crackjax.engine import mesh as mesh_lib
from crackjax.engine.learning_rate import LearningRate

TrainState = flax_train_state.TrainState


class BatchNormTrainState(TrainState):
  """The TrainState of a model with BatchNorm: also its running averages.

  Attributes:
    batch_stats: the model's 'batch_stats' collection, updated by every train step (outside
      the optimiser) and used by evaluation and prediction.
  """

  batch_stats: Any = struct.field(default_factory=dict)


def batch_stats_of(state: TrainState) -> Any:
  """The state's batch statistics: its ``batch_stats``, or None for a model without them."""
  return getattr(state, 'batch_stats', None) or None


def create_optimizer(learning_rate: float | LearningRate) -> optax.GradientTransformation:
  """The optimiser of every run: Adam (the paper's §IV setting), at a constant step size or
  at a `LearningRate` schedule of the global step."""
  if isinstance(learning_rate, LearningRate):
    if learning_rate.is_constant:
      return optax.adam(learning_rate.peak)
    return optax.adam(learning_rate.optax_schedule())
  return optax.adam(learning_rate)


def create_train_state(
  rng: jax.Array,
  image_shape: tuple[int, int, int],
  model: nn.Module,
  tx: optax.GradientTransformation,
) -> TrainState:
  """Initialises parameters and optimiser state for images of shape (H, W, C).

  Args:
    rng: PRNG key for the parameters.
    image_shape: (H, W, C) of one training image.
    model: the experiment's model.
    tx: the experiment's optimiser.

  Returns:
    A TrainState at step 0; a `BatchNormTrainState` for a model with batch statistics.
  """
  variables = model.init(rng, jnp.zeros((1, *image_shape), jnp.float32))
  params = variables['params']
  if variables.get('batch_stats'):
    state = BatchNormTrainState.create(
      apply_fn=model.apply, params=params, tx=tx, batch_stats=variables['batch_stats']
    )
  else:
    state = TrainState.create(apply_fn=model.apply, params=params, tx=tx)
  # A strong int32 step, as a restored checkpoint's: TrainState.create's Python 0 is weakly
  # typed, and a train step compiled for a fresh state would not be reused (or found in the
  # compilation cache) for a resumed one (6 s per compilation of the smoke U-Net on the CPU).
  return state.replace(step=jnp.zeros((), jnp.int32))


def init_key(seed: int) -> jax.Array:
  """The PRNG key of the parameters' initialisation."""
  # The RBG generator compiles the ~20 initialiser calls of a U-Net in a few seconds
  # where threefry takes half a minute on the CPU; its output is deterministic per seed.
  return jax.random.key(seed, impl='rbg')


def _creator(image_shape, model: nn.Module, tx: optax.GradientTransformation):
  """`create_train_state` as a function of the PRNG key alone (to trace or to jit)."""
  return functools.partial(create_train_state, image_shape=image_shape, model=model, tx=tx)


def abstract_train_state(
  seed: int,
  image_shape: tuple[int, int, int],
  mesh: Mesh,
  model: nn.Module,
  tx: optax.GradientTransformation,
) -> TrainState:
  """Shapes, dtypes and (replicated) shardings of the TrainState, without computing it."""
  abstract = jax.eval_shape(_creator(image_shape, model, tx), init_key(seed))
  sharding = mesh_lib.replicated(mesh)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), abstract)


def abstract_inference_fields(
  seed: int, image_shape: tuple[int, int, int], mesh: Mesh, model: nn.Module
) -> dict[str, Any]:
  """`inference_fields` of the abstract TrainState of `model` without an optimiser: what a
  params-only restore reads (`crackjax.experiment.restored.load_run`)."""
  return inference_fields(abstract_train_state(seed, image_shape, mesh, model, optax.identity()))


def inference_fields(abstract: TrainState) -> dict[str, Any]:
  """The fields of (abstract) state `abstract` that inference needs: step, params and, for a
  BatchNorm model, batch_stats; not the optimiser state (a partial restore reads only these)."""
  fields = {'step': abstract.step, 'params': abstract.params}
  if batch_stats_of(abstract) is not None:
    fields['batch_stats'] = abstract.batch_stats
  return fields


def inference_state(
  apply_fn: Any, params: Any, batch_stats: Any = None, step: Any = 0
) -> TrainState:
  """A TrainState of `params` (and `batch_stats`) with no optimiser state (optax.identity):
  what evaluation and prediction take, restored without the training's Adam moments."""
  kwargs = dict(apply_fn=apply_fn, params=params, tx=optax.identity())
  if batch_stats:
    state = BatchNormTrainState.create(**kwargs, batch_stats=batch_stats)
  else:
    state = TrainState.create(**kwargs)
  return state.replace(step=step)


def init_train_state(
  seed: int,
  image_shape: tuple[int, int, int],
  mesh: Mesh,
  model: nn.Module,
  tx: optax.GradientTransformation,
) -> TrainState:
  """A freshly initialised TrainState (seed `seed`), replicated over `mesh`."""
  init = jax.jit(_creator(image_shape, model, tx), out_shardings=mesh_lib.replicated(mesh))
  return init(init_key(seed))


def local_params(state: TrainState) -> Any:
  """The parameters as host numpy arrays, from this process's first device."""
  # Replicated arrays may span other processes' devices; every process holds a full copy
  # on each of its devices, so take the first local one.
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), state.params)


def local_batch_stats(state: TrainState) -> Any:
  """The batch statistics as host numpy arrays (as `local_params`), or None for a model
  without them."""
  batch_stats = batch_stats_of(state)
  if batch_stats is None:
    return None
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), batch_stats)
