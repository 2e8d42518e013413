"""Does a photo's predicted crack width tell which test-time scale suits it? (issue 55 item 3)

A model sees crack widths in pixels, which depend on the camera's distance and resolution:
thin cracks gain at scale 2, CRACK500's wide ones at scale 0.5 (docs/lodo.md, "Scale at
prediction"). A rule that looks at each photo first would keep both gains. This bench
measures, for each labelled test set and without changing any code of prediction:

* the strict F1 (pooled over the set's photos) of the model's stored threshold at each of
  ``--scales`` (each photo predicted at that factor of its size, the map resized back;
  `Predictor(scales=(s,))`);
* each photo's crack width as crackjax-predict measures it (`measure.measure_photo`'s
  ``mean_width_px`` of the mask at scale 1) beside its label's, the medians per set;
* the F1 of the width rule: a photo whose predicted width is below ``--thin`` px is taken at
  scale 2, above ``--wide`` px at scale 0.5, otherwise as it is (photos without a predicted
  crack stay at scale 1).

Usage (a LODO fold's run, or a released model; the sets prepared as crackjax-evaluate
prepares them)::

    python bench/width_scale.py --workdir=WORK/base_short/gaps384 \\
        --set=gaps384:test --set=crack500:test --manual_dir=gaps384=.../Datasets ... \\
        [--max_images=30] [--thin=4] [--wide=8] [--out=FILE.json]

``--max_images`` takes evenly spaced photos of a larger set (deterministic), said in the
output. The rule's two widths are inputs here, not chosen on the sets it is scored on.

``--choose``: the width of the downward rule a model file keeps (issue 76 item 3,
`crackjax.evaluation.width_rule`: a photo whose cracks at its first scales are wider than W px,
median over the skeleton of its mask at the stored threshold, is predicted again at half
size), chosen on validation parts only: by default the general model's five datasets'
(configs/release/roads_unet_cpu.py's MEMBERS: CrackForest's ``train[58:]``, the others'
``valid``); a test split is refused. Each photo is predicted once as the file predicts it and,
if some candidate would take it to half size, once at half size; every candidate (``--widths``,
and off) is then scored from those two maps: the pooled strict F1 at the stored threshold per
set, and their mean. The best mean wins (a tie goes to off, then to the wider width: fewer
photos changed). It prints the table and the export flags::

    python bench/width_scale.py --choose --model=roads-unet-cpu \\
        --manual_dir=crackforest=.../crackforest --manual_dir=deepcrack=.../Datasets \\
        --manual_dir=crack500=.../Datasets --manual_dir=gaps384=.../Datasets \\
        --manual_dir=aiglern_trimm=.../Datasets [--widths=4,5,6,7,8,10,12] [--max_images=N]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import tqdm

from crackjax.configs import base
from crackjax.data import registry
from crackjax.deploy import measure
from crackjax.deploy.predictor import Predictor
from crackjax.evaluation import width_rule
from crackjax.evaluation.protocols import counts_per_threshold
from crackjax.runs import outputs


def width(mask: np.ndarray) -> float:
  """The mean crack width (px) crackjax-predict reports for `mask`; NaN without a crack."""
  if not mask.any():
    return float('nan')
  value = measure.measure_photo(mask, min_length=0)[0]['mean_width_px']
  return float('nan') if value is None else float(value)


def counts(prob: np.ndarray, gt: np.ndarray, threshold: float) -> np.ndarray:
  """Strict TP, FP, FN of one map at `threshold` (`protocols.counts_per_threshold`)."""
  return np.array([c[0] for c in counts_per_threshold(prob, gt, thresholds=[threshold])])


def f1(total: np.ndarray) -> float:
  tp, fp, fn = (int(x) for x in total)
  return 2 * tp / max(2 * tp + fp + fn, 1)


def rule_scale(predicted_width: float, thin: float, wide: float) -> float:
  """The scale the width rule gives a photo whose mask at scale 1 is `predicted_width` wide."""
  if np.isnan(predicted_width):
    return 1.0
  return 2.0 if predicted_width < thin else 0.5 if predicted_width > wide else 1.0


def _median(widths: list[float]) -> float | None:
  """The median of the widths that are not NaN; None if none is."""
  known = [w for w in widths if not np.isnan(w)]
  return float(np.median(known)) if known else None


def _source(spec: str, manual: dict[str, str], data_dir: str | None):
  name, _, split = spec.partition(':')
  data = base.get_config().data
  data.name, data.data_dir, data.manual_dir = name, data_dir, manual.get(name)
  return registry.get_data_source(data.to_dict(), split or 'test')


def score_set(predictors, source, indices, thin, wide) -> dict:
  """One set's figures (module docstring) over the photos `indices` of `source`."""
  threshold = predictors[1.0].threshold
  totals = {s: np.zeros(3, np.int64) for s in predictors}
  rule = np.zeros(3, np.int64)
  widths, label_widths, chosen = [], [], []
  for i in tqdm.tqdm(indices, unit='img', file=sys.stderr):
    record = source[i]
    image, gt = np.asarray(record['image']), np.asarray(record['mask'])[..., 0] != 0
    maps = {s: p(image) for s, p in predictors.items()}
    by_scale = {s: counts(m, gt, threshold) for s, m in maps.items()}
    for s, c in by_scale.items():
      totals[s] += c
    w = width(maps[1.0] > threshold)  # the scale-1 map, not predicted again
    s = rule_scale(w, thin, wide)
    rule += by_scale[s] if s in by_scale else by_scale[1.0]
    widths.append(w)
    label_widths.append(width(gt))
    chosen.append(s)
  return {
    'photos': len(indices),
    'f1_at_scale': {str(s): f1(t) for s, t in totals.items()},
    'f1_width_rule': f1(rule),
    'rule_scales': {str(s): chosen.count(s) for s in sorted(set(chosen))},
    'median_predicted_width': _median(widths),
    'median_label_width': _median(label_widths),
  }


