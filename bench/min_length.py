"""How long must a connected component be to count as a crack? Measures the choice of
`crackjax.deploy.measure.DEFAULT_MIN_LENGTH` (crackjax-predict's --min_length).

  python bench/min_length.py --workdir=RUN [--split=test] [--lengths=0,5,10,20,40]

For every image of the run's dataset split (its config.json: dataset, manual_dir), the
8-connected components of the ground-truth mask and of the run's prediction (thresholded at
the run's threshold, as crackjax-predict does), each with its skeleton length
(`measure.measure_each_crack` with min_length 0). For each candidate length L it prints, for
the ground truth and the prediction: the share of the components shorter than L, the share
of the crack length they hold, and the mean number of cracks (components of at least L) per
image; for the prediction also the median over images of (predicted cracks / ground-truth
cracks). A good L drops many components and little length, and brings the predicted count
near the ground truth's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from absl import flags

from crackjax.config import flags as config_flags
from crackjax.runs import logs

PROG = 'bench/min_length.py'
USAGE = f'{PROG} --workdir=RUN [--split=test] [--lengths=0,5,10,20,40]'


def _define_flags(fv: flags.FlagValues) -> None:
  define = {'flag_values': fv}
  flags.DEFINE_string('workdir', None, 'A trained run (the --workdir of launch.py).', **define)
  flags.DEFINE_string('split', None, "Split to measure (default: the run's test split).", **define)
  flags.DEFINE_list('lengths', ['0', '5', '10', '20', '40'], 'Candidate lengths (px).', **define)


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
    '| median pred / GT cracks |',
    '|---|---|---|---|---|---|---|---|',
  ]

  def share(x: np.ndarray, length: float) -> tuple[float, float]:
    short = x < length
    return 100 * short.mean(), 100 * x[short].sum() / max(x.sum(), 1e-9)

  for length in lengths:
    g_n, g_len = share(all_gt, length)
    p_n, p_len = share(all_pred, length)
    g_count = np.asarray([(x >= length).sum() for x in gt], float)
    p_count = np.asarray([(x >= length).sum() for x in pred], float)
    ratio = np.median(p_count[g_count > 0] / g_count[g_count > 0])
    lines.append(
      f'| {length:g} | {g_n:.1f}% | {g_len:.2f}% | {g_count.mean():.2f} | {p_n:.1f}% | '
      f'{p_len:.2f}% | {p_count.mean():.2f} | {ratio:.2f} |'
    )
  return '\n'.join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
  logs.quiet_third_party_logs()
  fv = flags.FlagValues()
  _define_flags(fv)
  config_flags.parse_flags(fv, argv, prog=PROG, usage=USAGE)
  if not fv.workdir:
    sys.exit(f'{PROG}: --workdir=RUN is required; usage: {USAGE}')
  lengths = [float(x) for x in fv.lengths]
  from crackjax.deploy import predictor
  from crackjax.experiment import build
  from crackjax.trainer import scoring

  workdir = Path(fv.workdir)
  experiment = build(predictor.read_config(workdir), training=False)
  config = experiment.config
  examples = list(experiment.eval_examples(fv.split))
  state = experiment.restore(workdir)
  threshold, source = predictor.run_threshold(workdir, int(state.step))
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


if __name__ == '__main__':
  sys.exit(main())
