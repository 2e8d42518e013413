"""The step size of every step: `LearningRate`, derived once from ``config.learning_rate``,
``config.lr_schedule`` and ``config.model_init.start_step`` by `crackjax.experiment.build`.

The schedule is a function of the run's global step, so a run warm-started from a model file
exported at step S (``config.model_init.start_step=S``) resumes the schedule at step S: Adam's
own counter starts at 0 there, and `LearningRate.optax_schedule` adds S back.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import optax

#: ``config.lr_schedule.name`` values.
SCHEDULES = ('constant', 'cosine')


@dataclasses.dataclass(frozen=True)
class LearningRate:
  """The learning rate at each global step.

  Attributes:
    peak: ``config.learning_rate``: the step size before any decay.
    name: 'constant' (``peak`` at every step, the paper's Adam setting) or 'cosine' (``peak``
      until ``decay_from_step``, then a half cosine down to ``end_factor * peak`` at
      ``end_step``, held after it).
    warmup_steps: a linear rise from 0 over this many steps after ``start_step``: the steps of a
      fresh or warm-started state, whose Adam moments start at zero.
    decay_from_step / end_step: the cosine's first and last global steps ('cosine' only).
    end_factor: the last step's rate as a fraction of ``peak``.
    start_step: the global step a fresh state starts at (``config.model_init.start_step``: 0,
      or the step of the model file a run is warm-started from).
  """

  peak: float
  name: str = 'constant'
  warmup_steps: int = 0
  decay_from_step: int = 0
  end_step: int = 0
  end_factor: float = 0.0
  start_step: int = 0

  @property
  def is_constant(self) -> bool:
    """Whether every step takes ``peak``: Adam at a float, whose optimiser state has no
    schedule counter (so runs from before schedules existed restore as they were)."""
    return self.name == 'constant' and self.warmup_steps == 0

  def at(self, step):
    """The rate of global step `step` (the step being taken counts from 0; a jnp scalar)."""
    step = jnp.asarray(step, jnp.float32)
    rate = jnp.asarray(self.peak, jnp.float32)
    if self.name == 'cosine':
      span = max(self.end_step - self.decay_from_step, 1)
      t = jnp.clip((step - self.decay_from_step) / span, 0.0, 1.0)
      rate = rate * (self.end_factor + (1 - self.end_factor) * 0.5 * (1 + jnp.cos(math.pi * t)))
    if self.warmup_steps:
      rate = rate * jnp.clip((step - self.start_step + 1) / self.warmup_steps, 0.0, 1.0)
    return rate

  def optax_schedule(self) -> optax.Schedule:
    """The schedule for optax, whose counter starts at 0 at ``start_step``."""
    return lambda count: self.at(count + self.start_step)


def problems(c: dict) -> list[str]:
  """What is wrong with the plain config `c`'s ``lr_schedule`` and ``model_init.start_step``,
  one line each (checked with the rest of the config, before any work)."""
  out = []
  s = c.get('lr_schedule') or {}
  name = s.get('name', 'constant')
  if name not in SCHEDULES:
    out.append(f'config.lr_schedule.name={name!r} must be one of {list(SCHEDULES)}.')
  ints = ('warmup_steps', 'decay_from_step', 'end_step')
  for field in ints:
    v = s.get(field, 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
      out.append(f'config.lr_schedule.{field}={v!r} must be an integer >= 0.')
  f = s.get('end_factor', 0.0)
  if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
    out.append(f'config.lr_schedule.end_factor={f!r} must be a number in [0, 1].')
  if name == 'cosine' and not out and s.get('end_step', 0) <= s.get('decay_from_step', 0):
    out.append(
      f'config.lr_schedule.end_step={s.get("end_step")} must be after decay_from_step='
      f'{s.get("decay_from_step")} for the cosine schedule.'
    )
  start = (c.get('model_init') or {}).get('start_step', 0)
  if isinstance(start, bool) or not isinstance(start, int) or start < 0:
    out.append(f'config.model_init.start_step={start!r} must be an integer >= 0.')
  elif start and not (c.get('model_init') or {}).get('pretrained'):
    out.append(
      f'config.model_init.start_step={start} needs config.model_init.pretrained: only a run '
      'warm-started from a model file begins past step 0.'
    )
  return out


def of_config(c: dict) -> LearningRate:
  """The `LearningRate` of the plain config `c` (checked by `problems`)."""
  s = c.get('lr_schedule') or {}
  return LearningRate(
    peak=float(c['learning_rate']),
    name=s.get('name', 'constant'),
    warmup_steps=int(s.get('warmup_steps', 0)),
    decay_from_step=int(s.get('decay_from_step', 0)),
    end_step=int(s.get('end_step', 0)),
    end_factor=float(s.get('end_factor', 0.0)),
    start_step=int((c.get('model_init') or {}).get('start_step', 0) or 0),
  )
