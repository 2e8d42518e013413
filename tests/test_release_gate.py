"""The release gate (crackjax/deploy/release_gate.py, `python -m crackjax.deploy.release gate`):
a general model is released only if its card's LODO mean leads the peer's by the margin (and the
released model's, where that card has one) and it is not worse than the released model or the
peer on any test split, each at its stored threshold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crackjax.deploy import export, release_gate
from crackjax.deploy import release as release_lib
from crackjax.models import model_file

LODO = release_gate.LODO_ROW


def _entry(name: str, f1: dict[str, float], lodo: float | None = None, peer: float | None = None):
  """A registry entry of a general model: strict F1 (fractions) at the stored threshold per split
  and, with `lodo`, its card's LODO mean (%) and the peer's beside it."""
  entry = {
    'name': name,
    'scores_by_set': [{'set': s, 'at_threshold': {'strict': v}} for s, v in f1.items()],
  }
  if lodo is not None:
    entry['lodo'] = {'row': 'mine (long)', 'mean': {'strict': {'stored': lodo, 'ods': lodo}}}
    if peer is not None:
      entry['lodo']['peer'] = {'row': 'peer', 'mean': {'strict': {'stored': peer, 'ods': peer}}}
  return entry


def _peer_json(path: Path, f1: dict[str, float], images: dict[str, tuple[int, int]] | None = None):
  """A bench/peer_mtscrack.py JSON of MTSCrack's F1 of its mask (fractions) per set."""
  images = images or {}
  sets = {
    s: {
      'images': images.get(s, (5, 5))[0],
      'images_in_set': images.get(s, (5, 5))[1],
      'models': {'MTSCrack': {'protocols': {'strict': {'f1_model': v, 'ods_f1': v}}}},
    }
    for s, v in f1.items()
  }
  path.write_text(json.dumps({'command': 'bench/peer_mtscrack.py', 'sets': sets}))
  return path


def _by_what(rows):
  return {r.what: r for r in rows}


def test_peer_scores_name_splits_as_the_registry_and_take_aliases(tmp_path):
  first = _peer_json(tmp_path / 'a.json', {'a:test': 0.5, 'Photos of B': 0.4})
  second = _peer_json(
    tmp_path / 'b.json', {'a:test': 0.9, 'b:test': 0.3}, images={'b:test': (300, 4128)}
  )
  scores = release_gate.peer_scores([first, second], aliases={'Photos of B': 'b test (photos)'})
  assert {k: [round(r['f1'], 6) for r in v] for k, v in scores.items()} == {
    'a test': [50.0, 90.0],  # both files', in their order
    'b test (photos)': [40.0],
    'b test': [30.0],
  }
  assert scores['b test'] == [{'f1': 30.0, 'images': 300, 'of': 4128, 'file': str(second)}]
  with pytest.raises(ValueError, match=r"b.json: set 'a:test' has no model 'HED'"):
    release_gate.peer_scores([second], model='HED')
  (tmp_path / 'bad.json').write_text('{"rows": {}}')
  with pytest.raises(ValueError, match=r'bad.json: not a bench/peer_mtscrack.py JSON'):
    release_gate.peer_scores([tmp_path / 'bad.json'])


def test_a_model_ahead_everywhere_passes_and_each_shortfall_fails_its_row():
  peer = {
    'a test': [{'f1': 40.0, 'images': 5, 'of': 5}],
    'b test': [{'f1': 60.0, 'images': 300, 'of': 4128}],  # the cropped copy takes it
  }
  old = _entry('m', {'a test': 0.50, 'b test (crops)': 0.70}, lodo=44.0, peer=45.0)
  new = _entry('m', {'a test': 0.55, 'b test (crops)': 0.70}, lodo=51.0, peer=45.0)
  rows = release_gate.checks(new, old, peer)
  assert all(r.ok for r in rows)
  got = {r.what: (r.new, r.old, r.peer) for r in rows}
  assert got[LODO] == (51.0, 44.0, 50.0)  # the peer's mean plus the 5 points asked
  assert got['a test'] == pytest.approx((55.0, 50.0, 40.0))
  assert _by_what(rows)['b test (crops)'].note == 'peer on 300 of the 4128 images'
  # Equal to the released model is not worse; one point behind it is.
  worse = _entry('m', {'a test': 0.49, 'b test (crops)': 0.70}, lodo=51.0, peer=45.0)
  row = _by_what(release_gate.checks(worse, old, peer))['a test']
  assert not row.ok and row.why == '1.0 behind the released model'
  # Behind the peer on a split, and a lead of 4.9 points where 5 are asked.
  short = _entry('m', {'a test': 0.55, 'b test (crops)': 0.59}, lodo=49.9, peer=45.0)
  rows = _by_what(release_gate.checks(short, old, peer))
  assert rows['b test (crops)'].why == '11.0 behind the released model; 1.0 behind the peer'
  assert rows[LODO].why == '+4.9 against the peer, +5 asked'
  assert [r.what for r in release_gate.checks(short, old, peer) if not r.ok] == [
    LODO,
    'b test (crops)',
  ]


