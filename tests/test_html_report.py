"""index.html of crackjax-predict: self-contained, one card per photo, sortable; rendered by a
real browser (headless Chromium) where one is installed."""

import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from crackjax.deploy import html_report


def _rows_and_cracks():
  rows, cracks, thumbs = [], [], {}
  for i, (ratio, length, width) in enumerate([(0.01, 300.0, 3.0), (0.05, 100.0, 9.0), (0, 0, 0)]):
    name = f'sub/photo_{i}'
    rows.append(
      {
        'name': name,
        'crack_ratio': ratio,
        'length_px': length,
        'length_mm': length * 2,
        'max_width_px': width,
        'max_width_mm': width * 2,
        'segments': 1,
      }
    )
    thumbs[name] = html_report.thumbnail_uri(np.full((600, 400, 3), 40 * i, np.uint8))
  cracks.append({'name': 'sub/photo_0', 'type': 'longitudinal', 'severity': 'low'})
  cracks.append({'name': 'sub/photo_1', 'type': 'alligator', 'severity': 'high'})
  cracks.append({'name': 'sub/photo_1', 'type': 'transverse', 'severity': 'moderate'})
  return rows, cracks, thumbs


class _Tags(HTMLParser):
  def __init__(self):
    super().__init__()
    self.tags = []

  def handle_starttag(self, tag, attrs):
    self.tags.append((tag, dict(attrs)))


def test_index_is_self_contained_with_a_card_per_photo(tmp_path):
  rows, cracks, thumbs = _rows_and_cracks()
  page = html_report.write_index(tmp_path, rows, cracks, thumbs).read_text()
  parser = _Tags()
  parser.feed(page)
  cards = [a for t, a in parser.tags if t == 'div' and a.get('class') == 'card']
  assert len(cards) == 3
  assert [float(c['data-ratio']) for c in cards] == [0.01, 0.05, 0.0]
  # Nothing from elsewhere: no external script, style sheet, font or image.
  for tag, attrs in parser.tags:
    assert tag != 'link' and not (tag == 'script' and 'src' in attrs)
    if tag == 'img':
      assert attrs['src'].startswith('data:image/jpeg;base64,')
  assert not re.search(r'https?://', page)
  # Thumbnails are small; a click opens the full-size overlay beside the page.
  assert 'href="overlays/sub/photo_1.jpg"' in page
  assert '3 photo(s)' in page and '3 crack(s): 1 longitudinal, 1 transverse, 1 alligator' in page
  assert 'worst severity: <span class="sev-high">high</span>' in page
  assert 'no crack of the minimum length' in page  # photo 2
  assert {key for key, _ in html_report.SORT_KEYS} == {'ratio', 'length', 'width'}


def _chromium():
  return next((shutil.which(n) for n in ('chromium', 'chromium-browser') if shutil.which(n)), None)


@pytest.mark.skipif(_chromium() is None, reason='no Chromium installed (.ci/run installs it)')
def test_index_renders_in_headless_chromium(tmp_path):
  rows, cracks, thumbs = _rows_and_cracks()
  index = html_report.write_index(tmp_path, rows, cracks, thumbs)
  base = [_chromium(), '--headless', '--no-sandbox', '--disable-gpu', '--enable-logging=stderr']
  dom = subprocess.run(
    [*base, '--dump-dom', index.as_uri()], capture_output=True, text=True, timeout=120
  )
  assert dom.returncode == 0, dom.stderr[-2000:]
  # The script ran: the cards are sorted by crack ratio, largest first, and the button is on.
  names = re.findall(r'<h2>([^<]+)</h2>', dom.stdout)
  assert names == ['sub/photo_1', 'sub/photo_0', 'sub/photo_2']
  assert 'class="active"' in dom.stdout
  assert 'Uncaught' not in dom.stderr and 'CONSOLE' not in dom.stderr
  shot = tmp_path / 'shot.png'
  subprocess.run(
    [*base, f'--screenshot={shot}', '--window-size=1200,900', index.as_uri()],
    capture_output=True,
    timeout=120,
    check=True,
  )
  assert shot.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_a_photo_not_of_a_road_says_so_unmeasured_and_sorts_last(tmp_path):
  """Issue 78: measurements.csv's not_road reaches the page: the card says why, shows no
  figures and sorts last; the summary counts it apart."""
  from crackjax.deploy import measure

  rows, cracks, thumbs = _rows_and_cracks()
  flagged = {'name': 'black', **measure.measure_cracks(np.ones((32, 48), bool))}
  thumbs['black'] = html_report.thumbnail_uri(np.zeros((32, 48, 3), np.uint8))
  page = html_report.write_index(tmp_path, [*rows, flagged], cracks, thumbs).read_text()
  assert '4 photo(s) (<span class="not-road">1 not a road photo</span>, not measured)' in page
  card = page[page.index('alt="overlay of black"') :]
  assert 'not a road photo: almost all of it crack (100.0% of its pixels); not measured' in card
  parser = _Tags()
  parser.feed(page)
  cards = [a for t, a in parser.tags if t == 'div' and a.get('class') == 'card']
  assert [float(cards[-1][f'data-{k}']) for k in ('ratio', 'length', 'width')] == [-1, -1, -1]


