"""A model file's self check: its output on a fixed synthetic image, recorded in its card when
it is written and compared when it is loaded.

The checksum of a model file proves that its bytes are those written with it, not that its
weights are the ones its card describes: a file edited and its checksum recomputed passes it.
The self check does: `verify` predicts `self_check_image` with the file's weights and refuses
the file (`model_file.ModelFileError`, one line) when the output differs from the card's
``self_check`` beyond what another machine's arithmetic changes (`mismatch`). A file that
passed is remembered by its checksum (``<$CRACKJAX_CACHE>/verified/<sha256>``), so its next
loads do not predict again (a second compilation of the model, about a second on a CPU).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import numpy as np

from crackjax.experiment.restored import Run
from crackjax.models import hub, model_file

SELF_CHECK_SEED = 20261127
SELF_CHECK_SHAPE = (96, 160)
# The pixels whose probabilities the self check records, as (row, column).
SELF_CHECK_PIXELS = ((10, 10), (48, 80), (48, 30), (70, 120), (90, 150))
#: How far a loaded file's self check may be from its card's: probabilities (another machine's
#: or accelerator's float arithmetic, e.g. TF32 convolutions on a GPU, moves them by ~1e-3) and
#: crack pixels (those near the threshold). Altered weights move them far more.
PROBABILITY_TOLERANCE = 0.02
CRACK_PIXELS_TOLERANCE = 0.01  # of the image's pixels


def self_check_image() -> np.ndarray:
  """The self check's input: a fixed synthetic road-like patch (uint8 H x W x 3): noise around
  grey with a dark wandering line, from `SELF_CHECK_SEED`."""
  rng = np.random.default_rng(SELF_CHECK_SEED)
  h, w = SELF_CHECK_SHAPE
  image = 120 + rng.normal(0, 18, size=(h, w, 1)).repeat(3, axis=2)
  rows = (h / 2 + 12 * np.sin(np.linspace(0, 3 * np.pi, w))).astype(int)
  for x, y in enumerate(rows):
    image[max(y - 1, 0) : y + 2, x] -= 70
  return np.clip(image, 0, 255).astype(np.uint8)


def self_check(predictor: Any) -> dict[str, Any]:
  """The model's output on `self_check_image`: mean and max probability, crack pixels at the
  predictor's threshold and the probabilities at `SELF_CHECK_PIXELS`. `predictor`: a
  `crackjax.deploy.predictor.Predictor` (which imports this module)."""
  prob = predictor(self_check_image())
  return {
    'image': f'crackjax.deploy.self_check.self_check_image() (seed {SELF_CHECK_SEED})',
    'mean_probability': float(prob.mean()),
    'max_probability': float(prob.max()),
    'crack_pixels': int((prob > predictor.threshold).sum()),
    'pixels': [[y, x, float(prob[y, x])] for y, x in SELF_CHECK_PIXELS],
  }


def mismatch(got: dict[str, Any], want: dict[str, Any]) -> str | None:
  """What differs between two self checks beyond the tolerances, in words; None if nothing."""
  pairs = [(k, got[k], want[k]) for k in ('mean_probability', 'max_probability')]
  pixels = zip(got['pixels'], want['pixels'], strict=True)
  pairs += [(f'p{tuple(w[:2])}', g[2], w[2]) for g, w in pixels]
  far = [f'{k} {a:.4f} (card {b:.4f})' for k, a, b in pairs if abs(a - b) > PROBABILITY_TOLERANCE]
  area = CRACK_PIXELS_TOLERANCE * SELF_CHECK_SHAPE[0] * SELF_CHECK_SHAPE[1]
  if abs(got['crack_pixels'] - want['crack_pixels']) > max(2, area):
    far.append(f'crack pixels {got["crack_pixels"]} (card {want["crack_pixels"]})')
  return '; '.join(far) or None


def verify(run: Run, plain_predictor: Callable[[], Any]) -> None:
  """Refuses a model file (`run`, from `load_model`) whose weights do not give its card's self
  check; a file without one (or not from a file) is not checked. Passed files are remembered.

  `plain_predictor()` makes the predictor a model file's self check is made with
  (`crackjax.deploy.predictor.plain_predictor`: one scale, no flip, the run's threshold); it
  is called only when the file has not passed before.

  Raises:
    model_file.ModelFileError: one line naming the file and what differs.
  """
  want = (run.card or {}).get('self_check')
  if not want or not run.sha256:
    return
  marker = hub.cache_dir() / 'verified' / run.sha256
  if marker.exists():
    return
  problem = mismatch(self_check(plain_predictor()), want)
  if problem:
    raise model_file.ModelFileError(
      f'{run.file}: its weights do not give the self check its card records ({problem}): '
      'they were changed after it was written. Export it again from its run, or use an '
      'unaltered copy.'
    )
  try:
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f'{run.file}: self check passed {datetime.datetime.now().isoformat()}\n')
  except OSError:
    pass  # an unwritable cache only costs the next load another check
