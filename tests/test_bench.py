"""bench/train_step.py runs end to end on a tiny U-Net and reports a finite step time, analytic
FLOP/s and a peak-memory figure labelled for the backend; the PyTorch side runs eager and
compiled, in float32 and bf16 autocast."""

import importlib.util
import math
from pathlib import Path

import jax
import pytest

from crackjax.configs import crackforest_exp

REPO = Path(__file__).resolve().parents[1]
TINY = (4, 8, 16, 32, 64)
TINY_PARAMS = 121_725


def _load_bench(name: str = 'train_step'):
  spec = importlib.util.spec_from_file_location(f'bench_{name}', REPO / 'bench' / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _torch_importable() -> bool:
  return _load_bench().torch_available()


@pytest.mark.slow
def test_train_step_bench_tiny(capsys, tmp_path):
  """One invocation: the JAX figures, and PyTorch eager in its subprocess with the speed
  ratio when torch is importable."""
  bench = _load_bench()
  with_torch = _torch_importable()
  result = bench.main(
    [
      '--config=configs/crackforest_exp.py',
      f'--config.model.widths={TINY}',
      '--hw=32,48',
      '--batch=2',
      '--steps=1',
      '--warmup=0',
      '--torch_device=cpu',
      f'--json={tmp_path / "r.json"}',
      '--profile_steps=1',
      f'--profile_dir={tmp_path / "profile"}',
      *([] if with_torch else ['--notorch']),
    ]
  )
  out = capsys.readouterr().out
  jr = result['jax']
  # The profile: one traced step's Perfetto file; the CPU backend records no device tracks.
  assert jr['profile']['steps'] == 1 and jr['profile']['dir'] == str(tmp_path / 'profile')
  assert list((tmp_path / 'profile').glob('**/perfetto_trace.json.gz'))
  if jax.default_backend() == 'cpu':
    assert jr['profile']['kernels'] is None and 'profile: no device tracks' in out
    # The CPU profile: the host's per-instruction events sorted into kinds of work by the
    # step's name stack (each of these is real work in the U-Net's step).
    kinds = jr['profile']['cpu_kinds']['kinds']
    for kind in (
      'forward convolutions',
      'backward: input gradients',
      'backward: weight gradients',
      'Adam update (+ non-finite guard)',
      'augmentation',
      'loss (forward and backward)',
    ):
      assert kinds.get(kind, 0) > 0, (kind, kinds)
    assert kinds.get('other', 0) < 0.2 * jr['profile']['cpu_kinds']['op_ms'], kinds
    assert 'CPU profile, op time per step by kind' in out
  assert math.isfinite(jr['median_s']) and jr['median_s'] > 0
  assert math.isfinite(jr['loss'])
  assert jr['images_per_s'] > 0 and jr['peak_rss_mb'] > 0 and jr['compile_s'] > 0
  assert len(jr['step_times_s']) == 1 and jr['pipelined_images_per_s'] > 0
  assert jr['params'] == TINY_PARAMS
  # FLOP/s from the analytic count: 3 x forward, 2 FLOPs per MAC.
  from crackjax.paper import flops

  macs = flops.unet_macs(TINY, 32, 48)['true']
  assert jr['forward_macs_per_image'] == macs
  assert jr['flops_per_step'] == 6 * macs * 2
  assert jr['tflops'] == pytest.approx(jr['flops_per_step'] / jr['median_s'] / 1e12)
  # The whole step's jaxpr (autodiff's backward, the blocked weight gradients' scans) is
  # close to 3 x the forward: the first layer's input gradient is not computed.
  assert 0.85 < jr['jaxpr_flops_per_step'] / jr['flops_per_step'] < 1.05
  assert 'agrees' in jr['xla_cross_check']
  assert jr['memory']['peak_bytes'] > 0
  if jax.default_backend() == 'cpu':
    assert jr['memory']['source'] == 'xla_compiled' and jr['peak_fraction'] == {}
    assert 'XLA compiled memory analysis' in out
  assert 'jax step:' in out and 'images/s' in out and 'host RSS' in out
  assert 'analytic FLOPs:' in out and 'jax peak memory:' in out
  assert (tmp_path / 'r.json').exists()
  if not with_torch:
    assert result['torch'] is None
    return
  eager = result['torch']
  assert 'error' not in eager, eager
  assert eager['mode'] == 'eager' and eager['params'] == TINY_PARAMS
  assert eager['device'] == 'cpu' and eager['memory']['peak_bytes'] is None
  assert result['torch_compile'] is None
  assert 'speed crackjax/torch eager:' in out
  ratios = result['interleaved']['ratios']['eager']
  assert len(ratios['blocks']) == 1 and ratios['median'] > 0
  assert 'step time crackjax/torch eager: median' in out
  assert eager['cpu_s_per_step'] > 0 and jr['cpu_s_per_step'] > 0
  if jax.default_backend() == 'cpu':  # PyTorch's column of the CPU profile
    tk = result['torch_profile']['kinds']
    assert tk['forward convolutions'] > 0 and tk['Adam update (+ non-finite guard)'] > 0
    assert tk['backward: input + weight gradients (one call)'] > 0


@pytest.mark.slow
def test_fresh_memory_process_loads_the_step_from_the_cache(capsys, tmp_path):
  """--fresh_memory: the JAX step again in a fresh process, its executable read back from the
  persistent compilation cache the first run wrote (nothing compiled there), its figures in
  the result and the report; the phases of each run are recorded (None on the CPU)."""
  bench = _load_bench()
  result = bench.main(
    [
      '--config=configs/crackforest_exp.py',
      f'--config.model.widths={TINY}',
      '--hw=32,48',
      '--batch=2',
      '--steps=1',
      '--warmup=1',
      '--notorch',
      '--fresh_memory',
      f'--json={tmp_path / "r.json"}',
    ]
  )
  out = capsys.readouterr().out
  jr, fresh = result['jax'], result['jax_fresh']
  assert jr['compile_cache'] in ('hit', 'miss')  # the tests' cache may hold it already
  assert 'error' not in fresh, fresh
  assert fresh['compile_cache'] == 'hit' and fresh['params'] == TINY_PARAMS
  assert set(fresh['memory']['phases']) == set(bench.MEMORY_PHASES)
  assert math.isfinite(fresh['loss']) and fresh['images_per_s'] > 0
  if jax.default_backend() == 'cpu':
    assert all(v is None for v in fresh['memory']['phases'].values())
    assert 'jax fresh process: no device allocator figures on cpu (step executable from the ' in out
  assert '(persistent compilation cache: ' in out


def test_memory_phases_name_when_the_peak_was_reached():
  """The report's phase lines and the fresh process's line, on the allocator figures of the
  H100 bench of 27 Nov (batch 2, f32: the peak already reached after compiling)."""
  bench = _load_bench()
  mib = 2**20

  def dev(peak, in_use):
    return {'peak_bytes_in_use': peak * mib, 'bytes_in_use': in_use * mib, 'bytes_limit': 0}

  phases = {
    'before_compile': dev(360, 360),
    'after_compile': dev(17537, 360),
    'after_warmup': dev(17537, 360),
    'after_steps': dev(17537, 360),
  }
  lines = bench._phase_lines({'phases': phases})
  assert lines == [
    '  by phase (device peak / in use): before compile 360 MiB / 360 MiB, after compile '
    '17537 MiB / 360 MiB, after warm-up 17537 MiB / 360 MiB, after steps 17537 MiB / 360 MiB',
    '  the peak was reached by the end of compiling, before the step first ran',
  ]
  steady = {k: dev(360 if 'compile' in k else 2100, 360) for k in bench.MEMORY_PHASES}
  assert bench._phase_lines({'phases': steady})[1] == '  the peak was reached in the warm-up steps'
  assert bench._phase_lines({'phases': dict.fromkeys(bench.MEMORY_PHASES)}) == []
  fresh = {
    'memory': {'source': 'device', 'device': steady['after_steps'], 'phases': steady},
    'compile_cache': 'hit',
    'warmup': 3,
    'steps': 20,
    'compile_s': 1.5,
    'images_per_s': 181.0,
    'backend': 'gpu',
  }
  line = bench._fresh_lines(fresh)[0]
  assert line.startswith('jax fresh process: steady-state device peak 2100 MiB after 3 warm-up')
  assert 'from the persistent compilation cache: nothing compiled or autotuned' in line
  miss = bench._fresh_lines({**fresh, 'compile_cache': 'miss'})[0]
  assert 'compilation cache miss: the step was compiled again, its peak included' in miss
  assert bench._fresh_lines({'error': 'boom'}) == ['jax fresh process: FAILED: boom']
  assert bench._fresh_lines(None) == []


def test_torch_compile_trains_like_eager():
  """torch.compile with the aot_eager backend (traced like inductor, no kernels generated:
  inductor takes 25-80 s for the tiny U-Net on a 2-core CPU) gives eager's losses."""
  pytest.importorskip('torch')
  bench = _load_bench()
  config = crackforest_exp.get_config()
  config.model.widths = TINY
  args = ((32, 48), 2, 1, 0)
  eager = bench.bench_torch(config, *args, expect_params=TINY_PARAMS, device='cpu')
  compiled = bench.bench_torch(
    config, *args, device='cpu', compile_mode='default', compile_backend='aot_eager'
  )
  assert compiled['mode'] == 'torch.compile (backend aot_eager)' and eager['mode'] == 'eager'
  assert compiled['loss'] == pytest.approx(eager['loss'], rel=1e-4)
  assert compiled['first_call_s'] > 0 and compiled['images_per_s'] > 0


def test_torch_bf16_autocast_channels_last():
  pytest.importorskip('torch')
  bench = _load_bench()
  config = crackforest_exp.get_config()
  config.model.widths = TINY
  config.model.dtype = 'bfloat16'
  r = bench.bench_torch(config, (32, 48), 2, 1, 0, expect_params=TINY_PARAMS, device='cpu')
  assert r['precision'] == 'bfloat16 autocast, channels_last'
  assert math.isfinite(r['loss']) and r['images_per_s'] > 0


def test_torch_cuda_without_a_gpu_is_a_clear_error():
  torch = pytest.importorskip('torch')
  if torch.cuda.is_available():
    pytest.skip('this torch sees a GPU')
  bench = _load_bench()
  with pytest.raises(RuntimeError, match='--torch_device=cuda, but torch .* sees no CUDA GPU'):
    bench.resolve_torch_device('cuda')
  assert bench.resolve_torch_device('auto') == 'cpu'


def test_torch_comparison_says_which_configs_it_cannot_run():
  from crackjax.configs import compare

  bench = _load_bench()
  assert bench.torch_unsupported(crackforest_exp.get_config()) is None
  assert 'U-Net only' in bench.torch_unsupported(compare.get_config('hed,smoke'))
  config = crackforest_exp.get_config()
  config.loss.weighting = 'xie'
  assert 'exp weighting only' in bench.torch_unsupported(config)


def test_torch_unet_matches_flax_parameter_count():
  """The PyTorch model of the comparison has the Flax U-Net's parameter count."""
  pytest.importorskip('torch')
  bench = _load_bench()
  model = bench._torch_unet(TINY)
  assert sum(p.numel() for p in model.parameters()) == TINY_PARAMS


def test_matching_bench_counts_each_cell_against_correspond_pixels():
  # bench/matching_vs_correspond.py on two tiny maps with a stand-in for correspondPixels that
  # leaves one matchable pixel unmatched at every threshold where something is predicted: the
  # bench must find exactly those cells, in that direction, and an ODS from each.
  import numpy as np

  path = Path(__file__).resolve().parents[1] / 'bench' / 'matching_vs_correspond.py'
  spec = importlib.util.spec_from_file_location('bench_matching_vs_correspond', path)
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)

  def one_fewer(pred, gt, max_dist):
    from crackjax.evaluation import tolerance_counts

    n = int(tolerance_counts(pred, gt > 0, thresholds=[0.5]).matched_pred[0])
    match = np.zeros_like(pred)
    match.flat[np.flatnonzero(pred)[: max(n - 1, 0)]] = 1
    return match, match, 0.0, 0.0

  gt = np.zeros((20, 30), bool)
  gt[10, 5:25] = True
  prob = np.where(gt, 0.8, 0.1).astype(np.float32)
  r = bench.compare([prob, prob], [gt, gt], 'tolerance', one_fewer)
  predicted = int(np.count_nonzero(bench.THRESHOLDS <= np.float32(0.8)))  # 80 of 99
  assert r['cells'] == 2 * 99 and r['differ'] == r['more_here'] == 2 * predicted
  assert r['fewer_here'] == 0 and r['max_more'] == 1
  assert r['matched_here'] - r['matched_correspond'] == 2 * predicted
  assert r['ods_here'] > r['ods_correspond'] > 0


