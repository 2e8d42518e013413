"""`crackjax-evaluate`: scores a trained run on labelled data, beside its own results.

  crackjax-evaluate --workdir=RUN                              # its own dataset's test split
  crackjax-evaluate --workdir=RUN --data=crackforest:test --data=aiglern:test \\
      --manual_dir=aiglern=~/data/AigleRN
  crackjax-evaluate --workdir=RUN --folder=roads/images:roads/masks --protocols=strict
  crackjax-evaluate --model=crackforest-unet-cpu --folder=IMAGES:MASKS --out=DIR

With --model (a released model's name, a model file or its URL, crackjax/models/hub.py)
instead of a run, --out is required and is where the records go: one folder per data argument,
``DIR/<dataset>_<split>/`` (eval.json, eval_per_image.csv, the plots), plus the cross-dataset
table with several; F1 @run t is then at the model file's threshold.

Each data argument is scored under every protocol of --protocols (default: the run's own
``eval.protocols``): `--data=DATASET:SPLIT` a registered dataset (crackjax.data.registry;
``test`` alone is the run's own dataset), `--folder=IMAGES:MASKS` a labelled folder, every image
of it (no split; a folder whose path holds ':' needs nothing, `split_folder`), read straight
from its files (`crackjax.data.folder_stream`: no copy). Results go to
``RUN/eval/<dataset>_<split>/``, or ``OUT/<dataset>_<split>/`` with --out (eval.json and the
usual plots, `crackjax.trainer.scoring`), never in place of the run's own eval.json or
threshold.json. A short
table per data argument is printed: per protocol ODS and OIS P/R/F1, AP, and F1 at the run's
own threshold (its threshold.json, the deployed operating point) and at 0.5; with several, the
cross-dataset table is written as ``--out``/cross_dataset.md and .csv (and listed in its
manifest, `crackjax.runs.outputs`: files of those names that this command did not write there,
or that changed since, are replaced only with --overwrite; a link in --out is refused). The
metrics are counted in `--workers` processes (default: every core): per-image work.
"""

from __future__ import annotations

import csv
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import flags

from crackjax import cli
from crackjax.evaluation import width_rule
from crackjax.evaluation.result import EvalRecord
from crackjax.runs import docs, identity, outputs

PROG = 'crackjax-evaluate'
USAGE = (
  f'{PROG} (--workdir=RUN | --model=NAME|FILE|URL --out=DIR) [--data=DATASET:SPLIT ...] '
  '[--folder=IMAGES:MASKS ...] [flags]'
)
# The cross-dataset table's files in --out (with several data arguments).
CROSS_FILES = ('cross_dataset.md', 'cross_dataset.csv')
# Columns of the cross-dataset table, after data and protocol.
COLUMNS = (
  ('images', 'images'),
  ('ods_p', 'ODS P'),
  ('ods_r', 'ODS R'),
  ('ods_f1', 'ODS F1'),
  ('ois_p', 'OIS P'),
  ('ois_r', 'OIS R'),
  ('ois_f1', 'OIS F1'),
  ('ap', 'AP'),
  ('f1_run', 'F1 @run t'),
  ('f1_photo', 'F1 @photo t'),
  ('f1_05', 'F1 @0.5'),
)


def _define_flags(fv: flags.FlagValues) -> None:
  cli.define_model_flags(fv, model_note='; needs --out')
  _define_data_flags(fv)
  flags.DEFINE_list(
    'protocols', None, "protocols (default: the run's eval.protocols)", flag_values=fv
  )
  flags.DEFINE_list(
    'scales',
    None,
    'test-time scales: each photo predicted at these factors of its size, the maps averaged '
    "(default: the run's or model file's eval.scales, 1 for most: as it is)",
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'flip',
    None,
    "also predict each photo mirrored and average (default: the run's or file's eval.flip)",
    flag_values=fv,
  )
  cli.define_photo_threshold_flag(fv, note='; its F1 in the F1 @photo t column')
  width_rule.define_flag(fv, note='; eval_per_image.csv: scale, rule_width_px')
  flags.DEFINE_string(
    'out',
    None,
    'where the records (DIR/<dataset>_<split>/) and the cross-dataset table go (default: RUN/eval)',
    flag_values=fv,
  )
  flags.DEFINE_bool(
    'overwrite',
    False,
    'replace cross_dataset.md / .csv in --out that this command did not write there, or that '
    'changed since (its own unchanged ones it replaces anyway)',
    flag_values=fv,
  )
  flags.DEFINE_integer(
    'workers', os.cpu_count() or 1, 'processes that count the metrics', flag_values=fv
  )
  flags.register_validator(
    'workers', lambda v: v >= 1, message='--workers must be >= 1', flag_values=fv
  )


