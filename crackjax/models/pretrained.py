"""Initial weights from a local file: ImageNet VGG16 / ResNet-50 for the comparison models.

FCN8s, HED, RCF, SegNet and DeepCrack start from ImageNet VGG16 in their papers, DeepLab v3+ and
CrackSeg from ImageNet ResNet-50. Those weights cannot be downloaded here; a user who has them
names a local ``.npz`` file in ``config.model_init.pretrained`` and the fresh state of a new run
takes them (`initialise`, called by `crackjax.trainer.loop.restore_or_init` with the run's
`InitSpec` when there is no checkpoint; a resumed run keeps its checkpoint). Without a file
every parameter starts from scratch, and the run says so: a log line and ``<workdir>/init.json``
(``"pretrained": null``), besides ``model_init`` in config.json. docs/pretrained.md has the
conversion recipes.

The file: a ``.npz`` of named arrays (``np.savez(path, **arrays)``), in one of the layouts
(`pretrained_layouts.LAYOUTS`), recognised from its names:

* ``vgg16``: torchvision's ``vgg16().state_dict()`` names, ``features.{0,2,5,...,28}.weight``
  [O, I, 3, 3] and ``.bias``; ``classifier.0`` / ``classifier.3`` (fc6, fc7) load into FCN8s's
  convolutional fc6 (7x7) and fc7 (1x1); ``classifier.6`` (the 1000 classes) is ignored.
* ``vgg16_bn``: torchvision's ``vgg16_bn()`` names, each convolution ``features.i`` followed by
  its BatchNorm ``features.{i+1}`` (weight, bias, running_mean, running_var): SegNet and
  DeepCrack take the BatchNorms too (scale, offset and running averages).
* ``resnet50``: torchvision's ``resnet50()`` names, ``conv1.weight``, ``bn1.*``,
  ``layer{1-4}.{b}.conv{1-3}.weight``, ``...bn{1-3}.*``, ``layer{l}.0.downsample.{0,1}.*``;
  ``fc.*`` is ignored.
* ``crackjax``: crackjax's own paths, ``params/conv1_1/kernel`` (or ``conv1_1/kernel``) and
  ``batch_stats/...``, arrays exactly as crackjax holds them (HWIO kernels): weights moved from
  any run of the same model and width (`export_arrays` writes such a file).

A leading ``module.`` (PyTorch's DataParallel) is dropped from every name. Convolution weights
are transposed from PyTorch's OIHW to flax's HWIO; fc6 [4096, 25088] is reshaped to 7x7x512
first. Every array's shape is checked against the model (the model must be at full width,
width_scale 1.0, for ImageNet weights); any mismatch is one error naming the file's key, its
shape, the crackjax parameter and that parameter's shape. A layer the model lacks (e.g. the
blocks a smoke config leaves out) leaves the file's arrays unused, and a parameter the file
lacks (every head, side output and decoder) starts from scratch; the report lists both.

Input normalisation. crackjax models take RGB images in [0, 1] (FCN8s subtracts the Caffe mean
first: `crackjax.models.fcn8s.IMAGENET_MEAN_RGB`), while torchvision's weights expect
``(x - mean) / std`` with ImageNet's mean and std, and Caffe's 0-255 BGR with its mean
subtracted. Rather than change the models, the normalisation is folded into the first
convolution (conv1_1, or ResNet's conv1): its kernel is divided by std per input channel (and
reversed to RGB for Caffe), and the constant it then lacks is added to its bias, or, for
ResNet's bias-free conv1, taken off bn1's running mean. Exact away from the image border (the
zero padding pads the unnormalised image); ``normalization`` picks the convention ('auto':
torchvision's for torchvision names, none for crackjax paths).
"""

from __future__ import annotations

import dataclasses
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from absl import logging

from crackjax.models import hub, model_file
from crackjax.models.pretrained_layouts import (
  Mapped,
  PretrainedError,
  convert,
  detect_layout,
  flat_variables,
  fold_into_first_conv,
  key_name,
  mapping,
  source_shape,
)
from crackjax.runs import docs, outputs

NORMALIZATIONS = ('auto', 'torchvision', 'caffe', 'none')


@dataclasses.dataclass(frozen=True)
class InitSpec:
  """What a fresh state's initial weights are read from (`initialise`), derived once from the
  config by `crackjax.experiment.specs.init_spec_of`.

  Attributes:
    model: the model's registry name (``config.model.name``): the file's layout is mapped
      onto it.
    pretrained: ``config.model_init.pretrained``: a local .npz, a model file (a released
      name, a .safetensors file or a URL); None or '': every parameter from scratch.
    normalization: ``config.model_init.normalization`` (`NORMALIZATIONS`).
    start_step: ``config.model_init.start_step``: the step a state warm-started from a model
      file begins at (0: step 0).
  """

  model: str
  pretrained: str | None = None
  normalization: str = 'auto'
  start_step: int = 0