def test_block_sizes_split_the_steps_evenly():
  bench = _load_bench()
  assert bench.block_sizes(15, 5) == [3, 3, 3, 3, 3]
  assert bench.block_sizes(7, 3) == [3, 2, 2]
  assert bench.block_sizes(2, 5) == [1, 1]
  assert bench.block_sizes(1, 1) == [1]


class _FakeSide:
  """A side of the interleaved bench whose steps take fixed times, logging the order."""

  def __init__(self, name, wall, cpu, log):
    self.mode, self.wall, self.cpu, self.log = name, wall, cpu, log
    self.cpu_times = []

  def time_steps(self, n):
    self.log.append(self.mode)
    self.cpu_times += [self.cpu] * n
    return [self.wall] * n

  def run(self, n):
    self.log.append(self.mode)
    return {'times': [self.wall] * n, 'cpu_times': [self.cpu] * n}


def test_interleave_alternates_the_order_and_reports_ratios_per_block():
  bench = _load_bench()
  log = []
  jax_side = _FakeSide('jax', 0.8, 1.2, log)
  torch_side = _FakeSide('eager', 1.0, 2.0, log)
  r = bench.interleave(jax_side, [torch_side], [2, 2, 1])
  assert log == ['jax', 'eager', 'eager', 'jax', 'jax', 'eager']  # ABBA
  assert r['jax_times'] == [0.8] * 5 and r['block_sizes'] == [2, 2, 1]
  assert r['ratios']['eager']['blocks'] == pytest.approx([0.8] * 3)
  assert r['cpu_ratios']['eager']['median'] == pytest.approx(0.6)
  lines = bench._interleaved_lines(r)
  assert lines[0].startswith('interleaved: 3 blocks of 2/2/1 steps per side')
  assert 'step time crackjax/torch eager: median 0.80x' in lines[1]
  assert 'CPU time per step crackjax/torch eager: median 0.60x' in lines[2]


