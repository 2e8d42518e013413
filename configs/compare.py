"""Comparison models of Tables V-VIII (FCN8s, HED, RCF, SegNet, DeepCrack, DeepLab v3+, CrackSeg,
U-CliqueNet) on CrackForest.

  python launch.py --config=configs/compare.py:hed --workdir=workdirs/cfd_hed \\
      --config.data.manual_dir=../shared/datasets/crackforest
  python launch.py --config=configs/compare.py:hed,dagger ...   # the paper's exp-WCE variant

The argument is the model, optionally followed by `,dagger` (the paper's † rows: the
exponential WCE instead of the model's own loss) and by `,cpu` (width_scale 1/4, two epochs)
or `,smoke` (width_scale 1/16, six steps, DeepLab v3+ and CrackSeg with one bottleneck per
ResNet layer, U-CliqueNet shallower; tests use it). Each model trains with its original loss:
FCN8s a two-class softmax cross-entropy (the sigmoid CE of its single logit, i.e. the holistic
loss with q = 1), HED its class-balanced CE on every side output and the fused map, RCF its
annotator-robust balanced CE (crackjax/losses/side.py), SegNet its median-frequency balanced CE
(crackjax/losses/frequency.py; frequencies per batch unless --config.loss.crack_frequency is
set), DeepCrack its unweighted sigmoid CE on every side output and the fused map, DeepLab v3+
the plain CE, CrackSeg the plain CE of its binary softmax classifier, U-CliqueNet the plain
two-class CE (assumed: its paper's loss could not be read; crackjax/models/ucliquenet.py).
SegNet, DeepCrack, DeepLab v3+, CrackSeg and U-CliqueNet have BatchNorm: their running averages
train, checkpoint and evaluate with them (crackjax/engine/checkpoints.py). The dagger variant
uses β = 0.75 (the CrackForest wce_exp setting of Table I); the per-row β of Tables V-VIII, and the
other four datasets, come with the row configs of the reproduction harness (`table_row_config`,
used by configs/table5.py ... table8.py). Everything else (data, augmentation, Adam 3e-4, batch 2,
10 epochs of 300 steps) is configs/base.py's. The model groups, original losses and small
variants are the models' entries in crackjax.models.MODELS (any registered model with an
original loss has a config here: `compare.py:<name>`); the dagger losses are DAGGER_LOSSES.

Initial weights (`config.model_init`, docs/pretrained.md): every parameter starts from scratch
unless --config.model_init.pretrained=<file.npz> names a local file of ImageNet weights
(torchvision's VGG16 / VGG16-BN / ResNet-50 state_dict names, or crackjax's own parameter
paths), which crackjax/models/pretrained.py loads into the VGG16 and ResNet-50 layers of FCN8s, HED,
RCF, SegNet, DeepCrack, DeepLab v3+ and CrackSeg; the run logs which and writes init.json.
"""

import ml_collections

from crackjax import models
from crackjax.configs import base, paper_tables
from crackjax.paper import table_rules, tables

# The paper's exponential WCE on the fused map (the dagger rows of single-output models).
EXP_WCE = {'name': 'holistic', **table_rules.DAGGER_LOSS, 'jaccard_smooth': 1.0}
# The same on every side output and the fused map (HED, RCF, DeepCrack; side_exp_wce's gamma,
# base, a and b default to the dagger loss's).
SIDE_EXP_WCE = {
  'name': 'side_exp_wce',
  'beta': table_rules.DAGGER_LOSS['beta'],
  'side_weight': 1.0,
  'fuse_weight': 1.0,
}

# model -> its dagger loss. The model group and the original loss are the model's entry in
# crackjax.models.MODELS.
DAGGER_LOSSES = {
  'fcn8s': EXP_WCE,
  'hed': SIDE_EXP_WCE,
  'rcf': SIDE_EXP_WCE,
  'segnet': EXP_WCE,
  'deepcrack': SIDE_EXP_WCE,
  'deeplabv3plus': EXP_WCE,
  'crackseg': EXP_WCE,
  'ucliquenet': EXP_WCE,
}


def _fields(group: dict) -> dict:
  """A copy of `group` whose None values are optional floats (a fresh FieldReference each
  time, so --config.loss.crack_frequency=0.011 can set one and no two configs share it)."""
  return {
    k: ml_collections.FieldReference(None, field_type=float) if v is None else v
    for k, v in group.items()
  }


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  parts = [p for p in (arg or '').split(',') if p]
  if not parts or parts[0] not in models.MODELS:
    raise ValueError(
      f'configs/compare.py needs a model argument, one of {sorted(models.MODELS)}, '
      f'e.g. --config=configs/compare.py:hed; got {arg!r}.'
    )
  name = parts[0]
  sizes = base.variants_for(name)
  unknown = [p for p in parts[1:] if p != 'dagger' and p not in sizes]
  if unknown:
    raise ValueError(f'Unknown config argument(s) {unknown}; known: dagger, {sizes}.')
  if 'dagger' in parts and name not in DAGGER_LOSSES:
    raise ValueError(
      f'Model {name!r} has no dagger variant; the models with one: {sorted(DAGGER_LOSSES)}.'
    )
  c = base.get_config()
  c.model = ml_collections.ConfigDict(models.model_group(name))
  loss = DAGGER_LOSSES[name] if 'dagger' in parts else models.MODELS[name].original_loss
  c.loss = ml_collections.ConfigDict(_fields(loss))
  for size in (p for p in parts[1:] if p in sizes):
    base.apply_variant(c, size)
  return c


# ------------------------------------------------------------------ rows of Tables V-VIII
# configs/table5.py ... table8.py: `table_row_config(table, '<key>[,cpu|,smoke]')`.


def table_row_config(table: int, arg: str | None) -> ml_collections.ConfigDict:
  """The training config of row `arg` ('<key>' or '<key>,cpu' / '<key>,smoke') of Table
  `table` (5-8).

  A U-Net row is its Table I-IV row (`crackjax.paper.table_rules.UNET_ROWS`: U-Net's "original
  loss" in Tables V-VIII is Xie's WCE; every variant of configs/base.py applies). Another model is
  `get_config('<model>[,dagger]')` (its entry in crackjax.models.MODELS: the model group and
  its original loss, or its exponential WCE for a dagger row: DAGGER_LOSSES) with the row's
  beta, the dataset's settings and the row's epochs (`configs.paper_tables.apply_compare_row`),
  then the variant (configs/base.py VARIANTS).

  Raises:
    ValueError: for a missing or unknown key (the message lists the keys) or variant.
  """
  key, _, variant = (arg or '').partition(',')
  key, variant = key.strip(), variant.strip()
  rows = tables.rows_by_key(table)
  if key not in rows:
    raise ValueError(
      f'Unknown row {key!r} of Table {table} ({tables.dataset_of(table)}); use '
      f'--config=configs/table{table}.py:<key>[,cpu|,smoke] with a key of: {list(rows)}.'
    )
  row = rows[key]
  if row.model == 'unet':
    return paper_tables.get_config(row.base_table, f'{row.unet_row},{variant}')
  if variant and variant not in base.variants_for(row.model):
    raise ValueError(
      f'Unknown config argument {variant!r} for the {row.model} row {key!r}; known: '
      f'{base.variants_for(row.model)}.'
    )
  c = get_config(row.model + (',dagger' if row.dagger else ''))
  paper_tables.apply_compare_row(c, table, key)
  if variant:
    base.apply_variant(c, variant)
  return c
