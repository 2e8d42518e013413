"""``crackjax-export --format=model``: a run's checkpoint as a model file with its card.

The file (`crackjax.models.model_file`) holds the parameters and BatchNorm statistics, the
run's ``config.model`` group and whole config, the input rule, the threshold and how it was
chosen, and the model card built here (`model_card`) from what the run recorded about that
step: every evaluation record of it in the workdir (eval.json, epoch_<NNN>.json,
eval/*/eval.json), each with its dataset, split and number of images, so the card's scores
name the split they were measured on. The card also holds a `self_check`: the model's logits
on a fixed colour road image, which anyone can recompute without data and every load compares
(`crackjax.models.output_check`).

With ``dtype='bfloat16'`` the stored parameters are rounded to bfloat16 (half the size); the
card then states the measured change on the run's test split (max |Δp| over every pixel and
strict F1 at the stored threshold, against float32), computed here.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from crackjax.deploy.predictor import PAD_BUCKET, Predictor, pad_multiple, plain_predictor
from crackjax.deploy.self_check import self_check
from crackjax.evaluation import width_rule
from crackjax.evaluation.inference import check_test_time
from crackjax.evaluation.result import (
  AP,
  CHOSEN_BY,
  DATASET,
  F1,
  FIXED,
  FIXED_F1,
  NAME,
  NUM_IMAGES,
  ODS,
  OIS,
  OIS_MEAN_F1,
  PRECISION,
  RECALL,
  SPLIT,
  STEP,
  THRESHOLD,
  EvalRecord,
  OperatingPoint,
  PooledPoint,
  ProtocolResult,
  read_record,
)
from crackjax.experiment.restored import Run, epoch_threshold, load_run
from crackjax.models import input_multiple, model_file, model_schema
from crackjax.runs import identity

# The licence of each dataset's images and labels, as its publisher states it (the card, the
# registry and crackjax-models show it). Unknown datasets: 'see the dataset's publisher'.
DATA_LICENCES = {
  'crackforest': 'non-commercial research only (CrackForest dataset, Shi et al. 2016, its README)',
  'crack_folder': "the training images' owner's terms (a user's own folder)",
}


def _picked(point: OperatingPoint | PooledPoint) -> dict[str, float]:
  """A point's precision, recall, F1 and threshold (where it has one), in that order."""
  data = point.to_json()
  return {k: data[k] for k in (PRECISION, RECALL, F1, THRESHOLD) if data.get(k) is not None}


def _summary(result: ProtocolResult) -> dict[str, Any]:
  out = {ODS: _picked(result.ods), OIS: _picked(result.ois), AP: result.ap}
  out[FIXED] = _picked(result.fixed)
  out[OIS_MEAN_F1] = result.ois_mean_f1
  stored = (result.operating_points or {}).get('run')
  if stored:  # crackjax-evaluate's P/R/F1 at the model's stored threshold (the calibration)
    out['at_stored_threshold'] = _picked(stored)
  return out


def record_scores(record: EvalRecord, name: str, copy: str | None = None) -> dict[str, Any]:
  """One evaluation record (eval.json, epoch_<NNN>.json; `result.read_record`) as a card's
  scores entry: dataset, split, `copy` (which copy of the dataset, where two are scored: e.g.
  'crops' and 'photos'), images, the record's `name`, per protocol ODS/OIS/AP, P/R/F1 at the
  stored threshold and, where the record has them, the first three images' rows."""
  protocols = {}
  for protocol, result in record.results.items():
    summary = _summary(result)
    if result.per_image:
      rows = [row.to_json() for row in result.per_image[:3]]
      summary['first_images'] = [
        {k: row[k] for k in (NAME, THRESHOLD, F1, FIXED_F1) if row.get(k) is not None}
        for row in rows
      ]
    protocols[protocol] = summary
  return {
    DATASET: record.dataset,
    SPLIT: record.split,
    **({'copy': copy} if copy else {}),
    NUM_IMAGES: record.num_images,
    'record': name,
    'protocols': protocols,
  }


def at_threshold_only(entry: dict[str, Any], threshold: float) -> dict[str, Any]:
  """A card's scores entry without "at stored threshold" figures measured at another
  threshold than the file's (a threshold given to the export, not the run's)."""
  for summary in entry['protocols'].values():
    at = summary.get('at_stored_threshold')
    if at and THRESHOLD in at and abs(at[THRESHOLD] - threshold) > 1e-9:
      del summary['at_stored_threshold']
  return entry


