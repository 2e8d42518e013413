"""The choices behind a released model, read from its runs' epoch records (scripts/release_cpu.sh).

  python -m crackjax.deploy.release select --config=configs/release/<name>.py --work=DIR
      prints every candidate's validation ODS F1 per epoch (DIR/select_<loss>) and stops
      (status 1) unless the config's CHOSEN is the best candidate at the last epoch.
  python -m crackjax.deploy.release best-step --workdir=RUN
      prints the step whose epoch record has the best validation ODS F1 (the epoch exported).
  python -m crackjax.deploy.release show --workdir=RUN
      prints every epoch's validation ODS F1 and threshold, the best one marked.
  python -m crackjax.deploy.release plateau --workdir=RUN [--patience=5] [--min_epochs=30]
      exits 0 once the validation score has not risen for PATIENCE epochs (at least
      MIN_EPOCHS scored), 1 while it still rises (scripts/release_roads_cpu.sh trains on).
  python -m crackjax.deploy.release register --file=F --name=NAME --held_out=SPLIT
      copies the model file F into the package (crackjax/models/released/NAME.safetensors) and
      writes its registry entry (`registry_entry`), its scores those of its card on SPLIT;
      --keep_old_as=OLD keeps the model released as NAME so far under the name OLD.
  python -m crackjax.deploy.release rescore --file=F --record=EVAL_JSON
      puts the file's own scores (EVAL_JSON of `crackjax-evaluate --model=F`) and this
      machine's self check into its card, keeping the run's scores they replace
      (scripts/release_gpu.sh: a bfloat16 file made on a GPU, scored on the CPU).
  python -m crackjax.deploy.release lodo --file=F --table=LODO_JSON --row=ROW [--peer=ROW]
      puts its recipe's leave-one-dataset-out figure (row ROW of `bench/lodo.py --out`'s
      JSON, and the peer's beside it) into the file's card (`model_card.lodo`); the registry
      entry and crackjax-models then show its mean.

The selection reads the records `launch.py` wrote (epoch_<NNN>.json, `eval.every_epochs=1`),
so what the release stands on is on disk beside the runs, not in this module.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from crackjax.deploy import model_card
from crackjax.evaluation.result import AP, F1, ODS, OIS, THRESHOLD, read_record
from crackjax.runs import outputs

PROTOCOL = 'strict'


def epoch_scores(workdir: str | Path, protocol: str = PROTOCOL) -> list[dict[str, Any]]:
  """Every epoch record of `workdir` as {epoch, step, split, ods_f1, threshold}, by epoch.

  Raises:
    FileNotFoundError: `workdir` holds no epoch record (the run did not evaluate per epoch).
  """
  rows = []
  for path in sorted(Path(workdir).glob('epoch_*.json')):
    record = read_record(path)
    ods = record.results[protocol].ods
    # A mixture of datasets is selected on its members' mean ODS F1 (record.selection: every
    # dataset alike), its threshold stays the pooled one.
    rows.append(
      {
        'epoch': record.epoch,
        'step': record.step,
        'split': record.split,
        'ods_f1': record.selection.value if record.selection else ods.f1,
        'pooled_f1': ods.f1,
        'threshold': ods.threshold,
        'datasets': {
          name: d.results[protocol].ods.f1
          for name, d in (record.datasets or {}).items()
          if protocol in d.results
        },
      }
    )
  if not rows:
    raise FileNotFoundError(
      f'{workdir} holds no epoch_*.json record: no epoch was scored (the run ended before its '
      'first epoch did, or eval.every_epochs=0).'
    )
  return rows


def best_epoch(workdir: str | Path, protocol: str = PROTOCOL) -> dict[str, Any]:
  """The epoch record row with the highest ODS F1 (the earliest among equals)."""
  return _best(epoch_scores(workdir, protocol))


def _best(rows: list[dict[str, Any]]) -> dict[str, Any]:
  return max(rows, key=lambda r: (r['ods_f1'], -r['epoch']))


def plateau(workdir: str | Path, patience: int, min_epochs: int) -> tuple[bool, str]:
  """Whether the run in `workdir` has reached its plateau: at least `min_epochs` epochs scored
  and its selection score (`epoch_scores`' ods_f1: a mixture's mean over its datasets) not
  risen for `patience` epochs since its best; (done, one line saying so)."""
  rows = epoch_scores(workdir)
  best, last = _best(rows), rows[-1]
  since = last['epoch'] - best['epoch']
  done = last['epoch'] >= min_epochs and since >= patience
  earliest = plateau_epoch(rows, patience, min_epochs)
  word = 'reached' if done else f'not reached (at epoch {earliest} at the earliest)'
  return done, (
    f'plateau {word}: {last["epoch"]} epoch(s) scored (at least {min_epochs}), the best '
    f'{best["ods_f1"]:.4f} at epoch {best["epoch"]}, {since} epoch(s) ago (patience {patience}).'
  )


def plateau_epoch(rows: list[dict[str, Any]], patience: int, min_epochs: int) -> int:
  """The first epoch by which the plateau can be reached if no later epoch beats the best of
  `rows` (`epoch_scores`): what to train to next, rather than `patience` more epochs."""
  return max(min_epochs, _best(rows)['epoch'] + patience)


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
  model, and from its card the data, licence and the scores on the `held_out` split (the first
  such entry of the card; a card scored on several sets' `held_out` splits, as the general
  model's, also gives each set's ODS F1 and F1 at the stored threshold, ``scores_by_set``),
  and its recipe's leave-one-dataset-out means where the card has them (``lodo``).

  Raises:
    ValueError: the card has no scores on `held_out`.
  """
  from crackjax.experiment.restored import read_model_file
  from crackjax.models import model_file

  path = Path(path)
  loaded = read_model_file(path)
  card = loaded.card
  held = [s for s in card['scores'] if s['split'] == held_out]
  if not held:
    splits = sorted({s['split'] for s in card['scores']})
    raise ValueError(f'{path}: its card has no scores on split {held_out!r} (only {splits}).')
  scores = held[0]
  by_set = (
    {
      'scores_by_set': [
        {
          'set': f'{h["dataset"]} {h["split"]}{_copy(h)}',
          'num_images': h['num_images'],
          ODS: {p: r[ODS][F1] for p, r in h['protocols'].items()},
          'at_threshold': {
            p: r['at_stored_threshold'][F1]
            for p, r in h['protocols'].items()
            if 'at_stored_threshold' in r
          },
        }
        for h in held
      ]
    }
    if len(held) > 1
    else {}
  )
  return {
    'name': name,
    'file': f'{name}{model_file.SUFFIX}',
    'url': None,
    'sha256': model_file.file_sha256(path),
    'size': path.stat().st_size,
    'model': card['model']['name'],
    'widths': card['model'].get('widths'),
    'dtype': str(model_card.stored_dtype(loaded)),
    'parameters': card['model']['parameters'],
    'data': (
      ' + '.join(d['name'] for d in card['data']['datasets'])
      if card['data'].get('datasets')
      else card['data']['name']
    ),
    'licence': card['data']['licence'],
    'scored_on': f'{scores["dataset"]} {scores["split"]} ({scores["num_images"]} images)',
    'scores': {
      protocol: {ODS: r[ODS][F1], OIS: r[OIS][F1], AP: r[AP]}
      for protocol, r in scores['protocols'].items()
    },
    'threshold': loaded.threshold[THRESHOLD],
    **by_set,
    **({'lodo': _lodo_summary(card['lodo'])} if card.get('lodo') else {}),
    **extra,
  }


