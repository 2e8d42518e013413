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
one row per image in OUT/measurements.csv (crack ratio, length, widths, segments, cracks)
and one row per crack in OUT/cracks.csv (a component at least --min_length px long: bounding
box, length, widths, orientation to the road given by --direction, type, and with
--mm_per_pixel the LTPP severity; see crackjax/deploy/measure.py), then prints a summary.
<name> is the photo's path under the folder it was found in, without its extension
(`output_names`: unique and stable; two photos that differ only in extension keep it,
road_jpg and road_png). OUT/index.html is one self-contained page over it all (summary, a
card per photo, sortable; crackjax/deploy/html_report.py). An unreadable file is reported,
by name, and skipped; so are other files in the folders, counted; an animated image is
predicted from its first frame, said; nothing is overwritten without --overwrite. Linked
files and folders in an input folder are followed (a loop or a broken link is skipped with a
line); outputs are written and removed only inside OUT: a symbolic link inside it is refused
before anything is written (OUT itself may be one).
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import PIL.Image
import PIL.ImageOps
import tqdm
from absl import flags

from crackjax.config import flags as config_flags
from crackjax.deploy import hostmem, html_report, measure
from crackjax.deploy.predictor import BLENDS, Predictor, load_model, load_run, read_config
from crackjax.runs import exits, logs, outputs
from crackjax.training import checkpoints
from crackjax.training.checkpoints import CheckpointError

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.tif', '.tiff', '.webp', '.gif')
# PIL refuses images over twice its MAX_IMAGE_PIXELS (a guard against decompression bombs);
# the same limit, in megapixels, is --max_megapixels's default.
DEFAULT_MAX_MEGAPIXELS = 2 * PIL.Image.MAX_IMAGE_PIXELS / 1e6
OVERLAY_COLOUR = (255, 0, 0)
PROG = 'crackjax-predict'
USAGE = (
  f'{PROG} (--model=NAME|FILE|URL | --workdir=RUN) --out=DIR IMAGE_OR_FOLDER_OR_GLOB... [flags]'
)


class UnreadableImageError(ValueError):
  """A file that is not an image PIL can decode (the message names it and says why)."""


def _distinct_figures(value: float, limit: float) -> tuple[str, str]:
  """`value` and `limit` with the fewest decimals (at most 6) that still tell them apart, and
  each at least to its first significant digit.

  So a 4.0001 MP photo over a 4 MP limit does not read "4 MP is over the 4 MP limit", nor a
  0.2 MP photo over a 0.001 MP limit "over the 0 MP limit".
  """

  def shown(x: float, decimals: int) -> str:
    if 0 < abs(x) < 1:  # at least to the first significant digit
      decimals = max(decimals, min(6, -math.floor(math.log10(abs(x)))))
    text = f'{x:.{decimals}f}'
    return text.rstrip('0').rstrip('.') if '.' in text else text  # 4.10 -> 4.1, 4.00 -> 4

  decimals = next((d for d in range(7) if f'{value:.{d}f}' != f'{limit:.{d}f}'), 6)
  return shown(value, decimals), shown(limit, decimals)


