"""`crackjax-predict`'s work on its photos (`crackjax.deploy.predict_command` checks the
command line, restores the model and holds --out): each photo predicted (tiles with their own
progress bar on a large one), its maps written whole and measured, one at a time
(`predict_all`); a photo an earlier run of the command finished kept as it was, one that
will not fit the memory left skipped; then measurements.csv, cracks.csv, index.html and the
summary.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
import tqdm
from absl import flags

from crackjax.deploy import hostmem, html_report, measure, measure_summary
from crackjax.deploy import predict_outputs as written
from crackjax.deploy.photos import UnreadableImageError, load_photo, map_files, photo_size
from crackjax.deploy.predictor import Predictor
from crackjax.engine import checkpoints
from crackjax.evaluation import width_rule
from crackjax.runs import outputs

#: The command whose lines these are (`crackjax.deploy.predict_command`).
PROG = 'crackjax-predict'


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


def _predict(
  predictor: Predictor, photo: np.ndarray, name: str
) -> tuple[np.ndarray, width_rule.Choice]:
  """The probability map of `photo` and the width rule's choice (`Predictor.predict`), with a
  per-tile progress bar for a large one."""
  tiles = predictor.num_tiles(*photo.shape[:2])
  if tiles < TILE_PROGRESS_FROM:
    return predictor.predict(photo)
  with tqdm.tqdm(total=tiles, unit='tile', desc=name, leave=False, file=sys.stderr) as bar:
    return predictor.predict(photo, progress=bar.update)


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


def page_origin(fv: flags.FlagValues) -> str:
  """The model as index.html names it: a run by its folder's name (pages get shared; the
  absolute path says where the author keeps it), a model file by its file name."""
  if fv.workdir:
    return f'run {checkpoints.run_directory(fv.workdir).resolve().name}'
  spec = str(fv.model)
  return f'model {spec if "://" in spec else Path(spec).name}'


def predict_all(fv, run, predictor, files, names, out, tables, earlier, origin) -> int:
  """Predicts `files` (output `names`) with `predictor` into `out` under the command's flags
  `fv`, then writes the tables and prints the summary, with --out held (the command's
  `_main`); returns the exit status (1: no photo was predicted)."""
  refuse_existing_tables(out, tables, fv.overwrite)  # again: another one may have ended
  threshold = predictor.threshold  # the run's, or --threshold (`_main` made it so)
  progress = _progress(fv, run, out, origin, threshold, predictor)
  _say_threshold(fv, run, predictor, len(files), origin, threshold)

  # An --overwrite replaces the earlier prediction whole: its maps that this one does not
  # rewrite go too (`earlier`, below), so OUT never mixes two runs' outputs.
  rows, skipped, notes, cracks = [], [], [], []
  start, predict_seconds, megapixels, resumed = time.perf_counter(), 0.0, 0.0, 0
  memory = hostmem.PhotoMemory(lambda w, h: call_pixels(predictor, w, h))
  for item, name in tqdm.tqdm(
    list(zip(files, names, strict=True)), unit='img', desc='predict', file=sys.stderr
  ):
    path = item.path
    targets = map_files(out, name)
    if not fv.overwrite and progress.is_done(name, out):
      # Done by an earlier run of this command (interrupted, or finished before the tree
      # grew): kept, and in the tables.
      row, found = _done_before(progress, name, path)
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
    prob, choice = _predict(predictor, photo, name)
    predict_seconds += time.perf_counter() - t0
    height, width = photo.shape[:2]
    megapixels += height * width / 1e6
    progress.start(name)
    with _stages(name, large=predictor.num_tiles(height, width) >= TILE_PROGRESS_FROM) as stage:
      stage('mask')
      own = predictor.threshold_of(prob)  # the threshold, or the photo's own (--photo_threshold)
      mask = prob > own
      stage('probs/')
      written.save_image(targets[0], written.as_8bit(prob), 'PNG')
      del prob
      stage('masks/')
      written.save_image(targets[1], mask.view(np.uint8) * np.uint8(255), 'PNG')
      stage('overlays/')
      painted = written.overlay(photo, mask)
      written.save_image(targets[2], painted, 'JPEG', quality=90)
      del painted
      row = {'name': name, 'source': str(path), 'height': height, 'width': width}
      row |= {'threshold': round(own, 4)} | choice.columns()
      # The photo too: a frame almost all one value is no road photo (`measure.not_road`).
      totals, found = measure.measure_photo(mask, progress=stage, photo=photo, **_measuring(fv))
      del photo
    row |= totals | {'cracks': len(found)}
    progress.add(name, row, found)
    cracks += [{'name': name, **c} for c in found]
    rows.append(row)

  notes += _not_named(progress, names, out)
  for line in notes:
    print(f'{PROG}: note: {line}', file=sys.stderr)
  for line in skipped:
    print(f'{PROG}: skipped {line}', file=sys.stderr)
  if not rows:
    return 1
  _write_tables(fv, out, tables, rows, cracks, earlier)
  print(measure_summary.format_summary(measure_summary.summarize(rows)))
  print(crack_summary(cracks, fv.min_length))
  seconds = time.perf_counter() - start
  _say_written(out, len(rows), resumed, len(skipped), megapixels, seconds, predict_seconds)
  return 0


def _not_named(progress, names: Sequence[str], out: Path) -> list[str]:
  """The note on photos OUT's manifest lists that this command does not name (gone from the
  tree): kept in OUT, left out of the tables."""
  others = sorted(set(progress.done) - set(names))
  if not others:
    return []
  shown = ', '.join(others[:3]) + (', ...' if len(others) > 3 else '')
  return [
    f'{out} holds {len(others)} photo(s) predicted earlier with these settings that this '
    f'command does not name ({shown}): kept in OUT and its manifest, not in the tables'
  ]


def _say_threshold(fv, run, predictor: Predictor, count: int, origin: str, threshold: float):
  """The command's first line: how many photos, which model, and where crack begins (the
  threshold and its source; with --photo_threshold, each photo's own blend of it); with a
  width rule, which photos are predicted again at half size."""
  source = run.threshold_source if fv.threshold is None else '--threshold'
  weight, rule = predictor.photo_threshold, predictor.width_rule
  own = (
    ''
    if weight is None
    else f"; each photo's own: {weight:g} x that + {1 - weight:g} x its map's Otsu threshold"
  )
  if rule is not None:
    own += (
      f'; a photo whose cracks are wider than {rule:g} px (median over the skeleton of its '
      'mask) is predicted again at half size (measurements.csv: scale, rule_width_px)'
    )
  print(
    f'{PROG}: {count} image(s), {origin} step {run.step}, crack where '
    f'probability > {threshold:g} ({source}){own}',
    file=sys.stderr,
  )


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


def _done_before(progress, name: str, path: Path):
  """A photo predicted by an earlier run of this command: its row and its cracks, as that run
  recorded them."""
  done = progress.done[name]
  cracks = [{'name': name, **c} for c in done['cracks']]
  return done['row'] | {'source': str(path)}, cracks


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
  if size and size[0] * size[1] <= fv.max_megapixels * 1e6 and not fv.ignore_memory_estimate:
    return memory.refusal(path, *size) or None
  return None


def _progress(
  fv, run, out: Path, origin: str, threshold: float, predictor: Predictor
) -> written.Progress:
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
  # Absent when off: an earlier unfinished run's settings (from before them) still hold.
  if predictor.photo_threshold is not None:
    settings['photo_threshold'] = predictor.photo_threshold
  if predictor.width_rule is not None:
    settings['width_rule'] = predictor.width_rule
  try:
    return written.Progress(out, settings, restart=fv.overwrite)
  except written.SettingsDiffer as e:
    sys.exit(f'{PROG}: {e}')


def _write_tables(fv, out, tables, rows, cracks, earlier) -> None:
  """measurements.csv, cracks.csv and index.html of `rows`; the maps of an earlier
  prediction that this one does not hold removed (said); the outputs recorded as crackjax's
  own; the progress file finished."""
  fields = ['name', 'source', 'height', 'width', 'threshold', *width_rule.COLUMNS]
  fields += [*measure.MEASURE_FIELDS, 'cracks']
  written.write_text(tables[0], written.csv_table(fields, rows))
  written.write_text(tables[1], written.csv_table(['name', *measure.CRACK_FIELDS], cracks))
  # Each card's thumbnail read back from its overlay as its page is written: one page however
  # the photos were predicted (in one go, resumed, in shards), none held in memory meanwhile.
  thumbnail = lambda name: _thumbnail_of(map_files(out, name)[2])
  try:
    # A survey's cards go to OUT/pages/: never through a link planted there.
    outputs.check_inside(out, [out / html_report.PAGES_DIR / '0001.html'])
    html_report.write_index(out, rows, cracks, thumbnail, title=f'{PROG}: {page_origin(fv)}')
  except outputs.UnsafeOutputError as e:
    sys.exit(f'{PROG}: {e}')
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


def refuse_existing_tables(out: Path, tables: list[Path], overwrite: bool) -> None:
  """Ends the command if `out` holds tables it may not replace: without --overwrite, only
  those of a prediction whose progress file (or manifest, once finished) is in `out` (the
  same command again finishes it, or adds the photos it does not list; other settings are
  refused by `predict_outputs.Progress`)."""
  existing = [t for t in tables if t.exists()]
  if existing and not overwrite and written.read_progress(out) is None:
    sys.exit(f'{PROG}: {existing[0]} exists; pass --overwrite or choose another --out.')
