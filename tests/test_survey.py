"""The road survey over a prediction's tables (crackjax.survey): positions from EXIF GPS and a
sidecar, every bad input in one line, survey.geojson, sections.csv and survey.html."""

from __future__ import annotations

import json
import math

import PIL.Image
import pytest
import shapely.geometry
from PIL.TiffImagePlugin import IFDRational

from crackjax.survey import geojson, gps, labels_command, sections, survey_command
from tests import survey_fixtures as sf


def _names(photos_dir, files):
  return [f.relative_to(photos_dir).with_suffix('').as_posix() for f in files]


@pytest.fixture
def survey(tmp_path):
  """A 200-photo survey with its fake prediction in OUT: (photos, sidecar, out, names)."""
  photos, sidecar = sf.make_survey(tmp_path)
  files = sorted(photos.rglob('*.jpg'))
  names = _names(photos, files)
  out = tmp_path / 'out'
  sf.fake_prediction(out, files, names)
  return photos, sidecar, out, names


def test_exif_gps_degrees_minutes_seconds_and_references(tmp_path):
  south_west = sf.gps_photo(tmp_path / 'sw.jpg', -33.8650, -151.2094)
  position, why, camera = gps.exif_info(south_west)
  assert why is None and camera == 'Acme Road1'
  assert position.source == 'exif'
  assert math.isclose(position.lat, -33.8650, abs_tol=1e-6)
  assert math.isclose(position.lon, -151.2094, abs_tol=1e-6)
  # Degrees and decimal minutes (two values), and plain floats, as some cameras write them.
  image = PIL.Image.new('RGB', (8, 8))
  exif = PIL.Image.Exif()
  exif.get_ifd(gps.GPS_IFD).update(
    {1: b'N\x00', 2: (IFDRational(52), IFDRational(3015, 100)), 3: 'E', 4: (1.5,)}
  )
  image.save(tmp_path / 'dm.jpg', exif=exif)
  position, why, _ = gps.exif_info(tmp_path / 'dm.jpg')
  assert why is None and math.isclose(position.lat, 52 + 30.15 / 60) and position.lon == 1.5


@pytest.mark.parametrize(
  'case, reason',
  [
    ('no_gps', 'no GPS in its EXIF'),
    ('zero', 'EXIF GPS 0, 0 (what a receiver without a fix writes)'),
    ('latitude', 'EXIF latitude 95 is outside [-90, 90]'),
    ('longitude', 'EXIF longitude 190 is outside [-180, 180]'),
    ('unparsable', 'broken EXIF (an EXIF block Pillow cannot parse)'),
    ('corrupt', 'broken EXIF (Corrupt EXIF data'),
    ('no_reference', "broken EXIF GPS (GPSLatitude reference 'missing', not N or S)"),
    ('zero_denominator', 'EXIF GPS nan'),
  ],
)
def test_bad_exif_gives_no_position_and_one_reason(tmp_path, case, reason):
  path = tmp_path / f'{case}.jpg'
  if case == 'no_gps':
    sf.gps_photo(path, None, None)
  elif case == 'zero':
    sf.gps_photo(path, 0.0, 0.0)
  elif case == 'latitude':
    sf.gps_photo(path, 95.0, 1.0)
  elif case == 'longitude':
    sf.gps_photo(path, 45.0, 190.0)
  elif case == 'unparsable':
    sf.broken_exif_photo(path)
  elif case == 'corrupt':  # a GPS IFD pointer past the end of the block
    sf.broken_exif_photo(
      path, b'II*\x00\x08\x00\x00\x00\x01\x00\x25\x88\x04\x00\x01\x00' + b'\0' * 10
    )
  else:
    image = PIL.Image.new('RGB', (8, 8))
    exif = PIL.Image.Exif()
    latitude = (IFDRational(1, 0), 0.0, 0.0) if case == 'zero_denominator' else (45.0, 0.0, 0.0)
    values = {2: latitude, 3: 'E', 4: (1.0, 0.0, 0.0)}
    exif.get_ifd(gps.GPS_IFD).update(values if case == 'no_reference' else {1: 'N', **values})
    image.save(path, exif=exif)
  position, why, _ = gps.exif_info(path)
  assert position is None and why.startswith(reason), why


