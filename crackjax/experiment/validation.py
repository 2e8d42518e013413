"""One validation pass over a whole config, before any data is prepared or anything compiled.

`check_config(config)` reads the config as plain data (`specs.plain`: one conversion, the
whole config as nested dicts), imports its plugins (crackjax/plugins.py), checks that a later
process could rebuild its model, loss, dataset and protocols from config.json, checks every
enum, range and size multiple it can without data and raises one `ConfigError` listing every
problem, each naming the field, its value and what is valid; on success it returns the `Parts`
it built (model, loss, augmentation), which `crackjax.experiment.build` hands to the
experiment, so the config is validated and its parts built once. `check_data(data, sizes,
model)` runs once the dataset is prepared (`build.check_data`): the train image sizes against
``data.input_size``. launch.py prints the message on one line per problem, without a
traceback.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import linen as nn

from crackjax import losses, models, plugins
from crackjax.data import augment, loader, mixture, photometric
from crackjax.data import registry as data_registry
from crackjax.engine import learning_rate
from crackjax.evaluation import PROTOCOLS, threshold_choice
from crackjax.experiment import specs
from crackjax.models import input_multiple, model_from_config, model_schema, pretrained

# The kinds of config.model and config.loss fields, by their declared defaults: shared with
# the model file's schema, which checks a file's crackjax.model the same way.
from crackjax.models.model_schema import type_problems


class ConfigError(ValueError):
  """The config cannot be run; the message lists every problem, one per line."""


@dataclasses.dataclass(frozen=True)
class Parts:
  """What a valid config builds, once: the model (`models.model_from_config`), the loss
  (`losses.loss_from_config`) and the augmentation (`augment.augment_fn`)."""

  model: nn.Module
  loss_fn: losses.LossFn
  augment_fn: augment.AugmentFn


def _built(fn: Callable[[], object], problems: list[str]) -> object | None:
  """`fn()`, or None with its ValueError's message appended to `problems`."""
  try:
    return fn()
  except ValueError as e:
    problems.append(str(e))
    return None


def _field(c: specs.Plain, field: str) -> Any:
  """The value of dotted `field` (``'eval.num_thresholds'``) in `c`, or None if absent."""
  value: Any = c
  for part in field.split('.'):
    value = value.get(part) if isinstance(value, Mapping) else None
  return value


def _positive(c: specs.Plain, field: str, *, minimum: float = 1, integer: bool = True) -> list[str]:
  value = _field(c, field)
  kind = int if integer else (int, float)
  if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
    what = 'an integer' if integer else 'a number'
    return [f'config.{field}={value!r} must be {what} >= {minimum}.']
  return []


def _loss_defaults(name: Any) -> dict[str, Any]:
  """The keyword defaults of loss `name`'s factory (its ``config.loss`` fields)."""
  entry = losses.LOSSES.get(name) if isinstance(name, str) else None
  if entry is None:
    return {}
  parameters = inspect.signature(entry.build).parameters.values()
  return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _multiple_suggestion(size: int, multiple: int) -> str:
  low = size // multiple * multiple
  return f'{low} or {low + multiple}' if low else f'{multiple}'


def check_config(config: specs.Config, *, training: bool = True) -> Parts:
  """The model, loss and augmentation of `config`, built once (`crackjax.experiment.build`).

  Args:
    config: a ConfigDict, or the same config as plain data (`specs.plain`).
    training: False for a run's recorded config rebuilt elsewhere (prediction, export,
      scoring): the pretrained file and the batch split over this machine's devices concern
      only a new training and are not checked.

  Raises:
    ConfigError: listing every problem of `config` found without reading data.
  """
  c = specs.plain(config)
  problems: list[str] = []
  # First: the plugins register the models, losses, datasets and protocols that the checks
  # below look up.
  names = _built(lambda: plugins.import_plugins(c), problems)
  problems += _plugin_problems(c, names)
  problems += _data_problems(c)
  # Each field of the model and loss groups of the kind its registry entry declares; a group
  # with a field of the wrong kind is not built (its error would only repeat this one).
  model_group, loss_group = c['model'], c['loss']
  entry = models.MODELS.get(model_group.get('name'))
  model_types = type_problems('model', model_group, entry.config if entry else {})
  loss_types = type_problems('loss', loss_group, _loss_defaults(loss_group.get('name')))
  problems += model_types + loss_types
  model = None if model_types else _built(lambda: model_from_config(model_group), problems)
  loss_fn = None if loss_types else _built(lambda: losses.loss_from_config(loss_group), problems)
  augment_fn = _built(lambda: augment.augment_fn(c['augment']), problems)
  problems += _input_size_problems(c, model)
  problems += _run_problems(c, training=training)
  if problems:
    raise ConfigError('\n'.join(problems))
  return Parts(model=model, loss_fn=loss_fn, augment_fn=augment_fn)


