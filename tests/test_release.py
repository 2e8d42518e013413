"""The release helpers (crackjax/deploy/release.py) that scripts/release_cpu.sh and
scripts/release_gpu.sh run: the epoch table and the best step, and `rescore`, which puts a
model file's own scores and this machine's self check into its card."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from crackjax.deploy import export, model_card, self_check
from crackjax.deploy import release as release_lib
from crackjax.deploy.predictor import Predictor
from crackjax.models import model_file
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


def _epoch_record(folder: Path, epoch: int, f1: float, threshold: float) -> None:
  record = fixtures.eval_record(epoch, 300 * epoch, 'train[58:]', {'strict': (f1, threshold)})
  (folder / f'epoch_{epoch:03d}.json').write_text(json.dumps(record))


def test_show_marks_the_best_epoch_and_best_step_prints_its_step(tmp_path, capsys):
  for epoch, f1 in ((1, 0.5), (2, 0.7), (3, 0.7), (4, 0.6)):
    _epoch_record(tmp_path, epoch, f1, 0.9)
  assert release_lib.main(['show', f'--workdir={tmp_path}']) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 4
  # Of two equal scores the earlier epoch wins (the shorter training).
  assert lines[1].endswith('<- best') and 'epoch   2 (step 600)' in lines[1]
  assert not any(line.endswith('<- best') for i, line in enumerate(lines) if i != 1)
  assert release_lib.main(['best-step', f'--workdir={tmp_path}']) == 0
  assert capsys.readouterr().out.strip() == '600'


def test_plateau_waits_for_min_epochs_and_patience(tmp_path, capsys):
  scores = [0.5, 0.6, 0.65, 0.64, 0.66, 0.65, 0.65, 0.64]
  for epoch, f1 in enumerate(scores[:5], start=1):
    _epoch_record(tmp_path, epoch, f1, 0.9)
  # Still rising at epoch 5 (its best): not reached, exit 1.
  argv = ['plateau', f'--workdir={tmp_path}', '--patience=3', '--min_epochs=4']
  assert release_lib.main(argv) == 1
  assert 'plateau not reached (at epoch 8 at the earliest)' in capsys.readouterr().out
  # What to train to next: the best epoch (5) + patience (3), not three more after the last.
  assert release_lib.main([*argv, '--earliest']) == 0
  assert capsys.readouterr().out == '8\n'
  _epoch_record(tmp_path, 6, 0.65, 0.9)
  assert release_lib.main([*argv, '--earliest']) == 0 and capsys.readouterr().out == '8\n'
  assert (
    release_lib.main(['plateau', f'--workdir={tmp_path}', '--min_epochs=20', '--earliest']) == 0
  )
  assert capsys.readouterr().out == '20\n'
  for epoch, f1 in enumerate(scores[5:], start=6):
    _epoch_record(tmp_path, epoch, f1, 0.9)
  # Best 0.66 at epoch 5, three epochs without a rise since: reached.
  assert release_lib.main(argv) == 0
  out = capsys.readouterr().out
  assert 'plateau reached' in out and 'the best 0.6600 at epoch 5, 3 epoch(s) ago' in out
  # Fewer epochs than min_epochs: never reached, however flat.
  assert release_lib.plateau(tmp_path, 3, 20)[0] is False
  assert release_lib.main(['plateau', f'--workdir={tmp_path / "none"}']) == 2


@pytest.fixture
def half(smoke_run, tmp_path) -> Path:
  """The smoke run exported with bfloat16 parameters."""
  out = tmp_path / 'half.safetensors'
  export.export_model_file(smoke_run, out, dtype='bfloat16', name='half')
  return out


def _own_record(smoke_run: Path, tmp_path: Path, f1: float) -> Path:
  """The smoke run's eval.json (crackforest test, step 6, with per-image rows) with its
  strict ODS F1 set to `f1`: a record the card does not hold yet."""
  record = json.loads((smoke_run / 'eval.json').read_text())
  record['results']['strict']['ods']['f1'] = f1
  path = tmp_path / 'check' / 'eval.json'
  path.parent.mkdir(parents=True)
  path.write_text(json.dumps(record))
  return path


def test_rescore_puts_the_files_own_scores_and_self_check_in_its_card(smoke_run, half, tmp_path):
  before = model_file.read(half)
  (old,) = [s for s in before.card['scores'] if s['split'] == 'test']
  record = _own_record(smoke_run, tmp_path, 0.123456)

  card = model_card.rescore(half, record)

  after = model_file.read(half)  # verifies the new checksum
  assert after.card == card
  (new,) = [s for s in card['scores'] if s['split'] == 'test']
  assert new['protocols']['strict']['ods']['f1'] == 0.123456
  assert len(new['protocols']['strict']['first_images']) == 3
  assert card['run_scores']['scores'] == [old]
  assert card['rescored']['platform'].startswith('cpu') and card['rescored']['split'] == 'test'
  # The parameters are untouched and still bfloat16; everything else of the file is kept.
  for key, value in model_file.flatten(before.params, 'p').items():
    got = model_file.flatten(after.params, 'p')[key]
    assert str(got.dtype) == 'bfloat16' and np.array_equal(got, value), key
  assert after.meta['threshold'] == before.meta['threshold']
  assert after.meta['config'] == before.meta['config']
  assert card['bfloat16'] == before.card['bfloat16']
  assert card['self_check'] == self_check.self_check(Predictor.from_pretrained(str(half)))
  # What the release registers is the file's own score.
  entry = release_lib.registry_entry(half, 'half', 'test')
  assert entry['scores']['strict']['ods'] == 0.123456 and entry['dtype'] == 'bfloat16'
  # A second rescore (the finish stage run again) keeps the run's scores, not the first
  # rescore's.
  card = model_card.rescore(half, _own_record(smoke_run, tmp_path / 'again', 0.5))
  assert card['run_scores']['scores'] == [old]
  (new,) = [s for s in card['scores'] if s['split'] == 'test']
  assert new['protocols']['strict']['ods']['f1'] == 0.5


def test_rescore_refuses_a_record_of_another_model_in_one_line(smoke_run, half, tmp_path):
  record = _own_record(smoke_run, tmp_path, 0.5)
  data = json.loads(record.read_text())
  data['step'] = 3
  record.write_text(json.dumps(data))
  unchanged = half.read_bytes()
  done = subprocess.run(
    [
      sys.executable,
      '-m',
      'crackjax.deploy.release',
      'rescore',
      f'--file={half}',
      f'--record={record}',
    ],
    capture_output=True,
    text=True,
    cwd=REPO,
  )
  assert done.returncode == 1
  assert done.stderr.strip().splitlines() == [
    f'python -m crackjax.deploy.release: {record} evaluates a model of {data["params"]} '
    f'parameters at step 3, not {half} ({data["params"]} parameters, step 6).'
  ]
  assert half.read_bytes() == unchanged
  # A record without results (or per-image rows) is refused too.
  record.write_text(json.dumps({**data, 'step': 6, 'results': {}}))
  with pytest.raises(ValueError, match='no per-image rows'):
    model_card.rescore(half, record)


@pytest.mark.slow
def test_release_gpu_script_tiny_on_fake_crackforest(tmp_path):
  """scripts/release_gpu.sh with the `tiny` config, its GPU stages and the CPU's finish, on a
  fake CrackForest (about 40 s): the bfloat16 file comes back beside the run's records, and
  its card holds the file's own test scores."""
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=10, size=(64, 96))
  done, log = fixtures.run_gpu_script(
    'scripts/release_gpu.sh',
    tmp_path,
    TINY='1',
    STAGES='train export finish',
    DATA=str(raw),
    TFDS_DATA_DIR=None,
  )
  assert done.returncode == 0, log[-4000:]
  assert 'train exit code 0' in log and '<- best' in log and 'is illegal' not in log
  out = tmp_path / 'out'
  assert sorted(p.name for p in out.iterdir()) == [
    'crackforest-unet.safetensors',
    'log.txt',
    'release_run.tar.gz',
  ]
  card = model_file.read(out / 'crackforest-unet.safetensors').card
  (test,) = [s for s in card['scores'] if s['split'] == 'test']
  own = json.loads((tmp_path / 'work' / 'check' / 'crackforest_test' / 'eval.json').read_text())
  for protocol in ('strict', 'tolerance_thin_gt'):
    assert test['protocols'][protocol]['ods']['f1'] == own['results'][protocol]['ods']['f1']
  assert card['run_scores']['scores'][0]['split'] == 'test' and 'bfloat16' in card
  # TFDS prepared its data under WORK, not in the home folder.
  assert (tmp_path / 'work' / 'tfds' / 'crackforest').is_dir()


