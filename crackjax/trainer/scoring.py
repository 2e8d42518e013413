"""Evaluation of a trained model on a test split, and the files it leaves in the workdir.

`evaluate_checkpoint` predicts every test image with the latest checkpoint (or a given
state) and scores it under every protocol of the experiment's `EvalPlan`
(`crackjax.evaluation`, numpy only), one photo at a time (`stream_score`: counts kept, maps
dropped), then writes the reports (`crackjax.evaluation.plots`).
Scoring reads the run's `Schedule` and `EvalPlan` (`crackjax.experiment.build` derives them),
never the config's fields.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import tqdm
from flax import linen as nn

from crackjax import evaluation
from crackjax.data import loader
from crackjax.engine import train_state
from crackjax.engine.prefetch import read_ahead
from crackjax.evaluation import plots, width_rule
from crackjax.evaluation.eval_plan import EvalPlan
from crackjax.evaluation.inference import check_scaled_size, predict_probabilities
from crackjax.evaluation.result import EvalRecord, MemberResult, OperatingPoint, ProtocolResult
from crackjax.evaluation.streaming import StreamScorer
from crackjax.experiment.build import Experiment
from crackjax.models import input_multiple
from crackjax.trainer import eval_records


def score(
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  plan: EvalPlan,
  *,
  workers: int = 1,
  progress: bool = True,
) -> dict[str, ProtocolResult]:
  """`evaluation.protocol_result` under every protocol of `plan`, each on its grid (typed).

  Each grid has the protocol's uniform thresholds (`EvalPlan.thresholds_of`), 0.5 and, if
  `plan.tail_thresholds`, the tail thresholds near 0 and 1. Shows a progress bar per
  protocol over the images (process 0 only, on stderr, unless `progress` is False): the
  tolerance protocols can take most of a second per image. `workers` processes count the
  images in parallel (`evaluation.evaluate`).
  """
  results = {}
  for protocol in plan.protocols:
    with tqdm.tqdm(
      total=len(probs),
      desc=f'{protocol} protocol',
      unit='img',
      disable=not progress or jax.process_index() != 0,
    ) as bar:
      results[protocol] = evaluation.protocol_result(
        probs,
        gts,
        protocol=protocol,
        num_thresholds=plan.thresholds_of(protocol),
        tail_thresholds=plan.tail_thresholds,
        progress=bar.update,
        workers=workers,
      )
  return results


def member_results(
  names: Sequence[str],
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  plan: EvalPlan,
  *,
  workers: int = 1,
) -> dict[str, MemberResult] | None:
  """Each member's own results on an evaluation of a mixture of datasets (records named
  ``<member>/<name>``, `crackjax.data.mixture`): {member: its images and its results'
  summaries}; None when the images are not a mixture's."""
  return eval_records.by_member(
    names,
    lambda rows: score(
      [probs[i] for i in rows], [gts[i] for i in rows], plan, workers=workers, progress=False
    ),
  )


def state_facts(state: train_state.TrainState) -> tuple[int, int]:
  """The step of `state` and its number of trainable parameters (Tables V-VIII print them;
  BatchNorm statistics are not counted): what an evaluation record says of the state."""
  return int(jax.device_get(state.step)), sum(int(x.size) for x in jax.tree.leaves(state.params))


