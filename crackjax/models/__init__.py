"""Segmentation models, looked up by name in the explicit table `MODELS`.

The model contract (what the train step, the losses, evaluation and prediction rely on):

* a linen Module mapping images [B, H, W, 3] (float, in [0, 1]) to crack logits
  [B, H, W, 1] (float32), or to a dict ``{'logits': [B, H, W, 1], ...}`` when it has side
  outputs (HED, RCF, DeepCrack); ``'logits'`` is then the fused map that evaluation and
  prediction use, and the model's own loss can read the rest
  (`fused_logits`);
* an optional attribute or property ``input_multiple``: H and W must be multiples of it
  (the U-Net's 16 for four 2x2 poolings). Evaluation and prediction pad images to it;
  `input_multiple(model)` reads it, 1 if absent;
* constructed from the config's ``model`` group: ``name`` picks the entry of MODELS, every
  other field is a constructor keyword argument (``dtype`` given as a string, e.g.
  'bfloat16', is turned into the jnp dtype);
* state besides the parameters: a model with BatchNorm (SegNet, DeepCrack, DeepLab v3+, CrackSeg,
  U-CliqueNet) has a ``'batch_stats'`` collection and takes ``train: bool = False`` as flax's
  convention is: batch statistics (updated with ``mutable=['batch_stats']``) when training, the
  running averages otherwise. Models without state take no ``train`` argument. `apply_model` applies
  either kind from its parameters and batch statistics (None or empty: none), which is how the train
  step, evaluation, prediction and export call every model.

Every model is an entry of the explicit table `MODELS` (name -> `ModelEntry`), which declares
what the model needs besides its Module: its ``config.model`` group at the paper's setting,
its original loss (a ``config.loss`` group), the overrides of its small variants (``,cpu``,
``,smoke``: configs/base.py VARIANTS) and the ImageNet weight files its backbone takes
(`backbones.PretrainedLayout`, mapped by crackjax/models/pretrained.py). configs/compare.py
builds a model's configs from its entry; tests/test_contracts.py checks every entry.

Adding a model: write the Module and add a `ModelEntry` to MODELS. From outside crackjax (a
plugin), call `register_model` in an importable module and name that module in the config's
``plugins`` (crackjax/plugins.py), so that prediction and export, which rebuild the
model from a run's config.json, find it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax import plugins
from crackjax.models.backbones import PretrainedLayout
from crackjax.models.crackseg import CrackSeg
from crackjax.models.deepcrack import DeepCrack
from crackjax.models.deeplabv3plus import DeepLabV3Plus
from crackjax.models.fcn8s import IMAGENET_MEAN_RGB, FCN8s
from crackjax.models.hed import HED
from crackjax.models.rcf import RCF
from crackjax.models.segnet import SegNet
from crackjax.models.ucliquenet import UCliqueNet
from crackjax.models.unet import UNet


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelEntry:
  """A model and what it needs, as MODELS declares it.

  The mappings are read, never changed: configs copy them.

  Attributes:
    build: the Module class (or any callable) taking the fields of ``config.model`` other
      than ``name`` as keyword arguments.
    config: its ``config.model`` group at the paper's setting, without ``name``
      (`model_group` adds it).
    original_loss: the loss its own paper trains it with, a ``config.loss`` group (``name``
      and the fields; a None value is a float left unset, e.g. SegNet's crack frequency).
    small: config argument (a key of configs/base.py VARIANTS: 'cpu', 'cpu_scale', 'smoke')
      -> the ``config.model`` fields that variant overrides; a variant the model lacks does
      not apply to it.
    pretrained: the ImageNet weight files its backbone takes (crackjax/models/pretrained.py);
      None: an earlier run's crackjax-layout file only.
    module: the module that registered it (`register_model` records it); None for the
      entries crackjax ships.
  """

  build: Callable[..., nn.Module]
  config: Mapping[str, Any]
  original_loss: Mapping[str, Any]
  small: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  pretrained: PretrainedLayout | None = None
  module: str | None = None


# The plain (two-class softmax = sigmoid) cross-entropy: the holistic loss with q = 1, b = 0;
# the original loss of FCN8s, DeepLab v3+, CrackSeg and U-CliqueNet.
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
# Xie's weighted cross-entropy: the U-Net's loss in Tables V-VIII (and configs/base.py's).
XIE_WCE = {**PLAIN_CE, 'weighting': 'xie'}

# The small variants of the comparison models: a quarter of every width for a 2-core CPU, a
# sixteenth for seconds-long tests (`small` of the entries below, on top of which a deep
# model also drops layers: compile time on a CPU grows with depth).
CPU = {'width_scale': 0.25}
SMOKE = {'width_scale': 1 / 16}

# Explicit table: config.model.name -> the model and what it needs.
MODELS: dict[str, ModelEntry] = {
  # The paper's revised U-Net.
  'unet': ModelEntry(
    build=UNet,
    config={
      'widths': (64, 128, 256, 512, 1024),
      'conv_impl': 'auto',
      'dtype': 'float32',
      'input_norm': 'none',
    },
    original_loss=XIE_WCE,
    small={
      # A 2-core CPU: widths 16...256 (1.94M parameters).
      'cpu': {'widths': (16, 32, 64, 128, 256)},
      # The CPU-scale reproduction (docs/reproduction.md): widths 8...128 (0.49M parameters).
      'cpu_scale': {'widths': (8, 16, 32, 64, 128)},
      'smoke': {'widths': (4, 8, 16, 32, 64)},
    },
  ),
  # Comparison models of Tables V-VIII (crackjax/models/<name>.py), each with its own loss.
  'fcn8s': ModelEntry(
    build=FCN8s,
    config={'n_classes': 2, 'width_scale': 1.0, 'dtype': 'float32'},
    original_loss=PLAIN_CE,  # a two-class softmax cross-entropy
    small={'cpu': CPU, 'smoke': SMOKE},
    pretrained=PretrainedLayout(('vgg16',), fully_connected=True, input_offset=IMAGENET_MEAN_RGB),
  ),
  'hed': ModelEntry(
    build=HED,
    config={'width_scale': 1.0, 'dtype': 'float32', 'conv_impl': 'auto'},
    original_loss={'name': 'hed_balanced', 'side_weight': 1.0, 'fuse_weight': 1.0},
    small={'cpu': CPU, 'smoke': SMOKE},
    pretrained=PretrainedLayout(('vgg16',)),
  ),
  'rcf': ModelEntry(
    build=RCF,
    config={'width_scale': 1.0, 'dtype': 'float32', 'conv_impl': 'auto'},
    original_loss={
      'name': 'rcf_robust',
      'eta': 0.5,
      'lam': 1.1,
      'side_weight': 1.0,
      'fuse_weight': 1.0,
    },
    small={'cpu': CPU, 'smoke': SMOKE},
    pretrained=PretrainedLayout(('vgg16',)),
  ),
  # With BatchNorm (a 'batch_stats' collection and a `train` argument).
  'segnet': ModelEntry(
    build=SegNet,
    config={'n_classes': 2, 'width_scale': 1.0, 'dtype': 'float32'},
    # None: frequencies per batch; a float (the training set's crack share) fixes them.
    original_loss={'name': 'median_frequency', 'crack_frequency': None},
    small={'cpu': CPU, 'smoke': SMOKE},
    pretrained=PretrainedLayout(('vgg16', 'vgg16_bn'), conv_bn=True),
  ),
  'deepcrack': ModelEntry(
    build=DeepCrack,
    config={'width_scale': 1.0, 'dtype': 'float32'},
    original_loss={'name': 'deepcrack_plain', 'side_weight': 1.0, 'fuse_weight': 1.0},
    small={'cpu': CPU, 'smoke': SMOKE},
    pretrained=PretrainedLayout(('vgg16', 'vgg16_bn'), conv_bn=True),
  ),
  'deeplabv3plus': ModelEntry(
    build=DeepLabV3Plus,
    config={
      'n_classes': 2,
      'output_stride': 16,
      'width_scale': 1.0,
      'blocks': (3, 4, 6, 3),  # ResNet-50
      'dtype': 'float32',
    },
    original_loss=PLAIN_CE,
    # One bottleneck per ResNet layer.
    small={'cpu': CPU, 'smoke': {**SMOKE, 'blocks': (1, 1, 1, 1)}},
    pretrained=PretrainedLayout(('resnet50',)),
  ),
  'crackseg': ModelEntry(
    build=CrackSeg,
    config={
      'n_classes': 2,
      'output_stride': 16,
      'rates': (1, 2, 4, 6, 12, 18),
      'image_pooling': False,
      'width_scale': 1.0,
      'blocks': (3, 4, 6, 3),  # ResNet-50
      'dtype': 'float32',
    },
    original_loss=PLAIN_CE,  # of its binary softmax classifier
    # One bottleneck per ResNet layer, two of the dilated branches.
    small={'cpu': CPU, 'smoke': {**SMOKE, 'blocks': (1, 1, 1, 1), 'rates': (1, 6)}},
    pretrained=PretrainedLayout(('resnet50',)),
  ),
  'ucliquenet': ModelEntry(
    build=UCliqueNet,
    config={
      'n_classes': 2,
      'growth': 24,
      'stem_features': 64,
      'layers': 4,
      'levels': 3,
      'width_scale': 1.0,
      'dtype': 'float32',
    },
    # Assumed: its paper's loss could not be read (crackjax/models/ucliquenet.py).
    original_loss=PLAIN_CE,
    # One level of two-layer clique blocks.
    small={'cpu': CPU, 'smoke': {**SMOKE, 'levels': 1, 'layers': 2}},
  ),
}


def register_model(name: str, entry: ModelEntry, *, module: str | None = None) -> ModelEntry:
  """Adds a plugin's model to MODELS and returns its entry as registered.

  Call it at the top level of an importable module and name that module in the config's
  ``plugins`` (crackjax/plugins.py).

  Args:
    name: its ``config.model.name``.
    entry: the model and what it needs.
    module: the module that registers it; default: the caller's (recorded so that config
      validation can check that config.plugins names it).

  Raises:
    ValueError: if `name` is taken by crackjax or by another module (importing the same
      module again re-registers its own entry).
  """
  module = module or plugins.registering_module()
  return plugins.register(MODELS, 'Model', name, entry, module)


def model_group(name: str) -> dict[str, Any]:
  """The ``config.model`` group of model `name` at the paper's setting: its name, then the
  fields its entry declares.

  Raises:
    ValueError: if `name` is not in MODELS.
  """
  return {'name': name, **_entry(name).config}


def _entry(name: str) -> ModelEntry:
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; expected one of {sorted(MODELS)}.')
  return MODELS[name]


# config.model.dtype -> the dtype of activations and convolutions.
DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


def get_model(name: str, **kwargs) -> nn.Module:
  """Returns the linen Module `name` built with `kwargs`.

  Raises:
    ValueError: if `name` is not in MODELS.
  """
  return _entry(name).build(**kwargs)


def model_from_config(model: Mapping[str, Any]) -> nn.Module:
  """The model ``model['name']`` built with the other fields of ``model``: the config's
  ``model`` group as plain data (``config.model.to_dict()``, or the ``model`` of a recorded
  config.json or of a model file).

  Raises:
    ValueError: for an unknown model name or dtype, or a field the model does not take
      (the message names the config field).
  """
  name = model.get('name')
  if name not in MODELS:
    raise ValueError(f'config.model.name={name!r} is not one of {sorted(MODELS)}.')
  kwargs = {k: v for k, v in model.items() if k != 'name'}
  if 'dtype' in kwargs:
    if kwargs['dtype'] not in DTYPES:
      raise ValueError(f'config.model.dtype={kwargs["dtype"]!r} is not one of {sorted(DTYPES)}.')
    kwargs['dtype'] = DTYPES[kwargs['dtype']]
  for key, value in kwargs.items():
    if isinstance(value, list):  # JSON and ConfigDict give lists; linen fields must hash.
      kwargs[key] = tuple(value)
  try:
    return MODELS[name].build(**kwargs)
  except TypeError as e:
    raise ValueError(f'config.model does not fit model {name!r}: {e}') from e


def fused_logits(outputs: Any) -> jax.Array:
  """The main logit map of a model's outputs: the array itself or ``outputs['logits']``."""
  return outputs['logits'] if isinstance(outputs, Mapping) else outputs


