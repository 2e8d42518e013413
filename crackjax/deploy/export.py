"""Exports a trained run's inference function to one self-contained file (docs/export.md).

``crackjax-export --workdir=RUN --out=unet.jaxexport`` (`crackjax.deploy.export_command`)
restores the run's parameters and writes the function
``images float32 [B, H, W, 3] in [0, 1] -> probabilities [B, H, W, 1]`` with the parameters
baked in as constants, so a trained model runs with nothing of crackjax installed:

* ``--format=jax`` (default): `jax.export` (StableHLO, serialized with
  ``Exported.serialize()``), lowered for ``--platforms`` (default cpu and cuda; jax lowers
  for CUDA without a GPU). The input shape is symbolic, ``(b, 16*h, 16*w, 3)`` for the
  U-Net: one file takes any batch size and any H, W that are multiples of the model's input
  multiple; other sizes are refused when called. Load it with
  ``jax.export.deserialize(open(path, 'rb').read()).call(images)``; jax and numpy are all it
  needs (and flatbuffers, which jax's deserializer imports).
* ``--format=onnx``: ONNX through jax2onnx (``pip install -e '.[onnx]'``), for onnxruntime
  and other ONNX runtimes. Batch, height and width are dynamic dimensions (``B``, ``H``,
  ``W``); H and W are cropped down to multiples of the input multiple inside the graph, so
  the output is ``[B, 16*floor(H/16), 16*floor(W/16), 1]``: pad first (the input contract
  below). ``--hw=H,W`` fixes the spatial size instead (either format).

Beside the file, ``<out>.json`` records what it holds: the input multiple, the run's
threshold (crack where probability > threshold), the step, the model config, the jax
version, the platforms and how to call it.

Input contract (both formats): float32 RGB in [0, 1], NHWC, H and W multiples of the input
multiple. Pad other sizes by reflection and crop the prediction back
(`crackjax.deploy.predictor.reflect_pad`, as `crackjax.deploy.predictor.Predictor` does).

Why two model variants: the U-Net is rebuilt from the run's ``config.model`` with the same
parameters and a ``conv_impl`` chosen for export (the function computed is the same for
every ``conv_impl``; they differ only in their backward pass): 'xla' for `jax.export`
(plain convolutions and ``reduce_window`` pooling, fastest on GPUs) and 'blocked' for
ONNX, whose reshape-based max-pool keeps the symbolic shapes exact in jax2onnx (0.17's
``reduce_window`` shape rule keeps the input size under symbolic dimensions, and the
U-Net's skip concatenation then fails to convert). The ONNX graph also computes in float32
even for a run trained with ``model.dtype='bfloat16'`` (onnxruntime's CPU convolutions take
no bfloat16); the `jax.export` file keeps the run's dtype.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax import export as jax_export

from crackjax.deploy.predictor import pad_multiple, predict_step
from crackjax.experiment.restored import Run, load_model, load_run
from crackjax.models import input_multiple, model_from_config
from crackjax.runs import outputs

FORMATS = ('jax', 'onnx', 'model')
DEFAULT_PLATFORMS = ('cpu', 'cuda')
PLATFORMS = ('cpu', 'cuda', 'rocm', 'tpu')  # jax lowers for each of them on any machine
DEFAULT_OPSET = 17  # onnxruntime >= 1.12, TensorRT >= 8.6
ONNX_INSTALL_HINT = "pip install -e '.[onnx]' (jax2onnx, onnx, onnxruntime)"


def sidecar_path(out: str | Path) -> Path:
  """The JSON file written beside an exported model: ``<out>.json``."""
  out = Path(out)
  return out.with_name(out.name + '.json')


def _export_model_config(run: Run, **overrides: str) -> dict[str, Any]:
  """The run's config.model as plain data, with `overrides` of the fields it has (same
  parameters)."""
  model_config = run.model_group()
  for key, value in overrides.items():
    if key in model_config:
      model_config[key] = value
  return model_config


def _inference_fn(run: Run, **overrides: str) -> tuple[Callable[[jax.Array], jax.Array], Any, int]:
  """images [B, H, W, 3] -> probabilities [B, H, W, 1], closing over the run's parameters;
  the exported model's config group and its input multiple.

  Args:
    run: the restored run.
    **overrides: config.model fields to replace (conv_impl, dtype), e.g. conv_impl='xla': the
      exported model is the run's model in another kernel layout or precision, so it is built
      here, once per export, from the run's model group with these fields replaced.
  """
  model_config = _export_model_config(run, **overrides)
  model = model_from_config(model_config)
  params = jax.tree.map(jnp.asarray, run.params)
  # A BatchNorm model's running averages (None otherwise), baked in like the parameters.
  batch_stats = jax.tree.map(jnp.asarray, run.batch_stats)

  def fn(images: jax.Array) -> jax.Array:
    return predict_step(params, images, apply_fn=model.apply, batch_stats=batch_stats)

  return fn, model_config, input_multiple(model)


def _check_hw(hw: Sequence[int] | None, multiple: int) -> tuple[int, int] | None:
  if hw is None:
    return None
  if len(hw) != 2 or any(int(d) <= 0 or int(d) % multiple for d in hw):
    raise ValueError(f'hw={tuple(hw)} must be two positive multiples of {multiple} (H, W).')
  return int(hw[0]), int(hw[1])


def _jax_symbolic_shape(multiple: int, hw: tuple[int, int] | None) -> tuple[Any, str]:
  """The input shape: batch always symbolic; H, W symbolic multiples of `multiple` or fixed."""
  if hw is not None:
    spec = f'b, {hw[0]}, {hw[1]}, 3'
  elif multiple > 1:
    # 'multiple*h' (not 'h' with a divisibility constraint) makes every pooling's division
    # exact, so the skip connections' shapes provably agree.
    spec = f'b, {multiple}*h, {multiple}*w, 3'
  else:
    spec = 'b, h, w, 3'
  return jax_export.symbolic_shape(spec), f'({spec})'


def _check_installed(format: str) -> None:
  """Raises ImportError, saying what to install, when `format`'s exporter is missing."""
  try:
    if format == 'jax':
      import flatbuffers  # noqa: F401  (jax's serializer imports it lazily)
    else:
      import jax2onnx  # noqa: F401
  except ImportError as e:
    if format == 'jax':
      hint = 'pip install flatbuffers (a dependency of crackjax)'
      raise ImportError(f'jax.export serialization needs flatbuffers: {hint}.') from e
    raise ImportError(f'ONNX export needs jax2onnx: {ONNX_INSTALL_HINT}.') from e


