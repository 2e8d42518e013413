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

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import tqdm
from absl import flags

from crackjax import cli
from crackjax.deploy import hostmem, html_report, measure
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
from crackjax.deploy.predictor import BLENDS, Predictor
from crackjax.engine import checkpoints
from crackjax.engine.checkpoints import CheckpointError
from crackjax.experiment.restored import load_model, load_run, read_config
from crackjax.runs import identity, outputs

PROG = 'crackjax-predict'
USAGE = (
  f'{PROG} (--model=NAME|FILE|URL | --workdir=RUN) --out=DIR IMAGE_OR_FOLDER_OR_GLOB... [flags]'
)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string(
    'workdir', None, 'the training run (the --workdir of launch.py)', flag_values=fv
  )
  flags.DEFINE_string(
    'model',
    None,
    'instead of --workdir: a released model (crackjax-models), a model file or its URL',
    flag_values=fv,
  )
  flags.DEFINE_list(
    'allow_plugins',
    [],
    'with --model: plugin modules the model file names that may be imported (a file never '
    'imports code on its own word; only for a file you trust; released models need none)',
    flag_values=fv,
  )
  flags.DEFINE_string('out', None, 'output folder (created)', flag_values=fv)
  flags.DEFINE_float(
    'threshold',
    None,
    "crack where probability > threshold (default: the run's threshold.json, else 0.5)",
    lower_bound=0.0,
    upper_bound=1.0,
    flag_values=fv,
  )
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
  flags.DEFINE_integer('step', None, 'checkpoint step (default: the latest)', flag_values=fv)
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
    lambda v: v is None or v > 0,
    message='--mm_per_pixel must be > 0 (millimetres per pixel)',
    flag_values=fv,
  )
  flags.register_validator(
    'step', lambda v: v is None or v >= 1, message='--step must be >= 1', flag_values=fv
  )
  flags.register_validator(
    'max_megapixels', lambda v: v > 0, message='--max_megapixels must be > 0', flag_values=fv
  )


#: The smallest --tile_size. The models see well over 100 px at once (a U-Net of four 2x
#: poolings and two 3x3 convolutions a level: about 200 px), so a smaller tile gives each
#: pixel less context than training did, and every tile is one more model call.
MIN_TILE_SIZE = 128

# A photo cut into at least this many tiles gets its own progress bar (an 80 MP photo took
# two minutes on a 2-core CPU with none).
TILE_PROGRESS_FROM = 8


def call_pixels(predictor: Predictor, width: int, height: int) -> int:
  """The pixels of one model call on a `width` x `height` photo: a batch of its tiles, or the
  photo whole at its padded size when it is not tiled (never more than the photo needs)."""
  th, ys, tw, xs = predictor.layout(height, width)
  return th * tw * min(predictor.batch_size, len(ys) * len(xs))


@contextlib.contextmanager
def _stages(name: str, *, large: bool) -> Iterator[Callable[[str], None]]:
  """A line that names each stage after the tiles of a large photo (writing its maps,
  measuring: minutes on a 100 MP photo), as `stage(what)` calls; nothing for a small one."""
  if not large:
    yield lambda what: None
    return
  with tqdm.tqdm(
    total=len(STAGES), desc=f'{name}: after the tiles', leave=False, file=sys.stderr
  ) as bar:
    seen: list[str] = []

    def stage(what: str) -> None:
      if seen:
        bar.update(1)
      seen.append(what)
      bar.set_postfix_str(what)

    yield stage
    bar.update(len(STAGES) - bar.n)


#: What a large photo's stage bar counts (`_stages`): its maps, then `measure.STAGES`.
STAGES = ('mask', 'probs/', 'masks/', 'overlays/', *measure.STAGES)


def _predict(predictor: Predictor, photo: np.ndarray, name: str) -> np.ndarray:
  """The probability map of `photo`, with a per-tile progress bar for a large one."""
  tiles = predictor.num_tiles(*photo.shape[:2])
  if tiles < TILE_PROGRESS_FROM:
    return predictor(photo)
  with tqdm.tqdm(total=tiles, unit='tile', desc=name, leave=False, file=sys.stderr) as bar:
    return predictor(photo, progress=bar.update)


def crack_summary(cracks: Sequence[dict], min_length: float) -> str:
  """One line on cracks.csv: how many cracks of each type, and the worst severity."""
  counts = {t: sum(c['type'] == t for c in cracks) for t in measure.CRACK_TYPES}
  kinds = ', '.join(f'{n} {t}' for t, n in counts.items() if n)
  line = f'{len(cracks)} crack(s) of at least {min_length:g} px' + (f': {kinds}' if kinds else '')
  rated = [c['severity'] for c in cracks if c['severity']]
  if rated:
    worst = max(rated, key=['low', 'moderate', 'high'].index)
    line += f'; worst severity {worst} (LTPP, by mean width)'
  return line + ' (cracks.csv)'


