"""A config turned into the plain data the parts below experiment/ take (issue 46 item 2).

`plain(config)` converts a ConfigDict once: the whole config as nested dicts, which the
validation, `crackjax.experiment.build` and the specs below read. The registries
(`crackjax.data.registry`, `crackjax.data.mixture`, `crackjax.models`,
`crackjax.losses`, `crackjax.data.augment`) take a config group as a plain mapping: what
``config.<group>.to_dict()`` gives, or that group of a recorded config.json. The loader takes
a `crackjax.data.loader.LoaderSpec`, a fresh state's initial weights a
`crackjax.models.pretrained.InitSpec`, a run's fingerprint and header the config as
config.json records it (`recorded`). Each is derived here from a ConfigDict, so that nothing
below experiment/ reads one (tests/test_architecture.py lists who may import ml_collections).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeAlias

import ml_collections

from crackjax.data import loader
from crackjax.models import pretrained

#: A whole config as plain data (`plain`): nested dicts, values as the config holds them.
Plain: TypeAlias = Mapping[str, Any]
#: A config as the experiment layer takes it: a ConfigDict or its plain data.
Config: TypeAlias = ml_collections.ConfigDict | Plain


def plain(config: Config) -> Plain:
  """The whole config as plain data: a ConfigDict as a new dict, its groups (``data``,
  ``model``, ``loss``, ``augment``, ...) dicts, its values as the config holds them (tuples
  stay tuples), in name order; plain data already is, and is returned as it is (not copied:
  nothing here writes to it)."""
  if isinstance(config, ml_collections.ConfigDict):
    return config.to_dict()
  return config


def data_group(config: Config) -> Mapping[str, Any]:
  """``config.data`` as plain data (`plain`): what the dataset registry, a mixture, the
  folder stream and `loader.crop_size` take."""
  return plain(config)['data']


def recorded(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The config as config.json records it: plain JSON data (tuples become lists). A run's
  fingerprint (`crackjax.runs.identity.fingerprint`) and header (`crackjax.runs.logs.run_header`)
  are of it."""
  return json.loads(config.to_json_best_effort())


def loader_spec_of(config: Config) -> loader.LoaderSpec:
  """What the train iterator of `config`'s run reads (`loader.create_train_iterator`).

  Raises:
    ValueError: ``config.data.input_size`` is neither None nor (H, W).
  """
  c = plain(config)
  data = c['data']
  return loader.LoaderSpec(
    batch_size=c['batch_size'],
    seed=int(c['seed']),
    crop_size=loader.crop_size(data),
    noise_std=float(data.get('noise_std', 0.0) or 0.0),
    scale_range=loader.scale_range(data),
    jpeg=loader.jpeg(data),
    dataset=str(data.get('name', '')),
    train_split=str(data.get('train_split', 'train')),
  )


def init_spec_of(config: Config) -> pretrained.InitSpec:
  """Where a fresh state of `config`'s run takes its initial weights from
  (`pretrained.initialise`): ``config.model_init`` (absent: from scratch) and the model's
  name."""
  c = plain(config)
  init = c.get('model_init') or {}
  return pretrained.InitSpec(
    model=c['model']['name'],
    pretrained=init.get('pretrained'),
    normalization=init.get('normalization', 'auto'),
    start_step=int(init.get('start_step', 0) or 0),
  )
