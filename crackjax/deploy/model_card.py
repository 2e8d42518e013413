"""A released model file's card, checked and completed from its own evaluations: `check` (an
evaluation of the file against the scores its card states), `rescore` (the file's own scores
and this machine's self check into its card, keeping the run's scores they replace),
`false_positives` (predicted crack on crack-free patches) and `lodo` (its recipe's
leave-one-dataset-out figure on roads it never saw). The steps of
``python -m crackjax.deploy.release check | rescore | fp | lodo`` (`crackjax.deploy.release`).
"""

from __future__ import annotations

import datetime
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from crackjax.deploy import self_check
from crackjax.evaluation.result import AP, F1, ODS, OIS, read_record


def stored_dtype(loaded) -> str:
  """The dtype the file stores its parameters in (its first leaf's)."""
  leaf = loaded.params
  while isinstance(leaf, dict):
    leaf = next(iter(leaf.values()))
  return str(leaf.dtype)  # 'float32' or 'bfloat16' (ml_dtypes names it so)


def check(file: str | Path, record: str | Path, tolerance: float = 1e-6) -> int:
  """Compares the card's scores of the record's dataset and split with `record` (the eval.json
  of ``crackjax-evaluate --model=file``): 0 if every protocol's ODS F1, OIS F1 and AP agree
  within `tolerance`, else 1 (each difference printed)."""
  from crackjax.experiment.restored import read_model_file

  card = read_model_file(file).card
  got = read_record(record)
  mine = [s for s in card['scores'] if (s['dataset'], s['split']) == (got.dataset, got.split)]
  if not mine:
    print(f'{file}: the card has no scores on {got.dataset} {got.split}.', file=sys.stderr)
    return 1
  bad = 0
  for protocol, result in got.results.items():
    want = mine[0]['protocols'].get(protocol)
    if want is None:
      continue
    pairs = {
      'ODS F1': (want[ODS][F1], result.ods.f1),
      'OIS F1': (want[OIS][F1], result.ois.f1),
      'AP': (want[AP], result.ap),
    }
    for what, (a, b) in pairs.items():
      ok = abs(a - b) <= tolerance
      bad += not ok
      print(f'  {protocol} {what}: card {a:.6f}, model file {b:.6f} {"ok" if ok else "DIFFERS"}')
  return int(bad > 0)


def _key(scores: dict[str, Any]) -> tuple:
  return scores['dataset'], scores['split'], scores.get('copy')


def rescore(file: str | Path, record: str | Path, copy: str | None = None) -> dict[str, Any]:
  """Rewrites the model file `file` with its own scores and this machine's self check in its
  card; returns the new card.

  A file exported in bfloat16, or on a GPU, predicts slightly differently from the run whose
  records filled its card (float32 parameters; the GPU's convolution arithmetic). Its card
  must hold what the file itself gives where the package is tested, so `record` (the eval.json
  of ``crackjax-evaluate --model=file``, with per-image rows) replaces the card's scores of
  its dataset and split, the replaced entry kept as ``card['run_scores']`` (by the first
  rescore only: a second one keeps the run's), and the self check is recomputed here. The
  record is matched to the file by its number of parameters and step only: the run's own
  eval.json of that step would pass too, so the script evaluates the file itself. The
  parameters are not touched; the file is written atomically. `copy` names which copy of the
  dataset the record scored where a card holds two (the general model's 'crops' and
  'photos' of DeepCrack and CRACK500), so that neither replaces the other.

  Raises:
    ValueError: `record` is not an evaluation of this file's model (another number of
      parameters or another step) or has no per-image rows.
  """
  import jax

  from crackjax.deploy import model_export
  from crackjax.deploy.predictor import Predictor
  from crackjax.experiment.restored import read_model_file

  file, record = Path(file), Path(record)
  loaded = read_model_file(file)
  got = read_record(record)
  card = dict(loaded.card)
  mine = (card['model']['parameters'], card['training']['step'])
  if (got.params, got.step) != mine:
    raise ValueError(
      f'{record} evaluates a model of {got.params} parameters at step {got.step}, not {file} '
      f'({mine[0]} parameters, step {mine[1]}).'
    )
  if not got.results or not all(r.per_image for r in got.results.values()):
    raise ValueError(f'{record} has no per-image rows (write it with crackjax-evaluate).')
  key = (got.dataset, got.split, copy)
  kept = [s for s in card['scores'] if _key(s) != key]
  replaced = [s for s in card['scores'] if _key(s) == key]
  card['scores'] = [*kept, model_export.record_scores(got, record.name, copy)]
  # A second rescore replaces the file's own scores: the run's stay as the first one kept them.
  if replaced and 'run_scores' not in card:
    card['run_scores'] = {
      'note': (
        "the run's own evaluation of this step (float32 parameters, on the machine that "
        'trained it), which the scores of the file itself replaced'
      ),
      'scores': replaced,
    }
  predictor = Predictor.from_pretrained(str(file))
  card['self_check'] = self_check.self_check(predictor)
  card['rescored'] = {
    'by': 'python -m crackjax.deploy.release rescore',
    'date': datetime.date.today().isoformat(),
    'platform': f'{jax.devices()[0].platform} ({jax.devices()[0].device_kind})',
    'dataset': got.dataset,
    'split': got.split,
  }
  _rewrite_card(file, loaded, card)
  return card


