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
  python bench/lodo.py --status --recipes=base --work=...   # where each fold stands

Every stage is resumable: a fold whose last epoch is recorded is not trained again (a killed
training resumes from its last checkpoint: `launch.py`), an exported file and a score already
on disk are kept. Run it in the background (``nohup ... &``) and the same command later; the
table (``--out``.json / .md) is rewritten from whatever folds are scored so far.

Folders: ``WORK/<recipe>_<budget>/<held_out>/`` is the training run (launch.py's workdir), with
``model.safetensors`` (the best validation epoch, `crackjax-export --format=model`) and
``heldout/<held_out>_test/eval.json`` (`crackjax-evaluate --model`).

This file is the command: its flags, the plan from configs/lodo.py (members, recipes, budgets)
and the SLURM submission. The folds and their stages are `crackjax.lodo` (`folds`,
`fold_stages`, `kept_scores`), the tables `crackjax.lodo.fold_tables`.

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
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from crackjax.configs import lodo
from crackjax.lodo import fold_stages, fold_tables, kept_scores
from crackjax.lodo import folds as folds_lib
from crackjax.lodo.fold_stages import Campaign
from crackjax.lodo.folds import Fold
from crackjax.runs import exits, outputs

if TYPE_CHECKING:
  from crackjax.paper.slurm import Settings

REPO = Path(__file__).resolve().parents[1]


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
    default=','.join(folds_lib.PROTOCOLS),
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
    default=None,
    choices=('float32', 'bfloat16'),
    help="the exported files' parameters (crackjax-export --dtype; default: those the campaign "
    'exported already, else float32); a campaign keeps one',
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
  p.add_argument(
    '--status',
    action='store_true',
    help='print where each fold stands (epochs, exported, scored, kept; its SLURM job and '
    'state if submitted) and run nothing',
  )
  args = p.parse_args(argv)
  for flag, known in (('recipes', lodo.RECIPES), ('held_out', lodo.MEMBERS)):
    given = getattr(args, flag)
    setattr(args, flag, [v for v in given.split(',') if v])
    if not getattr(args, flag):  # no fold: --status and the table would have nothing to show
      refuse(f'--{flag}={given!r} names none; give one or more of {",".join(known)}')
  for name, known, values in (
    ('recipe', lodo.RECIPES, args.recipes),
    ('held-out member', lodo.MEMBERS, args.held_out),
  ):
    bad = [v for v in values if v not in known]
    if bad:
      p.error(f'unknown {name} {bad}; known: {list(known)}')
  try:
    args.variants = folds_lib.parse_test_time(args.test_time, args.recipes)
  except ValueError as e:
    p.error(str(e))
  args.stages = set(args.stages.split(','))
  args.work = str(Path(args.work).absolute())  # the commands run in the repository's folder
  folds = {f'{r}:{h}' for r in args.recipes for h in args.held_out}
  if args.job is not None and args.job not in folds:
    p.error(f'--job {args.job!r} is not a fold of --recipes and --held_out: {sorted(folds)}')
  if args.stages & {'train', 'score', 'fp'} and not (args.public or args.plan or args.status):
    p.error("--public (the cropped copies' Datasets/ folder) is needed to train or score")
  if args.keep and not args.plan:  # before any fold's work, not after it
    problem = outputs.unwritable(args.keep)
    if problem:
      refuse(f"--keep={args.keep}: cannot keep the folds' scores there: {problem}")
  return args


def refuse(message: str) -> NoReturn:
  """Ends the command in one line naming the flag or file at fault."""
  sys.exit(f'bench/lodo.py: {message}.')


def manual_dir(member: str, crackforest: str, public: str | None) -> str:
  """A member's source folder: the CrackForest archive or the cropped copies' Datasets/."""
  return crackforest if member in lodo.roads_unet_cpu.CRACKFOREST_MEMBERS else public or ''


def campaign(args: argparse.Namespace) -> Campaign:
  """What every fold's commands share, from the flags."""
  return Campaign(
    repo=REPO,
    manual_dirs={m: manual_dir(m, args.crackforest, args.public) for m in lodo.MEMBERS},
    data_dir=args.data_dir,
    test_split=args.test_split,
    workers=args.workers,
    eval_workers=args.eval_workers,
    protocols=tuple(args.protocols.split(',')),
    stages=frozenset(args.stages),
    accept_cut=args.accept_cut,
    dtype=args.dtype or 'float32',
    keep=Path(args.keep) if args.keep else None,
  )


def plan(recipes: list[str], budget: str, held_out: list[str], work: Path) -> list[Fold]:
  """Every fold, recipe by recipe (configs/lodo.py's members and epochs)."""
  return folds_lib.plan(recipes, budget, held_out, work, lodo.MEMBERS, planned_epochs)


def planned_epochs(held_out: str, recipe: str, budget: str) -> int:
  """The epochs a fold's budget trains (its config's num_epochs)."""
  return lodo.get_config(f'{held_out},{recipe},{budget}').num_epochs


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
  ]
  optional = {'public': args.public, 'data_dir': args.data_dir, 'keep': args.keep}
  optional['dtype'] = args.dtype  # the campaign's (`main`), passed to its tasks
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


