"""The leave-one-dataset-out tables of issue 55 (`bench/lodo.py` writes them): from each row's
scores on the held-out test splits, the thresholds chosen for new roads and the Markdown.

A row is a recipe (or a peer) and maps each held-out set to its scores, in percent:
``{protocol: {'stored', 'threshold', 'ods', 'ods_threshold'}, 'curve': {'thresholds', 'f1'}}``
(the strict curve), and where measured ``'datasets_alike'``, ``'false_positives'``, ``'photo'``
and ``'epochs'``. Every choice here is made for a held-out set on the *other* held-out sets,
so its own labels play no part (`new_road_thresholds`, `photo_rule`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The protocols of the table's columns, strict first.
PROTOCOLS = ('strict', 'tolerance_thin_gt')


def new_road_thresholds(by_set: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
  """A threshold chosen for new roads (issue 55 item 4), from the held-out sets' strict
  curves (every fold's grid is the same config's): for each held-out set, the threshold that
  maximises the mean F1 of the *other* held-out sets, and this set's F1 there (honest: its
  own labels play no part); and the one threshold best for all of them (what a release
  would store). None until at least three sets are scored."""
  scored = {h: s['curve'] for h, s in by_set.items() if s and 'curve' in s}
  if len(scored) < 3:
    return None
  grids = {tuple(c['thresholds']) for c in scored.values()}
  if len(grids) != 1:
    return None  # folds scored on different grids: no common threshold to compare
  thresholds = list(grids.pop())
  f1 = {h: c['f1'] for h, c in scored.items()}

  def best(sets: list[str]) -> int:
    means = [sum(f1[h][i] for h in sets) / len(sets) for i in range(len(thresholds))]
    return max(range(len(thresholds)), key=lambda i: (means[i], -abs(thresholds[i] - 0.5)))

  per_set = {}
  for h in f1:
    i = best([g for g in f1 if g != h])
    per_set[h] = {'threshold': thresholds[i], 'f1': f1[h][i]}
  i = best(list(f1))
  return {
    'per_set': per_set,
    'mean_f1': sum(v['f1'] for v in per_set.values()) / len(per_set),
    'one_threshold': thresholds[i],
    'one_threshold_mean_f1': sum(f1[h][i] for h in f1) / len(f1),
  }


def photo_rule(by_set: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
  """Each photo its own threshold (`bench/lodo.py`'s ``photo`` stage), the blend weight chosen
  for each held-out set on the *other* held-out sets (the mean of their F1; its own labels
  play no part), as `new_road_thresholds` chooses one threshold; and the one weight best for
  all. None until three sets are measured."""
  f1 = {h: s['photo']['f1'] for h, s in by_set.items() if s and 'photo' in s}
  if len(f1) < 3:
    return None
  weights = next(s['photo']['weights'] for s in by_set.values() if s and 'photo' in s)

  def best(sets: list[str]) -> int:
    means = [sum(f1[h][i] for h in sets) / len(sets) for i in range(len(weights))]
    return max(range(len(weights)), key=lambda i: (means[i], weights[i]))

  per_set = {}
  for h in f1:
    i = best([g for g in f1 if g != h])
    per_set[h] = {'weight': weights[i], 'f1': f1[h][i], 'stored': f1[h][weights.index(1.0)]}
  i = best(list(f1))
  return {
    'per_set': per_set,
    'mean_f1': sum(v['f1'] for v in per_set.values()) / len(per_set),
    'mean_stored': sum(v['stored'] for v in per_set.values()) / len(per_set),
    'one_weight': weights[i],
    'one_weight_mean_f1': sum(f1[h][i] for h in f1) / len(f1),
  }


def peer_scores(paths: list[Path], held_out: list[str]) -> dict[str, dict[str, Any]]:
  """MTSCrack's scores in bench/peer_mtscrack.py's JSON files on ``<member>:test`` (the first
  file holding a set wins): {member: {protocol: {'stored': F1 of its mask, 'ods': ODS F1},
  'images': 'n of N'}}, in percent."""
  out: dict[str, dict[str, Any]] = {}
  for path in paths:
    data = json.loads(Path(path).read_text())
    for label, entry in data['sets'].items():
      member, _, split = label.partition(':')
      peer = entry['models'].get('MTSCrack')
      if member not in held_out or split != 'test' or member in out or peer is None:
        continue
      out[member] = {
        p: {'stored': 100 * r['f1_model'], 'ods': 100 * r['ods_f1']}
        for p, r in peer['protocols'].items()
      }
      out[member]['images'] = f'{entry["images"]} of {entry["images_in_set"]}'
  return out


def table(rows: dict[str, dict[str, Any]], held_out: list[str]) -> str:
  """The Markdown table: one line per recipe (and peer), per held-out set strict and thin-GT
  F1 at the stored threshold / ODS, then the means over the sets scored."""
  head = '| recipe | ' + ' | '.join(held_out) + ' | mean strict (stored / ODS) | mean thin-GT |'
  lines = [head, '|' + '---|' * (len(held_out) + 3)]
  for name, by_set in rows.items():
    cells, means = [], {p: ([], []) for p in PROTOCOLS}
    for h in held_out:
      s = by_set.get(h)
      if not s:
        cells.append('–')
        continue
      parts = []
      for p in PROTOCOLS:
        if p not in s:
          parts.append('–')
          continue
        parts.append(f'{s[p]["stored"]:.1f} / {s[p]["ods"]:.1f}')
        means[p][0].append(s[p]['stored'])
        means[p][1].append(s[p]['ods'])
      cells.append(' · '.join(parts))
    mean_cells = []
    for p in PROTOCOLS:
      stored, ods = means[p]
      n = len(stored)
      complete = '' if n == len(held_out) else f' ({n} of {len(held_out)})'
      mean_cells.append(f'{sum(stored) / n:.1f} / {sum(ods) / n:.1f}{complete}' if n else '–')
    lines.append(f'| {name} | ' + ' | '.join(cells) + ' | ' + ' | '.join(mean_cells) + ' |')
  return '\n'.join(lines)


def threshold_table(
  rows: dict[str, dict[str, Any]], choices: dict[str, Any], held_out: list[str]
) -> str:
  """Strict F1 on each held-out set at the fold's stored threshold (chosen on the four known
  sets' validation parts) against at the threshold chosen on the other held-out sets."""
  lines = [
    '| recipe | threshold rule | ' + ' | '.join(held_out) + ' | mean |',
    '|' + '---|' * (len(held_out) + 3),
  ]
  for name, chosen in choices.items():
    stored = [rows[name][h]['strict'] for h in held_out if h in chosen['per_set']]
    cells = []
    for h in held_out:
      s = rows[name].get(h, {}).get('strict')
      cells.append(f'{s["stored"]:.1f} (t={s["threshold"]:.2f})' if h in chosen['per_set'] else '–')
    mean = sum(s['stored'] for s in stored) / len(stored)
    lines.append(
      f"| {name} | stored (known sets' validation) | " + ' | '.join(cells) + f' | {mean:.1f} |'
    )
    cells = [
      f'{chosen["per_set"][h]["f1"]:.1f} (t={chosen["per_set"][h]["threshold"]:.2f})'
      if h in chosen['per_set']
      else '–'
      for h in held_out
    ]
    lines.append(
      f'| {name} | chosen on the other held-out sets | '
      + ' | '.join(cells)
      + f' | {chosen["mean_f1"]:.1f} |'
    )
    alike = [rows[name].get(h, {}).get('datasets_alike') for h in held_out]
    if all(alike):
      cells = [f'{a["f1"]:.1f} (t={a["threshold"]:.2f})' for a in alike]
      mean = sum(a['f1'] for a in alike) / len(alike)
      lines.append(
        f"| {name} | known sets' validation, every set alike | "
        + ' | '.join(cells)
        + f' | {mean:.1f} |'
      )
  lines.append(
    '\nOne threshold for all held-out sets: '
    + '; '.join(
      f'{n}: t={c["one_threshold"]:.3g} (mean strict F1 {c["one_threshold_mean_f1"]:.1f}, '
      'chosen on them)'
      for n, c in choices.items()
    )
  )
  return '\n'.join(lines)


def photo_table(rows: dict[str, dict[str, Any]], held_out: list[str]) -> str:
  """Strict F1 on the held-out photos of the ``photo`` stage at the stored threshold against at
  each photo's own threshold (`photo_rule`: the weight chosen on the other held-out sets)."""
  lines = ['| recipe | ' + ' | '.join(held_out) + ' | mean |', '|' + '---|' * (len(held_out) + 2)]
  notes = []
  for name, by_set in rows.items():
    rule = None if name.startswith('MTSCrack') else photo_rule(by_set)
    if not rule:
      continue
    cells = []
    for h in held_out:
      r = rule['per_set'].get(h)
      cells.append('–' if r is None else f'{r["stored"]:.1f} → {r["f1"]:.1f} (w={r["weight"]:g})')
    lines.append(
      f'| {name} | '
      + ' | '.join(cells)
      + f' | {rule["mean_stored"]:.1f} → **{rule["mean_f1"]:.1f}** |'
    )
    notes.append(
      f'{name}: w={rule["one_weight"]:g} (mean {rule["one_weight_mean_f1"]:.1f}, chosen on them)'
    )
  if len(lines) == 2:
    return ''
  return '\n'.join(lines) + '\n\nOne weight for all held-out sets: ' + '; '.join(notes)


def fp_table(rows: dict[str, dict[str, Any]], held_out: list[str]) -> str:
  """Predicted crack length per megapixel far from labelled cracks (the ``fp`` stage),
  per held-out set and their mean over the sets measured."""
  lines = ['| recipe | ' + ' | '.join(held_out) + ' | mean |', '|' + '---|' * (len(held_out) + 2)]
  for name, by_set in rows.items():
    fps = [by_set.get(h, {}).get('false_positives') for h in held_out]
    if all(f is None for f in fps):
      continue
    measured = [f for f in fps if f is not None]
    cells = ['–' if f is None else f'{f:,.0f}' for f in fps]
    lines.append(f'| {name} | ' + ' | '.join(cells) + f' | {sum(measured) / len(measured):,.0f} |')
  return '\n'.join(lines) if len(lines) > 2 else ''


def cut_folds(rows: dict[str, dict[str, Any]], held_out: list[str]) -> str:
  """'row, set: N of M epochs; ...' for each fold scored before its last epoch ('' if none)."""
  cut = []
  for name, by_set in rows.items():
    for h in held_out:
      epochs = (by_set.get(h) or {}).get('epochs')
      if epochs and epochs['scored'] < epochs['planned']:
        cut.append(f'{name}, {h}: {epochs["scored"]} of {epochs["planned"]} epochs')
  return '; '.join(cut)


def tables(
  rows: dict[str, dict[str, Any]], held_out: list[str], photos: int
) -> tuple[str, dict[str, Any]]:
  """The Markdown of the F1 table, the threshold table (for each row with three or more sets
  scored, `new_road_thresholds`), the photo-threshold table (`photos`: the held-out test photos
  each set's was measured on, at most) and the false-positive table; and those thresholds."""
  text = table(rows, held_out)
  choices = {}
  for name, by_set in rows.items():
    chosen = None if name.startswith('MTSCrack') else new_road_thresholds(by_set)
    if chosen:
      choices[name] = chosen
  if choices:
    text += '\n\n' + threshold_table(rows, choices, held_out)
  photo = photo_table(rows, held_out)
  if photo:
    text += (
      '\n\nEach photo its own threshold, without labels (`threshold_choice.photo_threshold`: w × '
      "the file's threshold + (1 − w) × the Otsu threshold of the photo's map), strict F1 on "
      f'{photos} evenly spaced held-out test photos at most, stored → photo threshold, the '
      'weight w chosen on the other held-out sets:\n\n' + photo
    )
  cut = cut_folds(rows, held_out)
  if cut:
    text += '\n\nCut short by a time limit (its best epoch so far exported): ' + cut + '.'
  fps = fp_table(rows, held_out)
  if fps:
    text += (
      '\n\nFalse positives on roads never seen: predicted crack length (px) per megapixel of the '
      "held-out test photos' area farther than 16 px from a labelled crack, at the file's "
      'threshold:\n\n' + fps
    )
  return text, choices
