"""The paper's revised U-Net (§III-A, footnote 1).

Differences from Ronneberger et al.: 'same' padding so feature maps keep their size, and
2x2 stride-2 transposed convolutions ("deconvolution") for up-sampling. Five stages of
two 3x3 conv + ReLU; 2x2 max-pool down; skip connections by concatenation; a 1x1 conv
to a single crack logit. Input height and width must be multiples of 2**(stages-1).
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


class ConvBlock(nn.Module):
  """Two 3x3 same-padding convolutions, each followed by ReLU."""

  features: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for _ in range(2):
      x = nn.Conv(self.features, (3, 3), padding='SAME', dtype=self.dtype)(x)
      x = nn.relu(x)
    return x


class UNet(nn.Module):
  """U-Net returning one logit per pixel.

  Attributes:
    widths: channels of the stages from the top (full resolution) to the bottleneck; the
      paper uses (64, 128, 256, 512, 1024).
    dtype: computation dtype (parameters stay float32).
  """

  widths: Sequence[int] = (64, 128, 256, 512, 1024)
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps images [B, H, W, C] to logits [B, H, W, 1] (float32)."""
    factor = 2 ** (len(self.widths) - 1)
    if x.shape[1] % factor or x.shape[2] % factor:
      raise ValueError(
          f'U-Net input height and width must be multiples of {factor}; got {x.shape[1:3]}.')
    x = x.astype(self.dtype)
    skips = []
    for width in self.widths[:-1]:
      x = ConvBlock(width, self.dtype)(x)
      skips.append(x)
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = ConvBlock(self.widths[-1], self.dtype)(x)
    for width, skip in zip(reversed(self.widths[:-1]), reversed(skips), strict=True):
      x = nn.ConvTranspose(width, (2, 2), strides=(2, 2), dtype=self.dtype)(x)
      x = jnp.concatenate([skip, x], axis=-1)
      x = ConvBlock(width, self.dtype)(x)
    x = nn.Conv(1, (1, 1), dtype=self.dtype)(x)
    return x.astype(jnp.float32)
