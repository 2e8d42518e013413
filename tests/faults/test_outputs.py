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
import csv
import json
import math
import shutil
import subprocess
import sys
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax.deploy import export, export_command, html_report, predict_command
from crackjax.experiment import restored
from crackjax.experiment.build import build
from crackjax.paper import records, report, report_stats
from crackjax.runs import identity, outputs
from crackjax.trainer import evaluate_command, scoring

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / 'results' / 'cpu_scale_table1.json'
HOSTILE_NAMES = ('<img src=x onerror=alert(1)>', 'a"b', '#1', '50%', '?', "it's & <b>")


def one_line_exit(main, argv) -> str:
  """The message `main(argv)` exits with, checked to be one line (exit status 1)."""
  with pytest.raises(SystemExit) as e:
    main(argv)
  message = e.value.code
  # sys.exit(str) prints the string and exits 1; an int (or None) would be another status.
  assert isinstance(message, str) and '\n' not in message, message
  return message


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


def tree(folder: Path) -> dict[str, bytes]:
  """Every file under `folder` (links not followed) and its bytes: what must stay as it is."""
  return {
    str(p.relative_to(folder)): p.read_bytes()
    for p in sorted(folder.rglob('*'))
    if p.is_file() and not p.is_symlink()
  }


# ------------------------------------------------------------------------------ strict JSON


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
  rows = report_stats.row_results(records.load([str(tmp_path / 'new.json')]), 'strict')
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
  ('crackjax/trainer/eval_records.py', 'data_key'): 'a comparison key',
  (
    'crackjax/experiment/build.py',
    'eval_plan_of',
  ): 'the data folders as plain data, a comparison key',
  ('crackjax/trainer/eval_records.py', 'other_results_dir'): 'a hash of a key',
  ('crackjax/paper/records.py', '_check_keys'): 'a value in a message',
  ('crackjax/models/model_file.py', 'content_sha256'): 'bytes hashed, pinned to json defaults',
  ('crackjax/paper/records.py', '_check_export_run'): 'a value in a message',
  ('crackjax/paper/report_tables.py', '_describe_runs'): 'a set key',
  ('crackjax/paper/jobs.py', 'prepare'): 'a cache key',
  # json.loads'd back at once; NaN kept as NaN, so the group is rebuilt exactly.
  ('crackjax/models/model_schema.py', 'problems'): 'a cache key, the model group exactly',
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


# --------------------------------------------------------------- links and manifests, pure


def test_a_link_below_the_output_folder_is_refused_before_anything(tmp_path):
  out, elsewhere = tmp_path / 'out', tmp_path / 'elsewhere'
  out.mkdir()
  elsewhere.mkdir()
  (out / 'probs').symlink_to(elsewhere)
  with pytest.raises(outputs.UnsafeOutputError) as e:
    outputs.check_inside(out, [out / 'masks' / 'a.png', out / 'probs' / 'sub' / 'a.png'])
  assert str(e.value) == (
    f'{out}/probs is a symbolic link (to {elsewhere}); --out is written only inside itself, '
    'never through a link: remove the link or choose another --out.'
  )
  # A dangling link counts (writing through it would create its target).
  (out / 'index.html').symlink_to(elsewhere / 'made.html')
  with pytest.raises(outputs.UnsafeOutputError, match='index.html is a symbolic link'):
    outputs.check_inside(out, [out / 'index.html'])
  # A path that climbs out by itself is refused too; the folder itself may be a link.
  with pytest.raises(outputs.UnsafeOutputError, match=f'resolves to {elsewhere}/x, outside'):
    outputs.check_inside(out, [out / '..' / 'elsewhere' / 'x'])
  (tmp_path / 'out_link').symlink_to(out)
  outputs.check_inside(tmp_path / 'out_link', [tmp_path / 'out_link' / 'masks' / 'a.png'])
  assert not any(elsewhere.iterdir())


def test_own_unchanged_outputs_are_told_from_a_users_files(tmp_path):
  (tmp_path / 'report.md').write_text('mine')
  assert outputs.foreign_files(tmp_path, ['report.md', 'report.csv']) == ['report.md']
  outputs.record_outputs(tmp_path, ['report.md'], 'prog')
  assert outputs.foreign_files(tmp_path, ['report.md']) == []
  (tmp_path / 'report.md').write_text('mine, edited')  # changed since: the user's again
  assert outputs.foreign_files(tmp_path, ['report.md']) == ['report.md']
  assert outputs.replace_advice('prog', tmp_path, ['report.md']) == (
    f'prog: --out={tmp_path} holds report.md, which prog did not write there (or which changed '
    'since); pass --overwrite to replace it, or choose another --out.'
  )


