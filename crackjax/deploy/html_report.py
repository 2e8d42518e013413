"""`index.html`: one self-contained page over a crackjax-predict output folder (a survey's
photos on pages of `PAGE_SIZE` beside it, `write_index`).

A summary (photos, total crack length, cracks by type, the worst severity), then one card per
photo: its overlay as an embedded thumbnail (a click opens the full-size overlays/<name>.jpg),
its numbers (crack ratio, length, widths, cracks) and its cracks by type and severity; a photo
that is not a road photo (measurements.csv's `not_road`: almost all crack, or almost all one
value) says so instead, unmeasured, and sorts last. The cards sort by crack ratio, length or
maximum width. No server, network, external script, style
sheet or font: the thumbnails are data URIs and the few lines of sorting script are inline.
Every name and title is HTML-escaped and every link percent-encoded, so a photo named
``<img src=x onerror=alert(1)>.png``, ``#1.png`` or ``50%.png`` shows its name as it is and
links to its own overlay.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image

from crackjax.deploy import measure, measure_summary

THUMBNAIL_SIDE = 320
#: Photos a page holds; more are paged (`write_index`): index.html, then pages/<k>.html.
PAGE_SIZE = 500
PAGES_DIR = 'pages'
#: The photos of most crack length index.html names when paged.
LONGEST = 50
SORT_KEYS = (('ratio', 'crack ratio'), ('length', 'length'), ('width', 'maximum width'))
_SEVERITIES = ('low', 'moderate', 'high')

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;background:#f6f6f4;color:#222}
h1{font-size:1.4em;margin:0 0 .3em}
.summary{margin:.5em 0 1em;line-height:1.5}
.controls button{margin-right:.4em;padding:.3em .8em;border:1px solid #999;border-radius:4px;
background:#fff;cursor:pointer}
.controls button.active{background:#333;color:#fff}
.cards{display:flex;flex-wrap:wrap;gap:1em;margin-top:1em}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.6em;width:340px}
.card img{max-width:100%;display:block;border-radius:3px}
.card h2{font-size:1em;margin:.4em 0;word-break:break-all}
.card table{font-size:.85em;border-collapse:collapse;width:100%}
.card td{padding:1px 4px}
.card td.n{text-align:right}
.sev-high{color:#b00;font-weight:bold}.sev-moderate{color:#c60}.sev-low{color:#060}
.not-road{color:#b00;font-weight:bold}
"""

_SCRIPT = """
function sortCards(key){
  var box=document.getElementById('cards');
  var cards=Array.prototype.slice.call(box.children);
  cards.sort(function(a,b){return parseFloat(b.dataset[key])-parseFloat(a.dataset[key]);});
  cards.forEach(function(c){box.appendChild(c);});
  document.querySelectorAll('.controls button').forEach(function(b){
    b.classList.toggle('active',b.dataset.key===key);});
}
document.querySelectorAll('.controls button').forEach(function(b){
  b.addEventListener('click',function(){sortCards(b.dataset.key);});});
sortCards('ratio');
"""


def thumbnail_uri(image: np.ndarray, side: int = THUMBNAIL_SIDE) -> str:
  """A JPEG data URI of `image` (H x W x 3 uint8) shrunk to at most `side` pixels a side."""
  thumb = PIL.Image.fromarray(image)
  thumb.thumbnail((side, side))
  buffer = io.BytesIO()
  thumb.save(buffer, format='JPEG', quality=80)
  return 'data:image/jpeg;base64,' + base64.b64encode(buffer.getvalue()).decode('ascii')


def overlay_link(name: str) -> str:
  """The relative link to output `name`'s overlay, percent-encoded (`urllib.parse.quote`, '/'
  kept) so that any name a file system allows links to its own file: '#1' is not a fragment,
  '?' not a query and '50%' not an escape. Escape it again (`html.escape`) inside HTML."""
  return urllib.parse.quote(f'overlays/{name}.jpg')


def _number(value: Any, digits: int = 1, unit: str = '') -> str:
  if value in (None, ''):
    return '–'
  return f'{float(value):,.{digits}f}{unit}'


def _worst(severities: Sequence[str | None]) -> str | None:
  rated = [s for s in severities if s]
  return max(rated, key=_SEVERITIES.index) if rated else None


def _sort_value(value: Any) -> float:
  """A card's sort key: -1 for a figure not measured (a photo not of a road sorts last)."""
  return -1.0 if value in (None, '') else float(value)


