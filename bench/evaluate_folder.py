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

``--profile`` says instead where a photo's scoring time goes, in CPU-seconds a photo
(issue 59): the first ``--n`` labelled CrackForest photos (with ``--scales=1,2,4`` also
enlarged, masks by nearest neighbour) predicted by the model, then counted under strict and
``tolerance_thin_gt`` (its ~115 thresholds); each cost is the process's CPU time over the
photos (all threads, prediction's XLA threads included), best of ``--repeat``; the tolerance
protocol's total is split into thinning, matching and the rest by a cProfile run's shares
(`STAGES`; the profiler's overhead is not in the total). It measures the crackjax first on
the path, so the code before a change is measured as
``PYTHONPATH=/tmp/crackjax-base python bench/evaluate_folder.py --profile``; the header names
the code, its commit and the CPU's kind (AVX-512 or AVX2), as every mode's does.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
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


def cpu_kind() -> str:
  """The CPU's model name and its widest vector unit (AVX-512, AVX2 or neither), from
  /proc/cpuinfo: scoring's cost per photo depends on it far more than prediction's (issue 59)."""
  try:
    info = Path('/proc/cpuinfo').read_text()
  except OSError:
    return f'{platform.processor() or platform.machine()} (vector unit unknown)'
  name = next((ln.split(':', 1)[1].strip() for ln in info.splitlines() if 'model name' in ln), '?')
  flags = next(
    (ln.split(':', 1)[1].split() for ln in info.splitlines() if ln.startswith('flags')), []
  )
  unit = 'AVX-512' if 'avx512f' in flags else 'AVX2' if 'avx2' in flags else 'no AVX2'
  return f'{name}, {unit}, {os.cpu_count()} cores'


def short_commit(code: Path) -> str:
  """The short commit of the tree `code` (a checkout or worktree)."""
  return subprocess.run(
    ['git', '-C', str(code), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True
  ).stdout.strip()


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


# ------------------------------------------------------------------- --profile: per-stage costs

# Each stage's functions, the outermost first: the first one the profile holds is counted
# (today's thin_prefixes also holds the ground truth's thinning, by thin_coords; before issue
# 59 thin_coords did all of it and max_matching_size all the matching).
STAGES = {
  'thinning': ('thin_prefixes', 'thin_coords'),
  'matching': ('match_prefixes', 'max_matching_size'),
}


def photos(root: Path, n: int, scale: int) -> list[tuple[np.ndarray, np.ndarray]]:
  """The first `n` labelled CrackForest photos and masks, enlarged `scale` times."""
  from crackjax.tfds_builders.crackforest import crackforest_dataset_builder as cf

  out = []
  for pair in cf.list_records(cf.find_dataset_root(root))[:n]:
    image = PIL.Image.open(pair.image_path).convert('RGB')
    mask = PIL.Image.fromarray(cf.load_crack_mask(pair.mask_path).astype(np.uint8))
    if scale != 1:
      size = (image.width * scale, image.height * scale)
      image, mask = image.resize(size, PIL.Image.BILINEAR), mask.resize(size, PIL.Image.NEAREST)
    out.append((np.asarray(image), np.asarray(mask).astype(bool)))
  return out


def cpu_seconds(fn, repeat: int) -> float:
  """The least process CPU time of `repeat` calls of `fn`."""
  best = float('inf')
  for _ in range(repeat):
    t0 = time.process_time()
    fn()
    best = min(best, time.process_time() - t0)
  return best


def stage_shares(fn) -> dict[str, float]:
  """Each stage's share of `fn`'s profiled time (cumulative time of its functions)."""
  profile = cProfile.Profile()
  profile.runcall(fn)
  stats = pstats.Stats(profile).stats
  total = max(s[3] for s in stats.values())  # the outermost call's cumulative time
  shares = {}
  for stage, names in STAGES.items():
    # A name's outermost entry (a wrapper and its kernel share a name): its largest
    # cumulative time.
    times = [max((s[3] for (_, _, f), s in stats.items() if f == n), default=0.0) for n in names]
    shares[stage] = min(next((t for t in times if t > 0), 0.0), total) / total
  shares['rest'] = max(0.0, 1.0 - sum(shares.values()))
  return shares


def measure(pairs, predictor, repeat: int) -> dict[str, float]:
  """Prediction's, strict's and tolerance_thin_gt's CPU-s a photo, the last by stage."""
  from crackjax.evaluation import protocols

  n = len(pairs)
  probs = [predictor(image) for image, _ in pairs]  # also compiles for this size
  grid = protocols.PROTOCOLS['tolerance_thin_gt'].thresholds(99)
  strict_grid = protocols.PROTOCOLS['strict'].thresholds(100)

  def tolerance():
    for p, (_, g) in zip(probs, pairs, strict=True):
      protocols.tolerance_counts(p, g, thresholds=grid, thin_gt=True)

  tolerance()  # numba compiles (or loads its cache) here, outside the timing
  row = {
    'megapixels': pairs[0][0].shape[0] * pairs[0][0].shape[1] / 1e6,
    'photos': n,
    'thresholds': int(grid.size),
    'predict_cpu_s': cpu_seconds(lambda: [predictor(i) for i, _ in pairs], repeat) / n,
    'strict_cpu_s': cpu_seconds(
      lambda: [
        protocols.counts_per_threshold(p, g, thresholds=strict_grid)
        for p, (_, g) in zip(probs, pairs, strict=True)
      ],
      repeat,
    )
    / n,
    'tolerance_thin_gt_cpu_s': cpu_seconds(tolerance, repeat) / n,
  }
  for stage, share in stage_shares(tolerance).items():
    row[f'{stage}_cpu_s'] = share * row['tolerance_thin_gt_cpu_s']
  return row


def profile(args) -> list[dict]:
  """The --profile rows: per-stage CPU-seconds a photo at each of --scales."""
  import crackjax
  from crackjax.deploy.predictor import Predictor

  code = Path(crackjax.__file__).resolve().parents[1]
  commit = short_commit(code)
  print(f'# crackjax {code} ({commit}); {cpu_kind()}; load {os.getloadavg()}')
  print('| MP | predict | strict | tolerance_thin_gt | thinning | matching | rest | a threshold |')
  print('|---|---|---|---|---|---|---|---|')
  predictor = Predictor.from_pretrained(args.model)
  rows = []
  for scale in (int(s) for s in args.scales.split(',')):
    row = measure(photos(Path(args.crackforest), args.n, scale), predictor, args.repeat)
    row.update(commit=commit, cpu=cpu_kind(), load_1min_after=os.getloadavg()[0])
    rows.append(row)
    per_threshold = row['tolerance_thin_gt_cpu_s'] / row['thresholds'] * 1e3
    print(
      f'| {row["megapixels"]:.2f} | {row["predict_cpu_s"]:.3f} | {row["strict_cpu_s"]:.4f} | '
      f'{row["tolerance_thin_gt_cpu_s"]:.3f} | {row["thinning_cpu_s"]:.3f} | '
      f'{row["matching_cpu_s"]:.3f} | {row["rest_cpu_s"]:.3f} | {per_threshold:.2f} ms |',
      flush=True,
    )
  return rows


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
  parser.add_argument(
    '--profile', action='store_true', help='per-stage CPU-s a photo (the crackjax on the path)'
  )
  parser.add_argument('--n', type=int, default=20, help='--profile: photos per size')
  parser.add_argument('--scales', default='1', help='--profile: photo enlargements, e.g. 1,2,4')
  parser.add_argument('--repeat', type=int, default=2, help='--profile: best of this many')
  args = parser.parse_args()
  if args.profile:
    rows = profile(args)
    if args.json:
      Path(args.json).write_text(outputs.dumps(rows, indent=1) + '\n')
    return

  code = Path(args.code).resolve()
  commit = short_commit(code)
  rows = []
  with tempfile.TemporaryDirectory(prefix='evaluate_folder_') as tmp:
    work = Path(tmp)
    cf = Path(args.crackforest).expanduser()
    if not args.synthetic and cf.is_dir():
      pairs, source = crackforest_pairs(cf, work), 'CrackForest (118 photos, replicated)'
    else:
      h, w = (int(x) for x in (args.synthetic or '320x480').split('x'))
      pairs, source = synthetic_pairs(work, h=h, w=w), f'synthetic {h}x{w}'
    kind = cpu_kind()
    print(f'# {source}; code {code} ({commit}); {kind}; load {os.getloadavg()}')
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
          'cpu': kind,
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
          'cpu': kind,
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
