"""The training loop: feeds the jitted step, logs, checkpoints and evaluates each epoch.

`train_and_evaluate` holds the workdir's lock, checks the run's identity, resumes from the
latest checkpoint, runs `step.make_train_step`'s step over the prefetched batches, writes the
per-step metrics (`runs.metric_writer`), saves a checkpoint per epoch and on the way out of an
interruption, and scores epochs and the final state (`evaluation.scoring`).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import tqdm
from absl import logging

from crackjax.evaluation.scoring import EpochEvaluator, evaluate_checkpoint
from crackjax.experiment import Experiment
from crackjax.runs import identity
from crackjax.runs.metric_writer import MetricWriter
from crackjax.training import step as step_lib
from crackjax.training.prefetch import prefetch_to_device, release_freed_host_memory
from crackjax.training.train_state import TrainState


class _MetricLog:
  """Buffers per-step metrics on device; `flush` fetches them in one transfer, checks them
  for non-finite values and writes their means."""

  def __init__(self, writer: MetricWriter, bar: tqdm.tqdm, last_good_step):
    self.pending: list[tuple[int, dict[str, jax.Array]]] = []
    self._writer, self._bar, self._last_good_step = writer, bar, last_good_step
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
          f'Non-finite loss or gradient at step {s} (loss={m["loss"]}, grad_norm='
          f'{m["grad_norm"]}); stopping. The last good checkpoint is '
          f'{self._last_good_step()}.'
        )
    names = [k for k in fetched[-1][1] if k != 'finite']
    means = {k: float(np.mean([m[k] for _, m in fetched])) for k in names}
    now = time.time()
    means['steps_per_sec'] = len(fetched) / max(now - self._t0, 1e-9)
    self._t0 = now
    self._writer.write_scalars(fetched[-1][0], means)
    self._bar.set_postfix({k: f'{means[k]:.4g}' for k in ('loss', 'q') if k in means})


EpochCallback = Callable[[TrainState, int], None]


def buffers_deleted(tree) -> bool:
  """Whether any array of `tree` was deleted (donated to a jitted call that did not return)."""
  return any(isinstance(x, jax.Array) and x.is_deleted() for x in jax.tree.leaves(tree))


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
    experiment: what to train (`crackjax.experiment.build`): its config, model, loss,
      augmentation, optimiser, data and mesh.
    workdir: directory for checkpoints, logs and evaluation results.
    evaluate_after: run `evaluate_checkpoint` on the test split after training.
    on_epoch_end: called as `on_epoch_end(state, epoch)` after each epoch's checkpoint is
      saved and (``config.eval.every_epochs``) its evaluation record written: a periodic
      action, as clu's. It must be done with `state` when it returns (the next step
      donates it).

  Returns:
    The final TrainState.

  Raises:
    checkpoints.CheckpointError: the workdir has checkpoints but none can be read, or they
      were written by a different model configuration (one-line message).
    identity.RunMismatchError: the workdir's run has another config fingerprint.
    identity.RunLockedError: another process holds the workdir.
  """
  workdir = Path(workdir)
  # Process 0 speaks for the run (the hosts of a multi-host run share one workdir).
  leader = jax.process_index() == 0
  with identity.lock(workdir) if leader else contextlib.nullcontext():
    identity.check_identity(workdir, experiment.fingerprint, record=leader)
    return _train_and_evaluate(experiment, workdir, evaluate_after, on_epoch_end)


def _close_quietly(evaluator: EpochEvaluator) -> None:
  """`evaluator.close()` while another error is on its way out: that one is the news."""
  try:
    evaluator.close()
  except Exception as e:  # noqa: BLE001 - logged, the interrupting error propagates
    logging.warning('The evaluation scored in the background failed too: %s', e)