def _thumbnail_of(overlay_file: Path) -> str:
  """The page's thumbnail of a photo done before, from its overlay (decoded at a reduced
  scale: a 108 MP overlay is not read whole for a 320 px picture)."""
  with PIL.Image.open(overlay_file) as image:
    side = html_report.THUMBNAIL_SIDE
    image.draft('RGB', (side, side))
    image = image.convert('RGB')
    image.thumbnail((side, side))
    return html_report.thumbnail_uri(np.asarray(image))


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  return COMMAND.run(_main, argv)


_INTERRUPTED = (
  'interrupted (Ctrl-C); the photos done so far are in --out: run the same command again to '
  'predict the others (those done are kept and listed in its tables).'
)
# orbax's routine restore warnings are not the user's business (quiet_logs).
COMMAND = cli.Command(
  PROG,
  _define_flags,
  usage=USAGE,
  interrupted=_INTERRUPTED,
  interruptible=True,
  quiet_logs=True,
)


def page_origin(fv: flags.FlagValues) -> str:
  """The model as index.html names it: a run by its folder's name (pages get shared; the
  absolute path says where the author keeps it), a model file by its file name."""
  if fv.workdir:
    return f'run {checkpoints.run_directory(fv.workdir).resolve().name}'
  spec = str(fv.model)
  return f'model {spec if "://" in spec else Path(spec).name}'


def _main(fv: flags.FlagValues, inputs: list[str]) -> int:
  """Runs the command on the parsed flags and the inputs named after them; returns the exit
  status."""
  if (not fv.workdir and not fv.model) or not fv.out:
    sys.exit(
      f'{PROG}: --out=DIR and one of --model=NAME|FILE|URL and --workdir=RUN are required; '
      f'usage: {USAGE}'
    )
  if fv.workdir and fv.model:
    sys.exit(f'{PROG}: give only one of --workdir=RUN and --model=NAME|FILE|URL.')
  if not inputs:
    sys.exit(f'{PROG}: no input given; name image files, folders or globs after the flags.')
  if fv.model and fv.step is not None:
    sys.exit(f'{PROG}: --step chooses a checkpoint of a --workdir run; a model file has one.')
  if fv.workdir:
    try:
      read_config(fv.workdir)  # A wrong --workdir is reported before anything else.
    except FileNotFoundError as e:
      sys.exit(f'{PROG}: {e}')
  origin = f'run {fv.workdir}' if fv.workdir else f'model {fv.model}'
  out = Path(fv.out)
  files, problems = find_inputs(inputs, out=out)
  for problem in problems:
    print(f'{PROG}: {problem}', file=sys.stderr)
  if not files:
    sys.exit(f'{PROG}: no image files to predict.')
  table = out / 'measurements.csv'
  tables = [table, out / 'cracks.csv', out / 'index.html']
  names = output_names(files)
  # Every path this prediction writes, and with --overwrite every map of the earlier one it
  # removes, checked before anything is read or written: a link planted in OUT (OUT/probs ->
  # elsewhere) must not carry a write or a delete outside it.
  try:
    outputs.check_inside(out, [*tables, *(f for n in names for f in map_files(out, n))])
    earlier = _earlier(out) if fv.overwrite else []
    outputs.check_inside(out, [f for n in earlier for f in map_files(out, n)])
  except outputs.UnsafeOutputError as e:
    sys.exit(f'{PROG}: {e}')
  _refuse_existing_tables(out, tables, fv.overwrite)
  problem = cli.unwritable(out)
  if problem:
    sys.exit(f'{PROG}: cannot write --out={out}: {problem}.')
  if fv.tune_malloc:
    # Before the first computation (restoring the run), when JAX's CPU threads start.
    hostmem.tune_malloc()
  try:
    run = (
      load_model(fv.model, allow_plugins=fv.allow_plugins)
      if fv.model
      else load_run(fv.workdir, step=fv.step)
    )
  except (OSError, ValueError, CheckpointError) as e:
    # OSError: a missing run or file, a failed download; ValueError: a damaged, altered or
    # newer model file (model_file.ModelFileError).
    sys.exit(f'{PROG}: {" ".join(str(e).split())}')
  try:
    predictor = Predictor(
      run.model,
      run.params,
      batch_stats=run.batch_stats,
      threshold=run.threshold,
      tile_size=fv.tile_size,
      overlap=fv.overlap,
      blend=fv.blend,
      batch_size=fv.batch_size,
    )
  except ValueError as e:  # the tiling flags, checked where Python users get the same check
    sys.exit(f'{PROG}: {e}')
  # Two predictions into one --out would replace each other's tables and orphan the maps:
  # --out is held as a training run holds its workdir (the second ends in one line).
  try:
    with identity.lock(out):
      return _predict_all(fv, run, predictor, files, names, out, tables, earlier, origin)
  except identity.RunLockedError as e:
    sys.exit(f'{PROG}: --out={out}: {e}')


