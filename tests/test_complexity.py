"""Complexity figures (crackjax.paper.flops, crackjax.paper.complexity): the analytic count
against the paper's Tables V-VIII, the layer-by-layer U-Net count and XLA's own; memory figures
on every backend."""

import jax
import jax.numpy as jnp
import ml_collections
import pytest
from jax import lax

from crackjax.configs import compare, smoke
from crackjax.experiment.build import build
from crackjax.models import MODELS, input_multiple, model_from_config
from crackjax.paper import complexity, flops
from tests import fixtures


@pytest.mark.parametrize(
  'widths, hw, true_g, paper_g, printed_g',
  [
    # (true MACs, our reconstruction of the paper's convention, the figure the paper prints)
    ((64, 128, 256, 512, 1024), (320, 480), 112.89, 127.99, 128.18),
    ((64, 128, 256, 512, 1024), (512, 512), 192.67, 218.44, 218.46),
    ((32, 64, 128, 256, 512), (304, 448), 25.09, 28.43, 28.44),
  ],
)
def test_macs_reproduce_the_paper(widths, hw, true_g, paper_g, printed_g):
  macs = flops.unet_macs(widths, *hw)
  assert macs['true'] / 1e9 == pytest.approx(true_g, abs=0.005)
  assert macs['paper'] / 1e9 == pytest.approx(paper_g, abs=0.005)
  # The paper convention lands within 0.2% of the printed figure.
  assert macs['paper'] / 1e9 == pytest.approx(printed_g, rel=2e-3)


def test_layer_count_agrees_with_xla_cost_analysis():
  config = smoke.get_config()
  config.model.widths = (8, 16, 32, 64, 128)
  macs = flops.unet_macs(config.model.widths, 128, 160)
  xla = complexity.xla_flops(model_from_config(config.model.to_dict()), 128, 160)
  # XLA counts 2 FLOPs per MAC but skips the taps that fall on 'same' padding, so it
  # sits slightly below 2 x our count; element-wise work is comparatively tiny.
  assert 0.93 * 2 * macs['true'] < xla < 2.0 * macs['true']


@pytest.mark.slow
def test_report_fps_and_memory():
  """FLOP/s from the analytic count; the device's peak memory where the backend reports one,
  else XLA's compiled analysis, labelled so, positive and growing with the batch."""
  config = smoke.get_config()
  r = complexity.report(build(config), (32, 48), fps_batch=8, repeats=2)
  assert r['params'] == 121_725 and r['input_hw'] == [32, 48]
  assert r['unet_macs'] == flops.unet_macs(config.model.widths, 32, 48)
  assert r['macs']['total'] == r['unet_macs']['true'] and r['flops'] == 2 * r['macs']['total']
  assert 'agrees' in r['xla_cross_check']
  one, eight = r['fps_batch1'], r['fps_batched']
  assert eight['batch'] == 8 and eight['fps'] == pytest.approx(8 / eight['median_s'])
  # Every FLOP/s figure is the analytic count times the measured rate.
  assert eight['flops_per_s'] == pytest.approx(r['flops'] * eight['fps'])
  small, large = one['memory'], eight['memory']
  for mem in (small, large):
    assert mem['peak_bytes'] > 0
    assert mem['compiled']['temp'] > 0 and mem['compiled']['argument'] > 0
  assert large['compiled']['temp'] > 2 * small['compiled']['temp']
  if jax.default_backend() == 'cpu':
    assert complexity.device_memory() is None and r['device_memory'] is None
    assert small['source'] == 'xla_compiled' and large['peak_bytes'] > small['peak_bytes']
    assert 'XLA compiled memory analysis' in complexity.format_memory(small)
  else:
    assert small['source'] == 'device' and r['device_memory']['peak_bytes_in_use'] > 0


def test_command_line_takes_config_overrides(capsys):
  complexity.main(
    [
      '--config=configs/crackforest_exp.py',
      '--config.model.widths=(4, 8, 16, 32, 64)',
      '--hw=32,48',
      '--nofps',
    ]
  )
  out = capsys.readouterr().out
  assert out.startswith('unet (') and 'widths (4, 8, 16, 32, 64)) at 32x48' in out
  assert 'parameters:                    0.12 M (121,725)' in out
  assert 'MACs (analytic, from jaxpr):' in out and 'XLA cost analysis (check):' in out
  assert 'agrees' in out


@pytest.mark.slow  # HED's whole analysis and timing through the command (~11 s cold)
def test_command_line_prints_analytic_flops_and_memory(capsys, tmp_path):
  r = complexity.main(
    [
      '--config=configs/compare.py:hed,smoke',
      '--hw=32,48',
      '--fps_batch=2',
      '--repeats=1',
      f'--json={tmp_path / "c.json"}',
    ]
  )
  out = capsys.readouterr().out
  assert out.startswith('hed (') and 'U-Net layer by layer' not in out
  assert out.count('    analytic ') == 2 and 'TFLOP/s' in out
  assert out.count('    memory: ') == 2 and 'device peak memory (process):' in out
  if jax.default_backend() == 'cpu':
    assert 'XLA compiled memory analysis' in out and 'n/a on cpu' in out
  assert (tmp_path / 'c.json').exists() and r['macs']['total'] > 0


