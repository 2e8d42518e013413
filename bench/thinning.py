"""crackjax's thinning (crackjax/evaluation/thinning.py) against skimage.morphology.thin, which
it equals: the same pixels, and the time each takes, on binary maps like those the tolerance
protocols thin (predictions at ~115 thresholds of a photo, and ground truths).

  python bench/thinning.py [--n=30] [--size=320,480] [--repeat=3]

Maps: smoothed noise thresholded into blobs and lines of 1-20 px width (seeded), at the size
given (CrackForest's photos by default). Prints the differing pixels (0 expected), each
method's best total over --repeat runs and the ratio, measured in the same process.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from scipy import ndimage
from skimage.morphology import thin as skimage_thin

from crackjax.evaluation.thinning import thin


def maps(n: int, size: tuple[int, int]) -> list[np.ndarray]:
  rng = np.random.default_rng(0)
  out = []
  for i in range(n):
    sigma = 1.0 + 4.0 * (i % 5) / 4  # thin lines to broad blobs
    out.append(ndimage.gaussian_filter(rng.random(size), sigma) > 0.5 + 0.01 * (i % 3))
  return out


def best_total(fn, inputs, repeat: int) -> float:
  best = float('inf')
  for _ in range(repeat):
    t0 = time.perf_counter()
    for m in inputs:
      fn(m)
    best = min(best, time.perf_counter() - t0)
  return best


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--n', type=int, default=30)
  p.add_argument('--size', default='320,480')
  p.add_argument('--repeat', type=int, default=3)
  args = p.parse_args()
  size = tuple(int(v) for v in args.size.split(','))
  inputs = maps(args.n, size)
  diff = sum(int((thin(m) != skimage_thin(m)).sum()) for m in inputs)
  ours = best_total(thin, inputs, args.repeat)
  theirs = best_total(skimage_thin, inputs, args.repeat)
  print(f'{platform.processor() or platform.machine()}; {args.n} maps {size[0]}x{size[1]}')
  print(f'differing pixels: {diff}')
  print(
    f'crackjax thin {ours:.3f} s, skimage thin {theirs:.3f} s: '
    f'skimage / crackjax {theirs / ours:.2f}x'
  )


if __name__ == '__main__':
  main()
