"""Segmentation models. `get_model(name, **kwargs)` looks a name up in `MODELS`."""

from collections.abc import Callable

import flax.linen as nn
import jax.numpy as jnp
import ml_collections

from crackjax.models.conv import resolve_impl
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


# config.compute_dtype -> the dtype of activations and convolutions.
COMPUTE_DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


def model_from_config(config: ml_collections.ConfigDict) -> nn.Module:
  """The model `config.model` with the config's widths, conv_impl and compute_dtype.

  Raises:
    ValueError: for an unknown model, conv_impl or compute_dtype.
  """
  if config.compute_dtype not in COMPUTE_DTYPES:
    raise ValueError(f'config.compute_dtype={config.compute_dtype!r} is not one of '
                     f'{sorted(COMPUTE_DTYPES)}.')
  resolve_impl(config.conv_impl)  # fails early on a mistyped name
  return get_model(config.model, widths=tuple(config.widths), conv_impl=config.conv_impl,
                   dtype=COMPUTE_DTYPES[config.compute_dtype])