def _lodo_summary(lodo: dict[str, Any]) -> dict[str, Any]:
  """The registry's part of a card's LODO entry (`model_card.lodo`): its row, the held-out
  sets, the means and the peer's."""
  summary = {'row': lodo['row'], 'sets': sorted(lodo['sets']), 'mean': lodo['mean']}
  if 'peer' in lodo:
    summary['peer'] = {'row': lodo['peer']['row'], 'mean': lodo['peer']['mean']}
  return summary


def _copy(entry: dict[str, Any]) -> str:
  return f' ({entry["copy"]})' if entry.get('copy') else ''


def register(
  file: str | Path, name: str, held_out: str, keep_old_as: str | None = None, **extra: Any
) -> dict[str, Any]:
  """Copies `file` into the package as the released model `name` and writes its registry
  entry (replacing an entry of that name); returns the entry.

  With `keep_old_as`, the model released as `name` so far stays released under that name,
  its file unchanged (the same SHA-256, so a user who pinned it keeps exactly it), its entry
  marked ``superseded_by`` `name`: `crackjax-models` lists old and new side by side.

  Raises:
    ValueError: `keep_old_as` is given but no model `name` is shipped, or names a released
      model already.
  """
  import shutil

  from crackjax.models import hub

  hub.RELEASED_DIR.mkdir(exist_ok=True)
  entry = registry_entry(file, name, held_out, **extra)  # checked before any file is copied
  models = hub.released()
  if keep_old_as:
    models.append(_keep_old(models, name, keep_old_as))
  shutil.copyfile(file, hub.RELEASED_DIR / entry['file'])
  models = [m for m in models if m['name'] != name] + [entry]
  hub.REGISTRY.write_text(outputs.dumps({'models': models}, indent=2) + '\n')
  return entry


