"""Which jobs of a campaign chunk fit its time limit, from the rates measured in earlier chunks.

A GPU chunk (scripts/reproduce_gpu.sh) has a few minutes and no way to carry a half-trained
full-width job to the next chunk, so a job cut at the limit is lost work. `plan` estimates each
job's wall time from the epochs that earlier runs on the same GPU kind, setting and number of
side-by-side jobs recorded (their epoch records: `train_seconds`, `eval_seconds`,
`first_in_process`), simulates the slots, and keeps only the jobs expected to end in time.

The estimate of a job with E epochs, R of them the rows' (evaluated under every protocol):

    first + (E - 1) * epoch + R * row_eval

where `first` is the median first epoch of a process (start-up, compilation, training and
evaluation), `epoch` the median later epoch that is no row's (training + curve evaluation) and
`row_eval` the median extra evaluation time of a row's epoch. Medians over all matching runs.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class Rates:
  """Seconds per part of a job, measured on one GPU kind with `side_by_side` jobs at once."""

  device_kind: str
  side_by_side: int
  first: float
  epoch: float
  row_eval: float
  runs: int  # how many runs the medians come from

  def job_seconds(self, epochs: int, row_epochs: int) -> float:
    """Expected wall seconds of a job trained from scratch."""
    return self.first + (epochs - 1) * self.epoch + row_epochs * self.row_eval


def _matches(run: Mapping[str, Any], device_kind: str, setting: Mapping[str, Any] | None) -> bool:
  hardware = run.get('hardware') or {}
  if hardware.get('device_kind') != device_kind:
    return False
  return setting is None or run.get('setting') == dict(setting)


def _timed(epoch: Mapping[str, Any]) -> bool:
  """Whether an epoch entry measures a rate: an epoch evaluated from a checkpoint has no
  training time (NaN), and a record of another version may lack a timing field."""
  times = [epoch.get(k) for k in ('train_seconds', 'eval_seconds')]
  return isinstance(epoch.get('first_in_process'), bool) and all(
    isinstance(t, int | float) and math.isfinite(t) for t in times
  )


def measured_rates(
  runs: Sequence[Mapping[str, Any]],
  device_kind: str,
  side_by_side: int,
  setting: Mapping[str, Any] | None = None,
) -> Rates | None:
  """The medians of the runs on `device_kind` with `side_by_side` jobs (and `setting`, if
  given); None when no such run has a first epoch and a later one."""
  first, epoch, row_extra = [], [], []
  used = 0
  for run in runs:
    if not _matches(run, device_kind, setting) or run.get('side_by_side') != side_by_side:
      continue
    row_epochs = {r['epochs'] for r in run['rows']}
    timed = [e for e in run['epochs'] if _timed(e)]
    later = [e for e in timed if not e['first_in_process']]
    plain = [e for e in later if e['epoch'] not in row_epochs]
    firsts = [e for e in timed if e['first_in_process'] and e['epoch'] == 1]
    if not plain or not firsts:
      continue
    used += 1
    first += [e['train_seconds'] + e['eval_seconds'] for e in firsts]
    epoch += [e['train_seconds'] + e['eval_seconds'] for e in plain]
    typical_eval = statistics.median(e['eval_seconds'] for e in plain)
    row_extra += [
      max(e['eval_seconds'] - typical_eval, 0.0) for e in later if e['epoch'] in row_epochs
    ]
  if not used:
    return None
  return Rates(
    device_kind=device_kind,
    side_by_side=side_by_side,
    first=statistics.median(first),
    epoch=statistics.median(epoch),
    row_eval=statistics.median(row_extra) if row_extra else 0.0,
    runs=used,
  )


@dataclasses.dataclass(frozen=True)
class Planned:
  """One job of the plan: its expected start and end (seconds from the chunk's start)."""

  job_id: str
  seconds: float
  start: float
  end: float
  fits: bool


def plan(
  jobs: Sequence[tuple[str, int, int]],
  rates: Rates,
  *,
  slots: int,
  budget_seconds: float,
  margin: float = 1.1,
) -> list[Planned]:
  """Simulates `slots` workers taking `jobs` (id, epochs, row epochs) in order; a job whose
  expected end (its estimate times `margin`) is past `budget_seconds` is not started, and the
  next ones are still tried (a shorter one may fit)."""
  free_at = [0.0] * slots
  out = []
  for job_id, epochs, row_epochs in jobs:
    seconds = margin * rates.job_seconds(epochs, row_epochs)
    slot = min(range(slots), key=free_at.__getitem__)
    start = free_at[slot]
    end = start + seconds
    fits = end <= budget_seconds
    if fits:
      free_at[slot] = end
    out.append(Planned(job_id, seconds, start, end, fits))
  return out


def describe(planned: Sequence[Planned], rates: Rates, budget_seconds: float) -> str:
  """The plan as lines a person reads before (and in the log of) a chunk."""
  lines = [
    f'Plan for {budget_seconds / 60:.1f} min on {rates.device_kind} with {rates.side_by_side} '
    f'jobs side by side (rates from {rates.runs} earlier run(s): first epoch {rates.first:.0f} s, '
    f"later epochs {rates.epoch:.1f} s, a row epoch's evaluation +{rates.row_eval:.1f} s):"
  ]
  for p in planned:
    when = f'{p.start / 60:4.1f}-{p.end / 60:4.1f} min' if p.fits else 'does not fit'
    lines.append(f'  {p.job_id:<32} ~{p.seconds / 60:4.1f} min  {when}')
  fit = sum(p.fits for p in planned)
  lines.append(f'{fit} of {len(planned)} jobs fit.')
  return '\n'.join(lines)
