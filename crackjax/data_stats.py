"""Dataset statistics: image count, sizes, crack-pixel proportion, densest image, per split.

  python -m crackjax.data_stats --dataset=crackforest --data_dir=/tmp/tfds \\
      --manual_dir=../shared/datasets/crackforest
  python -m crackjax.data_stats --dataset=crack_folder --images=roads/images --masks=roads/masks

Prepares the dataset first if needed (as training does). "Crack proportion" is over the whole
split: crack pixels of all its images / all their pixels (the paper's Fig. 1 figure for a
training set); the mean of the per-image proportions is printed too, and the densest image is
the one with the largest per-image proportion.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from crackjax import input_pipeline


def split_stats(source: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """Statistics of one split (records with 'mask' uint8 [H, W, 1] and 'name')."""
  sizes: collections.Counter = collections.Counter()
  crack = total = 0
  per_image = []
  for i in range(len(source)):
    record = source[i]
    mask = np.asarray(record['mask'])
    h, w = mask.shape[:2]
    sizes[f'{w}x{h}'] += 1
    n_crack = int(np.count_nonzero(mask))
    crack += n_crack
    total += h * w
    name = record['name']
    per_image.append((n_crack / (h * w), name.decode() if isinstance(name, bytes) else name))
  if not per_image:
    return {'num_images': 0}
  densest = max(per_image)
  return {
      'num_images': len(per_image),
      'sizes_wxh': dict(sorted(sizes.items(), key=lambda kv: -kv[1])),
      'crack_pixels': crack,
      'pixels': total,
      'crack_proportion': crack / total,
      'mean_image_crack_proportion': float(np.mean([p for p, _ in per_image])),
      'densest_image': densest[1],
      'densest_proportion': densest[0],
      'images_without_crack': sum(p == 0 for p, _ in per_image),
  }


def dataset_stats(config, splits: Sequence[str] = ('train', 'test')) -> dict[str, dict]:
  return {s: split_stats(input_pipeline.get_data_source(config, s)) for s in splits}


def format_stats(dataset: str, stats: dict[str, dict]) -> str:
  lines = []
  for split, st in stats.items():
    if not st['num_images']:
      lines.append(f'{dataset}/{split}: no images')
      continue
    sizes = ', '.join(f'{k} ({v})' for k, v in st['sizes_wxh'].items())
    lines.append(
        f'{dataset}/{split}: {st["num_images"]} images; sizes (WxH) {sizes}\n'
        f'  crack pixels {st["crack_proportion"] * 100:.2f}% of the split '
        f'({st["crack_pixels"]} / {st["pixels"]}); mean per image '
        f'{st["mean_image_crack_proportion"] * 100:.2f}%\n'
        f'  densest image {st["densest_image"]}: {st["densest_proportion"] * 100:.2f}%; '
        f'images without crack pixels: {st["images_without_crack"]}')
  return '\n'.join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  from configs import base  # Repository root on sys.path (python -m from the root).

  parser = argparse.ArgumentParser(prog='python -m crackjax.data_stats',
                                   description=__doc__.split('\n')[0])
  parser.add_argument('--dataset', required=True,
                      help=f'one of {sorted(input_pipeline.DATASETS)}')
  parser.add_argument('--data_dir', help='TFDS data dir (default: TFDS default)')
  parser.add_argument('--manual_dir', help='manual download directory, if not yet prepared')
  parser.add_argument('--images', help="crack_folder: image directory")
  parser.add_argument('--masks', help="crack_folder: mask directory")
  parser.add_argument('--splits', default='train,test', help='comma-separated splits')
  parser.add_argument('--json', action='store_true', help='print JSON instead of text')
  args = parser.parse_args(argv)
  config = base.get_config()
  config.dataset = args.dataset
  config.data_dir = args.data_dir
  config.manual_dir = args.manual_dir
  config.folder.images = args.images
  config.folder.masks = args.masks
  try:
    stats = dataset_stats(config, [s for s in args.splits.split(',') if s])
  except (input_pipeline.DatasetError, ValueError) as e:
    print(f'data_stats: {e}', file=sys.stderr)
    return 1
  print(json.dumps(stats, indent=2) if args.json else format_stats(args.dataset, stats))
  return 0


if __name__ == '__main__':
  sys.exit(main())
