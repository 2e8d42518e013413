"""An evaluation's result, typed: the one place that spells the keys of its JSON.

`aggregate.evaluate` returns, and `crackjax.trainer.eval_records` writes into eval.json, every
epoch_<NNN>.json and threshold.json, plain JSON dicts; this module names their keys (the
constants below, for code that reads or builds such dicts) and gives them types that read and
write exactly that JSON (``from_json`` / ``to_json``, key order included):

* `OperatingPoint`: precision, recall, F1 at one threshold (``ods``, ``ods_grid``, ``fixed``,
  each operating point);
* `PooledPoint`: OIS, precision, recall and F1 of counts pooled at each image's own threshold;
* `Curve`: the dataset's P-R curve over the grid;
* `ImageRow`: one image's row (``per_image``);
* `ProtocolResult`: one protocol's result (`evaluate`'s, or a record's summary of it);
* `MemberResult`, `Selection`: a mixture's per-dataset results and its selection score;
* `EvalRecord`: the evaluation record (eval.json, epoch_<NNN>.json);
* `ThresholdRecord`: threshold.json.

``from_json`` raises `ResultKeyError` (a ValueError) naming a missing or unknown key and where
it is; it checks the keys, not the values' types. Values are kept as read: a time recorded as
null (NaN when written) stays None.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

__all__ = [
  'Curve',
  'EvalRecord',
  'ImageRow',
  'MemberResult',
  'OperatingPoint',
  'PooledPoint',
  'ProtocolResult',
  'ResultKeyError',
  'Selection',
  'ThresholdRecord',
  'read_record',
]

# Keys of a point (`OperatingPoint`, `PooledPoint`) and of the curve (`Curve`).
PRECISION = 'precision'
RECALL = 'recall'
F1 = 'f1'
THRESHOLD = 'threshold'
POOLING = 'pooling'
THRESHOLDS = 'thresholds'

# Keys of one protocol's result (`ProtocolResult`).
PROTOCOL = 'protocol'
PROTOCOL_DESCRIPTION = 'protocol_description'
NUM_IMAGES = 'num_images'
NUM_THRESHOLDS = 'num_thresholds'
TAIL_THRESHOLDS = 'tail_thresholds'
GRID_SIZE = 'grid_size'
ODS = 'ods'
ODS_GRID = 'ods_grid'
OIS = 'ois'
OIS_MEAN_F1 = 'ois_mean_f1'
AP = 'ap'
FIXED = 'fixed'
CURVE = 'curve'
PER_IMAGE = 'per_image'
OPERATING_POINTS = 'operating_points'

# Keys of a per-image row (`ImageRow`) beyond a point's.
NAME = 'name'
INDEX = 'index'
FIXED_PRECISION = 'fixed_precision'
FIXED_RECALL = 'fixed_recall'
FIXED_F1 = 'fixed_f1'

# Keys of the evaluation record (`EvalRecord`), of a mixture's parts and of threshold.json.
EPOCH = 'epoch'
STEP = 'step'
DATASET = 'dataset'
SPLIT = 'split'
PROTOCOLS = 'protocols'
PARAMS = 'params'
TRAIN_SECONDS = 'train_seconds'
EVAL_SECONDS = 'eval_seconds'
FIRST_IN_PROCESS = 'first_in_process'
RESULTS = 'results'
DATASETS = 'datasets'
SELECTION = 'selection'
START_MODEL = 'start_model'
METRIC = 'metric'
VALUE = 'value'
RULE = 'rule'
CHOSEN_BY = 'chosen_by'

#: The names of one protocol's scalars (TensorBoard, metrics.jsonl): `ProtocolResult.scalars`.
ODS_F1 = 'ods_f1'
OIS_F1 = 'ois_f1'
#: The scalars TensorBoard's hyper-parameter view shows of each protocol.
HEADLINE_SCALARS = (ODS_F1, OIS_F1, AP)


class ResultKeyError(ValueError):
  """A JSON object lacks a key its type needs, or has one it does not know (both named)."""


_T = TypeVar('_T')


def _keys(cls: type) -> tuple[str, ...]:
  return tuple(f.name for f in dataclasses.fields(cls))


def _checked(cls: type, data: Any, where: str) -> Mapping[str, Any]:
  """`data` if it is a mapping with every required key of `cls` and no other, else
  `ResultKeyError` naming the first key wrong and `where` it is."""
  name = cls.__name__
  if not isinstance(data, Mapping):
    raise ResultKeyError(f'{where}: a {name} is a JSON object, not {type(data).__name__}')
  keys = _keys(cls)
  unknown = [k for k in data if k not in keys]
  if unknown:
    raise ResultKeyError(f'{where}: unknown key {unknown[0]!r} (a {name} has {list(keys)})')
  required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
  missing = [k for k in required if k not in data]
  if missing:
    raise ResultKeyError(f'{where}: missing key {missing[0]!r} (a {name} needs {required})')
  return data


def _plain(cls: type[_T], data: Any, where: str) -> _T:
  """A `cls` of plain values (no nested types) from `data`."""
  return cls(**_checked(cls, data, where))


def _json(obj: Any) -> dict[str, Any]:
  """`obj`'s fields in order as a JSON dict: optional fields (default None) left out when
  None, nested types by their ``to_json``, tuples as lists."""
  out = {}
  for f in dataclasses.fields(obj):
    v = getattr(obj, f.name)
    if v is None and f.default is None:
      continue
    out[f.name] = _value(v)
  return out


def _value(v: Any) -> Any:
  if hasattr(v, 'to_json'):
    return v.to_json()
  if isinstance(v, tuple):
    return [_value(x) for x in v]
  if isinstance(v, dict):
    return {k: _value(x) for k, x in v.items()}
  return v


class _Flat:
  """`from_json` / `to_json` of a record of plain values: its fields are the JSON object's
  keys, in order (`_plain`, `_json`); `WHERE` names it in a missing or unknown key's error."""

  WHERE: ClassVar[str] = ''

  @classmethod
  def from_json(cls, data: Mapping[str, Any], where: str | None = None) -> Self:
    """From its JSON object."""
    return _plain(cls, data, where or cls.WHERE)

  def to_json(self) -> dict[str, Any]:
    """Its JSON object."""
    return _json(self)