def _data_problems(c: specs.Plain) -> list[str]:
  """The dataset's name (or a mixture's members), a folder's mask rule, the noise and the
  augmentation's ranges."""
  problems: list[str] = []
  data = c['data']
  if mixture.is_mixture(data):
    problems += mixture.problems(data)
  elif data.get('name') not in data_registry.DATASETS:
    problems.append(
      f'config.data.name={data.get("name")!r} is not a dataset; known: '
      f'{sorted(data_registry.DATASETS)}.'
    )
  folder = data.get('folder')
  if folder is not None:
    if folder.get('mask_polarity') not in ('bright', 'dark', 'auto'):
      problems.append(
        f'config.data.folder.mask_polarity={folder.get("mask_polarity")!r} is not one of '
        "['auto', 'bright', 'dark']."
      )
    threshold = folder.get('mask_threshold')
    if not isinstance(threshold, float | int) or not 0 < threshold < 1:
      problems.append(f'config.data.folder.mask_threshold={threshold!r} must be in (0, 1).')
  problems += _positive(c, 'data.noise_std', minimum=0, integer=False)
  problems += _scale_range_problems(data.get('scale_range', (1.0, 1.0)))
  problems += _jpeg_problems(data)
  for name in (
    'rotation_range',
    'width_shift_range',
    'height_shift_range',
    'shear_range',
    'zoom_range',
  ):
    problems += _positive(c, f'augment.{name}', minimum=0, integer=False)
  return problems + photometric.problems(c['augment'])


def _scale_range_problems(value: Any) -> list[str]:
  """``data.scale_range``: (low, high) with 0 < low <= high."""
  ok = (
    isinstance(value, tuple | list)
    and len(value) == 2
    and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    and all(math.isfinite(v) for v in value)
    and 0 < value[0] <= value[1]
  )
  if ok and value[1] / value[0] <= 16:
    return []
  return [
    f'config.data.scale_range={value!r} must be (low, high) with 0 < low <= high <= 16 * low '
    '(e.g. (0.5, 2.0); (1.0, 1.0): photos as stored).'
  ]


def _jpeg_problems(data: Mapping[str, Any]) -> list[str]:
  """``data.jpeg_probability`` in [0, 1]; ``data.jpeg_quality`` (low, high), integers with
  1 <= low <= high <= 100."""
  problems = []
  p = data.get('jpeg_probability', 0.0)
  if not isinstance(p, int | float) or isinstance(p, bool) or not 0 <= p <= 1:
    problems.append(f'config.data.jpeg_probability={p!r} must be in [0, 1] (0: never).')
  q = data.get('jpeg_quality', loader.JPEG_NEVER[1:])
  ok = (
    isinstance(q, tuple | list)
    and len(q) == 2
    and all(isinstance(v, int) and not isinstance(v, bool) for v in q)
    and 1 <= q[0] <= q[1] <= 100
  )
  if not ok:
    problems.append(
      f'config.data.jpeg_quality={q!r} must be (low, high), integers with 1 <= low <= high '
      '<= 100 (e.g. (30, 95)).'
    )
  return problems


def _input_size_problems(c: specs.Plain, model: nn.Module | None) -> list[str]:
  """``data.input_size``: None or (H, W), multiples of the model's input multiple (checked
  when the model was built)."""
  size = c['data'].get('input_size')
  if size is None:
    return []
  if (
    not isinstance(size, tuple | list)
    or len(size) != 2
    or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
  ):
    return [f'config.data.input_size={size!r} must be None or (H, W), two positive integers.']
  if model is None:
    return []
  multiple = input_multiple(model)
  bad = [v for v in size if v % multiple]
  if not bad:
    return []
  hint = ', '.join(f'{v} -> {_multiple_suggestion(v, multiple)}' for v in bad)
  return [
    f'config.data.input_size={tuple(size)} must be multiples of {multiple} (the '
    f'{c["model"]["name"]} model halves the image {int(math.log2(multiple))} times); '
    f'nearest valid: {hint}.'
  ]


