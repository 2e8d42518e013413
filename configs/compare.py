"""Comparison models of Tables V-VIII (FCN8s, HED, RCF, SegNet, DeepCrack, DeepLab v3+ so far)
on CrackForest.

  python launch.py --config=configs/compare.py:hed --workdir=workdirs/cfd_hed \\
      --config.data.manual_dir=../shared/datasets/crackforest
  python launch.py --config=configs/compare.py:hed,dagger ...   # the paper's exp-WCE variant

The argument is the model, optionally followed by `,dagger` (the paper's † rows: the
exponential WCE instead of the model's own loss) and by `,cpu` (width_scale 1/4, two epochs)
or `,smoke` (width_scale 1/16, six steps, DeepLab v3+ with one bottleneck per ResNet layer;
tests use it). Each model trains with its original loss: FCN8s a two-class softmax
cross-entropy (the sigmoid CE of its single logit, i.e. the holistic loss with q = 1), HED its
class-balanced CE on every side output and the fused map, RCF its annotator-robust balanced
CE (crackjax/losses/side.py), SegNet its median-frequency balanced CE
(crackjax/losses/frequency.py; frequencies per batch unless --config.loss.crack_frequency is
set), DeepCrack its unweighted sigmoid CE on every side output and the fused map, DeepLab v3+
the plain CE. SegNet, DeepCrack and DeepLab v3+ have BatchNorm: their running averages train,
checkpoint and evaluate with them (crackjax/state.py). The dagger variant uses β = 0.75 (the
CrackForest wce_exp setting of Table I); the per-row β of Tables V-VIII, and the other four
datasets, come with the row configs of the reproduction harness. Everything else
(data, augmentation, Adam 3e-4, batch 2, 10 epochs of 300 steps) is configs/base.py's.
"""

import ml_collections

from configs import base

# The plain (two-class softmax = sigmoid) cross-entropy: the holistic loss with q = 1, b = 0.
PLAIN_CE = {
  'name': 'holistic',
  'weighting': 'ce',
  'beta': 1.0,
  'gamma': 1.0,
  'base': 10.0,
  'a': 1.0,
  'b': 0.0,
  'jaccard_smooth': 1.0,
}
# The paper's exponential WCE on the fused map (the dagger rows of single-output models).
EXP_WCE = {
  'name': 'holistic',
  'weighting': 'exp',
  'beta': 0.75,
  'gamma': 1.0,
  'base': 10.0,
  'a': 1.0,
  'b': 0.0,
  'jaccard_smooth': 1.0,
}

# model -> (its config.model group, its original loss, its dagger loss)
MODELS = {
  'fcn8s': (
    {'name': 'fcn8s', 'n_classes': 2, 'width_scale': 1.0, 'dtype': 'float32'},
    PLAIN_CE,
    EXP_WCE,
  ),
  'hed': (
    {'name': 'hed', 'width_scale': 1.0, 'dtype': 'float32', 'conv_impl': 'auto'},
    {'name': 'hed_balanced', 'side_weight': 1.0, 'fuse_weight': 1.0},
    {'name': 'side_exp_wce', 'beta': 0.75, 'side_weight': 1.0, 'fuse_weight': 1.0},
  ),
  'rcf': (
    {'name': 'rcf', 'width_scale': 1.0, 'dtype': 'float32', 'conv_impl': 'auto'},
    {'name': 'rcf_robust', 'eta': 0.5, 'lam': 1.1, 'side_weight': 1.0, 'fuse_weight': 1.0},
    {'name': 'side_exp_wce', 'beta': 0.75, 'side_weight': 1.0, 'fuse_weight': 1.0},
  ),
  'segnet': (
    {'name': 'segnet', 'n_classes': 2, 'width_scale': 1.0, 'dtype': 'float32'},
    # None: frequencies per batch; a float (the training set's crack share) fixes them.
    {'name': 'median_frequency', 'crack_frequency': None},
    EXP_WCE,
  ),
  'deepcrack': (
    {'name': 'deepcrack', 'width_scale': 1.0, 'dtype': 'float32'},
    {'name': 'deepcrack_plain', 'side_weight': 1.0, 'fuse_weight': 1.0},
    {'name': 'side_exp_wce', 'beta': 0.75, 'side_weight': 1.0, 'fuse_weight': 1.0},
  ),
  'deeplabv3plus': (
    {
      'name': 'deeplabv3plus',
      'n_classes': 2,
      'output_stride': 16,
      'width_scale': 1.0,
      'blocks': (3, 4, 6, 3),  # ResNet-50
      'dtype': 'float32',
    },
    PLAIN_CE,
    EXP_WCE,
  ),
}

SIZES = {
  'cpu': {'width_scale': 0.25, 'overrides': {'num_epochs': 2}},
  'smoke': {
    'width_scale': 1 / 16,
    # Compile time on a CPU grows with depth: one bottleneck per ResNet layer.
    'model': {'deeplabv3plus': {'blocks': (1, 1, 1, 1)}},
    'overrides': {
      'batch_size': 2,
      'steps_per_epoch': 3,
      'num_epochs': 2,
      'log_every_steps': 1,
      'max_checkpoints_to_keep': 2,
    },
  },
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
  if not parts or parts[0] not in MODELS:
    raise ValueError(
      f'configs/compare.py needs a model argument, one of {sorted(MODELS)}, '
      f'e.g. --config=configs/compare.py:hed; got {arg!r}.'
    )
  unknown = [p for p in parts[1:] if p != 'dagger' and p not in SIZES]
  if unknown:
    raise ValueError(f'Unknown config argument(s) {unknown}; known: dagger, {sorted(SIZES)}.')
  model, loss, dagger_loss = MODELS[parts[0]]
  c = base.get_config()
  c.model = ml_collections.ConfigDict(dict(model))
  c.loss = ml_collections.ConfigDict(_fields(dagger_loss if 'dagger' in parts else loss))
  for size in (p for p in parts[1:] if p in SIZES):
    c.model.width_scale = SIZES[size]['width_scale']
    c.model.update(SIZES[size].get('model', {}).get(parts[0], {}))
    c.update(SIZES[size]['overrides'])
  return c
