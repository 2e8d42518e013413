"""``survey.html``: the survey's page, offline: a summary, the map, the sections, the photos
without a position.

The map draws every positioned photo as a dot coloured by its worst severity on an inline
canvas (a local east/north projection in metres around the survey's middle: no tiles, no
network, no external script); a click on a dot names the nearest photo and links to its
overlay. 50,000 photos make about 2 MB of inline data. The photos' cards are in index.html
beside it (crackjax-predict's page).
"""

from __future__ import annotations

import html
import math
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from crackjax.runs import outputs
from crackjax.survey import gps, sections

#: Dot colours by worst severity (sections.WORST's order).
COLOURS = {
  'no_crack': '#9a9a9a',
  'unrated': '#3a6fd8',
  'low': '#2e9d2e',
  'moderate': '#e08a00',
  'high': '#d01010',
}
MAP_SIZE = (960, 600)
#: The columns of sections.csv the page shows (the file has them all).
PAGE_COLUMNS = (
  'section',
  'photos',
  'photos_positioned',
  'area_m2',
  'length_px',
  'length_m',
  'length_per_m2',
  *(f'share_{w}' for w in sections.WORST),
)

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;background:#f6f6f4;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;font-size:.85em;background:#fff}
td,th{border:1px solid #ddd;padding:2px 6px}td.n{text-align:right}
canvas{background:#fff;border:1px solid #ccc}.legend span{margin-right:1em}
"""

_SCRIPT = """
var data=JSON.parse(document.getElementById('points').textContent);
var canvas=document.getElementById('map'),ctx=canvas.getContext('2d');
var colours=data.colours;
data.points.forEach(function(p){ctx.fillStyle=colours[p[2]];ctx.beginPath();
  ctx.arc(p[0],p[1],3,0,2*Math.PI);ctx.fill();});
canvas.addEventListener('click',function(e){
  var r=canvas.getBoundingClientRect(),x=e.clientX-r.left,y=e.clientY-r.top,best=-1,d=1e18;
  data.points.forEach(function(p,i){var q=(p[0]-x)*(p[0]-x)+(p[1]-y)*(p[1]-y);
    if(q<d){d=q;best=i;}});
  if(best<0)return;var p=data.points[best],a=document.getElementById('picked');
  a.textContent=data.names[p[3]]+' ('+data.worst[p[2]]+')';a.href=data.links[p[3]];});
"""


def _projected(
  points: Sequence[tuple[str, gps.Position]],
) -> tuple[list[tuple[float, float]], float]:
  """Canvas coordinates of `points` (east/north metres around their middle, scaled to fit
  MAP_SIZE with a margin) and the map's width in metres."""
  lats = [p.lat for _, p in points]
  lons = [p.lon for _, p in points]
  lat0, lon0 = (min(lats) + max(lats)) / 2, (min(lons) + max(lons)) / 2
  metre = 6_371_008.8 * math.pi / 180
  xy = [
    ((p.lon - lon0) * metre * math.cos(math.radians(lat0)), (p.lat - lat0) * metre)
    for _, p in points
  ]
  span_x = max(x for x, _ in xy) - min(x for x, _ in xy)
  span_y = max(y for _, y in xy) - min(y for _, y in xy)
  width, height = MAP_SIZE
  scale = min((width - 40) / max(span_x, 1e-6), (height - 40) / max(span_y, 1e-6))
  scale = min(scale, 1e4)  # a single point, or photos a few cm apart: no infinite zoom
  cx = (max(x for x, _ in xy) + min(x for x, _ in xy)) / 2
  cy = (max(y for _, y in xy) + min(y for _, y in xy)) / 2
  canvas = [(width / 2 + (x - cx) * scale, height / 2 - (y - cy) * scale) for x, y in xy]
  return canvas, width / scale


def _cell(value: Any) -> str:
  if isinstance(value, float):
    return f'{value:,.4g}'
  return html.escape(str(value))


def write_page(
  out,
  rows: Sequence[Mapping[str, Any]],
  worst: Mapping[str, str],
  located: gps.Located,
  table: Sequence[Mapping[str, Any]],
  lines: Sequence[str],
  *,
  title: str = 'crackjax-survey',
) -> str:
  """survey.html's text (the caller writes it whole into `out`).

  Args:
    out: the survey's folder (the page's links are relative to it).
    rows: measurements.csv's rows.
    worst: each photo's worst severity (sections.WORST).
    located: the photos' positions.
    table: sections.csv's rows.
    lines: what the command said about the input (shown under the summary).
    title: the page's title.
  """
  del out
  placed = [
    (r['name'], located.positions[r['name']]) for r in rows if located.positions.get(r['name'])
  ]
  order = list(sections.WORST)
  counts = {w: sum(worst[r['name']] == w for r in rows) for w in order}
  summary = (
    f'{len(rows)} photo(s), {len(placed)} with a position, {len(rows) - len(placed)} without; '
    + '; '.join(f'worst {w}: {n}' for w, n in counts.items() if n)
  )
  if placed:
    xy, span = _projected(placed)
    names = [n for n, _ in placed]
    data = {
      'points': [
        [round(x, 1), round(y, 1), order.index(worst[n]), i]
        for i, ((x, y), n) in enumerate(zip(xy, names, strict=True))
      ],
      'names': names,
      'links': [urllib.parse.quote(f'overlays/{n}.jpg') for n in names],
      'worst': order,
      'colours': [COLOURS[w] for w in order],
    }
    text = outputs.dumps(data, ensure_ascii=True).replace('</', '<\\/')
    legend = ''.join(
      f'<span style="color:{COLOURS[w]}">&#9679; {w} ({counts[w]})</span>' for w in order
    )
    the_map = (
      f'<canvas id="map" width="{MAP_SIZE[0]}" height="{MAP_SIZE[1]}"></canvas>'
      f'<div class="legend">{legend} — the map is {span:,.0f} m across; north is up</div>'
      '<p>clicked: <a id="picked" href="#">(click a dot)</a></p>'
      f'<script type="application/json" id="points">{text}</script><script>{_SCRIPT}</script>'
    )
  else:
    the_map = '<p>no photo has a position: no map.</p>'
  fields = [f for f in PAGE_COLUMNS if table and f in table[0]]
  section_rows = ''.join(
    '<tr>' + ''.join(f'<td class="n">{_cell(r[f])}</td>' for f in fields) + '</tr>' for r in table
  )
  head = ''.join(f'<th>{html.escape(f)}</th>' for f in fields)
  missing = ''.join(
    f'<li>{html.escape(n)}: {html.escape(located.why_not.get(n, ""))}</li>'
    for n in (r['name'] for r in rows)
    if located.positions.get(n) is None
  )
  notes = ''.join(f'<li>{html.escape(line)}</li>' for line in lines)
  return (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
    f'<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>'
    f'<h1>{html.escape(title)}</h1><p class="summary">{html.escape(summary)}. The photos\' '
    'cards: <a href="index.html">index.html</a>; per section: sections.csv; per photo: '
    'survey.geojson.</p>'
    + (f'<ul class="notes">{notes}</ul>' if notes else '')
    + f'<h2>Map</h2>{the_map}<h2>Sections</h2><table><tr>{head}</tr>{section_rows}</table>'
    + (f'<h2>Photos without a position</h2><ul>{missing}</ul>' if missing else '')
    + '</body></html>\n'
  )