def test_show_and_best_step_of_a_mixture_select_on_the_datasets_mean(tmp_path, capsys):
  # Epoch 2 has the better pooled F1 (more pixels of the big dataset), epoch 1 the better mean
  # over the datasets: the mean selects, the pooled threshold is shown.
  for epoch, pooled, members in ((1, 0.60, (0.5, 0.7)), (2, 0.65, (0.3, 0.8))):
    record = fixtures.eval_record(
      epoch,
      1000 * epoch,
      'valid',
      {'strict': (pooled, 0.4)},
      members=dict(zip(('small', 'big'), members, strict=True)),
    )
    (tmp_path / f'epoch_{epoch:03d}.json').write_text(json.dumps(record))
  assert release_lib.main(['best-step', f'--workdir={tmp_path}']) == 0
  assert capsys.readouterr().out.strip() == '1000'
  assert release_lib.main(['show', f'--workdir={tmp_path}']) == 0
  first = capsys.readouterr().out.splitlines()[0]
  assert 'mean strict ODS F1 0.6000 (small 0.5000, big 0.7000); pooled 0.6000 at 0.40' in first
  assert first.endswith('<- best')


def test_rescore_keeps_two_copies_of_one_set_apart_and_the_entry_lists_each_set(
  smoke_run, half, tmp_path
):
  # The general model's card holds DeepCrack's test crops and its whole test photos: same
  # dataset and split, told apart by `copy`; F1 at the stored threshold travels along.
  crops = _own_record(smoke_run, tmp_path / 'crops', 0.25)
  record = json.loads(crops.read_text())
  record['results']['strict']['operating_points'] = {
    'run': {'precision': 0.5, 'recall': 0.1, 'f1': 0.1667, 'threshold': 0.43}
  }
  crops.write_text(json.dumps(record))
  photos = _own_record(smoke_run, tmp_path / 'photos', 0.75)
  model_card.rescore(half, crops, 'crops')
  card = model_card.rescore(half, photos, 'photos')
  tests = [s for s in card['scores'] if s['split'] == 'test']
  assert [s.get('copy') for s in tests] == [None, 'crops', 'photos']
  at_t = tests[1]['protocols']['strict']['at_stored_threshold']
  assert at_t == {'precision': 0.5, 'recall': 0.1, 'f1': 0.1667, 'threshold': 0.43}
  entry = release_lib.registry_entry(half, 'half', 'test')
  sets = {s['set']: s for s in entry['scores_by_set']}
  assert set(sets) == {'crackforest test', 'crackforest test (crops)', 'crackforest test (photos)'}
  assert sets['crackforest test (crops)']['ods']['strict'] == 0.25
  assert sets['crackforest test (crops)']['at_threshold'] == {'strict': 0.1667}
  assert sets['crackforest test (photos)']['ods']['strict'] == 0.75
  from crackjax.deploy import models_command

  row = models_command.table([{**entry, 'size': 1}]).splitlines()[-1]
  assert 'crackforest (crops) 25.0 (16.7 at t)' in row


