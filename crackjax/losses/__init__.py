"""Losses: the paper's adaptive cost-sensitive losses and the comparison models' own.

* `crackjax.losses.core` (re-exported here): the pure functions of Li, Wang, Tian and Qi
  (IEEE T-Cybernetics 2021): `background_ratio`, the q(alpha) families (`WEIGHTINGS`),
  `weighted_bce`, `jaccard_distance`, `holistic_loss`, and the train-step loss `holistic`.
* `crackjax.losses.side`: deep supervision for models with side outputs (HED, RCF,
  DeepCrack) and their original losses.
* `crackjax.losses.frequency`: SegNet's median-frequency balanced cross-entropy.

The train step receives a `LossFn`, `loss_fn(outputs, labels) -> (scalar loss, metrics)`,
built from the config's `loss` group by `loss_from_config`: ``name`` selects the factory in
the explicit table `LOSSES`, the other fields are its keyword arguments. A new loss is a
factory added to LOSSES; the training loop never changes.
"""

import inspect
from collections.abc import Callable

import ml_collections

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
  'side',
  'weighted_bce',
]


# Explicit table: config.loss.name -> factory of a train-step loss (keyword arguments: the
# other fields of config.loss).
LOSSES: dict[str, Callable[..., LossFn]] = {
  'holistic': holistic,
  # Comparison models with side outputs (Table V): their original losses and the paper's
  # dagger variant, the exponential WCE on every map.
  'hed_balanced': side.hed_balanced,
  'rcf_robust': side.rcf_robust,
  'deepcrack_plain': side.deepcrack_plain,
  'side_exp_wce': side.side_exp_wce,
  # SegNet's original loss (Tables VII-VIII); FCN8s and DeepLab v3+ train with 'holistic',
  # weighting 'ce' (the plain cross-entropy).
  'median_frequency': frequency.median_frequency,
}


def loss_from_config(loss: ml_collections.ConfigDict) -> LossFn:
  """The train-step loss named ``loss.name``, built with the other fields of ``loss``.

  Args:
    loss: the config's ``loss`` group.

  Raises:
    ValueError: for an unknown name, a field the loss does not take, or a bad value.
  """
  name = loss.get('name')
  if name not in LOSSES:
    raise ValueError(f'config.loss.name={name!r} is not one of {sorted(LOSSES)}.')
  kwargs = {k: v for k, v in loss.items() if k != 'name'}
  factory = LOSSES[name]
  accepted = inspect.signature(factory).parameters
  unknown = sorted(set(kwargs) - set(accepted))
  if unknown:
    raise ValueError(
      f'config.loss has field(s) {unknown} that loss {name!r} does not take; '
      f'it takes {sorted(accepted)}.'
    )
  return factory(**kwargs)
