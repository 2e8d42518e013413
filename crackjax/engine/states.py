"""Where a run's TrainState comes from: fresh, abstract, or restored from its checkpoints.

`States` holds what every state of one run shares (the model, the optimiser, the seed, the
restore's image shape and kept steps) and the device mesh, and makes the states the trainer,
evaluation, prediction and export ask for, each through the one restore path
(`crackjax.engine.checkpoints.restore`). Built once per experiment
(`crackjax.experiment.build`).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import flax.linen as nn
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh

from crackjax.engine import checkpoints, train_state
from crackjax.engine import mesh as mesh_lib
from crackjax.engine.checkpoints import RestoreSpec
from crackjax.engine.train_state import TrainState


@dataclasses.dataclass(frozen=True, eq=False)
class States:
  """The states of one run.

  Attributes:
    model: the run's linen Module.
    optimizer: its optax transformation.
    seed: the seed of a fresh state's initial weights (``config.seed``).
    restore_spec: the image shape of the abstract state and the checkpoints kept.
  """

  model: nn.Module
  optimizer: optax.GradientTransformation
  seed: int
  restore_spec: RestoreSpec

  @functools.cached_property
  def mesh(self) -> Mesh:
    """The 1-D data-parallel mesh over every device of every process (made on first use)."""
    return mesh_lib.make_mesh()

  def fresh(self, image_shape: tuple[int, int, int], mesh: Mesh | None = None) -> TrainState:
    """A freshly initialised TrainState on `image_shape`, replicated over `mesh` (default
    the run's)."""
    return train_state.init_train_state(
      self.seed, image_shape, mesh or self.mesh, self.model, self.optimizer
    )

  def abstract(
    self, mesh: Mesh | None = None, image_shape: tuple[int, int, int] | None = None
  ) -> TrainState:
    """Shapes, dtypes and shardings of the TrainState, for a restore (on `image_shape`,
    default the restore spec's, read from the config alone: no data)."""
    return train_state.abstract_train_state(
      self.seed,
      image_shape or self.restore_spec.image_shape,
      mesh or self.mesh,
      self.model,
      self.optimizer,
    )

  def manager(self, workdir: str | Path, *, create: bool = True) -> ocp.CheckpointManager:
    """The orbax manager of ``<workdir>/checkpoints``."""
    return checkpoints.checkpoint_manager(workdir, self.restore_spec.max_to_keep, create=create)

  def restore(
    self,
    workdir: str | Path,
    *,
    step: int | None = None,
    mesh: Mesh | None = None,
    inference: bool = False,
  ) -> TrainState:
    """The TrainState of `step` (default the newest readable) of the run in `workdir` (or of
    the checkpoint folder `workdir`; `checkpoints.checkpoint_directory`). `inference`: only
    the parameters (and BatchNorm statistics) are read, not the optimiser state.

    Raises:
      checkpoints.NoCheckpointError, checkpoints.CheckpointError: as `checkpoints.restore`.
    """
    mesh = mesh or self.mesh
    mngr = checkpoints.existing_manager(workdir, self.restore_spec.max_to_keep)
    if not inference:
      return checkpoints.restore(mngr, functools.partial(self.abstract, mesh), step=step)

    def abstract():
      return train_state.inference_fields(self.abstract(mesh))

    part = checkpoints.restore(mngr, abstract, step=step)
    return train_state.inference_state(
      self.model.apply, part['params'], part.get('batch_stats'), part['step']
    )
