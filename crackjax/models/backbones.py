"""The backbones of the comparison models: VGG16's stages (`VGG16_STAGES`: FCN8s, HED, RCF;
`vgg16_bn_encoder`: SegNet, DeepCrack) and ResNet-50 (below).

ResNet-50's backbone (He et al. 2016) as DeepLab v3+ (deeplabv3plus.py) and CrackSeg
(crackseg.py) use it: torchvision's layout without the fully connected layer, bottlenecks with
the stride on the 3x3 convolution, every convolution without bias and followed by BatchNorm.

Output stride 16: layer4 keeps stride 1 and dilates its 3x3 convolutions, with DeepLab v3's
multi-grid (1, 2, 4) times 2, i.e. rates 2, 4, 8; output stride 8: layer3 dilated by 2 and
layer4 by 4 x (1, 2, 4).

`resnet50_features` builds the stem and the four layers inside the calling compact module, so
their parameters are the caller's own ``conv1`` and ``layer{l}_{b}`` (torchvision's
``conv1``/``bn1`` and ``layer{l}.{b}``), the names crackjax/models/pretrained.py maps ImageNet
weights onto; both models therefore load the same weights.
"""

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.batchnorm import ConvBN, max_pool_with_indices
from crackjax.models.layers import WidthScaled, scaled_width

# VGG16's convolution stages: (channels, number of 3x3 convolutions).
VGG16_STAGES: tuple[tuple[int, int], ...] = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


class VGG16Body(WidthScaled):
  """Base class of the models on VGG16's five stages whose widths `width_scale` multiplies
  (HED, RCF, SegNet, DeepCrack): their `widths`. It declares no fields (`WidthScaled`)."""

  @property
  def widths(self) -> Sequence[int]:
    """The five stages' channels after `width_scale`."""
    return tuple(self._width(w) for w, _ in VGG16_STAGES)


def vgg16_bn_encoder(
  x: jax.Array, widths: Sequence[int], train: bool, dtype: jnp.dtype
) -> tuple[jax.Array, list[jax.Array], list[jax.Array]]:
  """VGG16-BN's five stages with index-keeping pools, inside the calling compact module.

  Returns:
    (the output of pool5, the last convolution's output of each stage (before its pool),
    each pool's indices).
  """
  features, indices = [], []
  for stage, ((_, depth), width) in enumerate(zip(VGG16_STAGES, widths, strict=True), start=1):
    for i in range(1, depth + 1):
      x = ConvBN(width, dtype=dtype, name=f'conv{stage}_{i}')(x, train)
    features.append(x)
    x, index = max_pool_with_indices(x)
    indices.append(index)
  return x, features, indices


@dataclasses.dataclass(frozen=True)
class PretrainedLayout:
  """What ImageNet weight files a model takes, declared by its entry in
  `crackjax.models.MODELS` (``ModelEntry.pretrained``; crackjax/models/pretrained.py maps the
  files' arrays by it). A model without one takes crackjax-layout files (an earlier run's) only.

  Attributes:
    layouts: the torchvision layouts it takes: 'vgg16', 'vgg16_bn', 'resnet50'.
    conv_bn: its VGG16 convolutions are ConvBN modules ('<name>/conv', '<name>/bn').
    fully_connected: fc6 / fc7 load torchvision's classifier.0 / classifier.3 (FCN8s).
    input_offset: what the model subtracts from the [0, 1] image before its first
      convolution (folded into it with the file's normalisation).
  """

  layouts: tuple[str, ...]
  conv_bn: bool = False
  fully_connected: bool = False
  input_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)


# ResNet-50's four layers: (bottleneck width, number of blocks); output channels 4 x width.
RESNET50_LAYERS: tuple[tuple[int, int], ...] = ((64, 3), (128, 4), (256, 6), (512, 3))
EXPANSION = 4
STEM_WIDTH = 64
MULTI_GRID = (1, 2, 4)
# output stride -> (strides of layer1..4, dilations of layer1..4)
OUTPUT_STRIDES: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {
  16: ((1, 2, 2, 1), (1, 1, 1, 2)),
  8: ((1, 2, 1, 1), (1, 1, 2, 4)),
}


