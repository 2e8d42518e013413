"""A model file's self check (crackjax/models/output_check.py, issue 78): the whole logit map of a
colour road image, compared on every load of a file (`restored.load_model`: prediction,
evaluation, fine-tuning and export alike), NaN-proof and malformed cards refused in one line;
and the SHA-256 pin that guards against tampering, which the self check does not."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from crackjax.deploy import export
from crackjax.experiment import restored
from crackjax.models import hub, model_file, pretrained
from crackjax.models import output_check as self_check


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
  """A fresh cache per test ($CRACKJAX_CACHE: the passed files' markers)."""
  path = tmp_path / 'cache'
  monkeypatch.setenv(hub.CACHE_ENV, str(path))
  return path


def rewritten(
  exported: Path,
  out: Path,
  params: Callable[[dict], None] | None = None,
  card: Callable[[dict], Any] | None = None,
) -> Path:
  """`exported` written again to `out` with its parameters changed in place by `params` and
  its card's JSON text by `card` (a function of the card returning the new one; NaN written as
  JSON's NaN, as a hand-edited file may hold it), its content checksum recomputed: only the
  values can tell."""
  tensors = load_file(str(exported))
  with safe_open(str(exported), 'np') as f:
    metadata = dict(f.metadata())
  if params is not None:
    tree = model_file.unflatten({k: v.copy() for k, v in tensors.items()}, 'params')
    params(tree)
    tensors.update(model_file.flatten(tree, 'params'))
  if card is not None:
    metadata['crackjax.card'] = json.dumps(card(json.loads(metadata['crackjax.card'])))
  metadata[model_file.CHECKSUM_KEY] = model_file.content_sha256(tensors, metadata)
  save_file(tensors, str(out), metadata=metadata)
  return out


def refusal(path: Path, match: str) -> str:
  """`load_model`'s one-line refusal of `path`, which must name it and contain `match`."""
  with pytest.raises(model_file.ModelFileError) as e:
    restored.load_model(path)
  message = str(e.value)
  assert str(path) in message and match in message and '\n' not in message, message
  return message


def _first_conv(params: dict) -> dict:
  """The first convolution of the smoke U-Net (its kernel takes the 3 colour channels)."""
  (conv,) = [
    m for m in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, dict) and 'kernel' in x)
    if m['kernel'].ndim == 4 and m['kernel'].shape[2] == 3
  ]  # fmt: skip
  return conv


def _last_conv(params: dict) -> dict:
  """The 1 x 1 convolution that gives the logits (its kernel has one output channel)."""
  (conv,) = [
    m for m in jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, dict) and 'kernel' in x)
    if m['kernel'].shape[-1] == 1
  ]  # fmt: skip
  return conv


def _scaled_kernel(params: dict) -> None:  # one layer's kernel x 1.5
  conv = _first_conv(params)
  conv['kernel'] = conv['kernel'] * np.float32(1.5)


def _bias(shift: float) -> Callable[[dict], None]:
  def change(params: dict) -> None:
    conv = _last_conv(params)
    conv['bias'] = conv['bias'] + np.float32(shift)

  return change


def _colour_only(params: dict) -> None:
  """Red's first-layer weights up and green's down by the same amount: a grey image (R = G = B)
  gives exactly what it gave before; a colour one does not."""
  conv = _first_conv(params)
  kernel = conv['kernel'].copy()
  step = np.float32(0.25) * np.abs(kernel).mean()
  kernel[:, :, 0, :] += step
  kernel[:, :, 1, :] -= step
  conv['kernel'] = kernel


def test_the_image_is_a_colour_road_drawn_the_same_everywhere():
  image = self_check.self_check_image()
  assert image.shape == (*self_check.SELF_CHECK_SHAPE, 3) and image.dtype == np.uint8
  # Colour: the channels differ (the grey image of version 1 had R = G = B).
  assert np.abs(image[..., 0].astype(int) - image[..., 1]).mean() > 5
  # Integer arithmetic alone: the same bytes on every machine and NumPy (a change of the image
  # is a new version of the check: every card's map would differ).
  digest = hashlib.sha256(image.tobytes()).hexdigest()
  assert digest == '2a2ea0e20a114c8f6619ecf39e4ea70a9f913f5e9224c4e949610801ae68ba14'
  grey = self_check.legacy_image()
  assert (grey[..., 0] == grey[..., 1]).all()


