"""Segmentation models. `get_model(name, **kwargs)` looks a name up in `MODELS`."""

from collections.abc import Callable

import flax.linen as nn

from crackjax.models.unet import UNet

# Explicit table: name -> constructor taking keyword arguments.
MODELS: dict[str, Callable[..., nn.Module]] = {
    'unet': UNet,
}


def get_model(name: str, **kwargs) -> nn.Module:
  """Returns the linen Module `name` built with `kwargs`.

  Raises:
    ValueError: if `name` is not in MODELS.
  """
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}; expected one of {sorted(MODELS)}.')
  return MODELS[name](**kwargs)
