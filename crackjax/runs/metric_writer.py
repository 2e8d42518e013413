"""Training metrics to TensorBoard event files and a JSON-lines log (process 0 only)."""

import json
import time
from collections.abc import Mapping
from pathlib import Path

import jax

from crackjax.runs import exits, outputs


class MetricWriter:
  """Writes scalars to `<workdir>/tensorboard` and `<workdir>/metrics.jsonl`.

  Only process 0 writes; on other processes every call is a no-op, so callers need no
  `if jax.process_index() == 0` of their own.

  A run resumed at `resume_step` replays the steps after it (they were logged, but their
  checkpoint was not saved): their rows are dropped from metrics.jsonl and TensorBoard is told
  to drop its events from `resume_step + 1` on (tensorboardX's ``purge_step``), so each step
  is logged once.
  """

  def __init__(self, workdir: str | Path, *, resume_step: int | None = None):
    self._active = jax.process_index() == 0
    self._tb = None
    self._jsonl = None
    if self._active:
      # Imported lazily: tensorboardX pulls in protobuf, which tests of other modules
      # need not pay for.
      from tensorboardX import SummaryWriter

      workdir = Path(workdir)
      workdir.mkdir(parents=True, exist_ok=True)
      path = workdir / 'metrics.jsonl'
      if resume_step is not None:
        _drop_rows_after(path, resume_step)
      purge = None if resume_step is None else resume_step + 1
      self._tb = SummaryWriter(str(workdir / 'tensorboard'), purge_step=purge)
      self._jsonl = open(path, 'a', encoding='utf-8')  # noqa: SIM115

  def write_scalars(self, step: int, scalars: Mapping[str, float], *, kind: str = 'train') -> None:
    """Logs `scalars` at `step` under the prefix `kind` (e.g. 'train', 'eval')."""
    if not self._active:
      return
    record = {'kind': kind, 'step': int(step), 'time': time.time()}
    for name, value in scalars.items():
      value = float(value)
      record[name] = value
      self._tb.add_scalar(f'{kind}/{name}', value, int(step))
    # Strict JSON: a diverged step's loss=nan is null here (TensorBoard keeps the NaN). A full
    # disk's error names the file (`exits.naming`): a write names none.
    with exits.naming(self._jsonl.name):
      self._jsonl.write(outputs.dumps(record) + '\n')
      self._jsonl.flush()

  def flush(self) -> None:
    if self._active:
      self._tb.flush()
      with exits.naming(self._jsonl.name):
        self._jsonl.flush()

  def close(self) -> None:
    if self._active:
      self._active = False
      self._tb.close()
      with exits.naming(self._jsonl.name):
        self._jsonl.close()


def _drop_rows_after(path: Path, step: int) -> None:
  """Rewrites the JSON-lines log `path` without its rows of steps after `step` (atomically:
  an interrupted rewrite leaves the old log). A line that is not a record (a write cut short
  by a crash) goes too."""
  if not path.is_file():
    return
  kept, dropped = [], 0
  for line in path.read_text(encoding='utf-8').splitlines():
    try:
      row_step = json.loads(line)['step']
    except (ValueError, KeyError, TypeError):
      dropped += 1
      continue
    if row_step > step:
      dropped += 1
    else:
      kept.append(line)
  if dropped:
    tmp = path.with_name(f'.{path.name}.tmp')
    tmp.write_text(''.join(f'{line}\n' for line in kept), encoding='utf-8')
    tmp.replace(path)
