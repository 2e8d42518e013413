"""The model file (crackjax/models/model_file.py), loading by path and URL (crackjax/models/hub.py),
and --model through crackjax-predict, crackjax-evaluate, crackjax-export and fine-tuning."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

import jax
import numpy as np
import pytest

from crackjax.deploy import export, export_command, model_export, predictor, self_check
from crackjax.models import hub, model_file
from crackjax.models import output_check as checks
from tests import fixtures


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
  """A fresh download cache per test ($CRACKJAX_CACHE)."""
  path = tmp_path / 'cache'
  monkeypatch.setenv(hub.CACHE_ENV, str(path))
  return path


@contextlib.contextmanager
def serve(folder: Path):
  """An HTTP server on 127.0.0.1 serving `folder`; yields its base URL."""
  handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
  handler.log_message = lambda *a, **k: None
  server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    yield f'http://127.0.0.1:{server.server_address[1]}'
  finally:
    server.shutdown()
    server.server_close()


def photo(seed: int = 0, shape=(40, 56)) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, size=(*shape, 3), dtype=np.uint8)


def predict_refusal(model: Path, tmp_path: Path) -> str:
  """crackjax-predict's one-line refusal of `model` on one photo (nothing written)."""
  from crackjax.deploy import predict_command

  fixtures.write_image(tmp_path / 'photos' / 'a.png', photo())
  with pytest.raises(SystemExit) as e:
    predict_command.main([f'--model={model}', f'--out={tmp_path / "o"}', str(tmp_path / 'photos')])
  message = str(e.value.code)
  assert message.startswith('crackjax-predict: ') and '\n' not in message
  assert not (tmp_path / 'o').exists()
  return message


def flip_byte(path: Path, offset: int) -> None:
  data = bytearray(path.read_bytes())
  data[offset] ^= 0x01
  path.write_bytes(bytes(data))


def test_the_file_predicts_as_the_run(smoke_run, exported):
  from_run = predictor.Predictor.from_workdir(smoke_run)
  from_file = predictor.Predictor.from_pretrained(exported)
  image = photo()
  np.testing.assert_array_equal(from_file(image), from_run(image))
  assert from_file(image).shape == image.shape[:2]
  assert from_file.threshold == from_run.threshold


def test_the_models_input_norm_travels_in_the_file(smoke_run, tmp_path):
  # The U-Net's per-image standardisation has no parameters: the smoke run's weights with
  # input_norm='image' in its config; the file built from it standardises every photo.
  run = tmp_path / 'run'
  shutil.copytree(smoke_run, run)
  config = json.loads((run / 'config.json').read_text())
  config['model']['input_norm'] = 'image'
  (run / 'config.json').write_text(json.dumps(config))
  out = export.export_model_file(run, tmp_path / 'std.safetensors', name='std')[0]
  from_file = predictor.Predictor.from_pretrained(out)
  assert from_file.model.input_norm == 'image'
  image = photo()
  np.testing.assert_array_equal(from_file(image), predictor.Predictor.from_workdir(run)(image))
  assert not np.allclose(from_file(image), predictor.Predictor.from_workdir(smoke_run)(image))
  # A darker, flatter photo of the same road gives (nearly) the same map.
  dim = (image * 0.5 + 20).astype(np.uint8)
  np.testing.assert_allclose(from_file(dim), from_file(image), atol=0.02)


def test_the_card_and_metadata(smoke_run, exported):
  loaded = model_file.read(exported)
  card = loaded.card
  run = json.loads((smoke_run / 'eval.json').read_text())
  assert card['name'] == 'smoke'
  assert card['training']['step'] == run['step'] == 6
  assert card['data']['licence'].startswith('non-commercial research only')
  (scores,) = [s for s in card['scores'] if s['record'] == 'eval.json']
  assert scores['split'] == run['split'] and scores['num_images'] == run['num_images']
  assert scores['protocols']['strict']['ods']['f1'] == run['results']['strict']['ods']['f1']
  assert (
    loaded.input['pad_multiple'] == 32
    and loaded.model == json.loads((smoke_run / 'config.json').read_text())['model']
  )
  saved = json.loads((smoke_run / 'threshold.json').read_text())
  assert loaded.threshold['threshold'] == saved['threshold']
  # The self check is what the file's model gives on the synthetic image.
  check = self_check.self_check(predictor.Predictor.from_pretrained(exported))
  assert check == card['self_check']