def test_fp_puts_false_positives_on_crack_free_patches_into_the_card(half, tmp_path, capsys):
  # Two photos whose masks are empty: each is a crack-free patch, whole.
  images, masks = tmp_path / 'images', tmp_path / 'masks'
  for i in range(2):
    image, _ = fixtures.fake_pair((32, 48), i)
    fixtures.write_image(images / f'p{i}.png', image)
    fixtures.write_image(masks / f'p{i}.png', np.zeros((32, 48), np.uint8))
  code = release_lib.main(['fp', f'--file={half}', f'--set=clean roads={images}:{masks}'])
  assert code == 0
  assert 'clean roads:' in capsys.readouterr().out
  card = model_file.read(half).card  # checksum verified
  entry = card['false_positives']['sets']['clean roads']
  assert entry['whole_images'] == 2 and entry['images'] == 2
  assert entry['megapixels'] == pytest.approx(2 * 32 * 48 / 1e6)
  assert entry['length_per_mp'] == pytest.approx(entry['length_px'] / entry['megapixels'])
  assert entry['threshold'] == model_file.read(half).threshold['threshold']


def _mixture_file(smoke_run: Path, path: Path, sets: list[str]) -> Path:
  """The smoke run's model file with a card that names `sets` as its training datasets."""
  export.export_model_file(smoke_run, path, name='mix')
  loaded = model_file.read(path)
  card = {**loaded.card, 'data': {**loaded.card['data'], 'datasets': [{'name': s} for s in sets]}}
  meta = {k: v for k, v in loaded.meta.items() if k not in ('format', 'requires')}
  model_file.write(path, params=loaded.params, batch_stats=None, meta={**meta, 'card': card})
  return path


