"""Table I, row wce_exp (beta = 0.75, gamma = 1, 10 epochs): exponential WCE on CrackForest.

`--config=configs/crackforest_exp.py:cpu` shrinks it for a 2-core CPU (widths 16...256, two
epochs of 300 steps) and `:smoke` to seconds; see `base.VARIANTS`.
"""

from crackjax.configs import base


def get_config(arg: str | None = None):
  c = base.get_config()
  c.data.name = 'crackforest'
  c.loss.weighting = 'exp'
  c.loss.beta = 0.75
  c.num_epochs = 10
  return base.apply_variant(c, arg)
