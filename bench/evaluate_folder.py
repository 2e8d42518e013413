"""Scoring a labelled folder of N photos with crackjax-evaluate: photos/s, CPU-seconds a photo
and peak RSS per N (issue 45), for this tree's code or another's (the code before a change).

The folder holds N pairs: the 118 labelled CrackForest photos (480x320, 0.15 MP) replicated
(symbolic links, masks converted once from groundTruth/*.mat to PNG) when ``--crackforest``
holds the dataset, else synthetic 480x320 pairs (a noisy pavement, a random crack polyline).
Each N is scored in a fresh process::

    crackjax-evaluate --model=MODEL --folder=IMAGES:MASKS --protocols=... --out=TMP --workers=W

whose wall time, user+system CPU (its worker processes included) and peak RSS (the largest of
the process and its workers, `os.wait4`) are reported; TFDS_DATA_DIR points at a fresh
temporary folder (the code before issue 45 prepared a copy of the folder there first, which
its time includes).

Usage (from the repository root)::

    python bench/evaluate_folder.py --ns=100,1000,5000 --crackforest=../shared/datasets/crackforest
    # The code before the change: a worktree of its commit, its crackjax first on the path.
    git worktree add /tmp/crackjax-base BASE_COMMIT
    python bench/evaluate_folder.py --ns=100 --code=/tmp/crackjax-base
    # crackjax-predict on N photos (copies, not links) instead:
    python bench/evaluate_folder.py --ns=100,1000 --synthetic=64x96 --predict --no_evaluate

Prints one Markdown row per N (and writes them as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL.Image

from crackjax.runs import outputs

REPO = Path(__file__).resolve().parents[1]
# The measured process first checks that it imports the crackjax of --code (PYTHONPATH).
CHECK = (
  'import os, sys, crackjax; '
  "assert crackjax.__file__.startswith(os.environ['PYTHONPATH']), crackjax.__file__; "
)


def crackforest_pairs(root: Path, work: Path) -> list[tuple[Path, Path]]:
  """(image, PNG mask) of every labelled CrackForest photo, masks converted once into `work`."""
  from crackjax.tfds_builders.crackforest import crackforest_dataset_builder as cf

  out = []
  masks = work / 'cf_masks'
  masks.mkdir(parents=True, exist_ok=True)
  for pair in cf.list_records(cf.find_dataset_root(root)):
    mask = masks / f'{pair.name}.png'
    if not mask.exists():
      PIL.Image.fromarray(cf.load_crack_mask(pair.mask_path) * 255).save(mask)
    out.append((Path(pair.image_path), mask))
  return out


def synthetic_pairs(work: Path, n: int = 40, h: int = 320, w: int = 480) -> list[tuple[Path, Path]]:
  """`n` synthetic HxW pairs: noisy grey pavement, one dark random crack polyline."""
  rng = np.random.default_rng(0)
  folder = work / 'synthetic'
  folder.mkdir(parents=True, exist_ok=True)
  out = []
  for i in range(n):
    mask = np.zeros((h, w), np.uint8)
    y = rng.integers(h // 8, h - h // 8)
    for x in range(w):
      y = int(np.clip(y + rng.integers(-1, 2), 2, h - 3))
      mask[y - 1 : y + 2, x] = 1
    image = np.clip(150 + rng.normal(0, 20, (h, w, 3)) - 90 * mask[..., None], 0, 255)
    paths = folder / f'{i:03d}.png', folder / f'{i:03d}_gt.png'
    PIL.Image.fromarray(image.astype(np.uint8)).save(paths[0])
    PIL.Image.fromarray(mask * 255).save(paths[1])
    out.append(paths)
  return out


def replicate(pairs, n: int, folder: Path, copy: bool = False) -> tuple[Path, Path]:
  """A folder of `n` pairs, links to `pairs` in turn (``r<k>_<stem>``), or copies (`copy`:
  crackjax-predict predicts a file that several links name once)."""
  images, masks = folder / 'images', folder / 'masks'
  for d in (images, masks):
    d.mkdir(parents=True, exist_ok=True)
  for k in range(n):
    image, mask = pairs[k % len(pairs)]
    stem = f'r{k:05d}_{image.stem}'
    for source, target in (
      (image, images / f'{stem}{image.suffix}'),
      (mask, masks / f'{stem}.png'),
    ):
      if copy:
        shutil.copyfile(source, target)
      else:
        target.symlink_to(source.resolve())
  return images, masks


def run_measured(argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
  """Runs `argv`; its wall seconds, CPU seconds (user + system, children included) and peak
  RSS in MB (`os.wait4`: the largest of the process and the children it waited for). Run in
  `cwd`, not the repository: ``python -c`` puts its working folder first on the path."""
  t0 = time.perf_counter()
  proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  output = proc.stdout.read().decode(errors='replace')
  _, status, usage = os.wait4(proc.pid, 0)
  wall = time.perf_counter() - t0
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode:
    sys.exit(f'{argv[:3]}... failed ({proc.returncode}):\n{output[-3000:]}')
  return {
    'wall_s': wall,
    'cpu_s': usage.ru_utime + usage.ru_stime,
    'peak_rss_mb': usage.ru_maxrss / 1024,
    'output': output,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--ns', default='100,1000,5000', help='photo counts, comma-separated')
  parser.add_argument('--crackforest', default=str(REPO.parent / 'shared/datasets/crackforest'))
  parser.add_argument('--synthetic', default=None, help='HxW: synthetic pairs, not CrackForest')
  parser.add_argument('--model', default='crackforest-unet-cpu')
  parser.add_argument('--protocols', default='strict,tolerance_thin_gt')
  parser.add_argument('--workers', type=int, default=os.cpu_count() or 1)
  parser.add_argument('--code', default=str(REPO), help='the tree whose crackjax is measured')
  parser.add_argument('--predict', action='store_true', help='also crackjax-predict each folder')
  parser.add_argument('--no_evaluate', action='store_true', help='crackjax-predict only')
  parser.add_argument('--json', help='write the rows there')
  args = parser.parse_args()

  code = Path(args.code).resolve()
  commit = subprocess.run(
    ['git', '-C', str(code), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True
  ).stdout.strip()
  rows = []
  with tempfile.TemporaryDirectory(prefix='evaluate_folder_') as tmp:
    work = Path(tmp)
    cf = Path(args.crackforest).expanduser()
    if not args.synthetic and cf.is_dir():
      pairs, source = crackforest_pairs(cf, work), 'CrackForest (118 photos, replicated)'
    else:
      h, w = (int(x) for x in (args.synthetic or '320x480').split('x'))
      pairs, source = synthetic_pairs(work, h=h, w=w), f'synthetic {h}x{w}'
    print(f'# {source}; code {code} ({commit}); {platform.node()}; load {os.getloadavg()}')
    for n in (int(x) for x in args.ns.split(',')):
      images, masks = replicate(pairs, n, work / f'n{n}', copy=args.predict)
      env = {**os.environ, 'PYTHONPATH': str(code), 'TFDS_DATA_DIR': str(work / f'tfds{n}')}
      env['JAX_PLATFORMS'] = env.get('JAX_PLATFORMS', 'cpu')
      load = os.getloadavg()[0]
      if not args.no_evaluate:
        prog = CHECK + 'from crackjax.trainer.evaluate_command import main; sys.exit(main())'
        argv = [sys.executable, '-c', prog, f'--model={args.model}']
        argv += [f'--folder={images}:{masks}', f'--protocols={args.protocols}']
        argv += [f'--out={work / f"out{n}"}', f'--workers={args.workers}']
        m = run_measured(argv, env, work)
        record = json.loads(next((work / f'out{n}').glob('*/eval.json')).read_text())
        row = {
          'what': 'evaluate',
          'n': n,
          'commit': commit,
          'photos_per_s': n / m['wall_s'],
          'wall_s': m['wall_s'],
          'cpu_s_per_photo': m['cpu_s'] / n,
          'peak_rss_mb': m['peak_rss_mb'],
          'load_1min_before': load,
          'ods_f1': {p: r['ods']['f1'] for p, r in record['results'].items()},
          'tfds_copy_mb': _size_mb(work / f'tfds{n}'),
        }
        rows.append(row)
        print(_line(row), flush=True)
        shutil.rmtree(work / f'tfds{n}', ignore_errors=True)
      if args.predict:
        prog = CHECK + 'from crackjax.deploy.predict_command import main; sys.exit(main())'
        argv = [sys.executable, '-c', prog, f'--model={args.model}', str(images)]
        argv += [f'--out={work / f"pred{n}"}']
        m = run_measured(argv, env, work)
        row = {
          'what': 'predict',
          'n': n,
          'commit': commit,
          'photos_per_s': n / m['wall_s'],
          'wall_s': m['wall_s'],
          'cpu_s_per_photo': m['cpu_s'] / n,
          'peak_rss_mb': m['peak_rss_mb'],
          'load_1min_before': os.getloadavg()[0],
        }
        rows.append(row)
        print(_line(row), flush=True)
        shutil.rmtree(work / f'pred{n}', ignore_errors=True)
      shutil.rmtree(work / f'n{n}')
      shutil.rmtree(work / f'out{n}', ignore_errors=True)
  if args.json:
    Path(args.json).write_text(outputs.dumps(rows, indent=1) + '\n')


def _size_mb(path: Path) -> float:
  return sum(p.stat().st_size for p in path.rglob('*') if p.is_file()) / 1e6 if path.exists() else 0


def _line(row: dict) -> str:
  extra = f' | TFDS copy {row["tfds_copy_mb"]:.0f} MB' if row.get('tfds_copy_mb') else ''
  return (
    f'| {row["what"]} | {row["n"]} | {row["commit"]} | {row["photos_per_s"]:.2f} | '
    f'{row["wall_s"]:.0f} | {row["cpu_s_per_photo"]:.2f} | {row["peak_rss_mb"]:.0f} | '
    f'{row["load_1min_before"]:.1f}{extra} |'
  )


if __name__ == '__main__':
  main()
