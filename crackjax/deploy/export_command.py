"""`crackjax-export`: a trained run or a model file as one self-contained file
(`crackjax.deploy.export`: `jax.export`, ONNX; or a crackjax model file, `--format=model`).

  crackjax-export --workdir=RUN --out=unet.jaxexport [--format=jax|onnx] [--hw=H,W]
  crackjax-export --model=NAME|FILE|URL --out=unet.onnx --format=onnx
  crackjax-export --workdir=RUN --format=model --out=my-model.safetensors [--dtype=bfloat16]

It prints what it wrote (the sidecar's threshold and input contract, the model card's scores)
and how to load it (docs/export.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import flags

from crackjax import cli
from crackjax.deploy.export import (
  DEFAULT_OPSET,
  DEFAULT_PLATFORMS,
  FORMATS,
  export_model_file,
  export_run,
  sidecar_path,
)
from crackjax.engine.checkpoints import CheckpointError
from crackjax.evaluation import width_rule
from crackjax.evaluation.result import AP, F1, ODS, OIS
from crackjax.models import model_file
from crackjax.runs import docs, outputs

PROG = 'crackjax-export'
USAGE = (
  f'{PROG} (--workdir=RUN | --model=NAME|FILE|URL) --out=FILE [--format=jax|onnx|model] '
  f'[flags]  ({docs.doc("export.md")})'
)


def _define_flags(flag_values: flags.FlagValues) -> None:
  cli.define_model_flags(flag_values, model_note=' (formats jax, onnx)')
  flags.DEFINE_string(
    'out',
    None,
    'File to write (e.g. unet.jaxexport, unet.onnx or unet.safetensors).',
    flag_values=flag_values,
  )
  flags.DEFINE_enum(
    'dtype',
    'float32',
    model_file.DTYPES,
    'Format model: the stored parameters (bfloat16 halves the file; the card states the change).',
    flag_values=flag_values,
  )
  flags.DEFINE_string('name', None, "Format model: the model card's name.", flag_values=flag_values)
  flags.DEFINE_string(
    'licence',
    None,
    "Format model: the training data's licence (default: the dataset's).",
    flag_values=flag_values,
  )
  flags.DEFINE_string('notes', None, 'Format model: notes for the card.', flag_values=flag_values)
  flags.DEFINE_float(
    'threshold',
    None,
    "Format model: the stored threshold (default: the run's, chosen on its validation part).",
    flag_values=flag_values,
  )
  flags.DEFINE_string(
    'threshold_chosen_by',
    None,
    'Format model: how --threshold was chosen (stored in the file beside it; required with it).',
    flag_values=flag_values,
  )
  _define_test_time_flags(flag_values)
  flags.DEFINE_enum(
    'format',
    'jax',
    FORMATS,
    'jax (jax.export), onnx (jax2onnx) or model (a crackjax model file: safetensors + card).',
    flag_values=flag_values,
  )
  flags.DEFINE_list(
    'platforms',
    list(DEFAULT_PLATFORMS),
    'jax.export platforms to lower for (cpu, cuda, rocm, tpu).',
    flag_values=flag_values,
  )
  flags.DEFINE_string(
    'hw', None, 'H,W: fix the input height and width (default: symbolic).', flag_values=flag_values
  )
  flags.DEFINE_integer('opset', DEFAULT_OPSET, 'ONNX opset.', flag_values=flag_values)
  flags.DEFINE_bool(
    'overwrite', False, 'Replace an existing --out (and its .json).', flag_values=flag_values
  )


def _define_test_time_flags(flag_values: flags.FlagValues) -> None:
  """Format model's test-time defaults (the file's config eval group, its card's test_time)."""
  flags.DEFINE_list(
    'scales',
    None,
    "Format model: the file's default test-time scales (e.g. 2; default: the run's eval.scales).",
    flag_values=flag_values,
  )
  flags.DEFINE_bool(
    'flip',
    None,
    "Format model: the file's default mirroring at test time.",
    flag_values=flag_values,
  )
  flags.DEFINE_float(
    'photo_threshold',
    None,
    "Format model: the file's default weight w of each photo's own threshold (in [0, 1]).",
    flag_values=flag_values,
  )
  flags.DEFINE_string(
    'width_rule',
    None,
    "Format model: the file's default width rule: PX, a photo whose predicted cracks are wider "
    'than PX pixels is predicted again at half size (chosen on validation parts: '
    'bench/width_scale.py --choose), or off.',
    flag_values=flag_values,
  )
  flags.DEFINE_string(
    'test_time_chosen_by',
    None,
    'Format model: how --scales / --flip / --photo_threshold / --width_rule were chosen '
    '(required with them).',
    flag_values=flag_values,
  )


def _parse_hw(text: str | None) -> tuple[int, int] | None:
  if not text:
    return None
  parts = text.lower().replace('x', ',').split(',')
  try:
    return tuple(int(p) for p in parts)  # checked for length and multiples by export_run
  except ValueError:
    sys.exit(f'{PROG}: --hw={text} is not H,W (two integers).')


def main(argv: Sequence[str] | None = None) -> None:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  return COMMAND.run(_main, argv)


_INTERRUPTED = (
  'interrupted (Ctrl-C); a file cut short is caught by its sidecar (size and SHA-256): run '
  'the same command again with --overwrite.'
)
COMMAND = cli.Command.restoring(PROG, _define_flags, usage=USAGE, interrupted=_INTERRUPTED)