def _keep_old(models: list[dict[str, Any]], name: str, old: str) -> dict[str, Any]:
  """The entry of the shipped model `name` renamed `old` (its file copied, byte for byte)."""
  import shutil

  from crackjax.models import hub, model_file

  current = next((m for m in models if m['name'] == name), None)
  if current is None or not (hub.RELEASED_DIR / (current.get('file') or '')).is_file():
    raise ValueError(f'--keep_old_as={old}: no shipped released model {name!r} to keep.')
  if any(m['name'] == old for m in models):
    raise ValueError(f'--keep_old_as={old}: a released model has that name already.')
  kept = {**current, 'name': old, 'file': f'{old}{model_file.SUFFIX}', 'superseded_by': name}
  shutil.copyfile(hub.RELEASED_DIR / current['file'], hub.RELEASED_DIR / kept['file'])
  return kept


def main(argv: list[str] | None = None) -> int:
  """`python -m crackjax.deploy.release COMMAND ...` (scripts/release_*.sh's steps); returns
  the exit status."""
  parser = _parser()
  args = parser.parse_args(argv)
  if args.command == 'check':
    return model_card.check(args.file, args.record)
  if args.command == 'fp':
    folders = {}
    for spec in args.set:
      label, _, dirs = spec.partition('=')
      images, _, masks = dirs.partition(':')
      folders[label] = (images, masks)
    model_card.false_positives(args.file, folders, args.max_patches)
    return 0
  if args.command == 'rescore':
    return _rescore(parser.prog, args)
  if args.command == 'lodo':
    return _lodo(parser.prog, args)
  if args.command == 'select':
    return select(args.config, args.work)
  if args.command == 'plateau':
    try:
      if args.earliest:
        print(plateau_epoch(epoch_scores(args.workdir), args.patience, args.min_epochs))
        return 0
      done, line = plateau(args.workdir, args.patience, args.min_epochs)
    except FileNotFoundError as e:
      print(f'{parser.prog} plateau: {e}', file=sys.stderr)
      return 2
    print(line)
    return 0 if done else 1
  if args.command == 'register':
    extra = {'config': args.config, 'made_by': args.made_by}
    extra = {k: v for k, v in extra.items() if v}
    try:
      entry = register(args.file, args.name, args.held_out, args.keep_old_as, **extra)
    except ValueError as e:
      print(f'{parser.prog} register: {e}', file=sys.stderr)
      return 1
    print(outputs.dumps(entry, indent=2))
    return 0
  return _show(parser.prog, args)


def _parser() -> argparse.ArgumentParser:
  """The command line of the release steps: one subcommand each."""
  parser = argparse.ArgumentParser(prog='python -m crackjax.deploy.release', description=__doc__)
  sub = parser.add_subparsers(dest='command', required=True)
  p = sub.add_parser('select', help='the candidate losses on the validation part')
  p.add_argument('--config', required=True)
  p.add_argument('--work', required=True)
  p = sub.add_parser('best-step', help='the step of the best validation epoch')
  p.add_argument('--workdir', required=True)
  p = sub.add_parser('show', help="every epoch's validation ODS F1, the best marked")
  p.add_argument('--workdir', required=True)
  p = sub.add_parser(
    'plateau', help='exit 0 once the validation score has not risen for PATIENCE epochs, else 1'
  )
  p.add_argument('--workdir', required=True)
  p.add_argument('--patience', type=int, default=5)
  p.add_argument('--min_epochs', type=int, default=30)
  p.add_argument('--earliest', action='store_true', help='print the earliest plateau epoch only')
  p = sub.add_parser('register', help='ship a model file in the package')
  p.add_argument('--file', required=True)
  p.add_argument('--name', required=True)
  p.add_argument('--held_out', default='test')
  p.add_argument('--config', help='the config file the model was trained with')
  p.add_argument('--command', dest='made_by', help='the command that made it')
  p.add_argument('--keep_old_as', help='keep the model released as NAME so far, under this name')
  p = sub.add_parser('rescore', help="a model file's own scores and self check into its card")
  p.add_argument('--file', required=True)
  p.add_argument('--record', required=True)
  p.add_argument('--copy', help="which copy of the dataset the record scored (e.g. 'photos')")
  p = sub.add_parser('fp', help="false positives on crack-free patches into a file's card")
  p.add_argument('--file', required=True)
  p.add_argument(
    '--set', action='append', required=True, help='LABEL=IMAGES_DIR:MASKS_DIR (repeatable)'
  )
  p.add_argument('--max_patches', type=int, default=200)
  p = sub.add_parser('lodo', help="its recipe's leave-one-dataset-out figure into a file's card")
  p.add_argument('--file', required=True)
  p.add_argument('--table', required=True, help='the JSON of bench/lodo.py --out')
  p.add_argument('--row', required=True, help="the recipe's row, e.g. 'jpeg (long) at scales 2'")
  p.add_argument('--peer', help="a row to compare with, e.g. 'MTSCrack (its mask: output > 0)'")
  p = sub.add_parser('check', help="a model file's evaluation against its card")
  p.add_argument('--file', required=True)
  p.add_argument('--record', required=True)
  return parser


