"""A model file's self check: the model's output on a fixed image, recorded in its card when
the file is written and compared whenever it is loaded for use (`verify`, which
`crackjax.experiment.restored.load_model` calls: crackjax-predict, crackjax-evaluate --model,
a fine-tuning's start model and crackjax-export of a file all check alike).

**What it guards: damage, not tampering.** The content checksum (`model_file.content_sha256`)
proves that a file's bytes are those written with its checksum; the self check proves that
its weights give the output its card records: a bad copy, a half-written or truncated file
whose checksum was rewritten by a tool, a wrong tensor. Anyone who edits the weights can
recompute both, so neither guards against tampering: only a SHA-256 of the whole file that
the user got from elsewhere does (``--model=FILE#sha256=<hex>`` or ``URL#sha256=<hex>``,
`crackjax.models.hub.resolve`; a released model by name is pinned by the registry).

**Sensitive.** Since version 2 (`VERSION`) the card records the whole map of fused logits
(before the sigmoid, which hides changes where it saturates) of `self_check_image`: a colour
road texture with cracks and a yellow lane mark, so that a change to the weights of one colour
channel shows (the old grey image had R = G = B). Each pixel of the map must agree with the
card's within ``rel x (|card| + mean |card|)`` (`TOLERANCE`, by the model's own compute
dtype, ``crackjax.model.dtype``). The map is computed at the highest matmul precision on every
platform (float32 arithmetic: no TF32 on a GPU, no bfloat16 passes on a TPU), where another
machine moves it by summation order alone (~1e-6 relative); 5e-3 for a float32 model still
passes a GPU's TF32 had it been used (its rounding emulated on roads-unet-cpu: 3.1e-3 at most)
and refuses a change of the output bias by 0.03 or of one colour's first-layer weights by 0.01
(6% of their mean size). A bfloat16 model computes in bfloat16 on any platform
(emulated: 1.1e-2), hence 5e-2. The stored dtype of the tensors does not matter: the card's map
is made from the stored weights.

**Cards of version 1** (files written before; the released models' at this writing) record
the grey image's mean and maximum probability, its crack pixels at the file's threshold and
five pixels' probabilities; they are compared as before, the probabilities as logits
(relative, tight where the card says it was made on a CPU, `_legacy_problem`). A colour-only
change to the first layer passes them: export or rescore the file again for a version 2 card.
Version 2 cards keep those fields too, so that an older crackjax still checks them.

**NaN-proof.** A comparison with NaN is false, so every test here is written as "within the
tolerance", never "beyond it"; a card whose ``self_check`` is not what this module writes (a
string, a field missing, NaN, a map of another size) is refused in one line naming the file and
the field (`problems`), never skipped.

A file that passed is remembered by its content checksum in ``<$CRACKJAX_CACHE>/verified/
<sha256>`` (with the version of the check it passed), so that its next loads on this machine
do not compile the model again.
"""

from __future__ import annotations

import base64
import datetime
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from crackjax.models import apply_model, fused_logits, hub, input_multiple, model_file

#: The version of the check `record` writes: 2, the whole logit map of the colour image.
VERSION = 2
SELF_CHECK_SEED = 20261127
#: The colour image's shape (H, W): multiples of 32, what every model of crackjax takes.
SELF_CHECK_SHAPE = (64, 96)
#: Relative tolerance of the logit map by the model's compute dtype (module docstring).
TOLERANCE = {'float32': 5e-3, 'bfloat16': 5e-2}
# Images are reflection-padded to multiples of lcm(this, the model's input multiple), as
# crackjax.deploy.predictor pads them (its PAD_BUCKET): the version 1 check was made so.
_PAD = 32

# Version 1: a grey image, its summary at the file's threshold and five pixels.
LEGACY_SHAPE = (96, 160)
SELF_CHECK_PIXELS = ((10, 10), (48, 80), (48, 30), (70, 120), (90, 150))
#: Version 1's tolerances where the card does not say it was made on a CPU (another
#: machine's default arithmetic, e.g. TF32 convolutions on a GPU, moved it by ~1e-3).
LEGACY_PROBABILITY_TOLERANCE = 0.02
LEGACY_LOGIT_TOLERANCE = 0.05
CRACK_PIXELS_TOLERANCE = 0.01  # of the image's pixels


