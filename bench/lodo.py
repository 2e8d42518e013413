"""Leave-one-dataset-out (LODO): "F1 on roads never seen" for a training recipe (issue 55).

For each of the five public members of the general model (configs/lodo.py), a model is
trained on the other four with one fixed budget, its epoch and threshold chosen on those
four's validation parts, and the held-out member's test split is scored by the exported
model file (strict and tolerance_thin_gt; F1 at the file's stored threshold and ODS). The
mean over the held-out sets is the recipe's LODO figure.

  python bench/lodo.py --recipes=base,photometric --budget=short --work=/work/lodo \\
      --crackforest=../shared/datasets/crackforest --public=/work/data/Datasets \\
      [--held_out=crackforest,gaps384] [--data_dir=DIR] [--out=results/lodo_short]
  python bench/lodo.py --plan --recipes=base     # what would train and be scored, nothing run

Every stage is resumable: a fold whose last epoch is recorded is not trained again (a killed
training resumes from its last checkpoint: `launch.py`), an exported file and a score already
on disk are kept. Run it in the background (``nohup ... &``) and the same command later; the
table (``--out``.json / .md) is rewritten from whatever folds are scored so far.

Folders: ``WORK/<recipe>_<budget>/<held_out>/`` is the training run (launch.py's workdir), with
``model.safetensors`` (the best validation epoch, `crackjax-export --format=model`) and
``heldout/<held_out>_test/eval.json`` (`crackjax-evaluate --model`).

``--keep=results/lodo_long`` keeps each scored fold's scores (a small JSON with the date,
commit and machine it was scored on) in a folder committed with the repository, and takes a
fold missing from ``--work`` from there: a campaign longer than a machine's life (its work
folder lost) resumes at the first fold not kept, and its table still holds every fold.

``--peer=results/lodo_mtscrack.json`` (bench/peer_mtscrack.py's output on the same test splits)
puts MTSCrack's row beside the recipes': F1 of its mask (output > 0) and its ODS.

``--test_time=base:2,base:flip,photometric:1+2`` adds rows of the same folds' files scored at
test-time scales and flip (`crackjax-evaluate --scales/--flip`; ``[RECIPE:]PART+PART``, a part
a scale factor or ``flip``; without a recipe, every recipe's): strict only, into
``heldout_<scales>[_flip]/``, with their false positives and photo thresholds at the same test
time (the ``fp`` and ``photo`` stages). One command thus writes every row of the
table (scripts/lodo.sh's ``TEST_TIME``); ``--out`` heads the .md with the command, the commit,
the machine and the dates the folds were scored.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crackjax.configs import lodo
from crackjax.evaluation import lodo_tables, result, threshold_choice
from crackjax.runs import exits, outputs

if TYPE_CHECKING:
  from crackjax.paper.slurm import Settings

REPO = Path(__file__).resolve().parents[1]

PROTOCOLS = lodo_tables.PROTOCOLS
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
  """One training of the plan: `recipe` at `budget` with `held_out` left out."""

  recipe: str
  budget: str
  held_out: str
  work: Path
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
    With `id`, all that `crackjax.paper.slurm.submit` reads of a job."""
    return self.run

  @property
  def config(self) -> str:
    return f'configs/lodo.py:{self.held_out},{self.recipe},{self.budget}'

  @property
  def trains_on(self) -> list[str]:
    return [m for m in lodo.MEMBERS if m != self.held_out]

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
  recipes: list[str],
  budget: str,
  held_out: list[str],
  work: Path,
  scales: tuple[float, ...] = (1.0,),
  flip: bool = False,
) -> list[Fold]:
  """Every fold, recipe by recipe, in the members' order."""
  return [Fold(r, budget, h, work, scales, flip) for r in recipes for h in held_out]


#: A test-time variant of ``--test_time``: (recipe or None for every recipe, scales, flip).
Variant = tuple[str | None, tuple[float, ...], bool]


def parse_test_time(text: str, recipes: list[str]) -> list[Variant]:
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
      raise ValueError(f'--test_time {item!r}: recipe {recipe!r} is not in --recipes {recipes}')
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


def variant_folds(variants: list[Variant], folds: list[Fold]) -> list[Fold]:
  """The folds of `folds` scored again at each test-time variant, variant by variant."""
  return [
    dataclasses.replace(f, scales=scales, flip=flip)
    for recipe, scales, flip in variants
    for f in folds
    if recipe in (None, f.recipe)
  ]


