"""Train on your own folder of images and masks (docs/datasets.md, "Your own images").

  python launch.py --config=configs/crack_folder.py --workdir=workdirs/roads \\
      --config.data.folder.images=roads/images --config.data.folder.masks=roads/masks \\
      --config.data.input_size='(320, 480)'

The CrackForest wce_exp recipe (exponential WCE, beta = 0.75, 10 epochs of 300 steps). Images
of different sizes need --config.data.input_size=(H, W) (multiples of 16, at most the smallest
image): training takes random crops of that size; evaluation always uses whole images.
`:cpu` shrinks the U-Net (widths 16...256, 2 epochs); `:smoke` is a seconds-long run (tests).
"""

from crackjax.configs import base


def get_config(arg: str | None = None):
  c = base.get_config()
  c.data.name = 'crack_folder'
  c.loss.weighting = 'exp'
  c.loss.beta = 0.75
  c.num_epochs = 10
  return base.apply_variant(c, arg)