@pytest.mark.parametrize('where', ['tensor data', 'metadata'])
def test_one_changed_byte_is_refused_in_one_line(exported, tmp_path, where):
  damaged = tmp_path / 'damaged.safetensors'
  shutil.copyfile(exported, damaged)
  size = damaged.stat().st_size
  header = int.from_bytes(damaged.read_bytes()[:8], 'little')
  if where == 'tensor data':
    flip_byte(damaged, size - 5)
  else:  # inside the card's JSON text: a digit of the card's created date
    text = damaged.read_bytes()[: 8 + header]
    flip_byte(damaged, text.index(b'crackjax_version') + 30)
  with pytest.raises(model_file.ModelFileError) as e:
    model_file.read(damaged)
  message = str(e.value)
  assert '\n' not in message and str(damaged) in message
  assert 'checksum' in message or 'damaged' in message


def test_not_a_model_file_and_a_newer_format(exported, tmp_path, monkeypatch):
  junk = tmp_path / 'junk.safetensors'
  junk.write_bytes(b'\x00' * 64)
  with pytest.raises(model_file.ModelFileError, match='not a crackjax model file'):
    model_file.read(junk)
  loaded = model_file.read(exported)
  monkeypatch.setattr(model_file, 'FORMAT_VERSION', 2)
  newer = tmp_path / 'newer.safetensors'
  meta = {k: loaded.meta[k] for k in model_file.FIELDS if k not in ('format', 'requires')}
  model_file.write(newer, params=loaded.params, batch_stats=None, meta=meta)
  monkeypatch.setattr(model_file, 'FORMAT_VERSION', 1)
  with pytest.raises(model_file.ModelFileError) as e:
    model_file.read(newer)
  assert 'format 2' in str(e.value) and 'crackjax>=' in str(e.value)


def test_bfloat16_parameters_are_stored_and_the_card_states_the_change(smoke_run, tmp_path):
  out = tmp_path / 'half.safetensors'
  _, _, meta = export.export_model_file(smoke_run, out, dtype='bfloat16')
  change = meta['card']['bfloat16']
  assert 0 < change['max_abs_probability_change'] < 0.05
  assert set(change['strict_f1_at_threshold']) == {'float32', 'bfloat16'}
  loaded = model_file.read(out)
  leaf = loaded.params['enc0']['conv1']['kernel'] if 'enc0' in loaded.params else None
  leaves = [leaf] if leaf is not None else list(model_file.flatten(loaded.params, 'p').values())
  assert all(str(x.dtype) == 'bfloat16' for x in leaves)
  full = tmp_path / 'full.safetensors'
  export.export_model_file(smoke_run, full)
  assert out.stat().st_size < 0.6 * full.stat().st_size


def test_a_threshold_chosen_elsewhere_is_stored_with_how_it_was_chosen(smoke_run, tmp_path):
  """--threshold (e.g. chosen on held-out datasets, bench/lodo.py) replaces the run's; the card
  keeps no "at stored threshold" figures measured at the run's threshold."""
  run_file = tmp_path / 'run.safetensors'
  export.export_model_file(smoke_run, run_file)
  run_card = model_file.read(run_file, build=False).card
  out = tmp_path / 'lodo.safetensors'
  why = 'one threshold for the held-out datasets (bench/lodo.py)'
  export_command.main(
    [f'--workdir={smoke_run}', f'--out={out}', '--format=model', '--threshold=0.37',
     f'--threshold_chosen_by={why}']
  )  # fmt: skip
  loaded = model_file.read(out)
  assert loaded.threshold == {'threshold': 0.37, 'chosen_by': why}
  assert predictor.Predictor.from_pretrained(out).threshold == 0.37
  assert [s['protocols']['strict']['ods'] for s in loaded.card['scores']] == [
    s['protocols']['strict']['ods'] for s in run_card['scores']
  ]


