"""Figures that show what matters (issue 56): each image's F1 at the threshold masks are made
at, in the per-image CSV; the qualitative figure's photos spread from worst to best."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np

from crackjax.evaluation import aggregate
from crackjax.evaluation.streaming import StreamScorer
from crackjax.trainer import eval_records, evaluate_command, scoring


def test_spread_by_f1_names_worst_median_best():
  f1 = [0.5, 0.1, 0.9, 0.3, 0.7]
  assert scoring.spread_by_f1(f1, 3) == [
    (1, 'worst, F1 0.10'),
    (0, 'median, F1 0.50'),
    (2, 'best, F1 0.90'),
  ]
  four = scoring.spread_by_f1(list(np.linspace(0, 1, 46)), 4)
  assert [i for i, _ in four] == [0, 15, 22, 45]
  assert [c.split(',')[0] for _, c in four] == ['worst', 'rank 16 of 46', 'median', 'best']
  assert scoring.spread_by_f1([0.2], 4) == [(0, 'worst, F1 0.20')]
  assert scoring.spread_by_f1([], 4) == []


def test_image_f1_at_a_threshold_equals_scoring_each_image_alone():
  rng = np.random.default_rng(0)
  gts = [rng.random((20, 24)) > 0.8 for _ in range(3)]
  probs = [np.clip(g * 0.6 + rng.random(g.shape) * 0.5, 0, 1).astype(np.float32) for g in gts]
  with StreamScorer({'strict': 100}, operating_points={'run': 0.37}) as scorer:
    for p, g in zip(probs, gts, strict=True):
      scorer.add(p, g)
    at_run = scorer.image_f1('strict', 0.37)
    on_grid = scorer.image_f1('strict', 0.4)
  for i, (p, g) in enumerate(zip(probs, gts, strict=True)):
    assert at_run[i] == aggregate.at_threshold([p], [g], protocol='strict', threshold=0.37)['f1']
    assert on_grid[i] == aggregate.at_threshold([p], [g], protocol='strict', threshold=0.4)['f1']


def test_the_csv_carries_f1_at_the_threshold_in_use(smoke_run, tmp_path):
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  out = tmp_path / 'scores'
  evaluate_command.main(
    [f'--workdir={run}', '--data=test', f'--out={out}', '--protocols=strict', '--workers=1']
  )
  (folder,) = [p for p in out.iterdir() if p.is_dir()]
  with (folder / eval_records.PER_IMAGE_CSV).open(newline='') as f:
    rows = list(csv.DictReader(f))
  threshold = float(rows[0]['threshold_in_use'])
  assert {float(r['threshold_in_use']) for r in rows} == {threshold}
  assert all(0 <= float(r['strict_f1_in_use']) <= 1 for r in rows)
  assert (folder / 'qualitative.png').stat().st_size > 0