def _lodo_table(path: Path) -> Path:
  """A bench/lodo.py --out JSON: our recipe's folds on sets a and b (the tolerance protocol on
  a alone) and a peer's row."""
  fold = {'strict': {'stored': 30.0, 'threshold': 0.8, 'ods': 40.0, 'ods_threshold': 0.5}}
  rows = {
    'mine (short)': {
      'a': {'images': 4, **fold, 'tolerance_thin_gt': {'stored': 50.0, 'ods': 60.0}},
      'b': {'images': 6, 'strict': {'stored': 50.0, 'threshold': 0.7, 'ods': 52.0}},
      'c': {'images': 2, 'strict': {'stored': 0.0, 'ods': 0.0}},  # not the file's: left out
    },
    'peer': {
      'a': {'images': '4 of 4', 'strict': {'stored': 35.0, 'ods': 35.0}},
      'b': {'images': '6 of 6', 'strict': {'stored': 37.0, 'ods': 38.0}},
    },
    'partial (short)': {'a': fold},
  }
  path.write_text(json.dumps({'command': ['bench/lodo.py', '--out=x'], 'rows': rows}))
  return path


def test_lodo_puts_the_recipes_figure_into_the_card_registry_and_listing(
  smoke_run, tmp_path, capsys
):
  from crackjax.deploy import models_command

  file = _mixture_file(smoke_run, tmp_path / 'mix.safetensors', ['a', 'b'])
  before = model_file.read(file)
  table = _lodo_table(tmp_path / 'lodo.json')
  argv = ['lodo', f'--file={file}', f'--table={table}', '--row=mine (short)', '--peer=peer']
  assert release_lib.main(argv) == 0
  assert capsys.readouterr().out.splitlines() == [
    f'{file}: mine (short): strict mean F1 40.0 at the stored threshold, 46.0 at ODS, on 2 '
    'held-out sets (+4.0 against peer: 36.0)'
  ]
  after = model_file.read(file)  # verifies the new checksum
  lodo = after.card['lodo']
  assert lodo['row'] == 'mine (short)' and lodo['command'] == ['bench/lodo.py', '--out=x']
  assert lodo['sets'] == {
    'a': {
      'images': 4,
      'strict': {'stored': 30.0, 'ods': 40.0},
      'tolerance_thin_gt': {'stored': 50.0, 'ods': 60.0},
    },
    'b': {'images': 6, 'strict': {'stored': 50.0, 'ods': 52.0}},
  }
  assert lodo['mean'] == {'strict': {'stored': 40.0, 'ods': 46.0}}  # only what both sets have
  assert lodo['peer']['mean'] == {'strict': {'stored': 36.0, 'ods': 36.5}}
  assert lodo['lead'] == {'strict': 4.0}
  for key, value in model_file.flatten(before.params, 'p').items():
    assert np.array_equal(model_file.flatten(after.params, 'p')[key], value), key
  entry = release_lib.registry_entry(file, 'mix', 'test')
  assert entry['lodo'] == {
    'row': 'mine (short)',
    'sets': ['a', 'b'],
    'mean': {'strict': {'stored': 40.0, 'ods': 46.0}},
    'peer': {'row': 'peer', 'mean': {'strict': {'stored': 36.0, 'ods': 36.5}}},
  }
  line = models_command.table([entry]).splitlines()[-1]
  assert line.endswith(
    '; roads never seen (leave-one-dataset-out, 2 sets): strict F1 40.0 at its threshold '
    '(peer: 36.0) |'
  )