def _train_and_evaluate(
  experiment: Experiment, workdir: Path, evaluate_after: bool, on_epoch_end
) -> TrainState:
  config = experiment.config
  evaluator = EpochEvaluator(experiment, workdir)
  mesh = experiment.mesh
  mngr = experiment.checkpoint_manager(workdir)
  state = experiment.restore_or_init(workdir, mngr)
  start_step = int(jax.device_get(state.step))
  total_steps = config.num_epochs * config.steps_per_epoch
  if jax.process_index() == 0:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2))
  if start_step:
    logging.info('Resuming at step %d of %d.', start_step, total_steps)
  last = evaluate_after and start_step == total_steps
  missing = evaluator.missing(start_step)
  if missing is not None and not last:
    # The process that saved this epoch died while evaluating it (or before): do it now.
    logging.warning('Evaluating epoch %d, saved before an interruption.', missing)
    evaluator(state, missing, trained=False)

  step_fn = experiment.train_step(state)
  # Exactly the batches of the remaining steps, so the read-ahead stops at the last one.
  batches = prefetch_to_device(
    itertools.islice(experiment.train_iterator(start_step), max(total_steps - start_step, 0)),
    mesh,
  )
  saved_step = start_step if mngr.latest_step() == start_step else None
  step = start_step
  writer = MetricWriter(workdir)
  bar = tqdm.tqdm(
    total=total_steps,
    initial=start_step,
    unit='step',
    dynamic_ncols=True,
    disable=jax.process_index() != 0,
    desc='train',
  )
  log = _MetricLog(writer, bar, lambda: f'step {mngr.latest_step()} in {mngr.directory}')
  try:
    while step < total_steps:
      state, metrics = step_fn(state, next(batches))
      if step == start_step:  # the first call compiled the step
        release_freed_host_memory()
      step += 1
      log.add(step, metrics)
      bar.update(1)
      if step % config.log_every_steps == 0:
        log.flush()
      if step % config.steps_per_epoch == 0 or step == total_steps:
        log.flush()  # never checkpoint a state that followed a non-finite step
        mngr.save(step, args=ocp.args.StandardSave(state))
        saved_step = step
        epoch = -(-step // config.steps_per_epoch)
        # The last epoch's record comes from the full evaluation below, if there is one.
        if evaluator.due(epoch) and not (evaluate_after and epoch == config.num_epochs):
          evaluator(state, epoch)
        if on_epoch_end is not None:
          on_epoch_end(state, epoch)
  except step_lib.NonFiniteError:
    _close_quietly(evaluator)
    raise
  except BaseException:
    # Interrupted (Ctrl-C, SIGTERM, an input error): keep the progress made so far if the
    # buffered metrics show it is finite; resume will continue from here.
    bar.close()  # ends the bar's line, so the warnings below start on their own
    try:
      log.flush()
      # Nothing finished in this run (e.g. the first batch failed): saving now would leave
      # a checkpoint of the initial state that the next run silently resumes from.
      if step != start_step and saved_step != step:
        if buffers_deleted(state):
          # Interrupted inside the step, after `state` was donated to it: nothing valid to
          # save; the last checkpoint stands.
          logging.warning(
            'Interrupted at step %d inside the train step: resuming from step %s.',
            step,
            saved_step,
          )
        else:
          logging.warning('Saving checkpoint of step %d before exiting.', step)
          mngr.save(step, args=ocp.args.StandardSave(state), force=True)
    except step_lib.NonFiniteError:
      pass
    # Then the record of an epoch scored in the background, if any (the checkpoint first: a
    # time limit's SIGTERM leaves two minutes).
    _close_quietly(evaluator)
    raise
  finally:
    batches.close()  # stops the prefetch thread
    bar.close()
    mngr.wait_until_finished()
    writer.close()
  evaluator.close()  # the last epoch scored in the background; its error, if any, here
  if evaluate_after:
    trained = step != start_step
    evaluate_checkpoint(
      experiment,
      workdir,
      state=state,
      train_seconds=evaluator.seconds_since_last() if trained else float('nan'),
      first_in_process=evaluator.first,
    )
  return state
