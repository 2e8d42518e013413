"""``survey.geojson``: one point per photo, as RFC 7946 GeoJSON that QGIS opens as it is.

A FeatureCollection of one Feature per photo of measurements.csv, in its order: a Point at
[lon, lat] (WGS 84, RFC 7946's only coordinate system: no ``crs`` member) with the photo's
numbers as flat properties (`PROPERTIES`: text and numbers only, so every GIS reads them as
columns). A photo without a position is a Feature with ``"geometry": null`` (RFC 7946 3.2: an
unlocated feature) and its reason in ``no_position``: it is counted and named, never dropped.
`problems` checks a collection against the parts of RFC 7946 used here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from crackjax.deploy import measure
from crackjax.runs import outputs
from crackjax.survey import gps, sections

#: Each Feature's properties and what they hold.
PROPERTIES: dict[str, str] = {
  'name': "the photo's output name (measurements.csv's name)",
  'source': 'its file, as the prediction found it',
  'position': "where its position came from: 'exif', 'sidecar', or '' (none)",
  'no_position': "why it has none ('' when it has one)",
  'section': 'its road section (sections.csv)',
  'cracks': 'cracks of at least --min_length (rows of cracks.csv)',
  'length_px': 'crack length, pixels',
  'length_mm': 'crack length, mm (null without --mm_per_pixel)',
  'max_width_px': 'maximum crack width, pixels',
  'max_width_mm': 'maximum crack width, mm (null without --mm_per_pixel)',
  'types': "its cracks' types, comma-separated, in measure.CRACK_TYPES order",
  'worst_severity': 'no_crack, unrated (no --mm_per_pixel), low, moderate or high',
  'overlay': "its overlay, relative to the survey's folder",
}


def _number(value: Any) -> float | None:
  return None if value in (None, '') else float(value)


def feature_collection(
  rows: Sequence[Mapping[str, Any]],
  cracks: Sequence[Mapping[str, Any]],
  located: gps.Located,
  section_of: Mapping[str, str],
) -> dict[str, Any]:
  """The survey's FeatureCollection (module docstring) of measurements.csv's `rows`."""
  by_photo: dict[str, list[Mapping[str, Any]]] = {}
  for crack in cracks:
    by_photo.setdefault(crack['name'], []).append(crack)
  features = []
  for row in rows:
    name = row['name']
    found = by_photo.get(name, [])
    position = located.positions.get(name)
    kinds = {c['type'] for c in found}
    properties = {
      'name': name,
      'source': row.get('source', ''),
      'position': position.source if position else '',
      'no_position': located.why_not.get(name, '') if position is None else '',
      'section': section_of.get(name, ''),
      'cracks': len(found),
      'length_px': _number(row.get('length_px')),
      'length_mm': _number(row.get('length_mm')),
      'max_width_px': _number(row.get('max_width_px')),
      'max_width_mm': _number(row.get('max_width_mm')),
      'types': ','.join(t for t in measure.CRACK_TYPES if t in kinds),
      'worst_severity': sections.worst_of(found),
      'overlay': f'overlays/{name}.jpg',
    }
    geometry = (
      None
      if position is None
      else {'type': 'Point', 'coordinates': [round(position.lon, 7), round(position.lat, 7)]}
    )
    features.append({'type': 'Feature', 'geometry': geometry, 'properties': properties})
  return {'type': 'FeatureCollection', 'features': features}


def dumps(collection: Mapping[str, Any]) -> str:
  """The collection as GeoJSON text: one feature a line (a large survey stays greppable)."""
  lines = ',\n'.join(outputs.dumps(f, ensure_ascii=False) for f in collection['features'])
  return '{"type": "FeatureCollection", "features": [\n' + lines + '\n]}\n'


def problems(collection: Any) -> list[str]:
  """What in `collection` breaks RFC 7946 as this module uses it (Points or null geometry,
  flat properties); [] for a valid one."""
  if not isinstance(collection, dict) or collection.get('type') != 'FeatureCollection':
    return ['not a FeatureCollection']
  if not isinstance(collection.get('features'), list):
    return ['its features are not a list']
  found = []
  for i, feature in enumerate(collection['features']):
    where = f'feature {i}'
    if not isinstance(feature, dict) or feature.get('type') != 'Feature':
      found.append(f'{where}: not a Feature')
      continue
    if 'geometry' not in feature or 'properties' not in feature:
      found.append(f'{where}: a Feature needs geometry and properties (null allowed)')
      continue
    geometry, properties = feature['geometry'], feature['properties']
    if geometry is not None:
      coordinates = geometry.get('coordinates') if isinstance(geometry, dict) else None
      if (
        not isinstance(geometry, dict)
        or geometry.get('type') != 'Point'
        or not isinstance(coordinates, list)
        or len(coordinates) != 2
        or not all(isinstance(c, int | float) and math.isfinite(c) for c in coordinates)
      ):
        found.append(f'{where}: geometry is not a Point of two finite numbers')
      elif not (-180 <= coordinates[0] <= 180 and -90 <= coordinates[1] <= 90):
        found.append(f'{where}: {coordinates} is not [lon, lat] in range')
    if properties is not None and (
      not isinstance(properties, dict)
      or any(isinstance(v, dict | list) for v in properties.values())
    ):
      found.append(f'{where}: properties are not a flat object')
  return found
