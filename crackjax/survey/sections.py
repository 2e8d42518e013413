"""Road sections: which section each photo belongs to, and ``sections.csv``, one row each.

A photo's section comes from one rule (`SECTION_RULES`):

* ``sidecar``: the sidecar CSV's ``section`` column (photos it gives none: ``(none)``);
* ``folder``: the folder of the photo under the input folder (its output name's folder;
  ``.`` for photos at the top);
* ``distance``: every N metres along the track: the photos in the survey's order (the order of
  measurements.csv: by path, as a camera numbers its photos), the great-circle distances
  between consecutive positioned photos summed; a photo at distance d is in section
  floor(d / N) (labelled by its start and end in metres). Photos without a position are in
  ``(no position)``.

What each column of sections.csv measures (`SECTION_FIELDS`), and what it does not: it is
not a PCI (ASTM D6433's pavement condition index deducts for each distress by its type,
severity and density over a sample unit's area, inspected whole; here the photographed part
of the road is measured by a model's masks, and overlapping photos count twice).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from crackjax.deploy import measure
from crackjax.survey import gps

SECTION_RULES = ('sidecar', 'folder', 'distance')
NO_SECTION = '(none)'
NO_POSITION = '(no position)'
#: A photo's worst severity over its cracks: no crack, cracks without a severity (no
#: --mm_per_pixel), or LTPP's classes by mean width (measure.SEVERITY_LIMITS_MM).
WORST = ('no_crack', 'unrated', 'low', 'moderate', 'high')

#: sections.csv's columns and what each measures (docs/prediction.md repeats them).
SECTION_FIELDS: dict[str, str] = {
  'section': 'the section (the rule of --sections)',
  'photos': 'photos in it (every photo of the survey is in one section)',
  'photos_positioned': 'of them, with a position (EXIF GPS or the sidecar)',
  'start_m': 'distance rule: where it starts along the track, metres',
  'end_m': 'distance rule: where it ends, metres (the next section starts there)',
  'area_m2': (
    "road photographed: the photos' pixels x --mm_per_pixel squared, summed (a top-down "
    'view assumed; overlap between photos counted twice); empty without --mm_per_pixel'
  ),
  'length_px': 'crack length (skeleton, cracks of at least --min_length), pixels, summed',
  'length_m': 'the same in metres (with --mm_per_pixel)',
  'length_per_m2': 'length_m / area_m2: metres of crack per square metre photographed',
  **{f'{t}_length_px': f'length of its {t} cracks, pixels' for t in measure.CRACK_TYPES},
  **{f'{t}_length_m': f'length of its {t} cracks, metres' for t in measure.CRACK_TYPES},
  **{f'photos_{w}': f'photos whose worst crack is {w}' for w in WORST},
  **{f'share_{w}': f'photos_{w} / photos' for w in WORST},
}


def folder_of(name: str) -> str:
  """The folder of output name `name` ('north/042' -> 'north'; '042' -> '.')."""
  return str(PurePosixPath(name).parent)


def distance_sections(
  names: Sequence[str], positions: Mapping[str, gps.Position | None], metres: float
) -> tuple[dict[str, str], dict[str, tuple[float, float]]]:
  """({name: section}, {section: (start_m, end_m)}) of the distance rule (module docstring)."""
  if not metres > 0:
    raise ValueError(f'a section length must be > 0 metres, got {metres}')
  sections, spans = {}, {}
  travelled, last = 0.0, None
  for name in names:
    position = positions.get(name)
    if position is None:
      sections[name] = NO_POSITION
      continue
    if last is not None:
      travelled += gps.haversine_m(last, position)
    last = position
    k = math.floor(travelled / metres)
    start, end = k * metres, (k + 1) * metres
    label = f'{start:g}-{end:g} m'
    sections[name] = label
    spans[label] = (start, end)
  return sections, spans


def assign(
  rule: str,
  names: Sequence[str],
  located: gps.Located,
  *,
  metres: float | None = None,
) -> tuple[dict[str, str], dict[str, tuple[float, float]]]:
  """({name: section}, {section: (start_m, end_m)}: the distance rule's) for every photo.

  Raises:
    ValueError: an unknown rule, or the distance rule without `metres`.
  """
  if rule == 'sidecar':
    return {n: located.sections.get(n) or NO_SECTION for n in names}, {}
  if rule == 'folder':
    return {n: folder_of(n) for n in names}, {}
  if rule == 'distance':
    if metres is None:
      raise ValueError('the distance rule needs a section length in metres')
    return distance_sections(names, located.positions, metres)
  raise ValueError(f'unknown section rule {rule!r}; one of {", ".join(SECTION_RULES)}')


def _figures(value: float) -> float:
  """`value` to 6 significant figures (a section's area may be 0.0015 m2 or 15,000)."""
  return float(f'{value:.6g}')


def _float(value: Any) -> float:
  return 0.0 if value in (None, '') else float(value)


def worst_of(cracks: Sequence[Mapping[str, Any]]) -> str:
  """A photo's class of WORST from its cracks."""
  if not cracks:
    return 'no_crack'
  rated = [c['severity'] for c in cracks if c.get('severity')]
  return max(rated, key=WORST.index) if rated else 'unrated'


def section_table(
  rows: Sequence[Mapping[str, Any]],
  cracks: Sequence[Mapping[str, Any]],
  sections: Mapping[str, str],
  spans: Mapping[str, tuple[float, float]],
  located: gps.Located,
  mm_per_pixel: float | None,
) -> list[dict[str, Any]]:
  """sections.csv's rows (SECTION_FIELDS), in the order the sections first appear, those of
  no section and no position last.

  Args:
    rows: measurements.csv's rows (name, height, width, length_px, ...).
    cracks: cracks.csv's rows (name, length_px, type, severity, ...).
    sections: every photo's section (`assign`).
    spans: the distance rule's (start_m, end_m) of each section.
    located: the photos' positions.
    mm_per_pixel: the pixel size, or None (then no areas nor metres).
  """
  by_photo = collections.defaultdict(list)
  for crack in cracks:
    by_photo[crack['name']].append(crack)
  members: dict[str, list[Mapping[str, Any]]] = {}
  for row in rows:
    members.setdefault(sections[row['name']], []).append(row)
  metre = None if mm_per_pixel is None else mm_per_pixel / 1000
  table = []
  # In the order they first appear; the photos of no section (or no position) last.
  for section in sorted(members, key=lambda s: s in (NO_SECTION, NO_POSITION)):
    photos = members[section]
    entry: dict[str, Any] = {'section': section, 'photos': len(photos)}
    entry['photos_positioned'] = sum(located.positions.get(r['name']) is not None for r in photos)
    start, end = spans.get(section, ('', ''))
    entry |= {'start_m': start, 'end_m': end}
    pixels = sum(int(r['height']) * int(r['width']) for r in photos)
    length_px = sum(_float(r['length_px']) for r in photos)
    area = None if metre is None else pixels * metre**2
    entry['area_m2'] = '' if area is None else _figures(area)
    entry['length_px'] = round(length_px, 2)
    entry['length_m'] = '' if metre is None else _figures(length_px * metre)
    entry['length_per_m2'] = '' if not area else _figures(length_px * metre / area)
    found = [c for r in photos for c in by_photo.get(r['name'], [])]
    for kind in measure.CRACK_TYPES:
      px = sum(_float(c['length_px']) for c in found if c['type'] == kind)
      entry[f'{kind}_length_px'] = round(px, 2)
      entry[f'{kind}_length_m'] = '' if metre is None else _figures(px * metre)
    worst = collections.Counter(worst_of(by_photo.get(r['name'], [])) for r in photos)
    entry |= {f'photos_{w}': worst[w] for w in WORST}
    entry |= {f'share_{w}': round(worst[w] / len(photos), 4) for w in WORST}
    table.append(entry)
  return table
