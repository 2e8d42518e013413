"""The choices behind a released model, read from its runs' epoch records (scripts/release_cpu.sh).

  python -m crackjax.deploy.release select --config=configs/release/<name>.py --work=DIR
      prints every candidate's validation ODS F1 per epoch (DIR/select_<loss>) and stops
      (status 1) unless the config's CHOSEN is the best candidate at the last epoch.
  python -m crackjax.deploy.release best-step --workdir=RUN
      prints the step whose epoch record has the best validation ODS F1 (the epoch exported).

The selection reads the records `launch.py` wrote (epoch_<NNN>.json, `eval.every_epochs=1`),
so what the release stands on is on disk beside the runs, not in this module.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

PROTOCOL = 'strict'


def epoch_scores(workdir: str | Path, protocol: str = PROTOCOL) -> list[dict[str, Any]]:
  """Every epoch record of `workdir` as {epoch, step, split, ods_f1, threshold}, by epoch.

  Raises:
    FileNotFoundError: `workdir` holds no epoch record (the run did not evaluate per epoch).
  """
  rows = []
  for path in sorted(Path(workdir).glob('epoch_*.json')):
    record = json.loads(path.read_text())
    ods = record['results'][protocol]['ods']
    rows.append(
      {
        'epoch': record['epoch'],
        'step': record['step'],
        'split': record['split'],
        'ods_f1': ods['f1'],
        'threshold': ods['threshold'],
      }
    )
  if not rows:
    raise FileNotFoundError(f'{workdir} holds no epoch_*.json record (eval.every_epochs=0?).')
  return rows


def best_epoch(workdir: str | Path, protocol: str = PROTOCOL) -> dict[str, Any]:
  """The epoch record row with the highest ODS F1 (the earliest among equals)."""
  rows = epoch_scores(workdir, protocol)
  return max(rows, key=lambda r: (r['ods_f1'], -r['epoch']))


def _load_config_module(path: str):
  spec = importlib.util.spec_from_file_location('release_config', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def select(config_path: str, work: str | Path) -> int:
  """Prints the selection table; 0 if the config's CHOSEN is the best candidate, else 1."""
  module = _load_config_module(config_path)
  finals = {}
  print(f'Validation ({PROTOCOL} ODS F1 per epoch) of the candidate losses, {config_path}:')
  for loss in module.LOSSES:
    rows = epoch_scores(Path(work) / f'select_{loss}')
    finals[loss] = rows[-1]['ods_f1']
    per_epoch = ', '.join(f'epoch {r["epoch"]} (step {r["step"]}): {r["ods_f1"]:.4f}' for r in rows)
    print(f'  {loss:10s} split {rows[-1]["split"]}: {per_epoch}')
  best = max(finals, key=finals.get)
  print(f'Best at the last epoch: {best} ({finals[best]:.4f}); the config chose {module.CHOSEN}.')
  if best != module.CHOSEN:
    print(
      f'{config_path}: CHOSEN = {module.CHOSEN!r} but {best!r} scored best on the validation '
      'part: set CHOSEN to it (and docs/models.md) before the release run.',
      file=sys.stderr,
    )
    return 1
  return 0


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m crackjax.deploy.release', description=__doc__)
  sub = parser.add_subparsers(dest='command', required=True)
  p = sub.add_parser('select', help='the candidate losses on the validation part')
  p.add_argument('--config', required=True)
  p.add_argument('--work', required=True)
  p = sub.add_parser('best-step', help='the step of the best validation epoch')
  p.add_argument('--workdir', required=True)
  args = parser.parse_args(argv)
  if args.command == 'select':
    return select(args.config, args.work)
  print(best_epoch(args.workdir)['step'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
