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

* optionally, a class attribute ``PRETRAINED`` (`backbones.PretrainedLayout`): the ImageNet
  weight files (torchvision VGG16, VGG16-BN, ResNet-50 layouts) its backbone takes, which
  crackjax/models/pretrained.py maps by it; without one, a model takes an earlier run's weights
  only.

Adding a model: write the Module, add it to MODELS, and give configs a ``model`` group with
its name and fields. Nothing else changes.
"""

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from crackjax.models.crackseg import CrackSeg
from crackjax.models.deepcrack import DeepCrack
from crackjax.models.deeplabv3plus import DeepLabV3Plus
from crackjax.models.fcn8s import FCN8s
from crackjax.models.hed import HED
from crackjax.models.rcf import RCF
from crackjax.models.segnet import SegNet
from crackjax.models.ucliquenet import UCliqueNet
from crackjax.models.unet import UNet

# Explicit table: name -> constructor taking keyword arguments.
MODELS: dict[str, Callable[..., nn.Module]] = {
  'unet': UNet,
  # Comparison models of Tables V-VIII (crackjax/models/<name>.py).
  'fcn8s': FCN8s,
  'hed': HED,
  'rcf': RCF,
  # With BatchNorm (a 'batch_stats' collection and a `train` argument).
  'segnet': SegNet,
  'deepcrack': DeepCrack,
  'deeplabv3plus': DeepLabV3Plus,
  'crackseg': CrackSeg,
  'ucliquenet': UCliqueNet,
}

# config.model.dtype -> the dtype of activations and convolutions.
DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


def get_model(name: str, **kwargs) -> nn.Module:
  """Returns the linen Module `name` built with `kwargs`.

  Raises:
    ValueError: if `name` is not in MODELS.
  """
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; expected one of {sorted(MODELS)}.')
  return MODELS[name](**kwargs)


def model_from_config(model: ml_collections.ConfigDict) -> nn.Module:
  """The model ``model.name`` built with the other fields of ``model`` (config.model).

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
    if isinstance(value, list):  # ConfigDict may hand back lists; linen fields must hash.
      kwargs[key] = tuple(value)
  try:
    return MODELS[name](**kwargs)
  except TypeError as e:
    raise ValueError(f'config.model does not fit model {name!r}: {e}') from e


def fused_logits(outputs: Any) -> jax.Array:
  """The main logit map of a model's outputs: the array itself or ``outputs['logits']``."""
  return outputs['logits'] if isinstance(outputs, Mapping) else outputs


def input_multiple(model: nn.Module) -> int:
  """The number H and W must be multiples of for `model` (1 if it declares none)."""
  return int(getattr(model, 'input_multiple', 1))


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