def _rescore(prog: str, args: argparse.Namespace) -> int:
  """`rescore`: the file's own scores into its card, printed."""
  try:
    card = model_card.rescore(args.file, args.record, args.copy)
  except (ValueError, OSError) as e:  # ModelFileError is a ValueError
    print(f'{prog}: {e}', file=sys.stderr)
    return 1
  except KeyError as e:  # a hand-made card or record
    print(f'{prog}: {args.file} or {args.record} lacks the field {e}.', file=sys.stderr)
    return 1
  for entry in card['scores']:
    for protocol, r in entry['protocols'].items():
      print(
        f'{args.file}: {entry["dataset"]} {entry["split"]}{_copy(entry)} {protocol}: ODS F1 '
        f'{r[ODS][F1]:.4f}, OIS F1 {r[OIS][F1]:.4f}, AP {r[AP]:.4f}'
      )
  return 0


def _lodo(prog: str, args: argparse.Namespace) -> int:
  """`lodo`: the recipe's LODO figure into the card, its means printed."""
  try:
    entry = model_card.lodo(args.file, args.table, args.row, args.peer)
  except (ValueError, OSError) as e:  # ModelFileError and json's errors are ValueErrors
    print(f'{prog} lodo: {e}', file=sys.stderr)
    return 1
  for protocol, mean in entry['mean'].items():
    line = f'{args.file}: {args.row}: {protocol} mean F1 {mean["stored"]:.1f} at the stored '
    line += f'threshold, {mean["ods"]:.1f} at ODS, on {len(entry["sets"])} held-out sets'
    if protocol in entry.get('lead', {}):
      peer = entry['peer']['mean'][protocol]['stored']
      line += f' ({entry["lead"][protocol]:+.1f} against {args.peer}: {peer:.1f})'
    print(line)
  return 0


def _show(prog: str, args: argparse.Namespace) -> int:
  """`show` (every epoch's validation score, the best marked) and `best-step` (its step)."""
  try:  # show, best-step
    rows = epoch_scores(args.workdir)
  except FileNotFoundError as e:
    print(f'{prog} {args.command}: {e}', file=sys.stderr)
    return 1
  best = _best(rows)
  if args.command == 'show':
    for r in rows:
      mark = '  <- best' if r['epoch'] == best['epoch'] else ''
      if r['datasets']:  # a mixture: the mean selects, the pooled threshold is stored
        members = ', '.join(f'{k} {v:.4f}' for k, v in r['datasets'].items())
        print(
          f'  epoch {r["epoch"]:3d} (step {r["step"]}) {r["split"]}: mean {PROTOCOL} ODS F1 '
          f'{r["ods_f1"]:.4f} ({members}); pooled {r["pooled_f1"]:.4f} at '
          f'{r["threshold"]:.2f}{mark}'
        )
        continue
      print(
        f'  epoch {r["epoch"]:3d} (step {r["step"]}) {r["split"]}: {PROTOCOL} ODS F1 '
        f'{r["ods_f1"]:.4f} at {r["threshold"]:.2f}{mark}'
      )
    return 0
  print(best['step'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
