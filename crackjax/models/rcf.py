"""RCF, richer convolutional features (Liu et al., CVPR 2017), a comparison model of
Li et al. (2021), Table V (14.8M parameters).

The trunk is VGG16 as in HED (crackjax/models/hed.py) with the original's two changes:
pool4 is a 2x2 max-pool with stride 1 (no padding, so stage 5 is one pixel smaller than
stage 4, as in the Caffe release) and the conv5 stage uses dilation 2. Every 3x3
convolution's (post-ReLU) output gets a 1x1 convolution to 21 channels; those are summed
per stage, a 1x1 convolution maps the sum to one side logit map, which is up-sampled to the
input size; a 1x1 convolution over the five side maps (weights 1/5) gives the fused map.

As in hed.py the original's fixed bilinear deconvolutions + crop are a parameter-free
bilinear `jax.image.resize` to the input size (for stage 5, from its (H/8 - 1) x (W/8 - 1)
map). Trainable parameters: 14,714,688 (VGG16) + 88,977 (thirteen 1x1 to 21) + 110 (five
21 -> 1) + 6 (fusion) = 14,803,781. The 1x1 kernels start from N(0, 0.01^2) as in the
release.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.backbones import VGG16_STAGES
from crackjax.models.conv import Conv3x3ReLU
from crackjax.models.hed import VGG16SideOutputs
from crackjax.models.layers import pool_fn, side_conv


class RCF(VGG16SideOutputs):
  """RCF: VGG16 (pool4 stride 1, dilated conv5) with every convolution feeding a side output.

  Attributes:
    dtype: computation dtype (parameters stay float32; outputs are float32).
    width_scale: multiplies VGG16's widths (1.0: the original 64 ... 512).
    side_features: channels of the per-convolution 1x1 reductions (the original's 21; not
      scaled by width_scale).
    conv_impl: backward pass of the undilated 3x3 convolutions and stride-2 poolings
      ('auto', 'xla' or 'blocked'; crackjax/models/conv.py). The dilated conv5 stage uses
      XLA's own convolution.
  """

  dtype: jnp.dtype = jnp.float32
  width_scale: float = 1.0
  side_features: int = 21
  conv_impl: str = 'auto'

  def __post_init__(self):
    if self.side_features < 1:
      raise ValueError(f'side_features must be at least 1; got {self.side_features}.')
    super().__post_init__()

  @property
  def input_multiple(self) -> int:
    """8: three stride-2 poolings (pool4 has stride 1), so side maps 1-4 are exact."""
    return 8

  def stage_sides(self, x: jax.Array) -> list[jax.Array]:
    """Each stage's convolutions reduced (`conv{s}_{i}_down`), summed and through the
    stage's side 1x1 convolution (`side1` ... `side5`)."""
    pool = pool_fn(self.conv_impl)
    sides = []
    for stage, ((_, depth), features) in enumerate(zip(VGG16_STAGES, self.widths, strict=True)):
      if stage in (1, 2, 3):
        x = pool(x)
      elif stage == 4:  # pool4: 2x2, stride 1, no padding
        x = nn.max_pool(x, (2, 2), strides=(1, 1), padding='VALID')
      reduced = None
      for i in range(depth):
        name = f'conv{stage + 1}_{i + 1}'
        if stage == 4:
          conv = nn.Conv(
            features, (3, 3), kernel_dilation=2, padding='SAME', dtype=self.dtype, name=name
          )
          x = nn.relu(conv(x))
        else:
          x = Conv3x3ReLU(features, self.dtype, self.conv_impl, name=name)(x)
        down = side_conv(self.side_features, self.dtype, f'{name}_down')(x)
        reduced = down if reduced is None else reduced + down
      sides.append(side_conv(1, self.dtype, f'side{stage + 1}')(reduced))
    return sides
