"""What a survey costs on this machine (issue 79): photos/s and CPU-seconds a photo for a tree
of photos through `crackjax-survey` in one process, and the same tree in shards, with what the
merge of the shards costs.

It writes a tree of `--photos` photos (two folders, GPS in each photo's EXIF along a track;
`--source=DIR`: the images of a folder, cycled, else random pavement with a dark line), then

* `one process`: ``python -m crackjax.survey.survey_command --model=M --out=WORK/one TREE``
  (the prediction, its tables and page, then the survey step), timed whole: wall time and the
  child's CPU time (user + system);
* `shards`: the same photos cut into `--shards` parts as ``--shards`` cuts them, each part's
  task (``python -m crackjax.survey.shards``) run here one after another and timed, then
  `crackjax.survey.shards.merge` timed in this process (the maps moved, the manifest lines
  added), then the last pass (the same survey command: every photo found done, the tables,
  index.html and the survey written) timed.

  python bench/survey_speed.py --model=roads-unet-cpu --photos=2000 --shards=4 --work=/tmp/sb
  python bench/survey_speed.py --model=roads-unet-cpu --photos=2000 \\
      --source=../shared/datasets/crackforest/image --json=survey_speed.json

It prints the CPU (model name, cores), the lines and, with --json, the figures as JSON.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import PIL.Image
from PIL.TiffImagePlugin import IFDRational

from crackjax.runs import outputs
from crackjax.survey import shards

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff')


def cpu_kind() -> str:
  """The CPU as /proc/cpuinfo names it, and the cores this process may use."""
  name = platform.processor() or platform.machine()
  fields = {}
  try:
    for line in Path('/proc/cpuinfo').read_text().splitlines():
      key, _, value = line.partition(':')
      fields.setdefault(key.strip(), value.strip())
  except OSError:
    pass
  name = fields.get('model name', name)
  if 'cpu family' in fields:  # a VM may name the CPU by its vendor alone ('AMD EPYC')
    name += f' (family {fields["cpu family"]}, model {fields.get("model", "?")})'
  return f'{name}, {len(os.sched_getaffinity(0))} core(s)'


def _dms(value: float) -> tuple[IFDRational, IFDRational, IFDRational]:
  value = abs(value)
  degrees, rest = int(value), (abs(value) - int(value)) * 60
  return (
    IFDRational(degrees),
    IFDRational(int(rest)),
    IFDRational(round((rest % 1) * 600000), 10000),
  )


def make_tree(root: Path, count: int, size: tuple[int, int], source: Path | None) -> Path:
  """`count` JPEGs under root/photos/day1, day2, each with its EXIF GPS 10 m further north."""
  images = (
    sorted(p for p in source.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES) if source else []
  )
  rng = np.random.default_rng(0)
  photos = root / 'photos'
  for i in range(count):
    if images:
      image = PIL.Image.open(images[i % len(images)]).convert('RGB')
    else:
      array = rng.integers(120, 200, (*size, 3), dtype=np.uint8)
      row = (i * 7) % (size[0] - 4) + 2
      array[row : row + 3, size[1] // 8 : -size[1] // 8] = 40
      image = PIL.Image.fromarray(array)
    exif = PIL.Image.Exif()
    exif.get_ifd(0x8825).update({1: 'N', 2: _dms(52.2 + i * 9e-5), 3: 'W', 4: _dms(1.4)})
    path = photos / f'day{1 + 2 * i // count}' / f'img_{i:05d}.jpg'
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, 'JPEG', quality=90, exif=exif)
  return photos


def _timed(command: list[str], log: Path) -> tuple[float, float]:
  """(wall seconds, CPU seconds of the child) of `command`, its output into `log`."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  with log.open('a') as f:
    done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, check=False)
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if done.returncode:
    sys.exit(f'{" ".join(command[:4])} ... failed ({done.returncode}): see {log}')
  return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(args: argparse.Namespace) -> dict:
  work = Path(args.work)
  if work.exists():
    shutil.rmtree(work)
  work.mkdir(parents=True)
  size = tuple(int(v) for v in args.size.split('x'))
  tree = make_tree(work, args.photos, size, Path(args.source) if args.source else None)
  survey = [sys.executable, '-m', 'crackjax.survey.survey_command']
  model = f'--workdir={args.workdir}' if args.workdir else f'--model={args.model}'
  flags = [model, f'--mm_per_pixel={args.mm_per_pixel}']
  result = {'cpu': cpu_kind(), 'photos': args.photos, 'size': args.size}
  result['model'] = f'run {args.workdir}' if args.workdir else args.model
  result['source'] = args.source or 'random pavement'
  log = work / 'bench.log'
  wall, cpu = _timed([*survey, *flags, f'--out={work / "one"}', str(tree)], log)
  result['one_process'] = {'wall_s': wall, 'cpu_s': cpu}
  out = work / 'sharded'
  from crackjax.deploy.photos import find_inputs, output_names

  names = output_names(find_inputs([str(tree)], out=out)[0])
  parts = shards.plan(names, args.shards)
  tasks = []
  for k, part in enumerate(parts):
    folder = shards.shard_folder(out, k)
    folder.mkdir(parents=True)
    (folder / shards.PHOTOS_FILE).write_text('\n'.join(part) + '\n')
    task = [sys.executable, '-m', 'crackjax.survey.shards', *flags, f'--out={out}', str(tree)]
    tasks.append(_timed([*task, f'--job=shard-{k:04d}'], folder / 'worker.log'))
  result['shard_tasks'] = [{'wall_s': w, 'cpu_s': c} for w, c in tasks]
  start, cpu0 = time.perf_counter(), time.process_time()
  merged = shards.merge(out)
  result['merge'] = {
    'wall_s': time.perf_counter() - start,
    'cpu_s': time.process_time() - cpu0,
    'photos': merged.merged,
  }
  wall, cpu = _timed([*survey, *flags, f'--out={out}', str(tree)], log)
  result['last_pass'] = {'wall_s': wall, 'cpu_s': cpu}
  same = (work / 'one' / 'measurements.csv').read_bytes() == (out / 'measurements.csv').read_bytes()
  result['same_tables'] = same
  return result