def _export_jax(
  run: Run, out: Path, platforms: Sequence[str], hw: tuple[int, int] | None
) -> dict[str, Any]:
  fn, model_config, multiple = _inference_fn(run, conv_impl='xla')
  shape, spec = _jax_symbolic_shape(multiple, hw)
  exported = jax_export.export(jax.jit(fn), platforms=tuple(platforms))(
    jax.ShapeDtypeStruct(shape, jnp.float32)
  )
  out.write_bytes(exported.serialize())
  return {
    'model_config': dict(model_config),
    'input_shape': spec,
    'output_shape': str(exported.out_avals[0].shape).replace("'", ''),
    'platforms': list(exported.platforms),
    'calling_convention_version': exported.calling_convention_version,
    'load': [
      'import hashlib, json',
      'import jax, numpy as np',
      f"blob = open('{out.name}', 'rb').read()",
      f"meta = json.load(open('{sidecar_path(out).name}'))",
      "if (len(blob), hashlib.sha256(blob).hexdigest()) != (meta['size'], meta['sha256']):",
      f"  raise SystemExit({out.name!r} + ' is damaged (size or SHA-256 differs from its "
      "sidecar); export it again.')",
      'f = jax.export.deserialize(blob)',
      'probabilities = np.asarray(f.call(images))  # images: float32 [B, H, W, 3] in [0, 1]',
    ],
  }