def manual_dir(member: str, crackforest: str, public: str) -> str:
  return crackforest if member in lodo.roads_unet_cpu.CRACKFOREST_MEMBERS else public


def train_command(fold: Fold, args: argparse.Namespace) -> list[str]:
  cmd = [sys.executable, 'launch.py', f'--config={fold.config}', f'--workdir={fold.run}']
  cmd += [
    f'--config.data.mix.{m}.manual_dir={manual_dir(m, args.crackforest, args.public)}'
    for m in fold.trains_on
  ]
  if args.data_dir:
    cmd.append(f'--config.data.data_dir={args.data_dir}')
  if args.eval_workers:  # the same records (configs/base.py), the metrics off the training loop
    cmd.append(f'--config.eval.background_workers={args.eval_workers}')
  return cmd


def planned_epochs(fold: Fold) -> int:
  """The epochs the fold's budget trains (its config's num_epochs)."""
  return lodo.get_config(f'{fold.held_out},{fold.recipe},{fold.budget}').num_epochs


def epochs_scored(fold: Fold) -> int:
  """How many of the fold's epochs are recorded (epoch_NNN.json, launch.py's)."""
  return len(list(fold.run.glob('epoch_*.json')))


def recorded_epochs(fold: Fold) -> int:
  """The epochs the fold's run was started for (its config.json; the budget's today if none)."""
  try:
    return int(json.loads((fold.run / 'config.json').read_text())['num_epochs'])
  except (OSError, ValueError, KeyError):
    return planned_epochs(fold)


def trained(fold: Fold) -> bool:
  """Whether the fold's last epoch is recorded (its config's num_epochs)."""
  return (fold.run / f'epoch_{planned_epochs(fold):03d}.json').exists()


def exportable(fold: Fold, accept_cut: bool) -> bool:
  """Whether the fold may be exported: trained to its last epoch, or, with `accept_cut`, cut
  short (a time limit's SIGTERM) after at least one epoch was scored: its best epoch so far
  is exported and the table names the epochs it trained (`lodo_tables.cut_folds`)."""
  return trained(fold) or (accept_cut and epochs_scored(fold) > 0)


def exported_step(fold: Fold) -> int | None:
  """The training step the fold's model file was exported from (None without a file)."""
  from crackjax.experiment import restored

  model = fold.run / MODEL_FILE
  if not model.exists():
    return None
  return restored.model_file_metadata(model)[1]['card']['training']['step']


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


# The commands by module, run by this Python: crackjax need not be installed (the GPU
# machines import it from the checkout, scripts/lodo_gpu.sh).
EXPORT = [sys.executable, '-m', 'crackjax.deploy.export_command']
EVALUATE = [sys.executable, '-m', 'crackjax.trainer.evaluate_command']


def export_command(fold: Fold, step: int, dtype: str = 'float32') -> list[str]:
  return [
    *EXPORT,
    f'--workdir={fold.run}',
    f'--step={step}',
    '--format=model',
    f'--dtype={dtype}',
    f'--name=lodo-{fold.recipe}-{fold.budget}-without-{fold.held_out}',
    f'--out={fold.run / MODEL_FILE}',
    '--overwrite',
    f'--notes=bench/lodo.py: {fold.config}, trained without {fold.held_out}.',
  ]


def score_command(fold: Fold, args: argparse.Namespace, protocols: str | None = None) -> list[str]:
  """crackjax-evaluate on the held-out test split, under `protocols` (default --protocols)."""
  h = fold.held_out
  cmd = [
    *EVALUATE,
    f'--model={fold.run / MODEL_FILE}',
    f'--data={h}:{args.test_split}',
    f'--protocols={protocols or args.protocols}',
    f'--out={fold.heldout_dir}',
    f'--scales={",".join(f"{x:g}" for x in fold.scales)}',
    f'--flip={str(fold.flip).lower()}',
    f'--manual_dir={h}={manual_dir(h, args.crackforest, args.public)}',
    f'--workers={args.workers}',
    '--overwrite',
  ]
  if args.data_dir:
    cmd.append(f'--data_dir={args.data_dir}')
  return cmd


