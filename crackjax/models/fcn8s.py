"""FCN-8s (Long, Shelhamer and Darrell, CVPR 2015), the Caffe ``voc-fcn8s`` net.

The comparison model of Li et al. 2021, Table V (134.27M parameters). Layer by layer as in
Caffe's ``voc-fcn8s/net.py``:

* VGG16 conv1_1 ... conv5_3, 3x3 + ReLU; conv1_1 pads by 100, the others by 1. A 2x2
  stride-2 max-pool ends each of the five stages, in Caffe's ceil mode (an odd size keeps its
  last row/column as a window of its own).
* fc6 as a 7x7 conv 512 -> 4096 without padding, fc7 as a 1x1 conv 4096 -> 4096, each with
  ReLU. Caffe follows both with dropout (0.5); it is omitted here (it is the identity at
  inference, and the model contract calls the Module without a train flag).
* score_fr (1x1 -> n_classes); upscore2 (4x4 stride-2 transposed conv); score_pool4 (1x1
  512 -> n_classes) cropped and added; upscore_pool4 (4x4 stride 2); score_pool3 (1x1
  256 -> n_classes) cropped and added; upscore8 (16x16 stride 8); a crop to the input size.
  The transposed convolutions have no bias (Caffe's ``bias_term: false``) and start as
  bilinear interpolation of each class onto itself (Caffe's ``surgery.interp``); they are
  learnable. The score layers start at zero, as Caffe's (default constant filler).

Crop offsets. Map every feature position to the input coordinate of its centre: conv1_1
(pad 100) maps y to y - 99, 'same' 3x3 convs keep it, a 2x2 pool maps i to 2i + 0.5, fc6
(7x7 valid) i to i + 3, and a k x k stride-s transposed conv (no padding) puts input i at
output s*i + (k - 1) / 2. Then pool3 position i sits at 8i - 95.5, pool4 at 16i - 91.5,
score_fr at 32i + 12.5, upscore2 at 16j - 11.5, upscore_pool4 at 8j - 23.5 and upscore8 at
j - 31. Aligning them gives Caffe's offsets, for every input size: score_pool4 is cropped
from 5 (16(j + 5) - 91.5 = 16j - 11.5), score_pool3 from 9 and the final score from 31.
The 100-pixel padding leaves every crop inside its map for any input size, so H and W need
not be multiples of anything (`input_multiple` is 1).

Classes and the parameter count. The backbone (conv1_1 ... fc7, with biases) has
134,260,544 parameters; the head adds 4867 n + 288 n**2 (three 1x1 score convs with biases,
three bias-free transposed convs with n x n kernels of 16 + 16 + 256 taps). n = 21 (VOC) gives
134,489,759 (134.49M), n = 1 gives 134,265,699 and n = 2 gives 134,271,430 = 134.27M (both
round to 134.27M; n = 2 is the closer one and is the net that a crack/background softmax
trains). The default is therefore n_classes=2, as in Caffe's two-class FCN, and the Module
returns the crack-minus-background logit difference, logit_1 - logit_0: sigmoid of it equals
the softmax probability of class 1, so the crackjax losses (sigmoid on one logit) train
exactly the two-class softmax. With n_classes=1 the single score map is returned as is.

Input. Images in [0, 1], RGB; the Caffe ImageNet mean (BGR 104.01, 116.67, 122.68 on
0...255, here in RGB order and divided by 255) is subtracted, with no rescaling: Caffe's VGG
weights expect 0...255, but crackjax trains from scratch, where the [0, 1] range suits the
default initialisers.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from crackjax.models.backbones import VGG16_STAGES
from crackjax.models.layers import WidthScaled, check_n_classes, crack_logit

# Caffe VGG16's ImageNet mean, RGB order, in [0, 1].
IMAGENET_MEAN_RGB = (122.67891434 / 255, 116.66876762 / 255, 104.00698793 / 255)

FC_WIDTH = 4096

# Crop offsets (module docstring): score_pool4, score_pool3, the final score.
CROP_POOL4, CROP_POOL3, CROP_FINAL = 5, 9, 31


def bilinear_kernel(size: int) -> np.ndarray:
  """The [size, size] bilinear up-sampling filter of Caffe's ``surgery.upsample_filt``."""
  factor = (size + 1) // 2
  center = factor - 1 if size % 2 == 1 else factor - 0.5
  og = np.arange(size)
  filt = 1 - np.abs(og - center) / factor
  return np.outer(filt, filt)


