"""Before and after a fine-tuning, on the same held-out photos.

A run that starts from a model file (`start_model`: ``configs/finetune.py:MODEL``, or
any config with ``model_init.pretrained`` naming a released model, a .safetensors file or a
URL) is scored twice on its test split, the photos of the user's folder held out from training
(crack_folder's test split: ``test_list``, or the fixed 80/20 split's 20%):

* before training, the model file as given, the run's initial weights (`score_start`; named
  "as shipped" only for a released model's own file, `described`): its
  ODS F1 (best threshold) and its F1 at the threshold the file stores, under every protocol of
  the run; written to ``<workdir>/before/`` (eval.json, eval_per_image.csv, pr_curve.png, ...,
  the files of any evaluation), once;
* after training, the run's own final evaluation (``<workdir>/eval.json``).

`report` then prints one table of both and writes it to ``<workdir>/before_after.md``
(launch.py does both around training, `train_command.run`; its --mode=eval prints the table
again with the new evaluation). The run's threshold.json is its strict ODS threshold on these
same photos, so the after column's F1 is also its F1 at the threshold crackjax-predict will
use: chosen on the held-out photos, an optimistic operating point when they are few, as the
before column's ODS F1 is.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
from absl import logging

from crackjax.evaluation.result import EvalRecord, OperatingPoint, read_record
from crackjax.experiment import restored
from crackjax.experiment.build import Experiment
from crackjax.trainer import scoring

#: Where the scores of the initial weights go, under the workdir.
BEFORE_DIR = 'before'
#: The table of both, in the workdir.
TABLE_FILE = 'before_after.md'
#: The operating point of the model file's stored threshold, in before/eval.json.
STORED = 'stored'


@dataclasses.dataclass(frozen=True)
class StartModel:
  """The model file a fine-tuning starts from (`start_model`).

  Attributes:
    spec: ``config.model_init.pretrained`` as given (a released name, a path or a URL).
    name: the name its card gives (the spec when it has none).
    threshold: the threshold the file stores (crack where probability > it): the released
      model's own operating point, what a user of the file as shipped gets.
    released: the released model whose registry SHA-256 the file has (`restored.Run.released`),
      None for any other file, whatever its card's name: only then is it "as shipped".
  """

  spec: str
  name: str
  threshold: float
  released: str | None = None


def start_model(experiment: Experiment) -> StartModel | None:
  """The model file the run of `experiment` starts from (``config.model_init``: a released
  model's name, a .safetensors file or a URL, a fine-tuning), with the threshold the file
  stores; None for a run from scratch, from a .npz or warm-started at a step. The file is
  `experiment.start`, read once for this and the run's initial weights."""
  run = experiment.start
  if run is None or experiment.init.start_step:
    # A warm start (config.model_init.start_step) goes on with the file's own training: no
    # fine-tuning, and the file is scored as its step's epoch record instead (trainer.loop).
    return None
  return StartModel(
    spec=str(experiment.init.pretrained),
    name=str((run.card or {}).get('name') or experiment.init.pretrained),
    threshold=run.threshold,
    released=run.released,
  )


def described(start: dict[str, Any]) -> str:
  """How the before scores name the start model (a record's ``start_model``): '<name> as
  shipped' only for a released model whose file is the registry's (its SHA-256); any other
  file, a copy of a released one altered included, by its card's name and where it was read.
  A record written before crackjax said (no 'released') by its card's name."""
  if 'released' not in start:
    return str(start.get('name'))
  if start['released']:
    return f'{start["released"]} as shipped'
  name, spec = start.get('name'), start.get('spec')
  where = spec if name == spec else f'{name} from {spec}'
  return f'{where}, not a released file as shipped'


def score_start(experiment: Experiment, workdir: str | Path) -> EvalRecord | None:
  """Scores the model file the run starts from (`start_model`), as shipped, on the
  run's test split, with its stored threshold as the operating point ``'stored'``, and writes
  the evaluation's files in ``<workdir>/before/``; returns the record. The file is read as
  crackjax-evaluate --model reads it (`restored.load_model`), so the scores are that
  command's on the same photos. None (nothing done) for a run that does not start from a
  model file, or whose record is there already (a resumed run)."""
  if read_before(workdir) is not None:  # a resumed run: its initial weights are not read
    return None
  start = start_model(experiment)
  if start is None:
    return None
  state = restored.inference_state(experiment.start)
  start_fields = {'spec': start.spec, 'name': start.name, 'threshold': start.threshold}
  start_fields['released'] = start.released
  record = scoring.evaluate_state(
    experiment,
    state,
    Path(workdir) / BEFORE_DIR,
    operating_points={STORED: start.threshold},
    start_model=start_fields,
    desc='predict, before fine-tuning',
  )
  first = next(iter(record.results.values()))
  logging.info(
    'Before fine-tuning (%s) on the %d %s images: ODS F1 %.4f, F1 %.4f at its '
    'stored threshold %g (%s protocol).',
    described(start_fields),
    record.num_images,
    record.split,
    first.ods.f1,
    first.operating_points[STORED].f1,
    start.threshold,
    first.protocol,
  )
  return record


def _read(path: Path) -> EvalRecord | None:
  try:
    return read_record(path)
  except (OSError, ValueError):  # not there, or damaged: no table
    return None


def read_before(workdir: str | Path) -> EvalRecord | None:
  """The record `score_start` wrote in `workdir`, or None."""
  record = _read(Path(workdir) / BEFORE_DIR / 'eval.json')
  return record if record is not None and record.start_model else None


def table(before: EvalRecord, after: EvalRecord) -> str:
  """The before / after table (Markdown, F1 in percent with its threshold) of two records
  of the same images: `score_start`'s and the run's final evaluation."""
  start = before.start_model
  lines = [
    f'Fine-tuning {described(start)}: {after.num_images} held-out images '
    f'({after.dataset} {after.split} split), F1 in percent (threshold)',
    '',
    f'| protocol | before: at its stored threshold | before: best threshold (ODS) '
    f'| after {after.step} steps: best threshold (ODS) |',
    '|---|---|---|---|',
  ]

  def cell(point: OperatingPoint) -> str:
    return f'{100 * point.f1:.1f} (t={point.threshold:.3g})'

  for protocol, b in before.results.items():
    a = after.results.get(protocol)
    stored = (b.operating_points or {}).get(STORED)
    lines.append(
      f'| {protocol} | {cell(stored) if stored else ""} | {cell(b.ods)} '
      f'| {cell(a.ods) if a else "not scored"} |'
    )
  return '\n'.join(lines)


def report(workdir: str | Path, after: EvalRecord | None = None) -> str | None:
  """Prints the before / after table of the run in `workdir` and writes it to
  ``<workdir>/before_after.md``; `after`: the final evaluation's record (default the run's
  eval.json). Returns the table; None (nothing printed) for a run without both records or
  whose records are not of the same images."""
  workdir = Path(workdir)
  before = read_before(workdir)
  if after is None:
    after = _read(workdir / 'eval.json')
  if not before or not after:
    return None
  if _images(before) != _images(after):
    return None
  text = table(before, after)
  if jax.process_index() == 0:
    print('\n' + text + '\n', flush=True)
    _write_text(workdir / TABLE_FILE, text + '\n')
  return text


def _images(record: EvalRecord) -> tuple:
  """What a record scored: its dataset, split and image names (their count without rows)."""
  first = next(iter(record.results.values()), None)
  rows = first.per_image if first is not None else None
  names = sorted(r.name for r in rows) if rows else record.num_images
  return record.dataset, record.split, names


def _write_text(path: Path, text: str) -> None:
  tmp = path.with_name(f'.{path.name}.tmp')
  tmp.write_text(text)
  tmp.replace(path)
