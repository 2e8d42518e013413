"""Training for domain shift (issue 55): photometric augmentation, the random scale before the
crop, the fingerprint of runs from before them, and the leave-one-dataset-out plan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crackjax.configs import base, lodo
from crackjax.data import augment, loader, photometric
from crackjax.experiment import validation
from crackjax.runs import identity

STRONG = dict(
  brightness=0.3,
  contrast=0.5,
  gamma=0.5,
  saturation=0.8,
  greyscale=0.5,
  blur=0.5,
  blur_sigma=2.0,
  noise=0.5,
  noise_std=0.1,
)
jit_photometric = jax.jit(photometric.photometric, static_argnames='strengths')
STRONG_STRENGTHS = photometric.Strengths(**STRONG)


def _images(b=4, h=24, w=20, seed=0):
  return jnp.asarray(np.random.default_rng(seed).random((b, h, w, 3)), jnp.float32)


def test_photometric_shapes_range_determinism():
  x = _images()
  a = jit_photometric(jax.random.key(1), x, STRONG_STRENGTHS)
  b = jit_photometric(jax.random.key(1), x, STRONG_STRENGTHS)
  c = jit_photometric(jax.random.key(2), x, STRONG_STRENGTHS)
  assert a.shape == x.shape and a.dtype == x.dtype
  assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # same key, same images
  assert not np.allclose(np.asarray(a), np.asarray(c))
  # Each example draws its own changes: two copies of one image come out different.
  same = jnp.stack([x[0], x[0]])
  out = jit_photometric(jax.random.key(3), same, STRONG_STRENGTHS)
  assert not np.allclose(np.asarray(out[0]), np.asarray(out[1]))


def test_photometric_neutral_is_identity_and_each_change_acts():
  x = _images()
  np.testing.assert_allclose(
    np.asarray(jit_photometric(jax.random.key(0), x)), np.asarray(x), atol=1e-6
  )
  # Greyscale with probability 1: the three channels equal, the BT.601 luma.
  g = np.asarray(jit_photometric(jax.random.key(0), x, photometric.Strengths(greyscale=1.0)))
  luma = np.asarray(x) @ np.array([0.299, 0.587, 0.114])
  np.testing.assert_allclose(g[..., 0], luma, atol=1e-5)
  np.testing.assert_allclose(g[..., 0], g[..., 2], atol=1e-6)
  # A blur with probability 1 keeps a constant image and smooths a random one.
  flat = jnp.full((2, 16, 16, 3), 0.4)
  np.testing.assert_allclose(
    np.asarray(
      jit_photometric(jax.random.key(0), flat, photometric.Strengths(blur=1.0, blur_sigma=2.0))
    ),
    0.4,
    atol=1e-5,
  )
  blurred = np.asarray(
    jit_photometric(jax.random.key(0), x, photometric.Strengths(blur=1.0, blur_sigma=2.0))
  )
  assert np.abs(np.diff(blurred, axis=1)).mean() < np.abs(np.diff(np.asarray(x), axis=1)).mean()
  # Brightness moves the mean, by at most its range.
  bright = np.asarray(
    jit_photometric(jax.random.key(0), x * 0.5 + 0.25, photometric.Strengths(brightness=0.2))
  )
  shift = bright.mean(axis=(1, 2, 3)) - np.asarray(x * 0.5 + 0.25).mean(axis=(1, 2, 3))
  assert np.all(np.abs(shift) <= 0.2 + 1e-6) and np.abs(shift).max() > 1e-3


def test_photometric_strengths_check_their_probabilities():
  with pytest.raises(ValueError, match=r'augment\.photometric\.blur is a probability, got 1\.5'):
    photometric.Strengths(blur=1.5)
  with pytest.raises(ValueError, match=r'augment\.photometric\.noise is a probability'):
    photometric.Strengths(noise=-0.1)


def test_augment_fn_leaves_masks_and_old_configs_alone():
  c = base.get_config()
  x, mask = (
    _images(),
    jnp.asarray(np.random.default_rng(1).random((4, 24, 20, 1)) > 0.8, jnp.float32),
  )
  plain = c.augment.to_dict()
  old = {k: v for k, v in plain.items() if k != 'photometric'}  # a config.json from before
  rng = jax.random.key(5)
  a_img, a_mask = jax.jit(augment.augment_fn(plain))(rng, x, mask)
  o_img, o_mask = jax.jit(augment.augment_fn(old))(rng, x, mask)
  np.testing.assert_array_equal(np.asarray(a_img), np.asarray(o_img))  # disabled: as before
  np.testing.assert_array_equal(np.asarray(a_mask), np.asarray(o_mask))
  on = dict(plain, photometric={**plain['photometric'], 'enabled': True, **STRONG})
  p_img, p_mask = jax.jit(augment.augment_fn(on))(rng, x, mask)
  np.testing.assert_array_equal(np.asarray(p_mask), np.asarray(a_mask))  # the mask untouched
  assert not np.allclose(np.asarray(p_img), np.asarray(a_img))


def test_photometric_and_scale_range_checked():
  c = lodo.get_config('crack500,photometric,smoke')
  c.augment.photometric.blur = 1.5
  c.data.scale_range = (2.0, 0.5)
  with pytest.raises(validation.ConfigError) as e:
    validation.check_config(c)
  assert 'augment.photometric.blur=1.5' in str(e.value)
  assert 'data.scale_range=(2.0, 0.5)' in str(e.value)


class _Source(list):
  pass


def test_scale_range_resizes_before_the_crop():
  image = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
  mask = np.zeros((64, 64, 1), np.uint8)
  mask[:, 30:32] = 1
  source = _Source([{'image': image, 'mask': mask, 'name': b'a'}])
  kw = dict(seed=0, input_size=(32, 32), noise_std=0.0)
  same = loader.load_example(source, 0, 3, **kw)
  neutral = loader.load_example(source, 0, 3, **kw, scale_range=(1.0, 1.0))
  np.testing.assert_array_equal(same['image'], neutral['image'])  # nothing drawn at (1, 1)
  widths = set()
  for position in range(40):
    ex = loader.load_example(source, 0, position, **kw, scale_range=(0.5, 2.0))
    assert ex['image'].shape == (32, 32, 3) and ex['mask'].shape == (32, 32, 1)
    assert set(np.unique(ex['mask'])) <= {0.0, 1.0}
    row = ex['mask'][0, :, 0]
    if row.any():
      widths.add(int(row.sum()))
  assert min(widths) < 2 < max(widths)  # the 2-pixel crack thinner and wider
  again = loader.load_example(source, 0, 7, **kw, scale_range=(0.5, 2.0))
  first = loader.load_example(source, 0, 7, **kw, scale_range=(0.5, 2.0))
  np.testing.assert_array_equal(again['image'], first['image'])


def test_jpeg_recompression_changes_the_image_only_and_is_seeded():
  rng = np.random.default_rng(1)
  # A smooth photo with a sharp dark crack: JPEG blurs and rings around the edge.
  image = np.full((64, 64, 3), 140, np.uint8) + rng.integers(0, 20, (64, 64, 3), dtype=np.uint8)
  image[:, 30:32] = 20
  mask = np.zeros((64, 64, 1), np.uint8)
  mask[:, 30:32] = 1
  source = _Source([{'image': image, 'mask': mask, 'name': b'a'}])
  kw = dict(seed=0, input_size=(32, 32), noise_std=0.0)
  plain = loader.load_example(source, 0, 5, **kw)
  never = loader.load_example(source, 0, 5, **kw, jpeg=(0.0, 30, 95))
  np.testing.assert_array_equal(plain['image'], never['image'])  # nothing drawn when never
  ex = loader.load_example(source, 0, 5, **kw, jpeg=(1.0, 5, 5))
  assert ex['image'].shape == (32, 32, 3) and ex['image'].dtype == np.float32
  assert 0.0 <= ex['image'].min() and ex['image'].max() <= 1.0
  assert np.abs(ex['image'] - plain['image']).max() > 8 / 255  # quality 5 visibly changes it
  np.testing.assert_array_equal(ex['mask'], plain['mask'])  # the crop and the mask as without
  again = loader.load_example(source, 0, 5, **kw, jpeg=(1.0, 5, 5))
  np.testing.assert_array_equal(again['image'], ex['image'])
  # Quality 95 stays close; the share compressed follows the probability.
  smooth = np.broadcast_to(np.linspace(60, 200, 64, dtype=np.uint8)[None, :, None], (64, 64, 3))
  smooth = np.ascontiguousarray(smooth)
  smooth[:, 30:32] = 20
  error = {q: np.abs(loader.recompress(smooth, q).astype(int) - smooth).mean() for q in (5, 95)}
  assert loader.recompress(smooth, 95).shape == smooth.shape and error[95] < error[5] / 2
  changed = [
    not np.array_equal(
      loader.load_example(source, 0, i, **kw, jpeg=(0.5, 5, 5))['image'],
      loader.load_example(source, 0, i, **kw)['image'],
    )
    for i in range(40)
  ]
  assert 10 < sum(changed) < 30


def test_jpeg_fields_checked_and_old_runs_keep_their_fingerprint():
  c = lodo.get_config('crack500,jpeg,smoke')
  c.data.jpeg_probability = 1.5
  c.data.jpeg_quality = (90, 30)
  with pytest.raises(validation.ConfigError) as e:
    validation.check_config(c)
  assert 'data.jpeg_probability=1.5' in str(e.value)
  assert 'data.jpeg_quality=(90, 30)' in str(e.value)
  new = base.get_config().to_dict()
  old = {**new, 'data': {k: v for k, v in new['data'].items() if not k.startswith('jpeg_')}}
  assert identity.fingerprint(old) == identity.fingerprint(new)
  fp = identity.fingerprint(lodo.get_config('gaps384,jpeg,smoke').to_dict())
  assert fp['data.jpeg_probability'] == 0.5 and fp['data.jpeg_quality'] == [30, 95]


def test_old_runs_keep_their_fingerprint():
  c = base.get_config().to_dict()
  old = {**c, 'data': {k: v for k, v in c['data'].items() if k != 'scale_range'}}
  old['augment'] = {k: v for k, v in c['augment'].items() if k != 'photometric'}
  # model.input_norm came after the plateau run started: at 'none' that run resumes.
  old['model'] = {k: v for k, v in c['model'].items() if k != 'input_norm'}
  assert c['model']['input_norm'] == 'none'
  assert identity.fingerprint(old) == identity.fingerprint(c)
  standardized = lodo.get_config('gaps384,jpeg_standardize,smoke').to_dict()
  assert identity.fingerprint(standardized)['model.input_norm'] == 'image'
  changed = lodo.get_config('gaps384,photometric_scale,smoke').to_dict()
  fp = identity.fingerprint(changed)
  assert fp['data.scale_range'] == [0.5, 2.0] and fp['augment.photometric.enabled'] is True


def test_lodo_plan():
  for held_out in lodo.MEMBERS:
    c = lodo.get_config(f'{held_out},base,smoke')
    assert held_out not in c.data.mix
    assert sorted(c.data.mix) == sorted(m for m in lodo.MEMBERS if m != held_out)
    assert c.data.test_split == 'valid'  # epochs scored on the four's validation parts
  short = lodo.get_config('crackforest')
  assert (short.steps_per_epoch, short.num_epochs) == (250, 4)
  for bad in ('', 'nowhere', 'crack500,nothing', 'crack500,base,forever'):
    with pytest.raises(ValueError, match='configs/lodo.py'):
      lodo.get_config(bad)


@pytest.mark.parametrize('recipe', list(lodo.RECIPES))
def test_every_lodo_recipe_is_a_valid_config_of_every_fold(recipe):
  """Each recipe of configs/lodo.py (the recipes' changes applied before the held-out member
  leaves the mixture) passes the config checks for every held-out member and budget."""
  for held_out in lodo.MEMBERS:
    for budget in lodo.BUDGETS:
      c = lodo.get_config(f'{held_out},{recipe},{budget}')
      assert held_out not in c.data.mix, (held_out, recipe, budget)
      validation.check_config(c, training=False)


def test_the_sample_weight_and_crop_recipes():
  weighted = lodo.get_config('crackforest,sqrt_size,short')
  assert {m: weighted.data.mix[m].weight for m in weighted.data.mix} == {
    m: w for m, w in lodo.SQRT_SIZE_WEIGHTS.items() if m != 'crackforest'
  }
  for budget in ('short', 'gpu'):
    crop, plain = (lodo.get_config(f'gaps384,{r},{budget}') for r in ('crop256', 'base'))
    assert crop.data.input_size == (256, 256) and plain.data.input_size == (128, 128)
    # The same pixels per step as the base recipe at that budget.
    assert crop.batch_size * 256**2 == plain.batch_size * 128**2
