"""U-CliqueNet (Li, Ma, He, Ren and Liu, "Automatic tunnel crack detection based on U-Net and a
convolutional neural network with alternately updated clique", Sensors 20(3):717, 2020), a
comparison model of Li et al. (2021), Tables V-VIII (487.77K parameters). A reconstruction: no
code was published, and only the paper's outline could be read here.

What the sources say. Li, Ma et al. (2020): U-CliqueNet integrates CliqueNet's clique blocks
(Yang et al., CVPR 2018) into U-Net and adds an attention mechanism to the down-sampling (i.e.
CliqueNet's attentional transition). Li et al. (2021): "there are 4 layers in the clique blocks
of U-CliqueNet". CliqueNet's public code (github.com/iboing/CliqueNet; TensorFlow for CIFAR,
PyTorch for ImageNet) fixes the block, the transition and the initialisation used here.

Clique block (CliqueNet, `CliqueBlock`): input X0 and T = 4 layers of k channels, every pair of
layers connected both ways. Stage I: layer i = W(X0, X1 ... X_{i-1}); Stage II (one loop):
layer i = W(every other layer's newest value), with the same edge weights W_ji as Stage I
(weights shared between the stages, the point of CliqueNet). Each update is pre-activation:
BatchNorm and ReLU on the concatenated inputs, then the edge convolutions. With the bottleneck
(CliqueNet's option B, always used by its ImageNet model) the edges are 1x1 convolutions and
each layer adds its own BN + ReLU + 3x3 convolution k -> k (shared between the stages too; each
stage has its own BatchNorms, as in the PyTorch code). Convolutions have no bias and start from
N(0, 2 / (k_h k_w C_out)) (CliqueNet's init, `batchnorm.conv_init`). The block returns the
block feature {X0, Stage II} (CliqueNet(II+II), its best variant) and the Stage-II feature.

U-Net layout: a 3x3 convolution 3 -> 64 (CliqueNet's first layer), then `levels` encoder levels,
each a clique block whose block feature is the skip connection and whose Stage-II feature
goes through the attentional transition (BN, ReLU, 1x1 convolution C -> C, channel attention
[global average, fully connected C -> C/2 + ReLU, C/2 -> C + sigmoid, rescale], 2x2 average
pooling); a clique block at the bottom; then per level up a 2x2 stride-2 transposed convolution
(C -> C, no bias), concatenation with the skip, and a clique block; finally BN, ReLU and a 1x1
convolution with bias to the class scores. As SegNet here, n_classes=2 (a softmax over crack
and background, the default) returns logit_crack - logit_background, n_classes=1 its map.
CliqueNet's dropout (keep 0.8) is left out: the train step draws no dropout keys.

What is uncertain, and the count. The paper's growth rate k, its number of levels, what the
skip connection carries and how it up-samples are not in what could be read. They are chosen
here so that the parameters *and* the paper's complexity column fit together: that column
(38.52 G at 480 x 320, 65.57 G at 512 x 512, 34.06 G at 448 x 304) is 250.1-250.8 K
multiply-accumulates per pixel for 487.77K parameters, a ratio that clique blocks with 3x3
edges (CliqueNet's CIFAR default) did not reach in any variant tried within 10 % of that count
(constant or growing k, 3 or 4 levels, stems of 16 to 4k channels, either skip, transposed or
bilinear up-sampling: at most 0.46 MACs per pixel per parameter against the paper's 0.51),
while bottleneck blocks with k = 24 at every level and three down-samplings come close to
both: 494,418 parameters (n = 2; 494,321 for n = 1), 1.4 % above 487,770, and 241.7 K MACs per
pixel in the paper's convention (each 2x2 transposed convolution charged 4 taps per output
pixel, as its U-Net figures are; 205.4 K true MACs), 3.4 % below. With four down-samplings
(U-Net's) no k came as close to both. T = 4 is the one figure Li et al. give; k = 24 and the
three levels are fitted, not read.

Input: images in [0, 1]. H and W must be multiples of 2**levels (8 by default).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from crackjax.models.batchnorm import batch_norm, conv_init
from crackjax.models.layers import CrackLogitModel

_DIMENSION_NUMBERS = ('NHWC', 'HWIO', 'NHWC')


def conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
  """'Same' convolution of NHWC `x` with an HWIO kernel (stride 1), in x's dtype."""
  return lax.conv_general_dilated(
    x, kernel.astype(x.dtype), (1, 1), 'SAME', dimension_numbers=_DIMENSION_NUMBERS
  )


