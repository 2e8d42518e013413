"""The downward width rule (issue 76 item 3, crackjax/evaluation/width_rule.py): a photo whose
predicted cracks are wide is predicted again at half size, in Predictor, crackjax-predict,
crackjax-evaluate and the model file.

The rule's own tests use a stub model whose output the test draws (crack where the photo is
dark), so they are about the rule, not about what a trained model finds."""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

import flax.linen as nn
import jax
import numpy as np
import pytest

from crackjax.deploy import mask_analysis, predict_command, predictor, self_check
from crackjax.evaluation import width_rule
from crackjax.evaluation.eval_plan import EvalPlan
from crackjax.models import hub, model_file
from crackjax.runs import identity
from crackjax.trainer import evaluate_command, scoring
from tests import fixtures

BACKGROUND, CRACK = 200, 20  # uint8 grey levels of the synthetic photos


class Dark(nn.Module):
  """Crack probability ~1 where the photo is dark (grey < 0.5), ~0 elsewhere; no parameters."""

  @nn.compact
  def __call__(self, images: jax.Array, train: bool = False) -> jax.Array:
    return 40.0 * (0.5 - images.mean(-1, keepdims=True))


def road(h: int, w: int, crack_px: int = 0) -> np.ndarray:
  """A grey uint8 photo with a horizontal dark crack `crack_px` rows wide across it (0: none)."""
  image = np.full((h, w, 3), BACKGROUND, np.uint8)
  top = h // 2 - crack_px // 2
  image[top : top + crack_px] = CRACK
  return image


def dark_map(image: np.ndarray) -> np.ndarray:
  """The stub model's map of a photo (uint8 or float in [0, 1]), without a model."""
  grey = np.asarray(image, np.float32)
  grey = grey / 255.0 if np.asarray(image).dtype == np.uint8 else grey
  return np.asarray(jax.nn.sigmoid(40.0 * (0.5 - grey.mean(-1))), np.float32)


def stub(**kwargs) -> predictor.Predictor:
  return predictor.Predictor(Dark(), {}, threshold=0.5, **kwargs)


# ------------------------------------------------------------------------------- the rule


def test_a_wide_crack_photo_goes_to_half_size():
  photo = road(96, 160, crack_px=15)
  prob, choice = stub(width_rule=6).predict(photo)
  assert choice.halved and choice.scales == (0.5,)
  assert choice.width_px == pytest.approx(15, abs=1)
  assert choice.columns() == {'scale': '0.5', 'rule_width_px': choice.width_px}
  # The map is the photo's at half size, resized back, as scales=(0.5,) gives it.
  np.testing.assert_array_equal(prob, stub(scales=(0.5,))(photo))
  assert not np.array_equal(prob, stub()(photo))


def test_a_thin_crack_photo_stays_at_scale_1():
  photo = road(96, 160, crack_px=3)
  prob, choice = stub(width_rule=6).predict(photo)
  assert not choice.halved and choice.scales == (1.0,)
  assert choice.width_px == pytest.approx(3)
  np.testing.assert_array_equal(prob, stub()(photo))
  # The same photo under a rule narrower than its cracks goes to half size: the width decides.
  assert stub(width_rule=2).predict(photo)[1].halved


def test_a_crack_free_photo_stays_at_scale_1():
  photo = road(96, 160)
  prob, choice = stub(width_rule=6).predict(photo)
  assert choice == width_rule.Choice((1.0,), None, False)
  assert choice.columns() == {'scale': '1', 'rule_width_px': None}
  np.testing.assert_array_equal(prob, stub()(photo))


def test_a_few_wide_specks_are_too_little_skeleton_to_halve_a_photo():
  # A 9 x 9 blob: wide (9 px), but its skeleton is a few pixels, under MIN_SKELETON_PIXELS.
  photo = road(96, 160)
  photo[40:49, 70:79] = CRACK
  _, choice = stub(width_rule=2).predict(photo)
  assert choice.width_px is not None and choice.width_px > 2
  assert not choice.halved and choice.scales == (1.0,)
  found = width_rule.measure(dark_map(photo), 0.5)
  assert 0 < found.skeleton_pixels < width_rule.MIN_SKELETON_PIXELS