def step_records(workdir: Path, step: int) -> list[dict[str, Any]]:
  """Every evaluation record of `step` in the run (one per dataset and split, the one with
  the most protocols kept), as the card's scores (`record_scores`)."""
  paths = [workdir / 'eval.json', *sorted(workdir.glob('epoch_*.json'))]
  paths += sorted(workdir.glob('eval/*/eval.json'))
  found: dict[tuple[str, str], dict[str, Any]] = {}
  for path in paths:
    if not path.is_file():
      continue
    try:
      record = read_record(path)
    except (OSError, ValueError):
      continue  # a damaged record is not a score
    if record.step != step:
      continue
    scores = record_scores(record, str(path.relative_to(workdir)))
    entry = found.setdefault((scores['dataset'], scores['split']), {**scores, 'protocols': {}})
    for protocol, summary in scores['protocols'].items():
      old = entry['protocols'].get(protocol)
      if old is None or ('first_images' in summary and 'first_images' not in old):
        entry['protocols'][protocol] = summary
        entry['record'] = scores['record']
  return list(found.values())


def step_threshold(run: Run, workdir: Path) -> tuple[float, str]:
  """The threshold of the exported step and how it was chosen: the run's threshold.json when
  it was chosen at this step, else the strict ODS threshold of this step's epoch record on the
  run's own test split (the same rule, `crackjax.trainer.scoring`, a degenerate one left out:
  `restored.epoch_threshold`; a release exports the epoch that scored best on its validation
  part), else the run's fallback (0.5, said). The
  wording names no path of this machine: it goes into the file."""
  saved = workdir / 'threshold.json'
  if saved.is_file():
    chosen = json.loads(saved.read_text())
    if chosen.get(STEP) == run.step and CHOSEN_BY in chosen:
      return float(chosen[THRESHOLD]), (
        f'{chosen[CHOSEN_BY]}, {chosen.get(DATASET)}, step {chosen[STEP]}'
      )
  return epoch_threshold(workdir, run.step) or (run.threshold, run.threshold_source)


TEST_TIME_KEYS = ('scales', 'flip', 'photo_threshold', 'width_rule')


def check_test_time_override(
  test_time: dict[str, Any] | None, chosen_by: str | None
) -> dict[str, Any]:
  """`test_time` checked by the model file's schema (`model_schema.TEST_TIME`, the one place:
  scales in `model_schema.SCALE_RANGE`, flip a bool, photo_threshold a weight in [0, 1],
  width_rule None or a width in pixels) and normalised; {} for none.

  Raises:
    ValueError: naming the value at fault, or the missing `chosen_by`.
  """
  test_time = dict(test_time or {})
  unknown = sorted(set(test_time) - set(TEST_TIME_KEYS))
  if unknown:
    raise ValueError(f'unknown test-time setting(s) {unknown}; known: {list(TEST_TIME_KEYS)}.')
  if not test_time:
    if chosen_by:
      raise ValueError(
        '--test_time_chosen_by needs --scales, --flip, --photo_threshold or --width_rule.'
      )
    return {}
  if not (chosen_by or '').strip():
    raise ValueError(
      f'test-time defaults {test_time} need --test_time_chosen_by: how they were chosen (the '
      'model file tells its users), e.g. "scale 2: best LODO mean, bench/lodo.py".'
    )
  if 'width_rule' in test_time:
    test_time['width_rule'] = width_rule.check(test_time['width_rule'], '--width_rule')
  found = model_schema.test_time_problems(test_time, '--')
  if found:
    raise ValueError(f'{found[0]}.')
  scales, _ = check_test_time(test_time.get('scales', (1.0,)), test_time.get('flip', False), '--')
  if 'scales' in test_time:
    test_time['scales'] = list(scales)  # as the card's JSON keeps it
  return test_time


def check_threshold_override(threshold: float | None, chosen_by: str | None) -> None:
  """Refuses a stored threshold outside (0, 1), or one given without how it was chosen (the
  file says it to every user), or a reason without a threshold.

  Raises:
    ValueError: naming the value at fault.
  """
  if threshold is None:
    if chosen_by:
      raise ValueError('--threshold_chosen_by needs --threshold (the threshold it describes).')
    return
  if not 0.0 < threshold < 1.0:
    raise ValueError(f'--threshold={threshold}: expected a probability strictly between 0 and 1.')
  if not (chosen_by or '').strip():
    raise ValueError(
      f'--threshold={threshold} needs --threshold_chosen_by: how it was chosen (the model '
      'file tells its users), e.g. "one threshold for five held-out datasets, bench/lodo.py".'
    )


