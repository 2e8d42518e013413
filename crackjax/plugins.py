"""Plugins: the importable modules that register the models, losses, datasets or evaluation
protocols a config uses.

Something crackjax does not ship is registered by a module of its own
(`crackjax.models.register_model`, `crackjax.losses.register_loss`,
`crackjax.data.registry.register_dataset`, `crackjax.evaluation.register_protocol`), and a
config that uses it names that module in its optional field ``plugins``, a tuple of importable
module names (``c.plugins = ('my_models',)``; absent from configs/base.py, so configs without
plugins keep their JSON and their run fingerprint). Every command that builds an experiment
from a config imports them first (`import_plugins`, called by
`crackjax.experiment.validation.check_config`): training, and prediction, export and
crackjax-evaluate, which rebuild the experiment from a run's config.json and so find the
plugin by its name alone, in a fresh process. docs/architecture.md has a recipe for each kind.

Registering in the config file itself is not enough: a config file is loaded from its path,
not imported by name, so a later process reading config.json could not register the entry
again. `crackjax.experiment.validation.check_config` reports such an entry (`unrebuildable`)
before anything runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any


def plugin_names(config: Mapping[str, Any]) -> tuple[str, ...]:
  """The module names of ``config.plugins`` (empty when the field is absent).

  Raises:
    ValueError: if the field is not a sequence of non-empty strings (naming it).
  """
  plugins = config.get('plugins') or ()
  if isinstance(plugins, str) or not isinstance(plugins, Sequence):
    raise ValueError(
      f"config.plugins={plugins!r} must be a tuple of importable module names, e.g. ('my_models',)."
    )
  bad = [p for p in plugins if not isinstance(p, str) or not p]
  if bad:
    raise ValueError(f'config.plugins={tuple(plugins)!r} holds {bad!r}, not module names.')
  return tuple(plugins)


def import_plugins(config: Mapping[str, Any]) -> tuple[str, ...]:
  """Imports every module named by ``config.plugins``, so that what they register exists,
  and returns their names (`plugin_names`).

  Importing is all a plugin needs: its module registers its entries at import
  time. A module already imported is not imported again.

  Args:
    config: a whole config (its optional ``plugins`` field is read).

  Raises:
    ValueError: naming the module and the field, for a module that cannot be imported (with
      the import's own error), or a field that is not a tuple of module names.
  """
  names = plugin_names(config)
  for name in names:
    try:
      importlib.import_module(name)
    except Exception as e:  # any failure of the plugin's import, told as the config's problem
      raise ValueError(
        f'config.plugins names module {name!r}, which cannot be imported '
        f'({type(e).__name__}: {e}); it must be importable by name (on PYTHONPATH or '
        'installed) in every process that trains, predicts or exports the run.'
      ) from e
  return names


#: The opt-in that lets a model file's plugins be imported, as each place names it.
ALLOW_FLAG = '--allow_plugins'
ALLOW_ARGUMENT = 'allow_plugins'


def model_file_plugins(
  where: str, names: Sequence[str], allowed: Sequence[str] = (), *, how: str | None = None
) -> None:
  """The rule for the plugins a model file names: a model file never imports code.

  A name is used if this process has already imported that module (the user did, or the
  user's own config's ``plugins``) or if the user allowed it (`allowed`: ``--allow_plugins``,
  ``Predictor.from_pretrained(..., allow_plugins=...)``), and only then imported; the file
  alone never causes an import. Released models name none.

  Args:
    where: the file, for the message.
    names: the modules the file names (its ``crackjax.plugins`` and its config's ``plugins``).
    allowed: the modules the user allows to be imported.
    how: the way to allow them, for the message (default: pass the flag or the argument).

  Raises:
    ValueError: one line naming the file, the modules not imported and the way to allow them.
  """
  missing = [n for n in dict.fromkeys(names) if n not in sys.modules and n not in allowed]
  if missing:
    how = how or (
      f'pass {ALLOW_FLAG}={",".join(missing)} (Python: {ALLOW_ARGUMENT}={missing!r} of '
      'Predictor.from_pretrained / load_model)'
    )
    raise ValueError(
      f'{where} needs plugin module(s) {missing} (its crackjax.plugins), which this process has '
      'not imported; a model file never imports the code it names. If you trust the file and '
      f'its plugins, import them first or {how}.'
    )
  for name in names:
    if name not in sys.modules:
      try:
        importlib.import_module(name)
      except Exception as e:  # the plugin's own failure, told as the file's need
        raise ValueError(
          f'{where} needs plugin module {name!r}, which cannot be imported '
          f'({type(e).__name__}: {e}); install it or put it on PYTHONPATH.'
        ) from e


def register(table: dict[str, Any], kind: str, name: str, entry: Any, module: str) -> Any:
  """Adds `entry` (a frozen dataclass with a ``module`` field) to the registry `table` as
  registered by `module`, and returns it as registered: the one rule of every registry's
  ``register_*`` (models, losses, datasets, protocols).

  Raises:
    ValueError: if `name` is taken by crackjax or by another module (`kind` names the
      registry in the message); the same module registering again replaces its own entry,
      so importing a plugin twice is harmless.
  """
  taken = table.get(name)
  if taken is not None and taken.module != module:
    owner = 'crackjax' if taken.module is None else f'module {taken.module!r}'
    raise ValueError(f'{kind} {name!r} is already registered by {owner}; choose another name.')
  table[name] = dataclasses.replace(entry, module=module)
  return table[name]


def registering_module(depth: int = 2) -> str:
  """The ``__name__`` of the module whose code called the registering function.

  `depth` counts frames up from this function: 2 is the caller of the function that called
  this one (``register_model``'s caller).
  """
  # Recorded rather than asked for: a plugin calls register_model('x', entry) at import time,
  # and the module doing so is what a later process must import to have 'x' again.
  return sys._getframe(depth).f_globals.get('__name__', '?')


def unrebuildable(field: str, name: str, module: str | None, plugins: Sequence[str]) -> str | None:
  """Why a run could not rebuild registered entry `name` from its config.json, or None.

  Args:
    field: the config field naming the entry, dotted: 'model.name', 'loss.name', 'data.name'
      or 'eval.protocols' (a tuple of names).
    name: the entry's name.
    module: the module that registered it; None for an entry crackjax ships.
    plugins: ``config.plugins``.

  Returns:
    None when the entry is crackjax's own or its module is one of `plugins`; else one line
    naming the entry, its module and what to do.
  """
  # Exactly the module: importing a package does not always import the submodule that
  # registers (only if the package's __init__ does), so a package name would not be proof.
  if module is None or module in plugins:
    return None
  where = f'config.{field}={name!r}' if field.endswith('.name') else f'{name!r} of config.{field}'
  return (
    f'{where} is registered by module {module!r}, which config.plugins does not name (a config '
    'file is loaded from its path and cannot be imported by name): prediction, export and '
    'crackjax-evaluate rebuild the run from its config.json by importing '
    f'config.plugins={tuple(plugins)!r}, so they could not rebuild it. Register it in an '
    "importable module and name that module in config.plugins, e.g. c.plugins = ('my_plugin',)."
  )
