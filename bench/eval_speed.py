"""Wall time of the strict and tolerance evaluation protocols on a CrackForest-sized test set.

Ground truth: the 46 CrackForest test images' real masks (``groundTruth/NNN.mat``,
crack = Segmentation in {2, 4}) when ``--data_dir`` is given and holds the dataset
(from the repository root: ``--data_dir=../shared/datasets/crackforest``), otherwise
synthetic thin random crack polylines (2-3 px wide) on 320x480.
Predictions are synthetic: a blurred, partly dropped-out copy of the ground truth plus
smooth background texture and pixel noise, passed through a sigmoid (float32), so
that low thresholds predict wide blobs and scattered false positives as a real
network's output does (the tolerance protocol thins every one of them).

With ``--probs PATH.npz`` the probability maps and ground truth are read from a file
instead (keys ``probs``: float [N, H, W] in [0, 1], ``gts``: [N, H, W] 0/1), e.g. a
model's saved outputs on the test set. Real outputs matter: the synthetic maps once
hid a matching that took minutes on a real network's maps.

Usage::

    python bench/eval_speed.py [--num_images 46] [--repeats 3]
    python bench/eval_speed.py --data_dir=../shared/datasets/crackforest  # real masks
    python bench/eval_speed.py --probs PATH.npz [--repeats 1] [--protocols tolerance]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import scipy
import skimage
from scipy import ndimage as ndi

from crackjax.evaluation import evaluate, thin

REPO = Path(__file__).resolve().parents[1]
H, W = 320, 480


def cpu_name() -> str:
  try:
    for line in Path('/proc/cpuinfo').read_text().splitlines():
      if line.startswith('model name'):
        return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def test_stems() -> list[str]:
  # Load splits.py by path: importing the tfds_builders package pulls in TFDS.
  path = REPO / 'tfds_builders' / 'crackforest' / 'splits.py'
  spec = importlib.util.spec_from_file_location('_cf_splits', path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return list(mod.CRACKFOREST_TEST)


def real_gts(data_dir: Path, n: int) -> list[np.ndarray] | None:
  from scipy.io import loadmat

  gt_dir = data_dir / 'groundTruth'
  if not gt_dir.is_dir():
    return None
  stems = test_stems()
  stems = (stems * math.ceil(n / len(stems)))[:n]
  gts = []
  for s in stems:
    seg = np.asarray(loadmat(gt_dir / f'{s}.mat')['groundTruth'][0, 0]['Segmentation'])
    gts.append(np.isin(seg, (2, 4)))
  return gts


def synthetic_gt(rng: np.random.Generator) -> np.ndarray:
  img = np.zeros((H, W), bool)
  for _ in range(rng.integers(1, 4)):
    y, x = rng.uniform(0, H), rng.uniform(0, W)
    angle = rng.uniform(0, 2 * np.pi)
    for _ in range(rng.integers(20, 60)):
      angle += rng.normal(0, 0.35)
      ny, nx = y + 6 * np.sin(angle), x + 6 * np.cos(angle)
      t = np.linspace(0, 1, 13)
      yy = np.clip(np.round(y + t * (ny - y)).astype(int), 0, H - 1)
      xx = np.clip(np.round(x + t * (nx - x)).astype(int), 0, W - 1)
      img[yy, xx] = True
      y, x = ny, nx
  if rng.random() < 0.5:  # 1 or 3 px wide (iterations=0 would dilate until it fills)
    img = ndi.binary_dilation(img)
  return img


def synthetic_prob(gt: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  signal = ndi.gaussian_filter(gt.astype(np.float32), 1.2) * 2.5
  keep = ndi.gaussian_filter(rng.normal(size=gt.shape), 8) * 25 + 0.8  # missed segments
  texture = ndi.gaussian_filter(rng.normal(size=gt.shape), 3) * 9.0  # false-positive blobs
  logits = -5.5 + 9.0 * np.clip(signal * keep, 0, 1) + texture + rng.normal(0, 0.7, gt.shape)
  return (1 / (1 + np.exp(-logits))).astype(np.float32)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--num_images', type=int, default=46)
  ap.add_argument('--repeats', type=int, default=3)
  ap.add_argument(
    '--data_dir',
    type=Path,
    default=None,
    help='CrackForest directory with groundTruth/*.mat for real masks '
    '(e.g. ../shared/datasets/crackforest); default: synthetic ground truth',
  )
  ap.add_argument('--synthetic', action='store_true', help='ignore the real masks')
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument(
    '--probs',
    type=Path,
    help='npz with saved probability maps and ground truth (keys probs, gts); '
    'replaces the synthetic maps (--num_images takes the first N)',
  )
  ap.add_argument(
    '--protocols',
    default='strict,tolerance,tolerance_thin_gt',
    help='comma-separated protocols to time',
  )
  ap.add_argument(
    '--workers',
    default='1',
    help='comma-separated process counts to time (evaluate(workers=...), e.g. 1,2); each is '
    'timed on the same maps and must give the same result',
  )
  args = ap.parse_args()

  rng = np.random.default_rng(args.seed)
  if args.probs is not None:
    with np.load(args.probs) as f:
      probs = list(f['probs'][: args.num_images])
      gts = [g != 0 for g in f['gts'][: args.num_images]]
    source = f'saved maps and ground truth from {args.probs}'
  else:
    use_real = args.data_dir is not None and not args.synthetic
    gts = real_gts(args.data_dir, args.num_images) if use_real else None
    source = f'real CrackForest test masks from {args.data_dir}'
    if gts is None:
      gts = [synthetic_gt(rng) for _ in range(args.num_images)]
      source = 'synthetic crack polylines'
    source += '; synthetic probability maps'
    probs = [synthetic_prob(g, rng) for g in gts]
  h, w = probs[0].shape[:2]
  width = sum(int(g.sum()) for g in gts) / max(sum(int(thin(g).sum()) for g in gts), 1)

  print(f'machine: {platform.machine()}, CPU: {cpu_name()}, {os.cpu_count()} cores')
  print(
    f'python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, '
    f'scikit-image {skimage.__version__}; load average {os.getloadavg()[0]:.2f}'
  )
  print(
    f'{len(gts)} images {h}x{w} (first); {source}; crack pixels '
    f'{np.mean([g.mean() for g in gts]):.3%}, mean width (pixels / thinned pixels) '
    f'{width:.2f}'
  )
  for protocol in args.protocols.split(','):
    first = None
    for workers in (int(w) for w in args.workers.split(',')):
      times, cpu = [], []
      for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        r = evaluate(probs, gts, protocol=protocol, workers=workers)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
      first = first or r
      assert r == first, f'{protocol}: workers={workers} gave another result'
      _report(protocol, workers, len(probs), times, cpu, args.repeats, r)


def _report(protocol, workers, n, times, cpu, repeats, r) -> None:
  print(
    f'{protocol:17s} workers={workers}: best {min(times):7.3f} s '
    f'({min(times) / n:.3f} s/image), median {np.median(times):7.3f} s '
    f'(CPU of this process best {min(cpu):7.3f} s) over {repeats} runs '
    f'({r["grid_size"]} thresholds) | '
    f'ODS P/R/F {r["ods"]["precision"]:.3f}/{r["ods"]["recall"]:.3f}/'
    f'{r["ods"]["f1"]:.3f} at t={r["ods"]["threshold"]:.3f}, '
    f'OIS F {r["ois"]["f1"]:.3f}, AP {r["ap"]:.3f}'
  )


if __name__ == '__main__':
  main()
