"""The CPU fast path (conv_impl='blocked') against plain autodiff ('xla')."""

import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crackjax.configs import smoke
from crackjax.engine import mesh as mesh_lib
from crackjax.engine import prefetch
from crackjax.experiment.build import build
from crackjax.models import conv, model_from_config
from crackjax.models.unet import UNet, max_pool_2x2
from crackjax.trainer.loop import train_step_of


def _xla_weight_grad(x, g):
  kernel = jnp.zeros((3, 3, x.shape[-1], g.shape[-1]), x.dtype)
  _, vjp = jax.vjp(lambda k: conv.xla_conv(x, k), kernel)
  return vjp(g)[0]


def _rel_err(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize(
  'shape',
  [
    (2, 8, 12, 3, 4),  # the image layer: few input channels
    (1, 7, 5, 6, 2),  # odd height and width: one-row blocks
    (2, 4, 1100, 2, 3),  # a row wider than a block
    (2, 16, 24, 16, 8),
  ],
)
def test_weight_grad_equals_xla(shape):
  n, h, w, cin, cout = shape
  kx, kg = jax.random.split(jax.random.key(0))
  x = jax.random.normal(kx, (n, h, w, cin))
  g = jax.random.normal(kg, (n, h, w, cout))
  got = jax.jit(conv.conv3x3_weight_grad)(x, g)
  assert got.shape == (3, 3, cin, cout)
  assert _rel_err(got, _xla_weight_grad(x, g)) < 1e-5


def test_weight_grad_of_parts_equals_grad_of_concatenation():
  kx, ky, kg = jax.random.split(jax.random.key(1), 3)
  a = jax.random.normal(kx, (2, 8, 12, 3))
  b = jax.random.normal(ky, (2, 8, 12, 5))
  g = jax.random.normal(kg, (2, 8, 12, 4))
  got = conv.conv3x3_weight_grad((a, b), g)
  assert _rel_err(got, _xla_weight_grad(jnp.concatenate([a, b], -1), g)) < 1e-5


def test_conv_relu_blocked_matches_xla_value_and_gradients():
  ks = jax.random.split(jax.random.key(2), 5)
  a = jax.random.normal(ks[0], (2, 8, 12, 3))
  b = jax.random.normal(ks[1], (2, 8, 12, 5))
  kernel = jax.random.normal(ks[2], (3, 3, 8, 6)) * 0.3
  bias = jax.random.normal(ks[3], (6,)) * 0.1
  proj = jax.random.normal(ks[4], (2, 8, 12, 6))

  def loss(impl, a, b, kernel, bias):
    return jnp.sum(conv.conv3x3_relu((a, b), kernel, bias, impl) * proj)

  results = {}
  for impl in ('xla', 'blocked'):
    f = jax.jit(
      jax.value_and_grad(lambda *args, impl=impl: loss(impl, *args), argnums=(0, 1, 2, 3))
    )
    results[impl] = f(a, b, kernel, bias)
  (v_ref, g_ref), (v, g) = results['xla'], results['blocked']
  assert _rel_err(v, v_ref) < 1e-6
  # Some outputs are negative before the ReLU, so its mask matters.
  assert 0 < float(jnp.mean(conv.conv3x3_relu((a, b), kernel, bias, 'xla') > 0)) < 1
  for got, want in zip(g, g_ref, strict=True):
    assert got.shape == want.shape
    assert _rel_err(got, want) < 1e-5


def test_image_gradient_is_not_computed_for_the_first_layer():
  # The input gradient is dead code when only parameters need gradients: XLA removes it,
  # so the compiled step has no convolution producing a 3-channel gradient.
  x = jnp.ones((1, 8, 8, 3))

  def loss(kernel, bias):
    return jnp.sum(conv.conv3x3_relu((x,), kernel, bias, 'blocked'))

  hlo = (
    jax.jit(jax.grad(loss, argnums=(0, 1)))
    .lower(jnp.ones((3, 3, 3, 4)), jnp.zeros(4))
    .compile()
    .as_text()
  )
  assert 'f32[1,8,8,3]{3,2,1,0} convolution' not in hlo


def test_max_pool_matches_flax_and_its_gradient():
  x = jax.random.normal(jax.random.key(3), (2, 6, 8, 4))  # no ties
  want = nn.max_pool(x, (2, 2), strides=(2, 2))
  np.testing.assert_array_equal(max_pool_2x2(x), want)
  proj = jax.random.normal(jax.random.key(4), want.shape)
  g = jax.grad(lambda x: jnp.sum(max_pool_2x2(x) * proj))(x)
  g_ref = jax.grad(lambda x: jnp.sum(nn.max_pool(x, (2, 2), strides=(2, 2)) * proj))(x)
  np.testing.assert_allclose(g, g_ref, rtol=0, atol=0)


def test_resolve_impl():
  assert conv.resolve_impl('auto') == ('blocked' if jax.default_backend() == 'cpu' else 'xla')
  assert conv.resolve_impl('xla') == 'xla'
  with pytest.raises(ValueError, match="'blocke'"):
    conv.resolve_impl('blocke')
  config = smoke.get_config()
  config.model.conv_impl = 'fast'
  with pytest.raises(ValueError, match="'fast'"):
    model_from_config(config.model.to_dict())


def _batch(seed, b=2, h=32, w=48):
  """Random images whose 'cracks' are their brightest red pixels: a learnable task."""
  rng = np.random.default_rng(seed)
  image = rng.uniform(size=(b, h, w, 3)).astype(np.float32)
  mask = (image[..., :1] > 0.9).astype(np.float32)
  return {'image': image, 'mask': mask}


def _train(config, steps):
  """`steps` train steps (with augmentation) on fixed random batches.

  Returns:
    (losses, initial params, final params).
  """
  experiment = build(config)
  mesh = experiment.states.mesh
  state = experiment.states.fresh((32, 48, 3))
  initial = jax.device_get(state.params)
  step_fn = train_step_of(experiment, state)
  losses = []
  for i in range(steps):
    state, metrics = step_fn(state, mesh_lib.global_batch(_batch(i % 2), mesh))
    losses.append(float(metrics['loss']))
  return np.array(losses), initial, jax.device_get(state.params)


@pytest.mark.slow
def test_short_training_run_blocked_tracks_xla():
  config = smoke.get_config()
  runs = {}
  for impl in ('xla', 'blocked'):
    config.model.conv_impl = impl
    runs[impl] = _train(config, 8)
  (loss_x, init_x, params_x), (loss_b, init_b, params_b) = runs['xla'], runs['blocked']
  # Same parameter names, shapes and initial values whatever the implementation.
  assert jax.tree.structure(init_x) == jax.tree.structure(init_b)
  assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool((a == b).all()), init_x, init_b)))
  # Every step's loss, and the parameters after 8 Adam steps (which depend on every
  # gradient of every layer), agree.
  np.testing.assert_allclose(loss_b, loss_x, rtol=1e-4)
  assert loss_x[-2:].mean() < loss_x[:2].mean()  # it trains
  errs = jax.tree.leaves(jax.tree.map(_rel_err, params_b, params_x))
  assert max(errs) < 1e-4