#: The validation parts of the general model's datasets (configs/release/roads_unet_cpu.py's
#: MEMBERS: CrackForest's validation is its last 14 train photos, the others' their ``valid``).
VALIDATION = (
  'crackforest:train[58:]',
  'deepcrack:valid',
  'crack500:valid',
  'gaps384:valid',
  'aiglern_trimm:valid',
)
#: The widths (px) --choose scores by default, beside off.
WIDTHS = (4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0)


def refuse_test_splits(specs: list[str]) -> None:
  """Ends the command in one line if a set is a test split: the rule is chosen on validation
  parts, never on what it is measured on."""
  tested = [s for s in specs if 'test' in s.partition(':')[2].lower()]
  if tested:
    sys.exit(
      f'width_scale.py --choose: {", ".join(tested)}: a test split; the width rule is chosen on '
      "validation parts only (default: the five datasets' validation parts)."
    )


def rule_photos(predict, predict_half, source, indices, threshold, narrowest) -> list[tuple]:
  """(`width_rule.Measured`, strict TP/FP/FN as the file predicts, the same at half size or
  None where no rule of `narrowest` px or wider takes the photo there) per photo."""
  out = []
  for i in tqdm.tqdm(indices, unit='img', file=sys.stderr):
    record = source[i]
    image, gt = np.asarray(record['image']), np.asarray(record['mask'])[..., 0] != 0
    prob = predict(image)
    found = width_rule.measure(prob, threshold)
    half = counts(predict_half(image), gt, threshold) if found.wider_than(narrowest) else None
    out.append((found, counts(prob, gt, threshold), half))
  return out


def rule_rows(photos: dict[str, list[tuple]], widths) -> list[dict]:
  """Per width (None: off, first) the pooled strict F1 of each set, their mean and the photos
  taken to half size, from `rule_photos`' figures."""
  rows = []
  for w in (None, *widths):
    f1s, halved = {}, 0
    for spec, figures in photos.items():
      total = np.zeros(3, np.int64)
      for found, plain, half in figures:
        goes = w is not None and found.wider_than(w)
        total += half if goes else plain
        halved += goes
      f1s[spec] = f1(total)
    mean = float(np.mean(list(f1s.values())))
    rows.append({'width_rule': w, 'f1': f1s, 'mean': mean, 'halved': halved})
  return rows


def best_row(rows: list[dict]) -> dict:
  """The best mean F1; a tie goes to off, then to the wider width (fewer photos changed)."""

  def rank(row: dict) -> tuple:
    return round(row['mean'], 12), row['width_rule'] is None, row['width_rule'] or 0

  return max(rows, key=rank)