def test_linked_input_folders_are_followed_and_loops_named(tmp_path):
  photos, other = tmp_path / 'photos', tmp_path / 'other'
  (photos / 'sub').mkdir(parents=True)
  other.mkdir()
  for path in (photos / 'a.png', photos / 'sub' / 'c.png', other / 'b.png'):
    PIL.Image.fromarray(photo()).save(path)
  (photos / 'linked').symlink_to(other)  # followed: its photos are predicted
  (photos / 'loop').symlink_to(photos)  # a loop: skipped, said
  (photos / 'again').symlink_to(photos / 'sub')  # a folder searched already: said
  (photos / 'gone.png').symlink_to(tmp_path / 'nowhere.png')  # broken: said
  inputs, problems = predict_command.find_inputs([str(photos)])
  assert [i.relative.as_posix() for i in inputs] == ['a.png', 'linked/b.png', 'sub/c.png']
  assert problems == [
    f'{photos}: skipped the link again -> {photos}/sub: that folder is searched already (a '
    'loop, or a folder inside this one)',
    f'{photos}: skipped the link loop -> {photos}: that folder is searched already (a loop, or '
    'a folder inside this one)',
    f'{photos}: skipped 1 broken link(s) (gone.png)',
  ]


# ------------------------------------------------------------------------------------- HTML


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


# ----------------------------------------------------------------- the commands (slow tier)


@pytest.mark.slow
def test_report_replaces_a_users_report_only_when_asked(tmp_path):
  out = tmp_path / 'report'
  out.mkdir()
  (out / 'report.md').write_text('my own notes\n')
  argv = [str(COMMITTED), f'--out={out}']
  assert one_line_exit(report.main, argv) == (
    f'python -m crackjax.paper.report: --out={out} holds report.md, which python -m '
    'crackjax.paper.report did not write there (or which changed since); pass --overwrite to '
    'replace it, or choose another --out.'
  )
  assert tree(out) == {'report.md': b'my own notes\n'}  # nothing written
  assert report.main([*argv, '--overwrite']) == 0
  assert (out / 'report.md').read_text().startswith('# Reproduction of Tables I-IV')
  # Its own outputs, unchanged, it replaces without a word: a rerun needs no flag ...
  assert report.main(argv) == 0
  # ... but once edited, report.md is the user's again.
  (out / 'report.md').write_text((out / 'report.md').read_text() + '\nmy remark\n')
  edited = tree(out)
  assert 'holds report.md, which' in one_line_exit(report.main, argv)
  assert tree(out) == edited
  # A link among its outputs is refused, even with --overwrite; its target stays as it was.
  mine = tmp_path / 'mine.csv'
  mine.write_text('my,table\n')
  (out / 'report.csv').unlink()
  (out / 'report.csv').symlink_to(mine)
  assert one_line_exit(report.main, [*argv, '--overwrite']) == (
    f'python -m crackjax.paper.report: {out}/report.csv is a symbolic link (to {mine}); --out '
    'is written only inside itself, never through a link: remove the link or choose another '
    '--out.'
  )
  assert mine.read_text() == 'my,table\n'


@pytest.mark.slow
def test_report_refusal_is_one_line_and_exit_status_1(tmp_path):
  # The same refusal from the command line: one line on stderr, status 1, the file kept.
  out = tmp_path / 'report'
  out.mkdir()
  (out / 'report.csv').write_text('mine\n')
  proc = subprocess.run(
    [sys.executable, '-m', 'crackjax.paper.report', str(COMMITTED), f'--out={out}'],
    capture_output=True,
    text=True,
    cwd=REPO,
  )
  assert proc.returncode == 1 and proc.stdout == ''
  assert proc.stderr.splitlines() == [
    f'python -m crackjax.paper.report: --out={out} holds report.csv, which python -m '
    'crackjax.paper.report did not write there (or which changed since); pass --overwrite to '
    'replace it, or choose another --out.'
  ]
  assert tree(out) == {'report.csv': b'mine\n'}


@pytest.fixture
def planted(tmp_path):
  """An earlier prediction's table (photos 'road' and 'old') in OUT, whose probs/ is a link
  to a folder of the user's files elsewhere; one photo, road.png, to predict."""
  photos, out, elsewhere = tmp_path / 'photos', tmp_path / 'out', tmp_path / 'elsewhere'
  for folder in (photos, out, elsewhere):
    folder.mkdir()
  PIL.Image.fromarray(photo()).save(photos / 'road.png')
  with (out / 'measurements.csv').open('w', newline='') as f:
    csv.writer(f).writerows([['name'], ['road'], ['old']])
  for name in ('road.png', 'old.png', 'keep.txt'):
    (elsewhere / name).write_text(f'the user own {name}')
  (out / 'probs').symlink_to(elsewhere)
  return photos, out, elsewhere


