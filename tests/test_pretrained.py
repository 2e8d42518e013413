"""ImageNet initialisation from a local file (crackjax/models/pretrained.py): torchvision's VGG16,
VGG16-BN and ResNet-50 names map onto the full-width models with the right shapes (built
abstractly); a synthetic file loads into reduced models (transposed, every shape checked, the
rest from scratch, all reported); the folded input normalisation reproduces the original first
layer; wrong files fail with the key and both shapes; a new run without a file says it starts
from scratch."""

import json
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from crackjax.configs import compare
from crackjax.engine import mesh as mesh_lib
from crackjax.engine import train_state
from crackjax.experiment.build import build
from crackjax.models import get_model, pretrained, pretrained_layouts
from crackjax.models.fcn8s import IMAGENET_MEAN_RGB
from crackjax.trainer import loop

# torchvision's VGG16 configuration 'D': channels, 'M' a max-pool.
VGG16_CFG = (64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M')


def torchvision_vgg16(batch_norm: bool) -> dict[str, tuple[int, ...]]:
  """Names and shapes of torchvision's vgg16(_bn)().state_dict(), written out independently."""
  shapes, index, cin = {}, 0, 3
  for v in VGG16_CFG:
    if v == 'M':
      index += 1
      continue
    shapes[f'features.{index}.weight'] = (v, cin, 3, 3)
    shapes[f'features.{index}.bias'] = (v,)
    if batch_norm:
      for name in ('weight', 'bias', 'running_mean', 'running_var'):
        shapes[f'features.{index + 1}.{name}'] = (v,)
      shapes[f'features.{index + 1}.num_batches_tracked'] = ()
    index += 3 if batch_norm else 2
    cin = v
  for i, (o, n) in zip((0, 3, 6), ((4096, 25088), (4096, 4096), (1000, 4096)), strict=True):
    shapes[f'classifier.{i}.weight'], shapes[f'classifier.{i}.bias'] = (o, n), (o,)
  return shapes


def torchvision_resnet50() -> dict[str, tuple[int, ...]]:
  """Names and shapes of torchvision's resnet50().state_dict()."""
  shapes = {'conv1.weight': (64, 3, 7, 7)}

  def bn(name, c):
    for field in ('weight', 'bias', 'running_mean', 'running_var'):
      shapes[f'{name}.{field}'] = (c,)
    shapes[f'{name}.num_batches_tracked'] = ()

  bn('bn1', 64)
  cin = 64
  for layer, (planes, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
    for b in range(blocks):
      p = f'layer{layer}.{b}'
      shapes[f'{p}.conv1.weight'] = (planes, cin, 1, 1)
      bn(f'{p}.bn1', planes)
      shapes[f'{p}.conv2.weight'] = (planes, planes, 3, 3)
      bn(f'{p}.bn2', planes)
      shapes[f'{p}.conv3.weight'] = (4 * planes, planes, 1, 1)
      bn(f'{p}.bn3', 4 * planes)
      if b == 0:
        shapes[f'{p}.downsample.0.weight'] = (4 * planes, cin, 1, 1)
        bn(f'{p}.downsample.1', 4 * planes)
      cin = 4 * planes
  shapes['fc.weight'], shapes['fc.bias'] = (1000, 2048), (1000,)
  return shapes


def _abstract(name, **kwargs):
  model = get_model(name, **kwargs)
  x = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
  return jax.eval_shape(model.init, jax.random.key(0), x)


def _random_file(path, shapes, seed=0, extra=None):
  rng = np.random.default_rng(seed)
  arrays = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
  arrays.update(extra or {})
  np.savez(path, **arrays)
  return arrays


def _conv_valid(x, kernel):
  return lax.conv_general_dilated(
    x, kernel, (1, 1), 'VALID', dimension_numbers=('NHWC', 'HWIO', 'NHWC'), precision='highest'
  )


# ---------------------------------------------------------------------- the real layouts


@pytest.mark.parametrize(
  ('model', 'layout', 'used'),
  [
    ('hed', 'vgg16', 'features'),
    ('rcf', 'vgg16', 'features'),
    ('segnet', 'vgg16', 'features'),
    ('fcn8s', 'vgg16', 'features+fc'),
    ('segnet', 'vgg16_bn', 'features'),
    ('deepcrack', 'vgg16_bn', 'features'),
  ],
)
def test_torchvision_vgg16_fits_the_full_width_models(model, layout, used):
  torchvision = torchvision_vgg16(batch_norm=layout == 'vgg16_bn')
  expected = {
    k: s
    for k, s in torchvision.items()
    if (k.startswith('features.') and not k.endswith('num_batches_tracked'))
    or (used == 'features+fc' and k.split('.')[1] in ('0', '3') and k.startswith('classifier'))
  }
  assert pretrained_layouts.source_shapes(model, layout, _abstract(model)) == expected
  assert pretrained_layouts.detect_layout(list(torchvision)) == layout


@pytest.mark.parametrize('model', ['deeplabv3plus', 'crackseg'])
def test_torchvision_resnet50_fits_the_full_width_models(model):
  torchvision = torchvision_resnet50()
  expected = {
    k: s
    for k, s in torchvision.items()
    if not k.startswith('fc.') and not k.endswith('num_batches_tracked')
  }
  assert len(expected) == 265  # 320 entries less 53 counters and fc's two
  assert pretrained_layouts.source_shapes(model, 'resnet50', _abstract(model)) == expected
  assert pretrained_layouts.detect_layout(list(torchvision)) == 'resnet50'


# ------------------------------------------------------------------ loading a synthetic file


def test_synthetic_vgg16_file_initialises_a_reduced_hed(tmp_path, caplog):
  config = compare.get_config('hed,smoke')  # width_scale 1/16
  experiment = build(config)
  create = jax.jit(
    lambda key: train_state.create_train_state(
      key, (32, 32, 3), experiment.model, experiment.states.optimizer
    )
  )
  state = create(train_state.init_key(0))  # one compilation, not one per initialiser
  shapes = pretrained_layouts.source_shapes('hed', 'vgg16', {'params': state.params})
  extra = {'classifier.6.weight': np.zeros((10, 4), np.float32)}  # no place in HED
  path = tmp_path / 'vgg16.npz'
  arrays = _random_file(path, shapes, extra=extra)
  config.model_init.pretrained = str(path)
  config.model_init.normalization = 'none'
  with caplog.at_level(logging.INFO, logger='absl'):
    experiment = build(config)  # the file is read by the experiment, once (init_arrays)
    new = pretrained.initialise(
      state, experiment.init, workdir=tmp_path, arrays=experiment.init_arrays
    )
  # OIHW -> HWIO, every VGG16 convolution.
  np.testing.assert_array_equal(
    new.params['conv3_2']['kernel'], arrays['features.12.weight'].transpose(2, 3, 1, 0)
  )
  np.testing.assert_array_equal(new.params['conv5_3']['bias'], arrays['features.28.bias'])
  # The side outputs and the fusion are HED's own: untouched.
  np.testing.assert_array_equal(new.params['fuse']['kernel'], state.params['fuse']['kernel'])
  report = json.loads((tmp_path / 'init.json').read_text())
  assert report['pretrained'] == str(path) and report['layout'] == 'vgg16'
  assert len(report['loaded']) == 26
  assert report['from_scratch'] == sorted(
    [f'params/side{i}/{p}' for i in range(1, 6) for p in ('bias', 'kernel')]
    + ['params/fuse/bias', 'params/fuse/kernel']
  )
  assert report['ignored'] == ['classifier.6.weight']
  n_vgg = sum(int(np.prod(s)) for s in shapes.values())
  assert report['loaded_values'] == n_vgg < report['total_values']
  assert '26 parameter arrays' in caplog.text and 'from scratch: params/fuse/bias' in caplog.text


def test_vgg16_bn_file_gives_segnet_its_batchnorms_and_running_averages(tmp_path):
  variables = _abstract('segnet', width_scale=1 / 16)  # only shapes are read
  shapes = pretrained_layouts.source_shapes('segnet', 'vgg16_bn', variables)
  arrays = _random_file(tmp_path / 'f.npz', shapes)
  arrays['features.1.running_var'] = np.abs(arrays['features.1.running_var'])
  updates, report = pretrained.load_arrays(
    arrays, 'segnet', variables, normalization='none', source='f.npz'
  )
  np.testing.assert_array_equal(updates['params/conv2_1/bn/scale'], arrays['features.8.weight'])
  np.testing.assert_array_equal(
    updates['batch_stats/conv2_1/bn/mean'], arrays['features.8.running_mean']
  )
  np.testing.assert_array_equal(
    updates['params/conv1_2/conv/kernel'], arrays['features.3.weight'].transpose(2, 3, 1, 0)
  )
  assert not any('_D' in p for p in report.loaded)  # the decoder starts from scratch
  assert any('_D' in p for p in report.from_scratch)
  assert len(report.loaded) == len(shapes) == 13 * 6


def test_resnet50_names_of_absent_blocks_are_reported_unused(tmp_path):
  variables = _abstract('deeplabv3plus', width_scale=1 / 16, blocks=(1, 1, 1, 1))
  shapes = pretrained_layouts.source_shapes('deeplabv3plus', 'resnet50', variables)
  extra = {'layer1.1.conv1.weight': np.zeros((4, 16, 1, 1), np.float32)}
  arrays = _random_file(tmp_path / 'r.npz', shapes, extra=extra)
  updates, report = pretrained.load_arrays(arrays, 'deeplabv3plus', variables, source='r.npz')
  assert report.ignored == ['layer1.1.conv1.weight']
  assert 'params/layer4_0/downsample/conv/kernel' in updates
  assert report.normalization == 'torchvision'  # 'auto' for torchvision names


# ---------------------------------------------------------------------- input normalisation


def test_folded_torchvision_normalisation_reproduces_the_first_layer():
  variables = _abstract('hed', width_scale=1 / 16)
  shapes = pretrained_layouts.source_shapes('hed', 'vgg16', variables)
  rng = np.random.default_rng(1)
  arrays = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
  updates, _ = pretrained.load_arrays(arrays, 'hed', variables, normalization='torchvision')
  x = rng.random((1, 6, 6, 3)).astype(np.float32)  # crackjax's input: RGB in [0, 1]
  mean, std = pretrained_layouts.TORCHVISION_MEAN, pretrained_layouts.TORCHVISION_STD
  normalised = (x - np.array(mean)) / np.array(std)
  weight, bias = arrays['features.0.weight'], arrays['features.0.bias']
  want = _conv_valid(normalised.astype(np.float32), weight.transpose(2, 3, 1, 0)) + bias
  got = _conv_valid(x, updates['params/conv1_1/kernel']) + updates['params/conv1_1/bias']
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  # The other layers are as in the file.
  np.testing.assert_array_equal(updates['params/conv1_2/bias'], arrays['features.2.bias'])


def test_folded_caffe_normalisation_with_fcn8s_mean_subtraction():
  variables = _abstract('fcn8s', width_scale=1 / 16)
  shapes = pretrained_layouts.source_shapes('fcn8s', 'vgg16', variables)
  rng = np.random.default_rng(2)
  arrays = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
  updates, report = pretrained.load_arrays(arrays, 'fcn8s', variables, normalization='caffe')
  assert report.normalization == 'caffe'
  x = rng.random((1, 6, 6, 3)).astype(np.float32)
  z = x - np.array(IMAGENET_MEAN_RGB, np.float32)  # what FCN8s feeds conv1_1
  caffe_input = 255 * x[..., ::-1] - 255 * np.array(IMAGENET_MEAN_RGB[::-1])  # BGR, 0-255
  weight, bias = arrays['features.0.weight'], arrays['features.0.bias']  # BGR input channels
  want = _conv_valid(caffe_input.astype(np.float32), weight.transpose(2, 3, 1, 0)) + bias
  got = _conv_valid(z, updates['params/conv1_1/kernel']) + updates['params/conv1_1/bias']
  np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2)
  # fc6 [O, 512 * 7 * 7] (torch's C, H, W flattening) -> a 7 x 7 convolution.
  fc6 = arrays['classifier.0.weight']
  kernel = updates['params/fc6/kernel']
  kh, kw, cin, cout = kernel.shape
  np.testing.assert_array_equal(kernel[2, 5, 3, 7], fc6[7, 3 * kh * kw + 2 * kw + 5])


def test_resnet_conv1_without_bias_moves_the_constant_into_bn1s_running_mean():
  variables = _abstract('crackseg', width_scale=1 / 16, blocks=(1, 1, 1, 1))
  shapes = pretrained_layouts.source_shapes('crackseg', 'resnet50', variables)
  rng = np.random.default_rng(3)
  arrays = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
  updates, _ = pretrained.load_arrays(arrays, 'crackseg', variables)
  x = rng.random((1, 9, 9, 3)).astype(np.float32)
  mean, std = pretrained_layouts.TORCHVISION_MEAN, pretrained_layouts.TORCHVISION_STD
  normalised = (x - np.array(mean)) / np.array(std)
  # What bn1 subtracts its running mean from, before and after folding.
  want = _conv_valid(normalised.astype(np.float32), arrays['conv1.weight'].transpose(2, 3, 1, 0))
  want = want - arrays['bn1.running_mean']
  got = _conv_valid(x, updates['params/conv1/conv/kernel']) - updates['batch_stats/conv1/bn/mean']
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------- failures


def test_wrong_shapes_name_the_key_and_both_shapes(tmp_path):
  variables = _abstract('hed', width_scale=1 / 16)
  full = torchvision_vgg16(batch_norm=False)  # ImageNet's full widths
  arrays = {k: np.zeros(s, np.float32) for k, s in full.items()}
  with pytest.raises(pretrained.PretrainedError) as e:
    pretrained.load_arrays(arrays, 'hed', variables, source='vgg16.npz')
  message = str(e.value)
  assert 'vgg16.npz does not fit model' in message
  assert (
    "features.0.weight has shape (64, 3, 3, 3); needed (4, 3, 3, 3) for the model's "
    'params/conv1_1/kernel (stored as (3, 3, 3, 4))'
  ) in message
  assert 'width_scale=1.0' in message and '26 array(s)' in message and 'and 21 more' in message


def test_unusable_files_are_explained(tmp_path):
  variables = _abstract('hed', width_scale=1 / 16)
  with pytest.raises(pretrained.PretrainedError, match='no such file'):
    pretrained.load_npz(tmp_path / 'missing.npz')
  np.save(tmp_path / 'one.npy', np.zeros(3))
  with pytest.raises(pretrained.PretrainedError, match='single array'):
    pretrained.load_npz(tmp_path / 'one.npy')
  (tmp_path / 'junk.npz').write_text('not a zip')  # np.load would call it pickled data
  with pytest.raises(pretrained.PretrainedError, match=r'junk.npz is not a .npz file \(a zip'):
    pretrained.load_npz(tmp_path / 'junk.npz')
  (tmp_path / 'cut.npz').write_bytes((tmp_path / 'one.npy').read_bytes()[:20])
  with pytest.raises(pretrained.PretrainedError, match='cut.npz cannot be read as a .npz'):
    pretrained.load_npz(tmp_path / 'cut.npz')
  with pytest.raises(pretrained.PretrainedError, match='is a folder; name the .npz file in it'):
    pretrained.load_npz(tmp_path)
  with pytest.raises(pretrained.PretrainedError, match=r'^w.npz: Unrecognised names'):
    pretrained.load_arrays({'weights': np.zeros(3)}, 'hed', variables, source='w.npz')
  bn_file = {k: np.zeros(s) for k, s in torchvision_vgg16(batch_norm=True).items()}
  with pytest.raises(pretrained.PretrainedError, match="'hed' cannot load a vgg16_bn file"):
    pretrained.load_arrays(bn_file, 'hed', variables)
  unet = _abstract('unet', widths=(4, 8, 16, 32, 64))
  with pytest.raises(pretrained.PretrainedError, match='has no ImageNet backbone'):
    pretrained.load_arrays({'features.0.weight': np.zeros((4, 3, 3, 3))}, 'unet', unet)
  with pytest.raises(pretrained.PretrainedError, match='torchvision files only'):
    pretrained.load_arrays(
      {'params/conv1_1/bias': np.zeros(4)}, 'hed', variables, normalization='torchvision'
    )
  with pytest.raises(pretrained.PretrainedError, match='no array for any parameter'):
    pretrained.load_arrays({'params/nothing/kernel': np.zeros(4)}, 'hed', variables)
  with pytest.raises(pretrained.PretrainedError, match='normalization'):
    pretrained.load_arrays({}, 'hed', variables, normalization='imagenet')


def test_crackjax_layout_round_trip(tmp_path):
  target = _abstract('ucliquenet', width_scale=1 / 8, levels=1)  # params and batch_stats
  rng = np.random.default_rng(4)
  source = jax.tree.map(lambda s: rng.normal(size=s.shape).astype(s.dtype), target)
  pretrained.export_arrays(source, tmp_path / 'run.npz')
  arrays = pretrained.load_npz(tmp_path / 'run.npz')
  updates, report = pretrained.load_arrays(arrays, 'ucliquenet', target)
  assert report.layout == 'crackjax' and report.normalization == 'none'
  assert report.from_scratch == [] and report.ignored == []
  flat = pretrained_layouts.flat_variables(source)
  assert set(updates) == set(flat)
  for path, value in updates.items():
    np.testing.assert_array_equal(value, flat[path])


# ------------------------------------------------------------------ the hook in state.py


@pytest.mark.parametrize('with_file', [False, True])
def test_a_new_run_reports_its_initial_weights(tmp_path, with_file):
  config = compare.get_config('hed,smoke')
  assert config.model_init.pretrained is None  # the default: from scratch
  mesh = mesh_lib.make_mesh()
  if with_file:
    abstract = build(config).states.abstract(mesh, (32, 32, 3))
    shapes = pretrained_layouts.source_shapes('hed', 'vgg16', {'params': abstract.params})
    arrays = _random_file(tmp_path / 'vgg16.npz', shapes)
    config.model_init.pretrained = str(tmp_path / 'vgg16.npz')
  workdir = tmp_path / 'run'
  config.data.input_size = (32, 32)  # the train image shape, without reading data
  experiment = build(config)
  state = loop.restore_or_init(experiment, workdir, experiment.states.manager(workdir))
  report = json.loads((workdir / 'init.json').read_text())
  if with_file:
    assert len(report['loaded']) == 26
    # Folded torchvision normalisation ('auto'): conv1_1's kernel is the file's / std.
    std = np.array(pretrained_layouts.TORCHVISION_STD, np.float32)
    np.testing.assert_allclose(
      state.params['conv1_1']['kernel'],
      arrays['features.0.weight'].transpose(2, 3, 1, 0) / std[None, None, :, None],
      rtol=1e-6,
    )
    np.testing.assert_array_equal(
      state.params['conv2_1']['kernel'], arrays['features.5.weight'].transpose(2, 3, 1, 0)
    )
  else:
    assert report['pretrained'] is None and report['loaded'] == []
    assert len(report['from_scratch']) == len(jax.tree.leaves(state.params))
  assert int(state.step) == 0