def _define_data_flags(fv: flags.FlagValues) -> None:
  """The flags that say what is scored: --data, --folder and how their files are read."""
  flags.DEFINE_multi_string(
    'data',
    [],
    "a registered dataset and split, DATASET:SPLIT (e.g. crackforest:test); 'test' alone: the "
    "run's own dataset (the default when no --data or --folder is given); repeatable",
    flag_values=fv,
  )
  flags.DEFINE_multi_string(
    'folder',
    [],
    'a labelled folder, IMAGES_DIR:MASKS_DIR (masks matched by file name, crack = white; '
    f'{docs.doc("datasets.md")}), every image scored; repeatable',
    flag_values=fv,
  )
  flags.DEFINE_multi_string(
    'manual_dir',
    [],
    "DATASET=DIR: where a registered dataset's downloaded files are "
    f"({docs.doc('datasets.md')}); the run's own dataset keeps its config's",
    flag_values=fv,
  )
  flags.DEFINE_string(
    'data_dir',
    None,
    "where the --data datasets are prepared (default: the run's config.data.data_dir; a model "
    'file: ~/tensorflow_datasets or $TFDS_DATA_DIR)',
    flag_values=fv,
  )
  flags.DEFINE_enum(
    'mask_polarity',
    None,
    ['bright', 'dark', 'auto'],
    "how the --folder masks mark cracks: bright (white cracks on black, the run's default), "
    'dark (black cracks on white) or auto (the minority of each mask)',
    flag_values=fv,
  )
  flags.DEFINE_string(
    'mask_suffix',
    None,
    "the --folder masks' names: the image's name plus this suffix (e.g. _mask for "
    'photo.jpg + photo_mask.png; default: the same name)',
    flag_values=fv,
  )


def data_configs(
  config,
  data: Sequence[str],
  folders: Sequence[str],
  manual_dirs,
  workdir,
  mask_polarity: str | None = None,
  mask_suffix: str | None = None,
):
  """(label, data config, split) per data argument; ValueError naming a malformed one.
  `mask_polarity`: the --folder masks' polarity (default the run's config); `mask_suffix`:
  their names' suffix (default the run's config)."""
  from crackjax.data import mixture
  from crackjax.data import registry as data_registry
  from crackjax.experiment import specs

  out = []
  for spec in data or ([] if folders else ['test']):
    # The first ':' ends the name: a sliced split has its own (crackforest:test[:6]).
    name, _, split = spec.partition(':') if ':' in spec else ('', '', spec)
    c = config.copy_and_resolve_references()
    if name and name not in data_registry.DATASETS:
      raise ValueError(
        f'--data={spec}: unknown dataset {name!r}; known: {sorted(data_registry.DATASETS)}'
      )
    if name and name != config.data.name:
      if name in mixture.member_fields(specs.data_group(config)):
        # A member of the run's mixture of datasets: its own data group (manual dir, splits).
        c.data = mixture.member_data(specs.data_group(c), name)
      else:
        c.data.name = name
        c.data.manual_dir = manual_dirs.get(name)
    if c.data.name in manual_dirs:  # also the run's own dataset, e.g. on another machine
      c.data.manual_dir = manual_dirs[c.data.name]
    out.append((f'{c.data.name}:{split}', c, split))
  for spec in folders:
    images, masks = split_folder(spec)
    for path in (images, masks):
      if not Path(path).expanduser().is_dir():
        raise ValueError(f'--folder={spec}: {path} is not a folder')
    c = config.copy_and_resolve_references()
    c.data.name = 'crack_folder'
    c.data.folder.images = str(Path(images).expanduser().resolve())
    c.data.folder.masks = str(Path(masks).expanduser().resolve())
    # Every image, read straight from the folder (`data.folder_stream`): no split, no copy.
    c.data.folder.train_list = None
    c.data.folder.test_list = None
    if mask_polarity:
      c.data.folder.mask_polarity = mask_polarity
    if mask_suffix is not None:
      c.data.folder.mask_suffix = mask_suffix
    out.append((f'folder:{images}', c, 'test'))
  return out


