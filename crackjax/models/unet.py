"""The paper's revised U-Net (§III-A, footnote 1).

Differences from Ronneberger et al.: 'same' padding so feature maps keep their size, and
2x2 stride-2 transposed convolutions ("deconvolution") for up-sampling. Five stages of
two 3x3 conv + ReLU; 2x2 max-pool down; skip connections by concatenation; a 1x1 conv
to a single crack logit. Input height and width must be multiples of 2**(stages-1).

Not in the paper: ``input_norm='image'`` standardises each image per channel before the first
convolution (`standardize_per_image`), so a photo's exposure and contrast, which differ between
cameras and roads, do not reach the network (a candidate recipe for roads never seen,
configs/lodo.py; 'none', the paper's and every released model's, leaves the input as it is).
"""

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.conv import Conv3x3ReLU, resolve_impl


class ConvBlock(nn.Module):
  """Two 3x3 same-padding convolutions, each followed by ReLU.

  Attributes:
    features: output channels of both convolutions.
    dtype: computation dtype.
    conv_impl: backward pass of the convolutions (crackjax/models/conv.py).
  """

  features: int
  dtype: jnp.dtype = jnp.float32
  conv_impl: str = 'auto'

  @nn.compact
  def __call__(self, *xs: jax.Array) -> jax.Array:
    """Maps one input, or several to be concatenated along channels, to the block output."""
    # Named as nn.Conv would be, so checkpoints do not depend on conv_impl.
    x = Conv3x3ReLU(self.features, self.dtype, self.conv_impl, name='Conv_0')(*xs)
    return Conv3x3ReLU(self.features, self.dtype, self.conv_impl, name='Conv_1')(x)


class UpConv2x2(nn.Module):
  """2x2 transposed convolution with stride 2, written as one matmul.

  With kernel 2 and stride 2 every output pixel receives exactly one input pixel, so
  y[2i + a, 2j + c] = x[i, j] @ W[1 - a, 1 - c] + bias. This is the same function, with the
  same parameters (kernel [2, 2, in, out] in `nn.ConvTranspose`'s layout), as
  `nn.ConvTranspose(features, (2, 2), strides=(2, 2))`; we write it as an einsum because
  XLA's CPU backend computes the transposed convolution's weight gradient about 3-4x
  slower than the equivalent matmul.
  """

  features: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    kernel = self.param(
      'kernel', nn.initializers.lecun_normal(), (2, 2, x.shape[-1], self.features), jnp.float32
    )
    bias = self.param('bias', nn.initializers.zeros_init(), (self.features,), jnp.float32)
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
    b, h, w, _ = x.shape
    # ConvTranspose applies the kernel flipped: output offset a reads kernel row 1 - a.
    y = jnp.einsum('bhwi,acio->bhawco', x, kernel[::-1, ::-1])
    return y.reshape(b, 2 * h, 2 * w, self.features) + bias