def input_multiple(model: nn.Module) -> int:
  """The number H and W must be multiples of for `model` (1 if it declares none)."""
  return int(getattr(model, 'input_multiple', 1))


def init_image_shape(
  model: nn.Module, input_size: Sequence[int] | None = None
) -> tuple[int, int, int]:
  """The (H, W, 3) `model`'s variables are built on from a config alone (never from data):
  ``data.input_size`` if set, else a square of about 256 pixels that `model` takes. The
  models are fully convolutional, so their parameters do not depend on it."""
  if input_size:
    return (int(input_size[0]), int(input_size[1]), 3)
  multiple = input_multiple(model)
  side = multiple * -(-256 // multiple)
  return (side, side, 3)


def model_variables(params: Any, batch_stats: Any = None) -> dict[str, Any]:
  """The variables to apply a model with: ``{'params': ...}``, plus ``'batch_stats'`` when
  `batch_stats` is given and not empty."""
  if batch_stats:
    return {'params': params, 'batch_stats': batch_stats}
  return {'params': params}


def apply_model(
  apply_fn: Callable[..., Any],
  params: Any,
  images: jax.Array,
  *,
  batch_stats: Any = None,
  train: bool = False,
) -> tuple[Any, Any]:
  """Applies a model (its `apply`) to images, with or without BatchNorm state.

  A model without batch statistics (`batch_stats` None or empty) is called as
  ``apply_fn({'params': params}, images)``, exactly as before BatchNorm models existed. A
  model with them is called with ``train=train``: in training mode BatchNorm normalises with
  the statistics of `images` (the global batch in the train step) and the updated running
  averages are returned; otherwise it uses `batch_stats` and they come back unchanged.

  Args:
    apply_fn: the Module's `apply`.
    params: its parameters.
    images: [B, H, W, 3].
    batch_stats: the model's 'batch_stats' collection, or None / {} if it has none.
    train: training mode (batch statistics, updated running averages).

  Returns:
    (the model's outputs, the new batch statistics: `batch_stats` itself unless training).
  """
  if not batch_stats:
    return apply_fn({'params': params}, images), batch_stats
  variables = model_variables(params, batch_stats)
  if not train:
    return apply_fn(variables, images, train=False), batch_stats
  outputs, updates = apply_fn(variables, images, train=True, mutable=['batch_stats'])
  return outputs, updates['batch_stats']