@dataclasses.dataclass(frozen=True)
class OperatingPoint:
  """The dataset's precision and recall (counts pooled over the images), the F1 of those, at
  `threshold` (interpolated for the BSDS ``ods``)."""

  precision: float
  recall: float
  f1: float
  threshold: float

  @classmethod
  def from_json(cls, data: Mapping[str, Any], where: str = 'point') -> OperatingPoint:
    """From its JSON object (either key order)."""
    return _plain(cls, data, where)

  def to_json(self, *, threshold_first: bool = False) -> dict[str, float]:
    """The JSON object: precision, recall, f1, threshold (``ods``, ``ods_grid``), or with
    `threshold_first` threshold, precision, recall, f1 (``fixed``, the operating points)."""
    out = _json(self)
    if threshold_first:
      return {THRESHOLD: out.pop(THRESHOLD), **out}
    return out


@dataclasses.dataclass(frozen=True)
class PooledPoint(_Flat):
  """OIS: precision, recall and F1 of the counts pooled over the images, each image at its own
  best threshold; `pooling`: the sentence saying how (None where a compact copy left it out)."""

  precision: float
  recall: float
  f1: float
  pooling: str | None = None

  WHERE: ClassVar[str] = OIS


@dataclasses.dataclass(frozen=True)
class Curve:
  """The dataset's P-R curve: one value per threshold of the grid, in grid order."""

  thresholds: tuple[float, ...]
  precision: tuple[float, ...]
  recall: tuple[float, ...]
  f1: tuple[float, ...]

  @classmethod
  def from_json(cls, data: Mapping[str, Any], where: str = CURVE) -> Curve:
    """From its JSON object (lists)."""
    data = _checked(cls, data, where)
    return cls(**{k: tuple(v) for k, v in data.items()})

  def to_json(self) -> dict[str, list[float]]:
    """The JSON object: thresholds, precision, recall, f1 (lists)."""
    return _json(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageRow(_Flat):
  """One image's row: its `name` (in a record's rows; `evaluate`'s have none), its `index` in
  the evaluation, its OIS `threshold` and P, R, F1 there, P, R, F1 at 0.5 (``fixed_*``), and
  (a scoring's rows, strict: `Protocol.counts_tp_fp_fn`; None in older records) its `tp`, `fp`,
  `fn` pixels at the threshold in use (`eval_records.threshold_in_use`: the file's stored one)."""

  name: str | None = None
  index: int
  threshold: float
  precision: float
  recall: float
  f1: float
  fixed_precision: float
  fixed_recall: float
  fixed_f1: float
  tp: int | None = None
  fp: int | None = None
  fn: int | None = None

  WHERE: ClassVar[str] = PER_IMAGE


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProtocolResult:
  """One protocol's result: `evaluate`'s, or its summary in a record (eval.json, epochs).

  The fields in JSON order; `num_images` is `evaluate`'s (a record keeps it once, beside the
  results), `per_image` is in `evaluate`'s result and eval.json (not the epoch records), and
  `operating_points` where the scoring had some (``crackjax-evaluate --model``: 'run').

  Attributes:
    protocol: its name (`crackjax.evaluation.PROTOCOLS`).
    protocol_description: the protocol's description.
    num_images: the images scored (`evaluate`'s result only).
    num_thresholds: the uniform part of the grid.
    tail_thresholds: whether the grid has the tail thresholds.
    grid_size: all thresholds evaluated.
    ods: the dataset's best F1 over the grid (BSDS: interpolated).
    ods_grid: that best point on the grid.
    ois: each image at its own best threshold, counts pooled.
    ois_mean_f1: the mean over the images of their best F1.
    ap: the area under the P-R curve.
    fixed: the dataset at threshold 0.5.
    curve: the P-R curve over the grid.
    per_image: each image's row.
    operating_points: {name: the dataset at that threshold}.
  """

  protocol: str
  protocol_description: str
  num_images: int | None = None
  num_thresholds: int
  tail_thresholds: bool
  grid_size: int
  ods: OperatingPoint
  ods_grid: OperatingPoint
  ois: PooledPoint
  ois_mean_f1: float
  ap: float
  fixed: OperatingPoint
  curve: Curve
  per_image: tuple[ImageRow, ...] | None = None
  operating_points: dict[str, OperatingPoint] | None = None

  @classmethod
  def from_json(cls, data: Mapping[str, Any], where: str = 'result') -> ProtocolResult:
    """From its JSON object (`evaluate`'s result, or a record's ``results[protocol]``)."""
    data = dict(_checked(cls, data, where))
    for key in (ODS, ODS_GRID, FIXED):
      data[key] = OperatingPoint.from_json(data[key], f'{where}[{key!r}]')
    data[OIS] = PooledPoint.from_json(data[OIS], f'{where}[{OIS!r}]')
    data[CURVE] = Curve.from_json(data[CURVE], f'{where}[{CURVE!r}]')
    if data.get(PER_IMAGE) is not None:
      data[PER_IMAGE] = tuple(
        ImageRow.from_json(row, f'{where}[{PER_IMAGE!r}][{i}]')
        for i, row in enumerate(data[PER_IMAGE])
      )
    if data.get(OPERATING_POINTS) is not None:
      data[OPERATING_POINTS] = {
        name: OperatingPoint.from_json(p, f'{where}[{OPERATING_POINTS!r}][{name!r}]')
        for name, p in data[OPERATING_POINTS].items()
      }
    return cls(**data)

  def to_json(self) -> dict[str, Any]:
    """The JSON object, as `evaluate` and the records write it."""
    out = _json(self)
    out[FIXED] = self.fixed.to_json(threshold_first=True)
    if self.operating_points is not None:
      out[OPERATING_POINTS] = {
        name: p.to_json(threshold_first=True) for name, p in self.operating_points.items()
      }
    return out

  def summary(self) -> ProtocolResult:
    """The record's summary of it: without `num_images` and `per_image`."""
    return dataclasses.replace(self, num_images=None, per_image=None)

  def scalars(self) -> dict[str, float]:
    """Its scalars (TensorBoard and metrics.jsonl), in order."""
    return {
      ODS_F1: self.ods.f1,
      'ods_precision': self.ods.precision,
      'ods_recall': self.ods.recall,
      OIS_F1: self.ois.f1,
      AP: self.ap,
      FIXED_F1: self.fixed.f1,
      FIXED_PRECISION: self.fixed.precision,
      FIXED_RECALL: self.fixed.recall,
    }


#: The keys of a record's per-protocol summary (`ProtocolResult.summary`), in order.
SUMMARY_KEYS = tuple(
  k for k in _keys(ProtocolResult) if k not in (NUM_IMAGES, PER_IMAGE, OPERATING_POINTS)
)


def _results(data: Mapping[str, Any], where: str) -> dict[str, ProtocolResult]:
  return {p: ProtocolResult.from_json(r, f'{where}[{p!r}]') for p, r in data.items()}


@dataclasses.dataclass(frozen=True)
class MemberResult:
  """One dataset of a mixture: its images and its results (summaries) per protocol."""

  num_images: int
  results: dict[str, ProtocolResult]

  @classmethod
  def from_json(cls, data: Mapping[str, Any], where: str = DATASETS) -> MemberResult:
    """From its JSON object."""
    data = _checked(cls, data, where)
    return cls(data[NUM_IMAGES], _results(data[RESULTS], f'{where}[{RESULTS!r}]'))

  def to_json(self) -> dict[str, Any]:
    """The JSON object: num_images, results."""
    return _json(self)


@dataclasses.dataclass(frozen=True)
class Selection(_Flat):
  """A mixture's selection score: what it is (`metric`, in words) and its `value`."""

  metric: str
  value: float

  WHERE: ClassVar[str] = SELECTION


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalRecord:
  """The evaluation record: eval.json (with per-image rows) and epoch_<NNN>.json (without).

  Attributes:
    epoch: the epoch of `step`.
    step: the step evaluated.
    dataset: the dataset scored.
    split: its split.
    num_images: the images scored.
    protocols: the protocols, in order.
    params: the model's parameter count.
    train_seconds: wall time since the previous evaluation (None: read back from null, not
      measured).
    eval_seconds: the evaluation's wall time.
    first_in_process: whether that time includes the process's start-up.
    results: {protocol: its result's summary (with per-image rows in eval.json)}.
    datasets: a mixture's members (None: not a mixture).
    selection: a mixture's selection score.
    start_model: a fine-tuning's starting model file scored as shipped (before/eval.json).
  """

  epoch: int
  step: int
  dataset: str
  split: str
  num_images: int
  protocols: tuple[str, ...]
  params: int
  train_seconds: float | None
  eval_seconds: float
  first_in_process: bool
  results: dict[str, ProtocolResult]
  datasets: dict[str, MemberResult] | None = None
  selection: Selection | None = None
  start_model: dict[str, Any] | None = None

  @classmethod
  def from_json(cls, data: Mapping[str, Any], where: str = 'record') -> EvalRecord:
    """From the JSON object of eval.json or epoch_<NNN>.json (`where`: its name, for errors)."""
    data = dict(_checked(cls, data, where))
    data[PROTOCOLS] = tuple(data[PROTOCOLS])
    data[RESULTS] = _results(data[RESULTS], f'{where}[{RESULTS!r}]')
    if data.get(DATASETS) is not None:
      data[DATASETS] = {
        name: MemberResult.from_json(m, f'{where}[{DATASETS!r}][{name!r}]')
        for name, m in data[DATASETS].items()
      }
    if data.get(SELECTION) is not None:
      data[SELECTION] = Selection.from_json(data[SELECTION], f'{where}[{SELECTION!r}]')
    return cls(**data)

  def to_json(self) -> dict[str, Any]:
    """The JSON object, key for key as the record is written."""
    return _json(self)


def read_record(path: str | Path) -> EvalRecord:
  """The evaluation record in `path` (eval.json, epoch_<NNN>.json, before/eval.json), typed:
  the one reader of records (the run's threshold, a release's epoch, a card's scores, a
  fine-tuning's table, a campaign's rows).

  Raises:
    OSError: the file cannot be read (FileNotFoundError: it is not there).
    ResultKeyError: it is not JSON, or not a record (the key at fault and the file named).
  """
  path = Path(path)
  text = path.read_text()
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    raise ResultKeyError(f'{path}: not a JSON evaluation record ({e})') from e
  return EvalRecord.from_json(data, str(path))


def degenerate_threshold(result: ProtocolResult) -> str | None:
  """Why `result`'s best threshold (ODS) tells nothing about cracks, or None if it does: no
  threshold finds a crack pixel (F1 0), or the best one calls (nearly) every pixel crack
  (recall >= 99.9% at a precision no better than the grid's lowest threshold's, where every
  pixel is crack: the model found nothing a threshold can separate)."""
  ods = result.ods
  if not ods.f1 > 0:
    return f'no threshold finds a crack pixel (F1 0 at every threshold, t={ods.threshold:g})'
  curve = result.curve
  lowest = min(range(len(curve.thresholds)), key=lambda i: curve.thresholds[i])
  base = curve.precision[lowest]
  if ods.recall >= 0.999 and ods.precision <= base * 1.05 + 1e-12:
    return (
      f'the best threshold calls every pixel crack (t={ods.threshold:.2f}, P '
      f'{100 * ods.precision:.1f}, R {100 * ods.recall:.1f}; all pixels: P {100 * base:.1f})'
    )
  return None


#: The fields of an evaluation record, in order (a mixture's and a fine-tuning's left out).
RECORD_FIELDS = tuple(k for k in _keys(EvalRecord) if k not in (DATASETS, SELECTION, START_MODEL))


@dataclasses.dataclass(frozen=True)
class ThresholdRecord(_Flat):
  """threshold.json: the mask threshold later prediction uses, and how it was chosen.

  Attributes:
    threshold: the ODS threshold of the protocol that records one.
    rule: how a probability map becomes a mask at it (`Protocol.threshold_rule`).
    chosen_by: in words.
    dataset: the dataset it was chosen on.
    split: its split.
    step: the step evaluated.
  """

  threshold: float
  rule: str
  chosen_by: str
  dataset: str
  split: str
  step: int

  WHERE: ClassVar[str] = 'threshold.json'