def _card(
  row: Mapping[str, Any], cracks: Sequence[Mapping[str, Any]], thumb: str, anchor: str = ''
) -> str:
  """One photo's card; `anchor`: its id on a page of many (paged mode, links from index.html
  to it, its overlay one folder up)."""
  name = html.escape(str(row['name']))
  not_road = row.get('not_road') or ''
  mm = row.get('length_mm') not in (None, '')
  by_type = {t: [c for c in cracks if c['type'] == t] for t in measure.CRACK_TYPES}
  lines = []
  for kind, found in by_type.items():
    if not found:
      continue
    severities = {s: sum(c['severity'] == s for c in found) for s in _SEVERITIES}
    rated = ', '.join(f'<span class="sev-{s}">{n} {s}</span>' for s, n in severities.items() if n)
    rated = f'<td>{rated}</td>' if rated else ''  # no column without --mm_per_pixel
    lines.append(f'<tr><td>{kind}</td><td class="n">{len(found)}</td>{rated}</tr>')
  ratio = row.get('crack_ratio')
  numbers = [
    ('crack ratio', _number(None if ratio in (None, '') else 100 * float(ratio), 2, ' %')),
    (
      'length',
      _number(row['length_px'], 0, ' px')
      + (f' ({_number(row["length_mm"], 0, " mm")})' if mm else ''),
    ),
    (
      'max width',
      _number(row['max_width_px'], 1, ' px')
      + (f' ({_number(row["max_width_mm"], 1, " mm")})' if mm else ''),
    ),
    ('cracks', str(len(cracks))),
  ]
  table = ''.join(f'<tr><td>{k}</td><td class="n">{v}</td></tr>' for k, v in numbers)
  worst = _worst([c['severity'] for c in cracks])
  if not_road:
    found = f'<p class="not-road">{html.escape(str(not_road))}; not measured</p>'
  elif lines:
    found = f'<table>{"".join(lines)}</table>'
  else:
    found = '<p>no crack of the minimum length</p>'
  keys = {
    k: _sort_value(row.get(f)) for k, f in (('ratio', 'crack_ratio'), ('length', 'length_px'))
  }
  keys['width'] = _sort_value(row.get('max_width_px'))
  own = f' id="{anchor}"' if anchor else ''
  up = '../' if anchor else ''  # a page of pages/: the overlays are one folder up
  return (
    f'<div class="card"{own} data-ratio="{keys["ratio"]:.8f}" '
    f'data-length="{keys["length"]:.3f}" data-width="{keys["width"]:.3f}">'
    f'<a href="{up}{html.escape(overlay_link(str(row["name"])))}">'
    f'<img src="{html.escape(thumb)}" alt="overlay of {name}"></a>'
    f'<h2>{name}</h2><table>{table}</table>'
    + found
    + (f'<p>worst: <span class="sev-{worst}">{worst}</span></p>' if worst else '')
    + '</div>'
  )


def write_index(
  out: str | Path,
  rows: Sequence[Mapping[str, Any]],
  cracks: Sequence[Mapping[str, Any]],
  thumbnails: Mapping[str, str] | Callable[[str], str],
  *,
  title: str = 'crackjax-predict',
  page_size: int = PAGE_SIZE,
) -> Path:
  """Writes ``out/index.html`` from measurements.csv's `rows`, cracks.csv's `cracks` and a
  thumbnail data URI per photo name (`thumbnail_uri`; a mapping, or a function of the name
  called once a photo as its page is written); returns its path.

  Up to `page_size` photos: one page, every card on it. More (a survey): index.html holds the
  summary, the photos of the longest cracks and the list of pages, and the cards are on
  ``out/pages/<k>.html``, `page_size` a page in the table's order, each page self-contained and
  sortable; no file grows with the survey but index.html's list (a line a page).
  """
  thumb = thumbnails if callable(thumbnails) else thumbnails.__getitem__
  by_photo: dict[str, list[Mapping[str, Any]]] = {}
  for crack in cracks:  # grouped once: a scan of all cracks per photo was quadratic
    by_photo.setdefault(crack['name'], []).append(crack)
  head = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
    f'<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>'
    f'<h1>{html.escape(title)}</h1>'
  )
  buttons = ''.join(
    f'<button type="button" data-key="{key}">{label}</button>' for key, label in SORT_KEYS
  )
  controls = f'<div class="controls">sort by: {buttons}</div>'
  folder = Path(out) / PAGES_DIR
  if len(rows) <= page_size:
    cards = ''.join(_card(row, by_photo.get(row['name'], []), thumb(row['name'])) for row in rows)
    _write_whole(
      Path(out) / 'index.html',
      f'{head}{_summary(rows, cracks)}{controls}<div class="cards" id="cards">{cards}</div>'
      f'<script>{_SCRIPT}</script></body></html>\n',
    )
    _remove_pages(folder, 0)
    return Path(out) / 'index.html'
  starts = range(0, len(rows), page_size)
  for k, start in enumerate(starts, start=1):
    part = rows[start : start + page_size]
    cards = ''.join(
      _card(row, by_photo.get(row['name'], []), thumb(row['name']), f'p{start + i}')
      for i, row in enumerate(part)
    )
    nav = _nav(k, len(starts))
    _write_whole(
      folder / f'{k:04d}.html',
      f'{head}{nav}<p>photos {start + 1}-{start + len(part)} of {len(rows)}</p>{controls}'
      f'<div class="cards" id="cards">{cards}</div>{nav}<script>{_SCRIPT}</script></body></html>\n',
    )
  _remove_pages(folder, len(starts))
  pages = ''.join(
    f'<li><a href="{PAGES_DIR}/{k:04d}.html">page {k}</a>: '
    f'{html.escape(str(rows[s]["name"]))} … '
    f'{html.escape(str(rows[min(s + page_size, len(rows)) - 1]["name"]))}</li>'
    for k, s in enumerate(starts, start=1)
  )
  _write_whole(
    Path(out) / 'index.html',
    f'{head}{_summary(rows, cracks)}{_longest(rows, by_photo, page_size)}'
    f'<h2>The photos, {page_size} a page ({len(starts)} pages)</h2><ol class="pages">{pages}</ol>'
    '</body></html>\n',
  )
  return Path(out) / 'index.html'


