"""HED, holistically-nested edge detection (Xie and Tu, ICCV 2015), a comparison model of
Li et al. (2021), Table V (14.72M parameters).

The trunk is VGG16's thirteen 3x3 'same' convolutions + ReLU (conv1_1 ... conv5_3) with a 2x2
stride-2 max-pool between stages and no pool5. After the last convolution of each stage
(conv1_2, conv2_2, conv3_3, conv4_3, conv5_3) a 1x1 convolution gives one side logit map,
which is up-sampled to the input size; a 1x1 convolution over the five side maps, its
weights initialised to 1/5, gives the fused map.

The original up-samples with transposed convolutions whose weights are fixed bilinear kernels
(not trained) and crops to the input; here `jax.image.resize` (bilinear, half-pixel centres)
does the same without parameters, so the trainable parameters are exactly the original's:
14,714,688 (VGG16 convolutions) + 1,477 (side 1x1s) + 6 (fusion) = 14,716,171.

The input is not mean-subtracted (the contract's images are in [0, 1] and there are no
ImageNet weights here); side 1x1 kernels start from N(0, 0.01^2) as in RCF's release.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.backbones import VGG16_STAGES, VGG16Body
from crackjax.models.conv import Conv3x3ReLU, resolve_impl
from crackjax.models.layers import check_input, fused_outputs, pool_fn, side_conv, upsample_to


class VGG16SideOutputs(VGG16Body):
  """Base class of HED and RCF: VGG16's stages (`VGG16Body`) with five side logit maps,
  up-sampled to the input size and fused (`layers.fused_outputs`).

  It declares no fields; the subclass declares `width_scale`, `dtype` and `conv_impl` (checked
  when it is built) and `input_multiple`, and defines `stage_sides`, which the compact
  `__call__` calls (so the subclass's parameters are named as if it were its own).
  """

  def __post_init__(self):
    resolve_impl(self.conv_impl)  # A mistyped name fails when the model is built.
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array) -> dict[str, jax.Array | tuple[jax.Array, ...]]:
    """Maps images [B, H, W, 3] to {'logits': fused [B, H, W, 1], 'side_logits': 5 maps}."""
    check_input(type(self).__name__, x, self.input_multiple)
    height, width = x.shape[1:3]
    sides = self.stage_sides(x.astype(self.dtype))
    return fused_outputs([upsample_to(side, height, width) for side in sides], self.dtype)

  def stage_sides(self, x: jax.Array) -> list[jax.Array]:
    """The five side logit maps [B, h, w, 1] of images `x` (in `dtype`), each at its stage's
    size."""
    raise NotImplementedError


class HED(VGG16SideOutputs):
  """HED: VGG16 with five deeply supervised side outputs and a learnt fusion.

  Attributes:
    dtype: computation dtype (parameters stay float32; outputs are float32).
    width_scale: multiplies VGG16's widths (1.0: the original 64 ... 512; small values give
      tiny models for CPU tests).
    conv_impl: backward pass of the 3x3 convolutions and poolings, as for the U-Net
      ('auto', 'xla' or 'blocked'; crackjax/models/conv.py). The function is the same.
  """

  dtype: jnp.dtype = jnp.float32
  width_scale: float = 1.0
  conv_impl: str = 'auto'

  @property
  def input_multiple(self) -> int:
    """16: four 2x2 poolings, so every side map is exactly 1/2**k of the input."""
    return 16

  def stage_sides(self, x: jax.Array) -> list[jax.Array]:
    """Each stage's last convolution through its side 1x1 convolution (`side1` ... `side5`)."""
    pool = pool_fn(self.conv_impl)
    sides = []
    for stage, ((_, depth), features) in enumerate(zip(VGG16_STAGES, self.widths, strict=True)):
      if stage:
        x = pool(x)
      for i in range(depth):
        x = Conv3x3ReLU(features, self.dtype, self.conv_impl, name=f'conv{stage + 1}_{i + 1}')(x)
      sides.append(side_conv(1, self.dtype, f'side{stage + 1}')(x))
    return sides