def test_the_rule_off_is_the_plain_prediction_and_the_photos_own_scales_stay():
  photo = road(96, 160, crack_px=15)
  prob, choice = stub().predict(photo)
  assert choice == width_rule.Choice((1.0,), None, False) and stub().width_rule is None
  np.testing.assert_array_equal(prob, stub()(photo))
  # Under other test-time scales, a photo that stays keeps them (and says so).
  _, kept = stub(scales=(1.0, 2.0), width_rule=20).predict(photo)
  assert kept.scales == (1.0, 2.0) and kept.columns()['scale'] == '1+2'


def test_a_tiled_large_photo_goes_to_half_size_as_whole_ones_do():
  photo = road(300, 420, crack_px=15)
  tiled = stub(tile_size=128, width_rule=6)
  assert tiled.num_tiles(300, 420) > 1
  prob, choice = tiled.predict(photo)
  assert choice.halved
  np.testing.assert_allclose(prob, stub(tile_size=128, scales=(0.5,))(photo), atol=1e-6)


def test_the_widths_are_mask_analysis_widths():
  rng = np.random.default_rng(0)
  masks = [rng.random((40, 50)) > p for p in (0.3, 0.6, 0.9)]
  masks += [np.ones((20, 30), bool), np.zeros((20, 30), bool)]
  bar = np.zeros((30, 70), bool)
  bar[10:17, :] = True
  masks.append(bar)
  for mask in masks:
    np.testing.assert_array_equal(
      np.sort(width_rule.skeleton_widths(mask)), np.sort(mask_analysis.analyse(mask).widths)
    )
  assert np.median(width_rule.skeleton_widths(bar)) == 7


def test_scoring_predicts_and_counts_with_the_plans_rule():
  from crackjax.engine import train_state

  state = train_state.inference_state(Dark().apply, {})
  widths = {'wide': 13, 'thin': 3, 'free': 0}
  examples = [
    {
      'name': name,
      'image': road(64, 96, px).astype(np.float32) / 255.0,
      'mask': (road(64, 96, px)[..., :1] == CRACK).astype(np.uint8),
    }
    for name, px in widths.items()
  ]

  def scored(**plan):
    plan = EvalPlan(dataset='x', folder=None, split='test', protocols=('strict',), **plan)
    out = scoring.stream_score(plan, Dark(), state, examples, operating_points={'run': 0.5})
    # Each photo's own figures at 0.5 (its OIS threshold's ties are broken by the whole set's).
    keys = ('fixed_precision', 'fixed_recall', 'fixed_f1')
    return out.choices, [
      tuple(getattr(r, k) for k in keys) for r in out.results['strict'].per_image
    ]

  choices, rows = scored(width_rule=width_rule.WidthRule(6.0, 0.5))
  assert [c.halved for c in choices] == [True, False, False]
  assert [c.columns()['scale'] for c in choices] == ['0.5', '1', '1']
  plain_choices, plain = scored()
  assert plain_choices == [width_rule.Choice((1.0,), None)] * 3
  _, half = scored(scales=(0.5,))
  # Each photo counted on the map the rule chose: the wide one's at half size, the others' as
  # they are; and the wide one's counts are not the plain ones.
  assert rows == [half[0], plain[1], plain[2]] and rows[0] != plain[0]


# ------------------------------------------------------------------------------- values


@pytest.mark.parametrize(
  'text, value',
  [
    ('6', 6.0),
    ('7.5', 7.5),
    ('off', None),
    ('OFF', None),
    ('none', None),
    ('1', 1.0),
    ('100', 100.0),
  ],
)
def test_a_width_or_off_is_taken(text, value):
  assert width_rule.parse(text) == value