def split_folder(spec: str) -> tuple[str, str]:
  """(images, masks) of ``--folder=IMAGES_DIR:MASKS_DIR``. A folder whose path holds ':'
  needs nothing: the ':' that leaves two existing folders is the separator; where several
  would, write the folders' own colons as '\\:'.

  Raises:
    ValueError: not two folders, or ambiguous (naming the escape).
  """
  marker = '\x00'
  text = spec.replace('\\:', marker)  # an escaped colon belongs to a path
  cuts = [i for i, c in enumerate(text) if c == ':']
  if not cuts:
    raise ValueError(f'--folder={spec}: expected IMAGES_DIR:MASKS_DIR')
  pairs = [(text[:i].replace(marker, ':'), text[i + 1 :].replace(marker, ':')) for i in cuts]
  both = [
    (a, b) for a, b in pairs if a and b and all(Path(p).expanduser().is_dir() for p in (a, b))
  ]
  if len(both) > 1:
    raise ValueError(
      f'--folder={spec}: it splits into two folders in {len(both)} ways; write the colons of '
      "the folders' own paths as \\: (e.g. --folder='a\\:b:masks')"
    )
  images, masks = both[0] if both else pairs[0]
  if not images or not masks:
    raise ValueError(f'--folder={spec}: expected IMAGES_DIR:MASKS_DIR')
  return images, masks


def _in_this_command(message: str) -> str:
  """A data message's advice in this command's flags: a folder's mask polarity is
  --mask_polarity here (the builders name the training config's field)."""
  message = message.replace('--config.data.folder.mask_polarity=', '--mask_polarity=')
  message = message.replace('--config.data.folder.mask_suffix=', '--mask_suffix=')
  # Scoring takes labelled crack images: a mask that is mostly crack is a polarity problem.
  return message.replace(
    ' If cracks really cover most of these images, set '
    '--config.data.folder.allow_majority_crack=True.',
    '',
  )


def table_rows(label: str, record: EvalRecord) -> list[dict[str, Any]]:
  """One row per protocol of an evaluation record, with the COLUMNS' keys."""
  rows = []
  for protocol, r in record.results.items():
    run, photo = ((r.operating_points or {}).get(k) for k in ('run', 'photo'))
    rows.append(
      {
        'data': label,
        'protocol': protocol,
        'images': record.num_images,
        'ods_p': r.ods.precision,
        'ods_r': r.ods.recall,
        'ods_f1': r.ods.f1,
        'ois_p': r.ois.precision,
        'ois_r': r.ois.recall,
        'ois_f1': r.ois.f1,
        'ap': r.ap,
        'f1_run': run.f1 if run else None,
        'f1_photo': photo.f1 if photo else None,
        'f1_05': r.fixed.f1,
      }
    )
  return rows


