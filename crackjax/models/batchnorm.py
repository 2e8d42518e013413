"""Building blocks of the BatchNorm comparison models (SegNet, DeepCrack, DeepLab v3+,
CrackSeg, U-CliqueNet).

Models with BatchNorm follow flax's convention: ``__call__(x, train=False)``. With
``train=True`` every BatchNorm normalises with the statistics of the batch it is given and
updates its running averages in the ``'batch_stats'`` collection (the caller applies the
model with ``mutable=['batch_stats']``); with ``train=False`` (evaluation, prediction, export)
it uses those running averages. `crackjax.models.apply_model` does either from a model's
variables, so the train step and prediction need not know which models have BatchNorm.

The batch is the array the model is applied to. In the jitted train step that is the global
batch, sharded over the devices: the mean and variance are reductions over its first axis,
which XLA computes across devices, so the statistics are the same on 1 or N devices (no
``axis_name`` is needed, as it would be under pmap).

Conventions shared by these models: PyTorch's BatchNorm defaults (momentum 0.1, i.e.
flax's ``momentum=0.9`` for the running averages, epsilon 1e-5), and convolutions followed
by BatchNorm initialised as torchvision's VGG-BN and ResNet (Kaiming normal, fan-out).
Only the BatchNorm scale and offset are parameters; the running mean and variance are
state, not trained, and not counted as parameters.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

# PyTorch's BatchNorm2d defaults: running = 0.9 * running + 0.1 * batch, epsilon 1e-5.
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5

# torchvision's initialisation of convolutions in VGG-BN and ResNet (kaiming_normal_,
# mode='fan_out', nonlinearity='relu').
conv_init = nn.initializers.variance_scaling(2.0, 'fan_out', 'normal')


def batch_norm(train: bool, dtype: jnp.dtype, name: str) -> nn.BatchNorm:
  """A BatchNorm layer: batch statistics when `train`, running averages otherwise."""
  return nn.BatchNorm(
    use_running_average=not train,
    momentum=BN_MOMENTUM,
    epsilon=BN_EPSILON,
    dtype=dtype,
    name=name,
  )


class ConvBN(nn.Module):
  """Convolution ('same' padding, as PyTorch's k // 2 * dilation), BatchNorm, optional ReLU.

  Attributes:
    features: output channels.
    kernel_size: square kernel size (odd).
    strides: stride of the convolution.
    dilation: dilation rate of the convolution.
    use_bias: whether the convolution has a bias (SegNet's and DeepCrack's do, ResNet's and
      DeepLab's do not).
    relu: apply ReLU after the BatchNorm.
    dtype: computation dtype (parameters stay float32).
  """

  features: int
  kernel_size: int = 3
  strides: int = 1
  dilation: int = 1
  use_bias: bool = True
  relu: bool = True
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    pad = self.dilation * (self.kernel_size - 1) // 2
    x = nn.Conv(
      self.features,
      (self.kernel_size, self.kernel_size),
      strides=(self.strides, self.strides),
      padding=((pad, pad), (pad, pad)),
      kernel_dilation=(self.dilation, self.dilation),
      use_bias=self.use_bias,
      kernel_init=conv_init,
      dtype=self.dtype,
      name='conv',
    )(x)
    x = batch_norm(train, self.dtype, 'bn')(x)
    return nn.relu(x) if self.relu else x


def max_pool_with_indices(x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """2x2 stride-2 max-pooling of [B, H, W, C] (H, W even) that also returns where each
  maximum was (SegNet's pooling indices).

  Returns:
    (pooled [B, H/2, W/2, C], indices [B, H/2, W/2, C] int32): the window position of the
    maximum, 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right; the first of tied
    maxima, as PyTorch's ``MaxPool2d(return_indices=True)``. The gradient flows to that
    position only.
  """
  b, h, w, c = x.shape
  windows = x.reshape(b, h // 2, 2, w // 2, 2, c)
  taps = [windows[:, :, dy, :, dx] for dy in (0, 1) for dx in (0, 1)]
  best = taps[0]
  index = jnp.zeros(best.shape, jnp.int32)
  for k in (1, 2, 3):
    better = taps[k] > best
    best = jnp.where(better, taps[k], best)
    index = jnp.where(better, k, index)
  return best, index


def max_unpool(x: jax.Array, indices: jax.Array) -> jax.Array:
  """The inverse of `max_pool_with_indices`: [B, h, w, C] -> [B, 2h, 2w, C], each value put
  at the position its window's maximum came from and zeros elsewhere (SegNet's upsampling)."""
  b, h, w, c = x.shape
  zero = jnp.zeros_like(x)
  taps = [jnp.where(indices == k, x, zero) for k in range(4)]
  rows = [jnp.stack(taps[2 * dy : 2 * dy + 2], axis=3) for dy in (0, 1)]  # [B, h, w, 2, C]
  return jnp.stack(rows, axis=2).reshape(b, 2 * h, 2 * w, c)
