"""How much tiling changes a prediction: tiled against whole, per overlap and blend.

Loads a photo (optionally enlarged with `--scale`, Lanczos), predicts it whole (one tile as
large as the photo) and tiled with `--tile_size` at each `--overlaps` value and each of
`--blends`, and prints per setting the tile layout, the pixels predicted (relative to the
photo), the mean and 99.9th percentile of |p_tiled - p_whole| and the share of mask pixels (at
the run's threshold) that differ.

  python bench/tile_fidelity.py --workdir=workdirs/cfd_exp_cpu \\
      --image=../shared/datasets/crackforest/image/041.jpg --scale=4
"""

from __future__ import annotations

import sys

import numpy as np
import PIL.Image
from absl import flags

from crackjax import cli
from crackjax.deploy import predict_command, predictor
from crackjax.experiment import restored

PROG = 'bench/tile_fidelity.py'


def main(argv=None) -> list[dict]:
  """Prints one line per overlap and returns the figures."""
  argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
  fv = flags.FlagValues()
  flags.DEFINE_string('workdir', None, 'a trained run', flag_values=fv)
  flags.DEFINE_string('image', None, 'a photo', flag_values=fv)
  flags.DEFINE_float('scale', 1.0, 'enlarge the photo by this factor first', flag_values=fv)
  flags.DEFINE_integer('tile_size', 1024, 'Predictor tile size', flag_values=fv)
  flags.DEFINE_list(
    'overlaps', ['0.0625', '0.125', '0.1875', '0.25'], 'overlaps to compare', flag_values=fv
  )
  flags.DEFINE_list(
    'blends', list(predictor.BLENDS), 'tile blends to compare (Predictor blend=)', flag_values=fv
  )
  cli.parse_flags(fv, argv, prog=PROG, usage=f'{PROG} --workdir=RUN --image=PHOTO [flags]')
  if not fv.workdir or not fv.image:
    sys.exit(f'{PROG}: --workdir and --image are required')
  run = restored.load_run(fv.workdir)
  photo = predict_command.load_photo(fv.image)
  if fv.scale != 1.0:
    size = (round(photo.shape[1] * fv.scale), round(photo.shape[0] * fv.scale))
    photo = np.asarray(PIL.Image.fromarray(photo).resize(size, PIL.Image.Resampling.LANCZOS))
  h, w = photo.shape[:2]
  whole = predictor.Predictor(
    run.model, run.params, batch_stats=run.batch_stats, tile_size=max(h, w) + 32
  )(photo)
  print(f'{fv.image} x{fv.scale:g}: {h}x{w}, run step {run.step}, threshold {run.threshold:g}')
  rows = []
  for overlap in (float(v) for v in fv.overlaps):
    for blend in fv.blends:
      photo_predictor = predictor.Predictor(
        run.model,
        run.params,
        batch_stats=run.batch_stats,
        tile_size=fv.tile_size,
        overlap=overlap,
        blend=blend,
      )
      tiled = photo_predictor(photo)
      th, ys, tw, xs = photo_predictor.layout(h, w)
      diff = np.abs(tiled - whole)
      differ = (tiled > run.threshold) != (whole > run.threshold)
      row = {
        'overlap': overlap,
        'overlap_px': round(overlap * photo_predictor.tile_size),
        'blend': blend,
        'tiles': f'{len(ys)}x{len(xs)} of {th}x{tw}',
        'pixels_predicted': photo_predictor.pixels_predicted(h, w),
        'mean_abs_diff': float(diff.mean()),
        'p999_abs_diff': float(np.quantile(diff, 0.999)),
        'mask_differs': float(differ.mean()),
      }
      rows.append(row)
      print(
        f'tile {fv.tile_size}, overlap {overlap:g} ({row["overlap_px"]} px), {blend}: '
        f'{row["tiles"]}, pixels predicted {row["pixels_predicted"]:.2f}x, mean |dp| '
        f'{row["mean_abs_diff"]:.4f}, 99.9th pct {row["p999_abs_diff"]:.2f}, mask pixels that '
        f'differ {row["mask_differs"] * 100:.2f}%',
        flush=True,
      )
  return rows


if __name__ == '__main__':
  main()
