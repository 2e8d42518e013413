"""Values that make no sense, refused before any work, in one place (issue 78 item 3).

A hostile user's trial at commit dea2c5b: test-time scales anywhere in (0, 4] (0.01 predicted a
5 x 3 px copy; an exported 1e-300 marked every photo 100% crack), a mixture member's scale of
0.1 turned 240 x 141 crops into 24 x 14, ``--mm_per_pixel=inf`` passed the flag check and
crashed after the maps were written, a positive denormal mixture weight reached grain's 38-line
error after the workdir was written, and ``eval.flip`` given as the string "false" turned
mirroring on. Each is refused here in one line naming the flag, field or file and the value;
the rules live in the model file's schema (`crackjax.models.model_schema.TEST_TIME`), which the
flags, configs, crackjax-export's overrides and model files all ask.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import pytest

from crackjax.configs import base
from crackjax.data import mixture
from crackjax.deploy import model_export, predict_command, predictor
from crackjax.evaluation import inference
from crackjax.experiment import validation
from crackjax.models import model_schema


def one_line(error: BaseException) -> str:
  text = str(error.code if isinstance(error, SystemExit) else error)
  assert '\n' not in text, text
  return text


# ------------------------------------------------------------------------ test-time scales


@pytest.mark.parametrize('scale', [0.01, 1e-300, 0.2, 4.5, float('nan'), float('inf')])
def test_a_scale_out_of_the_useful_range_is_refused_everywhere(scale):
  lo, hi = model_schema.SCALE_RANGE
  with pytest.raises(ValueError) as e:
    inference.check_test_time((1.0, scale), False)
  assert f'[{lo:g}, {hi:g}]' in one_line(e.value) and 'scales=' in one_line(e.value)
  with pytest.raises(ValueError, match=r'^--scales=.*expected'):  # crackjax-predict, -evaluate
    inference.test_time_of([str(scale)], None, {})
  with pytest.raises(ValueError, match=r'^eval.scales=.*expected'):  # a run's or file's own
    inference.test_time_of(None, None, {'scales': [scale]})
  with pytest.raises(ValueError, match=r'^--scales=.*expected'):  # crackjax-export's override
    model_export.check_test_time_override({'scales': [scale]}, 'a test')
  with pytest.raises(ValueError, match='test-time scales='):  # the Python API
    predictor.Predictor(Dark(), {}, threshold=0.5, scales=(scale,))
  # A model file that says so is refused by its schema, naming the field.
  meta = {'config': {'eval': {'scales': [scale]}}, 'card': {'test_time': {'scales': [scale]}}}
  found = model_schema.metadata_problems(meta)
  assert [p.split('=')[0] for p in found] == [
    'crackjax.card.test_time.scales',
    'crackjax.config.eval.scales',
  ]
  # And a config, before any data is read.
  config = base.get_config().to_dict()
  config['eval']['scales'] = (scale,)
  with pytest.raises(validation.ConfigError, match=r'config.eval.scales=\('):
    validation.check_config(config)


def test_the_useful_scales_pass():
  assert inference.check_test_time((0.25, 0.5, 1, 2, 4), True) == ((0.25, 0.5, 1.0, 2.0, 4.0), True)
  assert model_export.check_test_time_override({'scales': [0.5, 2]}, 'x')['scales'] == [0.5, 2.0]


class Dark(nn.Module):
  """Crack where the photo is dark; no parameters; a model input of 16 px, as the U-Net's."""

  input_multiple = 16

  @nn.compact
  def __call__(self, images: jax.Array, train: bool = False) -> jax.Array:
    return 40.0 * (0.5 - images.mean(-1, keepdims=True))


def test_a_scale_that_makes_a_photo_smaller_than_one_model_input_is_refused():
  photo = np.full((40, 64, 3), 200, np.uint8)
  small = predictor.Predictor(Dark(), {}, threshold=0.5, scales=(0.25, 1.0))
  with pytest.raises(inference.ScaleTooSmallError) as e:
    small.predict(photo)
  line = one_line(e.value)
  assert 'scale 0.25 makes a 40x64 photo 10x16 px' in line and '(16 px a side)' in line
  assert 'use scales >= 0.4' in line
  # At 0.4 the photo is one model input on its short side: predicted.
  assert predictor.Predictor(Dark(), {}, threshold=0.5, scales=(0.4,))(photo).shape == (40, 64)
  # A photo already smaller than one input is predicted at scale 1, as always.
  assert predictor.Predictor(Dark(), {}, threshold=0.5)(photo[:8, :8]).shape == (8, 8)


def test_crackjax_predict_refuses_a_too_small_scaled_photo_before_any_work(tmp_path):
  import PIL.Image

  from crackjax.deploy.photos import Input

  photos = tmp_path / 'photos'
  photos.mkdir()
  for name, size in (('big.png', (320, 480)), ('small.png', (40, 64))):
    PIL.Image.fromarray(np.full((*size, 3), 200, np.uint8)).save(photos / name)
  files = [Input(p, p.relative_to(photos)) for p in sorted(photos.iterdir())]
  small = predictor.Predictor(Dark(), {}, threshold=0.5, scales=(0.25,))
  with pytest.raises(SystemExit) as e:
    predict_command.check_scaled_sizes(files, small)
  assert one_line(e.value).startswith(f'crackjax-predict: {photos / "small.png"}: scale 0.25')
  predict_command.check_scaled_sizes(files[:1], small)  # the large one alone: fine