def held_out_photos(fold: Fold, args: argparse.Namespace):
  """`FP_IMAGES` evenly spaced (image, mask) pairs of the held-out test split, and the fold's
  model file as a `Predictor` at its test-time scales."""
  import numpy as np

  from crackjax.data import registry
  from crackjax.deploy.predictor import Predictor

  h = fold.held_out
  data = {'name': h, 'manual_dir': manual_dir(h, args.crackforest, args.public)}
  source = registry.get_data_source({**data, 'data_dir': args.data_dir}, args.test_split)
  rows = np.unique(np.linspace(0, len(source) - 1, min(FP_IMAGES, len(source))).astype(int))
  records = (source[int(i)] for i in rows)
  pairs = ((np.asarray(r['image']), np.asarray(r['mask'])[..., 0]) for r in records)
  predictor = Predictor.from_pretrained(
    str(fold.run / MODEL_FILE), scales=fold.scales, flip=fold.flip
  )
  return pairs, predictor


def measured_at(predictor) -> dict[str, Any]:
  """What a fold's record was measured at: the predictor's test-time scales and flip."""
  return {'scales': list(predictor.scales), 'flip': predictor.flip}


def false_positives(fold: Fold, args: argparse.Namespace) -> None:
  """Writes the fold's false positives on roads it never saw (issue 55 item 2): the predicted
  crack length per megapixel, at the file's stored threshold (and the fold's test-time scales),
  of the area farther than `crackjax.deploy.crack_free.MARGIN` px from any labelled crack, on
  `FP_IMAGES` evenly spaced held-out test photos each predicted whole
  (`crack_free.far_false_positives`)."""
  from crackjax.deploy import crack_free

  pairs, predictor = held_out_photos(fold, args)
  result = crack_free.far_false_positives(predictor, pairs)
  result.update(measured_at(predictor))
  print(f'+ false positives on {fold.held_out}:{args.test_split}: {result["length_per_mp"]:.0f}')
  fold.fp_record.parent.mkdir(parents=True, exist_ok=True)
  fold.fp_record.write_text(outputs.dumps(result, indent=1) + '\n')


def photo_thresholds(fold: Fold, args: argparse.Namespace) -> None:
  """Writes the fold's strict F1 on the same held-out photos as `false_positives`, each photo
  thresholded at its own `threshold_choice.photo_threshold` (the stored threshold blended with
  the Otsu threshold of its map) for each weight of `threshold_choice.PHOTO_WEIGHTS` (issue 55
  item 4: a rule chosen on held-out datasets)."""
  pairs, predictor = held_out_photos(fold, args)
  result = threshold_choice.photo_threshold_counts(predictor, pairs, predictor.threshold)
  result['threshold'] = predictor.threshold
  result.update(measured_at(predictor))
  best = max(range(len(result['f1'])), key=result['f1'].__getitem__)
  print(
    f'+ photo thresholds on {fold.held_out}:{args.test_split}: F1 {100 * result["f1"][-1]:.1f} '
    f'stored, {100 * result["f1"][best]:.1f} at weight {result["weights"][best]}'
  )
  fold.photo_record.parent.mkdir(parents=True, exist_ok=True)
  fold.photo_record.write_text(outputs.dumps(result, indent=1) + '\n')


#: The command `_run` is waiting for, to which SIGTERM is passed on (`stop_children_on_sigterm`).
_CHILDREN: list[subprocess.Popen] = []
#: The SIGTERMs passed on: `_run` then exits 143 once its command has ended.
_STOPPED: list[int] = []


def stop_children_on_sigterm() -> None:
  """SIGTERM (a `kill`, SLURM's time limit through submitit) is passed on to the training or
  scoring under way, which saves its checkpoint and exits 143; this command then exits 143 too
  (`_run`), leaving no orphan to hold the fold's folder. Between commands it exits at once."""

  def handler(signum, frame):
    if not _CHILDREN:
      sys.exit(exits.TERMINATED)
    _STOPPED.append(signum)
    for child in _CHILDREN:
      child.send_signal(signal.SIGTERM)

  signal.signal(signal.SIGTERM, handler)