def dataset_licence(name: str) -> str:
  """The terms of use of dataset `name`: `DATA_LICENCES`, else its builder's ``LICENSE``."""
  from crackjax.data import registry

  if name in DATA_LICENCES:
    return DATA_LICENCES[name]
  entry = registry.DATASETS.get(name)
  return getattr(entry.builder, 'LICENSE', None) or "see the dataset's publisher"


def _data_card(c, licence: str | None) -> dict[str, Any]:
  """The card's ``data``: the dataset, its licence and splits; for a mixture, every member
  with its licence, weight and splits, and the rule that the strictest licence governs."""
  from crackjax.data import mixture

  data = c.data.to_dict()  # plain data, as the mixture's functions take it
  if not mixture.is_mixture(data):
    return {
      'name': c.data.name,
      'licence': licence or dataset_licence(c.data.name),
      'train_split': c.data.train_split,
      'test_split': c.data.test_split,
    }
  members = [
    {
      'name': name,
      'licence': dataset_licence(name),
      **{k: v for k, v in fields.items() if k != 'manual_dir'},
    }
    for name, fields in mixture.member_fields(data).items()
  ]
  strict = [m['name'] for m in members if 'non-commercial' in m['licence'].lower()]
  default = (
    f'the strictest licence of its training datasets governs: non-commercial research only '
    f'({", ".join(strict)})'
    if strict
    else "the strictest licence of its training datasets governs (see 'datasets')"
  )
  return {
    'name': 'mixture',
    'licence': licence or default,
    'train_split': 'train',
    'test_split': c.data.test_split,
    'datasets': members,
  }