def submit(
  folds: list[Fold], variants: list[Fold], args: argparse.Namespace, campaign: Campaign
) -> None:
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
  todo = [f for f in folds if not fold_stages.fold_done(f, variants, campaign)]
  for m in sorted({m for f in todo for m in (*f.trains_on, f.held_out)}):
    registry.prepare_dataset(
      {'name': m, 'manual_dir': campaign.manual_dirs[m], 'data_dir': campaign.data_dir}
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


def status_lines(
  folds: list[Fold], variants: list[Fold], settings: Campaign, work: str
) -> list[str]:
  """--status: a line per fold (`fold_stages.status`), with its SLURM job and state where the
  campaign submitted it (--executor=slurm), then how many are done."""
  from crackjax.paper import slurm

  subs = slurm.submitted(work)
  states = slurm.states([s['slurm_id'] for s in subs.values()]) if subs else {}
  width = max(len(f.id) for f in folds)
  lines = []
  for f in folds:
    line = fold_stages.status(f, variants, settings)
    if f.id in subs:
      slurm_id = subs[f.id]['slurm_id']
      line += f'; SLURM job {slurm_id} {states.get(slurm_id, "UNKNOWN")}'
    lines.append(f'{f.id:<{width}}  {line}')
  done = sum(fold_stages.fold_done(f, variants, settings) for f in folds)  # kept ones too
  return [*lines, f'{done} of {len(folds)} folds done or kept.']


def run_folds(folds: list[Fold], variants: list[Fold], settings: Campaign) -> None:
  """`fold_stages.run_stages`; a stage's command that fails ends this one in a line that names
  it (its own lines above say why), what is done kept for the same command to resume."""
  try:
    fold_stages.run_stages(folds, variants, settings)
  except subprocess.CalledProcessError as e:
    what = ' '.join(str(part) for part in e.cmd[1:3])
    sys.exit(
      f'bench/lodo.py: `{what} ...` exited {e.returncode} (its lines above say why); what is '
      'done is kept: the same command resumes from there.'
    )


#: What a stopped campaign keeps, and how it goes on (its one line after Ctrl-C or SIGTERM).
_KEPT = (
  "the folds' stages done so far are kept (a training its newest checkpoint): run the same "
  'command again to resume.'
)


def main(argv: list[str] | None = None) -> int:
  """The command; Ctrl-C (130) and SIGTERM (143) end it in one line, once the stage under way
  has ended (`fold_stages.run_command` passes them on and waits)."""
  try:
    with exits.interruptible():
      return _main(argv)
  except KeyboardInterrupt:
    print(f'bench/lodo.py: interrupted (Ctrl-C); {_KEPT}', file=sys.stderr, flush=True)
    return exits.INTERRUPTED
  except SystemExit as e:
    if e.code != exits.TERMINATED:
      raise
    print(f'bench/lodo.py: stopped by SIGTERM; {_KEPT}', file=sys.stderr, flush=True)
    return exits.TERMINATED


def _main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  folds = plan(args.recipes, args.budget, args.held_out, Path(args.work))
  variants = folds_lib.variant_folds(args.variants, folds)
  if args.plan:
    for f in folds:
      trains = '+'.join(f.trains_on)
      print(f'{f.recipe},{f.budget}: train on {trains}; score {f.held_out}:{args.test_split}')
    for f in variants:
      split = f'{f.held_out}:{args.test_split}'
      print(f'{f.recipe},{f.budget}: score {split} again at {f.test_time} (strict)')
    return 0
  if args.status:
    print('\n'.join(status_lines(folds, variants, campaign(args), args.work)))
    return 0
  try:  # a resumed campaign's files keep their dtype (its table compares them)
    args.dtype = fold_stages.campaign_dtype(folds, args.dtype)
  except ValueError as e:
    refuse(str(e).rstrip('.'))
  settings = campaign(args)
  fold_stages.stop_children_on_sigterm()
  if args.job:  # a SLURM task: this fold alone, no table
    from crackjax.paper import slurm

    slurm.leave_preemption_to_the_task()  # USR2 ignored, by the commands it runs too
    mine = [f for f in folds if f.id == args.job]
    run_folds(mine, [v for v in variants if v.id == args.job], settings)
    return 0
  if args.executor == 'slurm':
    submit(folds, variants, args, settings)
  else:
    run_folds(folds, variants, settings)
  rows, detail = kept_scores.collect(folds + variants, settings.keep)
  if args.peer:
    peer = fold_tables.peer_scores([Path(p) for p in args.peer.split(',')], args.held_out)
    rows['MTSCrack (its mask: output > 0)'] = peer
    detail['MTSCrack images scored'] = {h: v.get('images') for h, v in peer.items()}
  text, choices = fold_tables.tables(rows, args.held_out, folds_lib.FP_IMAGES)
  print(
    '\nLODO: per held-out set "strict stored / ODS · thin-GT stored / ODS" F1 (%); stored = '
    "the file's threshold, chosen on the other four's validation parts."
  )
  print(text)
  if args.out:
    # The provenance first: the checkout's commit read after the .json is rewritten would
    # name the table itself as a change ('-dirty').
    command = ' '.join(['python', 'bench/lodo.py', *sys.argv[1:]])
    head = kept_scores.provenance(folds + variants, command, settings.keep)
    Path(args.out).with_suffix('.json').write_text(
      outputs.dumps(
        {'command': sys.argv, 'folds': detail, 'rows': rows, 'new_road_thresholds': choices},
        indent=1,
      )
      + '\n'
    )
    Path(args.out).with_suffix('.md').write_text(head + '\n\n' + text + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