def test_lodo_ahead_of_the_released_model_and_every_old_split_scored_again():
  old = _entry('m', {'a test': 0.5, 'c test': 0.2}, lodo=52.0, peer=45.0)
  new = _entry('m', {'a test': 0.6}, lodo=51.0, peer=45.0)
  rows = _by_what(release_gate.checks(new, old, {}))
  assert rows[LODO].why == 'not ahead of the released model (51.0 against 52.0)'
  assert rows['c test'].new is None and not rows['c test'].ok
  assert rows['c test'].why == 'the new file is not scored on it (the released model is)'
  assert rows['a test'].ok and rows['a test'].peer is None  # no peer score: not compared


def test_without_a_lodo_figure_or_its_peer_the_release_is_refused():
  first = _entry('m', {'a test': 0.9})  # nothing released under the name yet: no old row
  rows = release_gate.checks(first, None, {})
  assert [r.ok for r in rows] == [False, True]
  assert rows[0].why == 'its card has no LODO figure (python -m crackjax.deploy.release lodo)'
  alone = _entry('m', {'a test': 0.9}, lodo=60.0)
  row = release_gate.checks(alone, None, {})[0]
  assert row.why == "its card's LODO figure has no peer beside it (release lodo --peer)"
  # The released card without a LODO figure is said, not held against the new one.
  row = release_gate.checks(_entry('m', {'a test': 0.9}, 60.0, 50.0), first, {})[0]
  assert row.ok and row.note == 'the released card has no LODO figure'
  with pytest.raises(ValueError, match='the gate is for a general model'):
    release_gate.checks({'name': 'one', 'scores': {}}, None, {})


def _scored_file(smoke_run: Path, path: Path, f1: dict[str, float], lodo: bool = True) -> Path:
  """The smoke run's model file, its card naming the sets of `f1` and scored on their test
  splits at its stored threshold (strict F1 `f1`), with (`lodo`) a LODO figure 8 points ahead
  of the peer's."""
  export.export_model_file(smoke_run, path, name='m')
  loaded = model_file.read(path)
  scores = [
    {
      'dataset': s,
      'split': 'test',
      'num_images': 5,
      'protocols': {
        'strict': {'ods': {'f1': v}, 'ois': {'f1': v}, 'ap': v, 'at_stored_threshold': {'f1': v}}
      },
    }
    for s, v in f1.items()
  ]
  figure = {
    'row': 'mine (long)',
    'sets': {s: {} for s in f1},
    'mean': {'strict': {'stored': 58.0, 'ods': 60.0}},
    'peer': {'row': 'peer', 'mean': {'strict': {'stored': 50.0, 'ods': 50.0}}},
  }
  card = {
    **loaded.card,
    'data': {**loaded.card['data'], 'datasets': [{'name': s} for s in f1]},
    'scores': scores,
    **({'lodo': figure} if lodo else {}),
  }
  meta = {k: v for k, v in loaded.meta.items() if k not in ('format', 'requires')}
  model_file.write(path, params=loaded.params, batch_stats=None, meta={**meta, 'card': card})
  return path


