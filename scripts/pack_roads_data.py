"""Packs the general model's five public datasets small enough to travel with one GPU call.

  python scripts/pack_roads_data.py --out=.data/roads \\
      --crackforest=../shared/datasets/crackforest --public=/work/data/Datasets

A device call carries the working tree, the wheels (.whl, ~11 MB) and at most 64 MiB in all
(/work/.library/device/README.md): the tracked tree is ~20 MB, so the data gets ~33 MB of the
~380 MB the five datasets take here. The pack keeps the folder layouts the TFDS builders read,
so nothing new is needed on the GPU machine (scripts/release_roads_gpu.sh points
``--config.data.mix.<name>.manual_dir`` at it, `manual_dir_flags` of
configs/release/roads_unet.py):

- ``OUT/crackforest/``: the CrackForest archive's 118 labelled photos (image/NNN.jpg) and their
  groundTruth/NNN.mat, the files themselves (the builder's 72 / 46 split is made from them);
  the 37 unlabelled photos and seg/ are left out.
- ``OUT/Datasets/<Set>/{train,valid,test}/<name>.jpg`` + ``{split}_lab/<name>.png`` for
  DeepCrack, Crack500, GAPs384 and AigleRN-TRIMM (the cropped copies' layout): a fixed
  fraction of each split (`FRACTIONS`), chosen by a seeded hash of each file name (the same
  files for the same seed and sources, whatever order a disk lists them in). Photos are
  written again as JPEG of quality ``--quality`` (90; the train parts ``--train_quality``, 75)
  where that is smaller (the originals are ~95), else copied; masks as 1-bit PNG of the crack
  pixels the builders read from the JPEG masks (`crackjax.tfds_builders.reading.load_mask`:
  thresholded at half the range), lossless.
  Both as viewers show them (EXIF orientation applied, as the builders read them).
- ``OUT/pack.json``: what was kept (per dataset and split: images kept of the source's, bytes),
  the fractions, the seed and the sources.

The test splits are subsampled too: the GPU scores the exported model on the packed test
parts only as a check; the released card's test scores come from the file itself on every
test image, scored on the CPU (scripts/release_roads_gpu.sh, stage finish).

``--tiny``: a few images per split (`TINY_COUNTS`), for the CPU try of the release script.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import PIL.Image
import PIL.ImageOps

REPO = Path(__file__).resolve().parents[1]
SEED = 0
QUALITY = 90
# The train parts of the cropped copies (the most images) at a lower quality: a model trains on
# random crops of them, and the `jpeg` recipe compresses half its crops at 30-95 anyway. What
# that saves buys more of the big sets' crops (`FRACTIONS`); validation and test parts stay at
# QUALITY, their images those of every earlier pack.
TRAIN_QUALITY = 75
# The cropped copies' folder of each member (Lightweight-Modular-Model, Datasets/).
FOLDERS = {
  'deepcrack': 'DeepCrack',
  'crack500': 'Crack500',
  'gaps384': 'GAPs384',
  'aiglern_trimm': 'AigleRN-TRIMM',
}
SPLITS = ('train', 'valid', 'test')
# The fraction of each split kept. Every member is sampled alike in training (weight 1,
# configs/release/roads_unet.py), so the big sets are cut hardest: their crops overlap (~20 per
# photo), so a fraction still covers most photos. Validation is kept whole but for CRACK500's
# 899 crops (a third); the test parts are a check on the GPU only (the module docstring).
# The train fractions were 0.15 and 0.08 at quality 90 until 30 Nov 2026: the GPU-made model
# then fell behind roads-unet-cpu on exactly these two sets' test crops (docs/models.md). The
# same seed picks every file of a smaller fraction, so the validation and test parts (and the
# old train files) are those of every earlier pack.
FRACTIONS: dict[str, dict[str, float]] = {
  'deepcrack': {'train': 0.3, 'valid': 1.0, 'test': 0.03},
  'crack500': {'train': 0.22, 'valid': 0.33, 'test': 0.025},
  'gaps384': {'train': 0.5, 'valid': 1.0, 'test': 0.15},
  'aiglern_trimm': {'train': 1.0, 'valid': 1.0, 'test': 1.0},
}
# --tiny: images per split of each member (CrackForest: its first TINY_CRACKFOREST labelled).
TINY_COUNTS = {'train': 6, 'valid': 3, 'test': 3}
TINY_CRACKFOREST = 12
# The device call's limit on what travels (the tree, .whl and the carried data together).
TRAVEL_LIMIT = 64 * 2**20
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff')


def chosen(names: list[str], fraction: float, key: str, seed: int) -> list[str]:
  """The ``round(fraction * len(names))`` names (at least one of a non-empty list) whose
  sha256 of ``'<seed>:<key>:<name>'`` sorts first, in name order."""
  if not names:
    return []
  keep = max(1, round(fraction * len(names)))
  ranked = sorted(names, key=lambda n: hashlib.sha256(f'{seed}:{key}:{n}'.encode()).hexdigest())
  return sorted(ranked[:keep])


def upright(path: Path) -> PIL.Image.Image:
  image = PIL.Image.open(path)
  image.load()
  return PIL.ImageOps.exif_transpose(image)


def write_photo(source: Path, target: Path, quality: int) -> None:
  """`source` as JPEG of `quality` at `target` where that is smaller, else its own bytes (an
  image without an EXIF orientation only: one with a tag is always written upright)."""
  raw = source.read_bytes()
  image = PIL.Image.open(io.BytesIO(raw))
  turned = image.getexif().get(0x0112, 1) not in (0, 1)
  buffer = io.BytesIO()
  upright(source).convert('RGB').save(buffer, 'JPEG', quality=quality)
  data = buffer.getvalue()
  if turned or len(data) < len(raw):
    target.with_suffix('.jpg').write_bytes(data)
  else:
    target.with_name(source.name).write_bytes(raw)


def write_mask(source: Path, target: Path) -> None:
  """The crack pixels the builders read from `source` as a 1-bit PNG at `target`."""
  from crackjax.tfds_builders import reading

  with warnings.catch_warnings():  # JPEG masks are not binary: thresholded as the builders do
    warnings.simplefilter('ignore')
    crack = reading.load_mask(source)
  PIL.Image.fromarray(crack.astype(bool)).save(target.with_suffix('.png'), optimize=True)


def _images(folder: Path) -> dict[str, Path]:
  return {p.stem: p for p in sorted(folder.iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES}


def folder_bytes(folder: Path) -> int:
  return sum(p.stat().st_size for p in folder.rglob('*') if p.is_file())


def pack_member(
  name: str,
  public: Path,
  out: Path,
  fractions: dict[str, float],
  seed: int,
  quality: dict[str, int],
  tiny: bool,
) -> dict[str, dict[str, int]]:
  """One member's splits into ``out/Datasets/<Set>/`` (photos at ``quality[split]``);
  {split: {kept, of, bytes}}."""
  folder = FOLDERS[name]
  kept = {}
  for split in SPLITS:
    images, masks = public / folder / split, public / folder / f'{split}_lab'
    if not images.is_dir() or not masks.is_dir():
      raise SystemExit(f'pack_roads_data.py: {images} or {masks} does not exist.')
    photo_files, mask_files = _images(images), _images(masks)
    names = sorted(set(photo_files) & set(mask_files))
    if tiny:
      picked = chosen(names, TINY_COUNTS[split] / max(len(names), 1), f'{name}/{split}', seed)
    else:
      picked = chosen(names, fractions[split], f'{name}/{split}', seed)
    target_images, target_masks = (
      out / 'Datasets' / folder / split,
      out / 'Datasets' / folder / f'{split}_lab',
    )
    target_images.mkdir(parents=True)
    target_masks.mkdir(parents=True)
    for stem in picked:
      write_photo(photo_files[stem], target_images / photo_files[stem].name, quality[split])
      write_mask(mask_files[stem], target_masks / mask_files[stem].name)
    kept[split] = {
      'kept': len(picked),
      'of': len(names),
      'bytes': folder_bytes(target_images) + folder_bytes(target_masks),
    }
  return kept


def pack_crackforest(source: Path, out: Path, tiny: bool) -> dict[str, int]:
  """CrackForest's labelled photos and .mat files, copied as they are."""
  mats = sorted((source / 'groundTruth').glob('*.mat'))
  if not mats:
    raise SystemExit(f'pack_roads_data.py: no groundTruth/*.mat in {source}.')
  if tiny:
    mats = mats[:TINY_CRACKFOREST]
  target = out / 'crackforest'
  (target / 'image').mkdir(parents=True)
  (target / 'groundTruth').mkdir(parents=True)
  for mat in mats:
    shutil.copyfile(mat, target / 'groundTruth' / mat.name)
    shutil.copyfile(source / 'image' / f'{mat.stem}.jpg', target / 'image' / f'{mat.stem}.jpg')
  if (source / 'README.md').is_file():
    shutil.copyfile(source / 'README.md', target / 'README.md')
  return {
    'kept': len(mats),
    'of': len(list(source.glob('groundTruth/*.mat'))),
    'bytes': folder_bytes(target),
  }


