"""Label-free rules on the LODO fold models' maps, on their held-out test photos (issue 55).

Each fold's model file (`bench/lodo.py`'s folds) predicts `crackjax.lodo.folds.FP_IMAGES`
evenly spaced test photos of its held-out set at scales 1 and 2; the maps are then cut by:

- ``stored``: the file's stored threshold t (at scale 1 and at scale 2);
- ``hysteresis k``: pixels above k × t connected to a pixel above t
  (`skimage.filters.apply_hysteresis_threshold`), for k in `KS` (at both scales): a crack's
  faint continuation kept, an isolated faint pixel not;
- ``mean`` and ``max`` of the two scales' maps, at t.

Strict F1 (pixel to pixel, counts pooled over a set's photos) per rule and held-out set; for
the hysteresis, k chosen for each set on the *other* held-out sets (its own labels play no
part, as `bench/lodo.py` chooses its photo-threshold weight) beside one k for all.

  python bench/map_rules.py --recipe=jpeg --budget=short --work=/work/lodo \\
      --crackforest=../shared/datasets/crackforest --public=/work/data/Datasets \\
      [--held_out=crackforest,gaps384] [--out=results/map_rules_jpeg_short]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
from skimage.filters import apply_hysteresis_threshold

from crackjax.configs import lodo as lodo_configs
from crackjax.lodo import fold_stages, kept_scores
from crackjax.lodo import folds as folds_lib
from crackjax.runs import outputs

REPO = Path(__file__).resolve().parents[1]
#: The hysteresis's low threshold as a fraction of the stored one (1: the stored cut itself).
KS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)


def _lodo_bench():
  spec = importlib.util.spec_from_file_location('lodo_bench', REPO / 'bench' / 'lodo.py')
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # its dataclasses look their module up
  spec.loader.exec_module(module)
  return module


def masks(m1: np.ndarray, m2: np.ndarray, t: float) -> dict[str, np.ndarray]:
  """Every rule's mask of one photo from its maps at scale 1 (`m1`) and 2 (`m2`)."""
  out = {'scale 1': m1 > t, 'scale 2': m2 > t, 'mean': (m1 + m2) / 2 > t}
  out['max'] = np.maximum(m1, m2) > t
  for k in KS[1:]:
    out[f'scale 1, hysteresis {k:g}'] = apply_hysteresis_threshold(m1, k * t, t)
    out[f'scale 2, hysteresis {k:g}'] = apply_hysteresis_threshold(m2, k * t, t)
  return out


def f1(counts: list[int]) -> float:
  """F1 (%) of pooled (TP, FP, FN)."""
  tp, fp, fn = counts
  return 100 * 2 * tp / max(2 * tp + fp + fn, 1)


def score_set(pairs, p1, p2) -> dict[str, Any]:
  """Pooled strict counts and F1 of every rule over `pairs`, maps from predictors `p1`
  (scale 1) and `p2` (scale 2), both cut at `p1`'s stored threshold."""
  t = p1.threshold
  totals: dict[str, np.ndarray] = {}
  photos = 0
  for image, gt in pairs:
    crack = np.asarray(gt) != 0
    m1, m2 = (np.asarray(p(image), np.float32) for p in (p1, p2))
    for rule, m in masks(m1, m2, t).items():
      counts = [np.sum(m & crack), np.sum(m & ~crack), np.sum(~m & crack)]
      totals[rule] = totals.get(rule, np.zeros(3, np.int64)) + counts
    photos += 1
  return {
    'threshold': t,
    'photos': photos,
    'f1': {rule: f1(c.tolist()) for rule, c in totals.items()},
    'counts': {rule: c.tolist() for rule, c in totals.items()},
  }