def test_sidecar_problems_each_in_one_line(tmp_path):
  a = sf.gps_photo(tmp_path / 'p' / 'a.jpg', None, None)
  b = sf.gps_photo(tmp_path / 'p' / 'b.jpg', 10.0, 20.0)
  c = sf.gps_photo(tmp_path / 'p' / 'sub' / 'c.jpg', None, None)
  sidecar = tmp_path / 'log.csv'
  sidecar.write_text(
    'photo,lat,lon\n'
    'p/a.jpg,1.5,2.5\n'  # by path relative to the CSV
    'b,11.0,21.0\n'  # by output name: wins over the EXIF
    'p/a.jpg,9,9\n'  # named twice: the first row kept
    'gone.jpg,1,1\n'  # no such photo
    'missing/x.jpg,1,1\n'
    'c.jpg,north,2\n'  # not numbers
  )
  photos = [gps.Photo('a', str(a)), gps.Photo('b', str(b)), gps.Photo('sub/c', str(c))]
  located = gps.locate(photos, gps.read_sidecar(sidecar))
  assert located.positions['a'] == gps.Position(1.5, 2.5, 'sidecar')
  assert located.positions['b'] == gps.Position(11.0, 21.0, 'sidecar')
  assert located.positions['sub/c'] is None
  assert 'not numbers' in located.why_not['sub/c']
  text = '\n'.join(located.lines)
  assert len(located.lines) == 4, located.lines
  assert '1 photo(s) named twice, the first row kept (p/a.jpg)' in text
  assert '2 row(s) name no photo of this survey, left out (gone.jpg, missing/x.jpg)' in text
  assert '1 of 3 photo(s) without a position' in text and 'sub/c (' in text
  with pytest.raises(ValueError, match='has no lon column'):
    (tmp_path / 'bad.csv').write_text('photo,lat\na.jpg,1\n')
    gps.read_sidecar(tmp_path / 'bad.csv')


def test_mixed_cameras_are_said(tmp_path):
  a = sf.gps_photo(tmp_path / 'a.jpg', 10.0, 20.0, camera=('Acme', 'Road1'))
  b = sf.gps_photo(tmp_path / 'b.jpg', 10.0, 20.001, camera=('Other', 'X2'), size=(60, 80))
  located = gps.locate([gps.Photo('a', str(a)), gps.Photo('b', str(b))])
  assert located.cameras == {'Acme Road1': 1, 'Other X2': 1}
  assert located.lines == [
    'photos from 2 cameras (Acme Road1: 1, Other X2: 1): their pixel sizes may differ, and '
    'lengths in mm and areas take one --mm_per_pixel'
  ]


def test_haversine():
  a, b = gps.Position(52.0, -1.0, 'exif'), gps.Position(52.001, -1.0, 'exif')
  assert math.isclose(gps.haversine_m(a, b), 111.195, rel_tol=1e-3)


def _check_geojson(path):
  collection = json.loads(path.read_text())
  assert geojson.problems(collection) == []
  for feature in collection['features']:
    if feature['geometry'] is not None:
      shape = shapely.geometry.shape(feature['geometry'])
      assert shape.geom_type == 'Point' and shape.is_valid
  return collection


def test_survey_of_a_prediction(survey, capsys):
  photos, sidecar, out, names = survey
  # Three photos lose their position: one a broken EXIF and no sidecar row, one GPS 0, 0 in
  # its EXIF and none in the sidecar, one outside the range in both.
  sf.broken_exif_photo(photos / 'day1' / 'img_0003.jpg')
  sf.gps_photo(photos / 'day1' / 'img_0004.jpg', 0.0, 0.0)
  sf.gps_photo(photos / 'day1' / 'img_0005.jpg', 95.0, -1.4)
  lines = sidecar.read_text().splitlines()
  lines = [ln for ln in lines if 'img_0003' not in ln and 'img_0004' not in ln]
  lines = [ln.replace('52.2005000', '95.0') if 'img_0005' in ln else ln for ln in lines]
  lines.append('photos/day3/nowhere.jpg,52.3,-1.4,A')
  sidecar.write_text('\n'.join(lines) + '\n')
  tables_before = {t: (out / t).read_text() for t in ('measurements.csv', 'cracks.csv')}
  assert survey_command.main([f'--out={out}', f'--positions={sidecar}']) == 0
  err = capsys.readouterr().err
  assert '1 row(s) name no photo of this survey, left out (photos/day3/nowhere.jpg)' in err
  assert '3 of 200 photo(s) without a position' in err
  assert 'day1/img_0003 (broken EXIF' in err and 'day1/img_0004 (EXIF GPS 0, 0' in err
  # The sidecar has a section column: its rule; the two photos it does not name in '(none)'.
  assert '5 section(s) by sidecar' in err

  measured = sf.read_csv(out / 'measurements.csv')
  assert [r['name'] for r in measured] == names  # no row lost, added or moved
  assert list(measured[0])[-2:] == ['lat', 'lon']
  unplaced = [r['name'] for r in measured if not r['lat']]
  assert unplaced == ['day1/img_0003', 'day1/img_0004', 'day1/img_0005']
  assert math.isclose(float(measured[10]['lat']), sf.START[0] + 10 * sf.STEP_DEG, abs_tol=1e-6)
  assert measured[9]['lat']  # the sidecar's position: not in its EXIF
  cracks = sf.read_csv(out / 'cracks.csv')
  assert all(c['lat'] == measured[names.index(c['name'])]['lat'] for c in cracks)
  for table_name, before in tables_before.items():  # crackjax-predict's own cells as written
    after = (out / table_name).read_text().splitlines()
    assert [line.rsplit(',', 2)[0] for line in after] == before.splitlines()

  collection = _check_geojson(out / 'survey.geojson')
  features = collection['features']
  assert len(features) == 200 and [f['properties']['name'] for f in features] == names
  nowhere = [f for f in features if f['geometry'] is None]
  assert [f['properties']['name'] for f in nowhere] == unplaced
  assert nowhere[0]['properties']['no_position'].startswith('broken EXIF')
  first = features[0]
  assert first['geometry']['coordinates'] == [sf.START[1], sf.START[0]]  # [lon, lat]
  assert first['properties']['types'] == 'longitudinal,transverse'
  assert first['properties']['worst_severity'] == 'high'  # mean width 40 px at 0.5 mm: 20 mm
  assert features[4]['properties']['worst_severity'] == 'no_crack'

  table = sf.read_csv(out / 'sections.csv')
  assert [r['section'] for r in table] == ['A', 'B', 'C', 'D', sections.NO_SECTION]
  assert table[-1]['photos'] == '2'
  assert sum(int(r['photos']) for r in table) == 200
  assert sum(int(r['photos_positioned']) for r in table) == 197
  for r in table:
    assert sum(int(r[f'photos_{w}']) for w in sections.WORST) == int(r['photos'])
    assert math.isclose(sum(float(r[f'share_{w}']) for w in sections.WORST), 1, abs_tol=2e-4)
    area = int(r['photos']) * 48 * 64 * 0.0005**2
    assert math.isclose(float(r['area_m2']), area, rel_tol=1e-3)
    assert math.isclose(float(r['length_per_m2']), float(r['length_m']) / area, rel_tol=1e-3)
  total = sum(float(r['length_px']) for r in measured)
  assert math.isclose(sum(float(r['length_px']) for r in table), total)
  by_type = sum(
    float(r[f'{t}_length_px'])
    for r in table
    for t in ('longitudinal', 'transverse', 'diagonal', 'block', 'alligator')
  )
  assert math.isclose(by_type, sum(float(c['length_px']) for c in cracks))

  page = (out / 'survey.html').read_text()
  assert '<canvas id="map"' in page and 'http' not in page.replace('https', 'http')
  assert 'day1/img_0003' in page  # named among the photos without a position


