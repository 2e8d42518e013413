"""DeepLab v3+ with a ResNet-50 backbone (Chen, Zhu, Papandreou, Schroff and Adam, ECCV 2018),
a comparison model of Li et al. (2021), Tables VII and VIII (40.35M parameters).

Backbone: ResNet-50 (He et al. 2016) as in torchvision, bottlenecks with the stride on the
3x3 convolution, every convolution without bias and followed by BatchNorm; no fully
connected layer. Output stride 16: layer4 keeps stride 1 and dilates its 3x3 convolutions,
with DeepLab v3's multi-grid (1, 2, 4) times 2, i.e. rates 2, 4, 8 (output stride 8: layer3
dilated by 2 and layer4 by 4 x (1, 2, 4)). It is crackjax/models/backbones.py's, shared with
CrackSeg (crackseg.py).

ASPP on layer4's 2048 channels: a 1x1 convolution, three 3x3 convolutions with rates 6, 12,
18 (12, 24, 36 at output stride 8) and image pooling (global average, 1x1 convolution,
broadcast back), each to 256 channels with BN + ReLU, concatenated (1280) and projected by a
1x1 convolution + BN + ReLU to 256. Decoder: layer1's output (stride 4, 256 channels)
projected by a 1x1 convolution + BN + ReLU to 48 channels; the ASPP output up-sampled
bilinearly to stride 4 and concatenated with it (304); two 3x3 convolutions to 256 with BN +
ReLU; a 1x1 convolution (with bias) to the class scores, up-sampled bilinearly to the input.
This is the layout of the widely used PyTorch port (jfzhang95/pytorch-deeplab-xception with
its ResNet backbone), whose count is the paper's; its dropout (0.5 after the ASPP, 0.5 and
0.1 in the decoder) is left out here, since the train step draws no dropout keys.
Bilinear up-sampling uses half-pixel centres (`jax.image.resize`), not align_corners.

Parameter count (no bias before a BatchNorm, BN scale and offset counted, running statistics
not): ResNet-50 without its fully connected layer 23,508,032 (torchvision's 25,557,032 less
fc's 2,049,000); ASPP 15,532,032 convolution weights + 3,072 BN (six BatchNorms of 256,
the image pooling's included); decoder 1,302,528 + 1,120 BN; so 40,346,784, plus the
classifier's 257 n. n = 1 gives 40,347,041 and n = 2 40,347,298, both the paper's 40.35M.
(With one 3x3 decoder convolution, as torchvision's and VainF's ports have, the count is
39.76M; with a bias in every convolution 40.38M.) As in SegNet, the
default n_classes=2 returns logit_crack - logit_background, n_classes=1 its single map.

Input: images in [0, 1], not normalised (conv1 is followed by BatchNorm and there are no
ImageNet weights here). H and W must be multiples of 16 so the stride-4 and stride-16 maps
are exactly 1/4 and 1/16 of the input.
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.backbones import (
  RESNET50_LAYERS,
  check_resnet_fields,
  resnet50_features,
  resnet50_widths,
)
from crackjax.models.batchnorm import ConvBN
from crackjax.models.layers import CrackLogitModel, resize_to

ASPP_WIDTH = 256
LOW_LEVEL_WIDTH = 48
DECODER_WIDTH = 256
# output stride (one of resnet.OUTPUT_STRIDES) -> ASPP rates
ASPP_RATES = {16: (6, 12, 18), 8: (12, 24, 36)}


class ResNet50Segmenter(CrackLogitModel):
  """Base class of DeepLab v3+ and CrackSeg: ResNet-50's features (`resnet50_features`), a
  context module on layer4's output (ASPP; CrackSeg's multiscale dilated convolutions) and
  DeepLab v3+'s decoder with `decoder_convs` 3x3 convolutions.

  It declares no fields; the subclass declares those `check_resnet_fields` and
  `CrackLogitModel` check (n_classes, output_stride, width_scale, blocks) and `dtype`, and
  defines `context_module`.
  """

  # The decoder's 3x3 convolutions (DeepLab v3+: 2).
  decoder_convs = 2

  def __post_init__(self):
    check_resnet_fields(type(self).__name__, self)
    super().__post_init__()

  @property
  def input_multiple(self) -> int:
    """16: the stride-4 and stride-16 (or 8) maps are then exact fractions of the input."""
    return 16

  @property
  def widths(self) -> Sequence[int]:
    """The bottleneck widths of ResNet's four layers after `width_scale`."""
    return resnet50_widths(self.width_scale)

  def context_module(self, x: jax.Array, train: bool) -> jax.Array:
    """The module on layer4's output x, to `self._width(256)` channels."""
    raise NotImplementedError

  def class_scores(self, x: jax.Array, train: bool) -> jax.Array:
    """ResNet-50, the context module, then the decoder: layer1's output projected by a 1x1
    convolution + BN + ReLU (``low_level``); the module's output resized to it and
    concatenated; `decoder_convs` 3x3 convolutions + BN + ReLU (``decoder_conv1`` ...); the
    1x1 ``classifier``'s class scores resized to the input."""
    conv = dict(use_bias=False, dtype=self.dtype)
    y, low_level = resnet50_features(self, x, train)
    y = self.context_module(y, train)
    low_level = ConvBN(self._width(LOW_LEVEL_WIDTH), 1, name='low_level', **conv)(low_level, train)
    y = jnp.concatenate([resize_to(y, *low_level.shape[1:3]), low_level], axis=-1)
    for i in range(1, self.decoder_convs + 1):
      y = ConvBN(self._width(DECODER_WIDTH), 3, name=f'decoder_conv{i}', **conv)(y, train)
    y = nn.Conv(self.n_classes, (1, 1), dtype=self.dtype, name='classifier')(y)
    return resize_to(y, *x.shape[1:3])


