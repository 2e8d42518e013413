"""Faults at the outputs (issue 29): a user's files are replaced only with --overwrite, nothing
is written or removed through a link planted in an output folder, linked input folders are
followed or skipped with a word, and every name a file system allows gives valid HTML and
strict JSON.

Each command case asserts the one line it exits with (`sys.exit(message)`: Python prints it to
stderr and exits with status 1; one case runs the command in a subprocess to see exactly
that), and that nothing was lost. The commands run in-process under the slow tier; the pure
parts (JSON, the link and manifest checks, the HTML page, the input walk) are fast.
"""

import ast
import json
import math
import shutil
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax.deploy import html_report, predict_command
from crackjax.deploy import predictor as predict
from crackjax.evaluation import scoring
from crackjax.experiment import build
from crackjax.paper import records, report
from crackjax.runs import identity, outputs

REPO = Path(__file__).resolve().parents[2]


COMMITTED = REPO / 'results' / 'cpu_scale_table1.json'


HOSTILE_NAMES = ('<img src=x onerror=alert(1)>', 'a"b', '#1', '50%', '?', "it's & <b>")


def strict_json(text: str):
  """`text` parsed as strict JSON: NaN / Infinity (Python's extension) are an error."""

  def refuse(name):
    raise ValueError(f'{name} is not JSON')

  return json.loads(text, parse_constant=refuse)


def photo(h: int = 16, w: int = 16) -> np.ndarray:
  rng = np.random.default_rng(0)
  image = rng.integers(150, 230, size=(h, w, 3), dtype=np.uint8)
  image[np.arange(h), np.arange(h) % w] = 30
  return image


def test_dumps_writes_non_finite_numbers_as_null():
  value = {
    'nan': math.nan,
    'inf': [math.inf, -math.inf],
    'numpy': [np.float32('nan'), np.float64(1.5), np.int64(3), np.bool_(True)],
    'array': np.array([1.0, np.nan]),
    'nested': ({'x': float('-inf')},),
  }
  assert strict_json(outputs.dumps(value)) == {
    'nan': None,
    'inf': [None, None],
    'numpy': [None, 1.5, 3, True],
    'array': [1.0, None],
    'nested': [{'x': None}],
  }
  # What JSON cannot hold at all is still an error, never written some other way.
  with pytest.raises(TypeError):
    outputs.dumps({'x': object()})


def test_records_are_strict_json_and_a_null_time_reads_as_unknown(tmp_path, capsys):
  # eval.json and epoch_<NNN>.json of a run evaluated without training (--mode=eval, a
  # finished run relaunched) held "train_seconds": NaN.
  identity.write_json(tmp_path / 'eval.json', {'train_seconds': math.nan, 'eval_seconds': 2.0})
  assert strict_json((tmp_path / 'eval.json').read_text())['train_seconds'] is None
  # Readers take null: the report shows an unknown time, and a run recorded with NaN (before
  # strict JSON) and the same run exported with null are one run, without a note.
  data = json.loads(COMMITTED.read_text())
  data['runs'] = data['runs'][:1]
  old, new = json.loads(json.dumps(data)), json.loads(json.dumps(data))
  old['runs'][0]['epochs'][0]['train_seconds'] = math.nan
  new['runs'][0]['epochs'][0]['train_seconds'] = None
  (tmp_path / 'old.json').write_text(json.dumps(old))
  (tmp_path / 'new.json').write_text(outputs.dumps(new))
  runs = records.load([str(tmp_path / 'old.json'), str(tmp_path / 'new.json')])
  assert len(runs) == 1 and 'note:' not in capsys.readouterr().err
  rows = report.row_results(records.load([str(tmp_path / 'new.json')]), 'strict')
  assert rows and all(math.isnan(t) for r in rows for t in r.values['time_s'])
  records.export(runs, tmp_path / 'again.json')
  strict_json((tmp_path / 'again.json').read_text())


def _json_writes(tree: ast.Module) -> list[tuple[str, int]]:
  """(enclosing function, line) of every json.dump / json.dumps call in a module."""
  found = []

  def visit(node, function):
    for child in ast.iter_child_nodes(node):
      name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
      if (
        isinstance(child, ast.Call)
        and isinstance(child.func, ast.Attribute)
        and child.func.attr in ('dump', 'dumps')
        and isinstance(child.func.value, ast.Name)
        and child.func.value.id == 'json'
      ):
        found.append((function, child.lineno))
      visit(child, name)

  visit(tree, '<module>')
  return found


