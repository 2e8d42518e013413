"""bench/train_step.py runs end to end on a tiny U-Net and reports a finite step time."""

import importlib.util
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_bench():
  spec = importlib.util.spec_from_file_location(
    'bench_train_step', REPO / 'bench' / 'train_step.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_train_step_bench_tiny(capsys):
  bench = _load_bench()
  result = bench.main(
    [
      '--config=configs/crackforest_exp.py',
      '--config.model.widths=(4, 8, 16, 32, 64)',
      '--hw=32,48',
      '--batch=2',
      '--steps=1',
      '--warmup=1',
      '--notorch',
    ]
  )
  out = capsys.readouterr().out
  jr = result['jax']
  assert result['torch'] is None
  assert math.isfinite(jr['median_s']) and jr['median_s'] > 0
  assert math.isfinite(jr['loss'])
  assert jr['images_per_s'] > 0 and jr['peak_rss_mb'] > 0 and jr['compile_s'] > 0
  assert len(jr['step_times_s']) == 1
  assert jr['params'] == 121_725
  assert 'jax step:' in out and 'images/s' in out and 'peak RSS' in out


def test_torch_unet_matches_flax_parameter_count():
  """The PyTorch model of the comparison has the Flax U-Net's parameter count."""
  pytest.importorskip('torch')
  bench = _load_bench()
  model = bench._torch_unet((4, 8, 16, 32, 64))
  assert sum(p.numel() for p in model.parameters()) == 121_725
