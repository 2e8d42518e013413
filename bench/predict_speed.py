"""Speed of `crackjax.Predictor` on large photos, per pixel against whole 480x320 images.

The model is the config's (random parameters: speed does not depend on their values), or a
trained run's with `--workdir`. In one invocation it times

* `whole` (the baseline): `--num_small` images of 320x480 (H x W), each predicted whole
  (batch 1), the way the evaluation predicts CrackForest;
* `tiled`: `--num_large` photos of `--large_hw` (default 3000x4000, a 12 MP phone or survey
  frame) through the Predictor at each combination of `--tile_size` and `--overlap` (lists),
  including padding, tiling, blending and the host-side copies;

after one untimed call of each (compilation). The baseline is timed again after every
setting and each setting is compared with the mean of the baselines around it. It prints,
per setting, the tile layout, the pixels the model computes relative to the photo's, photos/s,
megapixels/s and the ratio of seconds per megapixel, tiled / whole (<= 1: tiling is not
slower per pixel).

With ``--test_time`` it also times test-time variants (issue 55 item 3: maps at several scales,
and mirrored, averaged; `Predictor(scales=, flip=)`) on the same whole images, each against the
baselines around it: seconds a photo and the ratio to the plain prediction. An entry is the
scales joined by ``+``, ``:flip`` to mirror too: ``--test_time=2,1+2,1:flip``; ``width:W``
is the downward width rule at W px (issue 76, `crackjax.evaluation.width_rule`: a photo whose
predicted cracks are wider than W px is predicted again at half size), its row saying how many
photos went to half size. Its cost depends on the photos and the model, so time it with a
trained model (``--model=roads-unet-cpu`` or ``--workdir``, at its stored threshold) and real
photos (``--photos=DIR``: up to ``--num_small`` images of a folder as they are, instead of the
random 320x480 ones).

  python bench/predict_speed.py --config=configs/crackforest_exp.py:cpu
  python bench/predict_speed.py --workdir=workdirs/cfd_exp_cpu --tile_size=512,1024 \\
      --overlap=0,0.0625,0.125 --num_large=2
  python bench/predict_speed.py --config=configs/release/roads_unet_cpu.py \\
      --test_time=2,1+2,0.5+1+2,1:flip --num_large=0
  python bench/predict_speed.py --model=roads-unet-cpu --photos=PHOTOS --num_small=20 \\
      --num_large=0 --test_time=width:6,0.5
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from absl import flags

from crackjax import cli
from crackjax.deploy import hostmem
from crackjax.runs import outputs

REPO = Path(__file__).resolve().parents[1]
PROG = 'bench/predict_speed.py'


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string(
    'workdir',
    None,
    "a trained run to take the model from (default: the config's model with random parameters)",
    flag_values=fv,
  )
  flags.DEFINE_string(
    'model', None, 'a model file or released model instead (its threshold too)', flag_values=fv
  )
  flags.DEFINE_string(
    'photos', None, 'a folder of photos timed instead of random 320x480 ones', flag_values=fv
  )
  flags.DEFINE_list('large_hw', ['3000', '4000'], 'H,W of the large photos', flag_values=fv)
  flags.DEFINE_integer('num_large', 2, 'large photos to time per setting', flag_values=fv)
  flags.DEFINE_integer('num_small', 10, '320x480 images to time per baseline', flag_values=fv)
  flags.DEFINE_list(
    'tile_size', [], 'Predictor tile sizes to time (default: its default)', flag_values=fv
  )
  flags.DEFINE_list(
    'overlap', [], 'Predictor tile overlaps to time (default: its default)', flag_values=fv
  )
  flags.DEFINE_string('blend', None, 'Predictor blend (default: its default)', flag_values=fv)
  flags.DEFINE_integer(
    'batch_size', None, 'tiles per call (default: Predictor default)', flag_values=fv
  )
  flags.DEFINE_list(
    'test_time',
    [],
    'also time these test-time variants on the whole images: scales joined by +, :flip to '
    'mirror too, width:W the downward width rule (e.g. 2,1+2,1:flip,width:6)',
    flag_values=fv,
  )
  flags.DEFINE_string('json', None, 'also write the results here', flag_values=fv)
  flags.DEFINE_bool(
    'tune_malloc',
    True,
    'crackjax.deploy.hostmem.tune_malloc() first, as crackjax-predict does (--notune_malloc: glibc '
    'defaults)',
    flag_values=fv,
  )
  flags.DEFINE_list(
    'shapes',
    [],
    'also time the model alone (one compiled call, batch 1, no padding or blending) on '
    'inputs of these HxW shapes, e.g. 320x480,1024x1024: what one tile costs per pixel',
    flag_values=fv,
  )


def _photo(h: int, w: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def _peak_rss_mb() -> float:
  """The process's peak resident memory (VmHWM) in MB; NaN where /proc is absent."""
  try:
    for line in Path('/proc/self/status').read_text().splitlines():
      if line.startswith('VmHWM:'):
        return int(line.split()[1]) / 1024
  except OSError:
    pass
  return float('nan')