def load_photo(
  path: str | Path,
  *,
  max_megapixels: float = DEFAULT_MAX_MEGAPIXELS,
  notes: list[str] | None = None,
) -> np.ndarray:
  """An image file as H x W x 3 uint8 RGB, upright (EXIF orientation applied).

  Grey, palette and RGBA images are converted to RGB (alpha dropped); 16-bit and other
  high-bit-depth grey images are scaled by their actual range (the smallest bit depth that
  holds their maximum, at least 8), so a 12-bit image is not stored almost black. An animated
  image gives its first frame, with a line in `notes`.

  Raises:
    UnreadableImageError: the file cannot be decoded (truncated, not an image, ...) or has
      more than `max_megapixels` million pixels (read from its header, before decoding).
  """
  # Our own limit (from the header, below) replaces PIL's, so that the message can name the
  # flag that lifts it.
  pil_limit, PIL.Image.MAX_IMAGE_PIXELS = PIL.Image.MAX_IMAGE_PIXELS, None
  try:
    with PIL.Image.open(path) as image:
      megapixels = image.width * image.height / 1e6
      if megapixels > max_megapixels:
        size, limit = _distinct_figures(megapixels, max_megapixels)
        raise UnreadableImageError(
          f'{path}: {image.width}x{image.height} ({size} MP) is over the {limit} MP limit '
          f'that guards against decompression bombs; pass '
          f'--max_megapixels={int(megapixels) + 1} if the file is trusted'
        )
      frames = getattr(image, 'n_frames', 1)
      image.load()  # PIL decodes lazily: force it so broken files fail here, by name.
      image = PIL.ImageOps.exif_transpose(image)
  except UnreadableImageError:
    raise
  except Exception as e:  # PIL raises OSError, SyntaxError, ValueError ... for bad files.
    raise UnreadableImageError(f'{path}: cannot read image ({type(e).__name__}: {e})') from e
  finally:
    PIL.Image.MAX_IMAGE_PIXELS = pil_limit
  if frames > 1 and notes is not None:
    notes.append(f'{path} is animated ({frames} frames): predicted its first frame')
  if image.width == 0 or image.height == 0:
    raise UnreadableImageError(f'{path}: empty image ({image.width}x{image.height})')
  if image.mode in ('I', 'I;16', 'I;16B', 'I;16L', 'F'):
    grey = np.asarray(image).astype(np.float64)
    top = max(float(grey.max(initial=0)), 1.0)
    full = 255.0 if top <= 255 else float(2 ** int(np.ceil(np.log2(top + 1))) - 1)
    grey = np.clip(np.round(grey * (255.0 / full)), 0, 255).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=2)
  return np.asarray(image.convert('RGB'))


@dataclasses.dataclass(frozen=True)
class Input:
  """An image to predict: its path, and its path under the folder it was found in (its file
  name for a file or a glob match), which names its outputs."""

  path: Path
  relative: Path


def find_inputs(specs: Sequence[str]) -> tuple[list[Input], list[str]]:
  """Image files named by `specs` (files, folders, globs), in order, without duplicates.

  Returns:
    (inputs, problems): folders contribute their image files, subfolders included (sorted;
    hidden files and folders left out); a spec that matches nothing, and the other files a
    folder holds (counted, a few named), are problems, reported by the caller.
  """
  inputs: dict[Path, Input] = {}
  problems = []
  for spec in specs:
    path = Path(os.path.expanduser(spec))
    if path.is_dir():
      visible = sorted(_folder_files(path, spec, problems))
      found = [Input(p, p.relative_to(path)) for p in visible if _is_image(p)]
      others = [p for p in visible if not _is_image(p)]
      if not found:
        problems.append(f'{spec}: folder holds no image files ({", ".join(IMAGE_EXTENSIONS)})')
      elif others:
        named = ', '.join(str(p.relative_to(path)) for p in others[:3])
        more = ', ...' if len(others) > 3 else ''
        problems.append(
          f'{spec}: skipped {len(others)} file(s) that are not images ({named}{more})'
        )
    elif path.is_file():
      found = [Input(path, Path(path.name))]
    else:
      matches = sorted(Path(p) for p in glob.glob(os.path.expanduser(spec), recursive=True))
      found = [Input(p, Path(p.name)) for p in matches if p.is_file()]
      if not found:
        problems.append(f'{spec}: no such file, folder or matching files')
    for item in found:
      inputs.setdefault(item.path.resolve(), item)
  return list(inputs.values()), problems