def _run(cmd: list[str]) -> None:
  print('+', ' '.join(cmd), flush=True)
  child = subprocess.Popen(cmd, cwd=REPO)
  _CHILDREN.append(child)
  try:
    code = child.wait()
  finally:
    _CHILDREN.remove(child)
  if _STOPPED:
    sys.exit(exits.TERMINATED)
  if code:
    raise subprocess.CalledProcessError(code, cmd)


def scored_protocols(fold: Fold) -> set[str]:
  """The protocols the fold's held-out record holds (none if not scored yet)."""
  if not fold.record.exists():
    return set()
  return set(result.read_record(fold.record).results)


def fold_scores(fold: Fold) -> dict[str, Any] | None:
  """The fold's held-out scores from its eval.json (None if not scored yet):
  {protocol: {'stored': F1 at the file's threshold, 'ods': ODS F1, 'ods_threshold', 'threshold'}}
  in percent for each protocol it holds, plus the strict curve."""
  if not fold.record.exists():
    return None
  record = result.read_record(fold.record)
  out: dict[str, Any] = {'images': record.num_images}
  for protocol in PROTOCOLS:
    if protocol not in record.results:
      continue
    r = record.results[protocol]
    run = r.operating_points['run']
    out[protocol] = {
      'stored': 100 * run.f1,
      'threshold': run.threshold,
      'ods': 100 * r.ods.f1,
      'ods_threshold': r.ods.threshold,
    }
  curve = record.results[THRESHOLD_PROTOCOL].curve
  out['curve'] = {'thresholds': list(curve.thresholds), 'f1': [100 * f for f in curve.f1]}
  return out


