"""Model and optimizer state: mesh, TrainState, initialisation, checkpoints, restore.

Parallelism is data-parallel SPMD with `jax.jit` over a 1-D `Mesh` of every device of every
process (axis 'data'). Parameters and optimizer state are replicated, batches are sharded
along their first axis. Checkpoints are orbax `CheckpointManager` steps under
``<workdir>/checkpoints``, saved with `StandardSave` and restored onto an abstract state
(shapes, dtypes and shardings, no values) with `StandardRestore`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax.training import train_state as flax_train_state
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from crackjax.models import model_from_config

TrainState = flax_train_state.TrainState


def make_mesh() -> Mesh:
  """A 1-D mesh over all devices of all processes, ordered by process.

  `jax.devices()` lists the devices of process 0 first, then process 1, ...; keeping that
  order makes each process's devices a contiguous block of the batch axis, so the rows a
  process loads (see `crackjax.loader.create_train_iterator`) land on its own devices.
  """
  return Mesh(np.asarray(jax.devices()), ('data',))


def replicated(mesh: Mesh) -> NamedSharding:
  """The sharding of parameters and optimizer state: a full copy on every device."""
  return NamedSharding(mesh, P())


def batch_sharded(mesh: Mesh) -> NamedSharding:
  """The sharding of batches: split along the first axis over the mesh."""
  return NamedSharding(mesh, P('data'))


def create_model(config: ml_collections.ConfigDict) -> nn.Module:
  """The model of ``config.model`` (crackjax.models)."""
  return model_from_config(config.model)


def create_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  return optax.adam(config.learning_rate)


def create_train_state(
  config: ml_collections.ConfigDict, rng: jax.Array, image_shape: tuple[int, int, int]
) -> TrainState:
  """Initialises parameters and Adam state for images of shape (H, W, C).

  Args:
    config: reads model, learning_rate.
    rng: PRNG key for the parameters.
    image_shape: (H, W, C) of one training image.

  Returns:
    A TrainState at step 0.
  """
  model = create_model(config)
  params = model.init(rng, jnp.zeros((1, *image_shape), jnp.float32))['params']
  return TrainState.create(apply_fn=model.apply, params=params, tx=create_optimizer(config))


def init_key(seed: int) -> jax.Array:
  """The PRNG key of the parameters' initialisation."""
  # The RBG generator compiles the ~20 initialiser calls of a U-Net in a few seconds
  # where threefry takes half a minute on the CPU; its output is deterministic per seed.
  return jax.random.key(seed, impl='rbg')


def abstract_train_state(
  config: ml_collections.ConfigDict, image_shape: tuple[int, int, int], mesh: Mesh
) -> TrainState:
  """Shapes, dtypes and (replicated) shardings of the TrainState, without computing it."""
  abstract = jax.eval_shape(
    functools.partial(create_train_state, config, image_shape=image_shape), init_key(config.seed)
  )
  sharding = replicated(mesh)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), abstract)


def init_train_state(
  config: ml_collections.ConfigDict, image_shape: tuple[int, int, int], mesh: Mesh
) -> TrainState:
  """A freshly initialised TrainState (seed ``config.seed``), replicated over `mesh`."""
  init = jax.jit(
    functools.partial(create_train_state, config, image_shape=image_shape),
    out_shardings=replicated(mesh),
  )
  return init(init_key(config.seed))


def checkpoint_manager(
  workdir: str | Path, config: ml_collections.ConfigDict, *, create: bool = True
) -> ocp.CheckpointManager:
  """The orbax manager of ``<workdir>/checkpoints`` (created unless ``create=False``)."""
  options = ocp.CheckpointManagerOptions(max_to_keep=config.max_checkpoints_to_keep, create=create)
  return ocp.CheckpointManager(Path(workdir).absolute() / 'checkpoints', options=options)


def restore_or_init(
  config: ml_collections.ConfigDict,
  mngr: ocp.CheckpointManager,
  image_shape: tuple[int, int, int],
  mesh: Mesh,
) -> TrainState:
  """The latest checkpoint of `mngr` if there is one, else a freshly initialised state."""
  step = mngr.latest_step()
  if step is None:
    return init_train_state(config, image_shape, mesh)
  logging.info('Restoring checkpoint of step %d from %s', step, mngr.directory)
  abstract = abstract_train_state(config, image_shape, mesh)
  return mngr.restore(step, args=ocp.args.StandardRestore(abstract))


def global_batch(local: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Assembles the per-process numpy batches into global arrays sharded along 'data'."""
  sharding = batch_sharded(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}


def local_params(state: TrainState) -> Any:
  """The parameters as host numpy arrays, from this process's first device."""
  # Replicated arrays may span other processes' devices; every process holds a full copy
  # on each of its devices, so take the first local one.
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), state.params)