def _tiles(photo_predictor, h: int, w: int) -> tuple[int, int, int, int]:
  th, ys, tw, xs = photo_predictor.layout(h, w)
  return len(ys), len(xs), th, tw


def _time_shape(photo_predictor, h: int, w: int) -> dict:
  """MP/s of the compiled model alone on one [1, h, w, 3] input (about 1.2 s of calls)."""
  import jax

  x = np.random.default_rng(0).random((1, h, w, 3), dtype=np.float32)
  run = lambda: jax.block_until_ready(
    photo_predictor._apply(photo_predictor.params, photo_predictor.batch_stats, x)
  )  # noqa: E731
  run()  # compile
  calls = max(1, round(1.2e6 / (h * w)))
  t0 = time.perf_counter()
  for _ in range(calls):
    run()
  seconds = (time.perf_counter() - t0) / calls
  row = {'shape': [h, w], 'seconds': seconds, 'mp_per_s': h * w / seconds / 1e6}
  print(f'model alone on {h}x{w}: {seconds * 1000:.0f} ms per call, {row["mp_per_s"]:.3f} MP/s')
  return row


def _time(photo_predictor, images, choices: list | None = None) -> float:
  """Seconds to predict `images` after an untimed call on one image of each shape (its
  compilations; with `choices`, on every image: which photos a width rule takes to half size,
  and so which half-size buckets it compiles, depends on the photo); each photo's width-rule
  choice appended to `choices` when given."""
  warm = images if choices is not None else {i.shape: i for i in images}.values()
  for image in warm:
    photo_predictor.predict(image)  # compile (and warm up) the buckets
  t0 = time.perf_counter()
  for image in images:
    choice = photo_predictor.predict(image)[1]
    if choices is not None:
      choices.append(choice)
  return time.perf_counter() - t0


def width_rule_entry(entry: str) -> float | None:
  """The width (px) of a ``--test_time`` entry ``width:W``; None for another entry.

  Raises:
    ValueError: W not a width (`width_rule.parse`).
  """
  from crackjax.evaluation import width_rule

  head, _, value = entry.partition(':')
  return width_rule.check(width_rule.parse(value)) if head == 'width' else None


def test_time_variant(entry: str) -> tuple[tuple[float, ...], bool]:
  """(scales, flip) of a ``--test_time`` entry: '1+2' -> ((1.0, 2.0), False), '1:flip' ->
  ((1.0,), True).

  Raises:
    ValueError: not scales joined by '+', optionally followed by ':flip'.
  """
  scales, sep, tail = entry.partition(':')
  if sep and tail != 'flip':
    raise ValueError(f'--test_time entry {entry!r}: only :flip may follow the scales')
  try:
    return tuple(float(x) for x in scales.split('+')), bool(sep)
  except ValueError:
    raise ValueError(f'--test_time entry {entry!r}: scales must be numbers joined by +') from None


