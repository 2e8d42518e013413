"""A trained run restored for inference: from its workdir, a bare ``checkpoints/`` folder or a
model file.

* `load_run(workdir)`: the run's recorded config (`read_config`: config.json, else what its
  checkpoints record), its model alone built (after importing its ``plugins``), its
  parameters restored through `checkpoints.restore` (the one restore path, a params-only state)
  and the threshold chosen at that step (`run_threshold`).
* `load_model(spec)`: a model file by released name, path or URL, as the same `Run`.

`crackjax.deploy.predictor.Predictor`, crackjax-predict, crackjax-export and
crackjax-evaluate take their runs from here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import ml_collections

from crackjax import plugins
from crackjax.engine import checkpoints, train_state
from crackjax.engine.checkpoints import CheckpointError
from crackjax.engine.mesh import one_device_mesh
from crackjax.evaluation.result import (
  CHOSEN_BY,
  DATASET,
  SPLIT,
  STEP,
  THRESHOLD,
  degenerate_threshold,
  read_record,
)
from crackjax.evaluation.threshold_choice import chosen_threshold
from crackjax.models import (
  hub,
  init_image_shape,
  model_file,
  model_from_config,
  output_check,
  pretrained,
)


@dataclasses.dataclass(frozen=True)
class Run:
  """What a training run left in its workdir, restored for inference."""

  config: ml_collections.ConfigDict
  model: nn.Module
  params: Any  # host numpy arrays
  step: int
  threshold: float  # crack where probability > threshold
  threshold_source: str
  batch_stats: Any = None  # host numpy arrays: the running averages of a BatchNorm model
  # A model file's (`load_model`): its path, checksum and card (whose self check
  # `crackjax.models.output_check.verify` compared with what its weights give), and the name of
  # the released model whose registry SHA-256 its bytes have (None: not a released file as
  # shipped, whatever its card says).
  file: str | None = None
  sha256: str | None = None
  card: dict[str, Any] | None = None
  released: str | None = None

  def model_group(self) -> dict[str, Any]:
    """The run's ``model`` group as plain data (a new dict; `crackjax.models.model_from_config`
    builds it)."""
    return self.config.model.to_dict()


def read_config(workdir: str | Path) -> ml_collections.ConfigDict:
  """The config a run was trained with: ``<run>/config.json`` (written by training), else the
  one its newest checkpoint step records (`checkpoints.run_metadata`: a run's ``checkpoints/``
  folder copied alone). `workdir`: the run folder, or its checkpoint folder.

  Raises:
    FileNotFoundError: neither, i.e. not a crackjax run or checkpoint folder.
  """
  return ml_collections.ConfigDict(_recorded_config(workdir)[0])


def _recorded_config(workdir: str | Path) -> tuple[dict[str, Any], Path, Path]:
  """(the run's config as plain data, where it was read, the run's directory): `read_config`."""
  run = checkpoints.run_directory(workdir)
  path = run / 'config.json'
  if path.is_file():
    return json.loads(path.read_text()), path, run
  recorded = checkpoints.run_metadata(workdir)
  if recorded is not None:
    return recorded['config'], checkpoints.checkpoint_directory(workdir), run
  raise FileNotFoundError(
    f'{path} does not exist and no checkpoint in {checkpoints.checkpoint_directory(workdir)} '
    f'records its config: {workdir} is not a crackjax run directory (the --workdir of a '
    'launch.py training run) nor its checkpoints/ folder.'
  )


def load_run(workdir: str | Path, *, step: int | None = None) -> Run:
  """Restores the parameters of step `step` (default: the newest readable) of a training run.

  Reads the run's config (`read_config`: config.json, or what its checkpoints record), imports
  its ``plugins``, builds its model alone (no loss, augmentation, schedule or data: what a
  training `build` adds is not needed for inference) and restores only the parameters and
  BatchNorm statistics, through `checkpoints.restore` (the one restore path): without `step`, a
  damaged newer checkpoint is set aside and an older one used; a requested `step` that cannot
  be read is an error. `workdir` may be the run's ``checkpoints/`` folder alone, wherever it
  was copied.

  Raises:
    FileNotFoundError: no config.json, no checkpoint, or no checkpoint of that step (the
      message names the directory and the steps there are).
    state.CheckpointError: no readable checkpoint, the requested step cannot be read, the
      config's model cannot be built here (e.g. a plugin not installed), or the checkpoint
      does not match config.json's model (one-line message naming the directory).
  """
  c, where, run = _recorded_config(workdir)  # plain data, as JSON holds it
  try:
    plugins.import_plugins(c)
    model = model_from_config(c['model'])
  except (ValueError, KeyError, TypeError) as e:  # a plugin not installed, a damaged config
    raise CheckpointError(f'{where} cannot be rebuilt: {" ".join(str(e).split())}') from e
  # A params-only restore (no optimiser state), on one device: prediction runs the parameters
  # as host arrays (Predictor spreads them).
  shape = init_image_shape(model, c.get('data', {}).get('input_size'))
  abstract = functools.partial(
    train_state.abstract_inference_fields, int(c.get('seed', 0)), shape, one_device_mesh(), model
  )
  mngr = checkpoints.existing_manager(workdir, c['max_checkpoints_to_keep'])
  part = checkpoints.restore(mngr, abstract, step=step)
  restored = train_state.inference_state(
    model.apply, part['params'], part.get('batch_stats'), part['step']
  )
  params = train_state.local_params(restored)
  batch_stats = train_state.local_batch_stats(restored)
  step = int(jax.device_get(restored.step))
  threshold, source = run_threshold(run, step)
  config = ml_collections.ConfigDict(c)
  return Run(config, model, params, step, threshold, source, batch_stats)


def read_model_file(spec: str | Path) -> model_file.ModelFile:
  """A model file by released name, path or URL as it is stored (`model_file.read`: checked,
  its tensors in their stored dtype), for what rewrites or lists a file (its card, the
  registry) rather than predicts with it (`load_model`). With `load_model`, the one reader of
  model files outside `crackjax.models` (tests/test_architecture.py keeps it so, configs/ too).

  Raises:
    hub.ModelNotFoundError, model_file.ModelFileError, OSError: as `load_model`.
  """
  return model_file.read(hub.resolve(spec), build=False)


def model_file_metadata(spec: str | Path) -> tuple[Path, dict[str, Any]]:
  """A model file's path (a released name, path or URL resolved, `hub.resolve`) and its
  metadata, every field checked (`model_file.read_metadata`), its tensors not read: what a
  config made from a file takes (configs/finetune.py: its model group, plugins and loss).

  Raises:
    hub.ModelNotFoundError, model_file.ModelFileError, OSError: as `load_model`.
  """
  path = hub.resolve(spec)
  return path, model_file.read_metadata(path)


def model_file_dtype(spec: str | Path) -> str | None:
  """The dtype a model file (a released name, path or URL, `hub.resolve`) stores its
  parameters in, 'float32' or 'bfloat16', from its header alone (`model_file.stored_dtype`).

  Raises:
    hub.ModelNotFoundError, model_file.ModelFileError, OSError: as `load_model`.
  """
  return model_file.stored_dtype(hub.resolve(spec))


def start_run(init: pretrained.InitSpec) -> Run | None:
  """The model file a run with initial weights `init` (``config.model_init``) starts from, as
  a `Run` (`load_model`; its plugins only if the run's config imported them: a model file
  never imports code); None for a run from scratch or from a .npz of named arrays.

  Raises:
    pretrained.PretrainedError: the file cannot be found, fetched or verified (its one line,
      prefixed with the config field).
  """
  spec = init.pretrained
  if not spec or not pretrained.is_model_file(spec):
    return None
  try:
    return load_model(spec, how=pretrained.FINETUNE_PLUGINS)
  except (OSError, ValueError) as e:
    raise pretrained.PretrainedError(f'config.model_init.pretrained={str(spec)!r}: {e}') from e


def initial_arrays(init: pretrained.InitSpec, start: Run | None) -> dict[str, Any] | None:
  """The named arrays a fresh state of a run with initial weights `init` takes
  (`pretrained.initialise`): its start model's (`start`, `start_run`'s `Run`), or the .npz's
  that ``config.model_init.pretrained`` names, read here; None for a run from scratch.

  Raises:
    pretrained.PretrainedError: the .npz cannot be read.
  """
  if start is not None:
    return model_file.named_arrays(start.params, start.batch_stats)
  return pretrained.load_npz(init.pretrained) if init.pretrained else None


def load_model(
  spec: str | Path,
  *,
  allow_plugins: Sequence[str] = (),
  how: str | None = None,
  sha256: str | None = None,
) -> Run:
  """A model file (`crackjax.models.model_file`) by released name, path or URL
  (`crackjax.models.hub.resolve`; pinned with `sha256` or ``#sha256=<hex>`` at its end), as a
  `Run`: the config it was trained with, its model, parameters (float32 on the host),
  BatchNorm statistics and threshold.

  Nothing the file names is imported on its word: a plugin module it needs is used only if
  this process imported it already or `allow_plugins` names it (``--allow_plugins``;
  `crackjax.plugins.model_file_plugins`). Every field and tensor is checked first, in one
  pass (`crackjax.models.model_file.read`), then its weights against its card's self check
  (`crackjax.models.output_check.verify`, once per file and machine): the one reader of model
  files for prediction, evaluation, fine-tuning and export, which all check alike.

  Raises:
    hub.ModelNotFoundError: the spec names no released model, file or URL.
    model_file.ModelFileError: a damaged, altered, newer or malformed file, one whose tensors
      do not fit its model or whose weights do not give its self check, one not of its pinned
      SHA-256, or one needing plugins not allowed (one line naming it).
    OSError: a download that failed.
  """
  path = hub.resolve(spec, sha256=sha256)
  loaded = model_file.read(path, allow_plugins=allow_plugins, how=how)
  config = ml_collections.ConfigDict(loaded.config)
  # The model group checked against the tensors is the one every later build uses.
  config.model = ml_collections.ConfigDict(loaded.model)
  threshold = loaded.threshold
  source = f'{path} ({threshold.get("chosen_by", "stored in the model file")})'
  params = model_file.as_float32(loaded.params)
  batch_stats = model_file.as_float32(loaded.batch_stats)
  card = dict(loaded.card)
  output_check.verify(
    path, loaded.sha256, card, loaded.module, params, batch_stats, float(threshold['threshold'])
  )
  return Run(
    config,
    loaded.module,
    params,
    int(card.get('training', {}).get('step', 0)),
    float(threshold['threshold']),
    source,
    batch_stats,
    file=str(path),
    sha256=loaded.sha256,
    card=card,
    released=hub.released_name(path),
  )


def inference_state(run: Run) -> train_state.TrainState:
  """A TrainState holding a `Run`'s parameters (and BatchNorm statistics) on this process's
  first device, with no optimiser state: what scoring takes (crackjax-evaluate --model)."""
  device = jax.local_devices()[0]
  params = jax.device_put(run.params, device)
  batch_stats = jax.device_put(run.batch_stats, device) if run.batch_stats else None
  step = jax.numpy.asarray(run.step, jax.numpy.int32)
  return train_state.inference_state(run.model.apply, params, batch_stats, step)


#: The threshold of a run that has none of its own: no threshold.json of the step, no epoch
#: record of it, or one whose best threshold is degenerate (crackjax-predict's --threshold help).
DEFAULT_THRESHOLD = 0.5


def _eval_group(workdir: str | Path) -> dict[str, Any]:
  """The run's recorded ``config.eval`` group ({} for a run whose config cannot be read)."""
  try:
    c = _recorded_config(workdir)[0]
  except (OSError, ValueError):  # no config (FileNotFoundError), or damaged JSON
    return {}
  return c.get('eval') or {}


def threshold_over(workdir: str | Path) -> str:
  """The run's rule for its threshold (``config.eval.threshold_over``, `threshold_choice`);
  'pooled' for a run recorded before the field, or whose config cannot be read."""
  return _eval_group(workdir).get('threshold_over', 'pooled')


def epoch_threshold(workdir: Path, step: int) -> tuple[float, str] | None:
  """The strict threshold of the run's epoch record of `step` under the run's rule
  (`threshold_over`: its ODS, or a mixture's datasets alike) and its source, if any.

  A degenerate best threshold (`result.degenerate_threshold`: nothing found, or every pixel
  crack) is not the run's threshold here either, as threshold.json never stores one
  (`crackjax.trainer.eval_records.write_threshold`): the record gives `DEFAULT_THRESHOLD` and
  its source says why, unless the run stores such thresholds
  (``config.eval.store_degenerate_threshold``). The one rule of every reader of a run's
  threshold: crackjax-predict --workdir, crackjax-evaluate --workdir, Predictor.from_workdir
  (`run_threshold`) and crackjax-export (`crackjax.deploy.model_export.step_threshold`)."""
  for path in sorted(workdir.glob('epoch_*.json')):
    try:
      record = read_record(path)
    except (OSError, ValueError):
      continue  # a damaged record chooses nothing
    if record.step == step and 'strict' in record.results:
      why = degenerate_threshold(record.results['strict'])
      if why and not _eval_group(workdir).get('store_degenerate_threshold', False):
        return DEFAULT_THRESHOLD, (
          f'default {DEFAULT_THRESHOLD:g}: the best threshold of {path.name} (step {step}) is '
          f'degenerate ({why}) and is kept out of threshold.json '
          '(config.eval.store_degenerate_threshold)'
        )
      threshold, chosen_by = chosen_threshold(record, 'strict', threshold_over(workdir))
      return threshold, f'{chosen_by}, {record.dataset}, step {step} ({path.name})'
  return None


def run_threshold(workdir: str | Path, step: int) -> tuple[float, str]:
  """The run's threshold for the parameters of `step`, and where it comes from.

  threshold.json when it was chosen at `step`; else the strict ODS threshold of the epoch
  record of `step` (epoch_<NNN>.json, on the run's own test split: the rule threshold.json
  follows, `crackjax.trainer.scoring`, a degenerate one left out: `epoch_threshold`; a release
  exports the epoch that scored best on its validation part); else the default 0.5, and the
  returned source says why. A threshold chosen at another step is never applied: it was
  chosen for other parameters.
  """
  path = Path(workdir) / 'threshold.json'
  saved = json.loads(path.read_text()) if path.is_file() else None
  chosen_at = saved.get(STEP) if saved else None
  if saved is None or (chosen_at is not None and int(chosen_at) != step):
    epoch = epoch_threshold(Path(workdir), step)
    if epoch is not None:
      return epoch
    if saved is None:
      return DEFAULT_THRESHOLD, 'default 0.5 (the run has no threshold.json)'
    return DEFAULT_THRESHOLD, (
      f'default 0.5: {path} was chosen for step {chosen_at}, not step {step}; evaluate this '
      'step or pass --threshold'
    )
  where = ', '.join(str(saved[k]) for k in (DATASET, SPLIT) if saved.get(k))
  at = f', step {chosen_at}' if chosen_at is not None else ''
  chosen_by = saved.get(CHOSEN_BY, 'saved by evaluation')
  return float(saved[THRESHOLD]), f'{path} ({chosen_by}{at}{", " + where if where else ""})'
