"""The stages of a LODO fold, each a command run here one after another: train (launch.py),
export (`crackjax-export --format=model`), score the held-out test split (`crackjax-evaluate
--model`), then count its false positives far from the held-out cracks (``fp``) and its F1 at
each photo's own threshold (``photo``). Every stage is skipped when its output is on disk, so
running the same campaign again resumes it; a SIGTERM reaches the command under way.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from crackjax.evaluation import result, threshold_choice
from crackjax.lodo import folds as folds_lib
from crackjax.lodo import kept_scores
from crackjax.lodo.folds import Fold
from crackjax.runs import exits, outputs

STAGES = ('train', 'export', 'score', 'fp', 'photo')

# The commands by module, run by this Python: crackjax need not be installed (the GPU
# machines import it from the checkout, scripts/lodo_gpu.sh).
EXPORT = [sys.executable, '-m', 'crackjax.deploy.export_command']
EVALUATE = [sys.executable, '-m', 'crackjax.trainer.evaluate_command']


@dataclasses.dataclass(frozen=True)
class Campaign:
  """What every fold's commands share (bench/lodo.py's flags).

  Attributes:
    repo: the checkout whose launch.py and configs/lodo.py train the folds (the commands' cwd).
    manual_dirs: each member's source folder (`crackjax-evaluate --manual_dir`).
    data_dir: the TFDS data folder (None: ~/tensorflow_datasets).
    test_split: the held-out member's split scored.
    workers: `crackjax-evaluate --workers`.
    eval_workers: the trainings' config.eval.background_workers (0: in the loop).
    protocols: scored on the held-out sets.
    stages: of `STAGES`, those to run.
    accept_cut: export a fold cut short by a time limit from its best epoch so far.
    dtype: the exported files' parameters.
    keep: where scored folds are kept (`kept_scores`), None not to keep them.
  """

  repo: Path
  manual_dirs: Mapping[str, str]
  data_dir: str | None = None
  test_split: str = 'test'
  workers: int = 2
  eval_workers: int = 0
  protocols: tuple[str, ...] = folds_lib.PROTOCOLS
  stages: frozenset[str] = frozenset(STAGES)
  accept_cut: bool = False
  dtype: str = 'float32'
  keep: Path | None = None


def campaign_dtype(folds: Sequence[Fold], asked: str | None) -> str:
  """The dtype of the campaign's exported files: `asked` (``--dtype``), else that of the files
  it exported already (`folds.exported_dtype`), else float32. A campaign keeps one: its folds'
  scores are compared in one table.

  Raises:
    ValueError: `asked` differs from the files already exported (a resumed campaign would
      export only its new folds so), or those files differ among themselves; one line naming
      them and the way on.
  """
  found: dict[str, list[Path]] = {}
  for f in folds:
    dtype = folds_lib.exported_dtype(f)
    if dtype is not None:
      found.setdefault(dtype, []).append(f.run / folds_lib.MODEL_FILE)
  if asked is None and len(found) <= 1:
    return next(iter(found), 'float32')
  other = sorted(d for d in found if d != asked)
  if not other:
    return asked
  files = [p for d in other for p in found[d]]
  named = f'{files[0]}{f" and {len(files) - 1} more" if len(files) > 1 else ""}'
  if asked is None:
    raise ValueError(
      f'the campaign exported files of {" and ".join(other)} ({named}): pass --dtype and '
      'remove the files of the other dtype to export them again.'
    )
  raise ValueError(
    f'--dtype={asked}, but the campaign already exported {" and ".join(other)} files ({named}): '
    f'resumed, it would keep them and export only its new folds as {asked}; pass '
    f'--dtype={other[0]} to resume it as it began, or remove those files to export them again.'
  )


def train_command(fold: Fold, campaign: Campaign) -> list[str]:
  cmd = [sys.executable, 'launch.py', f'--config={fold.config}', f'--workdir={fold.run}']
  cmd += [f'--config.data.mix.{m}.manual_dir={campaign.manual_dirs[m]}' for m in fold.trains_on]
  if campaign.data_dir:
    cmd.append(f'--config.data.data_dir={campaign.data_dir}')
  if campaign.eval_workers:  # the same records (configs/base.py), the metrics off the loop
    cmd.append(f'--config.eval.background_workers={campaign.eval_workers}')
  return cmd


def export_command(fold: Fold, step: int, dtype: str = 'float32') -> list[str]:
  return [
    *EXPORT,
    f'--workdir={fold.run}',
    f'--step={step}',
    '--format=model',
    f'--dtype={dtype}',
    f'--name=lodo-{fold.recipe}-{fold.budget}-without-{fold.held_out}',
    f'--out={fold.run / folds_lib.MODEL_FILE}',
    '--overwrite',
    f'--notes=bench/lodo.py: {fold.config}, trained without {fold.held_out}.',
  ]


def score_command(
  fold: Fold, campaign: Campaign, protocols: Sequence[str] | None = None
) -> list[str]:
  """crackjax-evaluate on the held-out test split, under `protocols` (default the campaign's)."""
  h = fold.held_out
  cmd = [
    *EVALUATE,
    f'--model={fold.run / folds_lib.MODEL_FILE}',
    f'--data={h}:{campaign.test_split}',
    f'--protocols={",".join(protocols or campaign.protocols)}',
    f'--out={fold.heldout_dir}',
    f'--scales={",".join(f"{x:g}" for x in fold.scales)}',
    f'--flip={str(fold.flip).lower()}',
    f'--manual_dir={h}={campaign.manual_dirs[h]}',
    f'--workers={campaign.workers}',
    '--overwrite',
  ]
  if campaign.data_dir:
    cmd.append(f'--data_dir={campaign.data_dir}')
  return cmd


def held_out_photos(fold: Fold, campaign: Campaign):
  """`folds.FP_IMAGES` evenly spaced (image, mask) pairs of the held-out test split, and the
  fold's model file as a `Predictor` at its test-time scales."""
  import numpy as np

  from crackjax.data import registry
  from crackjax.deploy.predictor import Predictor

  h = fold.held_out
  data = {'name': h, 'manual_dir': campaign.manual_dirs[h], 'data_dir': campaign.data_dir}
  source = registry.get_data_source(data, campaign.test_split)
  count = min(folds_lib.FP_IMAGES, len(source))
  rows = np.unique(np.linspace(0, len(source) - 1, count).astype(int))
  records = (source[int(i)] for i in rows)
  pairs = ((np.asarray(r['image']), np.asarray(r['mask'])[..., 0]) for r in records)
  predictor = Predictor.from_pretrained(
    str(fold.run / folds_lib.MODEL_FILE), scales=fold.scales, flip=fold.flip
  )
  return pairs, predictor


def _measured_at(predictor) -> dict[str, Any]:
  """What a fold's record was measured at: the predictor's test-time scales and flip."""
  return {'scales': list(predictor.scales), 'flip': predictor.flip}


def false_positives(fold: Fold, campaign: Campaign) -> None:
  """Writes the fold's false positives on roads it never saw (issue 55 item 2): the predicted
  crack length per megapixel, at the file's stored threshold (and the fold's test-time scales),
  of the area farther than `crackjax.deploy.crack_free.MARGIN` px from any labelled crack, on
  `folds.FP_IMAGES` evenly spaced held-out test photos each predicted whole
  (`crack_free.far_false_positives`)."""
  from crackjax.deploy import crack_free

  pairs, predictor = held_out_photos(fold, campaign)
  counted = crack_free.far_false_positives(predictor, pairs)
  counted.update(_measured_at(predictor))
  where = f'{fold.held_out}:{campaign.test_split}'
  print(f'+ false positives on {where}: {counted["length_per_mp"]:.0f}')
  fold.fp_record.parent.mkdir(parents=True, exist_ok=True)
  fold.fp_record.write_text(outputs.dumps(counted, indent=1) + '\n')


def photo_thresholds(fold: Fold, campaign: Campaign) -> None:
  """Writes the fold's strict F1 on the same held-out photos as `false_positives`, each photo
  thresholded at its own `threshold_choice.photo_threshold` (the stored threshold blended with
  the Otsu threshold of its map) for each weight of `threshold_choice.PHOTO_WEIGHTS` (issue 55
  item 4: a rule chosen on held-out datasets)."""
  pairs, predictor = held_out_photos(fold, campaign)
  counted = threshold_choice.photo_threshold_counts(predictor, pairs, predictor.threshold)
  counted['threshold'] = predictor.threshold
  counted.update(_measured_at(predictor))
  best = max(range(len(counted['f1'])), key=counted['f1'].__getitem__)
  print(
    f'+ photo thresholds on {fold.held_out}:{campaign.test_split}: F1 '
    f'{100 * counted["f1"][-1]:.1f} stored, {100 * counted["f1"][best]:.1f} at weight '
    f'{counted["weights"][best]}'
  )
  fold.photo_record.parent.mkdir(parents=True, exist_ok=True)
  fold.photo_record.write_text(outputs.dumps(counted, indent=1) + '\n')


#: The command `run_command` waits for, to which SIGTERM is passed on (`stop_children_on_sigterm`).
_CHILDREN: list[subprocess.Popen] = []
#: The SIGTERMs passed on: `run_command` then exits 143 once its command has ended.
_STOPPED: list[int] = []


def stop_children_on_sigterm() -> None:
  """SIGTERM (a `kill`, SLURM's time limit through submitit) is passed on to the training or
  scoring under way, which saves its checkpoint and exits 143; this process then exits 143 too
  (`run_command`), leaving no orphan to hold the fold's folder. Between commands it exits at
  once; or, when the SIGTERM lands in a garbage-collection callback (JAX's: this process imports
  jax), where an exit would be dropped, before the next command starts."""

  def handler(signum, frame):
    _STOPPED.append(signum)
    for child in _CHILDREN:
      child.send_signal(signal.SIGTERM)
    if not _CHILDREN and not exits.in_gc_callback(frame):
      sys.exit(exits.TERMINATED)

  signal.signal(signal.SIGTERM, handler)


def run_command(cmd: list[str], cwd: Path) -> None:
  """Runs one stage's command in `cwd`, its lines printed as they come.

  Raises:
    subprocess.CalledProcessError: the command failed.
    SystemExit: 143, a SIGTERM was passed on to it, or came before it started
      (`stop_children_on_sigterm`).
  """
  if _STOPPED:
    sys.exit(exits.TERMINATED)
  print('+', ' '.join(cmd), flush=True)
  child = subprocess.Popen(cmd, cwd=cwd)
  _CHILDREN.append(child)
  try:
    code = child.wait()
  except KeyboardInterrupt:
    # A `kill -INT` of this process alone (a terminal's Ctrl-C reached the command too): the
    # command is stopped as Ctrl-C stops it (a training saves its checkpoint), and waited for.
    child.send_signal(signal.SIGINT)
    _wait_for(child)
    raise
  finally:
    _CHILDREN.remove(child)
  if _STOPPED:
    sys.exit(exits.TERMINATED)
  if code:
    raise subprocess.CalledProcessError(code, cmd)


def _wait_for(child: subprocess.Popen) -> None:
  """Waits for `child` to end after a Ctrl-C, however many more come meanwhile."""
  while child.poll() is None:
    try:
      child.wait()
    except KeyboardInterrupt:
      continue


def run_stages(folds: Sequence[Fold], variants: Sequence[Fold], campaign: Campaign) -> None:
  """Trains, exports, scores and counts the false positives of each fold not done yet; then
  scores each test-time variant's fold (strict) whose file exists, with its false positives and
  photo thresholds at the same scales (whether each photo's own threshold adds to a scale)."""
  stages, keep = campaign.stages, campaign.keep
  for f in folds:
    if kept_scores.kept_elsewhere(f, keep):
      continue  # scored on another machine (its files are gone): nothing to redo
    if 'train' in stages and not folds_lib.trained(f):
      run_command(train_command(f, campaign), campaign.repo)
    step = folds_lib.export_step(f, campaign.accept_cut) if 'export' in stages else None
    if step is not None:
      run_command(export_command(f, step, campaign.dtype), campaign.repo)
    scored = folds_lib.scored_protocols(f)
    if 'score' in stages and _has_model(f) and not set(campaign.protocols) <= scored:
      run_command(score_command(f, campaign), campaign.repo)
    photo_stages(f, campaign)
    if keep is not None:
      kept_scores.collect([f], keep)  # kept as soon as scored: the next may outlast the machine
  strict = (folds_lib.THRESHOLD_PROTOCOL,)
  for f in variants:
    if kept_scores.kept_elsewhere(f, keep):
      continue
    scored = folds_lib.scored_protocols(f)
    if 'score' in stages and _has_model(f) and folds_lib.THRESHOLD_PROTOCOL not in scored:
      run_command(score_command(f, campaign, strict), campaign.repo)
    photo_stages(f, campaign)
    if keep is not None:
      kept_scores.collect([f], keep)


def _has_model(fold: Fold) -> bool:
  return (fold.run / folds_lib.MODEL_FILE).exists()


def photo_stages(fold: Fold, campaign: Campaign) -> None:
  """The `fp` and `photo` stages of a fold (or a test-time variant's) whose file exists, each
  unless its record is there."""
  if not _has_model(fold):
    return
  if 'fp' in campaign.stages and not fold.fp_record.exists():
    false_positives(fold, campaign)
  if 'photo' in campaign.stages and not fold.photo_record.exists():
    photo_thresholds(fold, campaign)


def fold_done(fold: Fold, variants: Sequence[Fold], campaign: Campaign) -> bool:
  """Whether the fold and its test-time variants hold every record the campaign asks for (or
  are kept)."""
  for f in [fold, *(v for v in variants if v.id == fold.id)]:
    if kept_scores.kept_elsewhere(f, campaign.keep):
      continue
    wanted = set(campaign.protocols) if f is fold else {folds_lib.THRESHOLD_PROTOCOL}
    if not wanted <= folds_lib.scored_protocols(f):
      return False
    if ('fp' in campaign.stages and not f.fp_record.exists()) or (
      'photo' in campaign.stages and not f.photo_record.exists()
    ):
      return False
  return True


def minutes_left(fold: Fold) -> float | None:
  """The fold's training minutes still to go at the pace of its last three epochs (their
  training and validation seconds); None when no epoch is recorded or none is left."""
  records = sorted(fold.run.glob('epoch_*.json'))
  left = folds_lib.recorded_epochs(fold) - len(records)
  if not records or left <= 0:
    return None
  paces = []
  for path in records[-3:]:
    record = json.loads(path.read_text())
    paces.append(record.get(result.TRAIN_SECONDS, 0) + record.get(result.EVAL_SECONDS, 0))
  return left * sum(paces) / len(paces) / 60


def status(fold: Fold, variants: Sequence[Fold], campaign: Campaign) -> str:
  """Where the fold stands, in a line: kept (scored on another machine: when, at which commit,
  on what), or its epochs recorded of those planned, exported, the protocols scored, done."""
  if elsewhere := kept_scores.kept_elsewhere(fold, campaign.keep):
    return f'kept: scored {elsewhere["scored"]} at {elsewhere["commit"]} on {elsewhere["machine"]}'
  words = [f'{folds_lib.epochs_scored(fold)}/{folds_lib.recorded_epochs(fold)} epochs']
  if (left := minutes_left(fold)) is not None:
    words.append(f'~{left:.0f} min of training left')
  if _has_model(fold):
    words.append('exported')
  if scored := folds_lib.scored_protocols(fold):
    words.append(f'scored ({", ".join(sorted(scored))})')
  if fold_done(fold, variants, campaign):
    words.append('done')
  return ', '.join(words)