def datasets_alike(fold: Fold, step: int, curve: dict[str, list[float]]) -> dict[str, float] | None:
  """The held-out strict F1 at the threshold chosen on the known sets with every set alike
  (``config.eval.threshold_over='datasets'``, `threshold_choice`): from the fold's epoch record
  of `step` (the exported one) and the held-out `curve` (`fold_scores`'), whatever the fold
  stored; None where the record or its threshold is not on the curve's grid."""
  for path in sorted(fold.run.glob('epoch_*.json')):
    record = result.read_record(path)
    if record.step != step:
      continue
    chosen = threshold_choice.mean_over_datasets(record, THRESHOLD_PROTOCOL)
    if chosen is None or chosen[0] not in curve['thresholds']:
      return None
    return {'threshold': chosen[0], 'f1': curve['f1'][curve['thresholds'].index(chosen[0])]}
  return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--recipes', default='base', help=f'comma-separated, of {list(lodo.RECIPES)}')
  p.add_argument('--budget', default='short', choices=list(lodo.BUDGETS))
  p.add_argument('--held_out', default=','.join(lodo.MEMBERS), help='members, comma-separated')
  p.add_argument('--work', default='workdirs/lodo', help='where the runs go')
  p.add_argument('--crackforest', default='../shared/datasets/crackforest')
  p.add_argument('--public', default=None, help="the cropped copies' Datasets/ folder")
  p.add_argument('--data_dir', default=None, help='TFDS data dir (default ~/tensorflow_datasets)')
  p.add_argument('--test_split', default='test', help="the held-out member's split scored")
  p.add_argument('--workers', type=int, default=2, help='crackjax-evaluate --workers')
  p.add_argument(
    '--eval_workers',
    type=int,
    default=0,
    help="the trainings' config.eval.background_workers: each epoch's validation metrics "
    'counted while the next epoch trains (the same records)',
  )
  p.add_argument(
    '--protocols',
    default=','.join(PROTOCOLS),
    help='scored on the held-out sets (strict alone ranks recipes in a fifth of the time; a '
    'fold scored under fewer is scored again when more are asked)',
  )
  p.add_argument(
    '--stages',
    default='train,export,score,fp,photo',
    help='of train, export, score, fp (false positives far from the held-out cracks), photo '
    "(F1 at each photo's own threshold)",
  )
  p.add_argument(
    '--test_time',
    default='',
    help="rows of the folds' files scored at test-time scales and flip (strict), e.g. "
    "'base:2,base:flip,photometric:1+2' ([RECIPE:]PART+PART, a part a scale or 'flip')",
  )
  p.add_argument(
    '--peer',
    default=None,
    help="bench/peer_mtscrack.py's JSON files on the test splits, comma-separated",
  )
  p.add_argument(
    '--accept_cut',
    action='store_true',
    help='export a fold cut short by a time limit from its best epoch scored so far (the table '
    'names the epochs it trained); without it only a fold trained to its last epoch is exported',
  )
  p.add_argument(
    '--dtype',
    default='float32',
    choices=('float32', 'bfloat16'),
    help="the exported files' parameters (crackjax-export --dtype)",
  )
  p.add_argument(
    '--keep',
    default=None,
    help="keep each scored fold's scores in KEEP/<recipe>_<budget>/<held_out>.json (e.g. "
    'results/lodo_long, committed) and take the folds not in --work from there: a campaign '
    'longer than a machine lives on without its checkpoints',
  )
  p.add_argument(
    '--executor',
    default='local',
    choices=('local', 'slurm'),
    help='local: the folds one after another here; slurm: the folds not done submitted as one '
    'array job, one task a fold (through crackjax.paper.slurm); run the same command again '
    'when they end: it writes the table and resubmits a fold that ended unfinished',
  )
  p.add_argument('--job', default=None, help='RECIPE:HELD_OUT: that fold alone (a SLURM task)')
  p.add_argument('--slurm_time', type=int, default=240, help='minutes a SLURM task may run')
  p.add_argument('--slurm_partition', default=None)
  p.add_argument('--slurm_account', default=None)
  p.add_argument('--slurm_gpus', type=int, default=0, help='GPUs per SLURM task')
  p.add_argument('--slurm_cpus', type=int, default=None, help='CPU cores per SLURM task')
  p.add_argument('--slurm_mem_gb', type=float, default=None, help='memory per SLURM task, GB')
  p.add_argument('--slurm_array_parallelism', type=int, default=256)
  p.add_argument(
    '--slurm_option', action='append', default=[], help="more sbatch options, e.g. 'qos=high'"
  )
  p.add_argument('--out', default=None, help='write the table to OUT.json and OUT.md')
  p.add_argument('--plan', action='store_true', help='print what each fold trains and scores')
  args = p.parse_args(argv)
  args.recipes = [r for r in args.recipes.split(',') if r]
  args.held_out = [h for h in args.held_out.split(',') if h]
  for name, known, values in (
    ('recipe', lodo.RECIPES, args.recipes),
    ('held-out member', lodo.MEMBERS, args.held_out),
  ):
    bad = [v for v in values if v not in known]
    if bad:
      p.error(f'unknown {name} {bad}; known: {list(known)}')
  try:
    args.variants = parse_test_time(args.test_time, args.recipes)
  except ValueError as e:
    p.error(str(e))
  args.stages = set(args.stages.split(','))
  args.work = str(Path(args.work).absolute())  # the commands run in the repository's folder
  folds = {f'{r}:{h}' for r in args.recipes for h in args.held_out}
  if args.job is not None and args.job not in folds:
    p.error(f'--job {args.job!r} is not a fold of --recipes and --held_out: {sorted(folds)}')
  if args.stages & {'train', 'score', 'fp'} and not args.public and not args.plan:
    p.error("--public (the cropped copies' Datasets/ folder) is needed to train or score")
  return args


def run_stages(folds: list[Fold], variants: list[Fold], args: argparse.Namespace) -> None:
  """Trains, exports, scores and counts the false positives of each fold not done yet; then
  scores each test-time variant's fold (strict) whose file exists, with its false positives and
  photo thresholds at the same scales (whether each photo's own threshold adds to a scale)."""
  stages, wanted = args.stages, set(args.protocols.split(','))
  keep = keep_dir(args)
  for f in folds:
    if kept_elsewhere(f, keep):
      continue  # scored on another machine (its files are gone): nothing to redo
    if 'train' in stages and not trained(f):
      _run(train_command(f, args))
    model = f.run / MODEL_FILE
    step = export_step(f, args.accept_cut) if 'export' in stages else None
    if step is not None:
      _run(export_command(f, step, args.dtype))
    if 'score' in stages and model.exists() and not wanted <= scored_protocols(f):
      _run(score_command(f, args))
    photo_stages(f, args)
    if keep is not None:
      collect([f], keep)  # kept as soon as scored: the next fold may outlast the machine
  for f in variants:
    model = f.run / MODEL_FILE
    if kept_elsewhere(f, keep):
      continue
    if 'score' in stages and model.exists() and THRESHOLD_PROTOCOL not in scored_protocols(f):
      _run(score_command(f, args, THRESHOLD_PROTOCOL))
    photo_stages(f, args)
    if keep is not None:
      collect([f], keep)


