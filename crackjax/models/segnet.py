"""SegNet (Badrinarayanan, Kendall and Cipolla, IEEE TPAMI 2017), a comparison model of
Li et al. (2021), Tables VII and VIII (29.44M parameters).

Encoder: VGG16-BN's thirteen 3x3 convolutions (conv1_1 ... conv5_3), each followed by
BatchNorm and ReLU, with a 2x2 stride-2 max-pool after each of the five stages that keeps
its pooling indices. Decoder: the mirror image, as in the Caffe release's ``segnet_train``
net: each stage up-samples with the indices of the matching pool (`max_unpool`: every value
back where its maximum came from, zeros elsewhere) and applies as many 3x3 conv + BN + ReLU
as the encoder stage had, the last one narrowing to the next stage's width (conv5_3_D ...
conv5_1_D 512; conv4_3_D, conv4_2_D 512, conv4_1_D 512 -> 256; ... ; conv1_2_D 64). The last
decoder convolution, conv1_1_D, is a plain 3x3 convolution to the class scores.

Parameter count. Every convolution keeps its bias (as in Caffe and PyTorch's default
``Conv2d``), every BatchNorm has a scale and an offset; the running mean and variance are
state, not parameters (counting them too gives 29.46M, not the paper's figure). Encoder
14,714,688 (VGG16's convolutions) + 8,448 (BN), decoder before conv1_1_D 14,712,448 + 7,424
(BN): 29,443,008; conv1_1_D adds 577 n (3x3, 64 -> n, with bias). n = 1 gives 29,443,585 and
n = 2 gives 29,444,162; both are the paper's 29.44M (n = 2 is the net SegNet's softmax
trains). As FCN8s (crackjax/models/fcn8s.py), the default n_classes=2 returns the crack
minus background logit difference, whose sigmoid is the two-class softmax probability of
crack; n_classes=1 returns its single map.

Input: images in [0, 1], not mean-subtracted (conv1_1 is followed by BatchNorm, and there
are no ImageNet weights here). H and W must be multiples of 32 (five poolings, each
unpooled back to exactly its input's size).
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.backbones import VGG16_STAGES, VGG16Body, vgg16_bn_encoder
from crackjax.models.batchnorm import ConvBN, conv_init, max_unpool
from crackjax.models.layers import CrackLogitModel


def segnet_decoder(
  x: jax.Array,
  indices: Sequence[jax.Array],
  widths: Sequence[int],
  train: bool,
  dtype: jnp.dtype,
  final: nn.Module | None = None,
) -> tuple[jax.Array, list[jax.Array]]:
  """SegNet's decoder, inside the calling compact module.

  Stage s = 5 ... 1 unpools with pool s's indices, then convolutions conv{s}_{i}_D for
  i = depth ... 1 (3x3 + BN + ReLU), the last (i = 1) narrowing to stage s - 1's width
  (stage 1: to its own). With `final` given, conv1_1_D is `final` instead (SegNet's
  classifier).

  Returns:
    (the decoder's output, the output of each stage's last convolution, stage 1 first).
  """
  outputs = []
  for stage in range(len(VGG16_STAGES), 0, -1):
    x = max_unpool(x, indices[stage - 1])
    depth = VGG16_STAGES[stage - 1][1]
    for i in range(depth, 0, -1):
      name = f'conv{stage}_{i}_D'
      if i == 1 and stage == 1 and final is not None:
        x = final(x)
      else:
        width = widths[max(stage - 2, 0)] if i == 1 else widths[stage - 1]
        x = ConvBN(width, dtype=dtype, name=name)(x, train)
    outputs.append(x)
  return x, outputs[::-1]


class SegNetBody(VGG16Body):
  """What a model built on SegNet's encoder-decoder (`vgg16_bn_encoder`, `segnet_decoder`)
  derives from its `width_scale` field (`VGG16Body`): SegNet's and DeepCrack's
  (crackjax/models/deepcrack.py) base class.

  It declares no fields, so a subclass's fields keep their order; the subclass declares
  `width_scale` (a positive multiplier of VGG16's widths), checked when it is built.
  """

  @property
  def input_multiple(self) -> int:
    """32: five 2x2 poolings, each undone exactly by its unpooling."""
    return 32


class SegNet(SegNetBody, CrackLogitModel):
  """SegNet returning one crack logit per pixel (module docstring).

  Attributes:
    n_classes: class scores of the last convolution: 2 (default; 29,444,162 parameters)
      returns logit_crack - logit_background, 1 (29,443,585) its single map.
    width_scale: multiplies VGG16's widths (1.0: the original 64 ... 512; rounded, at least
      1); small values give CPU-sized tests.
    dtype: computation dtype (parameters stay float32; logits are float32).
  """

  n_classes: int = 2
  width_scale: float = 1.0
  dtype: jnp.dtype = jnp.float32

  def class_scores(self, x: jax.Array, train: bool) -> jax.Array:
    """The encoder, then the decoder ending in the classifier conv1_1_D."""
    x, _, indices = vgg16_bn_encoder(x, self.widths, train, self.dtype)
    classifier = nn.Conv(
      self.n_classes, (3, 3), padding=1, kernel_init=conv_init, dtype=self.dtype, name='conv1_1_D'
    )
    x, _ = segnet_decoder(x, indices, self.widths, train, self.dtype, final=classifier)
    return x
