"""DeepCrack (Zou, Zhang, Li, Chen, Cao and Wang, IEEE TIP 2019), a comparison model of
Li et al. (2021), Tables VII and VIII (29.48M parameters).

As described in that paper: SegNet's encoder-decoder (crackjax/models/segnet.py: VGG16-BN
encoder keeping pooling indices, mirrored BN decoder with index unpooling) whose decoder's
last stage ends with a 64 -> 64 conv + BN + ReLU instead of SegNet's classifier; and a
skip-layer fusion: at each of the five scales the output of the encoder stage's last
convolution (conv1_2, conv2_2, conv3_3, conv4_3, conv5_3) and of the decoder stage's last
convolution at the same scale (conv1_1_D, conv2_1_D, ..., conv5_1_D) are concatenated,
reduced by a 1x1 convolution to one side logit map and up-sampled to the input size; a 1x1
convolution over the five side maps gives the fused map. The loss supervises the five side
maps and the fused map (crackjax.losses.side.deepcrack_plain).

The PyTorch file of the DeepCrack repository is a different design (no BatchNorm, 3x3
reductions to 64 channels per scale, a 3x3 fusion; 30.9M parameters); this module follows
the paper, whose count the comparison tables print.

Up-sampling: the paper's deconvolution layers up-sample each side map to the input size;
as in hed.py this is a parameter-free bilinear `jax.image.resize` (the decoder itself
up-samples with pooling indices, which has no parameters either).

Parameter count (biases kept, BN scale and offset counted, running statistics not): the
SegNet body without its classifier 29,443,008, the 64 -> 64 conv1_1_D + BN 37,056, the five
side 1x1 convolutions over 64+64, 128+64, 256+128, 512+256 and 512+512 channels 2,501, the
fusion 6: 29,482,571 = the paper's 29.48M. Side 1x1 kernels start from N(0, 0.01^2) and the
fusion from 1/5, as in hed.py.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from crackjax.models.backbones import vgg16_bn_encoder
from crackjax.models.layers import check_input, fused_outputs, side_conv, upsample_to
from crackjax.models.segnet import SegNetBody, segnet_decoder


class DeepCrack(SegNetBody):
  """DeepCrack: SegNet's body with five deeply supervised side outputs and a learnt fusion.

  Attributes:
    width_scale: multiplies VGG16's widths (1.0: the original 64 ... 512; rounded, at least
      1); small values give CPU-sized tests.
    dtype: computation dtype (parameters stay float32; outputs are float32).
  """

  width_scale: float = 1.0
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(
    self, x: jax.Array, train: bool = False
  ) -> dict[str, jax.Array | tuple[jax.Array, ...]]:
    """Maps images [B, H, W, 3] to {'logits': fused [B, H, W, 1], 'side_logits': 5 maps}.

    Args:
      x: images in [0, 1].
      train: BatchNorm uses (and updates) batch statistics; else its running averages.
    """
    check_input('DeepCrack', x, self.input_multiple)
    height, width = x.shape[1:3]
    x = x.astype(self.dtype)
    x, encoded, indices = vgg16_bn_encoder(x, self.widths, train, self.dtype)
    _, decoded = segnet_decoder(x, indices, self.widths, train, self.dtype)
    sides = []
    for scale, (enc, dec) in enumerate(zip(encoded, decoded, strict=True), start=1):
      side = side_conv(1, self.dtype, f'side{scale}')(jnp.concatenate([enc, dec], axis=-1))
      sides.append(upsample_to(side, height, width))
    return fused_outputs(sides, self.dtype)