def lines(r: dict) -> list[str]:
  n = r['photos']
  one = r['one_process']
  tasks_wall = sum(t['wall_s'] for t in r['shard_tasks'])
  tasks_cpu = sum(t['cpu_s'] for t in r['shard_tasks'])
  merge, last = r['merge'], r['last_pass']
  return [
    f'CPU: {r["cpu"]}; {n} photos of {r["size"]} ({r["source"]}), model {r["model"]}',
    f'one process: {one["wall_s"]:.1f} s, {n / one["wall_s"]:.2f} photos/s, '
    f'{one["cpu_s"] / n:.3f} CPU-s a photo',
    f'{len(r["shard_tasks"])} shard tasks one after another: {tasks_wall:.1f} s, '
    f'{tasks_cpu / n:.3f} CPU-s a photo (each task starts Python, JAX and the model, and writes '
    "its part's tables and page)",
    f'merge: {merge["wall_s"]:.2f} s ({1000 * merge["wall_s"] / max(1, merge["photos"]):.2f} ms '
    f'a photo, {merge["photos"]} photos); the last pass (tables, index.html, the survey): '
    f'{last["wall_s"]:.1f} s, {last["cpu_s"]:.1f} CPU-s; sharded in all: '
    f'{(tasks_cpu + merge["cpu_s"] + last["cpu_s"]) / n:.3f} CPU-s a photo',
    f'merged tables identical to one process: {r["same_tables"]}',
  ]


def main(argv: list[str] | None = None) -> dict:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--model', default='roads-unet-cpu', help='a released model, file or URL')
  p.add_argument('--workdir', default=None, help='a training run instead of --model')
  p.add_argument('--photos', type=int, default=2000)
  p.add_argument('--size', default='320x480', help='H x W of the random photos')
  p.add_argument('--source', default=None, help='a folder of images to cycle instead')
  p.add_argument('--shards', type=int, default=4)
  p.add_argument('--mm_per_pixel', type=float, default=1.0)
  p.add_argument('--work', default='/tmp/crackjax_survey_bench')
  p.add_argument('--json', default=None, help='the figures as JSON here')
  args = p.parse_args(argv)
  result = run(args)
  for line in lines(result):
    print(line)
  if args.json:
    Path(args.json).write_text(outputs.dumps(result, indent=1) + '\n')
  return result


if __name__ == '__main__':
  main()