#: json.dumps calls whose text is never written to a file: keys and messages (NaN there is
#: harmless), and the helper itself. Every other JSON the project writes goes through
#: crackjax.runs.outputs.dumps.
NOT_WRITTEN = {
  ('crackjax/runs/outputs.py', 'dumps'): 'the helper',
  ('crackjax/runs/identity.py', '_as_dict'): 'a config as plain data, read back at once',
  ('crackjax/runs/identity.py', 'differences'): 'values in a message',
  ('crackjax/evaluation/scoring.py', '_data_key'): 'a comparison key',
  ('crackjax/evaluation/scoring.py', 'other_results_dir'): 'a hash of a key',
  ('crackjax/paper/records.py', '_check_keys'): 'a value in a message',
  ('crackjax/paper/records.py', '_check_export_run'): 'a value in a message',
  ('crackjax/paper/report.py', '_describe_runs'): 'a set key',
  ('crackjax/paper/jobs.py', 'prepare'): 'a cache key',
}


def test_every_json_the_project_writes_goes_through_the_strict_helper():
  files = [REPO / 'launch.py', *(REPO / 'crackjax').rglob('*.py'), *(REPO / 'bench').rglob('*.py')]
  raw = []
  for path in files:
    rel = str(path.relative_to(REPO))
    for function, line in _json_writes(ast.parse(path.read_text(), rel)):
      if (rel, function) not in NOT_WRITTEN:
        raw.append(f'{rel}:{line} ({function})')
  assert not raw, f'json.dump(s) outside crackjax.runs.outputs.dumps: {raw}'
  # The check sees a call: one planted in a function is found, by name.
  planted = ast.parse('import json\ndef f(x):\n  open("a", "w").write(json.dumps(x))\n')
  assert _json_writes(planted) == [('f', 3)]


class _Page(HTMLParser):
  """The tags and the text of each tag of a page."""

  def __init__(self):
    super().__init__()
    self.tags, self.texts, self._open = [], {}, []

  def handle_starttag(self, tag, attrs):
    self.tags.append((tag, dict(attrs)))
    self._open.append(tag)

  def handle_endtag(self, tag):
    if self._open:
      self._open.pop()

  def handle_data(self, data):
    if self._open:
      self.texts.setdefault(self._open[-1], []).append(data)


def test_any_name_shows_as_it_is_and_links_to_its_own_file(tmp_path):
  rows = [
    {'name': n, 'crack_ratio': 0.1, 'length_px': 1, 'max_width_px': 1, 'segments': 1}
    for n in HOSTILE_NAMES
  ]
  thumbs = dict.fromkeys(HOSTILE_NAMES, html_report.thumbnail_uri(photo()))
  page = _Page()
  page.feed(html_report.write_index(tmp_path, rows, [], thumbs, title='<b>run</b>').read_text())
  # One image per card and no other tag: no name became markup.
  assert [t for t, _ in page.tags].count('img') == len(HOSTILE_NAMES)
  assert {t for t, _ in page.tags} <= {'html', 'head', 'meta', 'title', 'style', 'body', 'h1'} | {
    'div',
    'button',
    'a',
    'img',
    'h2',
    'table',
    'tr',
    'td',
    'p',
    'script',
  }
  assert page.texts['h2'] == list(HOSTILE_NAMES) and page.texts['h1'] == ['<b>run</b>']
  links = [a['href'] for t, a in page.tags if t == 'a']
  assert [urllib.parse.unquote(h) for h in links] == [f'overlays/{n}.jpg' for n in HOSTILE_NAMES]
  # As a browser reads a relative link: the whole name is the path (no fragment, no query).
  for href, name in zip(links, HOSTILE_NAMES, strict=True):
    parts = urllib.parse.urlsplit(href)
    assert not parts.fragment and not parts.query and not parts.scheme, href
    assert urllib.parse.unquote(parts.path) == f'overlays/{name}.jpg'


@pytest.mark.slow
def test_predict_page_shows_and_links_any_photo_name(smoke_run, tmp_path):
  photos, out = tmp_path / 'photos', tmp_path / 'out'
  photos.mkdir()
  for name in HOSTILE_NAMES:
    PIL.Image.fromarray(photo()).save(photos / f'{name}.png')
  argv = [f'--workdir={smoke_run}', f'--out={out}', '--notune_malloc', str(photos)]
  assert predict_command.main(argv) == 0
  page = _Page()
  page.feed((out / 'index.html').read_text())
  assert sorted(page.texts['h2']) == sorted(HOSTILE_NAMES)
  assert [t for t, _ in page.tags].count('img') == len(HOSTILE_NAMES)
  links = [a['href'] for t, a in page.tags if t == 'a']
  assert all((out / urllib.parse.unquote(urllib.parse.urlsplit(h).path)).is_file() for h in links)
  assert len(links) == len(HOSTILE_NAMES)


@pytest.mark.slow
def test_an_evaluation_without_training_writes_strict_json(smoke_run, tmp_path):
  # --mode=eval, or a finished run relaunched: no training time, written null (was NaN).
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  scoring.evaluate_checkpoint(build(predict.read_config(run)), run)
  assert strict_json((run / 'eval.json').read_text())['train_seconds'] is None
  # Every JSON file of the run, and every line of metrics.jsonl, is strict JSON.
  for path in run.glob('*.json'):
    strict_json(path.read_text())
  for line in (run / 'metrics.jsonl').read_text().splitlines():
    strict_json(line)