def evaluate_checkpoint(
  experiment: Experiment,
  workdir: str | Path,
  *,
  state: train_state.TrainState | None = None,
  split: str | None = None,
  train_seconds: float = math.nan,
  first_in_process: bool = False,
  operating_points: dict[str, float] | None = None,
  workers: int = 1,
  out: str | Path | None = None,
  overwrite: bool = False,
  examples: Iterable[dict[str, Any]] | None = None,
  num_examples: int | None = None,
) -> EvalRecord:
  """Scores the newest checkpoint of the run in `workdir` (or `state`) on its test split (or
  `split`) under every protocol of the experiment's `EvalPlan`: restore, predict and score
  one photo at a time (`stream_score`: counts kept, maps dropped; from `examples`, e.g. a
  folder's records, when given), write (`eval_records.write_eval_outputs`, eval.json last).

  The files go to the results folder (`eval_records.results_dir`: the workdir for the run's
  own test split; `out` instead when given, crackjax-evaluate's): eval.json (the record with
  the per-image rows), epoch_<NNN>.json when the step ends an epoch, eval_per_image.csv (its
  rows appended to eval_per_image.csv.partial as the photos are scored), the plots,
  threshold.json and, if the plan says so, probs/. A step older than the results there (its
  newer checkpoint damaged) writes to `eval_records.step_results_dir` instead, unless
  `overwrite`. `operating_points` ({name: threshold}) adds P/R/F1 at those thresholds per
  protocol; `workers` processes count the tolerance protocols. docs/evaluation.md lists the
  files.

  Returns:
    The evaluation record (also written to eval.json).
  """
  plan = experiment.eval_plan
  split = split or plan.split
  if state is None:
    state = experiment.states.restore(workdir, inference=True)  # no optimiser state needed
  step = int(jax.device_get(state.step))
  out, target = eval_records.folders(plan, Path(workdir), split, step, out, overwrite)
  t0 = time.perf_counter()  # opening the split counts as the evaluation's
  reread = None
  if examples is None:
    examples = experiment.splits.examples(split)
    num_examples = len(experiment.splits.source(split))
    reread = functools.partial(loader.eval_example, experiment.splits.source(split))
  record = _score_and_record(
    experiment,
    state,
    split,
    examples,
    num_examples,
    target,
    t0=t0,
    desc=f'score {split}',
    workers=workers,
    operating_points=operating_points,
    train_seconds=train_seconds,
    first=first_in_process,
    members=True,
    hparams=experiment.hparams,
    reread=reread,
  )
  if jax.process_index() == 0:
    # The epoch record is that step's own (epoch_<NNN>.json), beside the others.
    eval_records.write_epoch_record(out, record, experiment.schedule.steps_per_epoch)
  return record


def evaluate_state(
  experiment: Experiment,
  state: train_state.TrainState,
  out: str | Path,
  *,
  operating_points: dict[str, float] | None = None,
  start_model: dict[str, Any] | None = None,
  desc: str = 'predict',
) -> EvalRecord:
  """Scores `state`, parameters that are no checkpoint of the run (e.g. the model file a
  fine-tuning starts from, `trainer.before_after`), on the experiment's test split under every
  protocol of its `EvalPlan`, and writes that evaluation's files in `out` (eval.json with the
  per-image rows and `start_model`, eval_per_image.csv, the plots, threshold.json), as
  `evaluate_checkpoint` does, but no epoch record and nothing of the run's own results.
  `operating_points` as `evaluate_checkpoint`'s. Returns the record."""
  split = experiment.eval_plan.split
  t0 = time.perf_counter()
  examples = experiment.splits.examples(split)
  num_examples = len(experiment.splits.source(split))
  return _score_and_record(
    experiment,
    state,
    split,
    examples,
    num_examples,
    Path(out),
    t0=t0,
    desc=desc,
    operating_points=operating_points,
    start_model=start_model,
    reread=functools.partial(loader.eval_example, experiment.splits.source(split)),
  )


def _score_and_record(
  experiment: Experiment,
  state: train_state.TrainState,
  split: str,
  examples: Iterable[dict[str, Any]],
  total: int | None,
  target: Path,
  *,
  t0: float,
  desc: str,
  workers: int = 1,
  operating_points: dict[str, float] | None = None,
  train_seconds: float = math.nan,
  first: bool = False,
  members: bool = False,
  hparams: dict[str, Any] | None = None,
  start_model: dict[str, Any] | None = None,
  reread: Callable[[int], dict[str, Any]] | None = None,
) -> EvalRecord:
  """Predicts and scores `examples` (`stream_score`) and writes the evaluation's files in
  `target` (`eval_records.write_eval_outputs`, eval.json last); returns its record, timed from
  `t0`. `members`: a mixture's members' results in the record (a run's own evaluation);
  `hparams`: the hyper-parameters TensorBoard shows beside it; `start_model`: a
  fine-tuning's start model, as its eval.json records it; `reread`: example i again (the
  split's records), so that the figure shows photos from worst to best (`_shown`) instead of
  the first ones."""
  plan = experiment.eval_plan
  rule = plan.width_rule  # crackjax-evaluate's: each photo at half size where its cracks are wide
  scored = stream_score(
    plan,
    experiment.model,
    state,
    examples,
    total=total,
    desc=desc,
    workers=workers,
    operating_points=operating_points,
    probs_dir=target / 'probs' if plan.save_probability_maps else None,
    rows_path=target / eval_records.PER_IMAGE_CSV,
  )
  record = eval_records.evaluation_record(
    experiment.schedule.epoch_of,
    plan.dataset,
    state_facts(state),
    split,
    scored.names,
    scored.results,
    eval_seconds=time.perf_counter() - t0,
    train_seconds=train_seconds,
    first_in_process=first,
    per_image=True,
  )
  record = eval_records.add_points(record, scored.points)
  if members:
    record = eval_records.with_members(record, scored.members)
  if start_model is not None:
    record = dataclasses.replace(record, start_model=start_model)
  if jax.process_index() == 0:
    if rule is not None:
      print(width_rule.summary(scored.choices, rule), flush=True)
    shown = None
    images, gts, probs = scored.first  # the maps were written as they came
    if reread is not None and plan.num_qualitative:
      (images, gts, probs), shown = _shown(plan, experiment.model, state, scored, reread)
    eval_records.write_eval_outputs(
      plan,
      target,
      record,
      scored.results,
      images,
      probs,
      gts,
      scored.names,
      hparams,
      probs_saved=True,
      in_use=scored.in_use,
      shown=shown,
      extra=None if rule is None else [c.columns() for c in scored.choices],
    )
  return record