@pytest.mark.slow
def test_bfloat16_compute_trains_like_float32():
  config = smoke.get_config()
  config.learning_rate = 3e-3
  config.augment.enabled = False
  config.model.conv_impl = 'xla'  # compiles faster; the precision is what is under test
  runs = {}
  for dtype in ('float32', 'bfloat16'):
    config.model.dtype = dtype
    runs[dtype] = _train(config, 80)
  loss32, _, _ = runs['float32']
  loss16, _, params16 = runs['bfloat16']
  assert all(p.dtype == np.float32 for p in jax.tree.leaves(params16))  # params stay f32
  assert np.isfinite(loss16).all()
  print('float32 losses', loss32.round(4), 'bfloat16 losses', loss16.round(4))
  # Both learn, and bf16 ends within 10% of float32's loss (mean of the last 4 steps).
  assert loss16[-4:].mean() < 0.6 * loss16[:2].mean()
  assert loss32[-4:].mean() < 0.6 * loss32[:2].mean()
  assert abs(loss16[-4:].mean() - loss32[-4:].mean()) < 0.1 * loss32[-4:].mean()


def test_bfloat16_activations_float32_parameters_and_logits():
  model = UNet((4, 8, 16, 32, 64), dtype=jnp.bfloat16)
  x = jnp.zeros((1, 32, 48, 3))
  params = jax.eval_shape(model.init, jax.random.key(0), x)['params']
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
  jaxpr = str(jax.make_jaxpr(lambda p: model.apply({'params': p}, x))(params))
  assert 'bf16[1,32,48,4]' in jaxpr  # activations in bfloat16
  assert jax.eval_shape(lambda p: model.apply({'params': p}, x), params).dtype == jnp.float32


def test_prefetch_to_device_keeps_order_and_raises_producer_errors():
  mesh = mesh_lib.make_mesh()

  def batches():
    for i in range(3):
      yield {'x': np.full((2, 1), i, np.float32)}
    raise ValueError('corrupt image 7.jpg')

  it = prefetch.prefetch_to_device(batches(), mesh, size=2)
  got = [float(next(it)['x'][0, 0]) for _ in range(3)]
  assert got == [0.0, 1.0, 2.0]
  with pytest.raises(ValueError, match='7.jpg'):
    next(it)


def test_prefetch_to_device_stops_when_closed():
  mesh = mesh_lib.make_mesh()
  produced = []

  def batches():
    for i in range(1000):
      produced.append(i)
      yield {'x': np.zeros((2, 1), np.float32)}

  it = prefetch.prefetch_to_device(batches(), mesh, size=2)
  next(it)
  it.close()
  time.sleep(0.5)
  n = len(produced)
  time.sleep(0.3)
  assert len(produced) == n < 10