def test_cpu_profile_sorts_instructions_by_name_stack():
  cpu = importlib.util.module_from_spec(
    spec := importlib.util.spec_from_file_location('cpu_profile', REPO / 'bench' / 'cpu_profile.py')
  )
  spec.loader.exec_module(cpu)
  hlo = (
    '  %ynn_fusion.63 = f32[2,320,480,32]{3,2,1,0} fusion(%a, %b), kind=kCustom, '
    'metadata={op_name="jit(train_step)/transpose(jvp(UNet))/ConvBlock_8/Conv_0/transpose()/'
    'conv_general_dilated" stack_frame_id=55}\n'
    '  ROOT %while.3 = (s32[], f32[3,3,16,16]{3,2,1,0}) while(%t), condition=%c, body=%b, '
    'metadata={op_name="jit(train_step)/transpose(jvp(UNet))/ConvBlock_0/Conv_1/while"}\n'
    '  %copy.1 = f32[2]{0} copy(%x)\n'
  )
  ops = cpu.hlo_ops(hlo)
  assert ops['ynn_fusion.63'][0] == 'fusion' and ops['while.3'][0] == 'while'
  assert ops['copy.1'] == ('copy', '')
  kind = cpu.jax_kind
  assert kind('ynn_fusion.63', *ops['ynn_fusion.63']) == 'backward: input gradients'
  assert kind('f', 'fusion', 'jit(train_step)/jvp(UNet)/Conv_0/conv_general_dilated') == (
    'forward convolutions'
  )
  assert kind('d', 'dot', 'jit(train_step)/transpose(jvp(UNet))/ConvBlock_0/while/body/x') == (
    'backward: weight gradients'
  )
  assert kind('m', 'fusion', 'jit(train_step)/augment/vmap()/mul') == 'augmentation'
  assert kind('a', 'fusion', 'jit(train_step)/optimizer/sqrt') == (
    'Adam update (+ non-finite guard)'
  )
  assert kind('l', 'fusion', 'jit(train_step)/jvp(loss)/reduce_sum') == (
    'loss (forward and backward)'
  )
  assert kind('copy_bitcast_fusion', 'fusion', 'jit(train_step)/jvp(UNet)/x') == (
    'copies and transposes'
  )
  assert cpu.torch_kind('aten::convolution_backward', 'backward') == (
    'backward: input + weight gradients (one call)'
  )
  assert cpu.torch_kind('aten::mkldnn_convolution', 'forward') == 'forward convolutions'
  assert cpu.torch_kind('aten::add_', 'optimizer') == 'Adam update (+ non-finite guard)'
  tk = cpu.torch_kinds(
    [['aten::mkldnn_convolution', 'forward', 3.0], ['aten::cat', 'forward', 1.0]]
  )
  assert tk['op_ms'] == 4.0 and tk['kinds']['forward convolutions'] == 3.0
  lines = cpu.report_lines(
    {'kinds': {'forward convolutions': 5.0}, 'ops': {'c': 5.0}, 'op_ms': 5.0, 'events': 3}, tk
  )
  assert any(line.split()[-2:] == ['5.0', '3.0'] for line in lines), lines


@pytest.mark.slow
def test_predict_speed_times_test_time_variants_against_the_plain_prediction(capsys):
  bench = _load_bench('predict_speed')
  assert bench.test_time_variant('1+2') == ((1.0, 2.0), False)
  assert bench.test_time_variant('0.5:flip') == ((0.5,), True)
  with pytest.raises(SystemExit, match="entry '2:mirror': only :flip may follow"):
    bench.main(['--test_time=2:mirror'])
  r = bench.main(
    [
      '--config=configs/crackforest_exp.py:smoke',
      '--num_small=1',
      '--num_large=0',
      '--test_time=2,1:flip',
    ]
  )
  assert r['settings'] == []  # --num_large=0: no tiled photo
  assert [row['test_time'] for row in r['test_time']] == ['2', '1:flip']
  # Each against the plain prediction timed around it (a baseline before and after each).
  assert len(r['baseline_mp_per_s']) == 3
  for row in r['test_time']:
    assert row['seconds_per_photo'] > 0 and row['plain_seconds_per_photo'] > 0
    assert row['ratio_to_plain'] == pytest.approx(
      row['seconds_per_photo'] / row['plain_seconds_per_photo']
    )
  assert 'test time 2: ' in capsys.readouterr().out
