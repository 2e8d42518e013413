"""The training loop: feeds the jitted step, logs, checkpoints and evaluates each epoch.

`train_and_evaluate` holds the workdir's lock, checks the run's identity, resumes from the
latest checkpoint, runs `step.make_train_step`'s step over the prefetched batches, writes the
per-step metrics (`runs.metric_writer`), saves a checkpoint per epoch and on the way out of an
interruption (`stopping`: what is kept, the line that says so), and scores epochs
(`periodic`) and the final state (`scoring`).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import tqdm
from absl import logging
from jax.sharding import Mesh

from crackjax.engine import checkpoint_saves, checkpoints
from crackjax.engine import step as step_lib
from crackjax.engine.prefetch import prefetch_to_device, release_freed_host_memory
from crackjax.engine.train_state import TrainState
from crackjax.experiment.build import Experiment
from crackjax.models import pretrained
from crackjax.runs import exits, identity, logs
from crackjax.runs.metric_writer import MetricWriter
from crackjax.trainer import stopping
from crackjax.trainer.periodic import EpochEvaluator
from crackjax.trainer.scoring import evaluate_checkpoint


class _MetricLog:
  """Buffers per-step metrics on device; `flush` fetches them in one transfer, checks them
  for non-finite values and writes their means."""

  def __init__(self, writer: MetricWriter, bar: tqdm.tqdm):
    self.pending: list[tuple[int, dict[str, jax.Array]]] = []
    self._writer, self._bar = writer, bar
    self._t0 = time.time()

  def add(self, step: int, metrics: dict[str, jax.Array]) -> None:
    self.pending.append((step, metrics))

  def flush(self) -> None:
    if not self.pending:
      return
    fetched = list(
      zip([s for s, _ in self.pending], jax.device_get([m for _, m in self.pending]), strict=True)
    )
    self.pending.clear()
    for s, m in fetched:
      if not m['finite']:
        raise step_lib.NonFiniteError(
          f'non-finite loss or gradient at step {s} (loss={m["loss"]}, grad_norm='
          f'{m["grad_norm"]}); training stopped.'
        )
    names = [k for k in fetched[-1][1] if k != 'finite']
    means = {k: float(np.mean([m[k] for _, m in fetched])) for k in names}
    now = time.time()
    means['steps_per_sec'] = len(fetched) / max(now - self._t0, 1e-9)
    self._t0 = now
    self._writer.write_scalars(fetched[-1][0], means)
    self._bar.set_postfix({k: f'{means[k]:.4g}' for k in ('loss', 'q') if k in means})


EpochCallback = Callable[[TrainState, int], None]


def train_step_of(experiment: Experiment, state: TrainState, mesh: Mesh | None = None):
  """The jitted train step of `experiment`'s loss and augmentation for states shaped like
  `state`, over `mesh` (default the experiment's; `engine.step.make_train_step`)."""
  return step_lib.make_train_step(
    mesh or experiment.states.mesh,
    state,
    loss_fn=experiment.loss_fn,
    augment_fn=experiment.augment_fn,
    seed=experiment.states.seed,
  )


def train_and_evaluate(
  experiment: Experiment,
  workdir: str | Path,
  *,
  evaluate_after: bool = True,
  on_epoch_end: EpochCallback | None = None,
) -> TrainState:
  """Trains `experiment` in `workdir`, resuming from its latest checkpoint if there is one.

  The workdir is held (`identity.lock`) while training, and a run started there under another
  config fingerprint is never resumed (`identity.check_identity`).

  Saves a checkpoint at the end of every epoch and when the loop exits early (an
  exception other than a non-finite loss, e.g. KeyboardInterrupt or SIGTERM turned into
  SystemExit) after at least one step of this run has finished. A non-finite loss or
  gradient raises `step.NonFiniteError` without saving, so the last checkpoint on disk is the
  last good one. A damaged latest checkpoint is set aside and the newest readable one resumed
  (`checkpoints.restore_latest_readable`).

  Args:
    experiment: what to train (`crackjax.experiment.build`): its model, loss,
      augmentation, optimiser, data, mesh and schedule (the loop reads no config field).
    workdir: directory for checkpoints, logs and evaluation results.
    evaluate_after: run `evaluate_checkpoint` on the test split after training.
    on_epoch_end: called as `on_epoch_end(state, epoch)` after each epoch's checkpoint is
      saved and (`Schedule.evaluates`) its evaluation record written: a periodic
      action, as clu's. It must be done with `state` when it returns (the next step
      donates it).

  Returns:
    The final TrainState.

  Raises:
    checkpoints.CheckpointError: the workdir has checkpoints but none can be read, or they
      were written by a different model configuration, or the latest is past the config's
      last step (a lowered num_epochs) (one-line message).
    identity.RunMismatchError: the workdir's run has another config fingerprint.
    identity.RunLockedError: another process holds the workdir.
  """
  workdir = Path(workdir)
  with identity.leader_lock(workdir):
    identity.check_identity(workdir, experiment.fingerprint, record=jax.process_index() == 0)
    return _train_and_evaluate(experiment, workdir, evaluate_after, on_epoch_end)


def restore_or_init(experiment: Experiment, workdir: Path, mngr) -> TrainState:
  """The newest readable checkpoint of `mngr`, else a fresh state with the initial weights of
  ``config.model_init`` (`pretrained.initialise`: logged and written to ``<workdir>/init.json``)."""

  def fresh() -> TrainState:
    state = experiment.states.fresh(experiment.splits.train_image_shape)
    # The file is read by the experiment, once (a fine-tuning's start model: its before-score too).
    return pretrained.initialise(state, experiment.init, workdir, arrays=experiment.init_arrays)

  states = experiment.states
  return checkpoints.restore_or_init(mngr, functools.partial(states.abstract, states.mesh), fresh)


def _close_quietly(evaluator: EpochEvaluator) -> None:
  """`evaluator.close()` while another error is on its way out: that one is the news."""
  try:
    evaluator.close()
  except Exception as e:  # noqa: BLE001 - logged, the interrupting error propagates
    logging.warning('The evaluation scored in the background failed too: %s', e)


def _finished(
  experiment: Experiment,
  workdir: Path,
  evaluator: EpochEvaluator,
  state: TrainState,
  start_step: int,
  evaluate_after: bool,
) -> bool:
  """Records config.json, says where the run resumes, and evaluates the epoch of `start_step`
  if its evaluation was lost; True if the run is finished and evaluated (nothing to do)."""
  total_steps = experiment.schedule.total_steps
  if start_step > total_steps:
    # Training on would do nothing, and the final evaluation would score (and record as the
    # run's result) a state that is no end of this config's training.
    schedule = experiment.schedule
    raise checkpoints.CheckpointError(
      f'the checkpoint of step {start_step} in {workdir / "checkpoints"} is past this '
      f"config's last step ({total_steps}: num_epochs={schedule.num_epochs} of "
      f'{schedule.steps_per_epoch} steps): pass --config.num_epochs='
      f'{schedule.epoch_of(start_step)} or more to train on from it, or --mode=eval to score it.'
    )
  if jax.process_index() == 0:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / 'config.json').write_text(experiment.config_json)
  if start_step:
    logging.info('Resuming at step %d of %d.', start_step, total_steps)
  last = evaluate_after and start_step == total_steps
  if last and identity.finally_evaluated(workdir, total_steps, experiment.protocols):
    logging.info(
      'The run in %s is finished (step %d of %d) and evaluated (eval.json): nothing to do. '
      'To score it again pass --mode=eval; to train longer, a new --workdir.',
      workdir,
      start_step,
      total_steps,
    )
    return True
  missing = evaluator.missing(start_step)
  if missing is not None and not last:
    # The process that saved this epoch died while evaluating it, or its record was damaged
    # and set aside: evaluate it now, saying which.
    why = identity.why_not_evaluated(evaluator.directory, missing, evaluator.protocols_at(missing))
    if experiment.init.start_step and start_step == experiment.init.start_step:
      # Only a fresh state begins at the warm start's step: a saved one is past it.
      why = f'the weights of {experiment.init.pretrained}, warm-started at its step'
    logging.warning(
      'Evaluating epoch %d from its checkpoint (step %d): %s.', missing, start_step, why
    )
    evaluator(state, missing, trained=False)
  return False


