"""Where each photo was taken: GPS from its EXIF, or from a sidecar CSV of the camera's log.

EXIF: Pillow's GPS IFD (tag 0x8825): GPSLatitudeRef / GPSLatitude (tags 1, 2) and
GPSLongitudeRef / GPSLongitude (3, 4), each angle as degrees, minutes and seconds (rationals,
or fewer values: degrees alone, degrees and decimal minutes), the reference ``N``/``S`` and
``E``/``W`` giving the sign. A sidecar is a CSV with a header ``photo,lat,lon`` and an
optional ``section`` column, decimal degrees (WGS 84, as GPS gives them); ``photo`` is the
photo's path (relative to the sidecar's folder, or absolute), its output name
(``north/042``), or its file name where that is unique. A sidecar's position wins over the
EXIF's (a camera log is the survey's own record).

A position is refused, with its reason, when it is not a finite number, lies outside
[-90, 90] x [-180, 180], or is 0, 0 (what a receiver without a fix writes). A photo without a
position keeps its rows: its ``lat`` and ``lon`` are empty, and the lines here name it.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import PIL.Image

#: EXIF tags: the GPS IFD, and in it the references and angles; the camera's make and model.
GPS_IFD = 0x8825
LAT_REF, LAT, LON_REF, LON = 1, 2, 3, 4
MAKE, MODEL = 0x010F, 0x0110
#: A sidecar's columns: the first three required, `section` optional.
SIDECAR_COLUMNS = ('photo', 'lat', 'lon', 'section')


@dataclasses.dataclass(frozen=True)
class Position:
  """Where a photo was taken: decimal degrees (WGS 84) and where that came from."""

  lat: float
  lon: float
  source: str  # 'exif' or 'sidecar'


def position_problem(lat: float, lon: float) -> str | None:
  """Why (lat, lon) is no position, or None."""
  if not (math.isfinite(lat) and math.isfinite(lon)):
    return f'GPS {lat}, {lon} is not a number'
  if not -90 <= lat <= 90:
    return f'latitude {lat:g} is outside [-90, 90]'
  if not -180 <= lon <= 180:
    return f'longitude {lon:g} is outside [-180, 180]'
  if lat == 0 and lon == 0:
    return 'GPS 0, 0 (what a receiver without a fix writes)'
  return None


def _rational(value: Any) -> float:
  """An EXIF number as a float: an IFDRational, a (numerator, denominator) pair or a number."""
  if isinstance(value, tuple | list) and len(value) == 2:
    return float(value[0]) / float(value[1]) if float(value[1]) else math.nan
  return float(value)


def _reference(value: Any) -> str:
  if isinstance(value, bytes):
    value = value.decode('ascii', 'replace')
  return str(value or '').strip('\x00 ').upper()


def _angle(values: Any, ref: Any, negative: str, positive: str, what: str) -> float:
  """Degrees from EXIF's (degrees, minutes, seconds) and its reference letter."""
  if isinstance(values, tuple | list):
    parts = [_rational(v) for v in values]
  else:
    parts = [_rational(values)]
  if not 1 <= len(parts) <= 3:
    raise ValueError(f'{what} has {len(parts)} values (degrees, minutes, seconds)')
  degrees = sum(p / 60**i for i, p in enumerate(parts))
  letter = _reference(ref)
  if letter not in (negative, positive):
    raise ValueError(f'{what} reference {letter or "missing"!r}, not {positive} or {negative}')
  return -degrees if letter == negative else degrees