def _export_onnx(run: Run, out: Path, hw: tuple[int, int] | None, opset: int) -> dict[str, Any]:
  import jax2onnx  # an optional extra: imported only here (checked by _check_installed)

  # float32: ONNX runtimes' CPU convolutions take no bfloat16 (onnxruntime rejects the graph).
  fn, model_config, multiple = _inference_fn(run, conv_impl='blocked', dtype='float32')

  def cropped(images: jax.Array) -> jax.Array:
    # Symbolic H, W are not known to be multiples of `multiple`; cropping to the largest
    # multiple below makes them so (a no-op for inputs that keep the contract).
    b, h, w, c = images.shape
    h, w = h // multiple * multiple, w // multiple * multiple
    return fn(jax.lax.slice(images, (0, 0, 0, 0), (b, h, w, c)))

  spec = ('B', 'H', 'W', 3) if hw is None else ('B', hw[0], hw[1], 3)
  serde_logger = logging.getLogger('onnx_ir.serde')  # warns about shape tensors' dtypes
  level = serde_logger.level
  serde_logger.setLevel(logging.ERROR)
  try:
    model = jax2onnx.to_onnx(
      cropped,
      [spec],
      model_name='crackjax_' + str(model_config.get('name', 'model')),
      opset=opset,
      input_names=['images'],
      output_names=['probabilities'],
    )
  finally:
    serde_logger.setLevel(level)
  out.write_bytes(model.SerializeToString())

  def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

  return {
    'model_config': dict(model_config),
    'input_shape': {'images': dims(model.graph.input[0])},
    'output_shape': {'probabilities': dims(model.graph.output[0])},
    'opset': opset,
    'jax2onnx_version': importlib.metadata.version('jax2onnx'),
    'load': [
      'import onnxruntime as ort',
      f"session = ort.InferenceSession('{out.name}', providers=['CPUExecutionProvider'])",
      "(probabilities,) = session.run(None, {'images': images})  # float32 [B, H, W, 3]",
    ],
  }


def export_run(
  workdir: str | Path | None,
  out: str | Path,
  *,
  model: str | None = None,
  step: int | None = None,
  platforms: Sequence[str] = DEFAULT_PLATFORMS,
  format: str = 'jax',
  hw: Sequence[int] | None = None,
  opset: int = DEFAULT_OPSET,
  overwrite: bool = False,
  allow_plugins: Sequence[str] = (),
) -> Path:
  """Writes a run's inference function to `out` and its description to ``<out>.json``.

  Args:
    workdir: the training run's directory (``config.json`` and ``checkpoints/``), or None
      with `model`.
    out: the file to write (suggested suffixes: ``.jaxexport``, ``.onnx``).
    model: instead of a run, a model file's released name, path or URL
      (`crackjax.experiment.restored.load_model`); formats 'jax' and 'onnx' only.
    step: checkpoint step to export (default: the latest).
    platforms: `jax.export` platforms to lower for ('cpu', 'cuda', 'rocm', 'tpu'); the
      file runs on any of them. Ignored for ONNX.
    format: 'jax' (`jax.export`) or 'onnx' (jax2onnx); 'model' is `export_model_file`.
    hw: (H, W) to fix the spatial input size (multiples of the model's input multiple);
      default None, symbolic H and W. The batch size is always symbolic.
    opset: ONNX opset (format 'onnx' only).
    overwrite: replace existing files; without it an existing `out` or sidecar is an error.
    allow_plugins: with `model`, the plugin modules the file names that may be imported
      (`crackjax.experiment.restored.load_model`: a file never imports code on its own word).

  Returns:
    `out` as a Path.

  Raises:
    FileNotFoundError: `workdir` is missing or holds no run or checkpoint (the message
      names it).
    FileExistsError: `out` or its sidecar exists and `overwrite` is False, or either is a
      symbolic link (refused whatever `overwrite`).
    ImportError: format 'onnx' without jax2onnx, or 'jax' without flatbuffers, installed
      (the message says what to install).
    ValueError: an unknown format or platform, or a bad `hw`.
  """
  if format not in ('jax', 'onnx'):
    raise ValueError(f'format={format!r} is not one of jax, onnx (model: export_model_file).')
  if (workdir is None) == (model is None):
    raise ValueError('give one of workdir (a training run) and model (a model file).')
  platforms = tuple(platforms)
  unknown = [p for p in platforms if p not in PLATFORMS]
  if unknown or not platforms:
    raise ValueError(f'platforms={list(platforms)}: each must be one of {list(PLATFORMS)}.')
  out, sidecar = Path(out), sidecar_path(out)
  _check_out(out, [out, sidecar], format, overwrite)
  if model is not None:
    run = load_model(model, allow_plugins=allow_plugins)
    source = {'model_file': run.file}
  else:
    workdir = _run_dir(workdir)
    run = load_run(workdir, step=step)
    source = {'workdir': str(workdir.resolve())}
  multiple = input_multiple(run.model)
  hw = _check_hw(hw, multiple)
  _check_installed(format)
  out.parent.mkdir(parents=True, exist_ok=True)
  if format == 'jax':
    details = _export_jax(run, out, platforms, hw)
  else:
    details = _export_onnx(run, out, hw, opset)
  meta = _description(run, out, format, source, details)
  sidecar.write_text(outputs.dumps(meta, indent=2) + '\n')
  return out