@pytest.mark.parametrize('text', ['abc', 'nan', 'inf', '-3', '0', '0.5', '101', ''])
def test_anything_else_is_one_line_naming_the_flag(text):
  with pytest.raises(
    ValueError, match=r'--width_rule=.*expected a finite width in pixels in \[1, 100\], or off'
  ) as e:
    width_rule.parse(text)
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('value', [True, '6', float('nan'), 0, 500, [6]])
def test_a_bad_value_from_a_file_or_caller_is_refused(value):
  with pytest.raises(ValueError, match='eval.width_rule='):
    width_rule.check(value, 'eval.width_rule')
  with pytest.raises(ValueError, match='width_rule'):
    stub(width_rule=value)


def test_the_flag_beats_the_files_default_and_an_old_config_is_off():
  assert width_rule.of_command(None, {'width_rule': 6.0}) == 6.0
  assert width_rule.of_command('off', {'width_rule': 6.0}) is None
  assert width_rule.of_command('8', {'width_rule': 6.0}) == 8.0
  assert width_rule.of_command(None, {'scales': (1.0,)}) is None  # from before the field
  assert width_rule.of_command(None, None) is None


def test_the_field_is_out_of_the_runs_fingerprint():
  # A run recorded before eval.width_rule resumes: the field (None) changes no fingerprint.
  from crackjax.configs import base

  config = base.get_config()
  now = json.loads(config.to_json_best_effort())
  before = json.loads(config.to_json_best_effort())
  del before['eval']['width_rule']
  assert now['eval']['width_rule'] is None
  assert identity.fingerprint(now) == identity.fingerprint(before)


def test_a_config_with_a_bad_width_rule_is_refused():
  from crackjax.configs import smoke
  from crackjax.experiment import validation

  config = smoke.get_config()
  config.eval.width_rule = 0.0
  with pytest.raises(validation.ConfigError, match=r'config.eval.width_rule=0.0: expected'):
    validation.check_config(config, training=False)
  config.eval.width_rule = 6.0
  validation.check_config(config, training=False)


# ------------------------------------------------------------------------------- the file


RELEASED = 'roads-unet-cpu'


def rewritten(out: Path, change) -> Path:
  """The released model file written again to `out` with its metadata changed by `change`
  (a function of the decoded metadata, in place)."""
  loaded = model_file.read(hub.resolve(RELEASED))
  meta = json.loads(
    json.dumps({k: v for k, v in loaded.meta.items() if k not in ('format', 'requires')})
  )
  change(meta)
  model_file.write(
    out, params=jax.tree.map(np.asarray, loaded.params), batch_stats=loaded.batch_stats, meta=meta
  )
  return out


def with_rule(value, why='chosen on the validation parts (bench/width_scale.py --choose)'):
  def change(meta):
    meta['config']['eval']['width_rule'] = value
    meta['card']['test_time'] = {'width_rule': value, 'chosen_by': why}

  return change


def test_a_files_width_rule_round_trips_and_is_the_predictors_default(tmp_path):
  path = rewritten(tmp_path / 'ruled.safetensors', with_rule(6.0))
  loaded = model_file.read(path)
  assert loaded.card['test_time']['width_rule'] == 6.0
  assert predictor.Predictor.from_pretrained(path).width_rule == 6.0
  assert predictor.Predictor.from_pretrained(path, width_rule=None).width_rule is None


def test_an_old_file_without_the_field_predicts_as_before():
  from crackjax.evaluation import inference
  from crackjax.experiment import restored

  released = predictor.Predictor.from_pretrained(RELEASED)
  assert released.width_rule is None
  photo = road(64, 96, crack_px=15)  # 64 x 96: a whole bucket, nothing padded
  prob, choice = released.predict(photo)
  assert choice == width_rule.Choice((1.0,), None, False)
  run = restored.load_model(RELEASED)
  step = jax.jit(functools.partial(inference.predict_step, apply_fn=run.model.apply))
  direct = np.asarray(step(run.params, photo[None].astype(np.float32) / 255.0))[0, ..., 0]
  np.testing.assert_allclose(prob, direct, atol=1e-6)