@pytest.mark.parametrize(
  'change',
  [_scaled_kernel, _bias(0.25), _bias(-0.25), _colour_only],
  ids=['kernel x1.5', 'bias up', 'bias down', 'colour only'],
)
def test_altered_weights_fail_the_check_of_every_reader(exported, tmp_path, cache, change):
  """Issue 78: each alteration, its checksum recomputed, is refused by the one reader of model
  files (crackjax-predict and -evaluate --model, Predictor.from_pretrained), by a fine-tuning
  from it and by crackjax-export of it; the colour-only one is invisible to the grey image."""
  altered = rewritten(exported, tmp_path / 'altered.safetensors', params=change)
  message = refusal(altered, 'do not give the self check its card records')
  assert 'logits on the self-check image differ' in message
  with pytest.raises(pretrained.PretrainedError, match='do not give the self check'):
    restored.start_run(pretrained.InitSpec('unet', str(altered)))
  with pytest.raises(model_file.ModelFileError, match='do not give the self check'):
    export.export_run(None, tmp_path / 'out' / 'model.jax', model=str(altered))  # crackjax-export
  assert not (tmp_path / 'out').exists()
  assert not (cache / 'verified').exists() or not any((cache / 'verified').iterdir())
  if change is _colour_only:  # what version 1 compared: the grey image's summary, unchanged
    loaded = model_file.read(altered)
    got = self_check.legacy_summary(
      loaded.module, model_file.as_float32(loaded.params), None, loaded.threshold['threshold']
    )
    want = loaded.card['self_check']
    assert got['crack_pixels'] == want['crack_pixels']
    assert got['mean_probability'] == pytest.approx(want['mean_probability'], rel=1e-5)


def test_the_file_as_written_passes_once_per_machine(exported, cache, monkeypatch):
  run = restored.load_model(exported)
  marker = cache / 'verified' / run.sha256
  assert 'self check version 2' in marker.read_text()

  def fail(*args, **kwargs):
    raise AssertionError('the check ran again')

  monkeypatch.setattr(self_check, 'logit_map', fail)
  restored.load_model(exported)  # remembered: nothing computed
  # A marker of the version 1 check (crackjax before version 2) does not pass a version 2 card.
  monkeypatch.setattr(self_check, '_PASSED', set())
  marker.write_text(f'{exported}: self check passed 2026-11-28T10:00:00\n')
  with pytest.raises(AssertionError, match='the check ran again'):
    restored.load_model(exported)


def test_another_machines_arithmetic_passes_and_more_does_not(exported):
  want = self_check.decode_logits(model_file.read(exported).card['self_check']['logits'])
  scale = np.abs(want).mean()
  # Float32 summation order (~1e-6) and even TF32 rounding (~3e-3 of the scale) pass.
  noise = np.random.default_rng(0).standard_normal(want.shape).astype(np.float32)
  assert self_check.map_problem(want + 1e-6 * scale * noise, want, 'float32') is None
  assert self_check.map_problem(want + 2e-3 * scale * noise.clip(-1, 1), want, 'float32') is None
  far = self_check.map_problem(want + 0.1 * scale, want, 'float32')
  assert far.startswith("its logits on the self-check image differ from the card's at 6,144 of ")
  # A bfloat16 model's arithmetic is looser; NaN never passes.
  assert self_check.map_problem(want + 0.02 * scale * noise.clip(-1, 1), want, 'bfloat16') is None
  with_nan = want.copy()
  with_nan[3, 4] = np.nan
  assert 'at 1 of 6,144 pixels, most at (3, 4): nan' in self_check.map_problem(
    with_nan, want, 'float32'
  )


def _set(path: tuple, value: Any) -> Callable[[dict], dict]:
  """A card change: ``card['self_check'][path...] = value`` (a missing path: the field removed)."""

  def change(card: dict) -> dict:
    node = card
    for key in path[:-1]:
      node = node[key]
    if value is _REMOVED:
      del node[path[-1]]
    else:
      node[path[-1]] = value
    return card

  return change


_REMOVED = object()