@dataclasses.dataclass
class Streamed:
  """What `stream_score` keeps of a split: names in order, `score`'s results (strict's rows with
  TP, FP, FN at the threshold in use), operating points ({protocol: {name: P/R/F1}}), a mixture's
  members' results (or None), the first ``plan.num_qualitative`` (images, ground truths, maps),
  and the threshold in use with each image's F1 there per protocol. No other map."""

  names: list[str]
  results: dict[str, ProtocolResult]
  points: dict[str, dict[str, OperatingPoint]]
  members: dict[str, MemberResult] | None
  first: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]
  in_use: tuple[float, dict[str, np.ndarray]] | None = None
  choices: list[width_rule.Choice] = dataclasses.field(default_factory=list)  # each photo's


def stream_score(
  plan: EvalPlan,
  model: nn.Module,
  state: train_state.TrainState,
  examples: Iterable[dict[str, Any]],
  *,
  total: int | None = None,
  desc: str = 'score',
  workers: int = 1,
  operating_points: dict[str, float] | None = None,
  probs_dir: Path | None = None,
  rows_path: Path | None = None,
) -> Streamed:
  """Predicts and scores `examples` (`loader.eval_examples`' records) one at a time under
  every protocol of `plan`: the results of `score` (and of `member_results`,
  `evaluation.at_threshold` at `operating_points`) on the same images, to the last bit, with
  memory that does not grow with their number (`evaluation.streaming.StreamScorer`: counts
  kept, maps dropped). The next photo is read while one is predicted (`read_ahead`), and the
  tolerance protocols count on `workers` processes while the next ones are predicted. One
  progress bar (process 0, stderr): photos scored, photos/s and the time left of `total`.
  `probs_dir`: each map written there as it comes (`plots.save_probability_maps`), on
  process 0. `rows_path`: the evaluation's eval_per_image.csv, whose rows are appended to
  ``<rows_path>.partial`` as each photo is scored (`plots.PerImageRows`, process 0), until
  `eval_records.write_eval_outputs` writes the whole CSV.

  Raises:
    ValueError: no example (`evaluate`'s 'no images to evaluate'), or a bad map.
  """
  params = train_state.local_params(state)
  batch_stats = train_state.local_batch_stats(state)  # BatchNorm's running averages, or None
  keep = plan.num_qualitative
  names: list[str] = []
  choices: list[width_rule.Choice] = []
  first: tuple[list, list, list] = ([], [], [])
  main = jax.process_index() == 0
  sizes = dict(plan.grids)  # computed when the plan was made
  grids = {p: sizes[p] for p in plan.protocols}
  rows = plots.PerImageRows(rows_path, plan.protocols) if rows_path and main else None
  with (
    rows or contextlib.nullcontext(),
    tqdm.tqdm(total=total, desc=desc, unit='photo', disable=not main) as bar,
    StreamScorer(
      grids,
      tail_thresholds=plan.tail_thresholds,
      operating_points=operating_points,
      workers=workers,
      progress=bar.update,
      on_image=(lambda i, scores: rows.add(names[i], scores)) if rows else None,
    ) as scorer,
  ):
    reading = read_ahead(examples)
    try:
      for ex in reading:
        prob, choice = _predict(plan, model, params, batch_stats, ex['image'])
        choices.append(choice)
        gt = ex['mask'][..., 0]
        names.append(ex['name'])  # first: `add` may hand its counts to `on_image` at once
        scorer.add(prob, gt)
        if len(first[0]) < keep:
          for kept, x in zip(first, (ex['image'], gt, prob), strict=True):
            kept.append(x)
        if probs_dir is not None and main:
          plots.save_probability_maps(probs_dir, [prob], [ex['name']])
    finally:
      reading.close()
    if not names:
      raise ValueError('no images to evaluate')
    results, points = scorer.results()
    members = _members_of(names, scorer)
    used = eval_records.threshold_in_use(results, operating_points)
    in_use = (used, {p: scorer.image_f1(p, used) for p in plan.protocols})
    results = eval_records.with_tp_fp_fn(results, scorer.tp_fp_fn(used))
  return Streamed(names, results, points, members, first, in_use, choices)


