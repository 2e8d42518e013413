"""AigleRN, wce_exp (beta = 1, 15 epochs of 200 steps), U-Net widths 32...512 (§IV-B).

Needs the CrackDataset archive (tfds_builders/aiglern/README.md):
  python launch.py --config=configs/aiglern_exp.py --workdir=workdirs/aiglern_exp \\
      --config.data.manual_dir=DIR

Images are 462 high and 311 or 991 wide; the network sees random 448x304 (H x W) crops, the
paper's "304x448" (multiples of 16 that fit both widths), with Gaussian noise of variance 0.01
(std 0.1) added before the usual augmentation. Some crops hold no crack pixel: alpha is
Laplace-smoothed (crackjax.losses.background_ratio), so q stays finite there.
`:cpu` shrinks it for a 2-core CPU.
"""

from crackjax.configs import base


def get_config(arg: str | None = None):
  c = base.get_config()
  c.data.name = 'aiglern'
  c.data.input_size = (448, 304)
  c.data.noise_std = 0.1
  c.model.widths = (32, 64, 128, 256, 512)
  c.loss.weighting = 'exp'
  c.loss.beta = 1.0
  c.num_epochs = 15
  c.steps_per_epoch = 200
  return base.apply_variant(c, arg)
