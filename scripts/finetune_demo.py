"""The fine-tuning recipe of docs/datasets.md, measured: a released model on a folder of ~20 photos.

  python scripts/finetune_demo.py --model=crackforest-unet-cpu --work=workdirs/finetune_demo \\
      --crackforest=../shared/datasets/crackforest

No road photos of another source are on this machine, so the "own folder" is made from
CrackForest photos the released model never trained on (its test split, images and ground
truth), seen through another camera: enlarged 1.5x (cracks half again as wide, 480x720) and
converted to warm-tinted grey with a lower contrast. 24 photos: the first 18 train, the last 6
are held out (train.txt / test.txt). Then, each a command of its own (printed):

1. before: ``crackjax-evaluate --model=MODEL --folder=<held-out 6>`` (strict and
   tolerance_thin_gt);
2. fine-tuning: ``python launch.py --config=configs/finetune.py:MODEL`` on the 18 (its default
   3 epochs of 100 steps);
3. after: ``crackjax-evaluate --workdir=<fine-tuned run> --folder=<held-out 6>``;

and prints both tables' ODS F1 side by side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import scipy.io

REPO = Path(__file__).resolve().parents[1]
PROTOCOLS = 'strict,tolerance_thin_gt'


def crackforest_test_names(root: Path) -> list[str]:
  """The CrackForest test split's image names (tfds_builders/crackforest/splits.py)."""
  from crackjax.tfds_builders.crackforest import splits  # installed with crackjax

  return sorted(splits.CRACKFOREST_TEST)


def shifted(image: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Another camera: 1.5x larger, warm-tinted grey, lower contrast (mask enlarged alike)."""
  h, w = image.shape[:2]
  size = (w * 3 // 2, h * 3 // 2)
  big = np.asarray(PIL.Image.fromarray(image).resize(size, PIL.Image.BICUBIC), np.float32)
  grey = big.mean(axis=2, keepdims=True)
  grey = 128 + 0.7 * (grey - 128)
  tinted = np.clip(grey * np.array([1.08, 1.0, 0.85]), 0, 255).astype(np.uint8)
  big_mask = np.asarray(PIL.Image.fromarray(mask * 255).resize(size, PIL.Image.NEAREST))
  return tinted, big_mask


def make_folder(crackforest: Path, out: Path, n: int = 24, held_out: int = 6) -> Path:
  names = crackforest_test_names(crackforest)[:n]
  for sub in ('images', 'masks', 'heldout/images', 'heldout/masks'):
    (out / sub).mkdir(parents=True, exist_ok=True)
  for i, name in enumerate(names):
    image = np.asarray(PIL.Image.open(crackforest / 'image' / f'{name}.jpg').convert('RGB'))
    seg = scipy.io.loadmat(crackforest / 'groundTruth' / f'{name}.mat')['groundTruth']
    seg = seg[0, 0]['Segmentation']
    mask = np.isin(seg, (2, 4)).astype(np.uint8)
    image, mask = shifted(image, mask)
    PIL.Image.fromarray(image).save(out / 'images' / f'{name}.png')
    PIL.Image.fromarray(mask).save(out / 'masks' / f'{name}.png')
    if i >= n - held_out:
      PIL.Image.fromarray(image).save(out / 'heldout' / 'images' / f'{name}.png')
      PIL.Image.fromarray(mask).save(out / 'heldout' / 'masks' / f'{name}.png')
  (out / 'train.txt').write_text('\n'.join(names[: n - held_out]) + '\n')
  (out / 'test.txt').write_text('\n'.join(names[n - held_out :]) + '\n')
  return out


def run(command: list[str]) -> None:
  print('$ ' + ' '.join(command), flush=True)
  subprocess.run(command, check=True, cwd=REPO)


def ods(folder: Path) -> dict[str, float]:
  (record,) = folder.glob('*/eval.json')
  results = json.loads(record.read_text())['results']
  return {p: r['ods']['f1'] for p, r in results.items()}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--model', default='crackforest-unet-cpu')
  parser.add_argument('--work', default='workdirs/finetune_demo')
  parser.add_argument('--crackforest', default='../shared/datasets/crackforest')
  args, extra = parser.parse_known_args()  # the rest (--config.x=v) goes to launch.py
  work = (REPO / args.work).resolve()
  folder = make_folder(Path(args.crackforest).resolve(), work / 'roads')
  heldout = f'{folder}/heldout/images:{folder}/heldout/masks'
  before, after = work / 'before', work / 'after'
  run(
    ['crackjax-evaluate', f'--model={args.model}', f'--folder={heldout}', f'--out={before}']
    + [f'--protocols={PROTOCOLS}', '--overwrite']
  )
  run(
    [sys.executable, 'launch.py', f'--config=configs/finetune.py:{args.model}']
    + [f'--workdir={work / "run"}', f'--config.data.folder.images={folder}/images']
    + [f'--config.data.folder.masks={folder}/masks']
    + [f'--config.data.folder.train_list={folder}/train.txt']
    + [f'--config.data.folder.test_list={folder}/test.txt', *extra]
  )
  run(
    ['crackjax-evaluate', f'--workdir={work / "run"}', f'--folder={heldout}', f'--out={after}']
    + [f'--protocols={PROTOCOLS}', '--overwrite']
  )
  b, a = ods(before), ods(work / 'run' / 'eval')
  print(f'\nHeld-out photos of {folder} (6), ODS F1 before -> after fine-tuning:')
  for protocol in b:
    print(f'  {protocol}: {b[protocol]:.4f} -> {a[protocol]:.4f}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
