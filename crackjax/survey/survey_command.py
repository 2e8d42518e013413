"""`crackjax-survey`: a road survey's photos predicted (in shards, on SLURM) and read as a survey.

  crackjax-survey --model=roads-unet-cpu --out=OUT --mm_per_pixel=1.2 day1/ day2/
  crackjax-survey --model=M --out=OUT photos/ --executor=slurm --shards=8 --positions=gps.csv
  crackjax-survey --out=OUT                                  # the survey of a prediction alone
  crackjax-survey --out=OUT --sections=distance --section_length=100

Given photos (and every crackjax-predict flag), it predicts them into OUT first: in this
process, or with --shards=N in N parts, here one after another (--executor=local) or as SLURM
array tasks (--executor=slurm), merged into OUT as one process writes it
(crackjax/survey/shards.py); the same command again predicts only the photos OUT's manifest
does not list (a shard that failed, a new day's photos). Then it reads
OUT/measurements.csv and cracks.csv (crackjax-predict's, finished) and each photo's
position (its EXIF's GPS, or --positions: a CSV photo,lat,lon[,section] that wins over the
EXIF), then writes into OUT: measurements.csv and cracks.csv again with `lat` and `lon`
columns (the other cells as they were), survey.geojson (one point per photo, QGIS opens it as
it is), sections.csv (one row per road section: --sections) and survey.html (a summary, a map
of the photos coloured by their worst severity, offline, and the sections). A photo without a
position stays in every table (empty lat and lon, a null geometry), counted and named.
docs/prediction.md#a-road-survey says what each column measures.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

from absl import flags

from crackjax import cli
from crackjax.deploy import predict_command
from crackjax.deploy import predict_outputs as written
from crackjax.paper import slurm
from crackjax.runs import outputs
from crackjax.survey import geojson, gps, sections, shards, survey_page, survey_tables

PROG = 'crackjax-survey'
USAGE = (
  f'{PROG} [--model=M|--workdir=RUN PHOTOS... [crackjax-predict flags] [--executor=local|slurm '
  '--shards=N]] --out=OUT [--positions=CSV] [--sections=sidecar|folder|distance] '
  '[--section_length=M] [--mm_per_pixel=MM]'
)
#: What the survey writes into OUT besides the two tables it adds columns to.
WRITTEN = ('survey.geojson', 'sections.csv', 'survey.html')


def define_flags(fv: flags.FlagValues) -> None:
  """crackjax-predict's flags, the shards' and the survey's own."""
  predict_command._define_flags(fv)
  shards.define_shard_flags(fv)
  define_survey_flags(fv)


