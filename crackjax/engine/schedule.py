"""When a run steps, logs, saves and evaluates: `Schedule`, derived once from the config by
`crackjax.experiment.build` (the trainer reads these fields, never the config's)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Schedule:
  """The run's steps and the periodic actions on them.

  Attributes:
    steps_per_epoch: train steps per epoch (``config.steps_per_epoch``); a checkpoint is
      saved at the end of every epoch.
    num_epochs: epochs of the run (``config.num_epochs``).
    log_every_steps: steps between two metric flushes (``config.log_every_steps``).
    eval_every_epochs: the periodic evaluation after every N-th epoch and the last one
      (``config.eval.every_epochs``; 0: none).
    full_eval_epochs: epochs scored under every protocol even when the others use the
      cheaper curve protocols (``config.eval.full_epochs``; the last epoch always is).
  """

  steps_per_epoch: int
  num_epochs: int
  log_every_steps: int
  eval_every_epochs: int = 0
  full_eval_epochs: tuple[int, ...] = ()

  @property
  def total_steps(self) -> int:
    return self.num_epochs * self.steps_per_epoch

  def epoch_of(self, step: int) -> int:
    """The epoch that `step` falls in (its last step ends it)."""
    return -(-step // self.steps_per_epoch)

  def logs_at(self, step: int) -> bool:
    """Whether the metrics are flushed (and the saves checked) after `step`."""
    return step % self.log_every_steps == 0

  def saves_at(self, step: int) -> bool:
    """Whether a checkpoint is saved after `step`: an epoch's end, or the last step."""
    return step % self.steps_per_epoch == 0 or step == self.total_steps

  def evaluates(self, epoch: int) -> bool:
    """Whether the periodic evaluation scores the end of `epoch`."""
    every = self.eval_every_epochs
    return every > 0 and (epoch % every == 0 or epoch == self.num_epochs)

  def full_at(self, epoch: int) -> bool:
    """Whether `epoch` is scored under every protocol (the last one and `full_eval_epochs`)."""
    return epoch == self.num_epochs or epoch in self.full_eval_epochs