@pytest.mark.parametrize('where', ['config', 'card'])
@pytest.mark.parametrize('value', [0, 'wide', 500.0, True])
def test_a_malformed_width_rule_in_a_file_is_one_line_naming_it(tmp_path, where, value):
  def change(meta):
    with_rule(6.0)(meta)
    if where == 'config':
      meta['config']['eval']['width_rule'] = value
    else:
      meta['card']['test_time']['width_rule'] = value

  path = rewritten(tmp_path / 'bad.safetensors', change)
  field = (
    'crackjax.config.eval.width_rule' if where == 'config' else 'crackjax.card.test_time.width_rule'
  )
  with pytest.raises(model_file.ModelFileError) as e:
    model_file.read_metadata(path)
  message = str(e.value)
  assert str(path) in message and f'{field}={value!r}: expected' in message and '\n' not in message


# ------------------------------------------------------------------------------- commands


@pytest.fixture
def dark_model(monkeypatch):
  """crackjax-predict and crackjax-evaluate with the released model's file but the stub's
  maps (and no self check, which the stub's maps would fail)."""
  monkeypatch.setattr(
    predictor.Predictor, '_predict', lambda self, image, progress=None: dark_map(image)
  )
  monkeypatch.setattr(self_check, 'verify', lambda run, make: None)

  def maps(params, model, images, *, batch_stats=None, scales=(1.0,), flip=False):
    del params, model, batch_stats, flip
    for image in images:
      yield predictor.test_time_average(dark_map, predictor.as_float_image(image), scales=scales)

  monkeypatch.setattr(scoring, 'predict_probabilities', maps)


def photos(folder: Path) -> Path:
  fixtures.write_image(folder / 'wide.png', road(64, 96, crack_px=15))
  fixtures.write_image(folder / 'thin.png', road(64, 96, crack_px=3))
  fixtures.write_image(folder / 'free.png', road(64, 96))
  return folder


def test_crackjax_predict_writes_each_photos_scale_and_width(dark_model, tmp_path, capsys):
  folder = photos(tmp_path / 'photos')
  base = [f'--model={RELEASED}', '--threshold=0.5', '--notune_malloc', str(folder)]
  assert predict_command.main([f'--out={tmp_path / "on"}', '--width_rule=6', *base]) == 0
  assert 'predicted again at half size' in capsys.readouterr().err
  rows = {r['name']: r for r in csv.DictReader((tmp_path / 'on' / 'measurements.csv').open())}
  assert {n: r['scale'] for n, r in rows.items()} == {'wide': '0.5', 'thin': '1', 'free': '1'}
  assert float(rows['wide']['rule_width_px']) == pytest.approx(15, abs=1)
  assert float(rows['thin']['rule_width_px']) == 3 and rows['free']['rule_width_px'] == ''
  # Off (the released file's default): every photo at scale 1, no width.
  assert predict_command.main([f'--out={tmp_path / "off"}', *base]) == 0
  rows = list(csv.DictReader((tmp_path / 'off' / 'measurements.csv').open()))
  assert {(r['scale'], r['rule_width_px']) for r in rows} == {('1', '')}


def test_crackjax_evaluate_scores_with_the_rule_and_writes_its_columns(
  dark_model, tmp_path, capsys
):
  images, masks = tmp_path / 'images', tmp_path / 'masks'
  photos(images)
  for name, px in (('wide', 15), ('thin', 3), ('free', 0)):
    mask = road(64, 96, crack_px=px)[..., 0] == CRACK
    fixtures.write_image(masks / f'{name}.png', (mask * 255).astype(np.uint8))
  argv = [f'--model={RELEASED}', f'--folder={images}:{masks}', '--protocols=strict', '--workers=1']
  assert evaluate_command.main([*argv, f'--out={tmp_path / "on"}', '--width_rule=6']) == 0
  out = capsys.readouterr().out
  assert 'width rule 6 px' in out and '1 of 3 photo(s) predicted again at scale 0.5' in out
  (table,) = (tmp_path / 'on').glob('*/eval_per_image.csv')
  rows = {r['name']: r for r in csv.DictReader(table.open())}
  assert {n: r['scale'] for n, r in rows.items()} == {'wide': '0.5', 'thin': '1', 'free': '1'}
  assert evaluate_command.main([*argv, f'--out={tmp_path / "off"}']) == 0
  (table,) = (tmp_path / 'off').glob('*/eval_per_image.csv')
  assert 'scale' not in next(csv.DictReader(table.open()))


