"""`crackjax-predict`: crack maps, masks, overlays and measurements for folders of photos.

  crackjax-predict --model=crackforest-unet-cpu photos/ --out=predictions   # a released model
  crackjax-predict --model=unet.safetensors photos/ --out=OUT   # a model file (or its URL)
  crackjax-predict --workdir=workdirs/cfd_exp photos/ more/*.jpg one.png --out=predictions
  crackjax-predict --workdir=RUN roads/ --out=OUT --threshold=0.4 --mm_per_pixel=0.5

The model comes from a training run (--workdir, its newest readable checkpoint or --step) or a
model file (--model: a released model's name, crackjax-models lists them; a path to a file of
crackjax-export --format=model; or an http(s) URL of one, downloaded once into
$CRACKJAX_CACHE, crackjax/models/hub.py).

For every readable image (any size, png/jpg/bmp/tif/webp/gif; grey, RGBA, 16-bit and
EXIF-rotated photos included; folders are searched recursively) it writes, at the photo's own
size:
  OUT/probs/<name>.png     crack probability, 8-bit (255 = 1)
  OUT/masks/<name>.png     crack mask (255 = crack) at the run's threshold (threshold.json,
                           the strict-protocol ODS threshold) or --threshold
  OUT/overlays/<name>.jpg  the photo with crack pixels in red
one row per image in OUT/measurements.csv (crack ratio, length, widths, segments, cracks, and
the speckles left out of them: components shorter than --min_length px, kept in the mask)
and one row per crack in OUT/cracks.csv (a component at least --min_length px long: bounding
box, length, widths, orientation to the road given by --direction, type, and with
--mm_per_pixel the LTPP severity; see crackjax/deploy/measure.py), then prints a summary.
<name> is the photo's path under the folder it was found in, without its extension
(`output_names`: unique and stable; two photos that differ only in extension keep it,
road_jpg and road_png). OUT/index.html is one self-contained page over it all (summary, a
card per photo, sortable; crackjax/deploy/html_report.py). An unreadable file is reported,
by name, and skipped; so are other files in the folders, counted; an animated image is
predicted from its first frame, said; nothing is overwritten without --overwrite; a photo
that will not fit the memory left is skipped, said. Outputs of crackjax (--out inside an input
folder, files an output folder's manifest lists) are never inputs; a photo named twice is
predicted once. Each photo's maps are written whole (temporary name, rename) and it counts as
done once its line is in OUT/.crackjax-predict.jsonl: after a full disk or Ctrl-C the same
command again predicts exactly the photos not done, and its tables list them all. --out is
held while the command runs (a second one into it ends in one line). Linked
files and folders in an input folder are followed (a loop or a broken link is skipped with a
line); outputs are written and removed only inside OUT: a symbolic link inside it is refused
before anything is written (OUT itself may be one).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from absl import flags

from crackjax import cli
from crackjax.deploy import hostmem, measure, predict_batch, self_check
from crackjax.deploy import predict_outputs as written
from crackjax.deploy.photos import (  # noqa: F401 (the command's names, as before the split)
  DEFAULT_MAX_MEGAPIXELS,
  IMAGE_EXTENSIONS,
  PROGRESS_FILE,
  Input,
  UnreadableImageError,
  find_inputs,
  load_photo,
  map_files,
  output_names,
  photo_size,
)
from crackjax.deploy.predict_batch import PROG
from crackjax.deploy.predictor import BLENDS, Predictor, plain_predictor
from crackjax.engine.checkpoints import CheckpointError
from crackjax.evaluation import width_rule
from crackjax.evaluation.inference import check_scaled_size, test_time_of
from crackjax.experiment.restored import load_model, load_run
from crackjax.runs import identity, outputs

USAGE = (
  f'{PROG} (--model=NAME|FILE|URL | --workdir=RUN) --out=DIR IMAGE_OR_FOLDER_OR_GLOB... [flags]'
)


def _define_flags(fv: flags.FlagValues) -> None:
  cli.define_model_flags(fv)
  flags.DEFINE_string('out', None, 'output folder (created)', flag_values=fv)
  flags.DEFINE_float(
    'threshold',
    None,
    "crack where probability > threshold (default: the run's threshold.json, else 0.5)",
    lower_bound=0.0,
    upper_bound=1.0,
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'ignore_memory_estimate',
    False,
    'predict a photo even when its estimated memory need exceeds the memory free here (the '
    "estimate errs on the safe side; the Python API's Predictor never refuses)",
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'examples',
    False,
    'also predict four example road photos (drawn here: crackjax/deploy/examples.py), written '
    'to OUT/examples/ first (a folder of their own: one holding other files is refused): a '
    'first try without photos of your own',
    flag_values=fv,
  )
  flags.DEFINE_list(
    'scales',
    None,
    'test-time scales: each photo predicted at these factors of its size, the maps averaged '
    "(default: the model file's or run's eval.scales, 1 for most: as it is)",
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'flip', None, "also predict each photo mirrored, maps averaged (default: the file's)", fv
  )
  cli.define_photo_threshold_flag(
    fv, note='; for photos of roads unlike the training ones (measurements.csv: threshold)'
  )
  width_rule.define_flag(fv, note='; measurements.csv: scale, rule_width_px')
  flags.DEFINE_float(
    'mm_per_pixel',
    None,
    'ground sampling distance, for lengths and widths in millimetres',
    flag_values=fv,
  )
  flags.DEFINE_integer(
    'tile_size',
    1024,
    'images larger than this are predicted in overlapping tiles of at most this size',
    lower_bound=1,
    flag_values=fv,
  )
  flags.DEFINE_float(
    'overlap', 0.125, 'overlap of neighbouring tiles, fraction of tile_size', flag_values=fv
  )
  flags.DEFINE_enum(
    'blend',
    'cosine',
    list(BLENDS),
    'how tiles are blended: cosine (cross-fade over the overlap) or gaussian (nnU-Net)',
    flag_values=fv,
  )
  flags.DEFINE_integer(
    'batch_size',
    None,
    'tiles per device call (default: one per local device)',
    lower_bound=1,
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'tune_malloc',
    True,
    "keep and reuse freed host memory (glibc): XLA's per-call CPU buffers are not page-faulted "
    'in again on every tile (~15% faster on large photos on the CPU; crackjax.deploy.hostmem)',
    flag_values=fv,
  )
  flags.DEFINE_bool('overwrite', False, 'replace existing outputs', flag_values=fv)
  flags.DEFINE_float(
    'min_length',
    measure.DEFAULT_MIN_LENGTH,
    'a connected crack component shorter than this (skeleton, pixels) is speckle, not a crack: '
    'left out of measurements.csv and cracks.csv, kept in the mask (0: every component; '
    'crackjax/deploy/measure.py: DEFAULT_MIN_LENGTH, how it was chosen)',
    lower_bound=0.0,
    flag_values=fv,
  )
  flags.DEFINE_enum(
    'direction',
    'vertical',
    list(measure.DIRECTIONS),
    'which image axis runs along the road (the driving direction), for crack types: '
    'vertical (a camera looking along the lane) or horizontal',
    flag_values=fv,
  )
  flags.DEFINE_float(
    'max_megapixels',
    DEFAULT_MAX_MEGAPIXELS,
    "larger images are refused before decoding (PIL's guard against decompression bombs); "
    'raise it for trusted large photos',
    flag_values=fv,
  )
  # Every value is checked before any image, so a bad one never stops a run half-way. (The
  # tiling ones are checked again by Predictor, for Python users, in its own words.)
  flags.register_validator(
    'threshold',
    lambda v: v is None or 0 <= v <= 1,  # NaN passes the bounds above (no comparison holds)
    message='--threshold must be a number in [0, 1] (crack where probability > it)',
    flag_values=fv,
  )
  flags.register_validator(
    'min_length',
    lambda v: 0 <= v < math.inf,
    message='--min_length must be a finite number >= 0 (pixels of skeleton)',
    flag_values=fv,
  )
  flags.register_validator(
    'tile_size',
    lambda v: v < 1 or v >= MIN_TILE_SIZE,  # < 1: the bound's own message
    message=f'--tile_size must be at least {MIN_TILE_SIZE} (MIN_TILE_SIZE, '
    'crackjax/deploy/predict_command.py): a smaller tile gives the model less context than '
    'it sees at once and is predicted many times over in the overlap',
    flag_values=fv,
  )
  flags.register_validator(
    'overlap',
    lambda v: 0 <= v < 1,
    message='--overlap must be in [0, 1) (a fraction of --tile_size)',
    flag_values=fv,
  )
  flags.register_validator(
    'mm_per_pixel',
    lambda v: v is None or (math.isfinite(v) and v > 0),  # inf passed a bare v > 0
    message='--mm_per_pixel must be a finite number > 0 (millimetres per pixel)',
    flag_values=fv,
  )
  flags.register_validator(
    'max_megapixels', lambda v: v > 0, message='--max_megapixels must be > 0', flag_values=fv
  )


#: The smallest --tile_size. The models see well over 100 px at once (a U-Net of four 2x
#: poolings and two 3x3 convolutions a level: about 200 px), so a smaller tile gives each
#: pixel less context than training did, and every tile is one more model call.
MIN_TILE_SIZE = 128

#: `_main`'s `select`: (files, names, out) -> the part of the photos to predict and the folder
#: to predict them into (a shard of crackjax-survey's, crackjax.survey.shards; the names are
#: those of all the photos, as one process gives them).
Select = Callable[[list[Input], list[str], Path], tuple[list[Input], list[str], Path]]


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  return COMMAND.run(_main, argv)


_INTERRUPTED = (
  'interrupted (Ctrl-C); the photos done so far are in --out: run the same command again to '
  'predict the others (those done are kept and listed in its tables).'
)
COMMAND = cli.Command.restoring(PROG, _define_flags, usage=USAGE, interrupted=_INTERRUPTED)


def _main(fv: flags.FlagValues, inputs: list[str], select: Select | None = None) -> int:
  """Runs the command on the parsed flags and the inputs named after them (`select`: a part
  of the photos, into a folder of its own, `Select`); returns the exit status."""
  if (not fv.workdir and not fv.model) or not fv.out:
    sys.exit(
      f'{PROG}: --out=DIR and one of --model=NAME|FILE|URL and --workdir=RUN are required; '
      f'usage: {USAGE}'
    )
  cli.refuse_two_models(fv, PROG)
  if not inputs and not fv.examples:
    sys.exit(
      f'{PROG}: no input given; name image files, folders or globs after the flags (or '
      '--examples for four example road photos).'
    )
  if fv.model and fv.step is not None:
    sys.exit(f'{PROG}: --step chooses a checkpoint of a --workdir run; a model file has one.')
  if fv.tune_malloc:
    # Before the first computation (restoring the run), when JAX's CPU threads start.
    hostmem.tune_malloc()
  # The model first: a wrong --workdir or --model is reported before anything else.
  try:
    run = (
      load_model(fv.model, allow_plugins=fv.allow_plugins)
      if fv.model
      else load_run(fv.workdir, step=fv.step)
    )
    self_check.verify(run, lambda: plain_predictor(run))  # weights as the card's self check
  except (OSError, ValueError, CheckpointError) as e:
    # OSError: a missing run or file, a failed download; ValueError: a damaged, altered or
    # newer model file (model_file.ModelFileError).
    sys.exit(f'{PROG}: {" ".join(str(e).split())}')
  origin = f'run {fv.workdir}' if fv.workdir else f'model {fv.model}'
  scales, flip, rule = _test_time(fv, run)  # before any work (the examples written, a photo read)
  out = Path(fv.out)
  files = _files(fv, inputs, out)
  names = output_names(files)
  files, names, out = select(files, names, out) if select else (files, names, out)
  tables = [out / 'measurements.csv', out / 'cracks.csv', out / 'index.html']
  # Every path this prediction writes, and with --overwrite every map of the earlier one it
  # removes, checked before anything is read or written: a link planted in OUT (OUT/probs ->
  # elsewhere) must not carry a write or a delete outside it.
  try:
    outputs.check_inside(out, [*tables, *(f for n in names for f in map_files(out, n))])
    earlier = _earlier(out) if fv.overwrite else []
    outputs.check_inside(out, [f for n in earlier for f in map_files(out, n)])
  except outputs.UnsafeOutputError as e:
    sys.exit(f'{PROG}: {e}')
  predict_batch.refuse_existing_tables(out, tables, fv.overwrite)  # before the lock is taken
  outputs.require_writable(PROG, f'--out={out}', out)
  try:
    predictor = Predictor(
      run.model,
      run.params,
      batch_stats=run.batch_stats,
      threshold=run.threshold if fv.threshold is None else fv.threshold,
      tile_size=fv.tile_size,
      overlap=fv.overlap,
      blend=fv.blend,
      batch_size=fv.batch_size,
      scales=scales,
      flip=flip,
      photo_threshold=(
        (run.config.get('eval') or {}).get('photo_threshold')
        if fv.photo_threshold is None
        else fv.photo_threshold
      ),
      width_rule=rule,
    )
  except ValueError as e:  # the tiling and test-time flags, checked as for Python users
    sys.exit(f'{PROG}: {e}')
  check_scaled_sizes(files, predictor)
  # Two predictions into one --out would replace each other's tables and orphan the maps:
  # --out is held as a training run holds its workdir (the second ends in one line).
  try:
    with identity.lock(out):
      return predict_batch.predict_all(
        fv, run, predictor, files, names, out, tables, earlier, origin
      )
  except identity.RunLockedError as e:
    sys.exit(f'{PROG}: --out={out}: {e}')


def _files(fv: flags.FlagValues, inputs: list[str], out: Path) -> list[Path]:
  """The image files to predict: those `inputs` name and, with --examples, the example photos
  written into OUT/examples/ first (a folder of their own, `examples.write_into`; the example
  files alone are predicted, nothing else the folder holds); each input's problem printed;
  none: the command ends."""
  if fv.examples:
    from crackjax.deploy import examples

    outputs.require_writable(PROG, f'--out={out}', out)
    try:
      inputs = [*inputs, *(str(p) for p in examples.write_into(out))]
    except ValueError as e:  # UnsafeOutputError, NotTheirFolder: one line, nothing written
      sys.exit(f'{PROG}: --examples: {e}')
  files, problems = find_inputs(inputs, out=out)
  for problem in problems:
    print(f'{PROG}: {problem}', file=sys.stderr)
  if not files:
    sys.exit(f'{PROG}: no image files to predict.')
  return files


def _test_time(fv: flags.FlagValues, run) -> tuple[tuple[float, ...], bool, float | None]:
  """(scales, flip, width rule) of the flags, else of the model file's or run's eval group;
  a value out of range ends the command in one line naming it (`model_schema.TEST_TIME`)."""
  try:
    scales, flip = test_time_of(fv.scales, fv.flip, run.config.get('eval'))
    return scales, flip, width_rule.of_command(fv.width_rule, run.config.get('eval'))
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')


def check_scaled_sizes(files: list[Input], predictor: Predictor) -> None:
  """Ends the command in one line, before any photo is predicted, where a test-time scale
  below 1 makes a photo smaller than one model input (`inference.check_scaled_size`; sizes
  from the files' headers)."""
  if min(predictor.scales) >= 1:
    return
  for item in files:
    size = photo_size(item.path)
    if size is None:
      continue  # unreadable: said and skipped when its turn comes
    try:
      check_scaled_size(size[1], size[0], predictor.scales, predictor.multiple)
    except ValueError as e:
      sys.exit(f'{PROG}: {item.path}: {e}')


def _earlier(out: Path) -> list[str]:
  """The names of the earlier prediction in `out` (its table, or its progress file while it
  is unfinished): what --overwrite replaces whole."""
  names = written.earlier_names(out / 'measurements.csv')
  unfinished = written.read_progress(out)
  if unfinished is not None:
    names += [*unfinished[1], *unfinished[2]]
  return sorted({n for n in names if written._own_name(n)})


if __name__ == '__main__':
  sys.exit(main())