def model_card(
  run: Run, workdir: Path, *, name: str | None, licence: str | None, notes: str | None
) -> dict[str, Any]:
  """The card of `run`'s model (module docstring)."""
  c = run.config
  params = sum(int(np.prod(x.shape)) for x in _leaves(run.params))
  data = c.data.name
  return {
    'name': name or f'{c.model.name}-{data}-step{run.step}',
    'created': datetime.date.today().isoformat(),
    'crackjax_version': model_file.crackjax_version(),
    'model': {**c.model.to_dict(), 'parameters': params},
    'data': _data_card(c, licence),
    'training': {
      'step': run.step,
      'epoch': -(-run.step // c.steps_per_epoch),
      'steps_per_epoch': c.steps_per_epoch,
      'num_epochs': c.num_epochs,
      'batch_size': c.batch_size,
      'input_size': list(c.data.input_size) if c.data.input_size else None,
      'learning_rate': c.learning_rate,
      'seed': c.seed,
      'loss': c.loss.to_dict(),
    },
    'scores': [at_threshold_only(e, run.threshold) for e in step_records(workdir, run.step)],
    'notes': notes or '',
  }


def portable_config(config) -> dict[str, Any]:
  """The run's config as JSON, with None at every path of the machine that trained it
  (`identity.is_machine_path`: `MACHINE_PATHS` and a mixture's members' manual_dir)."""
  out = json.loads(config.to_json_best_effort())
  members = out.get('data', {}).get('mix') or {}
  fields = [*identity.MACHINE_PATHS, *(f'data.mix.{name}.manual_dir' for name in members)]
  for field in fields:
    node = out
    *parents, leaf = field.split('.')
    for part in parents:
      node = node.get(part) or {}
    if isinstance(node, dict) and leaf in node:
      node[leaf] = None
  return out


def _leaves(tree: Any) -> list[np.ndarray]:
  if isinstance(tree, dict):
    return [leaf for v in tree.values() for leaf in _leaves(v)]
  return [tree]


def _round_bf16(tree: Any) -> Any:
  if isinstance(tree, dict):
    return {k: _round_bf16(v) for k, v in tree.items()}
  return np.asarray(tree).astype(ml_dtypes.bfloat16).astype(np.float32)


def bfloat16_change(run: Run, half: Predictor, max_images: int = 8) -> dict[str, Any]:
  """Max |Δp| and strict F1 at the run's threshold of `half` (the run's model with its
  parameters rounded to bfloat16) against float32, on the first `max_images` images of the
  run's test split."""
  from crackjax import evaluation
  from crackjax.experiment.build import build

  experiment = build(run.config, training=False)
  examples = list(experiment.splits.examples())[:max_images]
  full = plain_predictor(run)
  probs32 = [full(ex['image']) for ex in examples]
  probs16 = [half(ex['image']) for ex in examples]
  gts = [ex['mask'][..., 0] for ex in examples]
  f1 = {
    dtype: evaluation.at_threshold(p, gts, protocol='strict', threshold=run.threshold)[F1]
    for dtype, p in (('float32', probs32), ('bfloat16', probs16))
  }
  return {
    'images': f'the first {len(examples)} of {run.config.data.name} {run.config.data.test_split}',
    'max_abs_probability_change': float(
      max(np.abs(a - b).max() for a, b in zip(probs32, probs16, strict=True))
    ),
    'strict_f1_at_threshold': f1,
  }


def export_model(
  workdir: str | Path,
  out: str | Path,
  *,
  step: int | None = None,
  dtype: str = 'float32',
  name: str | None = None,
  licence: str | None = None,
  notes: str | None = None,
  threshold: float | None = None,
  threshold_chosen_by: str | None = None,
  test_time: dict[str, Any] | None = None,
  test_time_chosen_by: str | None = None,
) -> tuple[Path, str, dict[str, Any]]:
  """Writes the model file of a run's checkpoint (default: the newest); returns (the path,
  its file SHA-256, its metadata). The caller checks `out` (crackjax.deploy.export).

  `test_time` (any of `TEST_TIME_KEYS`: ``scales``, ``flip``, ``photo_threshold``,
  ``width_rule``) replaces the run's ``eval``
  settings of those names in the file: the defaults its users' Predictor, crackjax-predict and
  crackjax-evaluate take (e.g. scale 2, chosen on held-out datasets by bench/lodo.py), with
  `test_time_chosen_by` saying how they were chosen (the card's ``test_time``). The self check
  stays one plain pass.

  The stored threshold is the run's (`step_threshold`) unless `threshold` is given, with
  `threshold_chosen_by` saying how it was chosen (e.g. on held-out datasets' predictions,
  bench/lodo.py). Either way the card keeps "at stored threshold" figures only where a record
  scored at the stored threshold (`at_threshold_only`; `crackjax.deploy.release rescore`
  scores the file at its own).

  Raises:
    ValueError: `threshold` outside (0, 1) or given without `threshold_chosen_by`; a
      `test_time` value out of range, an unknown key, or given without `test_time_chosen_by`.
  """
  workdir, out = Path(workdir), Path(out)
  check_threshold_override(threshold, threshold_chosen_by)
  test_time = check_test_time_override(test_time, test_time_chosen_by)
  run = load_run(workdir, step=step)
  if threshold is None:
    threshold, threshold_chosen_by = step_threshold(run, workdir)
  run = dataclasses.replace(run, threshold=threshold, threshold_source=threshold_chosen_by)
  card = model_card(run, workdir, name=name, licence=licence, notes=notes)
  if test_time:
    config = run.config.copy_and_resolve_references()
    with config.unlocked():
      for key, value in test_time.items():
        config.eval[key] = tuple(value) if key == 'scales' else value
    run = dataclasses.replace(run, config=config)
    card['test_time'] = {**test_time, 'chosen_by': test_time_chosen_by}
  predictor = plain_predictor(run)
  if dtype == 'bfloat16':  # what the file will predict: the parameters rounded
    predictor = Predictor(
      run.model,
      _round_bf16(run.params),
      batch_stats=_round_bf16(run.batch_stats) if run.batch_stats else None,
      threshold=run.threshold,
    )
    card['bfloat16'] = bfloat16_change(run, predictor)
  card['self_check'] = self_check(predictor)
  multiple = input_multiple(run.model)
  meta = {
    'model': run.config.model.to_dict(),
    'plugins': list(run.config.get('plugins') or ()),
    'input': {
      'image': 'RGB, float32 in [0, 1] (uint8 / 255), H x W x 3',
      'input_multiple': multiple,
      'padding': f'reflection at the bottom and right to multiples of {pad_multiple(multiple)}',
      'pad_multiple': pad_multiple(multiple),
      'pad_bucket': PAD_BUCKET,
      'output': 'crack probability per pixel (sigmoid of the fused logits), H x W',
    },
    'threshold': {'threshold': run.threshold, 'chosen_by': run.threshold_source},
    'card': card,
    'config': portable_config(run.config),
  }
  sha = model_file.write(
    out, params=run.params, batch_stats=run.batch_stats, meta=meta, dtype=dtype
  )
  return out, sha, meta