def k_on_the_others(by_set: dict[str, dict[str, Any]], scale: int) -> dict[str, Any]:
  """For each set the hysteresis k best on the mean F1 of the *other* sets, its F1 there, and
  the one k best on all (chosen on them: an upper bound)."""

  def rule(k: float) -> str:
    return f'scale {scale}' if k == 1.0 else f'scale {scale}, hysteresis {k:g}'

  def mean(sets: list[str], k: float) -> float:
    return float(np.mean([by_set[s]['f1'][rule(k)] for s in sets]))

  chosen = {}
  for held in by_set:
    others = [s for s in by_set if s != held]
    k = max(KS, key=lambda k: mean(others, k))
    chosen[held] = {'k': k, 'f1': by_set[held]['f1'][rule(k)]}
  one = max(KS, key=lambda k: mean(list(by_set), k))
  return {
    'per_set': chosen,
    'mean': float(np.mean([c['f1'] for c in chosen.values()])),
    'one_k': {'k': one, 'mean': mean(list(by_set), one)},
  }


def table(by_set: dict[str, dict[str, Any]]) -> str:
  """The rules' strict F1 per held-out set and their mean, then the hysteresis k rules."""
  sets = list(by_set)
  rules = ['scale 1', 'scale 2', 'mean', 'max']
  lines = [
    f'| rule (strict F1 %, stored threshold) | {" | ".join(sets)} | mean |',
    '|---' * (len(sets) + 2) + '|',
  ]
  for rule in rules:
    values = [by_set[s]['f1'][rule] for s in sets]
    lines.append(f'| {rule} | {" | ".join(f"{v:.1f}" for v in values)} | {np.mean(values):.1f} |')
  if len(sets) >= 3:
    for scale in (1, 2):
      got = k_on_the_others(by_set, scale)
      cells = [f'{got["per_set"][s]["f1"]:.1f} (k={got["per_set"][s]["k"]:g})' for s in sets]
      lines.append(
        f'| scale {scale}, hysteresis, k on the other sets | {" | ".join(cells)} | '
        f'{got["mean"]:.1f} |'
      )
      lines.append(
        f'| scale {scale}, hysteresis, one k for all (k={got["one_k"]["k"]:g}, chosen on them) '
        f'| {" | ".join("" for _ in sets)} | {got["one_k"]["mean"]:.1f} |'
      )
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--recipe', default='jpeg')
  parser.add_argument('--budget', default='short')
  parser.add_argument('--work', required=True, help="bench/lodo.py's --work")
  parser.add_argument('--crackforest', required=True)
  parser.add_argument('--public', required=True)
  parser.add_argument('--held_out', default=','.join(lodo_configs.MEMBERS))
  parser.add_argument('--data_dir', default=None)
  parser.add_argument('--test_split', default='test')
  parser.add_argument('--out', help='OUT.json and OUT.md')
  args = parser.parse_args(argv)
  from crackjax.deploy.predictor import Predictor

  bench = _lodo_bench()
  settings = fold_stages.Campaign(
    repo=REPO,
    manual_dirs={m: bench.manual_dir(m, args.crackforest, args.public) for m in bench.lodo.MEMBERS},
    data_dir=args.data_dir,
    test_split=args.test_split,
  )
  by_set = {}
  for held in args.held_out.split(','):
    (fold,) = bench.plan([args.recipe], args.budget, [held], Path(args.work))
    model = fold.run / folds_lib.MODEL_FILE
    if not model.is_file():
      sys.exit(f'{model}: no fold model (run bench/lodo.py first).')
    pairs, p1 = fold_stages.held_out_photos(fold, settings)
    p2 = Predictor.from_pretrained(str(model), scales=(2.0,))
    by_set[held] = score_set(pairs, p1, p2)
    got = by_set[held]['f1']
    print(f'{held}: ' + ', '.join(f'{r} {got[r]:.1f}' for r in ('scale 1', 'scale 2', 'max')))
  text = table(by_set)
  print(text)
  if args.out:
    head = (
      f'Written by `python {" ".join(sys.argv)}` at commit '
      f'{kept_scores.git_commit() or "unknown"}, '
      f'{datetime.datetime.now(datetime.UTC):%d %b %Y %H:%M} UTC, on {kept_scores.machine()}.'
    )
    record = {'command': sys.argv, 'recipe': args.recipe, 'budget': args.budget, 'sets': by_set}
    Path(f'{args.out}.json').write_text(outputs.dumps(record, indent=1) + '\n')
    Path(f'{args.out}.md').write_text(f'{head}\n\n{text}\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