def choose(args, make) -> int:
  """--choose: the rule's width on validation parts (module docstring)."""
  specs = args.set or list(VALIDATION)
  refuse_test_splits(specs)
  try:
    widths = sorted({width_rule.parse(w) for w in args.widths.split(',')} - {None})
  except ValueError as e:
    sys.exit(f'width_scale.py --choose: --widths: {e}')
  if not widths:
    sys.exit('width_scale.py --choose: --widths: no width to score beside off.')
  plain, half = make(width_rule=None), make(scales=(width_rule.HALF,), width_rule=None)
  threshold = plain.threshold
  manual = dict(item.partition('=')[::2] for item in args.manual_dir)
  print(f'{args.workdir or args.model}: stored threshold {threshold:g}; scales {plain.scales}')
  photos, sizes = {}, {}
  for spec in specs:
    source = _source(spec, manual, args.data_dir)
    n = len(source)
    indices = list(range(n))
    if args.max_images and n > args.max_images:
      indices = sorted({int(round(x)) for x in np.linspace(0, n - 1, args.max_images)})
    sizes[spec] = (len(indices), n)
    photos[spec] = rule_photos(plain, half, source, indices, threshold, widths[0])
  rows = rule_rows(photos, widths)
  chosen = best_row(rows)
  head = [f'{s} ({k} of {n})' for s, (k, n) in sizes.items()]
  print(f'\n| width rule | {" | ".join(head)} | mean | photos at 0.5 |')
  print('|---' * (len(head) + 3) + '|')
  for r in rows:
    name = 'off' if r['width_rule'] is None else f'{r["width_rule"]:g} px'
    cells = ' | '.join(f'{100 * v:.1f}' for v in r['f1'].values())
    mark = ' (chosen)' if r is chosen else ''
    print(f'| {name}{mark} | {cells} | {100 * r["mean"]:.1f} | {r["halved"]} |')
  value = 'off' if chosen['width_rule'] is None else f'{chosen["width_rule"]:g}'
  why = (
    f'best mean over {len(specs)} validation parts of the pooled strict F1 at the stored '
    f'threshold ({100 * chosen["mean"]:.1f}; off {100 * rows[0]["mean"]:.1f}), '
    'bench/width_scale.py --choose'
  )
  print(f'\nchosen: --width_rule={value} --test_time_chosen_by="{why}"')
  if args.out:
    report = {
      'model': args.workdir or args.model,
      'stored_threshold': threshold,
      'sets': {s: {'photos': k, 'of': n} for s, (k, n) in sizes.items()},
      'rows': rows,
      'chosen': chosen['width_rule'],
      'chosen_by': why,
      'machine': f'{platform.processor() or platform.machine()}, {platform.system()}',
      'date': time.strftime('%Y-%m-%d'),
    }
    Path(args.out).write_text(outputs.dumps(report, indent=2) + '\n')
  return 0


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  who = parser.add_mutually_exclusive_group(required=True)
  who.add_argument('--workdir', help='a training run (a LODO fold)')
  who.add_argument('--model', help='a released model name or a model file')
  parser.add_argument('--set', action='append', help='DATASET:SPLIT, repeatable')
  parser.add_argument('--choose', action='store_true', help="the downward rule's width (above)")
  parser.add_argument('--widths', default=','.join(f'{w:g}' for w in WIDTHS), help='--choose')
  parser.add_argument('--manual_dir', action='append', default=[], help='DATASET=DIR')
  parser.add_argument('--data_dir', default=None)
  parser.add_argument('--scales', default='0.5,1,2')
  parser.add_argument('--thin', type=float, default=4.0)
  parser.add_argument('--wide', type=float, default=8.0)
  parser.add_argument('--max_images', type=int, default=0, help='evenly spaced photos, at most N')
  parser.add_argument('--out', default=None, help='a JSON file for the figures')
  args = parser.parse_args(argv)
  make = (
    (lambda **kw: Predictor.from_workdir(args.workdir, **kw))
    if args.workdir
    else (lambda **kw: Predictor.from_pretrained(args.model, **kw))
  )
  if args.choose:
    return choose(args, make)
  if not args.set:
    parser.error('--set is required (without --choose)')
  scales = sorted({float(s) for s in args.scales.split(',')} | {1.0})
  predictors = {s: make(scales=(s,), width_rule=None) for s in scales}
  manual = dict(item.partition('=')[::2] for item in args.manual_dir)
  report = {
    'model': args.workdir or args.model,
    'stored_threshold': predictors[1.0].threshold,
    'thin': args.thin,
    'wide': args.wide,
    'machine': f'{platform.processor() or platform.machine()}, {platform.system()}',
    'date': time.strftime('%Y-%m-%d'),
    'sets': {},
  }
  print(f'{report["model"]}: stored threshold {report["stored_threshold"]:g}')
  for spec in args.set:
    source = _source(spec, manual, args.data_dir)
    n = len(source)
    indices = list(range(n))
    if args.max_images and n > args.max_images:
      indices = sorted({int(round(x)) for x in np.linspace(0, n - 1, args.max_images)})
    row = score_set(predictors, source, indices, args.thin, args.wide)
    report['sets'][spec] = row
    at = ' '.join(f's{s} {100 * v:.1f}' for s, v in row['f1_at_scale'].items())
    print(
      f'{spec} ({row["photos"]} of {n} photos): strict F1 {at}; width rule '
      f'{100 * row["f1_width_rule"]:.1f} (scales {row["rule_scales"]}); median width '
      f'predicted {row["median_predicted_width"]} px, labelled {row["median_label_width"]} px',
      flush=True,
    )
  if args.out:
    Path(args.out).write_text(outputs.dumps(report, indent=2) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