@dataclasses.dataclass
class InitReport:
  """What a run's initial weights are (written to init.json).

  Attributes:
    pretrained: the file, or None (everything from scratch).
    layout: the file's layout (`pretrained_layouts.LAYOUTS`).
    normalization: the input normalisation folded into the first convolution ('none' if
      none was).
    loaded: crackjax variables taken from the file ('params/...', 'batch_stats/...').
    from_scratch: crackjax variables the file had nothing for (their fresh initialisation).
    ignored: names in the file that went nowhere.
    loaded_values: number of parameter values (params only) loaded.
    total_values: number of parameter values of the model.
    start_step: the step a warm start begins at (``config.model_init.start_step``; 0: none).
  """

  pretrained: str | None
  layout: str | None = None
  normalization: str = 'none'
  loaded: list[str] = dataclasses.field(default_factory=list)
  from_scratch: list[str] = dataclasses.field(default_factory=list)
  ignored: list[str] = dataclasses.field(default_factory=list)
  loaded_values: int = 0
  total_values: int = 0
  start_step: int = 0

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  def summary(self, limit: int = 8) -> str:
    """One line for the log."""
    if self.pretrained is None:
      return (
        'Initial weights: from scratch, config.model_init.pretrained is not set (all '
        f'{self.total_values:,} parameters start from their random initialisation).'
      )
    params = [p for p in self.loaded if p.startswith('params/')]
    text = (
      f'Initial weights: {len(params)} parameter arrays ({self.loaded_values:,} of '
      f'{self.total_values:,} values) from {self.pretrained} ({self.layout} layout'
    )
    if self.normalization != 'none':
      text += f', {self.normalization} input normalisation folded into the first convolution'
    text += f'); {len(self.loaded) - len(params)} batch-statistics arrays'
    text += f'; from scratch: {_some(self.from_scratch, limit)}'
    text += f'; unused in the file: {_some(self.ignored, limit)}.'
    if self.start_step:
      text += f' A warm start: the run goes on at step {self.start_step}.'
    return text


def _some(names: Sequence[str], limit: int) -> str:
  if not names:
    return 'none'
  shown = ', '.join(names[:limit])
  return f'{shown} and {len(names) - limit} more' if len(names) > limit else shown


def _ordered(paths: Any) -> list[str]:
  """Sorted, parameters before batch statistics."""
  return sorted(paths, key=lambda p: (not p.startswith('params/'), p))


# ------------------------------------------------------------------------------- loading


def is_model_file(spec: str | Path) -> bool:
  """Whether `spec` names a crackjax model file (a released name, a URL or a .safetensors
  path, `crackjax.models.hub`, any of them pinned ``#sha256=<hex>``) rather than a .npz of
  named arrays."""
  text = str(spec)
  if hub.PIN in text and not Path(text).expanduser().exists():
    return True  # a pin is for model files alone (hub.resolve checks it)
  return hub.is_url(text) or hub.entry(text) is not None or text.endswith(model_file.SUFFIX)


# How a fine-tuning allows its start model's plugins (`crackjax.experiment.restored.start_run`
# reads the file, once): a model file never imports code.
FINETUNE_PLUGINS = "name them in the run's config.plugins (c.plugins = ('my_plugin',))"