def _main(fv: flags.FlagValues, arguments: list[str]) -> None:
  """``crackjax-export --workdir=RUN --out=FILE [--format=jax|onnx] [...]`` on the parsed
  flags (arguments that are not flags are ignored)."""
  del arguments
  if not fv.out:
    sys.exit(f'{PROG}: --out is required; usage: {USAGE}')
  if not fv.workdir and not fv.model:
    sys.exit(f'{PROG}: --workdir is required (or --model=NAME|FILE|URL); usage: {USAGE}')
  cli.refuse_two_models(fv, PROG)
  if fv.model and fv.format == 'model':
    sys.exit(f'{PROG}: --format=model writes a model file from a run: give --workdir=RUN.')
  if fv.format != 'model' and (fv.threshold is not None or fv.threshold_chosen_by):
    sys.exit(f'{PROG}: --threshold and --threshold_chosen_by are for --format=model.')
  test_time = _test_time(fv)
  if fv.format != 'model' and (test_time or fv.test_time_chosen_by):
    sys.exit(f'{PROG}: --scales, --flip, --photo_threshold, --width_rule and '
             '--test_time_chosen_by are for --format=model.')  # fmt: skip
  # Before the run is restored and traced.
  outputs.require_writable(PROG, f'--out={fv.out}', Path(fv.out).parent)
  if fv.format == 'model':
    return _main_model(fv, test_time)
  try:
    out = export_run(
      fv.workdir,
      fv.out,
      model=fv.model,
      allow_plugins=fv.allow_plugins,
      step=fv.step,
      platforms=fv.platforms,
      format=fv.format,
      hw=_parse_hw(fv.hw),
      opset=fv.opset,
      overwrite=fv.overwrite,
    )
  except (OSError, ImportError, ValueError, CheckpointError) as e:
    # OSError: a missing run, an existing output, an --out that cannot be written (named);
    # ValueError: also a damaged or newer model file (model_file.ModelFileError).
    sys.exit(f'{PROG}: {" ".join(str(e).split())}')
  meta = json.loads(sidecar_path(out).read_text())
  size = out.stat().st_size / 2**20
  where = f' for {", ".join(meta["platforms"])}' if fv.format == 'jax' else ''
  print(f'Wrote {out} ({fv.format}, step {meta["step"]}, {size:.1f} MiB{where}).')
  print(
    f'Wrote {sidecar_path(out)} (threshold {meta["threshold"]:.4g}: {meta["threshold_source"]}; '
    'input contract).'
  )
  print(f'Input {meta["input_shape"]}: {meta["input"]}; {meta["contract"]}')
  # The sidecar's recipe names the file beside it; from here, its path.
  sidecar = sidecar_path(out)
  recipe = [
    line.replace(repr(sidecar.name), repr(str(sidecar))).replace(repr(out.name), repr(str(out)))
    for line in meta['load']
  ]
  print('Load it with:\n  ' + '\n  '.join(recipe))
  print(f'See {docs.doc("export.md")}.')


def _test_time(fv: flags.FlagValues) -> dict[str, Any]:
  """The test-time defaults given on the command line (scales as numbers)."""
  given = {'scales': fv.scales, 'flip': fv.flip, 'photo_threshold': fv.photo_threshold}
  given = {k: v for k, v in given.items() if v is not None}
  if fv.width_rule is not None:  # a width, or off (None: stored so, the file's rule off)
    try:
      given['width_rule'] = width_rule.parse(fv.width_rule)
    except ValueError as e:
      sys.exit(f'{PROG}: {e}')
  if 'scales' in given:
    try:
      given['scales'] = [float(x) for x in given['scales']]
    except ValueError:
      sys.exit(f'{PROG}: --scales={",".join(fv.scales)}: expected numbers (e.g. 2 or 1,2).')
  return given


def _main_model(fv: flags.FlagValues, test_time: dict[str, Any]) -> None:
  try:
    out, sha, meta = export_model_file(
      fv.workdir,
      fv.out,
      step=fv.step,
      dtype=fv.dtype,
      name=fv.name,
      licence=fv.licence,
      notes=fv.notes,
      threshold=fv.threshold,
      threshold_chosen_by=fv.threshold_chosen_by,
      test_time=test_time,
      test_time_chosen_by=fv.test_time_chosen_by,
      overwrite=fv.overwrite,
    )
  except (OSError, ValueError, CheckpointError) as e:
    sys.exit(f'{PROG}: {" ".join(str(e).split())}')
  card = meta['card']
  size = out.stat().st_size / 2**20
  print(
    f'Wrote {out} (crackjax model file, step {card["training"]["step"]}, {fv.dtype}, '
    f'{size:.1f} MiB, sha256 {sha}).'
  )
  print(f'Threshold {meta["threshold"]["threshold"]:.4g}: {meta["threshold"]["chosen_by"]}.')
  if card.get('test_time'):
    given = {k: v for k, v in card['test_time'].items() if k != 'chosen_by'}
    print(f'Test-time defaults {given}: {card["test_time"]["chosen_by"]}.')
  for score in card['scores']:
    for protocol, r in score['protocols'].items():
      print(
        f'  {score["dataset"]} {score["split"]} ({score["num_images"]} images), {protocol}: '
        f'ODS F1 {r[ODS][F1]:.4f}, OIS F1 {r[OIS][F1]:.4f}, AP {r[AP]:.4f}'
      )
  if not card['scores']:
    print('  no evaluation of this step in the run: the card has no scores (crackjax-evaluate).')
  print(f'Use it: crackjax-predict --model={out} --out=DIR PHOTOS...  ({docs.doc("export.md")})')


if __name__ == '__main__':
  main()