def exif_info(path: str | Path) -> tuple[Position | None, str | None, str]:
  """(position, why there is none, camera) from the EXIF of the photo at `path`.

  The camera is its EXIF make and model ('' when absent). A broken EXIF (or a file Pillow
  cannot open) gives no position and says why; it never raises.
  """
  try:
    # Pillow reads a damaged EXIF as far as it can and warns ('Corrupt EXIF data'), or
    # returns none at all for a block it cannot parse: both are a broken EXIF here.
    with warnings.catch_warnings(record=True) as caught, PIL.Image.open(path) as image:
      warnings.simplefilter('always')
      exif = image.getexif()
      camera = ' '.join(_reference(exif.get(t)).title() for t in (MAKE, MODEL)).strip()
      gps = exif.get_ifd(GPS_IFD)
      block = image.info.get('exif')
  except OSError as e:
    return None, f'cannot read it ({" ".join(str(e).split())[:120]})', ''
  except Exception as e:  # noqa: BLE001 (a damaged EXIF raises anything: struct, type, value)
    return None, f'broken EXIF ({type(e).__name__}: {" ".join(str(e).split())[:80]})', ''
  damaged = [str(w.message) for w in caught if 'exif' in str(w.message).lower()]
  if (damaged or (block and not len(exif))) and not (gps and LAT in gps and LON in gps):
    why = ' '.join(damaged[0].split())[:80] if damaged else 'an EXIF block Pillow cannot parse'
    return None, f'broken EXIF ({why})', camera
  if not gps or LAT not in gps or LON not in gps:
    return None, 'no GPS in its EXIF', camera
  try:
    lat = _angle(gps[LAT], gps.get(LAT_REF), 'S', 'N', 'GPSLatitude')
    lon = _angle(gps[LON], gps.get(LON_REF), 'W', 'E', 'GPSLongitude')
  except (TypeError, ValueError, ZeroDivisionError) as e:
    return None, f'broken EXIF GPS ({" ".join(str(e).split())[:80]})', camera
  problem = position_problem(lat, lon)
  if problem:
    return None, f'EXIF {problem}', camera
  return Position(round(lat, 7), round(lon, 7), 'exif'), None, camera


@dataclasses.dataclass
class Sidecar:
  """A sidecar CSV read: its rows by their `photo` cell, and what was wrong with it.

  Attributes:
    path: the file.
    rows: {photo cell: (Position or None, why not, section or None)}, the first row of each.
    problems: one line per kind of problem (bad numbers, a photo named twice), naming rows.
    has_sections: whether it has a `section` column.
  """

  path: Path
  rows: dict[str, tuple[Position | None, str | None, str | None]]
  problems: list[str]
  has_sections: bool


def read_sidecar(path: str | Path) -> Sidecar:
  """Reads a sidecar CSV (module docstring).

  Raises:
    ValueError: it cannot be read, or lacks a `photo`, `lat` or `lon` column (the message
      names the file and what it has).
  """
  path = Path(path)
  try:
    with path.open(newline='', encoding='utf-8-sig') as f:
      reader = csv.DictReader(f)
      header = [h.strip() for h in reader.fieldnames or []]
      lines = [{(k or '').strip(): (v or '').strip() for k, v in r.items()} for r in reader]
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise ValueError(f'cannot read the sidecar {path}: {e}') from e
  missing = [c for c in SIDECAR_COLUMNS[:3] if c not in header]
  if missing:
    raise ValueError(
      f'the sidecar {path} has no {", ".join(missing)} column (its header: '
      f'{",".join(header) or "none"}; expected photo,lat,lon[,section])'
    )
  rows: dict[str, tuple[Position | None, str | None, str | None]] = {}
  twice, bad = [], []
  for number, line in enumerate(lines, start=2):
    photo = line['photo']
    if not photo:
      bad.append(f'line {number}: no photo')
      continue
    if photo in rows:
      twice.append(photo)
      continue
    try:
      lat, lon = float(line['lat']), float(line['lon'])
      why = position_problem(lat, lon)
    except ValueError:
      why = f'lat {line["lat"]!r}, lon {line["lon"]!r} are not numbers'
    if why:
      bad.append(f'{photo}: {why}')
    position = None if why else Position(lat, lon, 'sidecar')
    rows[photo] = (position, why and f'sidecar {why}', line.get('section') or None)
  problems = []
  if bad:
    problems.append(f'{path}: {len(bad)} row(s) without a usable position ({_few(bad)})')
  if twice:
    problems.append(
      f'{path}: {len(twice)} photo(s) named twice, the first row kept ({_few(twice)})'
    )
  return Sidecar(path, rows, problems, 'section' in header)


def _few(items: Sequence[str], shown: int = 3) -> str:
  return ', '.join(items[:shown]) + (f', ... ({len(items)} in all)' if len(items) > shown else '')


@dataclasses.dataclass(frozen=True)
class Photo:
  """A predicted photo: its output name (measurements.csv's `name`) and file (`source`)."""

  name: str
  source: str


