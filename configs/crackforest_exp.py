"""Table I, row wce_exp (beta = 0.75, gamma = 1, 10 epochs): exponential WCE on CrackForest.

`--config=configs/crackforest_exp.py:cpu` shrinks it for a 2-core CPU: widths 16...256,
two epochs of 300 steps (the paper's full U-Net takes ~10 s a step there).
"""

from configs import base


def get_config(arg: str | None = None):
  c = base.get_config()
  c.dataset = 'crackforest'
  c.loss.weighting = 'exp'
  c.loss.beta = 0.75
  c.loss.gamma = 1.0
  c.num_epochs = 10
  if arg == 'cpu':
    c.widths = (16, 32, 64, 128, 256)
    c.num_epochs = 2
  elif arg:
    raise ValueError(f"Unknown config argument {arg!r}; the only one is 'cpu'.")
  return c
