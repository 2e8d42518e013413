"""Speed of `crackjax.Predictor` on large photos, per pixel against whole 480x320 images.

The model is the config's (random parameters: speed does not depend on their values), or a
trained run's with `--workdir`. In one invocation it times

* `whole`: `--num_small` images of 320x480 (H x W), each predicted whole (batch 1), the way
  the evaluation predicts CrackForest;
* `tiled`: `--num_large` photos of `--large_hw` (default 3000x4000, a 12 MP phone or survey
  frame) through the Predictor with `--tile_size` / `--overlap`, including padding, tiling,
  Gaussian blending and the host-side copies;

after one untimed call of each (compilation), and prints images/s, megapixels/s and the
ratio of seconds per megapixel, tiled / whole (< 1: tiling is not slower per pixel).

  python bench/predict_speed.py --config=configs/crackforest_exp.py:cpu
  python bench/predict_speed.py --workdir=workdirs/cfd_exp_cpu --tile_size=512 \\
      --overlap=0.125 --num_large=2
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from absl import flags

from crackjax import cli, validate

REPO = Path(__file__).resolve().parents[1]
PROG = 'bench/predict_speed.py'


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string(
    'workdir',
    None,
    "a trained run to take the model from (default: the config's model with random parameters)",
    flag_values=fv,
  )
  flags.DEFINE_list('large_hw', ['3000', '4000'], 'H,W of the large photos', flag_values=fv)
  flags.DEFINE_integer('num_large', 2, 'large photos to time', flag_values=fv)
  flags.DEFINE_integer('num_small', 10, '320x480 images to time', flag_values=fv)
  flags.DEFINE_integer(
    'tile_size', None, 'Predictor tile size (default: its default)', flag_values=fv
  )
  flags.DEFINE_float(
    'overlap', None, 'Predictor tile overlap (default: its default)', flag_values=fv
  )
  flags.DEFINE_integer(
    'batch_size', None, 'tiles per call (default: Predictor default)', flag_values=fv
  )


def _photo(h: int, w: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def _time(predictor, images) -> float:
  predictor(images[0])  # compile (and warm up) this shape bucket
  t0 = time.perf_counter()
  for image in images:
    predictor(image)
  return time.perf_counter() - t0


def main(argv=None) -> dict:
  """Runs the benchmark, prints the report and returns its figures."""
  default = f'{REPO / "configs" / "crackforest_exp.py"}:cpu'
  fv, _ = cli.parse_command(PROG, argv, _define_flags, default_config=default)
  import jax

  from crackjax import predict, state

  try:
    validate.check_config(fv.config)
  except validate.ConfigError as e:
    sys.exit(f'{PROG}: bad config: {" / ".join(str(e).splitlines())}')
  if fv.workdir:
    run = predict.load_run(fv.workdir)
    model, params, source = run.model, run.params, f'run {fv.workdir} step {run.step}'
    batch_stats = run.batch_stats
  else:
    model = state.create_model(fv.config)
    variables = jax.jit(model.init)(jax.random.key(0), np.zeros((1, 32, 32, 3), np.float32))
    params, source = variables['params'], 'random parameters'
    batch_stats = variables.get('batch_stats')  # BatchNorm's running averages, if any
  names = ('batch_size', 'tile_size', 'overlap')
  kwargs = {k: fv[k].value for k in names if fv[k].value is not None}
  # 320 x 480: one whole image
  whole = predict.Predictor(model, params, batch_stats=batch_stats, tile_size=512)
  tiled = predict.Predictor(model, params, batch_stats=batch_stats, **kwargs)
  lh, lw = (int(v) for v in fv.large_hw)
  small = [_photo(320, 480, i) for i in range(fv.num_small)]
  large = [_photo(lh, lw, 100 + i) for i in range(fv.num_large)]
  t_small = _time(whole, small)
  t_large = _time(tiled, large)
  mp_small = fv.num_small * 320 * 480 / 1e6
  mp_large = fv.num_large * lh * lw / 1e6
  r = {
    'model': source,
    'model_fields': {k: v for k, v in fv.config.model.items() if k != 'name'},
    'jax': jax.__version__,
    'device': f'{jax.default_backend()} ({jax.devices()[0].device_kind}) x{jax.device_count()}',
    'whole_images_per_s': fv.num_small / t_small,
    'whole_mp_per_s': mp_small / t_small,
    'tiled_images_per_s': fv.num_large / t_large,
    'tiled_mp_per_s': mp_large / t_large,
    'tile_size': tiled.tile_size,
    'overlap': tiled.overlap,
    'batch_size': tiled.batch_size,
  }
  r['ratio_s_per_mp'] = (t_large / mp_large) / (t_small / mp_small)
  print(f'{r["model"]}, {r["model_fields"]}')
  print(f'jax {r["jax"]}, {r["device"]}, python {platform.python_version()}, {os.cpu_count()} CPUs')
  print(
    f'whole 320x480, batch 1:   {r["whole_images_per_s"]:.2f} images/s, '
    f'{r["whole_mp_per_s"]:.3f} MP/s ({fv.num_small} images)'
  )
  print(
    f'tiled {lh}x{lw}, tile {r["tile_size"]}, overlap {r["overlap"]}, batch '
    f'{r["batch_size"]}: {r["tiled_images_per_s"]:.3f} images/s, {r["tiled_mp_per_s"]:.3f} '
    f'MP/s ({fv.num_large} photos)'
  )
  print(
    f'seconds per MP, tiled / whole: {r["ratio_s_per_mp"]:.2f} (<= 1: tiling is not slower '
    'per pixel)'
  )
  return r


if __name__ == '__main__':
  main()
