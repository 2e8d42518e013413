"""3x3 'same' convolution + ReLU with a CPU-friendly backward pass.

XLA's CPU backend computes the forward pass and the input gradient of a 3x3 convolution
well, but its weight gradient (a convolution whose "kernel" is the whole feature map) runs
at a small fraction of the machine's matmul speed: for a 64->64 layer on a 2 x 160 x 240
batch it takes about 20x the forward pass (docs/performance.md). The 'blocked'
implementation keeps XLA's forward pass and input gradient and computes the weight
gradient itself as a sum of matrix products over blocks of about a thousand output pixels
(`conv3x3_weight_grad`): each block's nine shifted windows (im2col of one block, which
stays in cache) times the other operand. A `lax.scan` over the blocks keeps only one
block's windows alive; building the whole im2col at once needs 9x a layer's input,
gigabytes for this U-Net.

Its custom VJP also fuses bias and ReLU and keeps only the layer's inputs and its output
for the backward pass (the ReLU's gradient is read off the output), and takes the
U-Net's skip and up-sampled maps as separate inputs so their concatenation is never
stored.

`Conv3x3ReLU` is a drop-in for `relu(nn.Conv(features, (3, 3), padding='SAME')(x))`: same
parameter names, shapes and initialisers, so checkpoints and initial values are
interchangeable between implementations. Its `impl` picks the backward pass: 'xla'
(autodiff of `lax.conv_general_dilated`), 'blocked' (the above), or 'auto' (blocked on
the CPU backend, XLA's own everywhere else, where its convolutions are fast).
"""

import functools
import itertools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

_DIMENSION_NUMBERS = ('NHWC', 'HWIO', 'NHWC')

# Pixels per block of the weight gradient. Measured on a 2-core x86 CPU (AMD EPYC, jax
# 0.10.2): blocks of ~500-2000 output pixels run 1.3-2x faster than blocks of ~16k pixels
# (the windows then stay in cache), and smaller ones lose to per-iteration overhead;
# see docs/performance.md.
_BLOCK_PIXELS = 1024

IMPLS = ('auto', 'xla', 'blocked')


def xla_conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
  return lax.conv_general_dilated(x, kernel, (1, 1), 'SAME', dimension_numbers=_DIMENSION_NUMBERS)