def _time_test_time(plain, small, entries, baselines) -> list[dict]:
  """Each ``--test_time`` variant on the whole `small` images against the `plain` predictor
  (the baseline's) timed around it (appended to `baselines`): seconds a photo and their ratio."""
  from crackjax.deploy import predictor

  rows = []
  for entry in entries:
    rule = width_rule_entry(entry)
    scales, flip = ((1.0,), False) if rule is not None else test_time_variant(entry)
    variant = predictor.Predictor(
      plain.model,
      plain.params,
      batch_stats=plain.batch_stats,
      threshold=plain.threshold,
      tile_size=plain.tile_size,
      scales=scales,
      flip=flip,
      width_rule=rule,
    )
    choices = []
    t = _time(variant, small, choices)
    baselines.append(_time(plain, small))
    t_plain = (baselines[-2] + baselines[-1]) / 2
    row = {
      'test_time': entry,
      'seconds_per_photo': t / len(small),
      'plain_seconds_per_photo': t_plain / len(small),
      'ratio_to_plain': t / t_plain,
    }
    halved = ''
    if rule is not None:
      row['photos_halved'] = sum(c.halved for c in choices)
      halved = f' ({row["photos_halved"]} of {len(choices)} photos at half size)'
    rows.append(row)
    print(
      f'test time {entry}: {1000 * row["seconds_per_photo"]:.0f} ms a photo against '
      f'{1000 * row["plain_seconds_per_photo"]:.0f} ms plain: {row["ratio_to_plain"]:.2f}x'
      f'{halved}',
      flush=True,
    )
  return rows


