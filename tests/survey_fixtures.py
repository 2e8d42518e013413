"""Tiny road surveys for the survey tests: photos with GPS in their EXIF, a sidecar CSV of
positions and sections, and a prediction's tables written as crackjax-predict writes them."""

from __future__ import annotations

import csv
import io
import struct
from pathlib import Path

import numpy as np
import PIL.Image
from PIL.TiffImagePlugin import IFDRational

from crackjax.deploy import measure
from crackjax.deploy import predict_outputs as written

#: The track starts here and heads north, STEP_DEG of latitude (about 11.1 m) a photo.
START = (52.2, -1.4)
STEP_DEG = 0.0001
SIZE = (48, 64)  # H, W


def dms(value: float) -> tuple[IFDRational, IFDRational, IFDRational]:
  """|value| as EXIF's degrees, minutes and seconds (rationals; seconds to 1/10000)."""
  value = abs(value)
  degrees = int(value)
  minutes = int((value - degrees) * 60)
  seconds = round(((value - degrees) * 60 - minutes) * 60 * 10000)
  return IFDRational(degrees), IFDRational(minutes), IFDRational(seconds, 10000)


def photo_array(seed: int, size: tuple[int, int] = SIZE) -> np.ndarray:
  """Grey pavement with a dark line across it (a crack for any model to find or not)."""
  rng = np.random.default_rng(seed)
  image = rng.integers(150, 200, (*size, 3), dtype=np.uint8)
  image[size[0] // 2 - 1 : size[0] // 2 + 1, 4:-4] = 30
  return image


def gps_photo(
  path: Path,
  lat: float | None,
  lon: float | None,
  *,
  seed: int = 0,
  camera: tuple[str, str] = ('Acme', 'Road1'),
  size: tuple[int, int] = SIZE,
) -> Path:
  """A JPEG at `path` with its EXIF GPS at (lat, lon) (None: no GPS) and camera."""
  path.parent.mkdir(parents=True, exist_ok=True)
  image = PIL.Image.fromarray(photo_array(seed, size))
  exif = PIL.Image.Exif()
  exif[0x010F], exif[0x0110] = camera
  if lat is not None and lon is not None:
    exif.get_ifd(0x8825).update(
      {1: 'N' if lat >= 0 else 'S', 2: dms(lat), 3: 'E' if lon >= 0 else 'W', 4: dms(lon)}
    )
  image.save(path, 'JPEG', exif=exif, quality=95)
  return path


def broken_exif_photo(path: Path, payload: bytes = b'garbage, not a TIFF header') -> Path:
  """A JPEG whose APP1 EXIF block is damaged (`payload` after 'Exif\\0\\0')."""
  buffer = io.BytesIO()
  PIL.Image.fromarray(photo_array(1)).save(buffer, 'JPEG')
  data = buffer.getvalue()
  block = b'Exif\x00\x00' + payload
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data[:2] + b'\xff\xe1' + struct.pack('>H', len(block) + 2) + block + data[2:])
  return path


def make_survey(root: Path, n: int = 200, *, sidecar_every: int = 10) -> tuple[Path, Path]:
  """(photos folder, sidecar CSV) of an `n`-photo survey along a straight track north.

  Photos photos/day<k>/img_<i>.jpg (two folders, by halves) carry their GPS in the EXIF,
  except every `sidecar_every`-th, whose position only the sidecar gives; the sidecar names
  every photo with its section (A, B, C, D by quarters), by path relative to itself.
  """
  photos = root / 'photos'
  lines = ['photo,lat,lon,section']
  for i in range(n):
    lat, lon = START[0] + i * STEP_DEG, START[1]
    path = photos / f'day{1 + 2 * i // n}' / f'img_{i:04d}.jpg'
    in_exif = i % sidecar_every != sidecar_every - 1
    gps_photo(path, lat if in_exif else None, lon if in_exif else None, seed=i)
    lines.append(f'{path.relative_to(root).as_posix()},{lat:.7f},{lon:.7f},{"ABCD"[4 * i // n]}')
  sidecar = root / 'gps.csv'
  sidecar.write_text('\n'.join(lines) + '\n')
  return photos, sidecar


def fake_prediction(out: Path, photos: list[Path], names: list[str], mm_per_pixel=0.5) -> None:
  """measurements.csv and cracks.csv as crackjax-predict writes them for `photos`: each photo
  a crack of 10 + (i % 7) px; every third one a second, wider one; every fifth none."""
  rows, cracks = [], []
  types = measure.CRACK_TYPES
  for i, (path, name) in enumerate(zip(photos, names, strict=True)):
    found = [] if i % 5 == 4 else [(10.0 + i % 7, 2.0, types[i % len(types)])]
    if i % 3 == 0 and found:
      found.append((25.0, 40.0, types[(i + 1) % len(types)]))
    length = sum(f[0] for f in found)
    row = {'name': name, 'source': str(path), 'height': SIZE[0], 'width': SIZE[1]}
    row |= {'threshold': 0.5, 'scale': '1', 'rule_width_px': ''}
    row |= {f: 0 for f in measure.MEASURE_FIELDS}
    row |= {'length_px': length, 'length_mm': length * mm_per_pixel, 'segments': len(found)}
    row |= {'max_width_px': max((f[1] for f in found), default=0), 'cracks': len(found)}
    rows.append(row)
    for k, (px, width, kind) in enumerate(found, start=1):
      mean_mm = width * mm_per_pixel
      cracks.append(
        {f: 0 for f in measure.CRACK_FIELDS}
        | {'name': name, 'crack_id': k, 'length_px': px, 'length_mm': px * mm_per_pixel}
        | {'mean_width_px': width, 'mean_width_mm': mean_mm, 'type': kind}
        | {'severity': measure.severity(mean_mm), 'orientation_deg': -12.5}
      )
  fields = ['name', 'source', 'height', 'width', 'threshold', 'scale', 'rule_width_px']
  fields += [*measure.MEASURE_FIELDS, 'cracks']
  out.mkdir(parents=True, exist_ok=True)
  written.write_text(out / 'measurements.csv', written.csv_table(fields, rows))
  written.write_text(out / 'cracks.csv', written.csv_table(['name', *measure.CRACK_FIELDS], cracks))


def read_csv(path: Path) -> list[dict[str, str]]:
  with path.open(newline='') as f:
    return list(csv.DictReader(f))