@pytest.mark.slow
def test_predict_never_writes_or_removes_through_a_link_in_out(smoke_run, planted):
  # Was: --overwrite removed elsewhere/old.png (the earlier prediction's map of 'old') and
  # wrote elsewhere/road.png.
  photos, out, elsewhere = planted
  before, inside = tree(elsewhere), tree(out)
  argv = [f'--workdir={smoke_run}', f'--out={out}', '--notune_malloc', '--overwrite', str(photos)]
  assert one_line_exit(predict_command.main, argv) == (
    f'crackjax-predict: {out}/probs is a symbolic link (to {elsewhere}); --out is written only '
    'inside itself, never through a link: remove the link or choose another --out.'
  )
  assert tree(elsewhere) == before and tree(out) == inside
  # A linked file is refused as well (here the mask this prediction would write).
  (out / 'probs').unlink()
  (out / 'masks').mkdir()
  (out / 'masks' / 'road.png').symlink_to(elsewhere / 'road.png')
  assert one_line_exit(predict_command.main, argv) == (
    f'crackjax-predict: {out}/masks/road.png is a symbolic link (to {elsewhere}/road.png); '
    '--out is written only inside itself, never through a link: remove the link or choose '
    'another --out.'
  )
  assert tree(elsewhere) == before


@pytest.mark.slow
def test_predict_keeps_a_users_page_in_out(smoke_run, tmp_path):
  # Was: only measurements.csv was looked for, so a user's own index.html went.
  out = tmp_path / 'site'
  out.mkdir()
  (out / 'index.html').write_text('<p>my site</p>')
  PIL.Image.fromarray(photo()).save(tmp_path / 'road.png')
  argv = [f'--workdir={smoke_run}', f'--out={out}', '--notune_malloc', str(tmp_path / 'road.png')]
  assert one_line_exit(predict_command.main, argv) == (
    f'crackjax-predict: {out}/index.html exists; pass --overwrite or choose another --out.'
  )
  assert tree(out) == {'index.html': b'<p>my site</p>'}


@pytest.mark.slow
def test_predict_follows_linked_folders_and_names_what_it_skips(smoke_run, tmp_path, capsys):
  photos, other, out = tmp_path / 'photos', tmp_path / 'other', tmp_path / 'out'
  photos.mkdir()
  other.mkdir()
  PIL.Image.fromarray(photo()).save(photos / 'a.png')
  PIL.Image.fromarray(photo()).save(other / 'b.png')
  (photos / 'linked').symlink_to(other)
  (photos / 'loop').symlink_to(photos)
  argv = [f'--workdir={smoke_run}', f'--out={out}', '--notune_malloc', str(photos)]
  assert predict_command.main(argv) == 0
  err = capsys.readouterr().err
  names = sorted(r['name'] for r in csv.DictReader((out / 'measurements.csv').open()))
  assert names == ['a', 'linked/b'] and (out / 'probs' / 'linked' / 'b.png').is_file()
  assert (
    f'crackjax-predict: {photos}: skipped the link loop -> {photos}: that folder is searched '
    'already (a loop, or a folder inside this one)'
  ) in err.splitlines()
  assert tree(other).keys() == {'b.png'}  # the linked folder is read, never written


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
def test_export_never_writes_through_a_link(smoke_run, tmp_path):
  elsewhere = tmp_path / 'mine.bin'
  elsewhere.write_bytes(b'the user own file')
  out = tmp_path / 'unet.jaxexport'
  out.symlink_to(elsewhere)
  argv = [f'--workdir={smoke_run}', f'--out={out}', '--overwrite']
  assert one_line_exit(export_command.main, argv) == (
    f'crackjax-export: {out} is a symbolic link (to {elsewhere}); the export is written only '
    'as a file of its own, never through a link: remove the link or name another --out (out=).'
  )
  assert elsewhere.read_bytes() == b'the user own file'
  assert not export.sidecar_path(out).exists()


@pytest.mark.slow
def test_evaluate_keeps_a_users_table_in_out(smoke_run, tmp_path):
  out = tmp_path / 'tables'
  out.mkdir()
  (out / 'cross_dataset.md').write_text('my table\n')
  argv = [
    f'--workdir={smoke_run}',
    '--data=test',
    '--data=crackforest:test',
    f'--out={out}',
    '--workers=1',
  ]
  assert one_line_exit(evaluate_command.main, argv) == (
    f'crackjax-evaluate: --out={out} holds cross_dataset.md, which crackjax-evaluate did not '
    'write there (or which changed since); pass --overwrite to replace it, or choose another '
    '--out.'
  )
  assert tree(out) == {'cross_dataset.md': b'my table\n'}
  (out / 'cross_dataset.md').unlink()
  (out / 'cross_dataset.csv').symlink_to(tmp_path / 'elsewhere.csv')
  assert 'cross_dataset.csv is a symbolic link' in one_line_exit(evaluate_command.main, argv)
  assert not (tmp_path / 'elsewhere.csv').exists()


@pytest.mark.slow
def test_an_evaluation_without_training_writes_strict_json(smoke_run, tmp_path):
  # --mode=eval, or a finished run relaunched: no training time, written null (was NaN).
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  scoring.evaluate_checkpoint(build(restored.read_config(run)), run)
  assert strict_json((run / 'eval.json').read_text())['train_seconds'] is None
  # Every JSON file of the run, and every line of metrics.jsonl, is strict JSON.
  for path in run.glob('*.json'):
    strict_json(path.read_text())
  for line in (run / 'metrics.jsonl').read_text().splitlines():
    strict_json(line)
