"""How a training loop ends early: what it keeps (`keep`: the metrics logged, a checkpoint of
the newest finished step), and the exception that says so (`ending`: `after_interrupt` for
Ctrl-C and SIGTERM, `after_divergence` for a non-finite step, docs/troubleshooting.md's
decision). `crackjax.trainer.loop` calls `keep` and `ending` on its way out.
"""

from __future__ import annotations

from pathlib import Path

import jax
from absl import logging

from crackjax.engine import checkpoint_saves, checkpoints
from crackjax.engine import step as step_lib
from crackjax.runs import exits


def keep(error, state, step, start_step, saved_step, log, mngr, metadata=None) -> tuple:
  """Keeps what an interrupted loop can keep; returns (what is kept, in words, the save's
  failure: `checkpoint_saves.save_failure`, or None)."""
  if isinstance(error, checkpoint_saves.CheckpointSaveError):
    return '', None  # the disk refused a save: do not try another; its line says what is kept
  try:
    log.flush()
  except step_lib.NonFiniteError:
    pass  # a non-finite step since the last save: nothing newer to keep
  else:
    # Nothing finished in this run (e.g. the first batch failed): saving now would leave a
    # checkpoint of the initial state that the next run silently resumes from. A state
    # donated to a step that never returned holds nothing valid either.
    if step != start_step and saved_step != step and not isinstance(error, step_lib.NonFiniteError):
      if buffers_deleted(state):
        logging.warning('Interrupted inside the train step after step %d.', step)
      else:
        logging.warning('Saving checkpoint of step %d before exiting.', step)
        try:
          checkpoint_saves.save(mngr, step, state, force=True, metadata=metadata)
        except checkpoint_saves.CheckpointSaveError as e:
          logging.warning('%s', e)
  failed = checkpoint_saves.save_failure(mngr, error)
  complete = checkpoints.complete_steps(mngr.directory)
  return f'step {complete[-1]} in {mngr.directory}' if complete else '', failed


#: How every stop line ends: the same command goes on.
AGAIN = 'run the same command again'


def ending(
  error: BaseException,
  kept: str,
  failed: BaseException | None,
  workdir: Path,
  step: int,
  start_step: int,
  total_steps: int,
) -> BaseException | None:
  """The exception that ends a loop stopped by `error`, worded with what was `kept`: the save's
  own failure if the disk refused the checkpoint too (`failed`, `keep`'s: its line says what
  is kept), a non-finite step's with what to do next (`after_divergence`), Ctrl-C's or
  SIGTERM's one line (`after_interrupt`); None for any other error (it propagates as it is)."""
  if failed is not None:
    return failed
  if isinstance(error, step_lib.NonFiniteError):
    return step_lib.NonFiniteError(f'{error} {after_divergence(kept, workdir)}')
  return after_interrupt(error, step, start_step, total_steps, kept)


def after_interrupt(error, step: int, start_step: int, total_steps: int, kept: str):
  """The one-line exception that ends a loop stopped by Ctrl-C or SIGTERM; None otherwise."""
  if not isinstance(error, (KeyboardInterrupt, exits.Terminated)):
    return None
  what, kind = 'stopped by SIGTERM (a time limit or kill)', exits.Terminated
  if isinstance(error, KeyboardInterrupt):
    what, kind = 'interrupted (Ctrl-C)', exits.Interrupted
  where = f'at step {step} of {total_steps}'
  if step == start_step:
    where = f'before step {step + 1} of {total_steps} finished'
  if not kept:
    return kind(f'{what} {where}; no checkpoint was saved yet: {AGAIN} to start.')
  return kind(f'{what} {where}; the checkpoint of {kept} is kept: {AGAIN} to resume from it.')


def after_divergence(kept: str, workdir: Path) -> str:
  """What to do after a non-finite step: the decision of docs/troubleshooting.md. A run's
  workdir resumes only its own config (its fingerprint includes the learning rate), so that
  its results always follow from its config.json; a workdir with no checkpoint holds no
  progress and takes any config."""
  if not kept:
    return (
      f'No checkpoint was saved, so --workdir={workdir} takes another config: run again with '
      'a lower --config.learning_rate (or check the data).'
    )
  return (
    f'The last good checkpoint is {kept} (kept). To go on with a lower '
    '--config.learning_rate, start a new --workdir (this one resumes only its own config), '
    'or check the data.'
  )


def buffers_deleted(tree) -> bool:
  """Whether any array of `tree` was deleted (donated to a jitted call that did not return)."""
  return any(isinstance(x, jax.Array) and x.is_deleted() for x in jax.tree.leaves(tree))
