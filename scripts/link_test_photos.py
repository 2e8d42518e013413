"""Lays out the authors' whole test photos of DeepCrack and CRACK500 as the release scripts' PHOTOS
folder (scripts/release_roads_cpu.sh, scripts/release_roads_gpu.sh), from MTSCrack's repository:

  python scripts/link_test_photos.py --mts=<MTSCrack checkout> --public=/work/data/Datasets \\
      --out=/work/data/photos

- ``OUT/DeepCrack/{test_img,test_lab}``: ``dataset/dc_544_384/test_{img,lab}`` (237 photos at
  544x384), and ``OUT/CRACK500/{test_img,test_lab}``: ``dataset/c5_640_360/test_{img,lab}`` (93
  photos at 640x360), each *without* the photos whose crops the cropped copy's train split
  holds (``PUBLIC/<Set>/train/<photo>-<n>.jpg``: a general model trained on parts of them).
  In the copy used so far that leaves CRACK500 91 (20160329_103609 and 20160329_111111 out,
  the 91 on `roads-unet-cpu`'s card) and DeepCrack 227 (11289-1 to 11289-10 out; the released
  card's 237 include them).

Symbolic links, not copies (nothing is written into the sources); a mask is paired with its
photo by name (``<stem>.png`` or ``<stem>_mask.png``). Prints what it left out and the counts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: (folder under OUT, folder under MTS/dataset, the cropped copy's name under PUBLIC).
SETS = (('DeepCrack', 'dc_544_384', 'DeepCrack'), ('CRACK500', 'c5_640_360', 'Crack500'))
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png')


def trained_photos(public: Path, name: str) -> set[str]:
  """Stems of the whole photos whose crops the cropped copy's train split holds
  (``<photo>-<n>.<ext>``)."""
  folder = public / name / 'train'
  if not folder.is_dir():
    return set()
  return {p.stem.rpartition('-')[0] for p in folder.iterdir() if '-' in p.stem}


def mask_of(labels: Path, stem: str) -> Path | None:
  """The mask of photo `stem` in `labels` (``<stem>.png`` or ``<stem>_mask.png``), or None."""
  for name in (f'{stem}.png', f'{stem}_mask.png'):
    if (labels / name).is_file():
      return labels / name
  return None


def link_set(source: Path, out: Path, leave_out: set[str]) -> tuple[int, list[str]]:
  """Links `source`'s test photos and masks into `out` but those in `leave_out`; returns the
  number linked and the stems left out.

  Raises:
    FileNotFoundError: `source` lacks test_img/test_lab, or a photo its mask.
  """
  images, labels = source / 'test_img', source / 'test_lab'
  if not images.is_dir() or not labels.is_dir():
    raise FileNotFoundError(f"{source}: no test_img/ and test_lab/ (MTSCrack's dataset/ folder?)")
  (out / 'test_img').mkdir(parents=True, exist_ok=True)
  (out / 'test_lab').mkdir(parents=True, exist_ok=True)
  linked, left = 0, []
  for photo in sorted(p for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
    if photo.stem in leave_out:
      left.append(photo.stem)
      continue
    mask = mask_of(labels, photo.stem)
    if mask is None:
      raise FileNotFoundError(
        f'{photo}: no mask {photo.stem}.png or {photo.stem}_mask.png in {labels}'
      )
    for target, link in (
      (photo, out / 'test_img' / photo.name),
      (mask, out / 'test_lab' / mask.name),
    ):
      link.unlink(missing_ok=True)
      link.symlink_to(target.resolve())
    linked += 1
  return linked, left


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--mts', required=True, type=Path, help="MTSCrack's checkout (its dataset/)")
  parser.add_argument('--public', required=True, type=Path, help="the cropped copies' Datasets/")
  parser.add_argument('--out', required=True, type=Path)
  args = parser.parse_args(argv)
  for folder, mts_name, public_name in SETS:
    try:
      linked, left = link_set(
        args.mts / 'dataset' / mts_name,
        args.out / folder,
        trained_photos(args.public, public_name),
      )
    except FileNotFoundError as e:
      print(f'link_test_photos: {e}', file=sys.stderr)
      return 1
    said = f' (left out, their crops in {public_name}/train: {", ".join(left)})' if left else ''
    print(f'{args.out / folder}: {linked} test photos{said}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