def test_command_line_rejects_a_mistyped_field(capsys):
  # The field as typed, with its group (ml_collections' error names only 'widhts').
  with pytest.raises(SystemExit) as e:
    complexity.main(['--config=configs/smoke.py', '--config.model.widhts=(4, 8)'])
  assert str(e.value) == (
    'python -m crackjax.paper.complexity: unknown config field model.widhts on the command '
    'line (Did you mean "widths" instead of "widhts"?); configs/base.py lists every field.'
  )


# ----------------------------------------------------------------------------- analytic count


@pytest.mark.parametrize('impl', ['xla', 'blocked'])
def test_analytic_count_equals_the_layer_count(impl):
  config = smoke.get_config()
  config.model.widths = (64, 128, 256, 512, 1024)
  config.model.conv_impl = impl
  macs = flops.forward_macs(model_from_config(config.model.to_dict()), 320, 480)
  layer = flops.unet_macs(config.model.widths, 320, 480)
  assert macs['total'] == layer['true'] == 112_892_313_600
  assert macs['conv'] == layer['conv'] and macs['dot'] == layer['up']


def _config_of(name: str) -> ml_collections.ConfigDict:
  """A small config for model `name` (its compare.py smoke config where there is one)."""
  if name == 'unet':
    return smoke.get_config()
  if 'smoke' in MODELS[name].small:
    return compare.get_config(f'{name},smoke')
  config = smoke.get_config()
  config.model = ml_collections.ConfigDict({'name': name})
  return config


@pytest.mark.parametrize('name', fixtures.per_model(sorted(MODELS)))
def test_analytic_count_for_every_model(name):
  """Every registered model gets a positive count, linear in the batch, that XLA's own cost
  analysis of the lowered forward pass agrees with (within 2x)."""
  config = _config_of(name)
  model = model_from_config(config.model.to_dict())
  multiple = input_multiple(model)
  h, w = 2 * max(16, multiple), 3 * max(16, multiple)
  one = flops.forward_macs(model, h, w)
  assert one['total'] > 0 and one['total'] == one['conv'] + one['dot']
  assert flops.forward_macs(model, h, w, batch=2)['total'] == 2 * one['total']
  xla = complexity.xla_flops(model, h, w)
  assert 'agrees' in flops.cross_check(2 * one['total'], xla), (2 * one['total'], xla)


def test_jaxpr_count_of_scan_transposed_conv_and_cond():
  def up(x, k):  # 2x2 stride-2 transposed convolution: each output pixel meets one input pixel
    return lax.conv_transpose(x, k, (2, 2), 'VALID', dimension_numbers=('NHWC', 'HWIO', 'NHWC'))

  def scanned(a, b):
    return lax.scan(lambda c, ai: (c + (ai @ b).sum(), None), 0.0, a)

  def branches(p, a, b):
    return lax.cond(p, lambda: (a[0] @ b).sum(), lambda: 0.0)

  x, k = jnp.ones((1, 8, 8, 16)), jnp.ones((2, 2, 16, 4))
  assert flops.jaxpr_macs(jax.make_jaxpr(up)(x, k))['conv'] == 16 * 16 * 16 * 4
  a, b = jnp.ones((5, 3, 7)), jnp.ones((7, 2))
  macs = flops.jaxpr_macs(jax.make_jaxpr(scanned)(a, b))
  assert macs == {'conv': 0, 'dot': 5 * 3 * 7 * 2, 'total': 5 * 3 * 7 * 2}
  assert flops.jaxpr_macs(jax.make_jaxpr(branches)(True, a, b))['dot'] == 3 * 7 * 2


def test_cross_check_flags_a_wild_disagreement():
  # The H200 run: 0.03 G flops from XLA's cost analysis against 2 x 112.89 G.
  assert 'DISAGREES' in flops.cross_check(2 * 112.89e9, 0.03e9)
  assert 'agrees' in flops.cross_check(2 * 112.89e9, 0.97 * 2 * 112.89e9)
  assert flops.cross_check(1e9, None) == 'not available on this backend'


def test_train_step_flops_and_peak_fractions():
  assert flops.train_step_flops(112.89e9, 2) == pytest.approx(6 * 112.89e9 * 2)
  bf16 = flops.peak_fractions(494.5e12, 'NVIDIA H100 80GB HBM3', 'bfloat16')
  assert bf16 == {'bf16': pytest.approx(0.5)}
  assert set(flops.peak_fractions(1e12, 'NVIDIA H200', 'float32')) == {'tf32', 'fp32'}
  assert flops.peak_fractions(1e12, 'cpu', 'float32') == {}


def test_paper_rows_beside_tables_v_to_viii():
  config = compare.get_config('hed')
  rows = {
    q['table']: q for q in complexity.paper_rows(config, model_from_config(config.model.to_dict()))
  }
  assert set(rows) == {7, 8}  # HED is compared on Crack360 and BJN260 only
  assert rows[7]['input_hw'] == [512, 512] and rows[8]['input_hw'] == [320, 480]
  # The paper's GFLOPS are MACs: HED's analytic count is within 0.6 % of both printed figures.
  assert rows[7]['macs'] / 1e9 == pytest.approx(rows[7]['paper_gflops'], rel=6e-3)
  assert rows[8]['macs'] / 1e9 == pytest.approx(rows[8]['paper_gflops'], rel=6e-3)
  assert rows[7]['paper_params'] == 14_720_000