@pytest.mark.parametrize(
  ('path', 'value', 'field'),
  [
    (('self_check',), 'passed', 'crackjax.card.self_check='),
    (('self_check',), '', 'crackjax.card.self_check='),
    (('self_check',), {}, 'crackjax.card.self_check lacks'),
    (('self_check', 'mean_probability'), float('nan'), 'self_check.mean_probability=nan'),
    (('self_check', 'max_probability'), float('inf'), 'self_check.max_probability=inf'),
    (('self_check', 'pixels', 2, 2), float('nan'), 'crackjax.card.self_check.pixels='),
    (('self_check', 'crack_pixels'), _REMOVED, "crackjax.card.self_check lacks 'crack_pixels'"),
    (('self_check', 'logits'), _REMOVED, "crackjax.card.self_check lacks 'logits'"),
    (('self_check', 'logits'), 'AAAA', 'crackjax.card.self_check.logits='),
    (('self_check', 'version'), 'two', "crackjax.card.self_check.version='two'"),
  ],
  ids=lambda v: None,
)
def test_a_malformed_or_non_finite_self_check_is_one_line_naming_the_field(
  exported, tmp_path, path, value, field
):
  """Issue 78: NaN in the card's self-check values turned the check off (every comparison with
  NaN is false); a string or a missing field ended in a traceback."""
  bad = rewritten(exported, tmp_path / 'bad.safetensors', card=_set(path, value))
  message = refusal(bad, field)
  assert 'not a usable crackjax model file' in message


def test_a_map_holding_nan_in_the_card_is_refused(exported, tmp_path):
  card = model_file.read(exported).card['self_check']
  logits = self_check.decode_logits(card['logits']).copy()
  logits[0, 0] = np.nan
  bad = rewritten(
    exported,
    tmp_path / 'nan.safetensors',
    card=_set(('self_check', 'logits'), self_check.encode_logits(logits)),
  )
  refusal(bad, 'crackjax.card.self_check.logits=')


def test_a_version_1_card_is_still_checked(exported, tmp_path):
  """Files written before version 2 (the released models' at this writing): their grey
  image's summary, compared as logits, tight where the card was made on a CPU."""

  def version_1(card: dict) -> dict:
    card['self_check'] = {
      k: card['self_check'][k]
      for k in ('mean_probability', 'max_probability', 'crack_pixels', 'pixels')
    }
    card['rescored'] = {'platform': 'cpu (cpu)'}
    return card

  old = rewritten(exported, tmp_path / 'old.safetensors', card=version_1)
  restored.load_model(old)  # its own weights pass
  bad = rewritten(old, tmp_path / 'bad.safetensors', params=_bias(0.25))
  refusal(bad, 'do not give the self check its card records')
  nan = rewritten(
    old, tmp_path / 'nan.safetensors', card=_set(('self_check', 'pixels', 0, 2), None)
  )
  refusal(nan, 'crackjax.card.self_check.pixels=')


def test_a_file_without_a_self_check_is_not_checked(exported, tmp_path):
  bare = rewritten(exported, tmp_path / 'bare.safetensors', card=_set(('self_check',), _REMOVED))
  assert restored.load_model(bare).file == str(bare)


def test_the_sha256_pin_guards_against_a_file_altered_on_purpose(exported, tmp_path):
  """The self check guards against damage; a checksum from elsewhere against tampering: a
  file whose self check was recomputed too passes it, and fails its pin."""
  copy = tmp_path / 'copy.safetensors'
  shutil.copyfile(exported, copy)
  digest = model_file.file_sha256(copy)
  assert restored.load_model(f'{copy}#sha256={digest}').file == str(copy)
  assert restored.load_model(copy, sha256=digest.upper()).sha256 == model_file.read(copy).sha256
  assert restored.read_model_file(f'{copy}#sha256={digest}').path == copy
  # Tampered: weights changed and the self check recomputed (what an attacker would do).
  loaded = model_file.read(exported)

  def retrained(card: dict) -> dict:
    params = model_file.as_float32(loaded.params)
    _bias(0.25)(params)
    card['self_check'] = self_check.record(loaded.module, params, None, 0.5)
    return card

  tampered = rewritten(exported, tmp_path / 'tampered.safetensors', _bias(0.25), retrained)
  restored.load_model(tampered)  # its own self check passes: not a guard against this
  with pytest.raises(model_file.ModelFileError) as e:
    restored.load_model(f'{tampered}#sha256={digest}')
  message = str(e.value)
  assert str(tampered) in message and f'not the pinned {digest}' in message and '\n' not in message
  with pytest.raises(hub.ModelNotFoundError, match='is not a SHA-256'):
    restored.load_model(f'{copy}#sha256=abc')
  with pytest.raises(hub.ModelNotFoundError, match='pinned to two checksums'):
    restored.load_model(f'{copy}#sha256={digest}', sha256='0' * 64)
  # A released model by name: the registry pins it; a pin of another checksum is refused.
  name = hub.released()[0]['name']
  with pytest.raises(model_file.ModelFileError, match='its registry entry'):
    hub.resolve(f'{name}#sha256={"0" * 64}')
  assert pretrained.is_model_file(f'{copy}#sha256={digest}')
  assert pretrained.not_a_file(f'{copy}#sha256={digest}') is None
  assert 'no such file' in pretrained.not_a_file(f'{tmp_path / "none.safetensors"}#sha256={digest}')