def test_lodo_refuses_a_missing_row_a_missing_fold_and_a_one_set_model(smoke_run, tmp_path, capsys):
  file = _mixture_file(smoke_run, tmp_path / 'mix.safetensors', ['a', 'b'])
  table = _lodo_table(tmp_path / 'lodo.json')
  unchanged = file.read_bytes()
  cases = {
    'nope': f"{table}: no row 'nope' (its rows: ['mine (short)', 'partial (short)', 'peer']).",
    'partial (short)': f"{table}: row 'partial (short)' has no fold with b held out.",
  }
  for row, says in cases.items():
    assert release_lib.main(['lodo', f'--file={file}', f'--table={table}', f'--row={row}']) == 1
    assert capsys.readouterr().err == f'python -m crackjax.deploy.release lodo: {says}\n'
  assert file.read_bytes() == unchanged
  one = tmp_path / 'one.safetensors'
  export.export_model_file(smoke_run, one, name='one')
  assert release_lib.main(['lodo', f'--file={one}', f'--table={table}', '--row=peer']) == 1
  assert capsys.readouterr().err.endswith('needs a model of several datasets.\n')


def test_register_keeps_the_old_model_under_another_name_byte_for_byte(
  smoke_run, half, tmp_path, monkeypatch, capsys
):
  from crackjax.deploy import models_command
  from crackjax.models import hub

  monkeypatch.setattr(hub, 'RELEASED_DIR', tmp_path / 'released')
  monkeypatch.setattr(hub, 'REGISTRY', tmp_path / 'released' / 'registry.json')
  first = release_lib.register(half, 'm', 'test', config='configs/smoke.py')
  new = tmp_path / 'new.safetensors'
  export.export_model_file(smoke_run, new, name='m')  # float32: another file
  argv = ['register', f'--file={new}', '--name=m', '--held_out=test', '--keep_old_as=m-2026']
  assert release_lib.main(argv) == 0
  capsys.readouterr()
  old, current = hub.entry('m-2026'), hub.entry('m')
  assert old == {**first, 'name': 'm-2026', 'file': 'm-2026.safetensors', 'superseded_by': 'm'}
  assert (tmp_path / 'released' / 'm-2026.safetensors').read_bytes() == half.read_bytes()
  assert current['sha256'] == model_file.file_sha256(new) != old['sha256']
  assert hub.resolve('m-2026').read_bytes() == half.read_bytes()  # its checksum verified
  assert release_lib.registry_entry(hub.resolve('m-2026'), 'm-2026', 'test', **{
    k: old[k] for k in ('config', 'superseded_by')}) == old  # fmt: skip
  names = [line.split(' | ')[0] for line in models_command.table(hub.released()).splitlines()[2:]]
  assert names == ['| m-2026 (superseded by m)', '| m']
  # Refused in one line, nothing changed: a name taken, or no shipped model to keep.
  registry = hub.REGISTRY.read_bytes()
  for name, keep, says in [
    ('m', 'm-2026', '--keep_old_as=m-2026: a released model has that name already.'),
    ('other', 'o-1', "--keep_old_as=o-1: no shipped released model 'other' to keep."),
  ]:
    argv = ['register', f'--file={new}', f'--name={name}', f'--keep_old_as={keep}']
    assert release_lib.main(argv) == 1
    assert capsys.readouterr().err == f'python -m crackjax.deploy.release register: {says}\n'
    assert hub.REGISTRY.read_bytes() == registry
  assert sorted(p.name for p in (tmp_path / 'released').iterdir()) == [
    'm-2026.safetensors', 'm.safetensors', 'registry.json']  # fmt: skip