def _rows_per_block(height: int, width: int) -> int:
  """The largest divisor of `height` with at most max(1, _BLOCK_PIXELS // width) rows."""
  rows = max(1, min(height, _BLOCK_PIXELS // width))
  while height % rows:
    rows -= 1
  return rows


def _padded(a: jax.Array) -> jax.Array:
  return jnp.pad(a, ((0, 0), (1, 1), (1, 1), (0, 0)))


def _windows(block: jax.Array, rows: int, width: int, flip: bool) -> jax.Array:
  """The nine shifted [rows, width, C] windows of a padded block, concatenated along C.

  Window (dy, dx) starts at (dy, dx), or at (2 - dy, 2 - dx) when `flip`.
  """
  offsets = [(2 - dy, 2 - dx) if flip else (dy, dx) for dy in range(3) for dx in range(3)]
  return jnp.concatenate([block[a : a + rows, b : b + width] for a, b in offsets], axis=-1)


def conv3x3_weight_grad(xs: jax.Array | Sequence[jax.Array], g: jax.Array) -> jax.Array:
  """Gradient of a 3x3 'same' convolution with respect to its kernel.

  dW[dy, dx, i, o] = sum_{n,h,w} x_pad[n, h + dy, w + dx, i] g[n, h, w, o]
                   = sum_{n,h,w} x[n, h, w, i] g_pad[n, h + 2 - dy, w + 2 - dx, o].

  A `lax.scan` over blocks of about _BLOCK_PIXELS output pixels (whole rows of one image)
  builds, for each block, the nine shifted windows of whichever operand has fewer channels
  (the first form when C_in < C_out, the second otherwise) side by side as a
  [pixels, 9 * C] matrix and adds one matrix product to the accumulator. Everything stays
  channels-last: no transposed copy of a feature map is made, and only one block's windows
  are alive at a time.

  Args:
    xs: the convolution's input, [N, H, W, C_in], or a sequence of arrays whose
      concatenation along channels is the input.
    g: the cotangent of its output, [N, H, W, C_out].

  Returns:
    dL/dkernel, [3, 3, C_in, C_out] (HWIO), accumulated in float32 and returned in
    g's dtype.
  """
  xs = (xs,) if isinstance(xs, jax.Array) else tuple(xs)
  n, h, w, _ = xs[0].shape
  cin = sum(x.shape[-1] for x in xs)
  cout = g.shape[-1]
  rows = _rows_per_block(h, w)
  blocks = h // rows
  windows_of_x = cin < cout
  if windows_of_x:
    xs = (_padded(_concat(xs)),)  # the encoder's layers: one input, few channels
  else:
    g = _padded(g)
  halo = 2  # the padded operand's block has two more rows

  def block_of(a, image, block, padded):
    size = (1, rows + halo if padded else rows, a.shape[2], a.shape[3])
    return lax.dynamic_slice(a, (image, block * rows, 0, 0), size)[0]

  def dot_tn(a, b):  # a^T @ b over the block's pixels
    return lax.dot_general(
      a.reshape(rows * w, -1),
      b.reshape(rows * w, -1),
      (((0,), (0,)), ((), ())),
      preferred_element_type=jnp.float32,
    )

  def body(accs, index):
    image, block = index // blocks, index % blocks
    if windows_of_x:
      windows = _windows(block_of(xs[0], image, block, True), rows, w, flip=False)
      products = (dot_tn(windows, block_of(g, image, block, False)),)
    else:
      windows = _windows(block_of(g, image, block, True), rows, w, flip=True)
      products = tuple(dot_tn(block_of(x, image, block, False), windows) for x in xs)
    return tuple(a + p for a, p in zip(accs, products, strict=True)), None

  if windows_of_x:
    init = (jnp.zeros((9 * cin, cout), jnp.float32),)
  else:
    init = tuple(jnp.zeros((x.shape[-1], 9 * cout), jnp.float32) for x in xs)
  accs, _ = lax.scan(body, init, jnp.arange(n * blocks))
  if windows_of_x:
    dw = accs[0].reshape(3, 3, cin, cout)
  else:
    dw = jnp.concatenate(accs, axis=0).reshape(cin, 3, 3, cout).transpose(1, 2, 0, 3)
  return dw.astype(g.dtype)


def _concat(xs):
  return xs[0] if len(xs) == 1 else jnp.concatenate(xs, axis=-1)


@jax.custom_vjp
def conv3x3_relu_blocked(
  xs: tuple[jax.Array, ...], kernel: jax.Array, bias: jax.Array
) -> jax.Array:
  """relu(conv3x3(concat(xs), kernel) + bias) with a memory-lean, CPU-fast backward pass.

  The backward pass keeps only the inputs `xs` and the output as residuals: the ReLU's
  gradient is read off the output (y > 0), so neither a pre-activation nor a mask is
  stored, and the channel concatenation of `xs` (the U-Net's skip and up-sampled maps)
  is never stored either. Both are tensors the network keeps anyway, so the layer adds
  no memory of its own to the backward pass. The weight gradient is `conv3x3_weight_grad`.
  """
  return _relu_conv_fwd(xs, kernel, bias)


def _relu_conv_fwd(xs, kernel, bias):
  return jax.nn.relu(xla_conv(_concat(xs), kernel) + bias)


def _blocked_fwd(xs, kernel, bias):
  y = _relu_conv_fwd(xs, kernel, bias)
  return y, (xs, kernel, y)


def _input_grad(g: jax.Array, kernel: jax.Array, x_shape) -> jax.Array:
  """dL/dx of `xla_conv(x, kernel)` for the output cotangent `g` (x of `x_shape`)."""
  (dx,) = jax.linear_transpose(
    functools.partial(xla_conv, kernel=kernel), jax.ShapeDtypeStruct(x_shape, g.dtype)
  )(g)
  return dx


def _blocked_bwd(residuals, g):
  xs, kernel, y = residuals
  g = jnp.where(y > 0, g, jnp.zeros_like(g))
  dbias = jnp.sum(g, axis=(0, 1, 2), dtype=jnp.float32).astype(y.dtype)
  # The input gradient is XLA's own (the transposed convolution, fast on the CPU); it
  # needs no primal values, and XLA removes it where the input needs no gradient (the image).
  # One transposed convolution per input, with that input's rows of the kernel, so the
  # gradient of the concatenation is never materialised and split (a strided copy).
  ends = list(itertools.accumulate(x.shape[-1] for x in xs))
  dxs = tuple(
    _input_grad(g, kernel[:, :, end - x.shape[-1] : end], x.shape)
    for x, end in zip(xs, ends, strict=True)
  )
  dkernel = conv3x3_weight_grad(xs, g).astype(kernel.dtype)
  return dxs, dkernel, dbias


conv3x3_relu_blocked.defvjp(_blocked_fwd, _blocked_bwd)


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


def conv3x3_relu(
  xs: Sequence[jax.Array], kernel: jax.Array, bias: jax.Array, impl: str = 'auto'
) -> jax.Array:
  """relu(conv3x3(concat(xs), kernel) + bias), NHWC inputs, HWIO kernel.

  'xla' is plain autodiff of the composition; 'blocked' is `conv3x3_relu_blocked`; both
  compute the same function and the same gradients up to float rounding.
  """
  xs = tuple(xs)
  if resolve_impl(impl) == 'blocked':
    return conv3x3_relu_blocked(xs, kernel, bias)
  return _relu_conv_fwd(xs, kernel, bias)


class Conv3x3ReLU(nn.Module):
  """`relu(nn.Conv(features, (3, 3), padding='SAME')(concat(xs)))` with a chosen backward.

  Called with one or more NHWC arrays, which it treats as their concatenation along
  channels (without storing that concatenation for the backward pass).

  Attributes:
    features: output channels.
    dtype: computation dtype (parameters stay float32).
    impl: 'auto', 'xla' or 'blocked' (see the module docstring).
  """

  features: int
  dtype: jnp.dtype = jnp.float32
  impl: str = 'auto'

  @nn.compact
  def __call__(self, *xs: jax.Array) -> jax.Array:
    cin = sum(x.shape[-1] for x in xs)
    # Same names, shapes and initialisers as nn.Conv, so parameters are interchangeable.
    kernel = self.param(
      'kernel', nn.initializers.lecun_normal(), (3, 3, cin, self.features), jnp.float32
    )
    bias = self.param('bias', nn.initializers.zeros_init(), (self.features,), jnp.float32)
    kernel, bias = (a.astype(self.dtype) for a in (kernel, bias))
    return conv3x3_relu(tuple(x.astype(self.dtype) for x in xs), kernel, bias, self.impl)