def test_a_released_file_is_named_only_when_its_bytes_are_the_registrys(exported, tmp_path):
  entry = hub.released()[0]
  shipped = hub.resolve(entry['name'])
  assert hub.released_name(shipped) == entry['name']
  copy = tmp_path / 'copy.safetensors'
  shutil.copyfile(shipped, copy)
  assert hub.released_name(copy) == entry['name']
  assert hub.released_name(exported) is None


def test_fine_tuning_says_as_shipped_only_of_a_released_file(tmp_path):
  """Issue 78: fine-tuning from an altered file labelled its "before" scores "roads-unet-cpu as
  shipped"; only a file whose bytes are the registry's is."""
  from types import SimpleNamespace

  from crackjax.trainer import before_after

  entry = hub.released()[0]
  shipped = hub.resolve(entry['name'])
  loaded = model_file.read(shipped)

  def recomputed(card: dict) -> dict:  # what an altered file's maker would do
    params = model_file.as_float32(loaded.params)
    _bias(0.25)(params)
    card['self_check'] = self_check.record(loaded.module, params, None, 0.5)
    return card

  altered = rewritten(shipped, tmp_path / 'altered.safetensors', _bias(0.25), recomputed)
  copy = tmp_path / 'copy.safetensors'
  shutil.copyfile(shipped, copy)
  labels = {}
  for spec in (entry['name'], str(copy), str(altered)):
    run = restored.load_model(spec)
    experiment = SimpleNamespace(start=run, init=SimpleNamespace(pretrained=spec, start_step=0))
    start = before_after.start_model(experiment)
    labels[spec] = before_after.described(dataclasses.asdict(start))
  assert labels[entry['name']] == labels[str(copy)] == f'{entry["name"]} as shipped'
  assert labels[str(altered)] == (
    f'{loaded.card["name"]} from {altered}, not a released file as shipped'
  )
  # A record written before the field: its card's name, as before.
  assert before_after.described({'name': 'm', 'spec': 'm', 'threshold': 0.5}) == 'm'


def test_crackjax_predict_takes_a_pinned_file_and_refuses_another_in_one_line(exported, tmp_path):
  from crackjax.deploy import predict_command
  from tests import fixtures

  fixtures.write_image(tmp_path / 'photos' / 'a.png', self_check.self_check_image())
  digest = model_file.file_sha256(exported)
  base = ['--notune_malloc', str(tmp_path / 'photos')]
  assert (
    predict_command.main([f'--model={exported}#sha256={digest}', f'--out={tmp_path / "o"}', *base])
    == 0
  )
  with pytest.raises(SystemExit) as e:
    predict_command.main(
      [f'--model={exported}#sha256={"0" * 64}', f'--out={tmp_path / "p"}', *base]
    )
  message = str(e.value.code)
  assert message.startswith('crackjax-predict: ') and '\n' not in message
  assert f'not the pinned {"0" * 64}' in message and not (tmp_path / 'p').exists()


def test_crackjax_evaluate_model_runs_the_check(exported, tmp_path):
  """Issue 78: crackjax-evaluate --model never ran the check; it refuses an altered file in one
  line before any photo is scored."""
  from crackjax.trainer import evaluate_command
  from tests import fixtures

  altered = rewritten(exported, tmp_path / 'altered.safetensors', params=_colour_only)
  images, masks = fixtures.make_fake_folder(tmp_path / 'folder', n=2)
  with pytest.raises(SystemExit) as e:
    evaluate_command.main(
      [f'--model={altered}', f'--folder={images}:{masks}', f'--out={tmp_path / "scores"}']
    )
  message = str(e.value.code)
  assert message.startswith('crackjax-evaluate: ') and '\n' not in message
  assert str(altered) in message and 'do not give the self check' in message
  assert not (tmp_path / 'scores').exists()
