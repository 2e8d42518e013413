"""Losses: the paper's adaptive cost-sensitive losses and the comparison models' own.

* `crackjax.losses.core` (re-exported here): the pure functions of Li, Wang, Tian and Qi
  (IEEE T-Cybernetics 2021): `background_ratio`, the q(alpha) families (`WEIGHTINGS`),
  `weighted_bce`, `jaccard_distance`, `holistic_loss`, and the train-step loss `holistic`.
* `crackjax.losses.side`: deep supervision for models with side outputs (HED, RCF,
  DeepCrack) and their original losses.
* `crackjax.losses.frequency`: SegNet's median-frequency balanced cross-entropy.

The train step receives a `LossFn`, `loss_fn(outputs, labels) -> (scalar loss, metrics)`,
built from the config's `loss` group (plain data) by `loss_from_config`: ``name`` selects the
entry of the explicit table `LOSSES` (a `LossEntry`: the factory and what the loss reads of the
model's outputs), the other fields are the factory's keyword arguments. A new loss is a factory
added to LOSSES; from outside crackjax (a plugin), `register_loss` in an importable module named
by the config's ``plugins`` (crackjax/plugins.py). The training loop never changes;
tests/test_contracts.py checks every entry.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from crackjax import plugins
from crackjax.losses import frequency, side
from crackjax.losses.core import (
  WEIGHTINGS,
  LossFn,
  background_ratio,
  holistic,
  holistic_loss,
  jaccard_distance,
  minority_weight,
  q_exp,
  q_log,
  q_power,
  q_xie,
  weighted_bce,
)
from crackjax.models import fused_logits

__all__ = [
  'LOSSES',
  'LossEntry',
  'WEIGHTINGS',
  'LossFn',
  'background_ratio',
  'frequency',
  'fused_logits',
  'holistic',
  'holistic_loss',
  'jaccard_distance',
  'loss_from_config',
  'minority_weight',
  'q_exp',
  'q_log',
  'q_power',
  'q_xie',
  'register_loss',
  'side',
  'weighted_bce',
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossEntry:
  """A train-step loss and what it needs, as LOSSES declares it.

  Attributes:
    build: the factory: keyword arguments (the fields of ``config.loss`` other than
      ``name``, each with a default) -> `LossFn`.
    side_outputs: whether it reads the model's side outputs (``outputs['side_logits']``)
      besides the fused map; False: the fused map only (`fused_logits`), whatever the model
      returns.
    module: the module that registered it (`register_loss` records it); None for the entries
      crackjax ships.
  """

  build: Callable[..., LossFn]
  side_outputs: bool = False
  module: str | None = None

  @property
  def fields(self) -> tuple[str, ...]:
    """The ``config.loss`` fields it takes: its factory's keyword arguments."""
    return tuple(inspect.signature(self.build).parameters)


# Explicit table: config.loss.name -> the loss and what it needs.
LOSSES: dict[str, LossEntry] = {
  'holistic': LossEntry(build=holistic),
  # Comparison models with side outputs (Table V): their original losses and the paper's
  # dagger variant, the exponential WCE on every map.
  'hed_balanced': LossEntry(build=side.hed_balanced, side_outputs=True),
  'rcf_robust': LossEntry(build=side.rcf_robust, side_outputs=True),
  'deepcrack_plain': LossEntry(build=side.deepcrack_plain, side_outputs=True),
  'side_exp_wce': LossEntry(build=side.side_exp_wce, side_outputs=True),
  # SegNet's original loss (Tables VII-VIII); FCN8s and DeepLab v3+ train with 'holistic',
  # weighting 'ce' (the plain cross-entropy).
  'median_frequency': LossEntry(build=frequency.median_frequency),
}


def register_loss(name: str, entry: LossEntry, *, module: str | None = None) -> LossEntry:
  """Adds a plugin's loss to LOSSES and returns its entry as registered.

  As `crackjax.models.register_model` (call it from an importable module that the config's
  ``plugins`` names; the rule for taken names is `crackjax.plugins.register`).
  """
  module = module or plugins.registering_module()
  return plugins.register(LOSSES, 'Loss', name, entry, module)


def loss_from_config(loss: Mapping[str, Any]) -> LossFn:
  """The train-step loss named ``loss['name']``, built with the other fields of ``loss``.

  Args:
    loss: the config's ``loss`` group as plain data (``config.loss.to_dict()``, or the
      ``loss`` of a recorded config.json).

  Raises:
    ValueError: for an unknown name, a field the loss does not take, or a bad value.
  """
  name = loss.get('name')
  if name not in LOSSES:
    raise ValueError(f'config.loss.name={name!r} is not one of {sorted(LOSSES)}.')
  kwargs = {k: v for k, v in loss.items() if k != 'name'}
  entry = LOSSES[name]
  unknown = sorted(set(kwargs) - set(entry.fields))
  if unknown:
    raise ValueError(
      f'config.loss has field(s) {unknown} that loss {name!r} does not take; '
      f'it takes {sorted(entry.fields)}.'
    )
  return entry.build(**kwargs)
