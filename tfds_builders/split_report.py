"""Corrections and suspicious data reported once per split and condition, not once per file:
while a builder reads a split, the readers `note` each corrected file in a `SplitReport`, and at
the end of the split one `CrackDataWarning` per condition gives the count and up to five file
names (masks thresholded, colour masks converted, high-bit-depth images rescaled, nearly black /
white images, masks mostly crack, a split without any crack pixel). Outside a builder the readers
warn per file."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import PIL.Image
from etils import epath

from crackjax.tfds_builders.errors import CrackDataWarning
from crackjax.tfds_builders.listing import Pair

MAJORITY_CRACK = 0.5
# Mean brightness (0-255) of a stored image below / above which it is reported.
DARK_MEAN, BRIGHT_MEAN = 10.0, 245.0
# File names shown per condition.
MAX_EXAMPLES = 5

# What each condition of a SplitReport says, after '<dataset>/<split>: <count> '.
CONDITIONS = {
  'non_binary': (
    'mask(s) are not binary (e.g. saved as JPEG or anti-aliased) and were thresholded at '
    "the cut shown (a crack_folder's --config.data.folder.mask_threshold sets it; the public "
    "datasets' builders cut at half the range)"
  ),
  'colour_mask': (
    'mask(s) are colour images; each pixel read as its brightest channel (its darkest for '
    'dark cracks) first'
  ),
  'high_bit_depth': (
    'image(s) have more than 8 bits per value; read by their actual range (the smallest '
    'of 10/12/14/16 bits that holds their maximum) rather than as 16-bit'
  ),
  'dark_image': (
    f'image(s) are nearly black (mean brightness < {DARK_MEAN:g} of 255); check the files '
    '(e.g. high-bit-depth data exported in the wrong range, or unexposed photos)'
  ),
  'bright_image': (
    f'image(s) are nearly white (mean brightness > {BRIGHT_MEAN:g} of 255); check the files '
    '(over-exposed, or not the photos you meant)'
  ),
  'majority_crack': (
    f'mask(s) are mostly crack (> {MAJORITY_CRACK:.0%} of their pixels): usually black '
    'cracks on white, read with the wrong mask polarity'
  ),
}


@dataclasses.dataclass
class SplitReport:
  """What was corrected or looks wrong in one split, reported once per condition.

  Attributes:
    label: '<dataset>/<split>', the prefix of every message.
    notes: condition (a key of `CONDITIONS`) -> [(file, detail)] in reading order.
    num_masks / num_empty: masks read, and those without a crack pixel.
  """

  label: str
  notes: dict[str, list[tuple[epath.Path, str]]] = dataclasses.field(default_factory=dict)
  num_masks: int = 0
  num_empty: int = 0

  def add(self, condition: str, path: epath.PathLike, detail: str = '') -> None:
    self.notes.setdefault(condition, []).append((epath.Path(path), detail))

  def check(self, image: PIL.Image.Image, mask: np.ndarray, pair: Pair) -> None:
    """Notes a stored image's brightness and its mask's crack share."""
    mean = float(np.asarray(image).mean())
    if mean < DARK_MEAN:
      self.add('dark_image', pair.image_path, f'mean {mean:.1f}')
    elif mean > BRIGHT_MEAN:
      self.add('bright_image', pair.image_path, f'mean {mean:.1f}')
    share = float(np.mean(mask)) if mask.size else 0.0
    self.num_masks += 1
    self.num_empty += share == 0
    if share > MAJORITY_CRACK:
      self.add('majority_crack', pair.mask_path, f'{share:.0%} crack')

  def message(self, condition: str) -> str:
    """'<label>: <n> <what CONDITIONS says>: <up to MAX_EXAMPLES files (detail)>'."""
    entries = self.notes[condition]
    return f'{self.label}: {len(entries)} {CONDITIONS[condition]}: {name_files(entries)}'

  def empty_message(self) -> str | None:
    """The warning for a split none of whose masks has a crack pixel, else None."""
    if not self.num_masks or self.num_empty < self.num_masks:
      return None
    return (
      f'{self.label}: none of its {self.num_masks} mask(s) has a crack pixel. Training on it '
      'learns nothing and F1 on it is 0 or meaningless; check the mask files, the mask '
      'polarity and the mask threshold.'
    )


def name_files(entries: Sequence[tuple[epath.Path, str]], limit: int = MAX_EXAMPLES) -> str:
  """'in DIR: a.png (detail), b.png ... (N more)'; full paths when the folders differ."""
  parents = {p.parent for p, _ in entries}
  shared = len(parents) == 1
  shown = [f'{p.name if shared else p}' + (f' ({d})' if d else '') for p, d in entries[:limit]]
  more = f' ... ({len(entries) - limit} more)' if len(entries) > limit else ''
  return (f'in {next(iter(parents))}: ' if shared else '') + ', '.join(shown) + more


_REPORT: contextvars.ContextVar[SplitReport | None] = contextvars.ContextVar(
  'crackjax_split_report', default=None
)


@contextlib.contextmanager
def reporting_to(report: SplitReport | None) -> Iterator[None]:
  """Within the block, the readers note corrections in ``report`` instead of warning."""
  token = _REPORT.set(report)
  try:
    yield
  finally:
    _REPORT.reset(token)


def note(condition: str, path: epath.PathLike, detail: str, message: str) -> None:
  """Notes a corrected file in the active `SplitReport`, or warns ``message`` without one."""
  report = _REPORT.get()
  if report is None:
    warnings.warn(message, CrackDataWarning, stacklevel=3)
  else:
    report.add(condition, path, detail)