def match_sidecar(sidecar: Sidecar, photos: Sequence[Photo]) -> tuple[dict[str, str], list[str]]:
  """{photo name: the sidecar's photo cell} and the cells that name no photo.

  A cell names a photo by its path (relative to the sidecar's folder, or absolute), its output
  name, or its file name (with or without extension) where only one photo has it.
  """
  by_path = {os.path.realpath(p.source): p.name for p in photos}
  by_name = {p.name: p.name for p in photos}
  files = collections.defaultdict(list)
  for p in photos:
    files[Path(p.source).name].append(p.name)
    files[Path(p.source).stem].append(p.name)
  base = sidecar.path.parent
  matched, unknown = {}, []
  for cell in sidecar.rows:
    name = (
      by_path.get(os.path.realpath(base / cell))
      or by_name.get(cell)
      or by_name.get(str(Path(cell).with_suffix('')))
      or (files[cell][0] if len(files.get(cell, ())) == 1 else None)
    )
    if name is None or name in matched:
      unknown.append(cell)
    else:
      matched[name] = cell
  return matched, unknown


@dataclasses.dataclass
class Located:
  """Every photo's position, where it came from, and what the lines say.

  Attributes:
    positions: {name: Position or None}, every photo.
    why_not: {name: why it has none}, the photos without one.
    sections: {name: the sidecar's section}, the photos the sidecar gives one.
    cameras: {camera (EXIF make and model, or 'unknown'): photos}.
    lines: one line each: the sidecar's problems, its rows naming no photo, the photos without
      a position (counted and named), mixed cameras.
  """

  positions: dict[str, Position | None]
  why_not: dict[str, str]
  sections: dict[str, str]
  cameras: dict[str, int]
  lines: list[str]


def locate(photos: Sequence[Photo], sidecar: Sidecar | None = None) -> Located:
  """Where each of `photos` was taken: the sidecar's position if it has one, else its EXIF's."""
  matched, unknown = match_sidecar(sidecar, photos) if sidecar else ({}, [])
  lines = list(sidecar.problems) if sidecar else []
  if unknown:
    lines.append(
      f'{sidecar.path}: {len(unknown)} row(s) name no photo of this survey, left out '
      f'({_few(unknown)})'
    )
  positions, why_not, sections = {}, {}, {}
  cameras: collections.Counter[str] = collections.Counter()
  for photo in photos:
    position, why, camera = exif_info(photo.source)
    cameras[camera or 'unknown'] += 1
    if photo.name in matched:
      own, own_why, section = sidecar.rows[matched[photo.name]]
      if section is not None:
        sections[photo.name] = section
      if own is not None or position is None:
        position, why = own, own_why or why
    elif sidecar is not None and position is None:
      why = f'{why}; not in {sidecar.path.name}'
    positions[photo.name] = position
    if position is None:
      why_not[photo.name] = why or 'no position'
  if why_not:
    named = [f'{n} ({w})' for n, w in why_not.items()]
    lines.append(
      f'{len(why_not)} of {len(photos)} photo(s) without a position, kept in every table with '
      f'empty lat and lon: {_few(named)}'
    )
  if len(cameras) > 1:
    lines.append(
      f'photos from {len(cameras)} cameras ({", ".join(f"{c}: {n}" for c, n in cameras.items())})'
      ': their pixel sizes may differ, and lengths in mm and areas take one --mm_per_pixel'
    )
  return Located(positions, why_not, sections, dict(cameras), lines)


def haversine_m(a: Position, b: Position) -> float:
  """The great-circle distance between two positions in metres (a sphere of 6,371,008.8 m)."""
  lat1, lat2 = math.radians(a.lat), math.radians(b.lat)
  dlat, dlon = lat2 - lat1, math.radians(b.lon - a.lon)
  h = math.sin(dlat / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(dlon / 2) ** 2
  return 2 * 6_371_008.8 * math.asin(min(1.0, math.sqrt(h)))


def columns(position: Position | None) -> dict[str, Any]:
  """The `lat` and `lon` cells of a photo's rows (empty without a position)."""
  if position is None:
    return {'lat': '', 'lon': ''}
  return {'lat': f'{position.lat:.7f}', 'lon': f'{position.lon:.7f}'}
