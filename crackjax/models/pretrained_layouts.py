"""The layouts of pretrained-weights files (`crackjax.models.pretrained`): which names a file
of each layout has (`LAYOUTS`, `detect_layout`), where each of its arrays goes in a model
(`mapping`: torchvision's VGG16, VGG16-BN and ResNet-50 names onto the comparison models'
variables, or crackjax's own paths), the shape it must have there (`source_shapes`) and how its
values become the variable's (`convert`; `fold_into_first_conv`: the input normalisation a
torchvision or Caffe file expects, folded into the first convolution).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from absl import logging

from crackjax.models import MODELS
from crackjax.models.backbones import PretrainedLayout
from crackjax.models.fcn8s import IMAGENET_MEAN_RGB as CAFFE_MEAN_RGB
from crackjax.runs import docs

LAYOUTS = ('vgg16', 'vgg16_bn', 'resnet50', 'crackjax')


# VGG16's thirteen convolutions and their index in torchvision's `features`.
VGG16_CONVS = tuple(
  f'conv{stage}_{i}' for stage, n in enumerate((2, 2, 3, 3, 3), start=1) for i in range(1, n + 1)
)


VGG16_FEATURES = (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28)


VGG16_BN_FEATURES = (0, 3, 7, 10, 14, 17, 20, 24, 27, 30, 34, 37, 40)  # BatchNorm at i + 1


RESNET50_BLOCKS = (3, 4, 6, 3)


def layout_of(model: str) -> PretrainedLayout | None:
  """What ImageNet files `model` (a key of MODELS) takes, as its entry declares it
  (``ModelEntry.pretrained``); None: crackjax-layout files only (any model takes those)."""
  entry = MODELS.get(model)
  return entry.pretrained if entry is not None else None


class PretrainedError(ValueError):
  """A pretrained-weights file that cannot be loaded into the model; the message says why."""


@dataclasses.dataclass
class Mapped:
  """One array of a file and where it goes.

  Attributes:
    key: the file's name for it.
    path: the crackjax variable, e.g. 'params/conv1_1/kernel'.
    kind: 'conv' (OIHW -> HWIO), 'fc' (fc6/fc7: [O, kh*kw*I] -> HWIO) or 'copy'.
  """

  key: str
  path: str
  kind: str


def key_name(entry: Any) -> str:
  for attr in ('key', 'name', 'idx'):
    if hasattr(entry, attr):
      return str(getattr(entry, attr))
  return str(entry)


def flat_variables(variables: Mapping[str, Any]) -> dict[str, Any]:
  """{'params/conv1_1/kernel': leaf, ...} of a model's variables (arrays or shape structs)."""
  return {
    '/'.join(key_name(k) for k in path): leaf
    for path, leaf in jax.tree_util.tree_leaves_with_path(dict(variables))
  }


def _vgg16_mapping(model: str, layout: str) -> list[Mapped]:
  declared = layout_of(model)
  bn_model = declared.conv_bn
  indices = VGG16_FEATURES if layout == 'vgg16' else VGG16_BN_FEATURES
  out = []
  for name, i in zip(VGG16_CONVS, indices, strict=True):
    conv = f'{name}/conv' if bn_model else name
    out += [
      Mapped(f'features.{i}.weight', f'params/{conv}/kernel', 'conv'),
      Mapped(f'features.{i}.bias', f'params/{conv}/bias', 'copy'),
    ]
    if layout == 'vgg16_bn':
      out += _bn_mapping(f'features.{i + 1}', f'{name}/bn')
  if declared.fully_connected:
    for key, name in (('classifier.0', 'fc6'), ('classifier.3', 'fc7')):
      out += [
        Mapped(f'{key}.weight', f'params/{name}/kernel', 'fc'),
        Mapped(f'{key}.bias', f'params/{name}/bias', 'copy'),
      ]
  return out


def _bn_mapping(key: str, path: str) -> list[Mapped]:
  return [
    Mapped(f'{key}.weight', f'params/{path}/scale', 'copy'),
    Mapped(f'{key}.bias', f'params/{path}/bias', 'copy'),
    Mapped(f'{key}.running_mean', f'batch_stats/{path}/mean', 'copy'),
    Mapped(f'{key}.running_var', f'batch_stats/{path}/var', 'copy'),
  ]


def _resnet50_mapping() -> list[Mapped]:
  out = [
    Mapped('conv1.weight', 'params/conv1/conv/kernel', 'conv'),
    *_bn_mapping('bn1', 'conv1/bn'),
  ]
  for layer, blocks in enumerate(RESNET50_BLOCKS, start=1):
    for block in range(blocks):
      torch, flax = f'layer{layer}.{block}', f'layer{layer}_{block}'
      for j in (1, 2, 3):
        out.append(Mapped(f'{torch}.conv{j}.weight', f'params/{flax}/conv{j}/conv/kernel', 'conv'))
        out += _bn_mapping(f'{torch}.bn{j}', f'{flax}/conv{j}/bn')
      if block == 0:
        out.append(
          Mapped(f'{torch}.downsample.0.weight', f'params/{flax}/downsample/conv/kernel', 'conv')
        )
        out += _bn_mapping(f'{torch}.downsample.1', f'{flax}/downsample/bn')
  return out


