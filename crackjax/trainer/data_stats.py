"""Dataset statistics: image count, sizes, crack-pixel proportion, densest image, per split.

  python -m crackjax.trainer.data_stats --config=configs/crackforest_exp.py \\
      --config.data.manual_dir=../shared/datasets/crackforest
  python -m crackjax.trainer.data_stats --config=configs/crack_folder.py \\
      --config.data.folder.images=roads/images --config.data.folder.masks=roads/masks

The dataset is the config's (`config.data`, as for training); `--splits=train` picks splits.
A mixture of datasets (``config.data.name = 'mixture'``, the general models' configs) is
described member by member: each member's own split of each role (``--splits`` are then the
mixture's roles: train, valid, test), as ``<member>/<role>``.

Prepares the dataset first if needed (as training does). "Crack proportion" is over the whole
split: crack pixels of all its images / all their pixels (the paper's Fig. 1 figure for a
training set); the mean of the per-image proportions is printed too, and the densest image is
the one with the largest per-image proportion.

After the statistics, `diagnose` flags what would make training or evaluation silently
wrong (a split without crack pixels, masks mostly crack, images without crack pixels, mixed
sizes) and says which ``--config.data.input_size`` fits the training images.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from absl import flags

from crackjax import cli
from crackjax.data import mixture
from crackjax.data import registry as data_registry
from crackjax.runs import outputs

# H and W of config.data.input_size must be multiples of this (the U-Net's four poolings).
INPUT_MULTIPLE = 16


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
    'images_majority_crack': sorted(n for p, n in per_image if p > 0.5),
  }


def dataset_stats(
  data: Mapping[str, Any], splits: Sequence[str] = ('train', 'test')
) -> dict[str, dict]:
  """`split_stats` of each split of ``data`` (the config's data group as plain data,
  ``config.data.to_dict()``), preparing it if needed; of a mixture, of each member's split of
  each role in `splits`, keyed ``<member>/<role>`` (members in name order).

  Raises:
    ValueError: a mixture's split that is not one of its roles (train, valid, test).
  """
  if mixture.is_mixture(data):
    by_role = {role: mixture.member_sources(data, role) for role in splits}
    return {
      f'{member}/{role}': split_stats(by_role[role][member])
      for member in mixture.member_fields(data)
      for role in splits
    }
  return {s: split_stats(data_registry.get_data_source(data, s)) for s in splits}


def diagnose_mixture(stats: dict[str, dict], data: Mapping[str, Any]) -> list[str]:
  """`diagnose` of each member of a mixture's `dataset_stats`, its lines led by the member's
  name; sizes and input_size left out (a mixture crops every photo, or mirrors it up, to its
  input_size)."""
  lines = []
  for member in mixture.member_fields(data):
    own = {k.partition('/')[2]: st for k, st in stats.items() if k.startswith(f'{member}/')}
    lines += [f'{member}/{line}' for line in diagnose(own, dataset=member, cropped=True)]
  return lines


def _sizes_hw(st: dict[str, Any]) -> list[tuple[int, int]]:
  """(H, W) of each size in ``st['sizes_wxh']``."""
  return [(int(h), int(w)) for w, h in (k.split('x') for k in st.get('sizes_wxh', {}))]


def diagnose(
  stats: dict[str, dict],
  train_split: str = 'train',
  dataset: str = 'crack_folder',
  *,
  cropped: bool = False,
) -> list[str]:
  """Problems in `dataset_stats`' output, one line each, and the input_size that fits.

  Flags per split: no crack pixel at all; masks mostly crack (the split, or most of its masks:
  suggests mask_polarity; a few dense masks only where the masks are a folder's); images
  without crack pixels; mixed sizes. Then, from ``train_split`` (if described): the largest
  (H, W), both multiples of 16, no larger than its smallest height and width. `cropped` (a
  mixture's member: every photo is cropped, or mirrored up, to the mixture's input_size)
  leaves out the sizes and the input_size. The advice names the settings `dataset` has: a
  folder's (``crack_folder``) mask polarity and threshold; a public dataset's builder reads
  its masks as its source ships them (tight crops of wide cracks are often more than half
  crack: such masks alone are not flagged).
  """
  own = dataset == 'crack_folder'
  check = (
    'check the masks, --config.data.folder.mask_polarity and mask_threshold'
    if own
    else f'the {dataset} builder reads masks as its source ships them: check that the manual '
    'dir holds that copy'
  )
  lines = []
  for split, st in stats.items():
    n = st['num_images']
    if not n:
      lines.append(f'{split}: no images.')
      continue
    if not st['crack_pixels']:
      lines.append(
        f'{split}: no crack pixels in any of its {n} masks; training on it learns nothing and '
        f'F1 on it is meaningless ({check}).'
      )
    elif st['images_without_crack']:
      lines.append(f'{split}: {st["images_without_crack"]} of {n} images have no crack pixels.')
    majority = st.get('images_majority_crack', [])
    shown = ', '.join(majority[:5]) + (' ...' if len(majority) > 5 else '')
    if st['crack_proportion'] > 0.5 or len(majority) > n / 2:
      lines.append(
        f'{split}: crack is the majority ({st["crack_proportion"] * 100:.1f}% of the split; '
        f'{len(majority)} masks more than half crack: {shown}); black cracks on white? '
        + ('Set --config.data.folder.mask_polarity=dark (or auto).' if own else f'{check}.')
      )
    elif majority and own:
      lines.append(
        f'{split}: {len(majority)} of {n} masks are more than half crack ({shown}; the split '
        f'{st["crack_proportion"] * 100:.1f}%): wide cracks in tight crops, or masks saved '
        f'black on white? {check}.'
      )
    if cropped:
      continue
    if len(st['sizes_wxh']) > 1:
      lines.append(f'{split}: sizes are mixed ({len(st["sizes_wxh"])} sizes).')
  train = None if cropped else stats.get(train_split)
  if train and train['num_images']:
    lines.append(input_size_advice(train, train_split))
  return lines


def input_size_advice(train: dict[str, Any], train_split: str = 'train') -> str:
  """The ``config.data.input_size`` that fits the training split described by `train`
  (`split_stats`): whole images, the largest crop in multiples of 16, or none."""
  sizes = _sizes_hw(train)
  min_h, min_w = min(h for h, _ in sizes), min(w for _, w in sizes)
  crop = (min_h // INPUT_MULTIPLE * INPUT_MULTIPLE, min_w // INPUT_MULTIPLE * INPUT_MULTIPLE)
  whole = len(sizes) == 1 and min_h % INPUT_MULTIPLE == 0 and min_w % INPUT_MULTIPLE == 0
  if whole:
    return (
      f'input_size: every {train_split} image is {min_h}x{min_w} (HxW), a multiple of '
      f'{INPUT_MULTIPLE}: whole images work (input_size None), or any smaller '
      f"--config.data.input_size='(H, W)' in multiples of {INPUT_MULTIPLE}."
    )
  if not all(crop):
    return (
      f'input_size: the smallest {train_split} image is {min_h}x{min_w} (HxW), smaller than '
      f'{INPUT_MULTIPLE} pixels; no --config.data.input_size fits it (remove or enlarge it).'
    )
  why = (
    'sizes are mixed, so training needs it'
    if len(sizes) > 1
    else f'the size is not a multiple of {INPUT_MULTIPLE}, so training needs it'
  )
  return (
    f'input_size: every {train_split} image is at least {min_h}x{min_w} (HxW): '
    f"--config.data.input_size='({crop[0]}, {crop[1]})' fits all; {why}."
  )


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


PROG = 'python -m crackjax.trainer.data_stats'


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  return COMMAND.run(_main, argv)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_list(
    'splits',
    ['train', 'test'],
    "splits to describe (a mixture's: its roles train, valid, test, each member's own split)",
    flag_values=fv,
  )
  flags.DEFINE_bool('json', False, 'print JSON instead of text', flag_values=fv)


_INTERRUPTED = (
  'interrupted (Ctrl-C); a dataset prepared halfway is prepared again: run the same command again.'
)
# TFDS' routine warnings hidden, data warnings one line each (quiet_logs).
COMMAND = cli.Command(
  PROG, _define_flags, takes_config=True, interrupted=_INTERRUPTED, quiet_logs=True
)


def _main(fv: flags.FlagValues, arguments: list[str]) -> int:
  """Prints the statistics of the config's dataset (arguments that are not flags are
  ignored)."""
  del arguments
  data = fv.config.data.to_dict()
  try:
    # TFDS announces a dataset it prepares on stdout: --json keeps stdout for the JSON alone.
    with contextlib.redirect_stdout(sys.stderr if fv.json else sys.stdout):
      stats = dataset_stats(data, [s for s in fv.splits if s])
  except (data_registry.DatasetError, ValueError) as e:
    print(f'{PROG}: {e}', file=sys.stderr)
    return 1
  if mixture.is_mixture(data):
    flagged = diagnose_mixture(stats, data)
  else:
    flagged = diagnose(stats, data.get('train_split') or 'train', str(data.get('name')))
  if fv.json:
    print(outputs.dumps({**stats, 'diagnosis': flagged}, indent=2))
  else:
    print(format_stats(data['name'], stats))
    if flagged:
      print('\n'.join(flagged))
  return 0


if __name__ == '__main__':
  sys.exit(main())