def test_test_time_defaults_chosen_elsewhere_are_stored_and_used(smoke_run, tmp_path, capsys):
  """--scales / --flip / --photo_threshold become the file's defaults (its config's eval
  group), the card saying how they were chosen; the self check stays one plain pass."""
  plain = tmp_path / 'plain.safetensors'
  export.export_model_file(smoke_run, plain)
  out = tmp_path / 'scale2.safetensors'
  why = 'scale 2: the best LODO mean (bench/lodo.py)'
  export_command.main(
    [f'--workdir={smoke_run}', f'--out={out}', '--format=model', '--scales=2', '--flip',
     '--photo_threshold=0.8', f'--test_time_chosen_by={why}']
  )  # fmt: skip
  assert (
    f"Test-time defaults {{'scales': [2.0], 'flip': True, 'photo_threshold': 0.8}}: {why}."
    in (capsys.readouterr().out)
  )
  loaded = model_file.read(out)
  assert loaded.card['test_time'] == {
    'scales': [2.0], 'flip': True, 'photo_threshold': 0.8, 'chosen_by': why}  # fmt: skip
  assert loaded.card['self_check'] == model_file.read(plain).card['self_check']
  used = predictor.Predictor.from_pretrained(out)
  assert (used.scales, used.flip, used.photo_threshold) == ((2.0,), True, 0.8)
  base = predictor.Predictor.from_pretrained(plain)
  assert (base.scales, base.flip, base.photo_threshold) == ((1.0,), False, None)
  image = photo(2)
  want = predictor.Predictor.from_pretrained(plain, scales=(2.0,), flip=True)(image)
  np.testing.assert_allclose(used(image), want, atol=1e-6)
  # One of them alone keeps the run's others.
  one = tmp_path / 'flip.safetensors'
  export.export_model_file(smoke_run, one, test_time={'flip': True}, test_time_chosen_by='x')
  assert model_file.read(one).card['test_time'] == {'flip': True, 'chosen_by': 'x'}
  assert predictor.Predictor.from_pretrained(one).scales == (1.0,)


def test_a_cards_scores_keep_at_stored_threshold_figures_of_the_files_threshold_only():
  def entry(t):
    at = {'precision': 0.5, 'recall': 0.5, 'f1': 0.5, 'threshold': t}
    return {'protocols': {'strict': {'ods': {'f1': 0.6}, 'at_stored_threshold': at}}}

  assert (
    'at_stored_threshold'
    in model_export.at_threshold_only(entry(0.37), 0.37)['protocols']['strict']
  )
  kept = model_export.at_threshold_only(entry(0.93), 0.37)['protocols']['strict']
  assert kept == {'ods': {'f1': 0.6}}


@pytest.mark.parametrize(
  'flags, says',
  [
    (['--format=model', '--threshold=0.4'], '--threshold=0.4 needs --threshold_chosen_by'),
    (['--format=model', '--threshold=1.5', '--threshold_chosen_by=x'], '--threshold=1.5'),
    (['--format=model', '--threshold_chosen_by=x'], '--threshold_chosen_by needs --threshold'),
    (['--format=jax', '--threshold=0.4'], 'are for --format=model'),
    (['--format=model', '--scales=2'], 'need --test_time_chosen_by'),
    (['--format=model', '--scales=5', '--test_time_chosen_by=x'], 'scales in [0.25, 4]'),
    (['--format=model', '--scales=two', '--test_time_chosen_by=x'], '--scales=two: expected'),
    (['--format=model', '--photo_threshold=2', '--test_time_chosen_by=x'], 'a weight in [0, 1]'),
    (['--format=model', '--test_time_chosen_by=x'], '--test_time_chosen_by needs --scales'),
    (['--format=onnx', '--flip', '--test_time_chosen_by=x'], 'are for --format=model'),
  ],
)
def test_a_threshold_without_its_reason_or_out_of_range_is_refused(
  smoke_run, tmp_path, flags, says
):
  out = tmp_path / 'm.safetensors'
  with pytest.raises(SystemExit) as e:
    export_command.main([f'--workdir={smoke_run}', f'--out={out}', *flags])
  assert says in str(e.value.code) and '\n' not in str(e.value.code)
  assert not out.exists()