def _rewrite_card(file: Path, loaded, card: dict[str, Any]) -> None:
  """Writes `file` again (atomically) with `card`; parameters and other metadata kept."""
  from crackjax.models import model_file

  meta = {k: v for k, v in loaded.meta.items() if k not in ('format', 'requires')}
  meta['card'] = card
  model_file.write(
    file,
    params=loaded.params,
    batch_stats=loaded.batch_stats,
    meta=meta,
    dtype=stored_dtype(loaded),
  )


def false_positives(
  file: str | Path, folders: dict[str, tuple[str, str]], max_patches: int = 200
) -> dict[str, Any]:
  """Puts the model's false-positive crack length per megapixel on crack-free patches into its
  card (``card['false_positives']``, `crackjax.deploy.crack_free`): per labelled folder
  ``{label: (images, masks)}``, the crack-free windows of its photos (and its photos whose
  masks are empty), at most `max_patches` of them, each predicted as a photo of its own at the
  file's stored threshold. Returns the card's new entry."""
  from crackjax.deploy import crack_free
  from crackjax.deploy.predictor import Predictor
  from crackjax.experiment.restored import read_model_file
  from crackjax.tfds_builders import listing, reading
  from crackjax.tfds_builders.errors import CrackDataWarning

  file = Path(file)
  predictor = Predictor.from_pretrained(str(file))
  sets = {}
  for label, (images, masks) in folders.items():
    pairs = listing.pair_by_stem(
      listing.list_images(images),
      listing.list_images(masks, 'mask', stem_key=listing_mask_key),
      image_dir=images,
      mask_dir=masks,
    )
    with warnings.catch_warnings():
      # JPEG masks are thresholded at half the range, as the builders do (said there).
      warnings.simplefilter('ignore', CrackDataWarning)
      triples = [
        (p.name, np.asarray(reading.load_rgb(p.image_path)), reading.load_mask(p.mask_path))
        for p in pairs
      ]
    patches, counts = crack_free.crack_free_patches(triples, max_patches=max_patches)
    result = crack_free.fp_length_per_mp(predictor, [image for _, image in patches])
    sets[label] = {**counts, **result}
    print(
      f'{file.name}: {label}: {result["length_per_mp"]:.0f} px of predicted crack per MP on '
      f'{result["images"]} crack-free patches ({result["images_with_fp"]} with any)'
    )
  entry = {
    'what': (
      'skeleton length (px) of the mask at the stored threshold per megapixel of crack-free '
      f'patches: {crack_free.WINDOW} px windows of labelled test photos with no labelled crack '
      f'within {crack_free.MARGIN} px, at most {max_patches} per set, each predicted alone '
      '(an upper bound: a window may hold an unlabelled hairline)'
    ),
    'sets': sets,
  }
  loaded = read_model_file(file)
  card = {**loaded.card, 'false_positives': entry}
  _rewrite_card(file, loaded, card)
  return entry


