"""Training metrics to TensorBoard event files and a JSON-lines log (process 0 only)."""

import time
from collections.abc import Mapping
from pathlib import Path

import jax

from crackjax.runs import outputs


class MetricWriter:
  """Writes scalars to `<workdir>/tensorboard` and `<workdir>/metrics.jsonl`.

  Only process 0 writes; on other processes every call is a no-op, so callers need no
  `if jax.process_index() == 0` of their own.
  """

  def __init__(self, workdir: str | Path):
    self._active = jax.process_index() == 0
    self._tb = None
    self._jsonl = None
    if self._active:
      # Imported lazily: tensorboardX pulls in protobuf, which tests of other modules
      # need not pay for.
      from tensorboardX import SummaryWriter

      workdir = Path(workdir)
      workdir.mkdir(parents=True, exist_ok=True)
      self._tb = SummaryWriter(str(workdir / 'tensorboard'))
      self._jsonl = open(workdir / 'metrics.jsonl', 'a', encoding='utf-8')  # noqa: SIM115

  def write_scalars(self, step: int, scalars: Mapping[str, float], *, kind: str = 'train') -> None:
    """Logs `scalars` at `step` under the prefix `kind` (e.g. 'train', 'eval')."""
    if not self._active:
      return
    record = {'kind': kind, 'step': int(step), 'time': time.time()}
    for name, value in scalars.items():
      value = float(value)
      record[name] = value
      self._tb.add_scalar(f'{kind}/{name}', value, int(step))
    # Strict JSON: a diverged step's loss=nan is null here (TensorBoard keeps the NaN).
    self._jsonl.write(outputs.dumps(record) + '\n')
    self._jsonl.flush()

  def flush(self) -> None:
    if self._active:
      self._tb.flush()
      self._jsonl.flush()

  def close(self) -> None:
    if self._active:
      self._tb.close()
      self._jsonl.close()
      self._active = False