# ----------------------------------------------------------------------------- the images


def _hashed(shape: tuple[int, ...], salt: int) -> np.ndarray:
  """Integers in [0, 65536) of `shape`, a hash (splitmix64) of each index and `salt`: the same
  on every machine and NumPy (no generator stream, no floating point)."""
  z = np.arange(int(np.prod(shape)), dtype=np.uint64) + np.uint64(salt * 0x9E3779B97F4A7C15 % 2**64)
  z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  z ^= z >> np.uint64(31)
  return (z >> np.uint64(48)).astype(np.int64).reshape(shape)


def self_check_image() -> np.ndarray:
  """The self check's input (version 2): a 64 x 96 colour road, uint8 H x W x 3, drawn in
  integer arithmetic alone from `SELF_CHECK_SEED`: a warm grey asphalt with colour grain,
  coloured stones and a slow colour drift, a yellow lane mark, a wandering transverse crack
  2-3 px wide with a longitudinal branch, and a hairline diagonal crack."""
  h, w = SELF_CHECK_SHAPE
  seed = SELF_CHECK_SEED
  # Grain: a sum of four uniform values per pixel and channel (close to a normal, sd ~14).
  grain = sum(_hashed((h, w, 3), seed + k) >> 8 for k in range(4))
  image = np.array([118, 110, 101]) + (grain - 510) * 14 // 147
  # A slow drift of each channel: an 8 x 8 block of +-12, box-smoothed over 8 x 8 pixels.
  blocks = (_hashed((h // 8 + 2, w // 8 + 2, 3), seed + 10) % 25 - 12).repeat(8, 0).repeat(8, 1)
  summed = blocks.cumsum(0).cumsum(1)
  image += (summed[8 : 8 + h, 8 : 8 + w] - summed[:h, 8 : 8 + w] - summed[8 : 8 + h, :w]
            + summed[:h, :w]) // 64  # fmt: skip
  # Stones: 4% of the pixels, each channel moved by up to +-60.
  stones = _hashed((h, w), seed + 20) < 65536 * 4 // 100
  image[stones] += _hashed((h, w, 3), seed + 21)[stones] % 121 - 60
  image[:, 5:10] = np.array([206, 178, 58]) + (grain[:, 5:10] - 510) * 8 // 147  # lane mark
  crack = np.zeros((h, w), bool)
  steps = _hashed((w,), seed + 30) % 4  # 0: up, 3: down, else level
  y = 22
  for x in range(w):  # transverse, 2 px wide, 3 where the hash says
    y = min(max(y + int(steps[x] == 3) - int(steps[x] == 0), 6), h - 8)
    crack[y : y + 2 + int(steps[x] == 1), x] = True
    if x == 60:
      branch_y, branch_x = y, x
  steps = _hashed((h,), seed + 31) % 4
  x = branch_x
  for y in range(branch_y, h):  # its longitudinal branch, 2 px
    x = min(max(x + int(steps[y] == 3) - int(steps[y] == 0), 2), w - 4)
    crack[y, x : x + 2] = True
  for k in range(60):  # a hairline, 1 px, from (34, 20) down to the right
    crack[34 + k * 28 // 60, 20 + k] = True
  image[crack] = image[crack] * 45 // 100 + np.array([8, 4, 0])
  return np.clip(image, 0, 255).astype(np.uint8)


def legacy_image() -> np.ndarray:
  """The version 1 check's input: a grey patch (R = G = B), noise around grey with a dark
  wandering line, from `SELF_CHECK_SEED` (NumPy's generator), as crackjax before version 2
  drew it."""
  rng = np.random.default_rng(SELF_CHECK_SEED)
  h, w = LEGACY_SHAPE
  image = 120 + rng.normal(0, 18, size=(h, w, 1)).repeat(3, axis=2)
  rows = (h / 2 + 12 * np.sin(np.linspace(0, 3 * np.pi, w))).astype(int)
  for x, y in enumerate(rows):
    image[max(y - 1, 0) : y + 2, x] -= 70
  return np.clip(image, 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------ the output


def logit_map(model: Any, params: Any, batch_stats: Any, image: np.ndarray) -> np.ndarray:
  """The model's fused logits (H x W float32) of a uint8 H x W x 3 image, reflection-padded at
  the bottom and right as crackjax.deploy.predictor pads it, at the highest matmul precision
  (float32 arithmetic on every platform)."""
  import jax

  h, w = image.shape[:2]
  multiple = math.lcm(_PAD, input_multiple(model))
  pads = ((0, -h % multiple), (0, -w % multiple), (0, 0))
  x = np.pad(image, pads, mode='reflect').astype(np.float32) / 255.0

  def logits(params, batch_stats, images):
    outputs, _ = apply_model(model.apply, params, images, batch_stats=batch_stats, train=False)
    return fused_logits(outputs)

  with jax.default_matmul_precision('highest'):
    out = jax.jit(logits)(params, batch_stats or None, x[None])
  return np.asarray(out, np.float32)[0, :h, :w, 0]


def _sigmoid(x: np.ndarray) -> np.ndarray:
  return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def legacy_summary(model: Any, params: Any, batch_stats: Any, threshold: float) -> dict[str, Any]:
  """Version 1's fields: the grey image's mean and maximum probability, its crack pixels at
  `threshold` and the probabilities at `SELF_CHECK_PIXELS`."""
  prob = _sigmoid(logit_map(model, params, batch_stats, legacy_image()))
  return {
    'mean_probability': float(prob.mean()),
    'max_probability': float(prob.max()),
    'crack_pixels': int((prob > threshold).sum()),
    'pixels': [[y, x, float(prob[y, x])] for y, x in SELF_CHECK_PIXELS],
  }


def platform() -> str:
  """This process's JAX platform and device, e.g. 'cpu (cpu)', 'gpu (NVIDIA H100 80GB HBM3)'."""
  import jax

  device = jax.devices()[0]
  return f'{device.platform} ({device.device_kind})'


def encode_logits(array: np.ndarray) -> str:
  return base64.b64encode(np.ascontiguousarray(array, '<f4').tobytes()).decode('ascii')


def record(model: Any, params: Any, batch_stats: Any, threshold: float) -> dict[str, Any]:
  """A card's ``self_check`` of a model with these weights (as the file stores them) and
  stored `threshold`: version 2's logit map of `self_check_image`, and version 1's fields."""
  h, w = SELF_CHECK_SHAPE
  logits = logit_map(model, params, batch_stats, self_check_image())
  return {
    'version': VERSION,
    'image': f'crackjax.models.output_check.self_check_image(): a {h} x {w} colour road with '
    f'cracks (seed {SELF_CHECK_SEED})',
    'logits': encode_logits(logits),
    'logits_format': f'{h} x {w} float32 little-endian, row by row, base64: the fused logits',
    'computed_on': platform(),
    'legacy_image': 'crackjax.models.output_check.legacy_image() (version 1: the fields below, '
    'which crackjax before version 2 compares)',
    **legacy_summary(model, params, batch_stats, threshold),
  }


# ------------------------------------------------------------------------------ the check


def _shown(value: Any) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + '...'


def _is_int(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_probability(value: Any) -> bool:
  ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
  return ok and 0 <= value <= 1


def decode_logits(text: Any) -> np.ndarray | None:
  """A card's ``logits`` as the H x W map, or None when it is not one (not base64, another
  size, or holding NaN or infinite values)."""
  if not isinstance(text, str):
    return None
  try:
    raw = base64.b64decode(text.encode('ascii'), validate=True)
  except (ValueError, UnicodeEncodeError):
    return None
  if len(raw) != 4 * SELF_CHECK_SHAPE[0] * SELF_CHECK_SHAPE[1]:
    return None
  logits = np.frombuffer(raw, '<f4').reshape(SELF_CHECK_SHAPE)
  return logits if np.isfinite(logits).all() else None


def problems(check: Any) -> list[str]:
  """What is malformed in a card's ``self_check`` (one line per field, as `model_schema`
  names fields: ``crackjax.card.self_check.<field>=<value>: expected ...``); [] for none."""
  field = 'crackjax.card.self_check'
  if not isinstance(check, Mapping):
    return [
      f'{field}={_shown(check)}: expected a JSON object (the self check crackjax-export writes)'
    ]
  out = []
  version = check.get('version', 1)
  if not _is_int(version) or version < 1:
    out.append(f'{field}.version={_shown(version)}: expected an integer >= 1')
  expected = {
    'mean_probability': (_is_probability, 'a finite number in [0, 1]'),
    'max_probability': (_is_probability, 'a finite number in [0, 1]'),
    'crack_pixels': (
      lambda v: _is_int(v) and 0 <= v <= LEGACY_SHAPE[0] * LEGACY_SHAPE[1],
      f'an integer in [0, {LEGACY_SHAPE[0] * LEGACY_SHAPE[1]}]',
    ),
    'pixels': (
      lambda v: (
        isinstance(v, list)
        and len(v) == len(SELF_CHECK_PIXELS)
        and all(
          isinstance(p, list) and len(p) == 3 and tuple(p[:2]) == xy and _is_probability(p[2])
          for p, xy in zip(v, SELF_CHECK_PIXELS, strict=False)
        )
      ),
      f'[row, column, a finite probability in [0, 1]] at {[list(p) for p in SELF_CHECK_PIXELS]}',
    ),
  }
  if version == VERSION:  # a later version's fields are its own: its version 1 fields checked
    h, w = SELF_CHECK_SHAPE
    expected['logits'] = (
      lambda v: decode_logits(v) is not None,
      f'{h} x {w} finite float32 values in base64',
    )
  for key, (ok, what) in expected.items():
    if key not in check:
      out.append(f'{field} lacks {key!r}')
    elif not ok(check[key]):
      out.append(f'{field}.{key}={_shown(check[key])}: expected {what}')
  return out


def compute_dtype(model: Any) -> str:
  """The dtype a model computes in (its ``dtype`` field; float32 for a model without one)."""
  import jax.numpy as jnp

  return (
    'bfloat16'
    if jnp.dtype(getattr(model, 'dtype', None) or jnp.float32) == jnp.bfloat16
    else 'float32'
  )


def map_problem(got: np.ndarray, want: np.ndarray, dtype: str) -> str | None:
  """Where the logit map `got` differs from the card's `want` beyond the tolerance of a model
  computing in `dtype`, in words; None where every pixel agrees (NaN never does)."""
  rel = TOLERANCE.get(dtype, TOLERANCE['bfloat16'])
  tolerance = rel * (np.abs(want) + float(np.abs(want).mean())) + 1e-5
  diff = np.abs(got.astype(np.float64) - want)
  within = diff <= tolerance
  if within.all():
    return None
  excess = np.where(np.isnan(diff), np.inf, diff - tolerance)
  y, x = np.unravel_index(int(np.argmax(excess)), want.shape)
  return (
    f"its logits on the self-check image differ from the card's at {int((~within).sum()):,} "
    f'of {want.size:,} pixels, most at ({y}, {x}): {got[y, x]:.4g}, card {want[y, x]:.4g} '
    f'(tolerance {tolerance[y, x]:.2g}: {rel:g} relative, {dtype} arithmetic)'
  )


def _made_on_cpu(card: Mapping[str, Any], check: Mapping[str, Any]) -> bool:
  """Whether the card says its self check was made on a CPU (a version 1 card: where the file
  was rescored, ``card.rescored.platform``, which rewrote its self check)."""
  where = check.get('computed_on') or (card.get('rescored') or {}).get('platform')
  return isinstance(where, str) and where.startswith('cpu')


def _legacy_problem(
  got: dict[str, Any], want: Mapping[str, Any], rel: float, tight: bool
) -> str | None:
  """Version 1's comparison: the probabilities of the maximum and the five pixels as logits
  (relative `rel` where the card was made on a CPU, `tight`, else `LEGACY_LOGIT_TOLERANCE`),
  the mean probability (relative, or `LEGACY_PROBABILITY_TOLERANCE`) and the crack pixels."""

  def logit(p: float) -> float:
    p = min(max(p, 1e-7), 1 - 1e-7)
    return math.log(p / (1 - p))

  far = []
  pairs = [('max_probability', got['max_probability'], want['max_probability'])]
  pairs += [
    (f'p{tuple(w[:2])}', g[2], w[2]) for g, w in zip(got['pixels'], want['pixels'], strict=True)
  ]
  for name, a, b in pairs:
    allowed = (rel if tight else LEGACY_LOGIT_TOLERANCE) * (abs(logit(b)) + 1)
    if not abs(logit(a) - logit(b)) <= allowed:
      far.append(f'{name} {a:.6g} (card {b:.6g})')
  a, b = got['mean_probability'], want['mean_probability']
  if not abs(a - b) <= (rel * b + 1e-6 if tight else LEGACY_PROBABILITY_TOLERANCE):
    far.append(f'mean_probability {a:.6g} (card {b:.6g})')
  area = CRACK_PIXELS_TOLERANCE * LEGACY_SHAPE[0] * LEGACY_SHAPE[1]
  if not abs(got['crack_pixels'] - want['crack_pixels']) <= max(2, area):
    far.append(f'crack pixels {got["crack_pixels"]} (card {want["crack_pixels"]})')
  return '; '.join(far) or None


def _marker(sha256: str) -> Path:
  return hub.cache_dir() / 'verified' / sha256


#: (cache, content checksum, version) of the files that passed in this process: a second look
#: at a file (crackjax-predict's, after its model file was read) costs nothing, even where the
#: cache cannot be written.
_PASSED: set[tuple[str, str, int]] = set()


def passed(sha256: str, version: int) -> bool:
  """Whether the file of content checksum `sha256` passed a check of `version` or later on
  this machine (a marker written by crackjax before version 2 says version 1)."""
  cache = str(hub.cache_dir())
  if any((c, sha) == (cache, sha256) and v >= version for c, sha, v in _PASSED):
    return True
  try:
    text = _marker(sha256).read_text()
  except OSError:
    return False
  found = text.rpartition('self check version ')[2].split()[:1]
  return (int(found[0]) if found and found[0].isdigit() else 1) >= version


def _remember(sha256: str, version: int, file: str) -> None:
  _PASSED.add((str(hub.cache_dir()), sha256, version))
  try:
    marker = _marker(sha256)
    marker.parent.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now().isoformat()
    marker.write_text(f'{file}: self check passed {when}, self check version {version}\n')
  except OSError:
    pass  # an unwritable cache only costs the next load another check


def verify(
  file: str | Path,
  sha256: str,
  card: Mapping[str, Any],
  model: Any,
  params: Any,
  batch_stats: Any,
  threshold: float,
) -> None:
  """Refuses a model file whose weights do not give its card's self check (module docstring);
  a card without a ``self_check`` is not checked. A file that passed is remembered (`passed`).

  Args:
    file: the file, as messages name it.
    sha256: its content checksum (`model_file.ModelFile.sha256`).
    card: its card; model, params, batch_stats: its model and float32 weights; threshold: the
      threshold it stores (version 1's crack pixels).

  Raises:
    model_file.ModelFileError: one line naming the file and the field at fault or what differs.
  """
  if 'self_check' not in card:
    return
  check = card['self_check']
  found = problems(check)
  if found:
    raise model_file.ModelFileError(model_file.refusal(file, found))
  # A later version's map is of an image this crackjax does not draw: its version 1 fields.
  version = 1 if check.get('version', 1) > VERSION else check.get('version', 1)
  want = decode_logits(check['logits']) if version == VERSION else None
  if passed(sha256, version):
    return
  dtype = compute_dtype(model)
  if want is not None:
    got = logit_map(model, params, batch_stats, self_check_image())
    problem = map_problem(got, want, dtype)
  else:
    got = legacy_summary(model, params, batch_stats, threshold)
    problem = _legacy_problem(got, check, TOLERANCE.get(dtype, 0.05), _made_on_cpu(card, check))
  if problem:
    raise model_file.ModelFileError(
      f'{file}: its weights do not give the self check its card records ({problem}): the file '
      'was damaged or changed after it was written. Get an unaltered copy (pin it: '
      '--model=FILE#sha256=<hex>) or export it again from its run.'
    )
  _remember(sha256, version, str(file))