def _survey_rows(n: int) -> tuple[list[dict], list[dict]]:
  """`n` photos of a survey: lengths rising with the index, every third with a crack."""
  rows = [
    {
      'name': f'day{i // 1000}/img_{i:05d}',
      'crack_ratio': (i % 97) / 1000,
      'length_px': float(i),
      'length_mm': '',
      'max_width_px': float(i % 11),
      'max_width_mm': '',
      'segments': 1,
    }
    for i in range(n)
  ]
  cracks = [{'name': r['name'], 'type': 'transverse', 'severity': None} for r in rows[::3]]
  return rows, cracks


def test_a_survey_of_many_photos_is_paged(tmp_path):
  rows, cracks = _survey_rows(1201)
  thumb = html_report.thumbnail_uri(np.full((30, 40, 3), 90, np.uint8))
  asked = []
  index = html_report.write_index(
    tmp_path, rows, cracks, lambda n: asked.append(n) or thumb, page_size=500
  )
  assert asked == [r['name'] for r in rows]  # each thumbnail once, as its page is written
  page = index.read_text()
  assert '1201 photo(s)' in page and '<div class="card"' not in page
  assert len(page) < 40_000  # the summary, the longest 50 and a line a page
  pages = sorted((tmp_path / html_report.PAGES_DIR).iterdir())
  assert [p.name for p in pages] == ['0001.html', '0002.html', '0003.html']
  for link in re.findall(r'href="(pages/\d{4}\.html#p\d+)"', page)[:50]:
    target, anchor = link.split('#')
    assert f'id="{anchor}"' in (tmp_path / target).read_text()
  # The longest first: photo 1200 on page 3.
  assert re.search(r'href="pages/0003\.html#p1200">day1/img_01200</a>', page)
  third = pages[2].read_text()
  assert (
    third.count('<div class="card"') == 201 and 'href="../overlays/day1/img_01200.jpg"' in third
  )
  assert 'href="0002.html">previous</a>' in third and 'next' not in third
  # A later, shorter prediction into the same folder leaves no page of this one behind.
  html_report.write_index(tmp_path, rows[:10], cracks[:4], lambda n: thumb, page_size=500)
  assert not (tmp_path / html_report.PAGES_DIR).exists()
  assert (tmp_path / 'index.html').read_text().count('<div class="card"') == 10


@pytest.mark.skipif(_chromium() is None, reason='no Chromium installed (.ci/run installs it)')
def test_five_thousand_photos_open_in_headless_chromium(tmp_path):
  from crackjax.survey import gps, survey_page

  rows, cracks = _survey_rows(5000)
  thumb = html_report.thumbnail_uri(np.full((240, 320, 3), 90, np.uint8))
  index = html_report.write_index(tmp_path, rows, cracks, lambda n: thumb)
  files = [index, *sorted((tmp_path / html_report.PAGES_DIR).iterdir())]
  assert len(files) == 11 and max(f.stat().st_size for f in files) < 20 * 2**20
  # The survey's page beside it: 5,000 dots on its map.
  positions = {r['name']: gps.Position(52 + i * 1e-4, -1.4, 'exif') for i, r in enumerate(rows)}
  located = gps.Located(positions, {}, {}, {'cam': 5000}, [])
  worst = {r['name']: 'unrated' if i % 3 == 0 else 'no_crack' for i, r in enumerate(rows)}
  survey = tmp_path / 'survey.html'
  survey.write_text(survey_page.write_page(tmp_path, rows, worst, located, [], []))
  base = [_chromium(), '--headless', '--no-sandbox', '--disable-gpu', '--enable-logging=stderr']
  for page, expected in ((index, 0), (files[1], 500), (files[-1], 500), (survey, 0)):
    dom = subprocess.run(
      [*base, '--dump-dom', page.as_uri()], capture_output=True, text=True, timeout=180
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('class="card"') == expected, page
    assert 'Uncaught' not in dom.stderr and 'CONSOLE' not in dom.stderr, dom.stderr[-2000:]
  assert (
    '5000 photo(s)'
    in subprocess.run(
      [*base, '--dump-dom', index.as_uri()], capture_output=True, text=True, timeout=180
    ).stdout
  )