# ------------------------------------------------------------------------------- booleans


def test_a_flip_given_as_a_string_is_refused_not_taken_as_true():
  # bool('false') is True: a model file's or run's eval.flip "false" turned mirroring on.
  with pytest.raises(ValueError, match=r"^eval.flip='false': expected true or false"):
    inference.test_time_of(None, None, {'flip': 'false'})
  with pytest.raises(ValueError, match=r"^--flip='false': expected true or false"):
    model_export.check_test_time_override({'flip': 'false'}, 'a test')
  with pytest.raises(ValueError, match="test-time flip='false'"):
    predictor.Predictor(Dark(), {}, threshold=0.5, flip='false')
  found = model_schema.metadata_problems({'config': {'eval': {'flip': 'false'}}})
  assert found == [
    "crackjax.config.eval.flip='false': expected true or false (a boolean, not a string or number)"
  ]
  config = base.get_config().to_dict()
  config['eval']['flip'] = 'false'
  config['eval']['store_degenerate_threshold'] = 'no'
  with pytest.raises(validation.ConfigError) as e:
    validation.check_config(config)
  lines = str(e.value).splitlines()
  assert any(line.startswith("config.eval.flip='false': expected true or false") for line in lines)
  assert any(line.startswith("config.eval.store_degenerate_threshold='no'") for line in lines)
  assert inference.test_time_of(None, None, {'flip': False}) == ((1.0,), False)


def test_a_photo_threshold_out_of_range_is_refused_by_the_same_rule():
  for value in (1.5, -0.1, float('nan'), True, '0.5'):
    assert model_schema.weight_or_none(value), value
    with pytest.raises(ValueError, match=r'^--photo_threshold=.*expected null \(off\) or a weight'):
      model_export.check_test_time_override({'photo_threshold': value}, 'a test')
  found = model_schema.metadata_problems({'card': {'test_time': {'photo_threshold': 2}}})
  assert found[0].startswith('crackjax.card.test_time.photo_threshold=2: expected')


# --------------------------------------------------------------------------- mm_per_pixel


@pytest.mark.parametrize('value', ['inf', 'nan', '0', '-1'])
def test_mm_per_pixel_is_checked_with_the_flags(tmp_path, value):
  # Was: inf passed (inf > 0) and the command crashed after the maps were written. The model
  # named does not exist: the flag's line comes first, before the model is looked for.
  with pytest.raises(SystemExit) as e:
    predict_command.main(
      [
        f'--model={tmp_path / "none.safetensors"}',
        f'--out={tmp_path / "o"}',
        '--notune_malloc',
        f'--mm_per_pixel={value}',
        str(tmp_path),
      ]  # fmt: skip
    )
  line = str(e.value.code).splitlines()[0]  # a flag's line (then the --help pointer)
  assert line.startswith('crackjax-predict: flag --mm_per_pixel=')
  assert '--mm_per_pixel must be a finite number > 0' in line, line
  assert not (tmp_path / 'o').exists()


# ------------------------------------------------------------------------------- mixtures


def mix(**weights: float) -> dict:
  return {'name': 'mixture', 'mix': {name: {'weight': w} for name, w in weights.items()}}


@pytest.mark.parametrize('weight', [5e-324, 1e-310, 1e-12])
def test_a_weight_whose_share_is_no_share_is_refused_with_the_config(weight):
  found = mixture.problems(mix(crackforest=1.0, aiglern=weight))
  assert len(found) == 1 and found[0].startswith(f'config.data.mix.aiglern.weight={weight!r} is ')
  assert 'never drawn' in found[0]
  config = base.get_config().to_dict()
  config['data'] = {**config['data'], **mix(crackforest=1.0, aiglern=weight)}
  with pytest.raises(validation.ConfigError, match='config.data.mix.aiglern.weight='):
    validation.check_config(config)  # before the data is prepared or the workdir written
  assert mixture.problems(mix(crackforest=1.0, aiglern=1e-6)) == []


def test_a_member_scale_that_shrinks_photos_below_the_crop_is_refused():
  # Issue 78: a member's scale of 0.1 turned 240 x 141 crops into 24 x 14 (mirrored up to the
  # 128 x 128 crop: a crop of a few repeated pixels).
  photos = [{'image': np.zeros((141, 240, 3), np.uint8)} for _ in range(40)]
  wide = [{'image': np.zeros((640, 640, 3), np.uint8)} for _ in range(3)]
  source = mixture.MixedSource(['aiglern', 'crack500'], [photos, wide], [1, 1], [0.1, 0.5])
  data = {'name': 'mixture', 'input_size': (128, 128)}
  found = mixture.crop_problems(data, source)
  assert len(found) == 1, found
  assert found[0].startswith('config.data.mix.aiglern.scale=0.1 resizes its train photos')
  assert '141x240) to 14x24, smaller than the training crop' in found[0]
  assert 'use a scale >= 0.91' in found[0]
  source = mixture.MixedSource(['aiglern'], [photos], [1], [0.91])
  assert mixture.crop_problems(data, source) == []
  # A scale of 1 (mirrored up where a photo is smaller, as before) is never judged.
  source = mixture.MixedSource(['aiglern'], [photos[:1]], [1], [1.0])
  assert mixture.crop_problems({**data, 'input_size': (256, 256)}, source) == []
