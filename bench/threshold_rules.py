"""How well a model's one stored threshold travels: F1 per test set under several mask rules.

For a released model and labelled test sets, every photo is predicted once and the strict (and,
with ``--protocols``, tolerance_thin_gt) F1 is computed, pooled per set, under each rule:

* ``stored``: the model file's threshold (what `crackjax-predict` uses);
* ``0.5``: the usual default;
* ``otsu``: a threshold per photo, Otsu's on its probability map (skimage), never below the
  stored one's half (so a crack-free photo's noise is not split in two classes);
* ``mean``: with ``--choose_on=SET ...`` (validation parts), the one threshold that maximises
  the mean over those sets of their F1 (every dataset alike; the stored threshold of a mixture is
  chosen on the pooled validation parts, which weighs them by crack pixels);
* ``ods``: the set's own best single threshold (an oracle: it looks at the set's labels).

``ods`` minus ``stored`` is the calibration cost of shipping one threshold. A temperature fitted
on the validation part is not a separate rule here: for one global threshold it only moves the
threshold (sigmoid(z / T) > t is z > T logit(t)), which ``ods`` already bounds.

Usage (the released general model on the cropped copies; the data prepared as crackjax-evaluate
prepares it)::

    python bench/threshold_rules.py --model=roads-unet-cpu --data_dir=DIR \\
        --set=deepcrack:test --set=crack500:test --manual_dir=deepcrack=.../Datasets ... \\
        [--choose_on=deepcrack:valid --choose_on=crack500:valid ...] \\
        [--max_images=300] [--out=results/threshold_rules.json]

``--max_images`` takes every k-th photo of a larger set (deterministic), said in the output.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import tqdm

from crackjax import evaluation
from crackjax.configs import base
from crackjax.data import registry
from crackjax.deploy.predictor import Predictor
from crackjax.runs import outputs


def otsu_masks(probs: list[np.ndarray], floor: float) -> list[np.ndarray]:
  """Each map thresholded at its own Otsu threshold, at least `floor` (0/1 float32 masks)."""
  from skimage.filters import threshold_otsu

  out = []
  for p in probs:
    t = floor if float(p.max()) - float(p.min()) < 1e-6 else max(floor, threshold_otsu(p))
    out.append((p > t).astype(np.float32))
  return out


def rule_scores(
  probs: list[np.ndarray],
  gts: list[np.ndarray],
  stored: float,
  protocol: str = 'strict',
  mean: float | None = None,
) -> dict[str, dict[str, float]]:
  """P/R/F1 of each rule (module docstring) on one set, pooled over its photos; ``mean``: the
  threshold of the mean rule, where one was chosen."""
  ods = evaluation.evaluate(probs, gts, protocol=protocol)['ods']
  masks = otsu_masks(probs, stored / 2)
  out = {
    'stored': evaluation.at_threshold(probs, gts, protocol=protocol, threshold=stored),
    '0.5': evaluation.at_threshold(probs, gts, protocol=protocol, threshold=0.5),
    'otsu': evaluation.at_threshold(masks, gts, protocol=protocol, threshold=0.5),
  }
  if mean is not None:
    out['mean'] = evaluation.at_threshold(probs, gts, protocol=protocol, threshold=mean)
  out['ods'] = {k: ods[k] for k in ('precision', 'recall', 'f1', 'threshold')}
  return out


def mean_rule_threshold(sets: list[tuple[list[np.ndarray], list[np.ndarray]]]) -> dict:
  """The strict threshold maximising the mean over `sets` ((probs, gts) each) of their F1, and
  that mean; every set's curve is on the same grid (`evaluation.evaluate`)."""
  curves = [evaluation.evaluate(p, g, protocol='strict')['curve'] for p, g in sets]
  f1 = np.mean([c['f1'] for c in curves], axis=0)
  best = int(np.argmax(f1))
  return {'threshold': float(curves[0]['thresholds'][best]), 'mean_f1': float(f1[best])}


def _source(spec: str, manual: dict[str, str], data_dir: str | None):
  name, _, split = spec.partition(':')
  data = base.get_config().data
  data.name, data.data_dir, data.manual_dir = name, data_dir, manual.get(name)
  return registry.get_data_source(data.to_dict(), split or 'test')


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--model', required=True, help='a released model name or a model file')
  parser.add_argument('--set', action='append', required=True, help='DATASET:SPLIT, repeatable')
  parser.add_argument(
    '--choose_on', action='append', default=[], help='DATASET:SPLIT of the mean rule, repeatable'
  )
  parser.add_argument('--manual_dir', action='append', default=[], help='DATASET=DIR')
  parser.add_argument('--data_dir', default=None)
  parser.add_argument('--protocols', default='strict')
  parser.add_argument('--max_images', type=int, default=0, help='every k-th photo, at most N')
  parser.add_argument('--out', default=None, help='a JSON file for the table')
  args = parser.parse_args(argv)
  model = Predictor.from_pretrained(args.model)
  manual = dict(item.partition('=')[::2] for item in args.manual_dir)
  report = {
    'model': args.model,
    'stored_threshold': model.threshold,
    'machine': f'{platform.processor() or platform.machine()}, {platform.system()}',
    'date': time.strftime('%Y-%m-%d'),
    'sets': {},
  }

  def predicted(spec: str):
    source = _source(spec, manual, args.data_dir)
    indices = list(range(len(source)))
    if args.max_images and len(indices) > args.max_images:
      step = -(-len(indices) // args.max_images)
      indices = indices[::step]
    probs, gts = [], []
    for i in tqdm.tqdm(indices, desc=spec, unit='img', file=sys.stderr):
      record = source[i]
      probs.append(model(np.asarray(record['image'])))
      gts.append(np.asarray(record['mask'])[..., 0])
    return probs, gts, len(source)

  mean = None
  if args.choose_on:
    chosen = mean_rule_threshold([predicted(spec)[:2] for spec in args.choose_on])
    report['mean_rule'] = {'chosen_on': args.choose_on, **chosen}
    mean = chosen['threshold']
    print(
      f'mean rule: threshold {mean:g} (mean strict F1 {100 * chosen["mean_f1"]:.1f} on '
      f'{", ".join(args.choose_on)})'
    )
  rules = ('stored', '0.5', 'otsu', *(('mean',) if mean is not None else ()))
  print(f'{args.model}: stored threshold {model.threshold:g}. F1 (%) per rule:')
  print(f'| set | images | protocol | {" | ".join(rules)} | ods (its t) |')
  print('|---|---|---|' + '---|' * len(rules) + '---|')
  for spec in args.set:
    probs, gts, total = predicted(spec)
    report['sets'][spec] = {'images': len(probs), 'of': total, 'protocols': {}}
    for protocol in args.protocols.split(','):
      scores = rule_scores(probs, gts, model.threshold, protocol, mean)
      report['sets'][spec]['protocols'][protocol] = scores
      cells = ' | '.join(f'{100 * scores[r]["f1"]:.1f}' for r in rules)
      ods = scores['ods']
      print(
        f'| {spec} | {len(probs)} of {total} | {protocol} | {cells} | '
        f'{100 * ods["f1"]:.1f} ({ods["threshold"]:g}) |',
        flush=True,
      )
  if args.out:
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(outputs.dumps(report, indent=1) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
