"""How long must a connected component be to count as a crack? Measures the choice of
`crackjax.deploy.measure.DEFAULT_MIN_LENGTH` (crackjax-predict's --min_length, the speckle
filter of measurements.csv and cracks.csv).

  python bench/min_length.py --workdir=RUN [--split=test] [--lengths=0,5,10,20,40]
  python bench/min_length.py --model=crackforest-unet-cpu --folder=IMAGES:MASKS [--limit=20]

For every image of the run's dataset split (its config.json: dataset, manual_dir), or of a
labelled folder (masks matched by name, `--mask_suffix`, crack = white) predicted by a model
file as crackjax-predict does (`crackjax.Predictor`: whole photos, tiled), the 8-connected
components of the ground-truth mask and of the prediction (thresholded at the run's or the
file's threshold, as crackjax-predict does), each with its skeleton length
(`measure.measure_each_crack` with min_length 0). For each candidate length L it prints, for
the ground truth and the prediction: the share of the components shorter than L, the share
of the crack length they hold, the mean number of cracks (components of at least L) per image
and the mean crack length per image that stays (px); for the prediction also the median over
images of (predicted cracks / ground-truth cracks). A good L drops many components and little
length, and brings the predicted count near the ground truth's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from absl import flags

from crackjax import cli
from crackjax.runs import logs

PROG = 'bench/min_length.py'
USAGE = (
  f'{PROG} (--workdir=RUN [--split=test] | --model=NAME|FILE|URL --folder=IMAGES:MASKS) '
  '[--lengths=0,5,10,20,40]'
)


def _define_flags(fv: flags.FlagValues) -> None:
  define = {'flag_values': fv}
  flags.DEFINE_string('workdir', None, 'A trained run (the --workdir of launch.py).', **define)
  flags.DEFINE_string('split', None, "Split to measure (default: the run's test split).", **define)
  flags.DEFINE_list('lengths', ['0', '5', '10', '20', '40'], 'Candidate lengths (px).', **define)
  flags.DEFINE_string(
    'model', None, 'Instead of --workdir: a released model, a model file or its URL.', **define
  )
  flags.DEFINE_string(
    'folder', None, 'With --model: IMAGES_DIR:MASKS_DIR, masks matched by name.', **define
  )
  flags.DEFINE_string('mask_suffix', '', '--folder: masks named <image name><suffix>.*', **define)
  flags.DEFINE_integer('limit', None, '--folder: the first N images (by name) only.', **define)


def component_lengths(mask: np.ndarray) -> np.ndarray:
  """Skeleton length (px) of every 8-connected component of a binary mask."""
  from crackjax.deploy import measure

  rows = measure.measure_each_crack(mask, min_length=0)
  return np.asarray([r['length_px'] for r in rows], float)


def table(gt: list[np.ndarray], pred: list[np.ndarray], lengths: Sequence[float]) -> str:
  """The Markdown table of the module docstring from per-image component lengths."""
  all_gt, all_pred = np.concatenate(gt), np.concatenate(pred)
  lines = [
    '| L (px) | GT: components < L | GT: length in them | GT cracks / image '
    '| pred: components < L | pred: length in them | pred cracks / image '
    '| pred length / image (px) | median pred / GT cracks |',
    '|---|---|---|---|---|---|---|---|---|',
  ]

  def share(x: np.ndarray, length: float) -> tuple[float, float]:
    short = x < length
    return 100 * short.mean(), 100 * x[short].sum() / max(x.sum(), 1e-9)

  for length in lengths:
    g_n, g_len = share(all_gt, length)
    p_n, p_len = share(all_pred, length)
    g_count = np.asarray([(x >= length).sum() for x in gt], float)
    p_count = np.asarray([(x >= length).sum() for x in pred], float)
    p_length = np.mean([x[x >= length].sum() for x in pred])
    ratio = np.median(p_count[g_count > 0] / g_count[g_count > 0])
    lines.append(
      f'| {length:g} | {g_n:.1f}% | {g_len:.2f}% | {g_count.mean():.2f} | {p_n:.1f}% | '
      f'{p_len:.2f}% | {p_count.mean():.2f} | {p_length:.0f} | {ratio:.2f} |'
    )
  return '\n'.join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
  logs.quiet_third_party_logs()
  fv = flags.FlagValues()
  _define_flags(fv)
  cli.parse_flags(fv, argv, prog=PROG, usage=USAGE)
  if bool(fv.workdir) == bool(fv.model) or bool(fv.model) != bool(fv.folder):
    sys.exit(f'{PROG}: give --workdir=RUN, or --model with --folder; usage: {USAGE}')
  lengths = [float(x) for x in fv.lengths]
  if fv.model:
    return _folder(fv, lengths)
  from crackjax.experiment import restored
  from crackjax.experiment.build import build
  from crackjax.trainer import scoring

  workdir = Path(fv.workdir)
  experiment = build(restored.read_config(workdir), training=False)
  config = experiment.config
  examples = list(experiment.splits.examples(fv.split))
  state = experiment.states.restore(workdir)
  threshold, source = restored.run_threshold(workdir, int(state.step))
  probs = scoring.predict_examples(experiment.model, state, examples)
  gt = [component_lengths(ex['mask'][..., 0] > 0.5) for ex in examples]
  pred = [component_lengths(p > threshold) for p in probs]
  split = fv.split or config.data.test_split
  print(
    f'{config.data.name} {split}: {len(examples)} images; run {workdir} step {int(state.step)}, '
    f'threshold {threshold:g} ({source}); {sum(map(len, gt))} ground-truth and '
    f'{sum(map(len, pred))} predicted components.'
  )
  print(table(gt, pred, lengths))
  return 0


def folder_pairs(images: Path, masks: Path, suffix: str = '') -> list[tuple[Path, Path]]:
  """(image, mask) of every image of `images` (by name) whose mask `masks`/<stem><suffix>.*
  exists."""
  from crackjax.tfds_builders.listing import IMAGE_EXTENSIONS

  pairs = []
  for image in sorted(p for p in images.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS):
    found = sorted(
      p for p in masks.glob(f'{image.stem}{suffix}.*') if p.suffix.lower() in IMAGE_EXTENSIONS
    )
    if found:
      pairs.append((image, found[0]))
  return pairs


def _folder(fv, lengths: Sequence[float]) -> int:
  import PIL.Image

  from crackjax.deploy import photos, predictor

  images, _, masks = fv.folder.partition(':')
  pairs = folder_pairs(Path(images), Path(masks), fv.mask_suffix)[: fv.limit]
  if not pairs:
    sys.exit(f'{PROG}: --folder={fv.folder}: no image with a mask')
  model = predictor.Predictor.from_pretrained(fv.model)
  gt, pred = [], []
  for image, mask in pairs:
    photo = photos.load_photo(image)
    truth = np.asarray(PIL.Image.open(mask).convert('L')) > 127
    gt.append(component_lengths(truth))
    pred.append(component_lengths(model.mask(model(photo))))
  print(
    f'{fv.folder}: {len(pairs)} images; model {fv.model}, threshold {model.threshold:g} (the '
    f"file's); {sum(map(len, gt))} ground-truth and {sum(map(len, pred))} predicted components; "
    f'ground-truth length {np.mean([x.sum() for x in gt]):.0f} px per image.'
  )
  print(table(gt, pred, lengths))
  return 0


if __name__ == '__main__':
  sys.exit(main())
