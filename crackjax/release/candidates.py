"""Every trained model kept the day it is made (issue 76): a long run's epochs exported as
bfloat16 model files into a candidates folder of the repository (``candidates/<name>/``), each
with a record of its validation scores, date, commit and machine, and only the few still in
play kept. A run whose machine is gone goes on from the last candidate's weights at its step
(``config.model_init.pretrained`` + ``start_step``): it loses at most the epochs since then.

  python -m crackjax.release.candidates add --workdir=RUN --dir=candidates/roads-unet-cpu
  python -m crackjax.release.candidates latest --dir=candidates/roads-unet-cpu \\
      --fallback=roads-unet-cpu
  python -m crackjax.release.candidates list --dir=candidates/roads-unet-cpu

`add` exports the run's newest scored epoch (the warm start point) and its best one (by the
mean validation F1 over the mixture's datasets, what a release takes), and keeps `KEEP` files:
the newest, the best, and the next newest. `latest` prints the newest candidate's file and step
(or the fallback released model's), what scripts/plateau_cpu.sh warm-starts from.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path
from typing import Any

from crackjax.runs import outputs

#: The suffix of a candidate's record beside its model file.
RECORD_SUFFIX = '.json'
#: How many candidates a folder keeps: the newest, the best, and one more newest.
KEEP = 3


@dataclasses.dataclass(frozen=True)
class Candidate:
  """A kept model file and its record.

  Attributes:
    path: the model file (``<dir>/step_<NNNNNN>.safetensors``).
    step: the training step it was exported at (its card's ``training.step``).
    record: its record (``<path stem>.json``): the run's validation scores of that epoch (mean
      over the datasets, pooled, per dataset), the stored threshold, when, commit, machine.
  """

  path: Path
  step: int
  record: dict[str, Any]

  @property
  def mean_f1(self) -> float:
    return float(self.record['validation']['mean_f1'])


def file_name(step: int) -> str:
  return f'step_{step:06d}.safetensors'


def read(directory: str | Path) -> list[Candidate]:
  """The candidates of `directory`, by step (none if it does not exist).

  Raises:
    ValueError: a record that cannot be read, or a model file without one (its file named).
  """
  out = []
  for path in sorted(Path(directory).glob('step_*.safetensors')):
    record_path = path.with_suffix(RECORD_SUFFIX)
    try:
      record = json.loads(record_path.read_text())
      step = int(record['step'])
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise ValueError(f'{record_path}: not a readable candidate record ({e}).') from e
    out.append(Candidate(path, step, record))
  return sorted(out, key=lambda c: c.step)


def latest(directory: str | Path) -> Candidate | None:
  """The candidate of the highest step: where a run whose machine is gone goes on."""
  found = read(directory)
  return found[-1] if found else None


def best(directory: str | Path) -> Candidate | None:
  """The candidate of the best mean validation F1 (the earliest among equals)."""
  found = read(directory)
  return max(found, key=lambda c: (c.mean_f1, -c.step)) if found else None


def released_start(name: str) -> tuple[Path, int]:
  """The file of the released model `name` and the step it was exported at (its card)."""
  from crackjax.experiment import restored

  path, meta = restored.model_file_metadata(name)
  return path, int(meta['card']['training']['step'])


def in_play(found: list[Candidate], keep: int = KEEP) -> list[Candidate]:
  """The candidates still in play, by step: the newest (the warm start), the best (the
  release), then the newest others, `keep` in all."""
  if not found:
    return []
  best_step = max(found, key=lambda c: (c.mean_f1, -c.step)).step
  order = [found[-1].step, best_step, *(c.step for c in reversed(found))]
  kept = set(list(dict.fromkeys(order))[:keep])
  return [c for c in found if c.step in kept]


def _validation(row: dict[str, Any]) -> dict[str, Any]:
  return {
    'mean_f1': round(row['ods_f1'], 4),
    'pooled_f1': round(row['pooled_f1'], 4),
    'threshold': row['threshold'],
    'datasets': {k: round(v, 4) for k, v in row['datasets'].items()},
    'protocol': "strict ODS F1 on the members' validation parts (epoch record)",
  }


def add(
  workdir: str | Path, directory: str | Path, *, keep: int = KEEP, name: str | None = None
) -> list[Path]:
  """Exports `workdir`'s newest and best scored epochs into `directory` as bfloat16 candidates
  (those already there are left), then removes the candidates no longer in play (`in_play`);
  returns the files written.

  Raises:
    FileNotFoundError: the run has no scored epoch.
  """
  from crackjax.deploy import release
  from crackjax.deploy.model_export import export_model
  from crackjax.lodo.kept_scores import git_commit, machine

  # A warm-started run's first record scores its start file (its step, `model_init.start_step`):
  # that model is kept already, where the run came from.
  config = json.loads((Path(workdir) / 'config.json').read_text())
  start = int((config.get('model_init') or {}).get('start_step') or 0)
  rows = [r for r in release.epoch_scores(workdir) if not start or r['step'] > start]
  if not rows:
    return []
  best_row = max(rows, key=lambda r: (r['ods_f1'], -r['epoch']))
  chosen = {rows[-1]['step']: rows[-1], best_row['step']: best_row}
  directory = Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  have = {c.step for c in read(directory)}
  written = []
  for step, row in sorted(chosen.items()):
    if step in have:
      continue
    out = directory / file_name(step)
    _, sha, _ = export_model(
      workdir,
      out,
      step=step,
      dtype='bfloat16',
      name=name,
      notes=f'A candidate of {Path(workdir).name}, epoch {row["epoch"]} '
      '(crackjax.release.candidates).',
    )
    record = {
      'step': step,
      'epoch': row['epoch'],
      'file': out.name,
      'sha256': sha,
      'dtype': 'bfloat16',
      'run': str(Path(workdir).name),
      'validation': _validation(row),
      'exported': f'{datetime.datetime.now(datetime.UTC):%d %b %Y %H:%M} UTC',
      'commit': git_commit() or 'unknown',
      'machine': machine(),
    }
    out.with_suffix(RECORD_SUFFIX).write_text(outputs.dumps(record, indent=1) + '\n')
    written.append(out)
  found = read(directory)
  kept = {c.step for c in in_play(found, keep)}
  for c in found:
    if c.step not in kept:
      c.path.unlink()
      c.path.with_suffix(RECORD_SUFFIX).unlink(missing_ok=True)
  return written


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(
    prog='python -m crackjax.release.candidates', description=__doc__.split('\n\n')[0]
  )
  sub = p.add_subparsers(dest='command', required=True)
  a = sub.add_parser('add', help="export a run's newest and best epochs as candidates")
  a.add_argument('--workdir', required=True)
  a.add_argument('--dir', required=True)
  a.add_argument('--keep', type=int, default=KEEP)
  a.add_argument('--name', default=None)
  la = sub.add_parser('latest', help='print the newest candidate: FILE STEP')
  la.add_argument('--dir', required=True)
  la.add_argument(
    '--fallback', default=None, help='a released model to start from when the folder has none'
  )
  li = sub.add_parser('list', help='every candidate, its step and validation mean')
  li.add_argument('--dir', required=True)
  args = p.parse_args(argv)
  try:
    if args.command == 'add':
      if args.keep < 2:
        p.error(f'--keep={args.keep}: keep at least 2 (the newest and the best).')
      for path in add(args.workdir, args.dir, keep=args.keep, name=args.name):
        print(f'kept {path}')
      return 0
    if args.command == 'latest':
      c = latest(args.dir)
      if c is not None:
        print(c.path, c.step)
      elif args.fallback:
        path, step = released_start(args.fallback)
        print(path, step)
      else:
        print(f'{args.dir}: no candidate, and no --fallback', file=sys.stderr)
        return 1
      return 0
    for c in read(args.dir):
      v = c.record['validation']
      print(
        f'{c.path}  step {c.step}  epoch {c.record["epoch"]}  mean {v["mean_f1"]:.4f}  '
        f'pooled {v["pooled_f1"]:.4f}  {c.record["exported"]}'
      )
    return 0
  except (FileNotFoundError, ValueError) as e:
    print(f'{p.prog} {args.command}: {e}', file=sys.stderr)
    return 2


if __name__ == '__main__':
  sys.exit(main())