def test_by_url_then_offline_from_the_cache(exported, tmp_path, cache):
  served = tmp_path / 'served'
  served.mkdir()
  shutil.copyfile(exported, served / 'smoke.safetensors')
  image = photo(1)
  with serve(served) as base:
    url = f'{base}/smoke.safetensors'
    first = predictor.Predictor.from_pretrained(url)(image)
  # The server is gone: the cached copy serves.
  again = predictor.Predictor.from_pretrained(url)(image)
  np.testing.assert_array_equal(first, again)
  assert hub.cached_path(url).is_file() and hub.cached_path(url).is_relative_to(cache)
  assert not [p for p in hub.cached_path(url).parent.iterdir() if p.name.startswith('.')]


def test_a_download_with_the_wrong_checksum_keeps_nothing(exported, tmp_path):
  served = tmp_path / 'served'
  served.mkdir()
  shutil.copyfile(exported, served / 'smoke.safetensors')
  with serve(served) as base:
    url = f'{base}/smoke.safetensors#sha256={"0" * 64}'
    with pytest.raises(model_file.ModelFileError, match='checksum mismatch'):
      hub.resolve(url, progress=False)
    assert not hub.cached_path(url).parent.exists() or not any(
      hub.cached_path(url).parent.iterdir()
    )
    # A damaged file is refused by its own checksum even without one in the URL.
    flip_byte(served / 'smoke.safetensors', (served / 'smoke.safetensors').stat().st_size - 3)
    with pytest.raises(model_file.ModelFileError) as e:
      hub.resolve(f'{base}/smoke.safetensors', progress=False)
    assert f'{base}/smoke.safetensors' in str(e.value) and 'checksum' in str(e.value)
    with pytest.raises(OSError, match='cannot download'):
      hub.resolve(f'{base}/missing.safetensors', progress=False)


def test_an_unknown_model_names_the_released_ones():
  with pytest.raises(hub.ModelNotFoundError) as e:
    hub.resolve('no-such-model')
  assert 'not a released model' in str(e.value) and 'crackjax-models' in str(e.value)


def test_predict_evaluate_and_export_take_model(exported, smoke_run, tmp_path, capsys):
  from crackjax.deploy import predict_command
  from crackjax.trainer import evaluate_command

  photos = tmp_path / 'photos'
  fixtures.write_image(photos / 'road.png', photo(2))
  assert (
    predict_command.main([f'--model={exported}', f'--out={tmp_path / "pred"}', str(photos)]) == 0
  )
  assert (tmp_path / 'pred' / 'masks' / 'road.png').is_file()
  assert f'model {exported} step 6' in capsys.readouterr().err

  images, masks = fixtures.make_fake_folder(tmp_path / 'folder', n=3)
  out = tmp_path / 'scores'
  code = evaluate_command.main(
    [f'--model={exported}', f'--folder={images}:{masks}', f'--out={out}', '--protocols=strict']
  )
  assert code == 0
  (record,) = out.glob('*/eval.json')
  assert json.loads(record.read_text())['num_images'] == 3
  assert (record.parent / 'eval_per_image.csv').is_file()

  jax_file = tmp_path / 'smoke.jaxexport'
  export_command.main([f'--model={exported}', f'--out={jax_file}', '--platforms=cpu'])
  sidecar = json.loads(export.sidecar_path(jax_file).read_text())
  assert sidecar['step'] == 6 and sidecar['model_file'] == str(exported)


def test_commands_refuse_a_damaged_model_in_one_line(exported, tmp_path, capsys):
  damaged = tmp_path / 'damaged.safetensors'
  shutil.copyfile(exported, damaged)
  flip_byte(damaged, damaged.stat().st_size - 7)
  message = predict_refusal(damaged, tmp_path)
  assert 'checksum mismatch' in message and str(damaged) in message


def rewritten(exported: Path, out: Path, change) -> Path:
  """`exported` written again to `out` with its parameters changed by `change` (a function of
  the tree of numpy arrays) and its checksum recomputed: only the values can tell."""
  loaded = model_file.read(exported)
  model_file.write(
    out,
    params=change(jax.tree.map(np.array, loaded.params)),
    batch_stats=loaded.batch_stats,
    meta={k: v for k, v in loaded.meta.items() if k not in ('format', 'requires')},
  )
  return out


