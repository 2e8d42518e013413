"""The tolerance protocols' matching against BSDS's correspondPixels, image by image and
threshold by threshold, on a trained run's probability maps.

  PYTHONPATH=DIR python bench/matching_vs_correspond.py --workdir=RUN [--num_images=12]

For each test image of the run's dataset (its config.json) and each threshold of the BSDS
grid 0.01 ... 0.99, the prediction ``prob >= t`` is thinned (`crackjax.evaluation.thin`, equal
to MATLAB's ``bwmorph(bw, 'thin', Inf)``) and matched to the ground truth (as given:
`tolerance`; thinned the same way: `tolerance_thin_gt`) at ``maxDist = 0.0075`` of the
diagonal twice: by crackjax (`evaluation.tolerance_counts`, an exact maximum-cardinality
matching) and by correspondPixels (the BSDS benchmark's CSA assignment code, through the
``correspond_pixels`` binding of the pyEdgeEval package, BSDS's C++ sources compiled). Both
see the same thinned maps, so only the matching differs. It prints, per protocol, how many
(image, threshold) cells match a different number of pixels and in which direction, the
matched pixels summed over all cells, and the ODS (BSDS ``maxF``) from each.

pyEdgeEval is not a crackjax dependency: install it anywhere and put it on PYTHONPATH, e.g.
``pip install --no-deps --target /tmp/pee pyedgeeval==0.2.8`` (it compiles BSDS's C++ code:
needs a C++ compiler, numpy and Cython).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from absl import flags

from crackjax import cli
from crackjax.runs import logs

PROG = 'bench/matching_vs_correspond.py'
USAGE = f'{PROG} --workdir=RUN [--num_images=N] [--protocols=tolerance,tolerance_thin_gt]'
PROTOCOLS = ('tolerance', 'tolerance_thin_gt')
MAX_DIST = 0.0075  # BSDS maxDist, a fraction of the image diagonal
THRESHOLDS = np.arange(1, 100) / 100  # BSDS linspace(1/100, 99/100, 99)


def _define_flags(fv: flags.FlagValues) -> None:
  define = {'flag_values': fv}
  flags.DEFINE_string('workdir', None, 'A trained run (the --workdir of launch.py).', **define)
  flags.DEFINE_integer('num_images', 0, 'The first N test images (0: all).', **define)
  flags.DEFINE_list('protocols', list(PROTOCOLS), 'Which protocols to compare.', **define)


def correspond_counts(
  prob: np.ndarray, gt: np.ndarray, thin_gt: bool, correspond_pixels
) -> np.ndarray:
  """correspondPixels' matched (predicted, ground-truth) pixels of one image at each of
  THRESHOLDS, shape (T, 2), on the maps crackjax's tolerance protocol matches."""
  from crackjax.evaluation import thin

  target = thin(gt) if thin_gt else gt
  out = np.zeros((len(THRESHOLDS), 2), np.int64)
  for j, t in enumerate(THRESHOLDS):
    pred = thin(prob >= prob.dtype.type(t))  # the protocol's comparison, in prob's dtype
    if not pred.any() or not target.any():
      continue
    match_pred, match_gt, _, _ = correspond_pixels(
      pred.astype(np.float64), target.astype(np.float64), MAX_DIST
    )
    out[j] = np.count_nonzero(match_pred), np.count_nonzero(match_gt)
  return out


def ods(matched: np.ndarray, num_pred: np.ndarray, num_gt: np.ndarray) -> float:
  """BSDS maxF of the dataset curve from per-image (images x thresholds) counts."""
  from crackjax.evaluation import aggregate

  tp, pred, gt = matched.sum(0), num_pred.sum(0), num_gt.sum(0)
  precision = np.where(pred > 0, tp / np.maximum(pred, 1), 0.0)
  recall = np.where(gt > 0, tp / np.maximum(gt, 1), 0.0)
  return aggregate.bsds_max_f(THRESHOLDS, precision, recall)[3]