@pytest.mark.parametrize(
  'flag', ['--width_rule=abc', '--width_rule=0', '--width_rule=nan', '--width_rule=200']
)
def test_a_bad_flag_is_one_line_before_any_work(tmp_path, flag):
  folder = photos(tmp_path / 'photos')
  for main, argv in (
    (predict_command.main, [f'--model={RELEASED}', f'--out={tmp_path / "o"}', str(folder)]),
    (
      evaluate_command.main,
      [f'--model={RELEASED}', f'--out={tmp_path / "o"}', f'--folder={folder}:{folder}'],
    ),
  ):
    with pytest.raises(SystemExit) as e:
      main([*argv, flag])
    line, advice = str(e.value.code).split('\n')  # the scaffold's flag error: + '--help'
    assert f'flag {flag}: --width_rule must be a finite width in pixels in [1, 100], or off' in line
    assert advice == 'Pass --help for the list of flags.' and not (tmp_path / 'o').exists()


def test_crackjax_export_stores_the_rule_with_how_it_was_chosen(smoke_run, tmp_path, capsys):
  from crackjax.deploy import export_command

  out = tmp_path / 'ruled.safetensors'
  why = 'best mean strict F1 on the validation parts (bench/width_scale.py --choose)'
  argv = [f'--workdir={smoke_run}', f'--out={out}', '--format=model']
  assert export_command.main([*argv, '--width_rule=6', f'--test_time_chosen_by={why}']) is None
  assert f"Test-time defaults {{'width_rule': 6.0}}: {why}." in capsys.readouterr().out
  loaded = model_file.read(out)
  assert loaded.card['test_time'] == {'width_rule': 6.0, 'chosen_by': why}
  assert loaded.meta['config']['eval']['width_rule'] == 6.0
  assert predictor.Predictor.from_pretrained(out).width_rule == 6.0
  # Off, stated: the file says so; a width without its reason, or a bad one, is refused.
  off = tmp_path / 'off.safetensors'
  export_command.main([f'--workdir={smoke_run}', f'--out={off}', '--format=model',
                       '--width_rule=off', '--test_time_chosen_by=x'])  # fmt: skip
  assert model_file.read(off).card['test_time'] == {'width_rule': None, 'chosen_by': 'x'}
  assert predictor.Predictor.from_pretrained(off).width_rule is None
  for flags, says in (
    (['--width_rule=6'], 'need --test_time_chosen_by'),
    (['--width_rule=abc', '--test_time_chosen_by=x'], '--width_rule=abc: expected a finite'),
    (['--width_rule=0', '--test_time_chosen_by=x'], '--width_rule=0: expected a finite'),
  ):
    with pytest.raises(SystemExit) as e:
      export_command.main([*argv, '--overwrite', *flags])
    assert says in str(e.value.code) and '\n' not in str(e.value.code)


def test_predict_speed_times_the_rule_as_a_test_time_entry():
  bench = fixtures.load_bench('predict_speed')
  assert bench.width_rule_entry('width:6') == 6.0
  assert bench.width_rule_entry('2') is None and bench.width_rule_entry('1:flip') is None
  with pytest.raises(SystemExit, match='--width_rule=0: expected a finite width'):
    bench.main(['--test_time=width:0'])  # refused before anything is timed
