"""BJN260, wce_exp (beta = 0.75, 15 epochs) on the 480x320 images (§IV-D).

Needs datasets/BJN260 of shiyanrubing/CarNet_databases (tfds_builders/bjn260/README.md):
  python launch.py --config=configs/bjn260_exp.py --workdir=workdirs/bjn260_exp \\
      --config.data.manual_dir=DIR

Full 480x320 images (multiples of 16) as input, 200 training / 60 test images.
`:cpu` shrinks it for a 2-core CPU.
"""

from crackjax.configs import base


def get_config(arg: str | None = None):
  c = base.get_config()
  c.data.name = 'bjn260'
  c.loss.weighting = 'exp'
  c.loss.beta = 0.75
  c.num_epochs = 15
  return base.apply_variant(c, arg)