def not_a_file(path: str | Path) -> str | None:
  """Why `config.model_init.pretrained` = `path` names no file (a folder, or nothing there),
  or None. validation.check_config asks first, so a typo is found before the data is read.
  A released model's name and an http(s) URL are resolved when the model is initialised."""
  if hub.is_url(str(path)) or hub.entry(str(path)) is not None:
    return None
  if hub.PIN in str(path) and not Path(path).expanduser().exists():
    try:
      return not_a_file(hub.split_pin(path)[0])  # the file named, without its pin
    except hub.ModelNotFoundError as e:
      return f'config.model_init.pretrained={str(path)!r}: {e}'
  path = Path(path).expanduser()
  if path.is_dir():
    return f'config.model_init.pretrained={str(path)!r} is a folder; name the .npz file in it.'
  if not path.is_file():
    return (
      f'config.model_init.pretrained={str(path)!r}: no such file (a local .npz of named arrays '
      "or a .safetensors model file, a released model's name or a URL; see "
      f'{docs.doc("pretrained.md")}).'
    )
  return None


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
  """The named arrays of a .npz file ('module.' prefixes dropped).

  Raises:
    PretrainedError: no such file, or not a .npz of arrays.
  """
  path = Path(path).expanduser()
  problem = not_a_file(path)
  if problem:
    raise PretrainedError(problem)
  with path.open('rb') as f:
    magic = f.read(6)
  if not zipfile.is_zipfile(path) and magic != b'\x93NUMPY':
    # np.load takes any other file for a pickle and says so, which misleads.
    raise PretrainedError(f'{path} is not a .npz file (a zip archive of named .npy arrays).')
  try:
    data = np.load(path, allow_pickle=False)
    if not isinstance(data, np.lib.npyio.NpzFile):
      raise PretrainedError(f'{path} is a single array; expected a .npz of named arrays.')
    with data:  # entries are read lazily: a damaged one fails here, inside the try
      arrays = {k.removeprefix('module.'): np.asarray(data[k]) for k in data.files}
  except PretrainedError:
    raise
  except Exception as e:  # noqa: BLE001 - zip, pickle and format errors all mean "not an npz".
    raise PretrainedError(f'{path} cannot be read as a .npz of arrays: {e}') from e
  if not arrays:
    raise PretrainedError(f'{path} holds no arrays.')
  return arrays


def load_arrays(
  arrays: Mapping[str, np.ndarray],
  model: str,
  variables: Mapping[str, Any],
  *,
  normalization: str = 'auto',
  source: str = '<arrays>',
) -> tuple[dict[str, np.ndarray], InitReport]:
  """Maps a file's arrays onto a model's variables, checking every shape.

  Args:
    arrays: the file's named arrays (`load_npz`).
    model: config.model.name.
    variables: the model's variables {'params': ..., 'batch_stats': ...} (arrays or shape
      structs: only shapes and dtypes are read).
    normalization: one of NORMALIZATIONS.
    source: the file's name, for messages.

  Returns:
    ({crackjax variable path: new value (numpy, the variable's dtype)}, the report).

  Raises:
    PretrainedError: unknown layout or normalisation, a layout the model does not take, any
      shape mismatch (all listed), or nothing at all to load.
  """
  if normalization not in NORMALIZATIONS:
    raise PretrainedError(
      f'config.model_init.normalization={normalization!r} is not one of {list(NORMALIZATIONS)}.'
    )
  targets = flat_variables(variables)
  try:
    layout = detect_layout(list(arrays))
  except PretrainedError as e:
    raise PretrainedError(f'{source}: {e}') from None
  if normalization == 'auto':
    normalization = 'none' if layout == 'crackjax' else 'torchvision'
  elif layout == 'crackjax' and normalization != 'none':
    raise PretrainedError(
      f'{source} holds crackjax paths, already in crackjax conventions; '
      f'config.model_init.normalization={normalization!r} applies to torchvision files only.'
    )
  entries = mapping(model, layout, targets)
  if layout == 'crackjax':  # 'conv1_1/kernel' means 'params/conv1_1/kernel'
    arrays = {
      k if k.split('/', 1)[0] in ('params', 'batch_stats') else f'params/{k}': v
      for k, v in arrays.items()
    }
  updates = _fitted(entries, arrays, targets, source=source, model=model, layout=layout)
  if not any(p.startswith('params/') for p in updates):
    raise PretrainedError(
      f'{source} ({layout} layout) has no array for any parameter of model {model!r}.'
    )
  if layout != 'crackjax' and normalization != 'none':
    fold_into_first_conv(updates, model, layout, normalization)
  for path, value in updates.items():
    updates[path] = np.asarray(value, dtype=targets[path].dtype)
  used = {e.key for e in entries if e.path in updates}
  params = {p: x for p, x in targets.items() if p.startswith('params/')}
  report = InitReport(
    pretrained=source,
    layout=layout,
    normalization=normalization,
    loaded=_ordered(updates),
    from_scratch=_ordered(p for p in targets if p not in updates),
    ignored=sorted(k for k in arrays if k not in used),
    loaded_values=sum(int(np.prod(params[p].shape)) for p in updates if p in params),
    total_values=sum(int(np.prod(x.shape)) for x in params.values()),
  )
  return updates, report