def _earlier(out: Path) -> list[str]:
  """The names of the earlier prediction in `out` (its table, or its progress file while it
  is unfinished): what --overwrite replaces whole."""
  names = written.earlier_names(out / 'measurements.csv')
  unfinished = written.read_progress(out)
  if unfinished is not None:
    names += [*unfinished[1], *unfinished[2]]
  return sorted({n for n in names if written._own_name(n)})


def _refuse_existing_tables(out: Path, tables: list[Path], overwrite: bool) -> None:
  """Ends the command if `out` holds tables it may not replace: without --overwrite, only
  those of an unfinished prediction (the same command again finishes it)."""
  existing = [t for t in tables if t.exists()]
  if existing and not overwrite and not written.unfinished(out):
    sys.exit(f'{PROG}: {existing[0]} exists; pass --overwrite or choose another --out.')


def _predict_all(fv, run, predictor, files, names, out, tables, earlier, origin) -> int:
  """The photos, the tables and the summary, with --out held (`_main`)."""
  _refuse_existing_tables(out, tables, fv.overwrite)  # again: another one may have ended
  threshold = run.threshold if fv.threshold is None else fv.threshold
  progress = _progress(fv, run, out, origin, threshold)
  source = run.threshold_source if fv.threshold is None else '--threshold'
  print(
    f'{PROG}: {len(files)} image(s), {origin} step {run.step}, crack where '
    f'probability > {threshold:g} ({source})',
    file=sys.stderr,
  )

  # An --overwrite replaces the earlier prediction whole: its maps that this one does not
  # rewrite go too (`earlier`, below), so OUT never mixes two runs' outputs.
  rows, skipped, notes, cracks, thumbnails = [], [], [], [], {}
  start, predict_seconds, megapixels, resumed = time.perf_counter(), 0.0, 0.0, 0
  memory = hostmem.PhotoMemory(lambda w, h: call_pixels(predictor, w, h))
  for item, name in tqdm.tqdm(
    list(zip(files, names, strict=True)), unit='img', desc='predict', file=sys.stderr
  ):
    path = item.path
    targets = map_files(out, name)
    if not fv.overwrite and progress.is_done(name, out):
      # Done by an earlier run of this command (interrupted): kept, and in the tables.
      row, found, thumbnails[name] = _done_before(progress, name, path, targets)
      rows.append(row)
      cracks += found
      resumed += 1
      continue
    why = _why_skipped(fv, progress, memory, path, name, targets)
    if why:
      skipped.append(why)
      continue
    try:
      photo = load_photo(path, max_megapixels=fv.max_megapixels, notes=notes)
    except UnreadableImageError as e:
      skipped.append(str(e))
      continue
    t0 = time.perf_counter()
    prob = _predict(predictor, photo, name)
    predict_seconds += time.perf_counter() - t0
    height, width = photo.shape[:2]
    megapixels += height * width / 1e6
    progress.start(name)
    with _stages(name, large=predictor.num_tiles(height, width) >= TILE_PROGRESS_FROM) as stage:
      stage('mask')
      mask = predictor.mask(prob, threshold)
      stage('probs/')
      written.save_image(targets[0], written.as_8bit(prob), 'PNG')
      del prob
      stage('masks/')
      written.save_image(targets[1], mask.view(np.uint8) * np.uint8(255), 'PNG')
      stage('overlays/')
      painted = written.overlay(photo, mask)
      del photo
      written.save_image(targets[2], painted, 'JPEG', quality=90)
      thumbnails[name] = html_report.thumbnail_uri(painted)
      del painted
      row = {'name': name, 'source': str(path), 'height': height, 'width': width}
      totals, found = measure.measure_photo(mask, progress=stage, **_measuring(fv))
    row |= totals | {'cracks': len(found)}
    progress.add(name, row, found)
    cracks += [{'name': name, **c} for c in found]
    rows.append(row)

  for line in notes:
    print(f'{PROG}: note: {line}', file=sys.stderr)
  for line in skipped:
    print(f'{PROG}: skipped {line}', file=sys.stderr)
  if not rows:
    return 1
  _write_tables(fv, out, tables, rows, cracks, thumbnails, earlier)
  print(measure.format_summary(measure.summarize(rows)))
  print(crack_summary(cracks, fv.min_length))
  seconds = time.perf_counter() - start
  _say_written(out, len(rows), resumed, len(skipped), megapixels, seconds, predict_seconds)
  return 0


