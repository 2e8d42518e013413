"""What an evaluation leaves in a run's folder: the one evaluation record (`RECORD_FIELDS`:
eval.json and every epoch_<NNN>.json, `evaluation_record`, `write_epoch_record`), the folder it
goes to (`results_dir`: the workdir for the run's own test split, else beside it), threshold.json,
the per-image CSV, the plots and TensorBoard's extras (`write_eval_outputs`).

`crackjax.trainer.scoring` and `crackjax.trainer.periodic` score; this module writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from absl import logging

from crackjax import evaluation
from crackjax.data import mixture
from crackjax.evaluation import plots, threshold_choice
from crackjax.evaluation import result as keys
from crackjax.evaluation.eval_plan import EvalPlan
from crackjax.evaluation.result import (
  EvalRecord,
  MemberResult,
  OperatingPoint,
  ProtocolResult,
  Selection,
  ThresholdRecord,
  degenerate_threshold,
)
from crackjax.runs import identity, metric_writer
from crackjax.runs.metric_writer import MetricWriter

#: An evaluation's per-image rows (`plots.write_per_image_csv`); while its photos are scored,
#: the rows so far are in this name + `plots.PARTIAL_SUFFIX` (`scoring.stream_score`).
PER_IMAGE_CSV = 'eval_per_image.csv'

#: The fields of an evaluation record (`evaluation_record`), in order: eval.json and every
#: epoch_<NNN>.json, whoever wrote them (launch, the periodic evaluation, the runner).
RECORD_FIELDS = keys.RECORD_FIELDS

Results = dict[str, ProtocolResult]


def by_member(
  names: Sequence[str], results_of: Callable[[list[int]], Results]
) -> dict[str, MemberResult] | None:
  """Each member's results from `results_of(rows)`, the results of the images at `rows`: the
  images grouped by the member their name starts with (None: not a mixture's)."""
  groups: dict[str, list[int]] = {}
  for i, name in enumerate(names):
    member, _ = mixture.member_of_name(name)
    if member is None:
      return None
    groups.setdefault(member, []).append(i)
  return {
    member: MemberResult(len(rows), {p: r.summary() for p, r in results_of(rows).items()})
    for member, rows in groups.items()
  }


def with_members(record: EvalRecord, members: dict[str, MemberResult] | None) -> EvalRecord:
  """`record` with its members' results (`by_member`) and the selection score of a
  mixture: the mean over the members of the first protocol's ODS F1, so that every dataset
  counts alike however many images it has (the pooled ``results`` weigh them by pixels)."""
  if not members:
    return record
  protocol = next(iter(record.results))
  f1s = [m.results[protocol].ods.f1 for m in members.values()]
  selection = Selection(f'mean over the datasets of the {protocol} ODS F1', float(np.mean(f1s)))
  return dataclasses.replace(record, datasets=members, selection=selection)


def evaluation_record(
  epoch_of: Callable[[int], int],
  dataset: str,
  facts: tuple[int, int],
  split: str,
  names: Sequence[str],
  results: Results,
  *,
  eval_seconds: float,
  train_seconds: float = math.nan,
  first_in_process: bool = False,
  per_image: bool = False,
) -> EvalRecord:
  """The one evaluation record: eval.json (with the per-image rows) and epoch_<NNN>.json
  (without) of launch, of the periodic evaluation and of the reproduction runner; `epoch_of`:
  the epoch of a step (`Schedule.epoch_of`).

  Keyed by dataset + split (the directory, `results_dir`, and the fields), step (and its
  epoch) and protocol (``results``). ``train_seconds`` is the wall time since the previous
  evaluation of this process (NaN when no training preceded it); ``first_in_process`` says
  that it includes the process's start-up and compilation.
  """
  step, params = facts  # `scoring.state_facts`

  def recorded(result: ProtocolResult) -> ProtocolResult:
    rows = None
    if per_image:
      rows = tuple(
        dataclasses.replace(row, name=n) for n, row in zip(names, result.per_image, strict=True)
      )
    return dataclasses.replace(result.summary(), per_image=rows)

  return EvalRecord(
    epoch=epoch_of(step),
    step=step,
    dataset=dataset,
    split=split,
    num_images=len(names),
    protocols=tuple(results),
    params=params,
    train_seconds=train_seconds,
    eval_seconds=eval_seconds,
    first_in_process=first_in_process,
    results={protocol: recorded(r) for protocol, r in results.items()},
  )


def write_epoch_record(
  directory: str | Path, record: EvalRecord, steps_per_epoch: int
) -> Path | None:
  """Writes `record` (without per-image rows) as its epoch's record, atomically; merged with
  an existing record of the same step (its other protocols and its training time kept).
  Only an epoch's last step has an epoch record (a checkpoint saved mid-epoch, e.g. on an
  interrupt, is not an epoch): returns None and writes nothing for any other step."""
  if record.step != record.epoch * steps_per_epoch:
    return None
  path = identity.epoch_path(directory, record.epoch)
  path.parent.mkdir(parents=True, exist_ok=True)
  results = {p: dataclasses.replace(r, per_image=None) for p, r in record.results.items()}
  data = dataclasses.replace(record, results=results).to_json()
  required = (keys.EPOCH, keys.RESULTS)
  old = identity.read_record(path, required=required) if path.exists() else None
  if old is not None and old.get(keys.STEP) == record.step:
    merged = {**old[keys.RESULTS], **data[keys.RESULTS]}
    data[keys.RESULTS], data[keys.PROTOCOLS] = merged, list(merged)
    if math.isnan(record.train_seconds):
      data[keys.TRAIN_SECONDS] = old.get(keys.TRAIN_SECONDS, math.nan)
      data[keys.FIRST_IN_PROCESS] = old.get(keys.FIRST_IN_PROCESS, False)
  identity.write_json(path, data)
  return path


def add_points(record: EvalRecord, points: dict[str, dict[str, OperatingPoint]]) -> EvalRecord:
  """`record` with each protocol's operating points (`StreamScorer.results`) in its results,
  if any."""
  results = {
    protocol: dataclasses.replace(
      r, operating_points={**(r.operating_points or {}), **points[protocol]}
    )
    if points.get(protocol)
    else r
    for protocol, r in record.results.items()
  }
  return dataclasses.replace(record, results=results)


def with_tp_fp_fn(results: Results, counts: dict[str, np.ndarray]) -> Results:
  """`results` with each image's TP, FP and FN pixels (`StreamScorer.tp_fp_fn`: {protocol:
  (num_images, 3)}, at the threshold in use) in its per-image rows, under those protocols."""
  out = dict(results)
  for protocol, c in counts.items():
    rows = tuple(
      dataclasses.replace(row, tp=int(tp), fp=int(fp), fn=int(fn))
      for row, (tp, fp, fn) in zip(results[protocol].per_image, c, strict=True)
    )
    out[protocol] = dataclasses.replace(results[protocol], per_image=rows)
  return out


def step_results_dir(directory: str | Path, step: int) -> Path:
  """``<directory>/eval/step_<step>``: where an evaluation of a step older than the results
  of `directory` goes (`evaluate_checkpoint`)."""
  return Path(directory) / 'eval' / f'step_{step}'


def folders(
  plan: EvalPlan, workdir: Path, split: str, step: int, out: str | Path | None, overwrite: bool
) -> tuple[Path, Path]:
  """(the results folder, where the evaluation of `step` is written) of `plan`'s data `split`.

  The results folder is `out`, or `results_dir` (the workdir for the run's own test split; an
  other one is said in the log). The evaluation goes there, unless it holds the results of a
  newer step (`newest_evaluated_step`; the run's newest checkpoint damaged and set aside) and
  not `overwrite`: then to `step_results_dir`, with a warning.
  """
  out = Path(out) if out is not None else results_dir(plan, workdir, split)
  if out != workdir:
    logging.info(
      "Scoring %s/%s, not the data the run was trained for: results in %s (the run's own "
      'eval.json and threshold.json stay as they are).',
      plan.dataset,
      split,
      out,
    )
  newer = newest_evaluated_step(out) if jax.process_index() == 0 else None
  if newer is None or newer <= step or overwrite:
    return out, out
  target = step_results_dir(out, step)
  logging.warning(
    'Evaluated step %d, older than step %d, whose results %s holds (its newest checkpoint '
    "is damaged or gone): the results of step %d are in %s; the run's eval.json and "
    'threshold.json stay those of step %d (--overwrite replaces them).',
    step,
    newer,
    out,
    step,
    target,
    newer,
  )
  return out, target


def newest_evaluated_step(directory: str | Path) -> int | None:
  """The step whose evaluation `directory`'s eval.json or threshold.json records (the newer
  of the two), or None: neither is there or readable (a damaged one is replaced as before)."""
  steps = []
  for name in ('eval.json', 'threshold.json'):
    try:
      step = json.loads((Path(directory) / name).read_text()).get(keys.STEP)
    except (OSError, ValueError, AttributeError):
      continue
    if isinstance(step, int) and not isinstance(step, bool):
      steps.append(step)
  return max(steps, default=None)


def data_key(data: Any, split: str) -> dict[str, Any]:
  """What makes two evaluations score the same images: the dataset, its folders (for
  crack_folder) and the split of `data` (a config's data group, or an `EvalPlan`'s fields);
  not where the prepared copy lives. A comparison key."""
  if isinstance(data, EvalPlan):
    return {'name': data.dataset, 'folder': data.folder, 'split': split}
  data = json.loads(json.dumps(dict(data), default=str))
  return {'name': data.get('name'), 'folder': data.get('folder'), 'split': split}


def results_dir(plan: EvalPlan, workdir: str | Path, split: str) -> Path:
  """Where an evaluation of `plan`'s data `split` is written: the workdir itself for the
  test split of the data the run was trained on (its config.json), else
  ``<workdir>/eval/<dataset>_<split>`` (plus a short hash of the folders for crack_folder),
  so that scoring a run elsewhere never replaces its own results or its threshold.json."""
  workdir = Path(workdir)
  recorded = workdir / 'config.json'
  if not recorded.is_file():
    return workdir
  own = json.loads(recorded.read_text()).get('data', {})
  if data_key(own, own.get('test_split', 'test')) == data_key(plan, split):
    return workdir
  return other_results_dir(plan, workdir, split)


def other_results_dir(plan: EvalPlan, workdir: str | Path, split: str) -> Path:
  """``<workdir>/eval/<dataset>_<split>`` (plus a short hash of the folders for crack_folder):
  where an evaluation beside the run's own results goes."""
  name = f'{plan.dataset}_{split}'
  if plan.dataset == 'crack_folder':
    key = data_key(plan, split)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    name = f'{name}_{digest}'
  return Path(workdir) / 'eval' / name


def mask_threshold(results: Results) -> float:
  """The ODS threshold of the first protocol that records one (threshold.json's), else 0.5
  (also where that threshold is degenerate, `result.degenerate_threshold`, as `write_threshold`
  returns): the threshold of the qualitative figures."""
  for protocol, r in results.items():
    if evaluation.get_protocol(protocol).writes_threshold_file:
      return 0.5 if degenerate_threshold(r) else r.ods.threshold
  return 0.5


def threshold_in_use(results: Results, operating_points: dict[str, float] | None = None) -> float:
  """The threshold masks are made at after this evaluation: the run's or model file's own
  (`operating_points`' 'run', crackjax-evaluate's) where given, else the one threshold.json
  gets (`mask_threshold`: the strict ODS threshold, 0.5 where it is degenerate)."""
  if operating_points and 'run' in operating_points:
    return float(operating_points['run'])
  return mask_threshold(results)


def write_threshold(
  workdir: Path,
  results: Results,
  record: EvalRecord,
  *,
  store_degenerate: bool = False,
  over: str = 'pooled',
) -> float:
  """Writes threshold.json from the first protocol that records one; returns the threshold,
  chosen under rule `over` (``config.eval.threshold_over``, `threshold_choice`: the pooled
  ODS, or a mixture's datasets alike).

  A degenerate best threshold (`result.degenerate_threshold`: nothing found, or every pixel
  crack) is named in one line and not written (unless `store_degenerate`,
  ``config.eval.store_degenerate_threshold``): an earlier threshold.json stays, and the
  returned threshold (the figures') is 0.5."""
  for protocol, r in results.items():
    spec = evaluation.get_protocol(protocol)
    if spec.writes_threshold_file:
      split = record.split
      why = degenerate_threshold(r)
      if why and not store_degenerate:
        kept = (
          'an earlier one stays, for its step'
          if (workdir / 'threshold.json').exists()
          else 'none kept'
        )
        message = (
          f'{record.dataset} {split}, {protocol}: {why}; not stored as the threshold '
          f'(threshold.json: {kept}; config.eval.store_degenerate_threshold=True stores it).'
        )
        print(f'warning: {message}', file=sys.stderr, flush=True)
        return 0.5
      threshold, chosen_by = threshold_choice.chosen_threshold(record, protocol, over)
      chosen = ThresholdRecord(
        threshold=threshold,
        rule=spec.threshold_rule,
        chosen_by=chosen_by,
        dataset=record.dataset,
        split=split,
        step=record.step,
      )
      # Atomic, as every record: crackjax-predict reads it (without the lock) at any time.
      identity.write_json(workdir / 'threshold.json', chosen.to_json())
      return chosen.threshold
  return 0.5  # No protocol gives a mask threshold: show the qualitative figure at 0.5.


def tensorboard_extras(
  plan: EvalPlan,
  record: EvalRecord,
  results: Results,
  shown: tuple[Sequence[np.ndarray], Sequence[np.ndarray], Sequence[np.ndarray]],
  threshold: float,
  hparams: dict[str, Any] | None,
) -> dict[str, Any]:
  """One evaluation's TensorBoard beyond scalars, as `MetricWriter.write_evaluation`'s
  keyword arguments: each protocol's PR curve, the first ``plan.num_qualitative`` of `shown`
  (images, ground truths, maps) as image | ground truth | probability | overlay at
  `threshold` panels, and the run's hyper-parameters."""
  images, gts, probs = shown
  kind = f'eval_{record.split}'
  k = min(plan.num_qualitative, len(images))
  return {
    'curves': {f'{kind}_{p}/pr_curve': r.curve.to_json() for p, r in results.items()},
    'panels': [
      (f'{kind}/qualitative_{i}', plots.qualitative_panel(images[i], gts[i], probs[i], threshold))
      for i in range(k)
    ],
    'hparams': metric_writer.flat_hparams(hparams) if hparams else None,
    'metrics': [f'{kind}_{p}/{m}' for p in results for m in keys.HEADLINE_SCALARS],
  }


def write_eval_outputs(
  plan: EvalPlan,
  workdir: Path,
  record: EvalRecord,
  results: Results,
  images: Sequence[np.ndarray],
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  names: Sequence[str],
  hparams: dict[str, Any] | None = None,
  *,
  probs_saved: bool = False,
  in_use: tuple[float, dict[str, Any]] | None = None,
  shown: tuple[list[str], list[str]] | None = None,
  extra: Sequence[dict[str, Any]] | None = None,
) -> None:
  """threshold.json, the CSV, the plots, optional maps and the eval scalars, TensorBoard's PR
  curves, qualitative panels and `hparams` (the run's config as plain data;
  `tensorboard_extras`), and eval.json last, so that an eval.json there is a whole
  evaluation's. `images`, `probs` and `gts` may be the first ``plan.num_qualitative`` only
  (with their `names`) when `probs_saved` (the maps already written as they came).
  `in_use`: (the threshold masks are made at, {protocol: each image's F1 there}), for the CSV
  and the figure; `shown`: (names, captions) of the images given, when they are not the
  first ones (`scoring.spread_by_f1`'s); `extra`: more cells of each image's CSV row (the
  width rule's scale and width, crackjax-evaluate's)."""
  workdir.mkdir(parents=True, exist_ok=True)
  step, split = record.step, record.split
  threshold = write_threshold(
    workdir,
    results,
    record,
    store_degenerate=plan.store_degenerate_threshold,
    over=plan.threshold_over,
  )
  plots.write_per_image_csv(workdir / PER_IMAGE_CSV, names, results, in_use, extra)
  title = f'{plan.dataset} {split}, step {step}'
  plots.plot_pr_curves(workdir / 'pr_curve.png', results, title)
  k = min(plan.num_qualitative, len(images))
  if k:
    shown_names, captions = shown or (list(names[:k]), None)
    used = threshold if in_use is None else in_use[0]
    how = 'the strict ODS threshold' if in_use is None else f'the threshold in use, {used:.3g}'
    order = '' if shown is None else ' (worst to best by F1 there)'
    plots.plot_qualitative(
      workdir / 'qualitative.png',
      images[:k],
      gts[:k],
      probs[:k],
      shown_names[:k],
      used,
      f'{title}; prediction at {how}{order}',
      captions,
    )
  if plan.save_probability_maps and not probs_saved:
    plots.save_probability_maps(workdir / 'probs', probs, names)
  extras = tensorboard_extras(plan, record, results, (images, gts, probs), threshold, hparams)
  scalars = {protocol: r.scalars() for protocol, r in results.items()}
  data = record.to_json()
  writer = MetricWriter(workdir)
  writer.write_evaluation(step, **extras)
  for protocol, r in results.items():
    writer.write_scalars(step, scalars[protocol], kind=f'eval_{split}_{protocol}')
    logging.info(
      'Eval (%s protocol) at step %d: ODS F1 %.4f (t=%.4g, P %.4f, R %.4f), OIS F1 %.4f, '
      'AP %.4f, F1 %.4f at t=%g (P %.4f, R %.4f)',
      protocol,
      step,
      r.ods.f1,
      r.ods.threshold,
      r.ods.precision,
      r.ods.recall,
      r.ois.f1,
      r.ap,
      r.fixed.f1,
      r.fixed.threshold,
      r.fixed.precision,
      r.fixed.recall,
    )
  writer.close()
  identity.write_json(workdir / 'eval.json', data)
