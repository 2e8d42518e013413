"""Dataset statistics: image count, sizes, crack-pixel proportion, densest image, per split.

  python -m crackjax.data_stats --config=configs/crackforest_exp.py \\
      --config.data.manual_dir=../shared/datasets/crackforest
  python -m crackjax.data_stats --config=configs/crack_folder.py \\
      --config.data.folder.images=roads/images --config.data.folder.masks=roads/masks

The dataset is the config's (`config.data`, as for training); `--splits=train` picks splits.

Prepares the dataset first if needed (as training does). "Crack proportion" is over the whole
split: crack pixels of all its images / all their pixels (the paper's Fig. 1 figure for a
training set); the mean of the per-image proportions is printed too, and the densest image is
the one with the largest per-image proportion.
"""

from __future__ import annotations

import collections
import json
import sys
from collections.abc import Sequence
from typing import Any

import ml_collections
import numpy as np
from absl import flags

from crackjax import cli, datasets


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


def dataset_stats(
  data: ml_collections.ConfigDict, splits: Sequence[str] = ('train', 'test')
) -> dict[str, dict]:
  """`split_stats` of each split of ``data`` (the config's data group), preparing it if needed."""
  return {s: split_stats(datasets.get_data_source(data, s)) for s in splits}


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
      f'images without crack pixels: {st["images_without_crack"]}'
    )
  return '\n'.join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  """Prints the statistics of the config's dataset (argv without the program name)."""

  def define_flags(fv: flags.FlagValues) -> None:
    flags.DEFINE_list('splits', ['train', 'test'], 'splits to describe', flag_values=fv)
    flags.DEFINE_bool('json', False, 'print JSON instead of text', flag_values=fv)

  fv, _ = cli.parse_command('python -m crackjax.data_stats', argv, define_flags)
  data = fv.config.data
  try:
    stats = dataset_stats(data, [s for s in fv.splits if s])
  except (datasets.DatasetError, ValueError) as e:
    print(f'data_stats: {e}', file=sys.stderr)
    return 1
  print(json.dumps(stats, indent=2) if fv.json else format_stats(data.name, stats))
  return 0


if __name__ == '__main__':
  sys.exit(main())