def mapping(model: str, layout: str, targets: Mapping[str, Any] | None = None) -> list[Mapped]:
  """Where each array of a `layout` file goes in `model`.

  Args:
    model: config.model.name.
    layout: one of LAYOUTS.
    targets: the model's flat variables (`flat_variables`); entries whose crackjax variable
      the model lacks are left out (for the crackjax layout: one entry per variable).

  Raises:
    PretrainedError: the model does not take that layout.
  """
  if layout == 'crackjax':
    return [Mapped(path, path, 'copy') for path in targets or {}]
  declared = layout_of(model)
  if declared is None or layout not in declared.layouts:
    takes = declared.layouts if declared else None
    what = (
      f'takes {" or ".join(takes)} (or crackjax) files'
      if takes
      else 'has no ImageNet backbone; it takes crackjax-layout files only'
    )
    raise PretrainedError(f'Model {model!r} cannot load a {layout} file: it {what}.')
  entries = _resnet50_mapping() if layout == 'resnet50' else _vgg16_mapping(model, layout)
  if targets is not None:
    entries = [e for e in entries if e.path in targets]
  return entries


def detect_layout(keys: Sequence[str]) -> str:
  """The layout of a file with these names (`LAYOUTS`).

  Raises:
    PretrainedError: no layout fits (the message shows some of the names).
  """
  keys = set(keys)
  if any('/' in k for k in keys):
    return 'crackjax'
  if 'layer1.0.conv1.weight' in keys and 'conv1.weight' in keys:
    return 'resnet50'
  if 'features.0.weight' in keys:
    return 'vgg16_bn' if 'features.1.running_mean' in keys else 'vgg16'
  raise PretrainedError(
    f'Unrecognised names {sorted(keys)[:6]}: expected torchvision VGG16 / VGG16-BN '
    "('features.0.weight', ...), ResNet-50 ('conv1.weight', 'layer1.0.conv1.weight', ...) or "
    f"crackjax paths ('params/conv1_1/kernel', ...); see {docs.doc('pretrained.md')}."
  )


def source_shape(entry: Mapped, target_shape: Sequence[int]) -> tuple[int, ...]:
  """The shape the file's array must have to fill a crackjax variable of `target_shape`."""
  if entry.kind == 'conv':
    kh, kw, cin, cout = target_shape
    return (cout, cin, kh, kw)
  if entry.kind == 'fc':
    kh, kw, cin, cout = target_shape
    return (cout, kh * kw * cin)
  return tuple(target_shape)


def source_shapes(model: str, layout: str, variables: Mapping[str, Any]) -> dict[str, tuple]:
  """{file name: shape} of everything a `layout` file can hold for this model (its variables,
  or their shapes from `jax.eval_shape(model.init, ...)`)."""
  targets = flat_variables(variables)
  return {e.key: source_shape(e, targets[e.path].shape) for e in mapping(model, layout, targets)}


# ------------------------------------------------------------- values: a file's as crackjax's

# torchvision's ImageNet input normalisation, RGB, on [0, 1].
TORCHVISION_MEAN = (0.485, 0.456, 0.406)
TORCHVISION_STD = (0.229, 0.224, 0.225)


def convert(entry: Mapped, array: np.ndarray, target_shape: Sequence[int]) -> np.ndarray:
  """A file's array as the crackjax variable of `entry` holds it: convolutions from PyTorch's
  OIHW to flax's HWIO, fc6 [4096, 25088] reshaped to 7x7x512 first; others as they are."""
  if entry.kind == 'conv':
    return np.transpose(array, (2, 3, 1, 0))
  if entry.kind == 'fc':
    kh, kw, cin, cout = target_shape
    return np.transpose(array.reshape(cout, cin, kh, kw), (2, 3, 1, 0))
  return array


def _fold(
  weight: np.ndarray, normalization: str, offset: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
  """(kernel for the model's input, constant it lacks per output channel) of a first
  convolution [O, I, kh, kw] expecting `normalization`'s input (`crackjax.models.pretrained`,
  "Input normalisation")."""
  weight = weight.astype(np.float64)
  if normalization == 'caffe':
    weight = weight[:, ::-1]  # BGR -> RGB input channels
    mean, std = np.asarray(CAFFE_MEAN_RGB), np.full(3, 1 / 255)
  else:
    mean, std = np.asarray(TORCHVISION_MEAN), np.asarray(TORCHVISION_STD)
  if weight.shape[1] != 3:
    raise PretrainedError(f'The first convolution has {weight.shape[1]} input channels, not 3.')
  folded = weight / std[None, :, None, None]
  shift = np.einsum('oihw,i->o', weight, (np.asarray(offset) - mean) / std)
  return folded, shift


def first_conv(model: str, layout: str) -> tuple[str, str]:
  """(kernel, running mean of the BatchNorm after it) of a backbone's first convolution."""
  if layout == 'resnet50':
    return 'params/conv1/conv/kernel', 'batch_stats/conv1/bn/mean'
  name = 'conv1_1/conv' if layout_of(model).conv_bn else 'conv1_1'
  return f'params/{name}/kernel', 'batch_stats/conv1_1/bn/mean'


def fold_into_first_conv(
  updates: dict[str, np.ndarray], model: str, layout: str, normalization: str
) -> None:
  """Folds the input normalisation into the first convolution's kernel (in HWIO already) and
  its bias, or the running mean of the BatchNorm after it (`crackjax.models.pretrained`,
  "Input normalisation")."""
  kernel, mean = first_conv(model, layout)
  if kernel not in updates:
    return
  offset = layout_of(model).input_offset
  folded, shift = _fold(np.transpose(updates[kernel], (3, 2, 0, 1)), normalization, offset)
  updates[kernel] = np.transpose(folded, (2, 3, 1, 0))
  bias = kernel.rsplit('/', 1)[0] + '/bias'
  if bias in updates:
    updates[bias] = updates[bias] + shift
  elif mean in updates:
    updates[mean] = updates[mean] - shift
  else:
    logging.warning(
      'The input normalisation was folded into %s, but its constant term (%s) has no bias or '
      'running mean to go to.',
      kernel,
      np.array2string(shift, precision=3, threshold=4),
    )
