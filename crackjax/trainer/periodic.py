"""The periodic evaluation of a training run: `EpochEvaluator`, called by the loop after the
epochs of the run's `Schedule` (``eval.every_epochs``), scores the test split
(`crackjax.trainer.scoring`) and writes each epoch's record (`crackjax.trainer.eval_records`),
in the background while the next epoch trains if the plan says so.
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from absl import logging

from crackjax.engine import train_state
from crackjax.evaluation.result import EvalRecord, MemberResult, ProtocolResult
from crackjax.experiment.build import Experiment
from crackjax.runs import identity
from crackjax.runs.metric_writer import MetricWriter
from crackjax.trainer import eval_records, scoring


class EpochEvaluator:
  """The periodic evaluation of the run's `Schedule` (``eval_every_epochs``; a periodic
  action, as clu's): after every N-th epoch (and the last) it scores the test split and writes
  the epoch's record (`eval_records.evaluation_record`, `eval_records.write_epoch_record`) in
  the run's results directory.

  At the epochs of ``full_eval_epochs`` and the last one it scores every protocol of the
  `EvalPlan`; at the others those of its ``curve_protocols`` (default the same), a cheaper set
  for F1-against-epoch curves. The test images are read once.

  By default (``background_workers`` = 0) an epoch is scored in the loop as
  `evaluate_checkpoint` scores (`stream_score`: each map counted and dropped), so memory does
  not grow with the test split's maps. With the plan's ``background_workers`` = N >= 1 the
  maps are predicted in the training loop (the accelerator's work; the next step donates the
  state) and held until a background thread has scored them, the tolerance protocols
  counting on N processes, while the next epoch trains: the metrics are numpy and scipy work
  on the host, which the accelerator need not wait for. Both write the same record to the
  last bit. At most one epoch is in flight (the next evaluation first waits for it), so a
  process killed mid-training loses at most the newest epoch's record, which the next run
  redoes from its checkpoint (`missing`); `finish` waits for it at the end of training.
  """

  def __init__(self, experiment: Experiment, workdir: str | Path):
    self.experiment = experiment
    self.plan, self.schedule = experiment.eval_plan, experiment.schedule
    self.split = self.plan.split
    self.directory = eval_records.results_dir(self.plan, workdir, self.split)
    self._examples: list[dict[str, Any]] | None = None
    self._clock, self._first = time.perf_counter(), True
    self._workers = self.plan.background_workers
    self._executor: concurrent.futures.ThreadPoolExecutor | None = None
    self._pending: tuple[int, concurrent.futures.Future] | None = None

  def due(self, epoch: int) -> bool:
    return self.schedule.evaluates(epoch)

  def protocols_at(self, epoch: int) -> tuple[str, ...]:
    curve = self.plan.curve_protocols
    if not curve or self.schedule.full_at(epoch):
      return self.plan.protocols
    return curve

  def missing(self, step: int) -> int | None:
    """The epoch that `step` ends if it is due and has no whole record (a process that died
    while evaluating it), else None."""
    spe = self.schedule.steps_per_epoch
    if not step or step % spe or not self.due(step // spe):
      return None
    epoch = step // spe
    required = self.protocols_at(epoch)  # a record lacking one of these is not whole
    done = identity.evaluated_epochs(self.directory, required=required)
    return None if epoch in done else epoch

  def __call__(
    self, state: train_state.TrainState, epoch: int, *, trained: bool = True
  ) -> EvalRecord | None:
    """Scores `state` (the end of `epoch`), writes and returns its record (None while it is
    scored in the background). `trained`: whether the time since the last call was spent
    training (else its train_seconds is NaN). The training time of the next call is counted
    from the end of this one."""
    train_seconds = time.perf_counter() - self._clock if trained else math.nan
    self.finish()  # the previous epoch's record first: at most one epoch in flight
    t0 = time.perf_counter()
    if self._examples is None:
      self._examples = list(self.experiment.splits.examples(self.split))
    plan = self.plan.with_protocols(self.protocols_at(epoch))
    names = [ex['name'] for ex in self._examples]
    first = self._first
    self._first = self._first and not trained
    # Now: the next train step may donate the state's buffers.
    facts = scoring.state_facts(state)

    def record_of(
      results: dict[str, ProtocolResult],
      members: dict[str, MemberResult] | None,
      shown: tuple[Sequence[np.ndarray], Sequence[np.ndarray], Sequence[np.ndarray]],
    ) -> EvalRecord:
      """The epoch's record, written; `shown`: (images, ground truths, maps), the first
      ``num_qualitative`` at least, for TensorBoard's panels."""
      record = eval_records.evaluation_record(
        self.schedule.epoch_of,
        self.plan.dataset,
        facts,
        self.split,
        names,
        results,
        eval_seconds=time.perf_counter() - t0,
        train_seconds=train_seconds,
        first_in_process=first,
      )
      record = eval_records.with_members(record, members)
      self._write(record, epoch)
      if jax.process_index() == 0:
        self._write_tensorboard(record, results, *shown)
      return record

    if not self._workers:
      # In the loop: streamed as `evaluate_checkpoint` scores (counts kept, maps dropped), so
      # memory does not grow with the test split; the same record to the last bit.
      model, desc = self.experiment.model, f'score, epoch {epoch}'
      scored = scoring.stream_score(plan, model, state, self._examples, total=len(names), desc=desc)
      record = record_of(scored.results, scored.members, scored.first)
      self._clock = time.perf_counter()
      return record
    # Beside training: the maps are predicted now (the next train step donates the state's
    # buffers) and held until the background thread has scored them: one epoch's at most.
    probs = scoring.predict_examples(
      self.experiment.model, state, self._examples, desc=f'predict, epoch {epoch}'
    )
    gts = [ex['mask'][..., 0] for ex in self._examples]
    images = [ex['image'] for ex in self._examples]

    def job() -> EvalRecord:
      results = scoring.score(probs, gts, plan, workers=self._workers, progress=False)
      members = scoring.member_results(names, probs, gts, plan, workers=self._workers)
      return record_of(results, members, (images, gts, probs))

    if self._executor is None:
      self._executor = concurrent.futures.ThreadPoolExecutor(1, 'crackjax-eval')
    self._pending = (epoch, self._executor.submit(job))
    self._clock = time.perf_counter()
    return None

  def _write(self, record: EvalRecord, epoch: int) -> None:
    if jax.process_index() == 0:
      eval_records.write_epoch_record(self.directory, record, self.schedule.steps_per_epoch)
    first = next(iter(record.results.values()))
    seconds = record.train_seconds
    logging.info(
      'Epoch %d: %s, %.1f s evaluation%s, ODS F1 %.4f (%s protocol).',
      epoch,
      # NaN: evaluated later from its checkpoint, as the runner's line says (paper/jobs.py).
      f'{seconds:.1f} s training'
      if math.isfinite(seconds)
      else 'training time not measured (evaluated later from its checkpoint)',
      record.eval_seconds,
      ' (scored beside training)' if self._workers else '',
      first.ods.f1,
      first.protocol,
    )

  def _write_tensorboard(self, record, results, images, gts, probs) -> None:
    """The epoch's scalars (as the final evaluation's: an F1-against-epoch curve), PR curves,
    qualitative panels (of the first `images`, `gts`, `probs`) and the run's hyper-parameters,
    to TensorBoard and metrics.jsonl."""
    writer = MetricWriter(self.directory)
    try:
      for protocol, r in results.items():
        writer.write_scalars(record.step, r.scalars(), kind=f'eval_{self.split}_{protocol}')
      threshold = eval_records.mask_threshold(results)
      shown = (images, gts, probs)
      extras = eval_records.tensorboard_extras(
        self.plan, record, results, shown, threshold, self.experiment.hparams
      )
      writer.write_evaluation(record.step, **extras)
    finally:
      writer.close()

  def finish(self) -> EvalRecord | None:
    """Waits for the epoch scored in the background, if any, and returns its record (written
    when its scoring ended); an error of that scoring is raised here."""
    if self._pending is None:
      return None
    _, future = self._pending
    self._pending = None
    return future.result()

  def close(self) -> None:
    """`finish`, then stops the background thread."""
    try:
      self.finish()
    finally:
      if self._executor is not None:
        self._executor.shutdown()
        self._executor = None

  def seconds_since_last(self) -> float:
    """Wall seconds since the last evaluation (or the start): the training time before it."""
    return time.perf_counter() - self._clock

  @property
  def first(self) -> bool:
    """Whether no evaluation of this process has counted training time yet."""
    return self._first
