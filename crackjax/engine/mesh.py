"""The device mesh and the two shardings of data-parallel training.

Parallelism is data-parallel SPMD with `jax.jit` over a 1-D `Mesh` of every device of every
process (axis 'data'). Parameters and optimizer state are replicated, batches are sharded
along their first axis.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def make_mesh() -> Mesh:
  """A 1-D mesh over all devices of all processes, ordered by process.

  `jax.devices()` lists the devices of process 0 first, then process 1, ...; keeping that
  order makes each process's devices a contiguous block of the batch axis, so the rows a
  process loads (see `crackjax.data.loader.create_train_iterator`) land on its own devices.
  """
  return Mesh(np.asarray(jax.devices()), ('data',))


def replicated(mesh: Mesh) -> NamedSharding:
  """The sharding of parameters and optimizer state: a full copy on every device."""
  return NamedSharding(mesh, P())


def batch_sharded(mesh: Mesh) -> NamedSharding:
  """The sharding of batches: split along the first axis over the mesh."""
  return NamedSharding(mesh, P('data'))


def global_batch(local: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Assembles the per-process numpy batches into global arrays sharded along 'data'."""
  sharding = batch_sharded(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}


def one_device_mesh() -> Mesh:
  """A mesh of this process's first device: prediction and export run the parameters as host
  arrays on one device."""
  return Mesh(np.asarray(jax.local_devices()[:1]), ('data',))