def _folder_files(root: Path, spec: str, problems: list[str]) -> list[Path]:
  """The visible files under `root` (hidden files and folders left out), symbolically linked
  files and folders followed, as most tools that take a folder of photos do. A link to a
  folder searched already (a loop, or a folder inside `root`), a broken link and a folder that
  cannot be read are skipped with a line in `problems`, never silently."""
  files, broken, links = [], [], []
  searched = {root.resolve()}
  pending = [root]
  while pending or links:
    if not pending:
      # Links last: a folder reached both directly and through a link is searched once, as
      # itself, and the link is the one named.
      link = links.pop(0)
      real = link.resolve()
      if real in searched or any(p in searched for p in real.parents):
        problems.append(
          f'{spec}: skipped the link {link.relative_to(root)} -> {os.readlink(link)}: that '
          'folder is searched already (a loop, or a folder inside this one)'
        )
        continue
      searched.add(real)
      pending.append(link)
    folder = pending.pop()
    try:
      entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
      problems.append(f'{spec}: cannot read folder {folder} ({e.strerror or e}); skipped')
      continue
    for entry in entries:
      if entry.name.startswith('.'):
        continue
      path = Path(entry.path)
      if entry.is_dir():  # follows a link
        (links if entry.is_symlink() else pending).append(path)
      elif entry.is_file():
        files.append(path)
      elif entry.is_symlink():  # neither a file nor a folder behind it
        broken.append(str(path.relative_to(root)))
  if broken:
    more = ', ...' if len(broken) > 3 else ''
    problems.append(
      f'{spec}: skipped {len(broken)} broken link(s) ({", ".join(sorted(broken)[:3])}{more})'
    )
  return files


def _is_image(path: Path) -> bool:
  return path.suffix.lower() in IMAGE_EXTENSIONS


def output_names(inputs: Sequence[Input]) -> list[str]:
  """Unique output names, in order: each input's relative path without its extension
  ('road', 'north/road'). Where several share one (case ignored, as some file systems do),
  those that differ in extension keep it ('road_jpg', 'road_png'); any still alike get their
  folder's name in front, then a counter. The same inputs always get the same names."""

  def key(name: str) -> str:
    return name.lower()

  def suffix(i: int) -> str:
    return inputs[i].path.suffix.lstrip('.').lower()

  names = [item.relative.with_suffix('').as_posix() for item in inputs]
  # Extensions first, but only in a group whose extensions differ: road.jpg in two folders
  # gets its folder ('north_road'), not 'north_road_jpg'.
  suffixes: dict[str, set[str]] = {}
  for i, n in enumerate(names):
    suffixes.setdefault(key(n), set()).add(suffix(i))
  names = [f'{n}_{suffix(i)}' if len(suffixes[key(n)]) > 1 else n for i, n in enumerate(names)]
  counts: dict[str, int] = {}
  for n in names:
    counts[key(n)] = counts.get(key(n), 0) + 1
  names = [
    f'{inputs[i].path.parent.name}_{n}' if counts[key(n)] > 1 else n for i, n in enumerate(names)
  ]
  seen: dict[str, int] = {}
  unique = []
  for n in names:
    seen[key(n)] = seen.get(key(n), 0) + 1
    unique.append(n if seen[key(n)] == 1 else f'{n}_{seen[key(n)]}')
  return unique


def map_files(out: Path, name: str) -> list[Path]:
  """The files crackjax-predict writes for output `name`: probability map, mask, overlay."""
  return [
    out / 'probs' / f'{name}.png',
    out / 'masks' / f'{name}.png',
    out / 'overlays' / f'{name}.jpg',
  ]


def earlier_names(table: Path) -> list[str]:
  """The output names an earlier prediction listed in its measurements.csv ([] if none)."""
  try:
    with table.open(newline='') as f:
      return [csv_text(row['name']) for row in csv.DictReader(f) if row.get('name')]
  except (OSError, csv.Error, UnicodeDecodeError):
    return []


def _own_name(name: str) -> bool:
  """Whether `name` (read from an earlier measurements.csv) is one `output_names` gives: a
  relative path without '..', which cannot lead out of OUT by itself."""
  return bool(name) and not Path(name).is_absolute() and '..' not in Path(name).parts


def remove_maps(out: Path, names: Sequence[str]) -> list[str]:
  """Removes the map files of `names` in `out` (and folders that become empty); returns
  the names that had any. Only the files `map_files` names are touched, and only inside
  `out`.

  Raises:
    outputs.UnsafeOutputError: a file to remove is, or lies under, a symbolic link below
      `out`, or resolves outside it (nothing of that name is removed).
  """
  removed = []
  for name in names:
    if not _own_name(name):
      continue  # not a name this tool writes: an edited table must not reach outside `out`
    files = [f for f in map_files(out, name) if f.is_file()]
    # The command checked these before it began; checked again just before they go, since
    # a link planted meanwhile would carry the delete outside `out`.
    outputs.check_inside(out, files)
    for f in files:
      f.unlink()
      folder = f.parent
      while folder != out and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
    if files:
      removed.append(name)
  return removed