def _say_written(out, count, resumed, skipped, megapixels, seconds, predict_seconds) -> None:
  """The command's last line: what it wrote and skipped, how fast, the model's share."""
  before = f' ({resumed} of them done by an earlier run of this command)' if resumed else ''
  print(
    f'{PROG}: wrote {count} image(s){before} to {out} (probs/, masks/, overlays/, '
    f'measurements.csv, cracks.csv, index.html); skipped {skipped}. {megapixels:.1f} MP in '
    f'{seconds:.1f} s: '
    f'{count / seconds:.3f} images/s, {megapixels / seconds:.2f} MP/s; the model '
    f'{predict_seconds:.1f} s of it (compilation included), reading, writing and measuring '
    'the rest.',
    file=sys.stderr,
  )


def _measuring(fv) -> dict[str, Any]:
  """The measuring flags, as `measure.measure_photo` takes them."""
  return {'mm_per_pixel': fv.mm_per_pixel, 'min_length': fv.min_length, 'direction': fv.direction}


def _done_before(progress, name: str, path: Path, targets: list[Path]):
  """A photo predicted by an earlier run of this command: its row, its cracks and the
  thumbnail of its overlay, as that run recorded them."""
  done = progress.done[name]
  cracks = [{'name': name, **c} for c in done['cracks']]
  return done['row'] | {'source': str(path)}, cracks, _thumbnail_of(targets[2])


def _why_skipped(fv, progress, memory, path: Path, name: str, targets: list[Path]) -> str | None:
  """Why the photo at `path` is not predicted, or None: maps of it exist that are not this
  command's (an earlier run's cut short are predicted again), or it will not fit the memory
  left (read from its header: it is not decoded)."""
  existing = [t for t in targets if t.exists()]
  # Maps that an earlier run of this command began (its progress file says so) are its own,
  # cut short (a Ctrl-C between them): predicted again. Others are not ours to replace.
  if existing and not fv.overwrite and not progress.started(name):
    return f'{path}: {existing[0]} exists (pass --overwrite)'
  size = photo_size(path)
  if size and size[0] * size[1] <= fv.max_megapixels * 1e6:
    return memory.refusal(path, *size) or None
  return None


def _progress(fv, run, out: Path, origin: str, threshold: float) -> written.Progress:
  """The progress file of --out for this prediction's settings (`predict_outputs.Progress`);
  settings other than an earlier, unfinished prediction's end the command in one line."""
  settings = {
    'model': origin,
    'step': run.step,
    'threshold': threshold,
    'tile_size': fv.tile_size,
    'overlap': fv.overlap,
    'blend': fv.blend,
    'mm_per_pixel': fv.mm_per_pixel,
    'min_length': fv.min_length,
    'direction': fv.direction,
  }
  try:
    return written.Progress(out, settings, restart=fv.overwrite)
  except written.SettingsDiffer as e:
    sys.exit(f'{PROG}: {e}')


def _write_tables(fv, out, tables, rows, cracks, thumbnails, earlier) -> None:
  """measurements.csv, cracks.csv and index.html of `rows`; the maps of an earlier
  prediction that this one does not hold removed (said); the outputs recorded as crackjax's
  own; the progress file finished."""
  fields = ['name', 'source', 'height', 'width', *measure.MEASURE_FIELDS, 'cracks']
  written.write_text(tables[0], written.csv_table(fields, rows))
  written.write_text(tables[1], written.csv_table(['name', *measure.CRACK_FIELDS], cracks))
  html_report.write_index(out, rows, cracks, thumbnails, title=f'{PROG}: {page_origin(fv)}')
  try:
    stale = written.remove_maps(out, sorted(set(earlier) - {r['name'] for r in rows}))
  except outputs.UnsafeOutputError as e:  # only a link planted during this prediction
    sys.exit(f'{PROG}: {e}')
  # Recorded as crackjax's own: a later search of a folder holding OUT leaves them out.
  own = [f for r in rows for f in map_files(out, r['name'])] + tables
  outputs.record_outputs(out, [f.relative_to(out).as_posix() for f in own], PROG)
  written.finish(out)
  if stale:
    print(
      f'{PROG}: removed the maps of {len(stale)} image(s) of the earlier prediction in {out} '
      f'that this one does not hold ({", ".join(stale[:3])}{", ..." if len(stale) > 3 else ""}).',
      file=sys.stderr,
    )


if __name__ == '__main__':
  sys.exit(main())
