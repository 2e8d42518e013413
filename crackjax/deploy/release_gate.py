"""The release gate of a general model (issue 55, item 6): a new model file is released only if
it is ahead of the peer on roads never seen by the margin asked and ahead of the released model
there (its card's figure, else its recipe's row of a LODO table), and not worse than the
released model or the peer on any public test split, each at its stored threshold.

Pure functions on registry entries (`crackjax.deploy.release.registry_entry`: what a card says
about its scores) and on the peer's scores read from `bench/peer_mtscrack.py`'s JSON, so the
decision rests on the same records the card and `crackjax-models` show:

  python -m crackjax.deploy.release gate --file=NEW --name=roads-unet-cpu \
      --peer=results/peer_mtscrack.json --peer=results/peer_mtscrack_tests.json

prints one row per condition and exits 1 when any fails (scripts/release_roads_cpu.sh's `gate`
stage, before `register`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from crackjax.runs import outputs

PROTOCOL = 'strict'
LODO_ROW = 'roads never seen (LODO mean)'


@dataclasses.dataclass(frozen=True)
class Check:
  """One condition of the gate, F1 figures in percent (None: not known).

  Attributes:
    what: the test split's label (as in the registry's ``scores_by_set``) or `LODO_ROW`.
    new: the new file's figure.
    old: the released model's figure.
    peer: the peer's figure (for `LODO_ROW`: its mean plus the margin asked).
    ok: whether the condition holds.
    why: what fails, one line ('' when ok).
    note: where a figure comes from when it needs saying (a subsample, the released recipe's
      LODO row), or ''.
  """

  what: str
  new: float | None
  old: float | None
  peer: float | None
  ok: bool
  why: str = ''
  note: str = ''


def peer_scores(
  paths: list[str | Path],
  model: str = 'MTSCrack',
  aliases: dict[str, str] | None = None,
  protocol: str = PROTOCOL,
) -> dict[str, dict[str, Any]]:
  """The peer's F1 at its own rule per test split, from `bench/peer_mtscrack.py --out` JSONs.

  A set named ``name:split`` there is the registry's ``name split``, and also its ``name split
  (crops)`` (the prepared public sets are their crops); other sets (folders of photos) need an
  alias, e.g. ``{'DeepCrack photos': 'deepcrack test (photos)'}``. Files may score a split's
  different versions (all of DeepCrack's test photos, or those a model did not train on): the
  gate takes the first record whose set is as large as the one the new file was scored on.

  Returns:
    label -> [{'f1': percent, 'images': scored, 'of': in the set, 'file': the JSON's path}, ...]
    in the order of `paths`.

  Raises:
    ValueError: a file lacks `model` or `protocol`, or is not such a JSON.
  """
  aliases = aliases or {}
  scores: dict[str, dict[str, Any]] = {}
  for path in paths:
    path = Path(path)
    try:
      sets = json.loads(path.read_text())['sets']
    except (KeyError, TypeError, json.JSONDecodeError) as e:
      raise ValueError(f'{path}: not a bench/peer_mtscrack.py JSON ({e!r}).') from None
    for name, record in sets.items():
      if model not in record.get('models', {}):
        raise ValueError(f'{path}: set {name!r} has no model {model!r}.')
      protocols = record['models'][model].get('protocols', {})
      if 'f1_model' not in protocols.get(protocol, {}):
        raise ValueError(f'{path}: {model} on {name!r} has no {protocol} scores.')
      label = aliases.get(name, name.replace(':', ' '))
      scores.setdefault(label, []).append(
        {
          'f1': 100 * protocols[protocol]['f1_model'],
          'images': record.get('images'),
          'of': record.get('images_in_set'),
          'file': str(path),
        },
      )
  return scores


def _peer_of(
  label: str, peer: dict[str, list[dict[str, Any]]], images: int | None
) -> dict[str, Any] | None:
  """The peer's record of split `label` (a cropped copy takes the plain split's): the first of
  a set of `images` images, else the first."""
  records = peer.get(label) or peer.get(label.removesuffix(' (crops)')) or []
  same = [r for r in records if r['of'] == images]
  return (same or records or [None])[0]


def _at_threshold(entry: dict[str, Any], protocol: str) -> dict[str, tuple[float, int | None]]:
  """Split label -> (F1 (%) at the stored threshold, images scored), from a registry entry's
  ``scores_by_set``."""
  return {
    s['set']: (100 * s['at_threshold'][protocol], s.get('num_images'))
    for s in entry.get('scores_by_set', ())
    if protocol in s.get('at_threshold', {})
  }


def row_mean(table: str | Path, row: str, sets: list[str], protocol: str = PROTOCOL) -> float:
  """The mean over `sets` of row `row`'s F1 (%) at the fold's stored threshold in a LODO table
  (`bench/lodo.py --out`'s JSON): the released model's recipe at the new one's budget, where the
  released card carries no LODO figure of its own.

  Raises:
    ValueError: the table lacks the row, or the row a fold of one of `sets`.
  """
  from crackjax.deploy import model_card

  table = Path(table)
  mean = model_card.lodo_row(json.loads(table.read_text()), row, sets, table)['mean']
  if protocol not in mean:
    raise ValueError(f'{table}: row {row!r} has no {protocol} figure on every one of {sets}.')
  return mean[protocol]['stored']


def rescored(specs: list[str], released: str, protocol: str = PROTOCOL) -> dict[str, Any]:
  """The released file's figures on other versions of its test splits: ``LABEL=EVAL_JSON``
  specs, each the eval.json of ``crackjax-evaluate --model=<the released name>`` on, e.g.,
  DeepCrack's test photos without those the training split holds. Returns label -> (F1 (%) at
  the stored threshold, images).

  Raises:
    ValueError: a spec without '=', or a record of another model (parameters, step: as
      `model_card.rescore` matches them), without `protocol` or without its F1 at the stored
      threshold.
  """
  from crackjax.evaluation.result import read_record
  from crackjax.experiment.restored import model_file_metadata

  card = model_file_metadata(released)[1]['card']  # the card alone: no tensor read
  mine = (card['model']['parameters'], card['training']['step'])
  out = {}
  for spec in specs:
    label, _, path = spec.partition('=')
    if not path:
      raise ValueError(f'--old_score={spec}: expected LABEL=EVAL_JSON.')
    got = read_record(path)
    if (got.params, got.step) != mine or protocol not in got.results:
      raise ValueError(
        f'{path}: not a {protocol} scoring of {released} ({mine[0]} parameters, step '
        f'{mine[1]}; it holds {got.params} at step {got.step}).'
      )
    run = (got.results[protocol].operating_points or {}).get('run')
    if run is None:
      raise ValueError(
        f'{path} has no F1 at the stored threshold (score the file: crackjax-evaluate '
        f'--model={released}).'
      )
    out[label] = (100 * run.f1, got.num_images)
  return out


def checks(
  new: dict[str, Any],
  old: dict[str, Any] | None,
  peer: dict[str, list[dict[str, Any]]],
  margin: float = 5.0,
  protocol: str = PROTOCOL,
  old_recipe: tuple[str, float] | None = None,
  old_rescored: dict[str, tuple[float, int]] | None = None,
) -> list[Check]:
  """The gate's conditions for registry entry `new` against the released entry `old` (None:
  nothing released under the name yet) and the peer's scores (`peer_scores`). `old_recipe`
  (where the row comes from, its mean: `row_mean`) stands for the released model's LODO
  figure when its card has none; `old_rescored` (`rescored`) for its card's figures on the
  splits it names.

  Raises:
    ValueError: `new` holds no per-split scores under `protocol` (a one-dataset model: the
      gate is for general models).
  """
  new_f1 = _at_threshold(new, protocol)
  if not new_f1:
    raise ValueError(
      f'{new["name"]}: its card has no {protocol} F1 at the stored threshold per test split '
      '(the gate is for a general model scored on every public test split).'
    )
  old_f1 = {**(_at_threshold(old, protocol) if old else {}), **(old_rescored or {})}
  rows = [_lodo_check(new, old, margin, protocol, old_recipe)]
  for label in [*new_f1, *(s for s in old_f1 if s not in new_f1)]:
    new_at, old_at = new_f1.get(label, (None, None)), old_f1.get(label, (None, None))
    row = _split_check(label, new_at, old_at, _peer_of(label, peer, new_at[1]))
    if label in (old_rescored or {}):
      note = 'the released file scored again on these images'
      row = dataclasses.replace(row, note=f'{row.note}; {note}' if row.note else note)
    rows.append(row)
  return rows


def _split_check(
  label: str,
  new_at: tuple[float | None, int | None],
  old_at: tuple[float | None, int | None],
  peer: dict[str, Any] | None,
) -> Check:
  """A test split: the new file not worse than the released model nor the peer there, each
  scored on as many images (a split of another size is another set: no comparison)."""
  (new, images), (old, old_images) = new_at, old_at
  fails = []
  if new is None:
    fails.append('the new file is not scored on it (the released model is)')
  elif old is not None and None not in (images, old_images) and images != old_images:
    fails.append(f'scored on {images} images, the released model on {old_images}: not one set')
  elif peer is not None and None not in (images, peer['of']) and images != peer['of']:
    fails.append(f'scored on {images} images, the peer on a set of {peer["of"]}: not one set')
  else:
    if old is not None and new < old:
      fails.append(f'{old - new:.1f} behind the released model')
    if peer is not None and new < peer['f1']:
      fails.append(f'{peer["f1"] - new:.1f} behind the peer')
  note = ''
  if peer is not None and peer['images'] != peer['of']:
    note = f'peer on {peer["images"]} of the {peer["of"]} images'
  return Check(
    what=label,
    new=new,
    old=old,
    peer=None if peer is None else peer['f1'],
    ok=not fails,
    why='; '.join(fails),
    note=note,
  )


def _lodo_check(
  new: dict[str, Any],
  old: dict[str, Any] | None,
  margin: float,
  protocol: str,
  old_recipe: tuple[str, float] | None = None,
) -> Check:
  """Roads never seen: the new file's LODO mean at the stored threshold ahead of its card's peer
  by `margin`, and ahead of the released model's (its card's, else `old_recipe`)."""
  lodo = new.get('lodo')
  value = lodo['mean'].get(protocol, {}).get('stored') if lodo else None
  peer = (lodo or {}).get('peer', {}).get('mean', {}).get(protocol, {}).get('stored')
  old_lodo = (old or {}).get('lodo')
  old_value = old_lodo['mean'].get(protocol, {}).get('stored') if old_lodo else None
  note = '' if old is None or old_value is not None else 'the released card has no LODO figure'
  if old_value is None and old_recipe is not None:
    note, old_value = f'released: {old_recipe[0]}', old_recipe[1]
  fails = []
  if value is None:
    fails.append('its card has no LODO figure (python -m crackjax.deploy.release lodo)')
  elif peer is None:
    fails.append("its card's LODO figure has no peer beside it (release lodo --peer)")
  else:
    if value < peer + margin:
      fails.append(f'{value - peer:+.1f} against the peer, +{margin:g} asked')
    if old_value is not None and value <= old_value:
      fails.append(f'not ahead of the released model ({value:.1f} against {old_value:.1f})')
  return Check(
    what=LODO_ROW,
    new=value,
    old=old_value,
    peer=None if peer is None else peer + margin,
    ok=not fails,
    why='; '.join(fails),
    note=note,
  )


def table(rows: list[Check], new: str, old: str | None, peer: str, margin: float) -> str:
  """The gate as a Markdown table, strict F1 (%) at the stored threshold, then the verdict."""

  def pct(value: float | None) -> str:
    return '–' if value is None else f'{value:.1f}'

  lines = [
    f'| {PROTOCOL} F1 (%) at the stored threshold | {new} (new) | {old or "none"} (released) '
    f'| {peer} | verdict |',
    '|---|---|---|---|---|',
  ]
  for r in rows:
    peer_cell = (
      pct(r.peer) if r.what != LODO_ROW or r.peer is None else f'{r.peer:.1f} (+{margin:g})'
    )
    verdict = 'ok' if r.ok else f'fails: {r.why}'
    note = f' ({r.note})' if r.note else ''
    lines.append(f'| {r.what}{note} | {pct(r.new)} | {pct(r.old)} | {peer_cell} | {verdict} |')
  failed = [r.what for r in rows if not r.ok]
  lines.append('')
  lines.append(
    f'Release refused: {len(failed)} condition(s) fail ({", ".join(failed)}).'
    if failed
    else 'Release allowed: every condition holds.'
  )
  return '\n'.join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
  """The flags of ``python -m crackjax.deploy.release gate``."""
  parser.add_argument('--file', required=True)
  parser.add_argument('--name', required=True, help='the name it is to be released under')
  parser.add_argument(
    '--against', help='the released model it must not fall behind (default: --name, the one '
    'it replaces; e.g. roads-unet-cpu for a first roads-unet)'
  )  # fmt: skip
  parser.add_argument('--held_out', default='test')
  parser.add_argument('--peer', action='append', default=[], help='bench/peer_mtscrack.py JSON')
  parser.add_argument('--peer_model', default='MTSCrack')
  parser.add_argument(
    '--peer_set', action='append', default=[], help="PEER_SET=LABEL, e.g. 'DeepCrack "
    "photos=deepcrack test (photos)' (a set 'name:split' is 'name split' without one)"
  )  # fmt: skip
  parser.add_argument('--margin', type=float, default=5.0, help='points ahead of the peer on LODO')
  parser.add_argument('--lodo_table', help="bench/lodo.py --out's JSON holding --old_row")
  parser.add_argument(
    '--old_row', help="the released model's recipe in --lodo_table (e.g. 'base (long)'), "
    'for a released card without a LODO figure'
  )  # fmt: skip
  parser.add_argument(
    '--old_score', action='append', default=[], help="LABEL=EVAL_JSON: the released file "
    "scored again on another version of a split (e.g. 'deepcrack test (photos)=.../eval.json')"
  )  # fmt: skip
  parser.add_argument('--out', help='the checks as JSON')


def report(
  label: str, new: dict[str, Any], old: dict[str, Any] | None, args: argparse.Namespace
) -> int:
  """Prints the gate of registry entry `new` (file `label`) against `old` and the peer (the
  flags of `add_arguments` in `args`); with ``args.out``, the checks as JSON there. Returns 0
  when every condition holds, else 1.

  Raises:
    ValueError: as `peer_scores`, `row_mean` and `checks`.
  """
  aliases = dict(spec.partition('=')[::2] for spec in args.peer_set)
  peer = peer_scores(args.peer, args.peer_model, aliases)
  old_recipe = None
  sets = (new.get('lodo') or {}).get('sets')
  if args.old_row and sets:
    if not args.lodo_table:
      raise ValueError('--old_row needs --lodo_table, the table holding that row.')
    where = f'{args.old_row} in {Path(args.lodo_table).name}'
    old_recipe = (where, row_mean(args.lodo_table, args.old_row, sets))
  old_rescored = None
  if args.old_score:
    if old is None:
      raise ValueError(f'--old_score: no model released as {new["name"]!r} to compare with.')
    old_rescored = rescored(args.old_score, old['name'])
  rows = checks(new, old, peer, args.margin, old_recipe=old_recipe, old_rescored=old_rescored)
  print(table(rows, label, old and old['name'], args.peer_model, args.margin))
  if args.out:
    record = {'file': label, 'against': old and old['name'], 'peer': args.peer_model}
    record |= {'margin': args.margin, 'checks': [dataclasses.asdict(r) for r in rows]}
    Path(args.out).write_text(outputs.dumps(record, indent=2) + '\n')
  return 0 if all(r.ok for r in rows) else 1
