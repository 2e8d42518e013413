"""Crack360, wce_exp (beta = 1, 10 epochs): train CrackTree260, test CRKWH100 (§IV-C).

Needs CrackTree260 and CRKWH100 (tfds_builders/crack360/README.md):
  python launch.py --config=configs/crack360_exp.py --workdir=workdirs/crack360_exp \\
      --config.data.manual_dir=DIR

Training images (800x600) are randomly cropped to 512x512; testing uses the whole 512x512
CRKWH100 images. `:cpu` shrinks it for a 2-core CPU.
"""

from crackjax.configs import base


def get_config(arg: str | None = None):
  c = base.get_config()
  c.data.name = 'crack360'
  c.data.input_size = (512, 512)
  c.loss.weighting = 'exp'
  c.loss.beta = 1.0
  c.num_epochs = 10
  return base.apply_variant(c, arg)