@jax.custom_vjp
def max_pool_2x2(x: jax.Array) -> jax.Array:
  """2x2 max-pooling with stride 2 of [B, H, W, C] (H and W even), for the CPU path.

  The same function as `nn.max_pool(x, (2, 2), strides=(2, 2))`, with a backward pass
  that is one elementwise pass, dx = g where x equals its window's maximum, keeping only
  x and the output (both kept by the U-Net anyway). reduce_window's gradient is a
  select-and-scatter, which XLA's CPU backend lowers to a scatter with materialised
  int32 indices: about 100 ms of a 1.5 s train step of the 16...256 U-Net at 320x480
  (docs/performance.md). The two gradients differ only where a window has tied maxima
  (this one passes g to each of them); in this U-Net those are zeros after a ReLU,
  whose gradient is zero, so parameter gradients are the same.
  """
  b, h, w, c = x.shape
  return x.reshape(b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def _pool_fwd(x):
  y = max_pool_2x2(x)
  return y, (x, y)


def _pool_bwd(residuals, g):
  x, y = residuals
  b, h, w, c = x.shape

  def up(a):  # nearest-neighbour 2x up-sampling
    return jnp.broadcast_to(a[:, :, None, :, None, :], (b, h // 2, 2, w // 2, 2, c)).reshape(
      b, h, w, c
    )

  return (jnp.where(x == up(y), up(g), jnp.zeros_like(x)),)


max_pool_2x2.defvjp(_pool_fwd, _pool_bwd)

#: The U-Net's input normalisations (``config.model.input_norm``).
INPUT_NORMS = ('none', 'image')

#: Added to each channel's variance before the square root: a flat crop (std ~0) is not
#: blown up past what an image with a contrast of about 1 % of the range would be.
STANDARDIZE_EPSILON = 1e-4


def standardize_per_image(x: jax.Array) -> jax.Array:
  """Each image of [B, H, W, C] minus its channel means, over its channel standard deviations.

  The image is what the model is given: a training crop, a whole photo, or one tile of a photo
  larger than the predictor's tile (`crackjax.deploy.predictor`), each with its own statistics.
  Computed in float32 whatever `x`'s dtype; returns float32.
  """
  x = x.astype(jnp.float32)
  mean = x.mean(axis=(1, 2), keepdims=True)
  var = x.var(axis=(1, 2), keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + STANDARDIZE_EPSILON)


class UNet(nn.Module):
  """U-Net returning one logit per pixel.

  Attributes:
    widths: channels of the stages from the top (full resolution) to the bottleneck; the
      paper uses (64, 128, 256, 512, 1024).
    dtype: computation dtype (parameters stay float32).
    conv_impl: backward pass of the 3x3 convolutions, ReLUs and poolings: 'xla' (plain
      autodiff), 'blocked' (crackjax/models/conv.py and `max_pool_2x2`, for the CPU) or
      'auto' (blocked on the CPU backend). The function computed is the same.
    input_norm: one of `INPUT_NORMS`: 'none' (the paper's), or 'image' (each image
      standardised per channel, `standardize_per_image`).
  """

  widths: Sequence[int] = (64, 128, 256, 512, 1024)
  dtype: jnp.dtype = jnp.float32
  conv_impl: str = 'auto'
  input_norm: str = 'none'

  def __post_init__(self):
    resolve_impl(self.conv_impl)  # A mistyped name fails when the model is built.
    if self.input_norm not in INPUT_NORMS:
      raise ValueError(
        f'config.model.input_norm={self.input_norm!r} is not one of {list(INPUT_NORMS)}.'
      )
    super().__post_init__()

  @property
  def input_multiple(self) -> int:
    """Input height and width must be multiples of this (one halving per pooling)."""
    return 2 ** (len(self.widths) - 1)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps images [B, H, W, C] to logits [B, H, W, 1] (float32)."""
    factor = self.input_multiple
    if x.shape[1] % factor or x.shape[2] % factor:
      raise ValueError(
        f'U-Net input height and width must be multiples of {factor}; got {x.shape[1:3]}.'
      )
    if self.input_norm == 'image':
      x = standardize_per_image(x)
    x = x.astype(self.dtype)
    if resolve_impl(self.conv_impl) == 'blocked':
      pool = max_pool_2x2
    else:
      pool = functools.partial(nn.max_pool, window_shape=(2, 2), strides=(2, 2))
    skips = []
    for width in self.widths[:-1]:
      x = ConvBlock(width, self.dtype, self.conv_impl)(x)
      skips.append(x)
      x = pool(x)
    x = ConvBlock(self.widths[-1], self.dtype, self.conv_impl)(x)
    for width, skip in zip(reversed(self.widths[:-1]), reversed(skips), strict=True):
      x = UpConv2x2(width, self.dtype)(x)
      # Skip first, as in jnp.concatenate([skip, x], axis=-1).
      x = ConvBlock(width, self.dtype, self.conv_impl)(skip, x)
    x = nn.Conv(1, (1, 1), dtype=self.dtype)(x)
    return x.astype(jnp.float32)