def test_weights_holding_nan_are_refused_in_one_line(exported, tmp_path):
  def nan_first(params):
    next(iter(jax.tree.leaves(params))).flat[0] = np.nan
    return params

  bad = rewritten(exported, tmp_path / 'nan.safetensors', nan_first)
  with pytest.raises(model_file.ModelFileError, match='hold NaN or infinite values'):
    model_file.read(bad)
  assert 'NaN' in predict_refusal(bad, tmp_path)


def test_weights_that_do_not_give_the_cards_self_check_are_refused(
  exported, tmp_path, cache, monkeypatch
):
  # Finite weights changed after the export, the checksum recomputed: only the self check
  # (the card's output on a fixed synthetic image) tells.
  altered = rewritten(
    exported, tmp_path / 'altered.safetensors', lambda p: jax.tree.map(lambda a: a * 1.5 + 0.5, p)
  )
  with pytest.raises(model_file.ModelFileError, match='do not give the self check') as e:
    predictor.Predictor.from_pretrained(altered)
  assert str(altered) in str(e.value) and ', card ' in str(e.value)
  assert 'self check' in predict_refusal(altered, tmp_path)
  assert not (cache / 'verified').exists() or not any((cache / 'verified').iterdir())
  # The file as exported passes, once: its checksum is remembered, the next load trusts it.
  loaded = model_file.read(exported)
  predictor.Predictor.from_pretrained(exported)
  assert [p.name for p in (cache / 'verified').iterdir()] == [loaded.sha256]
  calls = []
  original = checks.logit_map
  monkeypatch.setattr(checks, 'logit_map', lambda *a: calls.append(a) or original(*a))
  predictor.Predictor.from_pretrained(exported)
  assert calls == []
  # tests/test_self_check.py: the tolerances, the alterations each reader refuses, NaN.


def test_fine_tuning_starts_from_a_model_file(exported, smoke_run, tmp_path):
  """--config.model_init.pretrained=FILE: a new run's first parameters are the file's."""
  import jax

  from crackjax.experiment import specs
  from crackjax.experiment.build import build
  from crackjax.models import pretrained

  config = fixtures.smoke_config(fixtures.smoke_data_dirs(tmp_path / 'data'))
  config.model_init.pretrained = str(exported)
  experiment = build(config)
  state = experiment.states.fresh((32, 48, 3))
  arrays = experiment.init_arrays  # the model file, read once (restored.start_run)
  assert experiment.init_arrays is arrays and experiment.start is not None
  state = pretrained.initialise(state, specs.init_spec_of(config), tmp_path / 'run', arrays=arrays)
  report = json.loads((tmp_path / 'run' / 'init.json').read_text())
  assert report['pretrained'] == str(exported) and not report['from_scratch']
  loaded = model_file.read(exported)
  got = model_file.flatten(jax.tree.map(np.asarray, state.params), 'params')
  want = model_file.flatten(loaded.params, 'params')
  assert got.keys() == want.keys()
  with pytest.raises(pretrained.PretrainedError, match='initial_arrays'):  # never read here
    pretrained.initialise(state, specs.init_spec_of(config), tmp_path / 'run2')
  for name in want:
    np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize('umask', [0o022, 0o077])
def test_the_file_is_as_readable_as_any_new_file(exported, tmp_path, umask):
  """safetensors alone writes 0600 (its owner only); a model file is for sharing, so it gets
  the mode of any file created under the same umask."""
  import os

  loaded = model_file.read(exported)
  meta = {k: v for k, v in loaded.meta.items() if k not in ('format', 'requires')}
  previous = os.umask(umask)
  try:
    model_file.write(tmp_path / 'm.safetensors', params=loaded.params, batch_stats=None, meta=meta)
    (tmp_path / 'plain.txt').write_text('x')
  finally:
    os.umask(previous)
  assert (tmp_path / 'm.safetensors').stat().st_mode & 0o777 == 0o666 & ~umask
  assert (tmp_path / 'plain.txt').stat().st_mode & 0o777 == 0o666 & ~umask