def test_sections_by_folder_and_by_distance(survey, capsys):
  _, _, out, _ = survey
  assert survey_command.main([f'--out={out}', '--sections=folder']) == 0
  table = sf.read_csv(out / 'sections.csv')
  assert [(r['section'], r['photos']) for r in table] == [('day1', '100'), ('day2', '100')]
  assert 'start_m' not in table[0]
  # Every 100 m: photos 11.1 m apart, every tenth without a position (no sidecar here).
  assert survey_command.main([f'--out={out}', '--sections=distance', '--section_length=100']) == 0
  table = sf.read_csv(out / 'sections.csv')
  assert table[-1]['section'] == sections.NO_POSITION and table[-1]['photos'] == '20'
  assert sum(int(r['photos']) for r in table) == 200
  assert (table[0]['section'], table[0]['start_m'], table[0]['end_m']) == (
    '0-100 m',
    '0.0',
    '100.0',
  )
  assert len(table) == 1 + math.ceil(199 * 11.1195 / 100)
  err = capsys.readouterr().err
  assert '20 of 200 photo(s) without a position' in err


@pytest.mark.parametrize(
  'args, message',
  [
    (['--sections=distance'], '--sections=distance needs --section_length=M'),
    (['--sections=sidecar'], '--sections=sidecar needs --positions=CSV with a section column'),
    (['--mm_per_pixel=2'], 'the tables were measured at 0.5 mm a pixel'),
    (['--positions=nonexistent.csv'], 'cannot read the sidecar nonexistent.csv'),
  ],
)
def test_survey_refusals_in_one_line(survey, args, message):
  _, _, out, _ = survey
  with pytest.raises(SystemExit) as exit_:
    survey_command.main([f'--out={out}', *args])
  line = str(exit_.value.code)  # sys.exit(text): printed to stderr, status 1
  assert line.startswith('crackjax-survey: ') and message in line and '\n' not in line, line


def test_survey_needs_a_finished_prediction(tmp_path):
  with pytest.raises(SystemExit, match='holds no measurements.csv: run crackjax-predict'):
    survey_command.main([f'--out={tmp_path}'])


@pytest.mark.parametrize(
  'main, usage, listed',
  [
    (
      survey_command.main,
      'usage: crackjax-survey [--model=M|--workdir=RUN PHOTOS...',
      ['--positions', '--sections', '--section_length', '--shards', '--executor', '--model'],
    ),
    (labels_command.main, 'usage: crackjax-labels export', ['--coco', '--images', '--polygons']),
  ],
)
def test_help_lists_the_flags(main, usage, listed, capsys):
  with pytest.raises(SystemExit) as exit_:
    main(['--help'])
  assert exit_.value.code == 0
  text = capsys.readouterr().out
  assert text.startswith(usage) and all(flag in text for flag in listed), text[:500]
