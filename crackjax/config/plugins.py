"""The modules a config names in ``config.plugins``, imported before its parts are built.

A model or loss that is not part of crackjax registers itself (`crackjax.models.MODELS`,
`crackjax.losses.LOSSES`) when its module is imported. A config that uses one names that
module in the optional field ``plugins`` (a tuple of importable module names); the field is
recorded in the run's config.json, so prediction and export, which rebuild the model from
config.json, import the same modules and find the same entries.
"""

from __future__ import annotations

import importlib
from typing import Any


def import_plugins(config: Any) -> None:
  """Imports every module of ``config.plugins`` (absent or empty: nothing).

  Raises:
    ValueError: a named module cannot be imported (the message names it and the field).
  """
  names = config.get('plugins') if hasattr(config, 'get') else None
  for name in tuple(names or ()):
    try:
      importlib.import_module(name)
    except ImportError as e:
      raise ValueError(
        f'config.plugins names {name!r}, which cannot be imported ({e}); put the module on '
        'PYTHONPATH or install it.'
      ) from e
