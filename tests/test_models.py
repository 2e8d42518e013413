"""The paper's U-Net: parameter counts, its up-sampling, its optional input standardisation and
an unknown name (its output shapes and input multiple: tests/test_contracts.py)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crackjax.models import get_model
from crackjax.models.unet import UpConv2x2, standardize_per_image


def _num_params(widths):
  model = get_model('unet', widths=widths)
  params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
  return sum(x.size for x in jax.tree.leaves(params))


def test_parameter_counts_match_the_paper():
  # Paper, Tables V-VIII: 31.03M (64...1024) and, for AigleRN, 7.76M (32...512).
  assert round(_num_params((64, 128, 256, 512, 1024)) / 1e6, 2) == 31.03
  assert round(_num_params((32, 64, 128, 256, 512)) / 1e6, 2) == 7.76


def test_up_sampling_is_transposed_conv_and_skips_concatenate():
  model = get_model('unet', widths=(4, 8, 16))
  params = jax.eval_shape(model.init, jax.random.key(0), jnp.ones((1, 8, 8, 3)))['params']
  kernels = {k: v['kernel'].shape for k, v in params.items() if 'kernel' in v}
  assert kernels['UpConv2x2_0'] == (2, 2, 16, 8)
  # The decoder block after the first up-sampling sees skip (8) + up-sampled (8) channels.
  assert params['ConvBlock_3']['Conv_0']['kernel'].shape == (3, 3, 16, 8)


def test_unknown_model_name():
  with pytest.raises(ValueError, match="'unett'"):
    get_model('unett')


def test_up_conv_equals_flax_conv_transpose():
  # Same parameters, same function as nn.ConvTranspose(k=2, s=2), values and gradients.
  x = jax.random.normal(jax.random.key(1), (2, 5, 7, 6))
  ours, ref = UpConv2x2(4), nn.ConvTranspose(4, (2, 2), strides=(2, 2))
  params = ours.init(jax.random.key(2), x)
  params = jax.tree.map(lambda p: p + 0.1, params)  # non-zero bias too
  np.testing.assert_allclose(ours.apply(params, x), ref.apply(params, x), rtol=1e-5, atol=1e-6)
  loss = lambda m: lambda p: jnp.sum(jnp.sin(m.apply(p, x)))
  g_ours, g_ref = jax.grad(loss(ours))(params), jax.grad(loss(ref))(params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), g_ours, g_ref)


def test_input_norm_image_ignores_each_images_exposure_and_contrast():
  # Per image and channel, x -> a x + b (a > 0) leaves the standardised input, hence the
  # logits, as they were (up to STANDARDIZE_EPSILON's share of each variance, < 1 % here);
  # 'none' sees the change. Each image keeps its own statistics.
  model = get_model('unet', widths=(4, 8, 16), input_norm='image')
  plain = get_model('unet', widths=(4, 8, 16))
  x = jax.random.uniform(jax.random.key(3), (2, 16, 16, 3))
  params = model.init(jax.random.key(0), x)
  a = jnp.array([[[[0.5, 2.0, 1.0]]], [[[3.0, 0.7, 1.5]]]])
  b = jnp.array([[[[0.2, -0.1, 0.0]]], [[[-0.3, 0.4, 0.1]]]])
  np.testing.assert_allclose(
    model.apply(params, a * x + b), model.apply(params, x), rtol=1e-2, atol=1e-3
  )
  assert not np.allclose(plain.apply(params, a * x + b), plain.apply(params, x), atol=1e-2)
  # Not a batch statistic: an image's logits do not depend on the other images of its batch.
  np.testing.assert_allclose(
    model.apply(params, x[:1]), model.apply(params, x)[:1], rtol=1e-5, atol=1e-6
  )
  # The normalised input has zero mean and unit variance per image and channel.
  z = standardize_per_image(a * x + b)
  np.testing.assert_allclose(z.mean(axis=(1, 2)), 0.0, atol=1e-5)
  np.testing.assert_allclose(z.std(axis=(1, 2)), 1.0, rtol=1e-2)


def test_input_norm_unknown_name_is_refused():
  with pytest.raises(ValueError, match=r"input_norm='imag'.*\['none', 'image'\]"):
    get_model('unet', widths=(4, 8, 16), input_norm='imag')