def define_survey_flags(fv: flags.FlagValues) -> None:
  """The survey's own flags (--out and --mm_per_pixel where not defined yet)."""
  if 'out' not in fv:
    flags.DEFINE_string('out', None, "crackjax-predict's output folder", flag_values=fv)
  flags.DEFINE_string(
    'positions',
    None,
    'a sidecar CSV with a header photo,lat,lon[,section] (decimal degrees, WGS 84): each '
    "photo's position, over its EXIF's GPS; photo is its path (relative to the CSV's folder), "
    'output name or file name',
    flag_values=fv,
  )
  flags.DEFINE_enum(
    'sections',
    None,
    list(sections.SECTION_RULES),
    "road sections: sidecar (--positions' section column; the default when it has one), "
    "folder (the photo's folder; the default otherwise) or distance (every --section_length "
    'metres along the GPS track)',
    flag_values=fv,
  )
  flags.DEFINE_float(
    'section_length', None, 'metres per section of --sections=distance', flag_values=fv
  )
  if 'mm_per_pixel' not in fv:
    flags.DEFINE_float(
      'mm_per_pixel',
      None,
      'ground sampling distance: areas and metres in sections.csv (default: the one the '
      'prediction measured with, read from its tables)',
      flag_values=fv,
    )


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name); returns the exit status."""
  return COMMAND.run(_main, argv)


COMMAND = cli.Command.restoring(
  PROG, define_flags, usage=USAGE, errors=(ValueError, slurm.SlurmError)
)


def _main(fv: flags.FlagValues, arguments: list[str]) -> int:
  if not fv.out:
    sys.exit(f'{PROG}: --out=OUT is required; usage: {USAGE}')
  if arguments or fv.examples:
    status = shards.predict(fv, arguments)
    if status:
      return status
  survey(
    Path(fv.out),
    positions=fv.positions,
    rule=fv.sections,
    section_length=fv.section_length,
    mm_per_pixel=fv.mm_per_pixel,
  )
  return 0


def pixel_size(rows: Sequence[dict[str, str]], given: float | None) -> float | None:
  """The pixel size the tables were measured with (length_mm / length_px), or `given`.

  Raises:
    ValueError: `given` is not > 0, or differs from the tables' own.
  """
  if given is not None and not (given > 0 and math.isfinite(given)):
    raise ValueError(f'--mm_per_pixel must be a number > 0, got {given}')
  ratios = [
    float(r['length_mm']) / float(r['length_px'])
    for r in rows
    if r.get('length_mm') not in (None, '') and float(r.get('length_px') or 0) > 0
  ]
  own = ratios[0] if ratios else None
  if own is not None and given is not None and not math.isclose(own, given, rel_tol=1e-3):
    raise ValueError(
      f'--mm_per_pixel={given:g}, but the tables were measured at {own:.6g} mm a pixel '
      '(their length_mm / length_px): predict again with this pixel size, or leave the flag out'
    )
  return given if given is not None else own


def survey(
  out: Path,
  *,
  positions: str | None = None,
  rule: str | None = None,
  section_length: float | None = None,
  mm_per_pixel: float | None = None,
) -> list[str]:
  """The survey of the finished prediction in `out` (module docstring); returns the lines it
  printed (to stderr) about its input.

  Raises:
    ValueError: no finished prediction in `out`, an unreadable sidecar, a rule that cannot be
      applied (each message one line).
  """
  files = [out / 'measurements.csv', out / 'cracks.csv']
  if written.unfinished(out):
    raise ValueError(
      f'{out} holds an unfinished prediction: run its crackjax-predict command again first'
    )
  if not files[0].is_file():
    raise ValueError(f'{out} holds no measurements.csv: run crackjax-predict --out={out} first')
  (header, raw), (crack_header, crack_raw) = (survey_tables.read_table(f) for f in files)
  rows, cracks = survey_tables.records(header, raw), survey_tables.records(crack_header, crack_raw)
  mm = pixel_size(rows, mm_per_pixel)
  sidecar = gps.read_sidecar(positions) if positions else None
  if rule is None:
    rule = 'sidecar' if sidecar and sidecar.has_sections else 'folder'
  if rule == 'sidecar' and not (sidecar and sidecar.has_sections):
    raise ValueError('--sections=sidecar needs --positions=CSV with a section column')
  if rule == 'distance' and not (section_length and section_length > 0):
    raise ValueError('--sections=distance needs --section_length=M (metres, > 0)')
  outputs.check_inside(out, [*files, *(out / f for f in WRITTEN)])
  photos = [gps.Photo(r['name'], r.get('source') or '') for r in rows]
  located = gps.locate(photos, sidecar)
  for line in located.lines:
    print(f'{PROG}: {line}', file=sys.stderr)
  names = [r['name'] for r in rows]
  section_of, spans = sections.assign(rule, names, located, metres=section_length)
  table = sections.section_table(rows, cracks, section_of, spans, located, mm)
  cells = {n: gps.columns(located.positions.get(n)) for n in names}
  written.write_text(files[0], survey_tables.with_positions(header, raw, cells))
  written.write_text(files[1], survey_tables.with_positions(crack_header, crack_raw, cells))
  collection = geojson.feature_collection(rows, cracks, located, section_of)
  written.write_text(out / 'survey.geojson', geojson.dumps(collection))
  fields = [
    f for f in sections.SECTION_FIELDS if rule == 'distance' or f not in ('start_m', 'end_m')
  ]
  written.write_text(
    out / 'sections.csv',
    written.csv_table(fields, [{k: v for k, v in r.items() if k in fields} for r in table]),
  )
  worst = {
    f['properties']['name']: f['properties']['worst_severity'] for f in collection['features']
  }
  page = survey_page.write_page(out, rows, worst, located, table, located.lines)
  written.write_text(out / 'survey.html', page)
  outputs.record_outputs(out, [f.relative_to(out).as_posix() for f in files] + list(WRITTEN), PROG)
  placed = sum(p is not None for p in located.positions.values())
  print(
    f'{PROG}: {len(rows)} photo(s), {placed} with a position, {len(rows) - placed} without; '
    f'{len(table)} section(s) by {rule} in {out / "sections.csv"}; lat and lon added to '
    f'measurements.csv and cracks.csv; survey.geojson, survey.html'
    + ('' if mm else '; no --mm_per_pixel: no areas nor metres'),
    file=sys.stderr,
  )
  return located.lines


if __name__ == '__main__':
  sys.exit(main())