def main(argv=None) -> dict:
  """Runs the benchmark, prints the report and returns its figures."""
  default = f'{REPO / "configs" / "crackforest_exp.py"}:cpu'
  fv, _ = cli.parse_command(PROG, argv, _define_flags, default_config=default)
  for entry in fv.test_time:  # refused before anything is timed
    try:
      if width_rule_entry(entry) is None:
        test_time_variant(entry)
    except ValueError as e:
      sys.exit(f'{PROG}: {e}')
  tuned = hostmem.tune_malloc() if fv.tune_malloc else False
  import jax

  from crackjax.deploy import predictor
  from crackjax.experiment import restored
  from crackjax.experiment.build import build

  try:
    experiment = build(fv.config)
  except ValueError as e:
    sys.exit(f'{PROG}: bad config: {" / ".join(str(e).splitlines())}')
  threshold = 0.5
  if fv.workdir or fv.model:
    run = restored.load_run(fv.workdir) if fv.workdir else restored.load_model(fv.model)
    model, params, source = run.model, run.params, f'{fv.workdir or fv.model} step {run.step}'
    batch_stats, threshold = run.batch_stats, run.threshold
  else:
    model = experiment.model
    variables = jax.jit(model.init)(jax.random.key(0), np.zeros((1, 32, 32, 3), np.float32))
    params, source = variables['params'], 'random parameters'
    batch_stats = variables.get('batch_stats')  # BatchNorm's running averages, if any
  common = {'batch_stats': batch_stats}
  if fv.batch_size is not None:
    common['batch_size'] = fv.batch_size
  if fv.blend is not None:
    common['blend'] = fv.blend
  settings = [
    {
      **({'tile_size': int(t)} if t else {}),
      **({'overlap': float(o)} if o else {}),
    }
    for t in (fv.tile_size or [None])
    for o in (fv.overlap or [None])
    if fv.num_large  # --num_large=0: no tiled photo (e.g. --test_time alone)
  ]
  # 320 x 480: one whole image (tile_size 512: never tiled)
  whole = predictor.Predictor(
    model, params, batch_stats=batch_stats, threshold=threshold, tile_size=512
  )
  lh, lw = (int(v) for v in fv.large_hw)
  small = [_photo(320, 480, i) for i in range(fv.num_small)]
  if fv.photos:  # real photos as they are (the first --num_small by name)
    from crackjax.deploy import photos

    found = sorted(f.path for f in photos.find_inputs([fv.photos])[0])[: fv.num_small]
    small = [photos.load_photo(path) for path in found]
    if not small:
      sys.exit(f'{PROG}: --photos={fv.photos}: no image files')
  large = [_photo(lh, lw, 100 + i) for i in range(fv.num_large)]
  mp_small = sum(image.shape[0] * image.shape[1] for image in small) / 1e6
  mp_large = fv.num_large * lh * lw / 1e6
  device = f'{jax.default_backend()} ({jax.devices()[0].device_kind}) x{jax.device_count()}'
  fields = run.config.model if fv.workdir or fv.model else fv.config.model
  print(f'{source}, {dict(fields.items())}')
  cpus = os.cpu_count()
  print(f'jax {jax.__version__}, {device}, python {platform.python_version()}, {cpus} CPUs')
  print(f'host malloc: {"tuned (crackjax.deploy.hostmem)" if tuned else "glibc defaults"}')
  whole_ones = f'photos of {fv.photos}' if fv.photos else '320x480 images'
  print(
    f'{fv.num_large} photos of {lh}x{lw} per setting; the baseline ({len(small)} whole '
    f'{whole_ones}, batch 1) is timed before the first setting and after each, and a setting '
    'is compared with the mean of the two baselines around it.'
  )
  shape_rows = [_time_shape(whole, *(int(v) for v in hw.split('x'))) for hw in fv.shapes]
  # Baselines interleaved with the settings, so that a drift of the machine's speed during
  # the run shows up in both sides of each ratio.
  baselines = [_time(whole, small)]
  rows = []
  for kwargs in settings:
    tiled = predictor.Predictor(model, params, **common, **kwargs)
    t_large = _time(tiled, large)
    baselines.append(_time(whole, small))
    t_small = (baselines[-2] + baselines[-1]) / 2
    row = {
      'tile_size': tiled.tile_size,
      'overlap': tiled.overlap,
      'overlap_px': round(tiled.overlap * tiled.tile_size),
      'blend': tiled.blend,
      'batch_size': tiled.batch_size,
      'tiles': '{}x{} of {}x{}'.format(*_tiles(tiled, lh, lw)),
      'pixels_predicted': tiled.pixels_predicted(lh, lw),
      'tiled_images_per_s': fv.num_large / t_large,
      'tiled_mp_per_s': mp_large / t_large,
      'whole_images_per_s': fv.num_small / t_small,
      'whole_mp_per_s': mp_small / t_small,
      'ratio_s_per_mp': (t_large / mp_large) / (t_small / mp_small),
    }
    rows.append(row)
    print(
      f'tile {row["tile_size"]}, overlap {row["overlap"]:g} ({row["overlap_px"]} px), '
      f'{row["blend"]}, batch {row["batch_size"]}: {row["tiles"]} tiles, pixels predicted '
      f'{row["pixels_predicted"]:.3f}x; {row["tiled_images_per_s"]:.3f} photos/s, '
      f'{row["tiled_mp_per_s"]:.3f} MP/s; whole 320x480 {row["whole_mp_per_s"]:.3f} MP/s; '
      f'seconds per MP, tiled / whole: {row["ratio_s_per_mp"]:.3f}',
      flush=True,
    )
  test_time_rows = _time_test_time(whole, small, fv.test_time, baselines)
  print(
    'whole 320x480 baselines (MP/s, in order): '
    + ', '.join(f'{mp_small / t:.3f}' for t in baselines)
  )
  print('ratio <= 1: tiling is not slower per pixel than whole 320x480 images.')
  r = {
    'model': source,
    'model_fields': {k: v for k, v in fv.config.model.items() if k != 'name'},
    'jax': jax.__version__,
    'device': device,
    'large_hw': [lh, lw],
    'baseline_mp_per_s': [mp_small / t for t in baselines],
    'settings': rows,
    'shapes': shape_rows,
    'test_time': test_time_rows,
    'tuned_malloc': tuned,
    'host_peak_rss_mb': _peak_rss_mb(),
  }
  print(f'host peak RSS: {r["host_peak_rss_mb"]:.0f} MB')
  if fv.json:
    Path(fv.json).write_text(outputs.dumps(r, indent=1, default=str))
  return r


if __name__ == '__main__':
  main()