def _summary(rows: Sequence[Mapping[str, Any]], cracks: Sequence[Mapping[str, Any]]) -> str:
  """The summary line of every photo: photos, total length, cracks by type, worst severity."""
  summary = measure_summary.summarize(rows)
  counts = {t: sum(c['type'] == t for c in cracks) for t in measure.CRACK_TYPES}
  kinds = ', '.join(f'{n} {t}' for t, n in counts.items() if n) or 'none'
  worst = _worst([c['severity'] for c in cracks])
  length = _number(summary['length_px'], 0, ' px')
  if summary.get('length_mm') is not None:
    length += f' ({_number(summary["length_mm"] / 1000, 2, " m")})'
  others = summary['not_road']
  not_road = (
    f' (<span class="not-road">{others} not a road photo</span>, not measured)' if others else ''
  )
  return (
    '<div class="summary">'
    f'{summary["images"]} photo(s){not_road}; total crack length {length}; '
    f'{len(cracks)} crack(s): {kinds}; worst severity: '
    + (f'<span class="sev-{worst}">{worst}</span>' if worst else '– (no --mm_per_pixel)')
    + '</div>'
  )


def _longest(
  rows: Sequence[Mapping[str, Any]], by_photo: Mapping[str, Sequence[Mapping]], page_size: int
) -> str:
  """index.html's table of the LONGEST photos of most crack length, each linked to its card."""
  order = sorted(range(len(rows)), key=lambda i: -_sort_value(rows[i].get('length_px')))
  lines = []
  for i in order[:LONGEST]:
    row = rows[i]
    worst = _worst([c['severity'] for c in by_photo.get(row['name'], [])]) or '–'
    link = f'{PAGES_DIR}/{i // page_size + 1:04d}.html#p{i}'
    lines.append(
      f'<tr><td><a href="{link}">{html.escape(str(row["name"]))}</a></td>'
      f'<td class="n">{_number(row.get("length_px"), 0, " px")}</td>'
      f'<td class="n">{_number(row.get("max_width_px"), 1, " px")}</td><td>{worst}</td></tr>'
    )
  return (
    f'<h2>The {min(LONGEST, len(rows))} photos of most crack length</h2><table class="longest">'
    '<tr><th>photo</th><th>length</th><th>max width</th><th>worst</th></tr>'
    f'{"".join(lines)}</table>'
  )


def _nav(k: int, count: int) -> str:
  links = ['<a href="../index.html">index</a>']
  if k > 1:
    links.append(f'<a href="{k - 1:04d}.html">previous</a>')
  if k < count:
    links.append(f'<a href="{k + 1:04d}.html">next</a>')
  return f'<p class="nav">page {k} of {count}: {" · ".join(links)}</p>'


def _remove_pages(folder: Path, keep: int) -> None:
  """Pages of an earlier, longer prediction (<k>.html beyond `keep`): gone, and the folder
  when empty. Nothing else in it is touched."""
  if not folder.is_dir():
    return
  for page in folder.glob('[0-9][0-9][0-9][0-9].html'):
    if int(page.stem) > keep:
      page.unlink()
  with contextlib.suppress(OSError):
    folder.rmdir()


def _write_whole(path: Path, page: str) -> None:
  """`page` as `path`, whole or not at all: a full disk must not leave a page cut short."""
  path.parent.mkdir(parents=True, exist_ok=True)
  partial = path.with_name(path.name + '.partial')
  try:
    partial.write_text(page, encoding='utf-8')
    os.replace(partial, path)
  except OSError as e:
    partial.unlink(missing_ok=True)
    raise OSError(e.errno, e.strerror or str(e), str(path)) from e
