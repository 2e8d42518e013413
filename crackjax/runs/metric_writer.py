"""Training metrics to TensorBoard event files and a JSON-lines log (process 0 only); each
evaluation's PR curves, qualitative panels and the run's hyper-parameters to TensorBoard."""

import itertools
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from crackjax.runs import outputs

_SERIAL = itertools.count()  # this process's writers, for their event files' names
# The characters TensorBoard takes in a tag (tensorboardX's own rule): a split such as
# 'train[58:]' is spelt 'train_58__' here, as tensorboardX would, without its INFO line per tag
# and step ("Summary name ... is illegal").
_NOT_IN_TAGS = re.compile(r'[^-/\w\.]')


def tag(name: str) -> str:
  """`name` as a TensorBoard tag: each character it does not take becomes '_'."""
  return _NOT_IN_TAGS.sub('_', name).lstrip('/')


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
      # tensorboardX names a file by the second and the host only: a second writer of the
      # same second (an evaluation's, beside training's) would replace the first one's file.
      suffix = f'.{os.getpid()}.{next(_SERIAL)}'
      self._tb = SummaryWriter(
        str(workdir / 'tensorboard'), purge_step=purge, filename_suffix=suffix
      )
      self._jsonl = open(path, 'a', encoding='utf-8')  # noqa: SIM115

  def write_scalars(self, step: int, scalars: Mapping[str, float], *, kind: str = 'train') -> None:
    """Logs `scalars` at `step` under the prefix `kind` (e.g. 'train', 'eval')."""
    if not self._active:
      return
    record = {'kind': kind, 'step': int(step), 'time': time.time()}
    for name, value in scalars.items():
      value = float(value)
      record[name] = value
      self._tb.add_scalar(tag(f'{kind}/{name}'), value, int(step))
    # Strict JSON: a diverged step's loss=nan is null here (TensorBoard keeps the NaN). A full
    # disk's error names the file (`outputs.naming`): a write names none.
    with outputs.naming(self._jsonl.name):
      self._jsonl.write(outputs.dumps(record) + '\n')
      self._jsonl.flush()

  def write_evaluation(
    self,
    step: int,
    *,
    curves: Mapping[str, Mapping[str, Sequence[float]]],
    panels: Sequence[tuple[str, np.ndarray]] = (),
    hparams: Mapping[str, Any] | None = None,
    metrics: Sequence[str] = (),
  ) -> None:
    """What TensorBoard shows of one evaluation at `step`, beyond its scalars:

    * `curves` ({tag: {'thresholds', 'precision', 'recall'}}): each a PR curve (the PR Curves
      tab), its points in the evaluation's own grid order, by threshold. TensorBoard spaces
      the thresholds of its tooltip evenly and shows counts, which the protocols do not
      share (the tolerance protocols match predicted and ground-truth pixels apart): they are
      0; eval.json has the exact thresholds.
    * `panels` ([(tag, H x W x 3 uint8)]): qualitative images (the Images tab).
    * `hparams`: the run's config (`flat_hparams`), recorded in this run itself (the HParams
      tab), with `metrics`, the scalar tags it lists beside them.
    """
    if not self._active:
      return
    for name, curve in curves.items():
      order = np.argsort(np.asarray(curve['thresholds'], np.float64), kind='stable')
      precision = np.asarray(curve['precision'], np.float64)[order]
      recall = np.asarray(curve['recall'], np.float64)[order]
      zeros = np.zeros_like(precision)
      self._tb.add_pr_curve_raw(
        tag(name), zeros, zeros, zeros, zeros, precision, recall, int(step), len(order)
      )
    for name, image in panels:
      self._tb.add_image(tag(name), np.asarray(image, np.uint8), int(step), dataformats='HWC')
    if hparams:
      from tensorboardX.summary import hparams as hparams_summaries

      # In this run's own event file (tensorboardX's add_hparams makes a sub-run), so the
      # HParams tab pairs the values with this run's scalars.
      for summary in hparams_summaries(dict(hparams), {tag(m): 0.0 for m in metrics}):
        self._tb.file_writer.add_summary(summary, int(step))
    self._tb.flush()

  def flush(self) -> None:
    if self._active:
      self._tb.flush()
      with outputs.naming(self._jsonl.name):
        self._jsonl.flush()

  def close(self) -> None:
    if self._active:
      self._active = False
      self._tb.close()
      with outputs.naming(self._jsonl.name):
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


HParam = bool | str | float | int  # what TensorBoard's HParams tab takes


def flat_hparams(config: Mapping[str, Any], prefix: str = '') -> dict[str, HParam]:
  """A config (nested plain dicts) as TensorBoard's hyper-parameters: dotted names
  (``model.name``), numbers, booleans and strings as they are, anything else (a list, None)
  as its JSON text."""
  flat: dict[str, HParam] = {}
  for key, value in config.items():
    name = f'{prefix}{key}'
    if isinstance(value, Mapping):
      flat.update(flat_hparams(value, f'{name}.'))
    elif isinstance(value, bool | int | float | str):
      flat[name] = value
    else:
      flat[name] = outputs.dumps(value, default=str)
  return flat