def markdown(rows: Sequence[dict[str, Any]], caption: str) -> str:
  """The rows as a Markdown table (percentages, one decimal), under `caption`."""
  head = ['data', 'protocol', *(title for _, title in COLUMNS)]
  lines = [caption, '', '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for row in rows:
    # A '|' in a folder's name would end its cell: escaped, as Markdown tables allow.
    cells = [row['data'].replace('|', '\\|'), row['protocol'], str(row['images'])]
    for key, _ in COLUMNS[1:]:
      value = row[key]
      cells.append('' if value is None else f'{100 * value:.1f}')
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the command (argv without the program name); returns the exit status. A held run
  (training, another evaluation), Ctrl-C or a full disk end it in one line (`runs.exits`)."""
  return COMMAND.run(_main, argv)


COMMAND = cli.Command(
  PROG,
  _define_flags,
  usage=USAGE,
  errors=(identity.RunLockedError,),
  interruptible=True,
  quiet_logs=True,
)


def _main(fv: flags.FlagValues, arguments: list[str]) -> int:
  """The command on its parsed flags (arguments that are not flags are ignored)."""
  del arguments
  if not fv.workdir and not fv.model:
    sys.exit(
      f'{PROG}: --workdir=RUN is required (or --model=NAME|FILE|URL with --out=DIR); usage: {USAGE}'
    )
  cli.refuse_two_models(fv, PROG)
  if fv.model and not fv.out:
    sys.exit(f'{PROG}: --model needs --out=DIR, where the records go; usage: {USAGE}')
  if fv.out and Path(fv.out).exists() and not Path(fv.out).is_dir():
    sys.exit(f'{PROG}: --out={fv.out} is a file; name a folder (made if missing).')
  if fv.model and fv.step is not None:
    sys.exit(f'{PROG}: --step chooses a checkpoint of a --workdir run; a model file has one.')
  from crackjax import evaluation
  from crackjax.engine import checkpoints
  from crackjax.evaluation import threshold_choice
  from crackjax.experiment import restored
  from crackjax.experiment.build import build

  if fv.model:
    try:
      run = restored.load_model(fv.model, allow_plugins=fv.allow_plugins)
    except (OSError, ValueError) as e:
      sys.exit(f'{PROG}: {" ".join(str(e).split())}')
    config, workdir, where = run.config, Path(fv.out), f'model {fv.model}'
  else:
    # RUN, RUN/checkpoints, or a checkpoints/ folder copied alone (its steps record the config).
    workdir = checkpoints.run_directory(fv.workdir)
    try:
      config = restored.read_config(workdir)
    except FileNotFoundError as e:
      sys.exit(f'{PROG}: {e}')
    where = f'{workdir / "config.json"}'
  # A model file's recorded config may lack what a build reads (an altered file): its field
  # named, not a traceback.
  broken = (ValueError, KeyError, AttributeError, TypeError) if fv.model else (ValueError,)
  try:
    experiment = build(config, training=False)
  except broken as e:
    if not isinstance(e, ValueError):
      e = f'its crackjax.config cannot be rebuilt ({type(e).__name__}: {e}); the file was altered'
    sys.exit(f'{PROG}: {where}: {" ".join(str(e).split())}')
  protocols = tuple(fv.protocols or config.eval.protocols)
  unknown = [p for p in protocols if p not in evaluation.PROTOCOLS]
  if unknown:
    sys.exit(f'{PROG}: unknown --protocols {unknown}; known: {sorted(evaluation.PROTOCOLS)}')
  targets = _targets(fv, config, workdir)
  folder = Path(fv.out) if fv.out else workdir / 'eval'
  if len(targets) > 1:  # the cross-dataset table: checked before the long work
    try:
      outputs.check_inside(folder, [folder / n for n in (*CROSS_FILES, outputs.MANIFEST)])
    except outputs.UnsafeOutputError as e:
      sys.exit(f'{PROG}: {e}')
    foreign = outputs.foreign_files(folder, CROSS_FILES)
    if foreign and not fv.overwrite:
      sys.exit(outputs.replace_advice(PROG, folder, foreign))
  if fv.model:
    state = restored.inference_state(run)
    threshold, source, what = run.threshold, run.threshold_source, f'model {fv.model}'
  else:
    try:
      state = experiment.states.restore(workdir, step=fv.step, inference=True)
    except (FileNotFoundError, checkpoints.CheckpointError) as e:
      sys.exit(f'{PROG}: {e}')
    threshold, source = restored.run_threshold(workdir, int(state.step))
    what = f'run {workdir}'
  step = int(state.step)
  print(f'{PROG}: {what} step {step}; run threshold {threshold:g} ({source})', flush=True)
  points = {'run': threshold}
  weight = config.eval.get('photo_threshold') if fv.photo_threshold is None else fv.photo_threshold
  if weight is not None:  # each photo's own threshold too (threshold_choice.photo_threshold)
    points['photo'] = threshold_choice.PhotoThreshold(threshold, weight)
  with identity.leader_lock(workdir):  # it writes RUN/eval/...: one writer of a run at a time
    records = Path(fv.out) if fv.out else None  # --out: the records go there, not into RUN
    rows = _score_all(experiment, workdir, state, targets, protocols, points, fv.workers, records)
    return _cross_table(rows, targets, what, folder, step, threshold, source)


def _targets(fv: flags.FlagValues, config, workdir: Path) -> list:
  """(label, data config, split) per data argument (`data_configs`), each with the test-time
  scales, flip and width rule and --data_dir applied; a bad one ends the command in one line."""
  from crackjax.evaluation import inference

  try:
    test_time = inference.test_time_of(fv.scales, fv.flip, config.eval)
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')  # the flag or the eval field, and its value
  try:  # --width_rule, else the file's or run's eval.width_rule
    width = width_rule.of_command(fv.width_rule, config.eval)
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')
  manual = dict(item.partition('=')[::2] for item in fv.manual_dir)
  try:
    targets = data_configs(
      config, fv.data, fv.folder, manual, workdir, fv.mask_polarity, fv.mask_suffix
    )
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')
  for _, c, _ in targets:
    with c.eval.unlocked():  # a recorded config from before the fields has neither
      c.eval.scales, c.eval.flip = test_time
      c.eval.width_rule = width
    if fv.data_dir:
      c.data.data_dir = fv.data_dir
  return targets


def _score_all(experiment, workdir, state, targets, protocols, points, workers, records=None):
  """Scores each data argument beside the run's own results (in `records`/<dataset>_<split>
  when given: --out) at the operating `points` ('run', and 'photo' with --photo_threshold),
  with its width rule at the run's threshold (`width_rule.WidthRule`); prints its table."""
  import dataclasses

  from crackjax.data import folder_stream
  from crackjax.data import registry as data_registry
  from crackjax.evaluation import inference
  from crackjax.experiment import specs
  from crackjax.experiment.build import on_other_data
  from crackjax.trainer import eval_records, scoring

  step = int(state.step)
  rows = []
  opened = []
  # Every data argument opened first (each dataset prepared, each split checked): a split
  # that does not exist ends the command before anything is scored.
  for label, c, split in targets:
    c.eval.protocols = protocols
    scored = on_other_data(experiment, c)
    rule = c.eval.width_rule and width_rule.WidthRule(c.eval.width_rule, points['run'])
    plan = dataclasses.replace(scored.eval_plan, width_rule=rule)
    scored = dataclasses.replace(scored, eval_plan=plan)
    examples = total = None
    try:
      if label.startswith('folder:'):  # streamed from its files, nothing prepared
        total, examples = folder_stream.folder_examples(specs.data_group(c))
      else:
        scored.splits.source(split)
    except (data_registry.DatasetError, ValueError) as e:
      sys.exit(f'{PROG}: {label}: {_in_this_command(" ".join(str(e).split()))}')
    opened.append((label, split, scored, examples, total))
  for label, split, scored, examples, total in opened:
    out = eval_records.other_results_dir(scored.eval_plan, workdir, split)
    if records is not None:  # --out=DIR: DIR/<dataset>_<split>
      out = Path(records) / out.name
    try:
      record = scoring.evaluate_checkpoint(
        scored,
        workdir,
        state=state,
        split=split,
        operating_points=points,
        workers=workers,
        out=out,
        examples=examples,
        num_examples=total,
      )
    except data_registry.DatasetError as e:  # a photo of the folder, a prepared record unreadable
      sys.exit(f'{PROG}: {label}: {_in_this_command(" ".join(str(e).split()))}')
    except inference.ScaleTooSmallError as e:  # a scale below 1 on a photo too small for it
      sys.exit(f'{PROG}: {label}: {e}')
    mine = table_rows(label, record)
    rows += mine
    print(markdown(mine, f'{label} ({record.num_images} images, step {step}) -> {out}'))
    print(flush=True)
  return rows


def _cross_table(
  rows, targets, what: str, folder: Path, step: int, threshold: float, source
) -> int:
  """With several data arguments: the cross-dataset table, `folder`/cross_dataset.md and .csv."""
  if len(targets) > 1:
    folder.mkdir(parents=True, exist_ok=True)
    caption = (
      f'{what[0].upper()}{what[1:]}, step {step}; F1 @run t at {threshold:g} ({source}). Percent.'
    )
    (folder / 'cross_dataset.md').write_text(markdown(rows, caption) + '\n')
    with open(folder / 'cross_dataset.csv', 'w', newline='') as f:
      writer = csv.DictWriter(f, fieldnames=['data', 'protocol', *(k for k, _ in COLUMNS)])
      writer.writeheader()
      writer.writerows(rows)
    outputs.record_outputs(folder, CROSS_FILES, PROG)
    print(f'{PROG}: wrote {folder / "cross_dataset.md"} and cross_dataset.csv')
  return 0


if __name__ == '__main__':
  sys.exit(main())