def test_the_command_allows_or_refuses_from_the_files(smoke_run, tmp_path, monkeypatch, capsys):
  from crackjax.models import hub

  monkeypatch.setattr(hub, 'RELEASED_DIR', tmp_path / 'released')
  monkeypatch.setattr(hub, 'REGISTRY', tmp_path / 'released' / 'registry.json')
  old = _scored_file(smoke_run, tmp_path / 'old.safetensors', {'a': 0.60, 'b': 0.70}, lodo=False)
  release_lib.register(old, 'm', 'test')
  peer = _peer_json(tmp_path / 'peer.json', {'a:test': 0.5, 'B photos': 0.65})
  new = _scored_file(smoke_run, tmp_path / 'new.safetensors', {'a': 0.62, 'b': 0.69})
  out = tmp_path / 'gate.json'
  argv = ['gate', f'--file={new}', '--name=m', f'--peer={peer}', f'--out={out}']
  assert release_lib.main([*argv, '--peer_set=B photos=b test (photos)']) == 1
  printed = capsys.readouterr().out.splitlines()
  assert printed[0] == (
    '| strict F1 (%) at the stored threshold | new.safetensors (new) | m (released) | MTSCrack '
    '| verdict |'
  )
  assert printed[2:5] == [
    '| roads never seen (LODO mean) (the released card has no LODO figure) | 58.0 | – | 55.0 '
    '(+5) | ok |',
    '| a test | 62.0 | 60.0 | 50.0 | ok |',
    '| b test | 69.0 | 70.0 | – | fails: 1.0 behind the released model |',
  ]
  assert printed[-1] == 'Release refused: 1 condition(s) fail (b test).'
  record = json.loads(out.read_text())
  assert [c['ok'] for c in record['checks']] == [True, True, False]
  assert record['against'] == 'm' and record['margin'] == 5.0
  # Released under a new name (a first roads-unet), it is held to the model --against names.
  argv = ['gate', f'--file={new}', '--name=other', '--against=m', f'--peer={peer}', f'--out={out}']
  assert release_lib.main([*argv, '--peer_set=B photos=b test (photos)']) == 1
  assert '| b test | 69.0 | 70.0 | – | fails: 1.0 behind the released model |' in (
    capsys.readouterr().out
  )
  assert json.loads(out.read_text())['against'] == 'm'
  # Level with the released model on b, and 8 points ahead of the peer on roads never seen:
  # allowed at the 5 points asked, refused at 10.
  level = _scored_file(smoke_run, tmp_path / 'level.safetensors', {'a': 0.62, 'b': 0.70})
  assert release_lib.main(['gate', f'--file={level}', '--name=m', f'--peer={peer}']) == 0
  assert capsys.readouterr().out.splitlines()[-1] == 'Release allowed: every condition holds.'
  assert release_lib.main(['gate', f'--file={level}', '--name=m', '--margin=10']) == 1
  assert '| fails: +8.0 against the peer, +10 asked |' in capsys.readouterr().out
  # Bad input: one line, status 2.
  assert release_lib.main(['gate', f'--file={tmp_path / "none.safetensors"}', '--name=m']) == 2
  assert capsys.readouterr().err.startswith('python -m crackjax.deploy.release gate: ')


@pytest.fixture
def released(smoke_run, tmp_path, monkeypatch) -> Path:
  """Model 'm' released (in a registry of this test's own) without a LODO figure, scored 60 / 70
  on 'a test' / 'b test'; returns a new file of the same scores with a LODO figure of 58."""
  from crackjax.models import hub

  monkeypatch.setattr(hub, 'RELEASED_DIR', tmp_path / 'released')
  monkeypatch.setattr(hub, 'REGISTRY', tmp_path / 'released' / 'registry.json')
  old = _scored_file(smoke_run, tmp_path / 'old.safetensors', {'a': 0.6, 'b': 0.7}, lodo=False)
  release_lib.register(old, 'm', 'test')
  return _scored_file(smoke_run, tmp_path / 'new.safetensors', {'a': 0.6, 'b': 0.7})


