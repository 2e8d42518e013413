"""What an evaluation writes: eval.json's per-protocol summary, the CSV, the scalars, the plot."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from absl import logging as absl_logging

from crackjax import evaluation
from crackjax.configs import base
from crackjax.experiment import build as experiment
from crackjax.trainer import eval_records


def _results(protocols=('strict', 'tolerance')):
  rng = np.random.default_rng(0)
  gts = [np.zeros((40, 56), bool) for _ in range(3)]
  for k, g in enumerate(gts):
    g[10 + 5 * k, 4:50] = True
  probs = [np.clip(g * 0.7 + rng.random(g.shape) * 0.4, 0, 1).astype(np.float32) for g in gts]
  names = ['a', 'b', 'c']
  results = {p: evaluation.protocol_result(probs, gts, protocol=p) for p in protocols}
  return probs, gts, names, results


def test_protocol_summary_keeps_everything_but_per_image():
  _, _, _, results = _results()
  for typed in results.values():
    r, s = typed.to_json(), typed.summary().to_json()
    assert list(s) == [
      'protocol',
      'protocol_description',
      'num_thresholds',
      'tail_thresholds',
      'grid_size',
      'ods',
      'ods_grid',
      'ois',
      'ois_mean_f1',
      'ap',
      'fixed',
      'curve',
    ]
    assert 'per_image' not in s
    assert {k: r[k] for k in s} == s
    assert set(s['curve']) == {'thresholds', 'precision', 'recall', 'f1'}
    assert len(s['curve']['thresholds']) == s['grid_size']
    assert s['fixed']['threshold'] == 0.5
    json.dumps(s, allow_nan=False)


def test_write_eval_outputs(tmp_path, monkeypatch):
  probs, gts, names, results = _results()
  config = base.get_config()
  config.eval.num_qualitative = 1
  record = eval_records.evaluation_record(
    lambda step: 1, config.data.name, (7, 0), 'test', names, results, eval_seconds=0.0,
    per_image=True,
  )  # fmt: skip
  logged = []
  monkeypatch.setattr(absl_logging, 'info', lambda msg, *args: logged.append(msg % args))
  images = [np.stack([p] * 3, axis=-1) for p in probs]
  plan = experiment.eval_plan_of(config.to_dict())
  eval_records.write_eval_outputs(plan, tmp_path, record, results, images, probs, gts, names)
  results = {p: r.to_json() for p, r in results.items()}  # what the files hold

  # eval.json keeps the curve, the grid ODS and F1 at 0.5.
  written = json.loads((tmp_path / 'eval.json').read_text())
  for p, r in results.items():
    got = written['results'][p]
    assert got['curve'] == r['curve'] and got['ods_grid'] == r['ods_grid']
    assert got['fixed'] == r['fixed']
    assert got['grid_size'] == len(r['curve']['thresholds'])

  # The scalars and the log line carry F1 at 0.5.
  rows = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
  by_kind = {row['kind']: row for row in rows}
  for p, r in results.items():
    row = by_kind[f'eval_test_{p}']
    assert row['fixed_f1'] == pytest.approx(r['fixed']['f1'])
    assert row['fixed_precision'] == pytest.approx(r['fixed']['precision'])
    assert row['fixed_recall'] == pytest.approx(r['fixed']['recall'])
  lines = [m for m in logged if m.startswith('Eval (')]
  assert len(lines) == 2 and all('at t=0.5 (P ' in m for m in lines)

  # The CSV has P/R/F1 at 0.5 per image and protocol.
  with open(tmp_path / 'eval_per_image.csv', newline='') as f:
    table = list(csv.DictReader(f))
  assert [row['name'] for row in table] == names
  assert list(table[0])[:8] == [
    'name',
    'strict_threshold',
    'strict_precision',
    'strict_recall',
    'strict_f1',
    'strict_fixed_precision',
    'strict_fixed_recall',
    'strict_fixed_f1',
  ]
  for j, row in enumerate(table):
    want = results['tolerance']['per_image'][j]['fixed_f1']
    assert float(row['tolerance_fixed_f1']) == pytest.approx(want, abs=1e-5)
  assert (tmp_path / 'pr_curve.png').read_bytes()[:4] == b'\x89PNG'
  threshold = json.loads((tmp_path / 'threshold.json').read_text())['threshold']
  assert threshold == results['strict']['ods']['threshold']
