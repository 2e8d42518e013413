"""CrackSeg and U-CliqueNet (Li et al. 2021, Tables V-VIII), reconstructed: parameter counts
beside the paper's and structure (built abstractly, no full-size weights; output shapes:
tests/test_contracts.py), the clique block's wiring against a direct implementation, and a
short training run of each with its original loss and its dagger (exponential WCE) config
through launch.py."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from crackjax.experiment import restored
from crackjax.models import model_from_config
from crackjax.models.crackseg import CrackSeg
from crackjax.models.deeplabv3plus import DeepLabV3Plus
from crackjax.models.ucliquenet import CliqueBlock, UCliqueNet
from tests import fixtures

# A comparison model's own checks: the slow tier (tests/fixtures.FAST_TIER_MODELS).
pytestmark = pytest.mark.slow

NEW_MODELS = ('crackseg', 'ucliquenet')


@pytest.mark.parametrize(
  ('model', 'exact', 'paper', 'tolerance'),
  [
    # ResNet-50 23,508,032 + six 3x3 2048 -> 256 branches with BN 28,314,624 + projection
    # 1536 -> 256 393,728 + decoder (48-channel projection, three 3x3 convs) 1,893,984 + 257 n.
    (CrackSeg(), 54_110_882, 53_870_000, 0.005),
    (CrackSeg(n_classes=1), 54_110_625, 53_870_000, 0.005),
    (CrackSeg(image_pooling=True), 54_701_218, 53_870_000, 0.02),
    # Bottleneck clique blocks, k = 24, three levels, attentional transitions.
    (UCliqueNet(), 494_418, 487_770, 0.015),
    (UCliqueNet(n_classes=1), 494_321, 487_770, 0.015),
  ],
  ids=['crackseg', 'crackseg-1class', 'crackseg-pooling', 'ucliquenet', 'ucliquenet-1class'],
)
def test_parameter_counts_beside_the_paper(model, exact, paper, tolerance):
  variables = fixtures.abstract_variables(model)
  n = fixtures.tree_size(variables['params'])
  assert n == exact  # the documented count (module docstrings)
  assert abs(n / paper - 1) < tolerance  # the paper's 53.87M / 487.77K, not matched exactly
  # Running statistics are state, not parameters: a mean and a variance per BN scale.
  leaves = jax.tree_util.tree_leaves_with_path(variables['params'])
  scales = [x for path, x in leaves if 'scale' in str(path)]
  assert fixtures.tree_size(variables['batch_stats']) == 2 * fixtures.tree_size(scales) > 0


def test_crackseg_structure():
  params = fixtures.abstract_variables(CrackSeg())['params']
  branches = [k for k in params if k.startswith('msd') and k[3:].isdigit()]
  assert len(branches) == 6
  assert all(params[b]['conv']['kernel'].shape == (3, 3, 2048, 256) for b in branches)
  assert 'bias' not in params['msd1']['conv']
  assert params['msd_project']['conv']['kernel'].shape == (1, 1, 6 * 256, 256)
  assert params['low_level']['conv']['kernel'].shape == (1, 1, 256, 48)
  assert params['decoder_conv1']['conv']['kernel'].shape == (3, 3, 304, 256)
  for i in (2, 3):  # Song et al.: three 3x3 convolutions after the fusion
    assert params[f'decoder_conv{i}']['conv']['kernel'].shape == (3, 3, 256, 256)
  assert params['classifier']['kernel'].shape == (1, 1, 256, 2)
  # The backbone is DeepLab v3+'s ResNet-50 with the same names (one ImageNet file for both).
  deeplab = fixtures.abstract_variables(DeepLabV3Plus())['params']
  backbone = {k for k in deeplab if k == 'conv1' or k.startswith('layer')}
  assert backbone <= set(params)
  assert all(jax.tree.map(lambda a, b: a.shape == b.shape, params[k], deeplab[k]) for k in backbone)


def test_ucliquenet_structure():
  params = fixtures.abstract_variables(UCliqueNet())['params']
  assert set(params) == {
    'stem',
    *(f'down{i}' for i in range(3)),
    *(f'transition{i}' for i in range(3)),
    'bottom',
    *(f'up{i}' for i in range(3)),
    *(f'up_block{i}' for i in range(3)),
    'head_bn',
    'classifier',
  }
  assert params['stem']['kernel'].shape == (3, 3, 3, 64)
  down0 = params['down0']
  # T = 4 layers: 4 edges from the input, 4 x 3 between layers, one 3x3 per layer.
  assert sum(k.startswith('w0_') for k in down0) == 4
  assert sum(k.startswith('w') and not k.startswith('w0_') for k in down0) == 12
  assert down0['w0_1'].shape == (1, 1, 64, 24) and down0['w2_1'].shape == (1, 1, 24, 24)
  assert down0['node3'].shape == (3, 3, 24, 24)
  # Stage-I BatchNorm of layer i sees the input and layers 1 .. i-1; Stage II the other three.
  assert down0['stage1_bn4']['scale'].shape == (64 + 3 * 24,)
  assert down0['stage2_bn4']['scale'].shape == (3 * 24,)
  # Transition: 1x1 96 -> 96 and the channel attention 96 -> 48 -> 96.
  assert params['transition0']['conv']['kernel'].shape == (1, 1, 96, 96)
  assert params['transition0']['fc1']['kernel'].shape == (96, 48)
  assert params['transition0']['fc2']['kernel'].shape == (48, 96)
  # Decoder: up-sampled Stage II (96) + the skip {X0, Stage II} (64 + 96 at level 0).
  assert params['up0']['kernel'].shape == (2, 2, 96, 96)
  assert params['up_block0']['w0_1'].shape == (1, 1, 96 + 64 + 96, 24)
  assert params['up_block1']['w0_1'].shape == (1, 1, 96 + 96 + 96, 24)
  assert params['classifier']['kernel'].shape == (1, 1, 96, 2)


def test_built_from_config():
  model = model_from_config({'name': 'crackseg', 'rates': [1, 2], 'blocks': [1, 1, 1, 1]})
  assert model.rates == (1, 2) and model.blocks == (1, 1, 1, 1)
  # Four 2x2 poolings (the output stride 16); U-CliqueNet pools once per level.
  assert CrackSeg().input_multiple == 16
  assert UCliqueNet().input_multiple == 8 and UCliqueNet(levels=4).input_multiple == 16
  with pytest.raises(ValueError, match='n_classes must be 1 or 2'):
    UCliqueNet(n_classes=3)
  with pytest.raises(ValueError, match='rates'):
    CrackSeg(rates=())
  with pytest.raises(ValueError, match='layers'):
    UCliqueNet(layers=1)


def _conv(x, kernel):
  dimensions = ('NHWC', 'HWIO', 'NHWC')
  return lax.conv_general_dilated(x, kernel, (1, 1), 'SAME', dimension_numbers=dimensions)


@pytest.mark.parametrize('bottleneck', [True, False])
def test_clique_block_matches_a_direct_implementation(bottleneck):
  """Every edge W_ji carries layer j into layer i in both stages; Stage II uses every other
  layer's newest value (alternate updating); the outputs are {X0, Stage II} and Stage II."""
  k, t = 3, 4
  block = CliqueBlock(k, t, bottleneck)
  x = jax.random.normal(jax.random.key(1), (1, 6, 6, 5))
  variables = jax.jit(block.init)(jax.random.key(2), x)
  p = variables['params']
  # Perturb every BatchNorm's scale and offset so a misplaced slice would show.
  p = jax.tree_util.tree_map_with_path(
    lambda path, v: (
      v + 0.1 * jnp.arange(v.size).reshape(v.shape) / v.size if 'bn' in str(path) else v
    ),
    p,
  )
  feature, stage2 = jax.jit(block.apply)({**variables, 'params': p}, x)

  def bn_relu(h, bn):  # running averages: mean 0, variance 1
    return jax.nn.relu(h / jnp.sqrt(1 + 1e-5) * bn['scale'] + bn['bias'])

  def update(i, inputs, stage):  # inputs: [(j, value)] in the order of the concatenation
    bn = p[f'stage{stage}_bn{i}']
    out, start = 0.0, 0
    for j, h in inputs:
      c = h.shape[-1]
      part = {name: v[start : start + c] for name, v in bn.items()}
      out = out + _conv(bn_relu(h, part), p[f'w{j}_{i}'])
      start += c
    if bottleneck:
      out = _conv(bn_relu(out, p[f'stage{stage}_bn{i}_b']), p[f'node{i}'])
    return out

  @jax.jit  # one compilation instead of one per operation
  def direct(x):
    layer = {}
    for i in range(1, t + 1):
      layer[i] = update(i, [(0, x)] + [(j, layer[j]) for j in range(1, i)], 1)
    for i in range(1, t + 1):
      layer[i] = update(i, [(j, layer[j]) for j in range(1, t + 1) if j != i], 2)
    return jnp.concatenate([layer[i] for i in range(1, t + 1)], axis=-1)

  want = direct(x)
  np.testing.assert_allclose(stage2, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(feature, jnp.concatenate([x, want], axis=-1), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------- training


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp('compare_extra')
  # 32 x 64: multiples of CrackSeg's 16 and U-CliqueNet's 8.
  raw = fixtures.make_fake_crackforest(root / 'raw', n_labelled=6, size=(32, 64))
  return raw, root / 'tfds'


@pytest.mark.slow
@pytest.mark.parametrize('dagger', [False, True], ids=['own_loss', 'dagger'])
@pytest.mark.parametrize('model', NEW_MODELS)
def test_trains_through_launch(model, dagger, data_dirs, tmp_path):
  workdir = tmp_path / model
  variant = ',dagger' if dagger else ''
  proc, rows = fixtures.train_through_launch(
    f'configs/compare.py:{model}{variant},smoke', workdir, data_dirs, '--config.num_epochs=1'
  )
  assert [r['step'] for r in rows] == [1, 2, 3]
  assert all(np.isfinite(r['loss']) and r['loss'] > 0 for r in rows)
  if dagger:  # the exponential WCE (beta 0.75) logs its weight q
    assert all(r['q'] > 1 for r in rows)
    assert json.loads((workdir / 'config.json').read_text())['loss']['beta'] == 0.75
  # No pretrained file: the run says everything started from scratch.
  init = json.loads((workdir / 'init.json').read_text())
  assert init['pretrained'] is None and init['loaded'] == [] and init['total_values'] > 0
  assert 'from scratch' in proc.stderr
  assert json.loads((workdir / 'config.json').read_text())['model_init']['pretrained'] is None
  run = restored.load_run(workdir)  # BatchNorm running averages trained and checkpointed
  mean = run.batch_stats['head_bn' if model == 'ucliquenet' else 'conv1']
  mean = mean['mean'] if 'mean' in mean else mean['bn']['mean']
  assert np.all(np.isfinite(mean)) and np.any(mean != 0)