def check_resnet_fields(name: str, model) -> None:
  """Checks the fields a ResNet-50 segmenter shares besides those of its base class
  (`layers.CrackLogitModel`: n_classes, width_scale): output_stride and blocks, with messages
  that name the model."""
  if model.output_stride not in OUTPUT_STRIDES:
    raise ValueError(
      f'{name} output_stride must be one of {sorted(OUTPUT_STRIDES)}; got {model.output_stride}.'
    )
  if len(model.blocks) != len(RESNET50_LAYERS) or not all(
    isinstance(n, int) and n >= 1 for n in model.blocks
  ):
    raise ValueError(
      f'{name} blocks must be four positive integers (ResNet-50: (3, 4, 6, 3)); got {model.blocks}.'
    )


def resnet50_widths(width_scale: float) -> tuple[int, ...]:
  """The bottleneck widths of ResNet-50's four layers after `width_scale`."""
  return tuple(scaled_width(w, width_scale) for w, _ in RESNET50_LAYERS)


class Bottleneck(nn.Module):
  """ResNet's bottleneck: 1x1 -> 3x3 (stride, dilation) -> 1x1 (x4), BN after each, a
  projection shortcut (1x1 + BN) where the shape changes, ReLU after the sum.

  Attributes:
    width: channels of the first two convolutions; the block outputs 4 x width.
    strides: stride of the 3x3 convolution and the shortcut.
    dilation: dilation of the 3x3 convolution.
    projection: whether the shortcut is a 1x1 convolution + BN.
    dtype: computation dtype.
  """

  width: int
  strides: int = 1
  dilation: int = 1
  projection: bool = False
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    conv = dict(use_bias=False, dtype=self.dtype)
    y = ConvBN(self.width, 1, name='conv1', **conv)(x, train)
    y = ConvBN(self.width, 3, self.strides, self.dilation, name='conv2', **conv)(y, train)
    y = ConvBN(EXPANSION * self.width, 1, relu=False, name='conv3', **conv)(y, train)
    if self.projection:
      x = ConvBN(EXPANSION * self.width, 1, self.strides, relu=False, name='downsample', **conv)(
        x, train
      )
    return nn.relu(y + x)


def resnet50_features(model: nn.Module, x: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
  """ResNet-50's stem and four layers, inside the calling compact module `model`.

  The submodules are the caller's: ``conv1`` (the stem's 7x7 convolution + BN) and
  ``layer{l}_{b}`` (bottleneck b of layer l), so the parameter names do not depend on which
  model calls this.

  Args:
    model: the calling module, with the fields `check_resnet_fields` checks: `blocks`, the
      bottleneck blocks of the four layers ((3, 4, 6, 3) is ResNet-50; the last layer's blocks
      take the multi-grid rates in turn); `width_scale`, multiplying every width (the stem's 64
      and the layers' 64 ... 512; rounded, at least 1); `output_stride`, 16 or 8
      (`OUTPUT_STRIDES`: layer4's, and at 8 layer3's, stride traded for dilation); and `dtype`,
      the computation dtype.
    x: images [B, H, W, 3].
    train: BatchNorm uses (and updates) batch statistics; else its running averages.

  Returns:
    (layer4's output at the output stride, layer1's output at stride 4).
  """
  blocks, width_scale, dtype = model.blocks, model.width_scale, model.dtype
  x = x.astype(dtype)
  strides, dilations = OUTPUT_STRIDES[model.output_stride]
  # Stem: 7x7 stride 2 (padding 3) + BN + ReLU, 3x3 stride-2 max-pool (padding 1).
  stem_width = scaled_width(STEM_WIDTH, width_scale)
  x = ConvBN(stem_width, 7, 2, use_bias=False, dtype=dtype, name='conv1')(x, train)
  x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
  low_level = x
  for layer, (n_blocks, width, stride, dilation) in enumerate(
    zip(blocks, resnet50_widths(width_scale), strides, dilations, strict=True), start=1
  ):
    for block in range(n_blocks):
      # Multi-grid in the last layer: its blocks' rates are dilation x (1, 2, 4).
      rate = dilation * (MULTI_GRID[block % len(MULTI_GRID)] if layer == 4 else 1)
      x = Bottleneck(
        width,
        strides=stride if block == 0 else 1,
        dilation=rate,
        projection=block == 0,
        dtype=dtype,
        name=f'layer{layer}_{block}',
      )(x, train)
    if layer == 1:
      low_level = x
  return x, low_level
