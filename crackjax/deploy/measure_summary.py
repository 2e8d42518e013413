"""Totals over many photos' crack measurements (`crackjax.deploy.measure.measure_cracks`
rows, or the same read back from crackjax-predict's measurements.csv, every value a string) and
the line that prints them:

  print(format_summary(summarize(rows)))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _number(value: Any) -> float | None:
  """A row's value as a float; None for a missing one (None or '', as read back from a CSV)."""
  return None if value is None or value == '' else float(value)


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """Totals over many images' `measure_cracks` rows (extra keys such as 'name' are ignored);
  a photo that is not a road photo (its `not_road` says why) is counted apart, in nothing else.

  Args:
    rows: one mapping per image with `measure_cracks`' keys.

  Returns:
    `images` (count), `length_px` (total), `length_mm` (total, None unless every row has it),
    `mean_crack_ratio` (mean of the per-image ratios), `segments` (total), `speckles` (total
    of the components left out as speckle; 0 where a row has none), `max_width_px` and
    `max_width_mm` (largest over the images; mm None unless every row has it). All zeros for no
    rows. `not_road`: how many photos were not road photos.
  """
  images = len(rows)
  rows = [r for r in rows if not r.get('not_road')]  # not measured
  lengths_mm = [_number(r.get('length_mm')) for r in rows]
  widths_mm = [_number(r.get('max_width_mm')) for r in rows]
  return {
    'images': images,
    'not_road': images - len(rows),
    'length_px': float(sum(_number(r['length_px']) for r in rows)),
    'length_mm': None if None in lengths_mm else float(sum(lengths_mm)),
    'mean_crack_ratio': float(np.mean([_number(r['crack_ratio']) for r in rows])) if rows else 0.0,
    'segments': int(sum(int(_number(r['segments'])) for r in rows)),
    'speckles': int(sum(int(_number(r.get('speckles')) or 0) for r in rows)),
    'max_width_px': max((_number(r['max_width_px']) for r in rows), default=0.0),
    'max_width_mm': None if None in widths_mm else max(widths_mm, default=0.0),
  }


def format_summary(summary: Mapping[str, Any]) -> str:
  """One human-readable line of a `summarize` result.

  E.g. '12 images: crack length 3,402 px (170.1 mm) in 57 segments (412 speckles left out);
  mean crack ratio 1.84%; widest 9.0 px (0.45 mm)'; the millimetre parts are left out where
  they are None, the speckles and photos not of a road where there are none.
  """
  n, segments = summary['images'], summary['segments']
  length = f'{summary["length_px"]:,.0f} px'
  if summary.get('length_mm') is not None:
    length += f' ({summary["length_mm"]:,.1f} mm)'
  width = f'{summary["max_width_px"]:.1f} px'
  if summary.get('max_width_mm') is not None:
    width += f' ({summary["max_width_mm"]:.2f} mm)'
  speckles = summary.get('speckles') or 0
  left_out = f' ({speckles} speckle{"" if speckles == 1 else "s"} left out)' if speckles else ''
  others = summary.get('not_road') or 0
  not_road = f', {others} not a road photo (not measured)' if others else ''
  return (
    f'{n} image{"" if n == 1 else "s"}{not_road}: crack length {length} in {segments} '
    f'segment{"" if segments == 1 else "s"}{left_out}; mean crack ratio '
    f'{100 * summary["mean_crack_ratio"]:.2f}%; widest {width}'
  )
