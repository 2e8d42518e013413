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

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.backbones import VGG16_STAGES
from crackjax.models.conv import Conv3x3ReLU, resolve_impl
from crackjax.models.layers import (
  check_input,
  fuse_conv,
  pool_fn,
  scaled_width,
  side_conv,
  upsample_to,
)


class HED(nn.Module):
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

  def __post_init__(self):
    resolve_impl(self.conv_impl)  # A mistyped name fails when the model is built.
    if not self.width_scale > 0:
      raise ValueError(f'width_scale must be positive; got {self.width_scale}.')
    super().__post_init__()

  @property
  def input_multiple(self) -> int:
    """16: four 2x2 poolings, so every side map is exactly 1/2**k of the input."""
    return 16

  @property
  def widths(self) -> Sequence[int]:
    """The five stages' channels after `width_scale`."""
    return tuple(scaled_width(w, self.width_scale) for w, _ in VGG16_STAGES)

  @nn.compact
  def __call__(self, x: jax.Array) -> dict[str, jax.Array | tuple[jax.Array, ...]]:
    """Maps images [B, H, W, 3] to {'logits': fused [B, H, W, 1], 'side_logits': 5 maps}."""
    check_input('HED', x, self.input_multiple)
    height, width = x.shape[1:3]
    pool = pool_fn(self.conv_impl)
    x = x.astype(self.dtype)
    sides = []
    for stage, ((_, depth), features) in enumerate(zip(VGG16_STAGES, self.widths, strict=True)):
      if stage:
        x = pool(x)
      for i in range(depth):
        x = Conv3x3ReLU(features, self.dtype, self.conv_impl, name=f'conv{stage + 1}_{i + 1}')(x)
      side = side_conv(1, self.dtype, f'side{stage + 1}')(x)
      sides.append(upsample_to(side, height, width))
    fused = fuse_conv(self.dtype)(jnp.concatenate(sides, axis=-1).astype(self.dtype))
    return {'logits': fused.astype(jnp.float32), 'side_logits': tuple(sides)}