def overlay(photo: np.ndarray, mask: np.ndarray) -> np.ndarray:
  """The photo with crack pixels painted OVERLAY_COLOUR."""
  out = photo.copy()
  out[mask] = OVERLAY_COLOUR
  return out


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
    'a connected crack component shorter than this (skeleton, pixels) is speckle, not a crack '
    'of cracks.csv (crackjax/deploy/measure.py: DEFAULT_MIN_LENGTH, how it was chosen)',
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


# A photo cut into at least this many tiles gets its own progress bar (an 80 MP photo took
# two minutes on a 2-core CPU with none).
TILE_PROGRESS_FROM = 8


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


#: What a spreadsheet reads as the start of a formula: a text cell beginning with one is
#: written behind a single quote, as OWASP advises against "CSV injection" (a photo named
#: '=HYPERLINK(...).jpg' must stay text in measurements.csv and cracks.csv).
FORMULA_STARTS = ('=', '+', '-', '@', '\t', '\r')


def csv_cell(value):
  """`value` as a CSV cell that no spreadsheet evaluates (numbers unchanged)."""
  if isinstance(value, str) and value.startswith(FORMULA_STARTS):
    return "'" + value
  return value


def csv_text(cell: str) -> str:
  """The text a `csv_cell` cell was written from."""
  if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS):
    return cell[1:]
  return cell


def _write_csv(path: Path, fields: Sequence[str], rows: Sequence[dict]) -> None:
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(
      {k: ('' if v is None else csv_cell(v)) for k, v in row.items()} for row in rows
    )


def _write(path: Path, array: np.ndarray, **save_kwargs) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  PIL.Image.fromarray(array).save(path, **save_kwargs)


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  with exits.one_line_exits(PROG, interrupted=_INTERRUPTED):
    return _main(argv)


_INTERRUPTED = (
  'interrupted (Ctrl-C); the photos done so far are in --out: run the same command again '
  '(with --overwrite once it names the outputs already there).'
)


def page_origin(fv: flags.FlagValues) -> str:
  """The model as index.html names it: a run by its folder's name (pages get shared; the
  absolute path says where the author keeps it), a model file by its file name."""
  if fv.workdir:
    return f'run {checkpoints.run_directory(fv.workdir).resolve().name}'
  spec = str(fv.model)
  return f'model {spec if "://" in spec else Path(spec).name}'


