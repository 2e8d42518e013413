"""A seconds-long CPU run: tiny U-Net, a few steps. Tests use it end to end.

Equivalent to `configs/crackforest_exp.py:smoke`. Point manual_dir at a (fixture or real)
CrackForest archive, e.g. `--config.data.manual_dir=../shared/datasets/crackforest`.
"""

from crackjax.configs import crackforest_exp


def get_config(arg: str | None = None):
  """The smoke config; it takes no argument (configs/crackforest_exp.py:<variant> does)."""
  if arg:
    raise ValueError(
      f'Unknown config argument {arg!r}: configs/smoke.py takes none; for another size use '
      'configs/crackforest_exp.py:<variant> (cpu, cpu_scale, smoke).'
    )
  return crackforest_exp.get_config('smoke')
