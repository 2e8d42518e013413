"""The choices behind a released model, read from its runs' epoch records (scripts/release_cpu.sh).

  python -m crackjax.deploy.release select --config=configs/release/<name>.py --work=DIR
      prints every candidate's validation ODS F1 per epoch (DIR/select_<loss>) and stops
      (status 1) unless the config's CHOSEN is the best candidate at the last epoch.
  python -m crackjax.deploy.release best-step --workdir=RUN
      prints the step whose epoch record has the best validation ODS F1 (the epoch exported).
  python -m crackjax.deploy.release register --file=F --name=NAME --held_out=SPLIT
      copies the model file F into the package (crackjax/models/released/NAME.safetensors) and
      writes its registry entry (`registry_entry`), its scores those of its card on SPLIT.

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

from crackjax.runs import outputs

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
  """Prints the selection table; 0 if the config's CHOSEN is the best of its CANDIDATES at the
  last epoch (the other runs of LOSSES are printed for reference), else 1."""
  module = _load_config_module(config_path)
  candidates = tuple(getattr(module, 'CANDIDATES', module.LOSSES))
  finals = {}
  print(f'Validation ({PROTOCOL} ODS F1 per epoch) of the selection runs, {config_path}:')
  for loss in module.LOSSES:
    rows = epoch_scores(Path(work) / f'select_{loss}')
    finals[loss] = rows[-1]['ods_f1']
    per_epoch = ', '.join(f'epoch {r["epoch"]} (step {r["step"]}): {r["ods_f1"]:.4f}' for r in rows)
    role = 'candidate' if loss in candidates else 'reference'
    print(f'  {loss:10s} ({role}) split {rows[-1]["split"]}: {per_epoch}')
  best = max(candidates, key=finals.get)
  print(
    f'Best candidate at the last epoch: {best} ({finals[best]:.4f}); the config chose '
    f'{module.CHOSEN}.'
  )
  if best != module.CHOSEN:
    print(
      f'{config_path}: CHOSEN = {module.CHOSEN!r} but {best!r} scored best on the validation '
      'part: set CHOSEN to it (and docs/models.md) before the release run.',
      file=sys.stderr,
    )
    return 1
  return 0


def registry_entry(path: str | Path, name: str, held_out: str, **extra: Any) -> dict[str, Any]:
  """The registry entry of a model file (crackjax-models lists it): its size and SHA-256, its
  model, and from its card the data, licence and the scores on the `held_out` split.

  Raises:
    ValueError: the card has no scores on `held_out`.
  """
  from crackjax.models import model_file

  path = Path(path)
  loaded = model_file.read(path)
  card = loaded.card
  held = [s for s in card['scores'] if s['split'] == held_out]
  if not held:
    splits = sorted({s['split'] for s in card['scores']})
    raise ValueError(f'{path}: its card has no scores on split {held_out!r} (only {splits}).')
  scores = held[0]
  return {
    'name': name,
    'file': f'{name}{model_file.SUFFIX}',
    'url': None,
    'sha256': model_file.file_sha256(path),
    'size': path.stat().st_size,
    'model': card['model']['name'],
    'widths': card['model'].get('widths'),
    'dtype': str(_stored_dtype(loaded)),
    'parameters': card['model']['parameters'],
    'data': card['data']['name'],
    'licence': card['data']['licence'],
    'scored_on': f'{scores["dataset"]} {scores["split"]} ({scores["num_images"]} images)',
    'scores': {
      protocol: {'ods': r['ods']['f1'], 'ois': r['ois']['f1'], 'ap': r['ap']}
      for protocol, r in scores['protocols'].items()
    },
    'threshold': loaded.threshold['threshold'],
    **extra,
  }


def _stored_dtype(loaded) -> str:
  leaf = loaded.params
  while isinstance(leaf, dict):
    leaf = next(iter(leaf.values()))
  return str(leaf.dtype)  # 'float32' or 'bfloat16' (ml_dtypes names it so)


def register(file: str | Path, name: str, held_out: str, **extra: Any) -> dict[str, Any]:
  """Copies `file` into the package as the released model `name` and writes its registry
  entry (replacing an entry of that name); returns the entry."""
  import shutil

  from crackjax.models import hub

  hub.RELEASED_DIR.mkdir(exist_ok=True)
  entry = registry_entry(file, name, held_out, **extra)
  shutil.copyfile(file, hub.RELEASED_DIR / entry['file'])
  models = [m for m in hub.released() if m['name'] != name] + [entry]
  hub.REGISTRY.write_text(outputs.dumps({'models': models}, indent=2) + '\n')
  return entry


def check(file: str | Path, record: str | Path, tolerance: float = 1e-6) -> int:
  """Compares the card's scores of the record's dataset and split with `record` (the eval.json
  of ``crackjax-evaluate --model=file``): 0 if every protocol's ODS F1, OIS F1 and AP agree
  within `tolerance`, else 1 (each difference printed)."""
  from crackjax.models import model_file

  card = model_file.read(file).card
  got = json.loads(Path(record).read_text())
  mine = [s for s in card['scores'] if (s['dataset'], s['split']) == (got['dataset'], got['split'])]
  if not mine:
    print(f'{file}: the card has no scores on {got["dataset"]} {got["split"]}.', file=sys.stderr)
    return 1
  bad = 0
  for protocol, result in got['results'].items():
    want = mine[0]['protocols'].get(protocol)
    if want is None:
      continue
    pairs = {
      'ODS F1': (want['ods']['f1'], result['ods']['f1']),
      'OIS F1': (want['ois']['f1'], result['ois']['f1']),
      'AP': (want['ap'], result['ap']),
    }
    for what, (a, b) in pairs.items():
      ok = abs(a - b) <= tolerance
      bad += not ok
      print(f'  {protocol} {what}: card {a:.6f}, model file {b:.6f} {"ok" if ok else "DIFFERS"}')
  return int(bad > 0)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m crackjax.deploy.release', description=__doc__)
  sub = parser.add_subparsers(dest='command', required=True)
  p = sub.add_parser('select', help='the candidate losses on the validation part')
  p.add_argument('--config', required=True)
  p.add_argument('--work', required=True)
  p = sub.add_parser('best-step', help='the step of the best validation epoch')
  p.add_argument('--workdir', required=True)
  p = sub.add_parser('register', help='ship a model file in the package')
  p.add_argument('--file', required=True)
  p.add_argument('--name', required=True)
  p.add_argument('--held_out', default='test')
  p.add_argument('--config', help='the config file the model was trained with')
  p.add_argument('--command', dest='made_by', help='the command that made it')
  p = sub.add_parser('check', help="a model file's evaluation against its card")
  p.add_argument('--file', required=True)
  p.add_argument('--record', required=True)
  args = parser.parse_args(argv)
  if args.command == 'check':
    return check(args.file, args.record)
  if args.command == 'select':
    return select(args.config, args.work)
  if args.command == 'register':
    extra = {'config': args.config, 'made_by': args.made_by}
    entry = register(args.file, args.name, args.held_out, **{k: v for k, v in extra.items() if v})
    print(outputs.dumps(entry, indent=2))
    return 0
  print(best_epoch(args.workdir)['step'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