def _run_problems(c: specs.Plain, *, training: bool) -> list[str]:
  """The run's numbers (learning rate, batch, steps, epochs, logging, checkpoints), the
  evaluation group and, for a new training, the batch split over this machine's devices, the
  pretrained file and the data folder."""
  problems = _positive(c, 'learning_rate', minimum=1e-12, integer=False)
  for field in (
    'batch_size',
    'steps_per_epoch',
    'num_epochs',
    'log_every_steps',
    'max_checkpoints_to_keep',
    'eval.num_thresholds',
  ):
    problems += _positive(c, field)
  problems += _positive(c, 'eval.num_qualitative', minimum=0)
  batch = c.get('batch_size')
  if training and isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
    n = jax.device_count()
    if batch % n:
      problems.append(
        f'config.batch_size={batch} must be divisible by the number of devices '
        f'({n}): the batch is split evenly over them.'
      )
  ev = c['eval']
  protocols = tuple(ev.get('protocols') or ())
  unknown = [p for p in protocols if p not in PROTOCOLS]
  if not protocols or unknown:
    problems.append(
      f'config.eval.protocols={protocols!r} must be a non-empty tuple of {sorted(PROTOCOLS)}.'
    )
  problems += _eval_problems(ev)
  problems += learning_rate.problems(c)
  pretrained_path = (c.get('model_init') or {}).get('pretrained')
  if training and pretrained_path:  # here, not when the model is initialised after the data
    problems += [p for p in [pretrained.not_a_file(pretrained_path)] if p]
  if training:  # a run rebuilt to predict or export reads no dataset
    problems += [p for p in [_not_a_folder('data.data_dir', c['data'].get('data_dir'))] if p]
  return problems


def _not_a_folder(field: str, value: Any) -> str | None:
  """Why the folder of config field `field` cannot be one (a file there, or above it), or
  None: checked with the config, before TFDS's '[Errno 17] File exists' named no flag."""
  if not isinstance(value, str) or not value:
    return None
  path = Path(os.path.expanduser(value)).absolute()
  existing = path
  while not existing.exists() and existing != existing.parent:
    existing = existing.parent
  if existing.is_dir():
    return None
  where = 'is a file' if existing == path else f'is inside {existing}, a file'
  return (
    f'--config.{field}={value} {where}, not a folder; name a folder (created if missing) '
    'for the prepared datasets.'
  )


def _plugin_problems(c: specs.Plain, names: tuple[str, ...] | None) -> list[str]:
  """The model, loss, dataset or protocols that a later process could not rebuild from the
  run's config.json: registered by a module that ``config.plugins`` (`names`) does not name
  (crackjax/plugins.py). None: the field was reported already (`plugins.import_plugins`)."""
  if names is None:
    return []
  # (config field, the names it holds, their registry): an unknown name is reported below.
  used = [
    ('model.name', [c['model'].get('name')], models.MODELS),
    ('loss.name', [c['loss'].get('name')], losses.LOSSES),
    ('data.name', [c['data'].get('name')], data_registry.DATASETS),
  ]
  for field in ('protocols', 'curve_protocols'):
    value = c['eval'].get(field) or ()
    listed = list(value) if isinstance(value, tuple | list) else []
    used.append((f'eval.{field}', listed, PROTOCOLS))
  problems = []
  for field, used_names, table in used:
    for name in dict.fromkeys(used_names):  # each once, in order
      if isinstance(name, str) and name in table:
        problem = plugins.unrebuildable(field, name, table[name].module, names)
        problems += [problem] if problem else []
  return problems