def image_pooling(
  x: jax.Array, features: int, name: str, train: bool, dtype: jnp.dtype
) -> jax.Array:
  """ASPP's image-pooling branch, inside the calling compact module: the global average of x
  [B, h, w, C], a 1x1 convolution (no bias) + BN + ReLU to `features`, broadcast back to
  [B, h, w, features]."""
  pooled = jnp.mean(x, axis=(1, 2), keepdims=True)
  pooled = ConvBN(features, 1, use_bias=False, dtype=dtype, name=name)(pooled, train)
  return jnp.broadcast_to(pooled, (*x.shape[:3], features))


class DeepLabV3Plus(ResNet50Segmenter):
  """DeepLab v3+ (ResNet-50 backbone) returning one crack logit per pixel (module docstring).

  Attributes:
    n_classes: class scores of the classifier: 2 (default; 40,347,298 parameters) returns
      logit_crack - logit_background, 1 (40,347,041) its single map.
    output_stride: 16 (the paper's; ASPP rates 6, 12, 18) or 8 (rates 12, 24, 36).
    width_scale: multiplies every width (ResNet's 64 ... 512 and the stem, ASPP's 256, the
      decoder's 48 and 256; rounded, at least 1); small values give CPU-sized tests.
    blocks: bottleneck blocks of ResNet's four layers; (3, 4, 6, 3) is ResNet-50. Fewer
      (the smoke config's (1, 1, 1, 1)) only to make CPU tests compile faster. The last
      layer's blocks take the multi-grid rates in turn.
    dtype: computation dtype (parameters stay float32; logits are float32).
  """

  n_classes: int = 2
  output_stride: int = 16
  width_scale: float = 1.0
  blocks: Sequence[int] = tuple(n for _, n in RESNET50_LAYERS)
  dtype: jnp.dtype = jnp.float32

  def context_module(self, x: jax.Array, train: bool) -> jax.Array:
    """ASPP: a 1x1 convolution, three dilated 3x3 ones and image pooling, projected."""
    conv = dict(use_bias=False, dtype=self.dtype)
    aspp = self._width(ASPP_WIDTH)
    branches = [ConvBN(aspp, 1, name='aspp0', **conv)(x, train)]
    for i, rate in enumerate(ASPP_RATES[self.output_stride], start=1):
      branches.append(ConvBN(aspp, 3, dilation=rate, name=f'aspp{i}', **conv)(x, train))
    branches.append(image_pooling(x, aspp, 'aspp_pool', train, self.dtype))
    return ConvBN(aspp, 1, name='aspp_project', **conv)(jnp.concatenate(branches, axis=-1), train)
