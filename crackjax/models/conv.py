"""3x3 'same' convolution with a CPU-friendly backward pass.

XLA's CPU backend computes the forward pass and the input gradient of a 3x3 convolution
well, but its weight gradient (a convolution whose "kernel" is the whole feature map) runs
at a small fraction of the machine's matmul speed: for a 64->64 layer on a 2 x 160 x 240
batch it takes about 20x the forward pass (docs/performance.md). `conv3x3` keeps XLA's
forward pass and input gradient and computes the weight gradient itself, as a sum of
matrix products over blocks of output rows:

    dW[dy, dx, i, o] = sum_{n, h, w} x_pad[n, h + dy, w + dx, i] * g[n, h, w, o]

For each block of a few rows of one image, the nine shifted windows of the input block are
stacked channel-major into a [9 * C_in, rows * W] patch matrix (im2col) that fits in cache,
and one [9 * C_in, rows * W] @ [rows * W, C_out] product is added to the accumulator.
A `lax.scan` over the blocks keeps only one patch matrix alive, so memory stays bounded
(building the whole im2col at once needs 9x the layer's input, gigabytes for this U-Net).

`Conv3x3` is a drop-in for `nn.Conv(features, (3, 3), padding='SAME')`: same parameter
names, shapes and initialisers, so checkpoints and initial values are interchangeable
between implementations. Its `impl` picks the backward pass: 'xla' (autodiff of
`lax.conv_general_dilated`), 'blocked' (the above), or 'auto' (blocked on the CPU backend,
XLA's own everywhere else, where its convolutions are fast).
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

_DIMENSION_NUMBERS = ('NHWC', 'HWIO', 'NHWC')

# Pixels per block of the weight gradient. Measured on a 2-core x86 CPU (AMD EPYC, jax
# 0.10.2): blocks of ~500-2000 output pixels run 1.3-2x faster than blocks of ~16k pixels
# (the patch matrix then stays in cache); see docs/performance.md.
_BLOCK_PIXELS = 1024

IMPLS = ('auto', 'xla', 'blocked')


def _xla_conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
  return lax.conv_general_dilated(x, kernel, (1, 1), 'SAME',
                                  dimension_numbers=_DIMENSION_NUMBERS)


def _rows_per_block(height: int, width: int) -> int:
  """The largest divisor of `height` with at most max(1, _BLOCK_PIXELS // width) rows."""
  rows = max(1, min(height, _BLOCK_PIXELS // width))
  while height % rows:
    rows -= 1
  return rows


def conv3x3_weight_grad(x: jax.Array, g: jax.Array) -> jax.Array:
  """Gradient of a 3x3 'same' convolution with respect to its kernel.

  Args:
    x: the convolution's input, [N, H, W, C_in].
    g: the cotangent of its output, [N, H, W, C_out].

  Returns:
    dL/dkernel, [3, 3, C_in, C_out] (HWIO), accumulated in float32 and returned in
    x's dtype.
  """
  n, h, w, cin = x.shape
  cout = g.shape[-1]
  rows = _rows_per_block(h, w)
  blocks = h // rows
  # Channel-major padded input, so a block's nine windows stack into a [9 * C_in, pixels]
  # matrix without a transpose inside the loop.
  xt = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))).transpose(0, 3, 1, 2)

  def body(acc, index):
    image, block = index // blocks, index % blocks
    xs = lax.dynamic_slice(xt, (image, 0, block * rows, 0), (1, cin, rows + 2, w + 2))[0]
    gs = lax.dynamic_slice(g, (image, block * rows, 0, 0), (1, rows, w, cout))[0]
    patches = jnp.stack([xs[:, dy:dy + rows, dx:dx + w] for dy in range(3) for dx in range(3)])
    acc = acc + jnp.dot(patches.reshape(9 * cin, rows * w), gs.reshape(rows * w, cout),
                        preferred_element_type=jnp.float32)
    return acc, None

  acc, _ = lax.scan(body, jnp.zeros((9 * cin, cout), jnp.float32), jnp.arange(n * blocks))
  return acc.reshape(3, 3, cin, cout).astype(x.dtype)


@jax.custom_vjp
def conv3x3_blocked(x: jax.Array, kernel: jax.Array) -> jax.Array:
  """3x3 'same' convolution (NHWC, HWIO) whose weight gradient is `conv3x3_weight_grad`."""
  return _xla_conv(x, kernel)


def _blocked_fwd(x, kernel):
  return _xla_conv(x, kernel), (x, kernel)


def _blocked_bwd(residuals, g):
  x, kernel = residuals
  # The input gradient is XLA's own (a convolution with the flipped kernel, fast on the
  # CPU); it is dead code, and removed by XLA, where the input needs no gradient.
  _, input_vjp = jax.vjp(functools.partial(_xla_conv, kernel=kernel), x)
  (dx,) = input_vjp(g)
  return dx, conv3x3_weight_grad(x, g).astype(kernel.dtype)


conv3x3_blocked.defvjp(_blocked_fwd, _blocked_bwd)


def resolve_impl(impl: str) -> str:
  """Maps 'auto' to 'blocked' on the CPU backend and 'xla' elsewhere.

  Raises:
    ValueError: for a name not in IMPLS.
  """
  if impl not in IMPLS:
    raise ValueError(f'Unknown conv_impl {impl!r}; expected one of {IMPLS}.')
  if impl == 'auto':
    return 'blocked' if jax.default_backend() == 'cpu' else 'xla'
  return impl


def conv3x3(x: jax.Array, kernel: jax.Array, impl: str = 'auto') -> jax.Array:
  """3x3 'same' convolution, NHWC input and HWIO kernel, with the backward pass `impl`."""
  if resolve_impl(impl) == 'blocked':
    return conv3x3_blocked(x, kernel)
  return _xla_conv(x, kernel)


class Conv3x3(nn.Module):
  """`nn.Conv(features, (3, 3), padding='SAME')` with a selectable backward pass.

  Attributes:
    features: output channels.
    dtype: computation dtype (parameters stay float32).
    impl: 'auto', 'xla' or 'blocked' (see the module docstring).
  """

  features: int
  dtype: jnp.dtype = jnp.float32
  impl: str = 'auto'

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    # Same names, shapes and initialisers as nn.Conv, so parameters are interchangeable.
    kernel = self.param('kernel', nn.initializers.lecun_normal(),
                        (3, 3, x.shape[-1], self.features), jnp.float32)
    bias = self.param('bias', nn.initializers.zeros_init(), (self.features,), jnp.float32)
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
    return conv3x3(x, kernel, self.impl) + bias
