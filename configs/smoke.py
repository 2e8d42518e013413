"""A seconds-long CPU run: tiny U-Net, a few steps. Tests use it end to end.

Point manual_dir at a (fixture or real) CrackForest archive, e.g.
`--config.manual_dir=../shared/datasets/crackforest`.
"""

from configs import base


def get_config():
  c = base.get_config()
  c.dataset = 'crackforest'
  c.widths = (4, 8, 16, 32, 64)
  c.loss.weighting = 'exp'
  c.loss.beta = 0.75
  c.batch_size = 2
  c.steps_per_epoch = 3
  c.num_epochs = 2
  c.log_every_steps = 1
  c.max_checkpoints_to_keep = 2
  return c