def test_the_released_recipes_lodo_row_stands_for_a_card_without_one(released, tmp_path, capsys):
  new = released  # LODO 58
  rows = {
    'base (long)': {
      'a': {'strict': {'stored': 55.0, 'ods': 60.0}},
      'b': {'strict': {'stored': 65.0, 'ods': 66.0}},
    },
    'base (short)': {'a': {'strict': {'stored': 50.0, 'ods': 51.0}}},
  }
  table = tmp_path / 'lodo.json'
  table.write_text(json.dumps({'rows': rows}))
  argv = ['gate', f'--file={new}', '--name=m', f'--lodo_table={table}']
  assert release_lib.main([*argv, '--old_row=base (long)']) == 1  # 58 against its mean 60
  assert capsys.readouterr().out.splitlines()[2] == (
    '| roads never seen (LODO mean) (released: base (long) in lodo.json) | 58.0 | 60.0 | 55.0 (+5) '
    '| fails: not ahead of the released model (58.0 against 60.0) |'
  )
  for row, says in [
    ('base (short)', "lodo.json: row 'base (short)' has no fold with b held out."),
    ('nope', "lodo.json: no row 'nope' (its rows: ['base (long)', 'base (short)'])."),
  ]:
    assert release_lib.main([*argv, f'--old_row={row}']) == 2
    assert capsys.readouterr().err.endswith(says + '\n')
  assert release_lib.main(['gate', f'--file={new}', '--name=m', '--old_row=base (long)']) == 2
  says = '--old_row needs --lodo_table, the table holding that row.\n'
  assert capsys.readouterr().err.endswith(says)


def test_a_split_scored_on_another_number_of_images_is_not_compared():
  def entry(n: int, f1: float):
    return {'name': 'm', 'scores_by_set': [
      {'set': 'c test (photos)', 'num_images': n, 'at_threshold': {'strict': f1}}]}  # fmt: skip

  peer = {'c test (photos)': [{'f1': 50.0, 'images': 91, 'of': 91}]}
  row = release_gate.checks(entry(93, 0.9), entry(91, 0.6), peer)[1]
  assert not row.ok
  assert row.why == 'scored on 93 images, the released model on 91: not one set'
  row = release_gate.checks(entry(93, 0.9), None, peer)[1]
  assert row.why == 'scored on 93 images, the peer on a set of 91: not one set'
  assert release_gate.checks(entry(91, 0.9), entry(91, 0.6), peer)[1].ok


def test_the_peer_record_of_the_new_files_set_is_taken():
  new = {'name': 'm', 'scores_by_set': [
    {'set': 'd test (photos)', 'num_images': 227, 'at_threshold': {'strict': 0.75}}]}  # fmt: skip
  peer = {
    'd test (photos)': [
      {'f1': 75.8, 'images': 237, 'of': 237},
      {'f1': 74.0, 'images': 227, 'of': 227},
    ]
  }
  row = release_gate.checks(new, None, peer)[1]
  assert row.ok and row.peer == 74.0  # the 227 photos', not the first file's 237


def test_the_released_file_scored_again_stands_for_its_cards_figure(
  released, smoke_run, tmp_path, capsys
):
  from crackjax.evaluation.result import read_record

  new = released
  # The smoke run's own scoring is of the same parameters and step as its exported file; as
  # crackjax-evaluate --model writes it, with its F1 at the stored threshold ('run').
  data = json.loads((smoke_run / 'eval.json').read_text())
  run = {'threshold': 0.5, 'precision': 0.5, 'recall': 0.7, 'f1': 0.625}
  data['results']['strict']['operating_points'] = {'run': run}
  record = tmp_path / 'again.json'
  record.write_text(json.dumps(data))
  again = read_record(record)
  f1 = 62.5
  argv = ['gate', f'--file={new}', '--name=m', f'--old_score=b test={record}']
  assert release_lib.main(argv) == 1
  row = capsys.readouterr().out.splitlines()[4]
  assert row == (
    f'| b test (the released file scored again on these images) | 70.0 | {f1:.1f} | – | fails: '
    f'scored on 5 images, the released model on {again.num_images}: not one set |'
  )
  other = tmp_path / 'other.json'
  other.write_text(json.dumps({**data, 'step': 3}))
  argv = ['gate', f'--file={new}', '--name=m', f'--old_score=b test={other}']
  assert release_lib.main(argv) == 2
  assert capsys.readouterr().err.endswith(
    f'{other}: not a strict scoring of m ({again.params} parameters, step 6; it '
    f'holds {again.params} at step 3).\n'
  )
  # A scoring without the F1 at the stored threshold (the run's own eval.json): named.
  argv = ['gate', f'--file={new}', '--name=m', f'--old_score=b test={smoke_run / "eval.json"}']
  assert release_lib.main(argv) == 2
  assert capsys.readouterr().err.endswith(
    'has no F1 at the stored threshold (score the file: crackjax-evaluate --model=m).\n'
  )
