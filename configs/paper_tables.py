"""Turning a row of the paper's tables into a config. The tables themselves are data in the
library (`crackjax.paper.tables`, where the reproduction runner and report read them);
`apply_row` (Tables I-IV) and `apply_compare_row` (Tables V-VIII) set the fields a row and its
table's settings fix. `get_config(table, arg)`: the configs/base.py defaults, the row's fields
and an optional size variant (`,cpu`, `,smoke`)."""

import ml_collections

from crackjax.configs import base
from crackjax.paper import table_rules, tables


def get_config(table: int, arg: str | None):
  """The training config of row `arg` ('<key>' or '<key>,cpu' / '<key>,smoke') of `table`.

  Raises:
    ValueError: for a missing or unknown key (the message lists the keys), a reference row
      (RSF), or an unknown variant.
  """
  key, _, variant = (arg or '').partition(',')
  c = apply_row(base.get_config(), table, key.strip())
  return base.apply_variant(c, variant.strip() or None)


def _apply_settings(c: ml_collections.ConfigDict, s: tables.TableSettings) -> None:
  """The fields a table's settings fix for every row: dataset, crops, noise, augmentation,
  batch, steps per epoch and step size."""
  c.data.name = s.dataset
  c.data.input_size = s.input_size
  c.data.noise_std = s.noise_std
  c.augment.enabled = s.augment
  c.batch_size = s.batch_size
  c.steps_per_epoch = s.steps_per_epoch
  c.learning_rate = s.learning_rate


def apply_row(config: ml_collections.ConfigDict, table: int, key: str) -> ml_collections.ConfigDict:
  """Sets the fields of `config` (a configs/base.py config) that row `key` of `table` and the
  table's settings fix, in place: dataset, crops, noise, augmentation, widths, batch, steps
  per epoch, step size, the holistic loss's weighting family, beta, gamma, base, a, b, and
  the epochs.

  Raises:
    ValueError: for an unknown key (the message lists the keys) or a reference row (RSF).
  """
  rows = tables.rows_by_key(table)
  trainable = [k for k, r in rows.items() if not r.reference]
  if key not in rows:
    raise ValueError(
      f'Unknown row {key!r} of Table {table} ({tables.SETTINGS[table].dataset}); use '
      f'--config=configs/table{table}.py:<key>[,cpu|,smoke] with a key of: {trainable}.'
    )
  row = rows[key]
  if row.reference:
    raise ValueError(
      f'Row {key!r} of Table {table} ({row.name}) is a reference row, not trainable; '
      f'trainable keys: {trainable}.'
    )
  s = tables.SETTINGS[table]
  c = config
  _apply_settings(c, s)
  c.model.widths = s.widths
  c.loss.name = 'holistic'
  c.loss.weighting = row.weighting
  c.loss.beta = 1.0 if row.beta is None else row.beta
  c.loss.gamma = 1.0 if row.gamma is None else row.gamma
  c.loss.base = row.base
  c.loss.a = row.a
  c.loss.b = row.b
  c.num_epochs = row.epochs
  return c


def apply_compare_row(
  config: ml_collections.ConfigDict, table: int, key: str
) -> ml_collections.ConfigDict:
  """Sets the fields of `config` that row `key` of Table `table` (5-8) and the dataset's
  settings fix, in place: dataset, crops, noise, augmentation, batch, steps per epoch, step
  size, the epochs and, for a dagger row, `loss.beta`.

  `config` must already hold the row's model group and loss (configs/compare.py: the model's
  original loss, or its exponential WCE for a dagger row); the U-Net's widths are not set
  (they belong to the U-Net rows, which are Table I-IV rows: `unet_row`).

  Raises:
    ValueError: for an unknown key (the message lists the keys), or a dagger row whose loss
      has no beta or is not the exponential WCE.
  """
  rows = tables.rows_by_key(table)
  if key not in rows:
    raise ValueError(
      f'Unknown row {key!r} of Table {table} ({tables.dataset_of(table)}); use '
      f'--config=configs/table{table}.py:<key>[,cpu|,smoke] with a key of: {list(rows)}.'
    )
  row = rows[key]
  s = tables.SETTINGS[row.base_table]
  c = config
  _apply_settings(c, s)
  c.num_epochs = row.epochs
  if row.dagger:
    exp = table_rules.DAGGER_LOSS['weighting']  # side_exp_wce has no weighting field: exp
    if 'beta' not in c.loss or c.loss.get('weighting', exp) != exp:
      raise ValueError(
        f'Row {key!r} of Table {table} is a dagger row: config.loss must be the exponential '
        f'WCE with a beta, got {c.loss.to_dict()}.'
      )
    c.loss.beta = row.beta
  return c
