"""The pure, jitted train step.

The structure follows the flax examples (`train_step`) and scenic's trainers: the loss and the
augmentation are functions handed to the step (`functools.partial`), built once by the
experiment (`crackjax.experiment.build`), so a new model or loss never edits this file.

Because the loss (and so alpha, the background ratio of the minority weight q) is computed
on the global batch array, one process with one device, one process with N devices and
several processes after `jax.distributed.initialize()` run the same computation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from crackjax.engine import mesh as mesh_lib
from crackjax.engine import train_state
from crackjax.engine.train_state import TrainState
from crackjax.models import apply_model

# What the step is handed (the contracts of `crackjax.losses.LossFn` and
# `crackjax.data.augment.AugmentFn`, spelled here so the step imports neither: it only calls
# them).
LossFn = Callable[[Any, jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]]
AugmentFn = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


class NonFiniteError(FloatingPointError):
  """Raised when training produced a non-finite loss or gradient."""


def train_step(
  state: TrainState,
  batch: Mapping[str, jax.Array],
  *,
  loss_fn: LossFn,
  augment_fn: AugmentFn,
  seed: int,
) -> tuple[TrainState, dict[str, jax.Array]]:
  """One optimisation step on a global batch.

  Augmentation runs here, on device, keyed by the step number so a resumed run draws the
  same transforms. If the loss or the gradient is not finite the update is skipped (the
  state keeps its last good parameters) and `metrics['finite']` is 0; the host loop turns
  that into a NonFiniteError.

  A model with BatchNorm (a `state.BatchNormTrainState`) runs in training mode: its
  BatchNorms normalise with the statistics of the global batch (a reduction over the sharded
  batch axis, the same on 1 or N devices) and the updated running averages are part of the
  new state. Other models are applied as they always were (`models.apply_model`).

  Args:
    state: replicated TrainState (or BatchNormTrainState).
    batch: {'image': [B, H, W, 3], 'mask': [B, H, W, 1]} sharded along B.
    loss_fn: `(model outputs, masks) -> (scalar loss, metrics)` (crackjax.losses).
    augment_fn: `(rng, image, mask) -> (image, mask)` (crackjax.data.augment).
    seed: seed of the augmentation keys.

  Returns:
    The new state and scalar metrics: loss, grad_norm, finite and the loss's own (for the
    holistic loss alpha and q).
  """
  # The named scopes label the step's parts in profiles (bench/cpu_profile.py reads them).
  rng = jax.random.fold_in(jax.random.key(seed), state.step)
  with jax.named_scope('augment'):
    image, mask = augment_fn(rng, batch['image'], batch['mask'])

  batch_stats = train_state.batch_stats_of(state)

  def compute_loss(params):
    outputs, new_batch_stats = apply_model(
      state.apply_fn, params, image, batch_stats=batch_stats, train=True
    )
    with jax.named_scope('loss'):
      loss, metrics = loss_fn(outputs, mask)
    return loss, (metrics, new_batch_stats)

  (loss, (loss_metrics, new_batch_stats)), grads = jax.value_and_grad(compute_loss, has_aux=True)(
    state.params
  )
  with jax.named_scope('optimizer'):
    grad_norm = optax.tree_utils.tree_norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    new_state = state.apply_gradients(grads=grads)
    if batch_stats is not None:
      new_state = new_state.replace(batch_stats=new_batch_stats)
    # Keep the old state on a non-finite step: the run stops at the next check, and the
    # parameters it could still save are the last good ones.
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
  metrics = {
    'loss': loss,
    'grad_norm': grad_norm,
    **loss_metrics,
    'finite': finite.astype(jnp.float32),
  }
  return new_state, metrics


def make_train_step(
  mesh: Mesh,
  state: TrainState,
  *,
  loss_fn: LossFn,
  augment_fn: AugmentFn,
  seed: int,
):
  """Jits `train_step` with replicated state, a data-sharded batch and a donated state.

  Args:
    mesh: the device mesh.
    state: a state of the shape that will be passed (for its sharding tree).
    loss_fn: the experiment's loss (`crackjax.losses`).
    augment_fn: the experiment's augmentation (`crackjax.data.augment`).
    seed: seed of the augmentation keys (``config.seed``).
  """
  replicated = mesh_lib.replicated(mesh)
  state_sharding = jax.tree.map(lambda _: replicated, state)
  return jax.jit(
    functools.partial(train_step, loss_fn=loss_fn, augment_fn=augment_fn, seed=seed),
    in_shardings=(state_sharding, mesh_lib.batch_sharded(mesh)),
    out_shardings=(state_sharding, replicated),
    donate_argnums=(0,),
  )
