"""A LODO campaign's folds (one training each: a recipe at a budget, one member held out), their
test-time variants (the same file scored again at other scales or mirrored), and where each
fold stands on disk: trained, exportable, exported, scored.

A fold's folder, ``WORK/<recipe>_<budget>/<held_out>/``, is its training run (launch.py's
workdir), with ``model.safetensors`` (its best validation epoch) and
``heldout[_<test time>]/<held_out>_test/`` (its held-out scores). The members, recipes and
budgets are configs/lodo.py's: the command (bench/lodo.py) hands them to `plan`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from crackjax.evaluation import result
from crackjax.lodo import fold_tables

PROTOCOLS = fold_tables.PROTOCOLS
# The protocol the stored threshold is chosen under (the pooled validation strict ODS).
THRESHOLD_PROTOCOL = 'strict'
MODEL_FILE = 'model.safetensors'
HELDOUT_DIR = 'heldout'
FP_FILE = 'false_positives.json'
PHOTO_FILE = 'photo_thresholds.json'
#: Held-out test photos (evenly spaced) whose false positives are counted.
FP_IMAGES = 300


@dataclasses.dataclass(frozen=True)
class Fold:
  """One training of the plan: `recipe` at `budget` with `held_out` left out, on `trains_on`
  for `epochs` epochs (its config's num_epochs)."""

  recipe: str
  budget: str
  held_out: str
  work: Path
  trains_on: tuple[str, ...]
  epochs: int
  #: Test-time scales and flip of the held-out scoring ((1.0,), False: the photo as it is).
  scales: tuple[float, ...] = (1.0,)
  flip: bool = False

  @property
  def test_time(self) -> str:
    """'' for the plain prediction, else e.g. 'scales 0.5,1 + flip' (a row's suffix)."""
    if self.scales == (1.0,) and not self.flip:
      return ''
    words = [f'scales {",".join(f"{x:g}" for x in self.scales)}'] if self.scales != (1.0,) else []
    return ' + '.join(words + (['flip'] if self.flip else []))

  @property
  def heldout_dir(self) -> Path:
    if not self.test_time:
      return self.run / HELDOUT_DIR
    tag = '_'.join(f'{x:g}' for x in self.scales) + ('_flip' if self.flip else '')
    return self.run / f'{HELDOUT_DIR}_{tag}'

  @property
  def run(self) -> Path:
    return self.work / f'{self.recipe}_{self.budget}' / self.held_out

  @property
  def id(self) -> str:
    """The fold as a SLURM job (`--job`, `crackjax.paper.slurm.submit`): 'RECIPE:HELD_OUT'."""
    return f'{self.recipe}:{self.held_out}'

  def directory(self, workdir: str | Path | None = None) -> Path:
    """Its SLURM job's folder (the task's worker.log goes there): its run, whatever `workdir`.
    With `id`, all that `crackjax.paper.slurm.submit` reads of a job (`jobs.ArrayJob`)."""
    return self.run

  @property
  def config(self) -> str:
    return f'configs/lodo.py:{self.held_out},{self.recipe},{self.budget}'

  @property
  def record(self) -> Path:
    return self.heldout_dir / f'{self.held_out}_test' / 'eval.json'

  @property
  def fp_record(self) -> Path:
    """Its false positives far from the held-out test split's cracks (`false_positives`)."""
    return self.heldout_dir / f'{self.held_out}_test' / FP_FILE

  @property
  def photo_record(self) -> Path:
    """Its F1 at each photo's own threshold (`photo_thresholds`)."""
    return self.heldout_dir / f'{self.held_out}_test' / PHOTO_FILE


def plan(
  recipes: Sequence[str],
  budget: str,
  held_out: Sequence[str],
  work: Path,
  members: Sequence[str],
  epochs: Callable[[str, str, str], int],
) -> list[Fold]:
  """Every fold, recipe by recipe, in `held_out`'s order: each trains on the `members` but its
  own, for ``epochs(held_out, recipe, budget)`` epochs (configs/lodo.py's num_epochs)."""
  return [
    Fold(r, budget, h, work, tuple(m for m in members if m != h), epochs(h, r, budget))
    for r in recipes
    for h in held_out
  ]


#: A test-time variant of ``--test_time``: (recipe or None for every recipe, scales, flip).
Variant = tuple[str | None, tuple[float, ...], bool]


def parse_test_time(text: str, recipes: Sequence[str]) -> list[Variant]:
  """``--test_time``'s variants, e.g. 'base:2,flip,photometric:1+2' (a part is a scale factor
  or 'flip'; the scales default to 1).

  Raises:
    ValueError: a recipe not in `recipes`, a part neither a positive number nor 'flip', or a
      variant that is the plain prediction (its row is the recipe's own); naming the variant.
  """
  out: list[Variant] = []
  for item in (x.strip() for x in text.split(',')):
    if not item:
      continue
    recipe, _, spec = item.rpartition(':')
    if recipe and recipe not in recipes:
      raise ValueError(
        f'--test_time {item!r}: recipe {recipe!r} is not in --recipes {list(recipes)}'
      )
    parts = spec.split('+')
    flip = 'flip' in parts
    try:
      scales = tuple(float(x) for x in parts if x != 'flip') or (1.0,)
    except ValueError:
      raise ValueError(f"--test_time {item!r}: a part is a scale factor or 'flip'") from None
    if min(scales) <= 0 or (scales == (1.0,) and not flip):
      raise ValueError(f'--test_time {item!r}: scales must be > 0, and not the plain 1 alone')
    out.append((recipe or None, scales, flip))
  return out


def variant_folds(variants: Sequence[Variant], folds: Sequence[Fold]) -> list[Fold]:
  """The folds of `folds` scored again at each test-time variant, variant by variant."""
  return [
    dataclasses.replace(f, scales=scales, flip=flip)
    for recipe, scales, flip in variants
    for f in folds
    if recipe in (None, f.recipe)
  ]


def epochs_scored(fold: Fold) -> int:
  """How many of the fold's epochs are recorded (epoch_NNN.json, launch.py's)."""
  return len(list(fold.run.glob('epoch_*.json')))


def recorded_epochs(fold: Fold) -> int:
  """The epochs the fold's run was started for (its config.json; the budget's today if none)."""
  try:
    return int(json.loads((fold.run / 'config.json').read_text())['num_epochs'])
  except (OSError, ValueError, KeyError):
    return fold.epochs


def trained(fold: Fold) -> bool:
  """Whether the fold's last epoch is recorded (its config's num_epochs)."""
  return (fold.run / f'epoch_{fold.epochs:03d}.json').exists()


def exportable(fold: Fold, accept_cut: bool) -> bool:
  """Whether the fold may be exported: trained to its last epoch, or, with `accept_cut`, cut
  short (a time limit's SIGTERM) after at least one epoch was scored: its best epoch so far
  is exported and the table names the epochs it trained (`fold_tables.cut_folds`)."""
  return trained(fold) or (accept_cut and epochs_scored(fold) > 0)


def exported_step(fold: Fold) -> int | None:
  """The training step the fold's model file was exported from (None without a file)."""
  from crackjax.experiment import restored

  model = fold.run / MODEL_FILE
  if not model.exists():
    return None
  return restored.model_file_metadata(model)[1]['card']['training']['step']


def exported_dtype(fold: Fold) -> str | None:
  """The dtype of the fold's model file's parameters ('float32' or 'bfloat16'; None without
  a readable file)."""
  from crackjax.experiment import restored

  model = fold.run / MODEL_FILE
  if not model.exists():
    return None
  try:
    return restored.model_file_dtype(model)
  except (OSError, ValueError):  # a damaged file: its export stage says so
    return None


def export_step(fold: Fold, accept_cut: bool) -> int | None:
  """The step to export the fold from, or None when there is nothing (new) to export: not
  `exportable`, or its file already holds its best epoch. A fold exported when cut short and
  trained on since (a later call resumed it) is exported again, its held-out scores dropped."""
  from crackjax.deploy import release

  if not exportable(fold, accept_cut):
    return None
  step = release.best_epoch(fold.run)['step']
  exported = exported_step(fold)
  if exported == step:
    return None
  if exported is not None:
    for scored in fold.run.glob(f'{HELDOUT_DIR}*'):  # its scores, every test time's: stale
      shutil.rmtree(scored)
  return step


def scored_protocols(fold: Fold) -> set[str]:
  """The protocols the fold's held-out record holds (none if not scored yet)."""
  if not fold.record.exists():
    return set()
  return set(result.read_record(fold.record).results)