def tracked_bytes(repo: Path) -> int | None:
  """The size of the git-tracked files of `repo` (what every device call sends), or None."""
  try:
    listed = subprocess.run(
      ['git', 'ls-files', '-z'], cwd=repo, capture_output=True, check=True, timeout=60
    ).stdout
  except (OSError, subprocess.SubprocessError):
    return None
  return sum(
    (repo / n).stat().st_size for n in listed.decode().split('\0') if n and (repo / n).is_file()
  )


def pack(
  out: Path,
  crackforest: Path,
  public: Path,
  *,
  seed: int = SEED,
  quality: int = QUALITY,
  train_quality: int = TRAIN_QUALITY,
  tiny: bool = False,
  fractions: dict[str, dict[str, float]] | None = None,
) -> dict:
  """Writes the pack into `out` (which must not exist) and returns what pack.json holds."""
  from crackjax.runs import outputs

  if out.exists():
    raise SystemExit(f'pack_roads_data.py: {out} exists; remove it first (rm -r {out}).')
  fractions = fractions or FRACTIONS
  out.mkdir(parents=True)
  sets = {'crackforest': {'labelled': pack_crackforest(crackforest, out, tiny)}}
  qualities = {'train': train_quality, 'valid': quality, 'test': quality}
  for name in FOLDERS:
    sets[name] = pack_member(name, public, out, fractions[name], seed, qualities, tiny)
  record = {
    'made_by': 'scripts/pack_roads_data.py',
    'seed': seed,
    'quality': quality,
    'train_quality': train_quality,
    'tiny': tiny,
    'fractions': None if tiny else fractions,
    'tiny_counts': TINY_COUNTS if tiny else None,
    'sources': {'crackforest': str(crackforest), 'public': str(public)},
    'sets': sets,
    'bytes': folder_bytes(out),
  }
  (out / 'pack.json').write_text(outputs.dumps(record, indent=1) + '\n')
  return record