def photo_stages(fold: Fold, args: argparse.Namespace) -> None:
  """The `fp` and `photo` stages of a fold (or a test-time variant's) whose file exists, each
  unless its record is there."""
  if not (fold.run / MODEL_FILE).exists():
    return
  if 'fp' in args.stages and not fold.fp_record.exists():
    false_positives(fold, args)
  if 'photo' in args.stages and not fold.photo_record.exists():
    photo_thresholds(fold, args)


def collect(
  folds: list[Fold], keep: Path | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
  """(rows: {row name: {held-out set: its scores}} of the folds scored, detail: the same with
  None for a fold not scored yet). With `keep`, a fold scored in the work folder is kept there
  (`keep_fold`) and a fold not in it is taken from there."""
  from crackjax.deploy import release

  rows: dict[str, dict[str, Any]] = {}
  detail: dict[str, Any] = {}
  for f in folds:
    scores = fold_scores(f)
    name = f'{f.recipe} ({f.budget})' + (f' at {f.test_time}' if f.test_time else '')
    rows.setdefault(name, {})
    if scores is None and (elsewhere := kept_elsewhere(f, keep)):
      scores = elsewhere['scores']
    elif scores:
      best = release.best_epoch(f.run)
      scores['selected'] = {k: best[k] for k in ('epoch', 'step', 'ods_f1', 'threshold')}
      scores['epochs'] = {'scored': epochs_scored(f), 'planned': recorded_epochs(f)}
      scores['datasets_alike'] = datasets_alike(f, best['step'], scores['curve'])
      if f.fp_record.exists():
        scores['false_positives'] = json.loads(f.fp_record.read_text())['length_per_mp']
      if f.photo_record.exists():
        photo = json.loads(f.photo_record.read_text())
        scores['photo'] = {'weights': photo['weights'], 'f1': [100 * x for x in photo['f1']]}
      if keep is not None:
        keep_fold(f, scores, keep)
    if scores:
      rows[name][f.held_out] = scores
    detail.setdefault(name, {})[f.held_out] = scores
  return rows, detail


def keep_dir(args: argparse.Namespace) -> Path | None:
  """``--keep`` as a folder (None without it)."""
  return Path(args.keep) if args.keep else None


def kept_path(fold: Fold, keep: Path) -> Path:
  """Where ``--keep`` keeps the fold's scores:
  ``KEEP/<recipe>_<budget>[_<test time>]/<held_out>.json``."""
  tag = fold.heldout_dir.name.removeprefix(HELDOUT_DIR)  # '' or e.g. '_2_flip'
  return keep / f'{fold.recipe}_{fold.budget}{tag}' / f'{fold.held_out}.json'


def kept(fold: Fold, keep: Path | None) -> dict[str, Any] | None:
  """The fold's kept record ({'scores', 'scored', 'commit', 'machine'}), None if not kept."""
  if keep is None or not kept_path(fold, keep).exists():
    return None
  return json.loads(kept_path(fold, keep).read_text())


def kept_elsewhere(fold: Fold, keep: Path | None) -> dict[str, Any] | None:
  """The fold's kept record where its work folder lacks its scores (scored on a machine since
  gone): what stands for the fold then; None otherwise."""
  return None if fold.record.exists() else kept(fold, keep)


def keep_fold(fold: Fold, scores: dict[str, Any], keep: Path) -> None:
  """Keeps the scores of a fold scored in the work folder beside the repository's results, with
  when it was scored, at which commit and on what, so that the table survives the machine
  that trained it; rewritten only when its scores change (a re-scored fold)."""
  from crackjax.paper import jobs

  previous = kept(fold, keep)
  text = outputs.dumps(scores, indent=1)
  if previous is not None and outputs.dumps(previous['scores'], indent=1) == text:
    return
  when = datetime.datetime.fromtimestamp(fold.record.stat().st_mtime, datetime.UTC)
  hw = jobs.hardware()
  record = {
    'fold': fold.config + (f' at {fold.test_time}' if fold.test_time else ''),
    'scored': f'{when:%d %b %Y %H:%M} UTC',
    'commit': git_commit() or 'unknown',
    'machine': f'{hw["cpu"]} ({hw["cpu_count"]} cores, {hw["backend"]} backend)',
    'scores': scores,
  }
  path = kept_path(fold, keep)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(outputs.dumps(record, indent=1) + '\n')


def git_commit() -> str:
  """This checkout's commit (`git describe --dirty`), '' outside a git checkout."""
  return subprocess.run(
    ['git', 'describe', '--always', '--dirty', '--abbrev=7'],
    cwd=REPO,
    capture_output=True,
    text=True,
  ).stdout.strip()


def provenance(folds: list[Fold], keep: Path | None = None) -> str:
  """The .md's first paragraph: the command that wrote the table, its commit, the machine
  (`crackjax.paper.jobs.hardware`) and when the folds were scored (their eval.json); the kept
  folds taken from `keep` with their own dates, commits and machines."""
  from crackjax.paper import jobs

  commit = git_commit()
  hw = jobs.hardware()
  times = [f.record.stat().st_mtime for f in folds if f.record.exists()]
  scored = 'no fold scored yet'
  if times:
    first, last = (
      datetime.datetime.fromtimestamp(t, datetime.UTC) for t in (min(times), max(times))
    )
    scored = f'folds scored {first:%d %b %Y %H:%M} to {last:%d %b %Y %H:%M} UTC (their eval.json)'
  now = datetime.datetime.now(datetime.UTC)
  command = ' '.join(['python', 'bench/lodo.py', *sys.argv[1:]])
  others = [(f, k) for f in folds if (k := kept_elsewhere(f, keep)) is not None]
  if others:
    scored += (
      '; kept folds, from '
      + str(keep)
      + ': '
      + '; '.join(
        f'{f.recipe} without {f.held_out}{" at " + f.test_time if f.test_time else ""} scored '
        f'{k["scored"]} at {k["commit"]} on {k["machine"]}'
        for f, k in others
      )
    )
  return (
    f'Written by `{command}` at commit {commit or "unknown"}, {now:%d %b %Y %H:%M} UTC, on '
    f'{hw["cpu"]} ({hw["cpu_count"]} cores, {hw["backend"]} backend); {scored}. Per held-out '
    'test split: "strict F1 at the stored threshold / ODS · tolerance_thin_gt the same" (%).'
  )


def fold_done(fold: Fold, variants: list[Fold], args: argparse.Namespace) -> bool:
  """Whether the fold and its test-time variants hold every record the command asks for (or
  are kept: `--keep`)."""
  keep = keep_dir(args)
  wanted = set(args.protocols.split(','))
  for f in [fold, *(v for v in variants if v.id == fold.id)]:
    if kept_elsewhere(f, keep):
      continue
    protocols = wanted if f is fold else {THRESHOLD_PROTOCOL}
    if not protocols <= scored_protocols(f):
      return False
    if ('fp' in args.stages and not f.fp_record.exists()) or (
      'photo' in args.stages and not f.photo_record.exists()
    ):
      return False
  return True


def worker_argv(args: argparse.Namespace) -> list[str]:
  """The flags of a SLURM task's `bench/lodo.py` (`--job` added by its task): the command's
  own, without the executor, the SLURM settings and the table."""
  argv = [
    f'--recipes={",".join(args.recipes)}',
    f'--budget={args.budget}',
    f'--held_out={",".join(args.held_out)}',
    f'--work={args.work}',
    f'--crackforest={args.crackforest}',
    f'--test_split={args.test_split}',
    f'--workers={args.workers}',
    f'--eval_workers={args.eval_workers}',
    f'--protocols={args.protocols}',
    f'--stages={",".join(sorted(args.stages))}',
    f'--test_time={args.test_time}',
    f'--dtype={args.dtype}',
  ]
  optional = {'public': args.public, 'data_dir': args.data_dir, 'keep': args.keep}
  argv += [f'--{k}={v}' for k, v in optional.items() if v is not None]
  return argv + (['--accept_cut'] if args.accept_cut else [])


def slurm_settings(args: argparse.Namespace) -> Settings:
  """The tasks' sbatch settings (`crackjax.paper.slurm.Settings`), each field from its flag
  ``--slurm_<field>`` as the runner names them."""
  from crackjax.paper import slurm

  flag = {'time_min': 'slurm_time', 'options': 'slurm_option'}
  values = {
    f.name: getattr(args, flag.get(f.name, f'slurm_{f.name}'))
    for f in dataclasses.fields(slurm.Settings)
  }
  return slurm.Settings(**{**values, 'options': tuple(values['options'])})


def submit(folds: list[Fold], variants: list[Fold], args: argparse.Namespace) -> None:
  """--executor=slurm: the folds not done and not queued, submitted as one array job (one task
  a fold: `bench/lodo.py --job=RECIPE:HELD_OUT`, its lines in the fold's worker.log), after
  every dataset is prepared here once (tasks preparing the same TFDS folder at once would
  collide). A fold whose task ended unfinished is submitted again: it resumes (launch.py)."""
  from crackjax.data import registry
  from crackjax.paper import slurm

  try:
    slurm.check_available()
  except slurm.SlurmError as e:
    sys.exit(f'bench/lodo.py: {e}')
  todo = [f for f in folds if not fold_done(f, variants, args)]
  for m in sorted({m for f in todo for m in (*f.trains_on, f.held_out)}):
    registry.prepare_dataset(
      {
        'name': m,
        'manual_dir': manual_dir(m, args.crackforest, args.public),
        'data_dir': args.data_dir,
      }
    )
  live, earlier = slurm.live(args.work), slurm.submitted(args.work)
  rest = [f for f in todo if f.id not in live]
  for f in todo:
    if f.id in live:
      print(f'{f.id}: queued or running as SLURM job {live[f.id]}', flush=True)
    elif f.id in earlier:
      print(f'{f.id}: SLURM job {earlier[f.id]["slurm_id"]} ended unfinished ({f.run}/worker.log)')
  if rest:
    command = [sys.executable, str(Path(__file__).resolve()), *worker_argv(args)]
    try:
      ids = slurm.submit(rest, args.work, slurm_settings(args), command)
    except (slurm.SlurmError, ValueError) as e:
      sys.exit(f'bench/lodo.py: {e}')
    for f in rest:
      print(f'{f.id}: submitted as SLURM job {ids[f.id]}', flush=True)
  print(
    f'{len(folds) - len(todo)} of {len(folds)} folds done. Run the same command again once '
    'the jobs end: it writes the table of the folds scored and submits any left unfinished.'
  )


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  folds = plan(args.recipes, args.budget, args.held_out, Path(args.work))
  variants = variant_folds(args.variants, folds)
  if args.plan:
    for f in folds:
      print(f'{f.recipe},{f.budget}: train on {"+".join(f.trains_on)}; score {f.held_out}:test')
    for f in variants:
      print(f'{f.recipe},{f.budget}: score {f.held_out}:test again at {f.test_time} (strict)')
    return 0
  stop_children_on_sigterm()
  if args.job:  # a SLURM task: this fold alone, no table
    from crackjax.paper import slurm

    slurm.leave_preemption_to_the_task()  # USR2 ignored, by the commands it runs too
    run_stages(
      [f for f in folds if f.id == args.job], [v for v in variants if v.id == args.job], args
    )
    return 0
  if args.executor == 'slurm':
    submit(folds, variants, args)
  else:
    run_stages(folds, variants, args)
  keep = keep_dir(args)
  rows, detail = collect(folds + variants, keep)
  if args.peer:
    peer = lodo_tables.peer_scores([Path(p) for p in args.peer.split(',')], args.held_out)
    rows['MTSCrack (its mask: output > 0)'] = peer
    detail['MTSCrack images scored'] = {h: v.get('images') for h, v in peer.items()}
  text, choices = lodo_tables.tables(rows, args.held_out, FP_IMAGES)
  print(
    '\nLODO: per held-out set "strict stored / ODS · thin-GT stored / ODS" F1 (%); stored = '
    "the file's threshold, chosen on the other four's validation parts."
  )
  print(text)
  if args.out:
    Path(args.out).with_suffix('.json').write_text(
      outputs.dumps(
        {'command': sys.argv, 'folds': detail, 'rows': rows, 'new_road_thresholds': choices},
        indent=1,
      )
      + '\n'
    )
    Path(args.out).with_suffix('.md').write_text(
      provenance(folds + variants, keep) + '\n\n' + text + '\n'
    )
  return 0


if __name__ == '__main__':
  sys.exit(main())
