"""CrackSeg (Song, Jia, Zhu, Jia and Gao, "Automated pavement crack damage detection using deep
multiscale convolutional features", J. Adv. Transportation 2020, article 6412562), a comparison
model of Li et al. (2021), Tables VII and VIII (53.87M parameters). A reconstruction: no code
was published, and only the paper's outline could be read here.

What the sources say. Li et al. (2021): CrackSeg is "based on Deeplab v3+" and on ResNet50, and,
like DeepLab v3+, uses "no feature information before the first and second down-sampling" (its
decoder's finest input is the stride-4 map). Song et al.'s abstract and Figure 2 caption: a
backbone, then a "multiscale dilated convolution module" that captures crack features at several
scales; in the up-sampling module these are fused with the high-resolution features of the
shallow network, and "three 3x3 convolution operations" follow, whose output feeds a binary
(crack / background) pixel classifier.

The design here, as DeepLab v3+ (crackjax/models/deeplabv3plus.py, whose ResNet-50 backbone,
crackjax/models/backbones.py, and parameter names it shares, so the same ImageNet weights load into
both; crackjax/models/pretrained.py):

* ResNet-50 backbone (torchvision layout, no fully connected layer) at output stride 16 (layer4
  dilated with multi-grid rates 2, 4, 8), or 8.
* Multiscale dilated convolution module on layer4's 2048 channels: parallel 3x3 convolutions
  + BN + ReLU to 256 channels with dilation rates `rates` (default 1, 2, 4, 6, 12, 18 at output
  stride 16, doubled at 8), concatenated and projected by a 1x1 convolution + BN + ReLU to 256.
  With `image_pooling` an image-pooling branch is added as in DeepLab's ASPP.
* Decoder: layer1's output (stride 4) projected by a 1x1 convolution + BN + ReLU to 48
  channels; the module's output bilinearly up-sampled to stride 4 and concatenated with it; the
  three 3x3 convolutions + BN + ReLU (256 channels); a 1x1 convolution with bias to the class
  scores, bilinearly up-sampled to the input. As SegNet and DeepLab v3+ here, n_classes=2 (the
  binary softmax classifier, the default) returns logit_crack - logit_background.

What is uncertain, and the count. The number of parallel branches, their rates and whether the
module keeps ASPP's 1x1 and image-pooling branches are not in what could be read, and no
natural variant gives exactly 53.87M: ResNet-50 (23,508,032) + the decoder with three 3x3
convolutions (1,893,984) + the classifier (257 n) leave 28.47M for the module, while each
3x3 2048 -> 256 branch with its BN costs 4,719,104 and its share of the projection 65,536.
DeepLab's own ASPP (1x1, rates 6/12/18, image pooling: 15,535,104) would give 40.94M; five
dilated branches 49.33M; the six here 54,110,882 (n = 2; 54,110,625 for n = 1): 54.11M, 0.45 %
above the paper's figure, the closest of these (six branches with ASPP's 1x1 and pooling
branches too: 55.29M). The rates do not change the count; the defaults extend DeepLab's 6,
12, 18 with 1, 2, 4 for the thin structures cracks are, an assumption. Dropout, if the original
had any, is left out (the train step draws no dropout keys), as in deeplabv3plus.py.

The paper's complexity column (197.47 G at 512 x 512, 116.67 G at 480 x 320) is 1.95x its
DeepLab v3+ figure (101.16 G), which crackjax's layer-by-layer count of that DeepLab (69.4 G)
does not reproduce either; `crackjax.paper.complexity` reports this model's own count (about 93 G at
512 x 512 at output stride 16) beside the paper's.

Input: images in [0, 1], not normalised (conv1 is followed by BatchNorm; ImageNet weights, when
given, have the normalisation folded into conv1: crackjax/models/pretrained.py). H and W must be
multiples of 16.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from crackjax.models.backbones import RESNET50_LAYERS
from crackjax.models.batchnorm import ConvBN
from crackjax.models.deeplabv3plus import ResNet50Segmenter, image_pooling

# Channels of each branch of the multiscale dilated convolution module and of its projection.
MODULE_WIDTH = 256
# Dilation rates of the module's branches at output stride 16 (doubled at 8).
RATES = (1, 2, 4, 6, 12, 18)


class CrackSeg(ResNet50Segmenter):
  """CrackSeg (ResNet-50, multiscale dilated convolutions, stride-4 fusion, three 3x3 convs)
  returning one crack logit per pixel (module docstring).

  Attributes:
    n_classes: class scores of the classifier: 2 (default, the binary softmax classifier;
      54,110,882 parameters) returns logit_crack - logit_background, 1 (54,110,625) its map.
    output_stride: 16 (default) or 8; the module's rates are doubled at 8.
    rates: dilation rates of the module's parallel 3x3 branches at output stride 16; the
      number of branches sets the parameter count (4,784,640 each, projection included).
    image_pooling: add DeepLab's image-pooling branch (global average, 1x1 + BN + ReLU) to
      the module (+590,336 parameters).
    width_scale: multiplies every width (ResNet's, the module's 256, the decoder's 48 and
      256; rounded, at least 1); small values give CPU-sized tests.
    blocks: bottleneck blocks of ResNet's four layers; (3, 4, 6, 3) is ResNet-50, fewer only
      to make CPU tests compile faster.
    dtype: computation dtype (parameters stay float32; logits are float32).
  """

  n_classes: int = 2
  output_stride: int = 16
  rates: Sequence[int] = RATES
  image_pooling: bool = False
  width_scale: float = 1.0
  blocks: Sequence[int] = tuple(n for _, n in RESNET50_LAYERS)
  dtype: jnp.dtype = jnp.float32

  # The 3x3 convolutions after the fusion with the stride-4 features (Song et al., Figure 2).
  decoder_convs = 3

  def __post_init__(self):
    if not self.rates or not all(isinstance(r, int) and r >= 1 for r in self.rates):
      raise ValueError(f'CrackSeg rates must be positive integers; got {self.rates}.')
    super().__post_init__()

  def context_module(self, x: jax.Array, train: bool) -> jax.Array:
    """The multiscale dilated convolution module (module docstring)."""
    conv = dict(use_bias=False, dtype=self.dtype)
    module = self._width(MODULE_WIDTH)
    scale = 16 // self.output_stride
    branches = [
      ConvBN(module, 3, dilation=scale * rate, name=f'msd{i}', **conv)(x, train)
      for i, rate in enumerate(self.rates, start=1)
    ]
    if self.image_pooling:
      branches.append(image_pooling(x, module, 'msd_pool', train, self.dtype))
    return ConvBN(module, 1, name='msd_project', **conv)(jnp.concatenate(branches, axis=-1), train)