def report(record: dict, out: Path, repo: Path = REPO) -> str:
  """What was kept, one line per dataset and split, and what a device call would carry."""
  mb = 1e6
  lines = [
    f'{out}: {record["bytes"] / mb:.1f} MB '
    f'(seed {record["seed"]}, JPEG quality {record["quality"]}, '
    f"the cropped copies' train parts {record['train_quality']})"
  ]
  for name, splits in record['sets'].items():
    for split, row in splits.items():
      lines.append(
        f'  {name:14s} {split:9s} {row["kept"]:5d} of {row["of"]:5d} images  '
        f'{row["bytes"] / mb:6.2f} MB'
      )
  tree = tracked_bytes(repo)
  wheels = folder_bytes(repo / '.whl') if (repo / '.whl').is_dir() else None
  if tree is not None:
    total = tree + (wheels or 0) + record['bytes']
    lines.append(
      f'A device call would send {total / 2**20:.1f} MiB: the tracked tree {tree / 2**20:.1f}, '
      + (f'.whl {wheels / 2**20:.1f}' if wheels is not None else 'no .whl yet (~11 MB)')
      + f', this pack {record["bytes"] / 2**20:.1f} (limit {TRAVEL_LIMIT / 2**20:.0f} MiB).'
    )
    if total > TRAVEL_LIMIT:
      lines.append('WARNING: over the limit: the call would be refused; pack smaller fractions.')
  return '\n'.join(lines)


def prepare(data, pack_dir: str, data_dir: str) -> None:
  """The members of mixture config group `data` (a ConfigDict) prepared as TFDS data in
  `data_dir` from a pack at `pack_dir` (its crackforest/ and Datasets/ folders, the builders'
  layouts); prints each builder's split counts. The one-call GPU scripts' prepare step
  (scripts/release_roads_gpu.sh, scripts/lodo_gpu.sh), on the GPU machine."""
  from crackjax.configs.release import roads_unet_cpu
  from crackjax.data import mixture

  data.data_dir = data_dir
  for name in data.mix:
    folder = 'crackforest' if name in roads_unet_cpu.CRACKFOREST_MEMBERS else 'Datasets'
    data.mix[name].manual_dir = str(Path(pack_dir) / folder)
  for builder in mixture.prepare(data.to_dict()):
    counts = ', '.join(f'{s} {v.num_examples}' for s, v in sorted(builder.info.splits.items()))
    print(f'prepared {builder.name}: {counts}')


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out', type=Path, default=REPO / '.data' / 'roads')
  parser.add_argument(
    '--crackforest', type=Path, default=REPO.parent / 'shared/datasets/crackforest'
  )
  parser.add_argument('--public', type=Path, default=Path('/work/data/Datasets'))
  parser.add_argument('--seed', type=int, default=SEED)
  parser.add_argument('--quality', type=int, default=QUALITY)
  parser.add_argument('--train_quality', type=int, default=TRAIN_QUALITY)
  parser.add_argument('--tiny', action='store_true', help='a few images per split (TINY_COUNTS)')
  args = parser.parse_args(argv)
  record = pack(
    args.out,
    args.crackforest,
    args.public,
    seed=args.seed,
    quality=args.quality,
    train_quality=args.train_quality,
    tiny=args.tiny,
  )
  print(report(record, args.out))
  return 0


if __name__ == '__main__':
  sys.exit(main())
