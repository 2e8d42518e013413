"""The typed evaluation result (crackjax.evaluation.result): it reads and writes exactly the JSON
that the evaluation writes (eval.json, the epoch records, threshold.json), and names a key that
is missing or unknown."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from crackjax import evaluation
from crackjax.evaluation import result
from crackjax.evaluation.result import (
  Curve,
  EvalRecord,
  ImageRow,
  OperatingPoint,
  PooledPoint,
  ProtocolResult,
  ResultKeyError,
  ThresholdRecord,
)
from crackjax.runs import outputs
from crackjax.trainer import eval_records


def _dumps(obj) -> str:
  return outputs.dumps(obj, indent=1)  # as identity.write_json writes every record


def _evaluated(protocols=('strict', 'tolerance')):
  rng = np.random.default_rng(0)
  gts = [np.zeros((40, 56), bool) for _ in range(3)]
  for k, g in enumerate(gts[:2]):
    g[10 + 5 * k, 4:50] = True
  probs = [np.clip(g * 0.7 + rng.random(g.shape) * 0.4, 0, 1).astype(np.float32) for g in gts]
  return {p: evaluation.evaluate(probs, gts, protocol=p) for p in protocols}


def test_smoke_run_records_round_trip_byte_for_byte(smoke_run):
  """eval.json, every epoch record and threshold.json of a finished run, read and written
  again, are the same bytes."""
  text = (smoke_run / 'eval.json').read_text()
  record = EvalRecord.from_json(json.loads(text), 'eval.json')
  assert _dumps(record.to_json()) == text
  assert record.protocols == ('strict',)
  strict = record.results['strict']
  assert isinstance(strict.ods, OperatingPoint) and isinstance(strict.ois, PooledPoint)
  assert strict.per_image is not None and len(strict.per_image) == record.num_images
  assert strict.per_image[0].name is not None
  assert len(strict.curve.thresholds) == strict.grid_size
  assert strict.fixed.threshold == 0.5
  epochs = sorted(smoke_run.glob('epoch_*.json'))
  assert epochs
  for path in epochs:
    text = path.read_text()
    epoch = EvalRecord.from_json(json.loads(text), path.name)
    assert epoch.results['strict'].per_image is None
    assert _dumps(epoch.to_json()) == text
  text = (smoke_run / 'threshold.json').read_text()
  chosen = ThresholdRecord.from_json(json.loads(text))
  assert _dumps(chosen.to_json()) == text
  assert chosen.threshold == strict.ods.threshold
  assert chosen.step == record.step


def test_evaluate_result_round_trips():
  """`evaluate`'s own dict (num_images, per-image rows without names) round trips, key order
  included, for the strict and the BSDS (tolerance) aggregation."""
  for r in _evaluated().values():
    typed = ProtocolResult.from_json(r)
    assert typed.to_json() == r
    assert json.dumps(typed.to_json()) == json.dumps(r)
    assert typed.num_images == 3 and typed.per_image[0].name is None
    assert list(typed.summary().to_json()) == list(result.SUMMARY_KEYS)


def test_record_with_members_points_and_start_model_round_trips(tmp_path):
  """A mixture's record (datasets, selection), with operating points and a fine-tuning's
  start_model, as the writers build it (typed, carried to the end): its JSON reads back to
  the same bytes, and its epoch record too."""
  results = {p: ProtocolResult.from_json(r) for p, r in _evaluated().items()}
  names = ['crackforest/a', 'crackforest/b', 'deepcrack/c']
  record = eval_records.evaluation_record(
    lambda step: step // 3,
    'mixture',
    (6, 1234),
    'test',
    names,
    results,
    eval_seconds=1.5,
    per_image=True,
  )
  run = OperatingPoint(threshold=0.3, precision=0.5, recall=0.25, f1=1 / 3)
  record = eval_records.add_points(record, {'strict': {'run': run}})
  members = eval_records.by_member(names, lambda rows: results)
  record = eval_records.with_members(record, members)
  start = {'spec': 'x.safetensors', 'name': 'x', 'threshold': 0.4}
  record = dataclasses.replace(record, start_model=start)
  data = json.loads(_dumps(record.to_json()))
  typed = EvalRecord.from_json(data)
  assert _dumps(typed.to_json()) == _dumps(record.to_json())
  assert typed.train_seconds is None  # NaN written as null, read back as None
  assert typed.selection.value == pytest.approx(results['strict'].ods.f1)
  assert typed.datasets['deepcrack'].results['tolerance'].ap == results['tolerance'].ap
  assert typed.results['strict'].operating_points['run'] == run
  assert typed.results['tolerance'].operating_points is None
  assert [row.name for row in typed.results['strict'].per_image] == names
  assert typed.start_model == start
  path = eval_records.write_epoch_record(tmp_path, record, 3)
  text = path.read_text()
  epoch = result.read_record(path)
  assert _dumps(epoch.to_json()) == text and epoch.results['strict'].per_image is None


def test_read_record_names_the_file_and_the_key(tmp_path):
  bad = tmp_path / 'eval.json'
  bad.write_text('{"step": ')
  with pytest.raises(result.ResultKeyError, match=f'{bad}: not a JSON evaluation record'):
    result.read_record(bad)
  bad.write_text('{"step": 3, "colour": "red"}')
  with pytest.raises(result.ResultKeyError, match=f"{bad}: unknown key 'colour'"):
    result.read_record(bad)
  with pytest.raises(FileNotFoundError):
    result.read_record(tmp_path / 'none.json')


def test_hand_built_values():
  point = OperatingPoint(precision=0.5, recall=0.25, f1=1 / 3, threshold=0.7)
  assert point.to_json() == {'precision': 0.5, 'recall': 0.25, 'f1': 1 / 3, 'threshold': 0.7}
  assert list(point.to_json(threshold_first=True)) == ['threshold', 'precision', 'recall', 'f1']
  assert OperatingPoint.from_json(point.to_json(threshold_first=True)) == point
  # A compact copy (a model card's) leaves OIS's sentence out; it stays out.
  assert PooledPoint.from_json({'precision': 1, 'recall': 0, 'f1': 0}).to_json() == {
    'precision': 1,
    'recall': 0,
    'f1': 0,
  }
  typed = ProtocolResult(
    protocol='strict',
    protocol_description='pixel to pixel',
    num_thresholds=2,
    tail_thresholds=False,
    grid_size=3,
    ods=point,
    ods_grid=point,
    ois=PooledPoint(precision=0.6, recall=0.3, f1=0.4, pooling='pooled'),
    ois_mean_f1=0.35,
    ap=0.2,
    fixed=OperatingPoint(precision=0.4, recall=0.2, f1=0.27, threshold=0.5),
    curve=Curve(
      thresholds=(0.0, 0.5, 0.7),
      precision=(0.1, 0.4, 0.5),
      recall=(1, 0.2, 0.25),
      f1=(0.18, 0.27, 1 / 3),
    ),
    per_image=(
      ImageRow(
        index=0,
        threshold=0.7,
        precision=0.5,
        recall=0.25,
        f1=1 / 3,
        fixed_precision=0.4,
        fixed_recall=0.2,
        fixed_f1=0.27,
      ),
    ),
  )
  data = typed.to_json()
  assert list(data) == [
    'protocol', 'protocol_description', 'num_thresholds', 'tail_thresholds', 'grid_size',
    'ods', 'ods_grid', 'ois', 'ois_mean_f1', 'ap', 'fixed', 'curve', 'per_image',
  ]  # fmt: skip
  assert data['fixed'] == {'threshold': 0.5, 'precision': 0.4, 'recall': 0.2, 'f1': 0.27}
  assert data['curve']['thresholds'] == [0.0, 0.5, 0.7]
  assert 'name' not in data['per_image'][0]
  assert ProtocolResult.from_json(data) == typed
  assert ProtocolResult.from_json(data).scalars() == typed.scalars()
  assert typed.scalars()['ods_f1'] == 1 / 3 and typed.scalars()['fixed_f1'] == 0.27


def test_missing_and_unknown_keys_are_named():
  good = _evaluated(('strict',))['strict']
  missing = {k: v for k, v in good.items() if k != 'ois_mean_f1'}
  with pytest.raises(ResultKeyError, match=r"result: missing key 'ois_mean_f1'"):
    ProtocolResult.from_json(missing)
  unknown = {**good, 'odds': 1.0}
  with pytest.raises(ResultKeyError, match=r"unknown key 'odds'"):
    ProtocolResult.from_json(unknown)
  nested = {**good, 'ods': {k: v for k, v in good['ods'].items() if k != 'threshold'}}
  with pytest.raises(ResultKeyError, match=r"result\['ods'\]: missing key 'threshold'"):
    ProtocolResult.from_json(nested)
  row = {**good['per_image'][1], 'colour': 'red'}
  bad_row = {**good, 'per_image': [good['per_image'][0], row]}
  with pytest.raises(ResultKeyError, match=r"\['per_image'\]\[1\]: unknown key 'colour'"):
    ProtocolResult.from_json(bad_row)
  with pytest.raises(ResultKeyError, match=r"threshold.json: missing key 'rule'"):
    ThresholdRecord.from_json({'threshold': 0.5})
  with pytest.raises(ResultKeyError, match='is a JSON object, not list'):
    OperatingPoint.from_json([0.5])
  assert issubclass(ResultKeyError, ValueError)