def listing_mask_key(stem: str) -> str:
  """A mask's name without its ``_mask`` / ``_gt`` / ``_lab`` suffix (the public copies)."""
  from crackjax.tfds_builders.split_folders import mask_key

  return mask_key(stem)


#: The protocols a LODO table's folds may carry (bench/lodo.py --protocols), in card order.
LODO_PROTOCOLS = ('strict', 'tolerance', 'tolerance_thin_gt')


def lodo(file: str | Path, table: str | Path, row: str, peer: str | None = None) -> dict[str, Any]:
  """Puts its recipe's leave-one-dataset-out figure into the card of model file `file`
  (``card['lodo']``): row `row` of `table` (the JSON of ``bench/lodo.py --out``, e.g. ``'jpeg
  (long) at scales 2'``), whose fold models were each trained on all but one of the file's
  training sets and scored on the one left out; per set and on the mean, F1 (%) at the fold's
  stored threshold and at the set's best (ODS), per protocol. With `peer` (a row of the same
  table, e.g. MTSCrack's), its figures and the lead over it on the same test splits. Returns
  the card's new entry.

  Raises:
    ValueError: the file is not trained on several datasets, the table lacks the row, or the
      row (or the peer's) lacks one of the file's training sets.
  """
  from crackjax.experiment.restored import read_model_file

  file, table = Path(file), Path(table)
  loaded = read_model_file(file)
  sets = [d['name'] for d in loaded.card['data'].get('datasets') or ()]
  if len(sets) < 2:
    raise ValueError(f'{file}: a leave-one-dataset-out figure needs a model of several datasets.')
  data = json.loads(table.read_text())
  entry = {
    'what': (
      "leave-one-dataset-out: for each of this model's training sets, a model of its recipe "
      "trained on the others, scored on that set's test split; F1 (%) at the fold's stored "
      "threshold ('stored') and at the set's best one ('ods'), and their mean over the sets. "
      "The fold models' scores, not this file's: how the recipe does on roads it never saw."
    ),
    'table': table.name,
    'command': data.get('command'),
    **lodo_row(data, row, sets, table),
  }
  if peer is not None:
    entry['peer'] = lodo_row(data, peer, sets, table)
    entry['lead'] = {
      protocol: mean['stored'] - entry['peer']['mean'][protocol]['stored']
      for protocol, mean in entry['mean'].items()
      if protocol in entry['peer']['mean']
    }
  card = {**loaded.card, 'lodo': entry}
  _rewrite_card(file, loaded, card)
  return entry


def lodo_row(data: dict[str, Any], row: str, sets: list[str], table: Path) -> dict[str, Any]:
  """Row `row` of a LODO table (`data`, read from `table`) on `sets`: per set its images and
  each protocol's F1 at the stored threshold and ODS, and the means of the protocols every set
  has (`lodo` puts it into a card)."""
  rows = data.get('rows', {})
  if row not in rows:
    raise ValueError(f'{table}: no row {row!r} (its rows: {sorted(rows)}).')
  missing = [s for s in sets if s not in rows[row]]
  if missing:
    raise ValueError(f'{table}: row {row!r} has no fold with {", ".join(missing)} held out.')
  per_set = {}
  for name in sets:
    fold = rows[row][name]
    scores = {p: fold[p] for p in LODO_PROTOCOLS if p in fold}
    per_set[name] = {
      'images': fold.get('images'),
      **{p: {'stored': r['stored'], 'ods': r['ods']} for p, r in scores.items()},
    }
  common = [p for p in LODO_PROTOCOLS if all(p in v for v in per_set.values())]
  mean = {
    p: {k: float(np.mean([v[p][k] for v in per_set.values()])) for k in ('stored', 'ods')}
    for p in common
  }
  return {'row': row, 'sets': per_set, 'mean': mean}