def _predict(plan: EvalPlan, model: nn.Module, params, batch_stats, image: np.ndarray):
  """The map of one image at the plan's test-time scales and flip, or at half size where the
  plan's width rule says its cracks are wide; with the rule's choice (`width_rule.apply`)."""

  def at(scales: tuple[float, ...]) -> np.ndarray:
    [prob] = predict_probabilities(
      params, model, [image], batch_stats=batch_stats, scales=scales, flip=plan.flip
    )
    return prob

  check_scaled_size(*image.shape[:2], plan.scales, input_multiple(model))
  half = (width_rule.HALF,)
  return width_rule.apply(at(plan.scales), lambda: at(half), plan.width_rule, plan.scales)


def _shown(
  plan: EvalPlan,
  model: nn.Module,
  state: train_state.TrainState,
  scored: Streamed,
  reread: Callable[[int], dict[str, Any]],
) -> tuple[tuple[list, list, list], tuple[list[str], list[str]]]:
  """The figure's images: spread from worst to best by F1 at the threshold in use (the
  first protocol's; `spread_by_f1`), read again and predicted again (a few
  photos: the stream kept no map). ((images, ground truths, maps), (names, captions))."""
  f1 = scored.in_use[1][next(iter(scored.in_use[1]))]
  chosen = spread_by_f1(list(f1), plan.num_qualitative)
  params = train_state.local_params(state)
  batch_stats = train_state.local_batch_stats(state)
  images, gts, probs, names, captions = [], [], [], [], []
  for i, caption in chosen:
    ex = reread(i)
    images.append(ex['image'])
    gts.append(ex['mask'][..., 0])
    probs.append(_predict(plan, model, params, batch_stats, ex['image'])[0])
    names.append(scored.names[i])
    captions.append(caption)
  return (images, gts, probs), (names, captions)


def spread_by_f1(f1: Sequence[float], k: int) -> list[tuple[int, str]]:
  """`k` images spread over the ranking by `f1` (ascending, ties by index): the worst, the
  median and the best (k >= 3), then evenly spaced ranks between them; (index, caption)."""
  n = len(f1)
  k = min(k, n)
  if k <= 0:
    return []
  order = sorted(range(n), key=lambda i: (f1[i], i))
  ranks = {0, (n - 1) // 2, n - 1} if k >= 3 else {0, n - 1}
  for j in range(k):  # evenly spaced ranks fill the rest
    if len(ranks) >= k:
      break
    ranks.add(round(j * (n - 1) / (k - 1)))
  ranks = sorted(ranks)[:k] if k > 1 else [0]
  out = []
  for r in ranks:
    i = order[r]
    word = 'worst' if r == 0 else 'best' if r == n - 1 else 'median' if r == (n - 1) // 2 else ''
    where = word or f'rank {r + 1} of {n}'
    out.append((i, f'{where}, F1 {f1[i]:.2f}'))
  return out


def _members_of(names: Sequence[str], scorer: StreamScorer) -> dict[str, MemberResult] | None:
  """`member_results` from the counts a `StreamScorer` kept."""
  return eval_records.by_member(names, lambda rows: scorer.results(rows)[0])


def predict_examples(
  model: nn.Module,
  state: train_state.TrainState,
  examples: Sequence[dict[str, Any]],
  *,
  desc: str = 'predict',
) -> list[np.ndarray]:
  """The crack probability map of every example's image (`loader.eval_examples` records),
  predicted by `model` with `state`'s parameters, with a progress bar on process 0."""
  params = train_state.local_params(state)
  batch_stats = train_state.local_batch_stats(state)  # BatchNorm's running averages, or None
  images = (ex['image'] for ex in examples)
  return list(
    tqdm.tqdm(
      predict_probabilities(params, model, images, batch_stats=batch_stats),
      total=len(examples),
      desc=desc,
      unit='img',
      disable=jax.process_index() != 0,
    )
  )