def _train_and_evaluate(
  experiment: Experiment, workdir: Path, evaluate_after: bool, on_epoch_end
) -> TrainState:
  schedule = experiment.schedule
  evaluator = EpochEvaluator(experiment, workdir)
  mesh = experiment.states.mesh
  # A save cut short (a killed process, a second Ctrl-C) leaves its temporary folder.
  checkpoints.remove_unfinished_saves(workdir / 'checkpoints')
  mngr = experiment.states.manager(workdir)
  state = restore_or_init(experiment, workdir, mngr)
  start_step = int(jax.device_get(state.step))
  total_steps = schedule.total_steps
  if _finished(experiment, workdir, evaluator, state, start_step, evaluate_after):
    return state
  step_fn = train_step_of(experiment, state, mesh)
  # Exactly the batches of the remaining steps, so the read-ahead stops at the last one.
  batches = prefetch_to_device(
    itertools.islice(
      experiment.splits.train_iterator(start_step), max(total_steps - start_step, 0)
    ),
    mesh,
  )
  saved_step = start_step if mngr.latest_step() == start_step else None
  step = start_step
  writer = MetricWriter(workdir, resume_step=start_step)
  bar = logs.progress_bar(start_step, total_steps)
  log = _MetricLog(writer, bar)
  exits.clear_interrupt()
  try:
    while step < total_steps:
      exits.raise_if_requested()  # a Ctrl-C or SIGTERM remembered but not raised
      batch = next(batches)
      if step == start_step:  # the first call compiles the step
        with exits.interrupts_deferred():
          state, metrics = step_fn(state, batch)
        release_freed_host_memory()
      else:
        state, metrics = step_fn(state, batch)
      step += 1
      log.add(step, metrics)
      bar.update(1)
      if step == start_step + 1:
        logs.restart_after_compiling(bar, step)
      if schedule.logs_at(step):
        log.flush()
        checkpoint_saves.check_saves(mngr)  # a full disk stops training here, not an epoch later
      if schedule.saves_at(step):
        log.flush()  # never checkpoint a state that followed a non-finite step
        checkpoint_saves.save(mngr, step, state, metadata=experiment.checkpoint_metadata)
        saved_step = step
        epoch = schedule.epoch_of(step)
        # The last epoch's record comes from the full evaluation below, if there is one.
        if schedule.evaluates(epoch) and not (evaluate_after and epoch == schedule.num_epochs):
          evaluator(state, epoch)
        if on_epoch_end is not None:
          on_epoch_end(state, epoch)
    checkpoint_saves.finish_saves(mngr)
  except BaseException as e:
    bar.close()  # ends the bar's line, so the lines below start on their own
    batches.close()  # stops the prefetch thread
    metadata = experiment.checkpoint_metadata
    kept, failed = stopping.keep(e, state, step, start_step, saved_step, log, mngr, metadata)
    # Then the record of an epoch scored in the background, if any (the checkpoint first: a
    # time limit's SIGTERM leaves two minutes).
    _close_quietly(evaluator)
    writer.close()
    ending = stopping.ending(e, kept, failed, workdir, step, start_step, total_steps)
    if ending is not None:
      raise ending from None
    raise
  batches.close()
  bar.close()
  writer.close()
  evaluator.close()  # the last epoch scored in the background; its error, if any, here
  if evaluate_after:
    _evaluate_final(experiment, workdir, state, evaluator, trained=step != start_step)
  return state


def _evaluate_final(
  experiment: Experiment,
  workdir: Path,
  state: TrainState,
  evaluator: EpochEvaluator,
  *,
  trained: bool,
) -> None:
  """The final evaluation of the trained `state` (`evaluate_checkpoint`), timed from the last
  periodic one (`trained`: this process trained since; else its training time is NaN)."""
  evaluate_checkpoint(
    experiment,
    workdir,
    state=state,
    train_seconds=evaluator.seconds_since_last() if trained else float('nan'),
    first_in_process=evaluator.first,
  )