def bilinear_init(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
  """Initialiser of a [k, k, n, n] transposed-conv kernel: bilinear from each channel to itself.

  As Caffe's ``surgery.interp``: channel i is up-sampled onto channel i, the rest are zero.
  """
  del key
  k, k2, n_in, n_out = shape
  if k != k2 or n_in != n_out:
    raise ValueError(f'Bilinear initialisation needs a square kernel and n -> n; got {shape}.')
  kernel = np.zeros(shape, np.float32)
  kernel[:, :, np.arange(n_in), np.arange(n_in)] = bilinear_kernel(k)[:, :, None]
  return jnp.asarray(kernel, dtype)


def max_pool_ceil(x: jax.Array) -> jax.Array:
  """2x2 stride-2 max-pooling of [B, H, W, C] in Caffe's ceil mode (output ceil(H/2))."""
  padding = ((0, x.shape[1] % 2), (0, x.shape[2] % 2))  # padded with -inf by reduce_window
  return nn.max_pool(x, (2, 2), strides=(2, 2), padding=padding)


def crop_like(x: jax.Array, offset: int, like: jax.Array) -> jax.Array:
  """x[:, offset:offset + h, offset:offset + w] with (h, w) the spatial size of `like`."""
  h, w = like.shape[1:3]
  if x.shape[1] < offset + h or x.shape[2] < offset + w:
    raise ValueError(f'Cannot crop {(h, w)} at {offset} from a map of size {x.shape[1:3]}.')
  return x[:, offset : offset + h, offset : offset + w]


class FCN8s(WidthScaled):
  """FCN-8s returning one crack logit per pixel (module docstring).

  Attributes:
    n_classes: score channels; 2 (default: crack and background, 134,271,430 parameters, the
      paper's 134.27M) returns logit_crack - logit_background, 1 returns its single map.
    width_scale: multiplies every channel width (VGG's 64...512 and the fc layers' 4096;
      rounded, at least 1); 1.0 is the paper's model, small values give CPU-sized tests.
    dtype: computation dtype (parameters stay float32).
  """

  n_classes: int = 2
  width_scale: float = 1.0
  dtype: jnp.dtype = jnp.float32

  def __post_init__(self):
    check_n_classes('FCN8s', self.n_classes)
    super().__post_init__()

  @property
  def input_multiple(self) -> int:
    """Any input size works: conv1_1's 100-pixel padding keeps every crop inside its map."""
    return 1

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """Maps images [B, H, W, 3] in [0, 1] to crack logits [B, H, W, 1] (float32)."""
    image = x
    x = (x - jnp.asarray(IMAGENET_MEAN_RGB, x.dtype)).astype(self.dtype)
    pools = []
    for stage, (width, convs) in enumerate(VGG16_STAGES, start=1):
      for i in range(1, convs + 1):
        padding = 100 if (stage, i) == (1, 1) else 1
        x = nn.Conv(
          self._width(width),
          (3, 3),
          padding=((padding, padding), (padding, padding)),
          dtype=self.dtype,
          name=f'conv{stage}_{i}',
        )(x)
        x = nn.relu(x)
      x = max_pool_ceil(x)
      pools.append(x)
    pool3, pool4 = pools[2], pools[3]

    fc = self._width(FC_WIDTH)
    x = nn.relu(nn.Conv(fc, (7, 7), padding='VALID', dtype=self.dtype, name='fc6')(x))
    x = nn.relu(nn.Conv(fc, (1, 1), dtype=self.dtype, name='fc7')(x))

    def score(name):
      return nn.Conv(
        self.n_classes, (1, 1), kernel_init=nn.initializers.zeros, dtype=self.dtype, name=name
      )

    def upscore(size, stride, name):
      return nn.ConvTranspose(
        self.n_classes,
        (size, size),
        strides=(stride, stride),
        padding='VALID',
        use_bias=False,
        kernel_init=bilinear_init,
        dtype=self.dtype,
        name=name,
      )

    x = upscore(4, 2, 'upscore2')(score('score_fr')(x))
    x = x + crop_like(score('score_pool4')(pool4), CROP_POOL4, x)
    x = upscore(4, 2, 'upscore_pool4')(x)
    x = x + crop_like(score('score_pool3')(pool3), CROP_POOL3, x)
    x = upscore(16, 8, 'upscore8')(x)
    return crack_logit(crop_like(x, CROP_FINAL, image))
