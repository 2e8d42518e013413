"""The downward width rule (issue 76): a photo whose cracks come out wide is predicted again at
half its size.

A model sees crack widths in pixels. On photos of wide cracks (CRACK500-like, 20-40 px) it
draws them far too thin at their native size (~9 px where the labels say ~40); at half size
the cracks are as wide as the training ones and it finds them whole. The rule looks at each
photo's own prediction first, so photos of thin cracks keep their native size:

1. predict the photo as usual (the model file's or run's test-time scales and flip);
2. threshold the map at the stored threshold (never a photo's own, `--photo_threshold`'s) and
   take the median of the crack width 2 d - 1 (d: the distance transform, as
   `crackjax.deploy.mask_analysis` measures it) over the mask's skeleton;
3. if that median is above `WidthRule.width_px`, predict the photo again at half size (the map
   resized back to the photo's size, as ``scales=(0.5,)`` does, mirrored too with --flip) and
   use that map instead.

A photo whose mask has fewer than `MIN_SKELETON_PIXELS` skeleton pixels (no crack, or a few
specks: a median of a handful of pixels says nothing of the photo) stays as it is.
`apply` is the rule on one map (Predictor, crackjax-predict and crackjax-evaluate use it);
`Choice` is what it decided for a photo (measurements.csv's and eval_per_image.csv's ``scale``
and ``rule_width_px``). The width is chosen on validation parts (``bench/width_scale.py
--choose``), never on a test split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from crackjax.models import model_schema
from crackjax.models.model_schema import WIDTH_RULE_RANGE

#: The scale a photo of wide cracks is predicted at again.
HALF = 0.5
#: Fewer skeleton pixels than this at scale 1 (a crack-free photo, a few specks): the photo
#: stays as it is. The default --min_length of crackjax-predict's speckle (20 px of skeleton).
MIN_SKELETON_PIXELS = 20
#: The words that turn the rule off on a command line (``--width_rule=off``).
OFF = ('off', 'none')
#: The per-photo columns of measurements.csv and eval_per_image.csv (`Choice.columns`).
COLUMNS = ('scale', 'rule_width_px')


def check(value: Any, where: str = 'width_rule') -> float | None:
  """`value` as the rule takes it: None (off) or a finite number of pixels in
  `WIDTH_RULE_RANGE` (the model file's schema, `model_schema.width_rule`, checks the same).

  Raises:
    ValueError: one line naming `where` and the range.
  """
  if isinstance(value, np.floating):
    value = float(value)
  expected = model_schema.width_rule(value)
  if expected:
    raise ValueError(
      f'{where}={value!r}: expected {expected} (a photo whose cracks are wider than it at '
      'scale 1 is predicted again at half size).'
    )
  return None if value is None else float(value)


def parse(text: str) -> float | None:
  """A command line's ``--width_rule`` value: a number of pixels, or 'off' (None).

  Raises:
    ValueError: neither, or a number out of range (one line).
  """
  if text.strip().lower() in OFF:
    return None
  lo, hi = WIDTH_RULE_RANGE
  try:
    return check(float(text))
  except ValueError:
    raise ValueError(
      f'--width_rule={text}: expected a finite width in pixels in [{lo:g}, {hi:g}], or off.'
    ) from None


def define_flag(flag_values: Any, *, note: str = '') -> None:
  """``--width_rule=PX|off`` of crackjax-predict and crackjax-evaluate (here, beside the rule:
  crackjax/cli.py is at its size cap), checked before any work."""
  from absl import flags

  lo, hi = WIDTH_RULE_RANGE
  flags.DEFINE_string(
    'width_rule',
    None,
    'PX: a photo whose predicted cracks are wider than PX pixels (median over the skeleton of '
    'its mask at the stored threshold) is predicted again at half size; off: never (default: '
    f"the model file's or run's eval.width_rule, off for most){note}",
    flag_values=flag_values,
  )

  def valid(text: str | None) -> bool:
    try:
      if text is not None:
        parse(text)
    except ValueError:
      return False
    return True

  flags.register_validator(
    'width_rule',
    valid,
    message=f'--width_rule must be a finite width in pixels in [{lo:g}, {hi:g}], or off',
    flag_values=flag_values,
  )


def of_command(text: str | None, eval_group: Mapping[str, Any] | None) -> float | None:
  """The width of a command: its ``--width_rule`` where given, else the run's or model file's
  ``eval.width_rule`` (a config from before the field: off).

  Raises:
    ValueError: a value out of range (one line).
  """
  if text is not None:
    return parse(text)
  return check((eval_group or {}).get('width_rule'), 'eval.width_rule')


@dataclasses.dataclass(frozen=True)
class WidthRule:
  """The rule at one width: a photo whose cracks at its first scales are wider than
  `width_px` (median over the skeleton of its mask at `threshold`) is predicted at half size."""

  width_px: float
  threshold: float

  def __post_init__(self) -> None:
    check(self.width_px)


class Choice(NamedTuple):
  """What the rule did to one photo: the scales its map is from and the median crack width
  (px) over the skeleton of its first map's mask (None: the rule is off, or no skeleton).
  A photo whose skeleton has fewer than `MIN_SKELETON_PIXELS` pixels keeps its scales."""

  scales: tuple[float, ...]
  width_px: float | None
  halved: bool = False  # predicted again at half size

  def columns(self) -> dict[str, Any]:
    """Its cells in a per-photo table (`COLUMNS`): the scales as '1', '0.5' or '1+2', the
    width rounded to 0.01 px (None: empty)."""
    scale = '+'.join(f'{s:g}' for s in self.scales)
    width = None if self.width_px is None else round(self.width_px, 2)
    return {'scale': scale, 'rule_width_px': width}


def skeleton_widths(mask: np.ndarray) -> np.ndarray:
  """2 d - 1 at each skeleton pixel of `mask` (H x W bool), d the Euclidean distance to the
  nearest background pixel, pixels beyond the border not background:
  `crackjax.deploy.mask_analysis.analyse`'s ``widths``, exactly (a test checks), in one
  transform of the whole mask (the evaluation's photos; Predictor's large photos take
  mask_analysis's, a band at a time)."""
  from scipy import ndimage  # here: importing the evaluation package stays light
  from skimage.morphology import skeletonize

  mask = np.asarray(mask, bool)
  bones = skeletonize(mask)
  if not bones.any():
    return np.zeros(0)
  if mask.all():  # no background: the border bounds the crack
    distance = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
  else:
    distance = ndimage.distance_transform_edt(mask)
  return 2.0 * distance[bones] - 1.0


class Measured(NamedTuple):
  """A map's cracks as the rule sees them: the median width (px) over the skeleton of its mask
  at the rule's threshold (None: no skeleton) and how many skeleton pixels it is over."""

  width_px: float | None
  skeleton_pixels: int

  def wider_than(self, rule_px: float) -> bool:
    """Whether the photo goes to half size under a rule of `rule_px`: a median over at least
    `MIN_SKELETON_PIXELS` skeleton pixels, above `rule_px`."""
    enough = self.skeleton_pixels >= MIN_SKELETON_PIXELS
    return enough and self.width_px is not None and self.width_px > rule_px


def measure(
  prob: np.ndarray,
  threshold: float,
  widths_of: Callable[[np.ndarray], np.ndarray] = skeleton_widths,
) -> Measured:
  """The median crack width of ``prob > threshold`` over its skeleton (`widths_of`)."""
  widths = np.asarray(widths_of(prob > threshold))
  return Measured(float(np.median(widths)) if widths.size else None, int(widths.size))


def apply(
  prob: np.ndarray,
  half: Callable[[], np.ndarray],
  rule: WidthRule | None,
  scales: Sequence[float] = (1.0,),
  widths_of: Callable[[np.ndarray], np.ndarray] = skeleton_widths,
) -> tuple[np.ndarray, Choice]:
  """The rule on one photo: its map `prob` (predicted at `scales`), or ``half()`` (its map at
  half size, resized back) where the cracks of `prob` are wider than the rule's width
  (`measure`, `Measured.wider_than`); with the `Choice`. `rule` None: `prob`, as it is."""
  scales = tuple(float(s) for s in scales)
  if rule is None:
    return prob, Choice(scales, None)
  found = measure(prob, rule.threshold, widths_of)
  if found.wider_than(rule.width_px):
    return half(), Choice((HALF,), found.width_px, True)
  return prob, Choice(scales, found.width_px)


def summary(choices: Sequence[Choice], rule: WidthRule) -> str:
  """One line on a set of photos: how many the rule took to half size."""
  n = sum(c.halved for c in choices)
  return (
    f'width rule {rule.width_px:g} px (at threshold {rule.threshold:g}): {n} of {len(choices)} '
    f'photo(s) predicted again at scale {HALF:g}'
  )