def _main(argv: Sequence[str] | None) -> int:
  """Runs the command (argv without the program name); returns the exit status."""
  argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
  logs.quiet_third_party_logs()  # orbax's routine restore warnings are not the user's business
  fv = flags.FlagValues()
  _define_flags(fv)
  inputs = config_flags.parse_flags(fv, argv, prog=PROG, usage=USAGE)[1:]
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
  files, problems = find_inputs(inputs)
  for problem in problems:
    print(f'{PROG}: {problem}', file=sys.stderr)
  if not files:
    sys.exit(f'{PROG}: no image files to predict.')
  out = Path(fv.out)
  table = out / 'measurements.csv'
  tables = [table, out / 'cracks.csv', out / 'index.html']
  names = output_names(files)
  # Every path this prediction writes, and with --overwrite every map of the earlier one it
  # removes, checked before anything is read or written: a link planted in OUT (OUT/probs ->
  # elsewhere) must not carry a write or a delete outside it.
  try:
    outputs.check_inside(out, [*tables, *(f for n in names for f in map_files(out, n))])
    earlier = [n for n in earlier_names(table) if _own_name(n)] if fv.overwrite else []
    outputs.check_inside(out, [f for n in earlier for f in map_files(out, n)])
  except outputs.UnsafeOutputError as e:
    sys.exit(f'{PROG}: {e}')
  existing = [t for t in tables if t.exists()]
  if existing and not fv.overwrite:
    sys.exit(f'{PROG}: {existing[0]} exists; pass --overwrite or choose another --out.')
  problem = config_flags.unwritable(out)
  if problem:
    sys.exit(f'{PROG}: cannot write --out={out}: {problem}.')
  if fv.tune_malloc:
    # Before the first computation (restoring the run), when JAX's CPU threads start.
    hostmem.tune_malloc()
  try:
    run = load_model(fv.model) if fv.model else load_run(fv.workdir, step=fv.step)
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
  threshold = run.threshold if fv.threshold is None else fv.threshold
  source = run.threshold_source if fv.threshold is None else '--threshold'
  print(
    f'{PROG}: {len(files)} image(s), {origin} step {run.step}, crack where '
    f'probability > {threshold:g} ({source})',
    file=sys.stderr,
  )

  # An --overwrite replaces the earlier prediction whole: its maps that this one does not
  # rewrite go too (`earlier`, below), so OUT never mixes two runs' outputs.
  rows, skipped, notes, cracks, thumbnails = [], [], [], [], {}
  start, predict_seconds, megapixels = time.perf_counter(), 0.0, 0.0
  for item, name in tqdm.tqdm(
    list(zip(files, names, strict=True)), unit='img', desc='predict', file=sys.stderr
  ):
    path = item.path
    targets = map_files(out, name)
    existing = [t for t in targets if t.exists()]
    if existing and not fv.overwrite:
      skipped.append(f'{path}: {existing[0]} exists (pass --overwrite)')
      continue
    try:
      photo = load_photo(path, max_megapixels=fv.max_megapixels, notes=notes)
    except UnreadableImageError as e:
      skipped.append(str(e))
      continue
    t0 = time.perf_counter()
    prob = _predict(predictor, photo, name)
    predict_seconds += time.perf_counter() - t0
    megapixels += photo.shape[0] * photo.shape[1] / 1e6
    mask = predictor.mask(prob, threshold)
    _write(targets[0], np.round(np.clip(prob, 0.0, 1.0) * 255.0).astype(np.uint8))
    _write(targets[1], mask.astype(np.uint8) * 255)
    painted = overlay(photo, mask)
    _write(targets[2], painted, quality=90)
    thumbnails[name] = html_report.thumbnail_uri(painted)
    row = {'name': name, 'source': str(path), 'height': photo.shape[0], 'width': photo.shape[1]}
    totals, found = measure.measure_photo(
      mask, mm_per_pixel=fv.mm_per_pixel, min_length=fv.min_length, direction=fv.direction
    )
    cracks += [{'name': name, **c} for c in found]
    rows.append(row | totals | {'cracks': len(found)})

  for line in notes:
    print(f'{PROG}: note: {line}', file=sys.stderr)
  for line in skipped:
    print(f'{PROG}: skipped {line}', file=sys.stderr)
  if rows:
    out.mkdir(parents=True, exist_ok=True)
    fields = ['name', 'source', 'height', 'width', *measure.MEASURE_FIELDS, 'cracks']
    _write_csv(table, fields, rows)
    _write_csv(out / 'cracks.csv', ['name', *measure.CRACK_FIELDS], cracks)
    html_report.write_index(out, rows, cracks, thumbnails, title=f'{PROG}: {page_origin(fv)}')
    try:
      stale = remove_maps(out, sorted(set(earlier) - {r['name'] for r in rows}))
    except outputs.UnsafeOutputError as e:  # only a link planted during this prediction
      sys.exit(f'{PROG}: {e}')
    if stale:
      print(
        f'{PROG}: removed the maps of {len(stale)} image(s) of the earlier prediction in {out} '
        f'that this one does not hold ({", ".join(stale[:3])}{", ..." if len(stale) > 3 else ""}).',
        file=sys.stderr,
      )
    print(measure.format_summary(measure.summarize(rows)))
    print(crack_summary(cracks, fv.min_length))
    seconds = time.perf_counter() - start
    print(
      f'{PROG}: wrote {len(rows)} image(s) to {out} (probs/, masks/, overlays/, '
      f'measurements.csv, cracks.csv, index.html); skipped {len(skipped)}. {megapixels:.1f} MP in '
      f'{seconds:.1f} s: '
      f'{len(rows) / seconds:.3f} images/s, {megapixels / seconds:.2f} MP/s; the model '
      f'{predict_seconds:.1f} s of it (compilation included), reading, writing and measuring '
      'the rest.',
      file=sys.stderr,
    )
  return 0 if rows else 1


if __name__ == '__main__':
  sys.exit(main())
