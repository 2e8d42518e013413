"""Train on your own folder of images and masks (docs/datasets.md, "Your own images").

  python launch.py --config=configs/crack_folder.py --workdir=workdirs/roads \\
      --config.folder.images=roads/images --config.folder.masks=roads/masks \\
      --config.input_size='(320, 480)'

The CrackForest wce_exp recipe (exponential WCE, beta = 0.75, 10 epochs of 300 steps). Images
of different sizes need --config.input_size=(H, W) (multiples of 16, at most the smallest
image): training takes random crops of that size; evaluation always uses whole images.
`:cpu` shrinks the U-Net (widths 16...256, 2 epochs); `:smoke` is a seconds-long run (tests).
"""

from configs import base


def get_config(arg: str | None = None):
  c = base.get_config()
  c.dataset = 'crack_folder'
  c.loss.weighting = 'exp'
  c.loss.beta = 0.75
  c.loss.gamma = 1.0
  c.num_epochs = 10
  if arg == 'cpu':
    c.widths = (16, 32, 64, 128, 256)
    c.num_epochs = 2
  elif arg == 'smoke':  # configs/smoke.py's sizes.
    c.widths = (4, 8, 16, 32, 64)
    c.batch_size = 2
    c.steps_per_epoch = 3
    c.num_epochs = 2
    c.log_every_steps = 1
    c.max_checkpoints_to_keep = 2
  elif arg:
    raise ValueError(f"Unknown config argument {arg!r}; known: 'cpu', 'smoke'.")
  return c
