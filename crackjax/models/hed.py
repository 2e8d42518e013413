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

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.conv import Conv3x3ReLU, resolve_impl
from crackjax.models.unet import max_pool_2x2

# VGG16's convolution stages: (channels, number of 3x3 convolutions).
VGG16_STAGES: tuple[tuple[int, int], ...] = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


def scaled_width(width: int, width_scale: float) -> int:
  """`width * width_scale`, rounded, at least 1."""
  return max(1, round(width * width_scale))


def check_input(name: str, x: jax.Array, multiple: int) -> None:
  """Raises ValueError unless x is [B, H, W, C] with H and W multiples of `multiple`."""
  if x.ndim != 4 or x.shape[1] % multiple or x.shape[2] % multiple:
    raise ValueError(
      f'{name} input must be [B, H, W, C] with H and W multiples of {multiple}; got {x.shape}.'
    )


def upsample_to(x: jax.Array, height: int, width: int) -> jax.Array:
  """Bilinear resize of a [B, h, w, 1] side map to [B, height, width, 1], as float32."""
  x = x.astype(jnp.float32)
  if x.shape[1:3] == (height, width):
    return x
  return jax.image.resize(x, (x.shape[0], height, width, x.shape[3]), 'bilinear')


def side_conv(features: int, dtype: jnp.dtype, name: str) -> nn.Conv:
  """A 1x1 convolution with N(0, 0.01^2) kernel and zero bias (the side branches)."""
  return nn.Conv(features, (1, 1), dtype=dtype, kernel_init=nn.initializers.normal(0.01), name=name)


def fuse_conv(dtype: jnp.dtype, name: str = 'fuse') -> nn.Conv:
  """The fusion 1x1 convolution, 5 side maps -> 1, kernel initialised to 1/5."""
  return nn.Conv(1, (1, 1), dtype=dtype, kernel_init=nn.initializers.constant(0.2), name=name)


def pool_fn(conv_impl: str):
  """2x2 stride-2 max-pooling: the CPU-fast `max_pool_2x2` where convolutions are blocked."""
  if resolve_impl(conv_impl) == 'blocked':
    return max_pool_2x2
  return functools.partial(nn.max_pool, window_shape=(2, 2), strides=(2, 2))


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