def compare(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], protocol: str, correspond_pixels
) -> dict[str, float]:
  """The figures printed for one protocol (see the module docstring)."""
  from crackjax.evaluation import tolerance_counts

  thin_gt = protocol == 'tolerance_thin_gt'
  ours, theirs, num_pred, num_gt = [], [], [], []
  seconds = [0.0, 0.0]
  for prob, gt in zip(probs, gts, strict=True):
    t0 = time.perf_counter()
    c = tolerance_counts(prob, gt, thin_gt=thin_gt, thresholds=THRESHOLDS)
    t1 = time.perf_counter()
    cp = correspond_counts(prob, gt, thin_gt, correspond_pixels)
    seconds[0] += t1 - t0
    seconds[1] += time.perf_counter() - t1
    # One-to-one matchings: as many predicted as ground-truth pixels matched, in both.
    assert np.array_equal(c.matched_pred, c.matched_gt) and np.array_equal(cp[:, 0], cp[:, 1])
    ours.append(c.matched_pred)
    theirs.append(cp[:, 0])
    num_pred.append(c.num_pred)
    num_gt.append(c.num_gt)
  ours, theirs = np.asarray(ours), np.asarray(theirs)
  num_pred, num_gt = np.asarray(num_pred), np.asarray(num_gt)
  diff = ours - theirs
  return {
    'cells': diff.size,
    'differ': int(np.count_nonzero(diff)),
    'more_here': int(np.count_nonzero(diff > 0)),
    'fewer_here': int(np.count_nonzero(diff < 0)),
    'max_more': int(diff.max(initial=0)),
    'matched_here': int(ours.sum()),
    'matched_correspond': int(theirs.sum()),
    'ods_here': ods(ours, num_pred, num_gt),
    'ods_correspond': ods(theirs, num_pred, num_gt),
    'seconds_here': seconds[0],
    'seconds_correspond': seconds[1],
  }


def main(argv: Sequence[str] | None = None) -> int:
  argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
  logs.quiet_third_party_logs()
  fv = flags.FlagValues()
  _define_flags(fv)
  cli.parse_flags(fv, argv, prog=PROG, usage=USAGE)
  if not fv.workdir:
    sys.exit(f'{PROG}: --workdir=RUN is required; usage: {USAGE}')
  unknown = sorted(set(fv.protocols) - set(PROTOCOLS))
  if unknown:
    sys.exit(f'{PROG}: --protocols: {unknown} are not among {list(PROTOCOLS)}.')
  try:
    from pyEdgeEval._lib import correspond_pixels
  except ImportError as e:
    sys.exit(
      f'{PROG}: needs correspondPixels from the pyEdgeEval package ({e}): pip install --no-deps '
      '--target DIR pyedgeeval==0.2.8, then PYTHONPATH=DIR.'
    )
  from crackjax.experiment import restored
  from crackjax.experiment.build import build
  from crackjax.trainer import scoring

  workdir = Path(fv.workdir)
  experiment = build(restored.read_config(workdir), training=False)
  examples = list(experiment.splits.examples())
  if fv.num_images:
    examples = examples[: fv.num_images]
  state = experiment.states.restore(workdir)
  probs = [np.asarray(p) for p in scoring.predict_examples(experiment.model, state, examples)]
  gts = [ex['mask'][..., 0] > 0.5 for ex in examples]
  config = experiment.config
  print(
    f'{config.data.name} {config.data.test_split}: {len(examples)} images '
    f'({", ".join(ex["name"] for ex in examples[:3])}, ...); run {workdir} step '
    f'{int(state.step)}; thresholds 0.01 ... 0.99 (99); maxDist {MAX_DIST}.'
  )
  print(
    '| protocol | cells | cells that differ | more matched here | fewer here | most more in '
    'a cell | matched here | matched by correspondPixels | ODS F1 here | ODS F1 '
    'correspondPixels | seconds here / correspondPixels |'
  )
  print('|---|---|---|---|---|---|---|---|---|---|---|')
  for protocol in fv.protocols:
    r = compare(probs, gts, protocol, correspond_pixels)
    print(
      f'| {protocol} | {r["cells"]} | {r["differ"]} | {r["more_here"]} | {r["fewer_here"]} | '
      f'{r["max_more"]} | {r["matched_here"]} | {r["matched_correspond"]} | '
      f'{r["ods_here"]:.4f} | {r["ods_correspond"]:.4f} | '
      f'{r["seconds_here"]:.1f} / {r["seconds_correspond"]:.1f} |',
      flush=True,
    )
  return 0


if __name__ == '__main__':
  sys.exit(main())