def _description(
  run: Any, out: Path, format: str, source: dict[str, str], details: dict[str, Any]
) -> dict[str, Any]:
  """The sidecar of `export_run`'s file `out`: what it takes and returns, its size and
  SHA-256, the run or model file it came from, and the contract its caller keeps."""
  multiple = input_multiple(run.model)
  blob = out.read_bytes()
  return {
    'format': format,
    'file': out.name,
    # What a loader checks before deserialising (docs/export.md's recipe): a truncated or
    # replaced file is then one clear line, not a flatbuffers traceback.
    'size': len(blob),
    'sha256': hashlib.sha256(blob).hexdigest(),
    'input': 'images: float32 [B, H, W, 3], RGB in [0, 1] (NHWC)',
    'output': 'probabilities: float32 [B, H, W, 1], crack probability per pixel',
    'input_multiple': multiple,
    # How crackjax-predict pads (crackjax.deploy.predictor.pad_multiple): pad so to get its map.
    'pad_multiple': pad_multiple(multiple),
    'threshold': run.threshold,
    'threshold_source': run.threshold_source,
    'step': run.step,
    **source,
    'jax_version': jax.__version__,
    'crackjax_version': importlib.metadata.version('crackjax'),
    'created': datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds'),
    'contract': (
      f'H and W must be multiples of {multiple}: pad by reflection at the bottom and right '
      f'to multiples of pad_multiple ({pad_multiple(multiple)}, as crackjax-predict does) and '
      'crop the output back. Crack where probability > threshold.'
    ),
    **details,
  }


def _check_out(out: Path, paths: Sequence[Path], format: str, overwrite: bool) -> None:
  """Refuses a folder as `out`, a link among `paths`, or an existing one without overwrite."""
  if out.is_dir():  # before the overwrite advice, which could not help
    example = {'onnx': 'unet.onnx', 'model': 'unet.safetensors'}.get(format, 'unet.jaxexport')
    raise IsADirectoryError(
      f'{out} is a folder; --out (out=) names the file to write, e.g. {out / example}.'
    )
  for path in paths:
    # Written through, a link would replace a file elsewhere (one planted beside the export,
    # or a dangling one creating it); --overwrite replaces files, never link targets.
    if path.is_symlink():
      raise FileExistsError(
        f'{path} is a symbolic link (to {os.readlink(path)}); the export is written only as a '
        'file of its own, never through a link: remove the link or name another --out (out=).'
      )
  if not overwrite:
    for path in paths:
      if path.exists():
        raise FileExistsError(f'{path} exists; pass --overwrite (overwrite=True) to replace it.')


def export_model_file(
  workdir: str | Path, out: str | Path, *, overwrite: bool = False, **options: Any
) -> tuple[Path, str, dict[str, Any]]:
  """Writes a run's checkpoint as a model file (`crackjax.deploy.model_export.export_model`,
  whose keyword `options` it takes: step, dtype, name, licence, notes, threshold,
  threshold_chosen_by); returns (the path, its SHA-256, its metadata). Same refusals as
  `export_run`."""
  from crackjax.deploy import model_export

  out = Path(out)
  _check_out(out, [out], 'model', overwrite)
  workdir = _run_dir(workdir)
  out.parent.mkdir(parents=True, exist_ok=True)
  return model_export.export_model(workdir, out, **options)


def _run_dir(workdir: str | Path) -> Path:
  """`workdir` as a Path, refused (FileNotFoundError, naming it) unless it is a folder."""
  workdir = Path(workdir)
  if not workdir.is_dir():
    raise FileNotFoundError(f'{workdir} does not exist: expected a training run directory.')
  return workdir