def _eval_problems(ev: Mapping[str, Any]) -> list[str]:
  """The periodic evaluation's fields (configs/base.py: eval.every_epochs, curve_protocols,
  full_epochs, background_workers), the test-time scales and flip and the photo threshold."""
  problems = []
  over = ev.get('threshold_over', 'pooled')
  if over not in threshold_choice.THRESHOLD_OVER:
    problems.append(
      f'config.eval.threshold_over={over!r} must be one of {list(threshold_choice.THRESHOLD_OVER)}'
      " (pooled: the split's pooled ODS; datasets: a mixture's datasets alike)."
    )
  every = ev.get('every_epochs', 0)
  if isinstance(every, bool) or not isinstance(every, int) or every < 0:
    problems.append(f'config.eval.every_epochs={every!r} must be an integer >= 0 (0: off).')
  curve = tuple(ev.get('curve_protocols') or ())
  if any(p not in PROTOCOLS for p in curve):
    problems.append(
      f'config.eval.curve_protocols={curve!r} must be a tuple of {sorted(PROTOCOLS)} (empty: '
      'eval.protocols).'
    )
  full = ev.get('full_epochs') or ()
  if not isinstance(full, tuple | list) or not all(
    isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in full
  ):
    problems.append(f'config.eval.full_epochs={full!r} must be a tuple of epochs >= 1.')
  workers = ev.get('background_workers', 0)
  if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
    problems.append(
      f'config.eval.background_workers={workers!r} must be an integer >= 0 (0: score in the '
      'training loop).'
    )
  for field in ('tail_thresholds', 'save_probability_maps', 'store_degenerate_threshold'):
    expected = model_schema.boolean(ev[field]) if field in ev else None
    if expected:  # a string 'false' is true to Python
      problems.append(f'config.eval.{field}={ev[field]!r}: expected {expected}.')
  # The test-time fields (scales, flip, photo_threshold, width_rule) as a model file's schema
  # judges its own: one rule each, in one place.
  return problems + [f'{p}.' for p in model_schema.test_time_problems(ev, 'config.eval.')]


def train_image_sizes(source: Sequence[dict[str, Any]]) -> dict[tuple[int, int], int]:
  """(H, W) -> number of train images of that size in `source` (decodes every image)."""
  sizes: dict[tuple[int, int], int] = {}
  for i in range(len(source)):
    h, w = np.asarray(source[i]['image']).shape[:2]
    sizes[(int(h), int(w))] = sizes.get((int(h), int(w)), 0) + 1
  return sizes


def check_data(
  data: Mapping[str, Any], sizes: dict[tuple[int, int], int], model: nn.Module
) -> None:
  """Raises ConfigError if the train images (`sizes`, `train_image_sizes`) do not fit
  ``data.input_size`` (`data`: the config's ``data`` group as plain data).

  Without input_size every train image must have one size, a multiple of the model's input
  multiple; with it, every train image must be at least that large (crops cannot grow).
  """
  if not sizes:
    raise ConfigError(
      f'Split {data.get("train_split", "train")!r} of dataset {data.get("name")!r} holds no images.'
    )
  multiple = input_multiple(model)
  if mixture.is_mixture(data):
    # A mixture's train records are mirrored up to the crop size (data.loader._pad_to): any
    # size fits, but the crop size is the one shape the train step sees.
    size = data.get('input_size')
    if size is None:
      raise ConfigError(
        'A mixture of datasets needs config.data.input_size=(H, W): its members differ in size.'
      )
    if size[0] % multiple or size[1] % multiple:
      raise ConfigError(f'config.data.input_size={tuple(size)} must be multiples of {multiple}.')
    return
  min_h = min(h for h, _ in sizes)
  min_w = min(w for _, w in sizes)
  fits = (min_h // multiple * multiple, min_w // multiple * multiple)
  hint = (
    f"--config.data.input_size='{fits}' (random crops; the largest multiple of {multiple} "
    'that fits every train image)'
  )
  listed = ', '.join(f'{h}x{w} ({n})' for (h, w), n in sorted(sizes.items())[:5])
  size = data.get('input_size')
  if size is None:
    if len(sizes) > 1:
      raise ConfigError(
        f'The train images of {data.get("name")!r} differ in size (HxW: {listed}'
        f'{", ..." if len(sizes) > 5 else ""}) and config.data.input_size is None; set '
        f'{hint}.'
      )
    (h, w), _ = next(iter(sizes.items()))
    if h % multiple or w % multiple:
      raise ConfigError(
        f'The train images of {data.get("name")!r} are {h}x{w} (HxW), not multiples of '
        f'{multiple}, and config.data.input_size is None; set {hint}.'
      )
    return
  if size[0] > min_h or size[1] > min_w:
    raise ConfigError(
      f'config.data.input_size={tuple(size)} is larger than the smallest train image '
      f'({min_h}x{min_w} HxW; sizes: {listed}); crops cannot grow an image; set {hint}.'
    )
