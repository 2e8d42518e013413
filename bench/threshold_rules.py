"""How well a model's one stored threshold travels: F1 per test set under several mask rules.

For a released model and labelled test sets, every photo is predicted once and the strict (and,
with ``--protocols``, tolerance_thin_gt) F1 is computed, pooled per set, under each rule:

* ``stored``: the model file's threshold (what `crackjax-predict` uses);
* ``0.5``: the usual default;
* ``otsu``: a threshold per photo, Otsu's on its probability map (skimage), never below the
  stored one's half (so a crack-free photo's noise is not split in two classes);
* ``ods``: the set's own best single threshold (an oracle: it looks at the set's labels).

``ods`` minus ``stored`` is the calibration cost of shipping one threshold. A temperature fitted
on the validation part is not a separate rule here: for one global threshold it only moves the
threshold (sigmoid(z / T) > t is z > T logit(t)), which ``ods`` already bounds.

Usage (the released general model on the cropped copies; the data prepared as crackjax-evaluate
prepares it)::

    python bench/threshold_rules.py --model=roads-unet-cpu --data_dir=DIR \\
        --set=deepcrack:test --set=crack500:test --manual_dir=deepcrack=.../Datasets ... \\
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
  probs: list[np.ndarray], gts: list[np.ndarray], stored: float, protocol: str = 'strict'
) -> dict[str, dict[str, float]]:
  """P/R/F1 of each rule (module docstring) on one set, pooled over its photos."""
  ods = evaluation.evaluate(probs, gts, protocol=protocol)['ods']
  masks = otsu_masks(probs, stored / 2)
  return {
    'stored': evaluation.at_threshold(probs, gts, protocol=protocol, threshold=stored),
    '0.5': evaluation.at_threshold(probs, gts, protocol=protocol, threshold=0.5),
    'otsu': evaluation.at_threshold(masks, gts, protocol=protocol, threshold=0.5),
    'ods': {k: ods[k] for k in ('precision', 'recall', 'f1', 'threshold')},
  }


def _source(spec: str, manual: dict[str, str], data_dir: str | None):
  name, _, split = spec.partition(':')
  data = base.get_config().data
  data.name, data.data_dir, data.manual_dir = name, data_dir, manual.get(name)
  return registry.get_data_source(data, split or 'test')


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--model', required=True, help='a released model name or a model file')
  parser.add_argument('--set', action='append', required=True, help='DATASET:SPLIT, repeatable')
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
  print(f'{args.model}: stored threshold {model.threshold:g}. Strict F1 (%) per rule:')
  print('| set | images | protocol | stored | 0.5 | otsu | ods (its t) |')
  print('|---|---|---|---|---|---|---|')
  for spec in args.set:
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
    report['sets'][spec] = {'images': len(indices), 'of': len(source), 'protocols': {}}
    for protocol in args.protocols.split(','):
      scores = rule_scores(probs, gts, model.threshold, protocol)
      report['sets'][spec]['protocols'][protocol] = scores
      cells = ' | '.join(f'{100 * scores[r]["f1"]:.1f}' for r in ('stored', '0.5', 'otsu'))
      ods = scores['ods']
      print(
        f'| {spec} | {len(indices)} of {len(source)} | {protocol} | {cells} | '
        f'{100 * ods["f1"]:.1f} ({ods["threshold"]:g}) |',
        flush=True,
      )
  if args.out:
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(outputs.dumps(report, indent=1) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