def _fitted(
  entries: Sequence[Mapped],
  arrays: Mapping[str, np.ndarray],
  targets: Mapping[str, Any],
  *,
  source: str,
  model: str,
  layout: str,
) -> dict[str, np.ndarray]:
  """{model variable path: the file's array converted to it} for each of `entries` the file
  holds (`load_arrays`).

  Raises:
    PretrainedError: arrays of the wrong shape, all counted and the first five described.
  """
  updates: dict[str, np.ndarray] = {}
  problems: list[str] = []
  for entry in entries:
    if entry.key not in arrays:
      continue
    array, target = np.asarray(arrays[entry.key]), targets[entry.path]
    want = source_shape(entry, target.shape)
    if array.shape != want:
      # The file's name and shape, then what the model needs (in the file's layout), and
      # the model's own path and shape only where they differ from those.
      model_side = '' if entry.path == entry.key else f" for the model's {entry.path}"
      if tuple(target.shape) != tuple(want):
        model_side += f' (stored as {tuple(target.shape)})'
      problems.append(f'{entry.key} has shape {array.shape}; needed {want}{model_side}')
      continue
    updates[entry.path] = convert(entry, array, target.shape)
  if problems:
    width = ''
    if layout != 'crackjax':
      width = ' ImageNet weights need the model at full width (config.model.width_scale=1.0).'
    shown = '; '.join(problems[:5]) + (
      f'; and {len(problems) - 5} more' if len(problems) > 5 else ''
    )
    raise PretrainedError(
      f'{source} does not fit model {model!r}: {len(problems)} array(s) of the wrong shape: '
      f'{shown}.{width}'
    )
  return updates


def export_arrays(variables: Mapping[str, Any], path: str | Path) -> None:
  """Writes a model's variables as a crackjax-layout .npz (for model_init.pretrained)."""
  np.savez(path, **{k: np.asarray(v) for k, v in flat_variables(variables).items()})


# ------------------------------------------------------------------------- the state hook


def _put(value: np.ndarray, like: jax.Array) -> jax.Array:
  """`value` as a global array with `like`'s sharding (every process passes the same value)."""
  return jax.make_array_from_callback(value.shape, like.sharding, lambda index: value[index])


def _replace(tree: Any, prefix: str, updates: Mapping[str, np.ndarray]) -> Any:
  def replace(path, leaf):
    name = '/'.join([prefix, *(key_name(k) for k in path)])
    return _put(updates[name], leaf) if name in updates else leaf

  return jax.tree_util.tree_map_with_path(replace, tree)


def initialise(
  state: Any,
  spec: InitSpec,
  workdir: str | Path | None = None,
  *,
  arrays: Mapping[str, np.ndarray] | None = None,
):
  """The fresh TrainState `state` with the weights of `spec`'s pretrained file if it names one
  (``config.model_init.pretrained``; `InitSpec`).

  Logs what was loaded and what starts from scratch, or that everything does, and writes the
  report to ``<workdir>/init.json`` (process 0). The optimiser state needs no change: Adam's
  moments start at zero whatever the parameters.

  `arrays`: the pretrained file's named arrays, required when it names one: read once by the
  experiment (`crackjax.experiment.build.Experiment.init_arrays`: a .npz by `load_npz`, a
  fine-tuning's start model by `crackjax.experiment.restored.start_run`); nothing is read
  here.

  Raises:
    PretrainedError: no `arrays` for a file, or they do not fit the model.
  """
  path = spec.pretrained
  batch_stats = getattr(state, 'batch_stats', None) or {}
  variables = {'params': state.params, 'batch_stats': batch_stats}
  if not path:
    report = InitReport(
      pretrained=None,
      from_scratch=_ordered(flat_variables(variables)),
      total_values=sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params)),
    )
  else:
    if arrays is None:
      raise PretrainedError(
        f'config.model_init.pretrained={str(path)!r}: read it once with '
        'crackjax.experiment.restored.initial_arrays (Experiment.init_arrays) and pass its arrays.'
      )
    updates, report = load_arrays(
      arrays,
      spec.model,
      variables,
      normalization=spec.normalization,
      source=str(path),
    )
    state = state.replace(params=_replace(state.params, 'params', updates))
    if batch_stats:
      state = state.replace(batch_stats=_replace(batch_stats, 'batch_stats', updates))
    if spec.start_step:  # a warm start: the run goes on at the file's step
      step = np.asarray(spec.start_step, np.asarray(state.step).dtype)
      state = state.replace(step=_put(step, state.step))
      report.start_step = spec.start_step
  logging.info('%s', report.summary())
  if workdir is not None and jax.process_index() == 0:
    Path(workdir).mkdir(parents=True, exist_ok=True)
    (Path(workdir) / 'init.json').write_text(outputs.dumps(report.to_dict(), indent=2) + '\n')
  return state