class CliqueBlock(nn.Module):
  """CliqueNet's block (module docstring): Stage I, one Stage-II loop, shared edge weights.

  Attributes:
    growth: channels k of each layer.
    layers: number of layers T.
    bottleneck: 1x1 edges and a 3x3 convolution per layer (CliqueNet's option B), else 3x3
      edges.
    dtype: computation dtype (parameters stay float32).
  """

  growth: int
  layers: int = 4
  bottleneck: bool = True
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> tuple[jax.Array, jax.Array]:
    """Returns (the block feature {X0, Stage II}, the Stage-II feature) of x [B, H, W, C]."""
    k, t = self.growth, self.layers
    size = 1 if self.bottleneck else 3

    def edge(j: int, i: int, channels: int) -> jax.Array:  # W_ji: layer j (0: input) -> i
      return self.param(f'w{j}_{i}', conv_init, (size, size, channels, k), jnp.float32)

    into = {i: [edge(0, i, x.shape[-1])] for i in range(1, t + 1)}
    for i in range(1, t + 1):
      into[i] += [edge(j, i, k) for j in range(1, t + 1) if j != i]
    nodes = (
      [self.param(f'node{i}', conv_init, (3, 3, k, k), jnp.float32) for i in range(1, t + 1)]
      if self.bottleneck
      else None
    )

    def update(i: int, inputs: list[jax.Array], kernels: list[jax.Array], stage: int):
      h = jnp.concatenate(inputs, axis=-1) if len(inputs) > 1 else inputs[0]
      h = nn.relu(batch_norm(train, self.dtype, f'stage{stage}_bn{i}')(h))
      h = conv(h, jnp.concatenate(kernels, axis=2))
      if self.bottleneck:
        h = nn.relu(batch_norm(train, self.dtype, f'stage{stage}_bn{i}_b')(h))
        h = conv(h, nodes[i - 1])
      return h

    x = x.astype(self.dtype)
    layer = {}
    for i in range(1, t + 1):  # Stage I: from the input and the layers already computed
      layer[i] = update(i, [x] + [layer[j] for j in range(1, i)], into[i][:i], 1)
    for i in range(1, t + 1):  # Stage II: from every other layer's newest value
      others = [j for j in range(1, t + 1) if j != i]
      layer[i] = update(i, [layer[j] for j in others], into[i][1:], 2)
    stage2 = jnp.concatenate([layer[i] for i in range(1, t + 1)], axis=-1)
    return jnp.concatenate([x, stage2], axis=-1), stage2


class AttentionalTransition(nn.Module):
  """CliqueNet's attentional transition: BN, ReLU, 1x1 conv C -> C (no bias), channel
  attention (average, FC C -> C/2 + ReLU, FC C/2 -> C + sigmoid, rescale), 2x2 average pool.

  Attributes:
    attention: apply the channel attention (CliqueNet's option A; U-CliqueNet uses it).
    dtype: computation dtype.
  """

  attention: bool = True
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    c = x.shape[-1]
    x = nn.relu(batch_norm(train, self.dtype, 'bn')(x))
    x = nn.Conv(c, (1, 1), use_bias=False, kernel_init=conv_init, dtype=self.dtype, name='conv')(x)
    if self.attention:
      a = jnp.mean(x, axis=(1, 2))
      a = nn.relu(nn.Dense(max(1, c // 2), dtype=self.dtype, name='fc1')(a))
      a = nn.sigmoid(nn.Dense(c, dtype=self.dtype, name='fc2')(a))
      x = x * a[:, None, None, :]
    return nn.avg_pool(x, (2, 2), strides=(2, 2))


class UCliqueNet(CrackLogitModel):
  """U-CliqueNet returning one crack logit per pixel (module docstring).

  Attributes:
    n_classes: class scores of the classifier: 2 (default; 494,418 parameters) returns
      logit_crack - logit_background, 1 (494,321) its single map.
    growth: channels k of every clique-block layer (24).
    stem_features: channels of the first 3x3 convolution (CliqueNet's 64).
    layers: layers T of every clique block (Li et al.: 4).
    levels: down-samplings (3); H and W must be multiples of 2**levels.
    attention: channel attention in the transitions (the paper's attention mechanism).
    bottleneck: CliqueNet's bottleneck blocks (1x1 edges + a 3x3 per layer), else 3x3 edges.
    width_scale: multiplies growth and stem_features (rounded, at least 1); small values give
      CPU-sized tests.
    dtype: computation dtype (parameters stay float32; logits are float32).
  """

  n_classes: int = 2
  growth: int = 24
  stem_features: int = 64
  layers: int = 4
  levels: int = 3
  attention: bool = True
  bottleneck: bool = True
  width_scale: float = 1.0
  dtype: jnp.dtype = jnp.float32

  def __post_init__(self):
    for field in ('growth', 'stem_features', 'layers', 'levels'):
      value = getattr(self, field)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f'UCliqueNet {field} must be a positive integer; got {value!r}.')
    if self.layers < 2:
      raise ValueError(f'UCliqueNet layers must be at least 2 (a clique); got {self.layers}.')
    super().__post_init__()

  @property
  def input_multiple(self) -> int:
    """2**levels: every pooled map is then an exact fraction of the input."""
    return 2**self.levels

  def class_scores(self, x: jax.Array, train: bool) -> jax.Array:
    """The stem, the clique blocks down and up, the head."""
    block = dict(
      growth=self._width(self.growth),
      layers=self.layers,
      bottleneck=self.bottleneck,
      dtype=self.dtype,
    )
    x = nn.Conv(
      self._width(self.stem_features),
      (3, 3),
      padding='SAME',
      use_bias=False,
      kernel_init=conv_init,
      dtype=self.dtype,
      name='stem',
    )(x)
    skips = []
    for level in range(self.levels):
      feature, x = CliqueBlock(**block, name=f'down{level}')(x, train)
      skips.append(feature)
      x = AttentionalTransition(self.attention, self.dtype, name=f'transition{level}')(x, train)
    _, x = CliqueBlock(**block, name='bottom')(x, train)
    for level in reversed(range(self.levels)):
      x = nn.ConvTranspose(
        x.shape[-1],
        (2, 2),
        strides=(2, 2),
        use_bias=False,
        kernel_init=conv_init,
        dtype=self.dtype,
        name=f'up{level}',
      )(x)
      _, x = CliqueBlock(**block, name=f'up_block{level}')(
        jnp.concatenate([x, skips[level]], axis=-1), train
      )
    x = nn.relu(batch_norm(train, self.dtype, 'head_bn')(x))
    return nn.Conv(self.n_classes, (1, 1), dtype=self.dtype, name='classifier')(x)
