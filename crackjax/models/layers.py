"""Layers and checks that several models share: widths scaled by ``width_scale``, input checks,
resizing side maps, the HED-style side and fusion 1x1 convolutions, pooling, the crack logit of
a two-class head, and two base classes: `WidthScaled` (the comparison models' ``width_scale``)
and `CrackLogitModel` (the BatchNorm models that return one crack logit)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.conv import resolve_impl
from crackjax.models.unet import max_pool_2x2


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


def fused_outputs(
  sides: list[jax.Array], dtype: jnp.dtype
) -> dict[str, jax.Array | tuple[jax.Array, ...]]:
  """The outputs of a model with side maps (HED, RCF, DeepCrack): ``{'logits': fused,
  'side_logits': the side maps}``, the fused map `fuse_conv` over the side maps (float32)."""
  fused = fuse_conv(dtype)(jnp.concatenate(sides, axis=-1).astype(dtype))
  return {'logits': fused.astype(jnp.float32), 'side_logits': tuple(sides)}


def pool_fn(conv_impl: str):
  """2x2 stride-2 max-pooling: the CPU-fast `max_pool_2x2` where convolutions are blocked."""
  if resolve_impl(conv_impl) == 'blocked':
    return max_pool_2x2
  return functools.partial(nn.max_pool, window_shape=(2, 2), strides=(2, 2))


def check_n_classes(name: str, n_classes: int) -> None:
  """Raises ValueError unless n_classes is 1 or 2 (one crack logit either way)."""
  if n_classes not in (1, 2):
    raise ValueError(f'{name} n_classes must be 1 or 2 (one crack logit); got {n_classes}.')


def crack_logit(scores: jax.Array) -> jax.Array:
  """One crack logit from [..., n] class scores: the map itself (n = 1) or, for n = 2,
  logit_crack - logit_background, whose sigmoid is the softmax probability of crack."""
  scores = scores.astype(jnp.float32)
  return scores[..., 1:] - scores[..., :1] if scores.shape[-1] == 2 else scores


def resize_to(x: jax.Array, height: int, width: int) -> jax.Array:
  """Bilinear resize of [B, h, w, C] to [B, height, width, C] (half-pixel centres)."""
  if x.shape[1:3] == (height, width):
    return x
  return jax.image.resize(x, (x.shape[0], height, width, x.shape[3]), 'bilinear')


class WidthScaled(nn.Module):
  """Base class of the comparison models whose every width `width_scale` multiplies.

  It declares no fields, so a subclass's fields keep their order; the subclass declares
  `width_scale` (a positive multiplier), checked when it is built.
  """

  def __post_init__(self):
    if not self.width_scale > 0:
      raise ValueError(
        f'{type(self).__name__} width_scale must be positive; got {self.width_scale}.'
      )
    super().__post_init__()

  def _width(self, channels: int) -> int:
    """`channels` after `width_scale` (`scaled_width`)."""
    return scaled_width(channels, self.width_scale)


class CrackLogitModel(WidthScaled):
  """Base class of the BatchNorm models that return one crack logit per pixel (SegNet,
  DeepLab v3+, CrackSeg, U-CliqueNet): the input check, the cast to `dtype` and the crack logit
  of their class scores (`crack_logit`).

  It declares no fields; the subclass declares `n_classes` (1 or 2, checked when it is built),
  `width_scale`, `dtype` and `input_multiple`, and defines `class_scores`, which the compact
  `__call__` calls (so the subclass's parameters are named as if it were its own).
  """

  def __post_init__(self):
    check_n_classes(type(self).__name__, self.n_classes)
    super().__post_init__()

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    """Maps images [B, H, W, 3] to crack logits [B, H, W, 1] (float32).

    Args:
      x: images in [0, 1].
      train: BatchNorm uses (and updates) batch statistics; else its running averages.
    """
    check_input(type(self).__name__, x, self.input_multiple)
    return crack_logit(self.class_scores(x.astype(self.dtype), train))

  def class_scores(self, x: jax.Array, train: bool) -> jax.Array:
    """The [B, H, W, n_classes] class scores of images `x` (in `dtype`) at the input size.

    Args:
      x: images in [0, 1], in `dtype`.
      train: as `__call__`'s.
    """
    raise NotImplementedError
