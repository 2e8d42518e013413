"""bench/map_rules.py: label-free cuts of a fold model's maps (hysteresis, scales fused), and the
hysteresis k chosen for each held-out set on the other sets alone."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def rules():
  spec = importlib.util.spec_from_file_location('map_rules', REPO / 'bench' / 'map_rules.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_hysteresis_keeps_a_faint_continuation_and_drops_a_faint_island(rules):
  m1 = np.zeros((5, 8), np.float32)
  m1[2, :4] = 0.9  # a confident crack ...
  m1[2, 4:7] = 0.5  # ... its faint continuation
  m1[0, 0] = 0.5  # a faint island
  m2 = np.zeros_like(m1)
  m2[4, 7] = 0.95
  got = rules.masks(m1, m2, t=0.8)
  assert got['scale 1'].sum() == 4 and got['scale 2'].sum() == 1
  kept = got['scale 1, hysteresis 0.5']  # low 0.4: the continuation, not the island
  assert kept[2, :7].all() and kept.sum() == 7
  assert got['scale 1, hysteresis 0.7'].sum() == 4  # low 0.56: nothing faint
  assert got['max'].sum() == 5 and got['mean'].sum() == 0  # 0.45 and 0.475 < 0.8
  assert rules.f1([3, 1, 1]) == pytest.approx(75.0)


def test_k_is_chosen_on_the_other_sets_alone(rules):
  def fold(by_k):
    f1 = {'scale 1': by_k[1.0]}
    f1 |= {f'scale 1, hysteresis {k:g}': by_k.get(k, 0.0) for k in rules.KS[1:]}
    return {'f1': f1}

  by_set = {
    'a': fold({1.0: 10.0, 0.5: 30.0}),
    'b': fold({1.0: 20.0, 0.5: 40.0}),
    'c': fold({1.0: 50.0, 0.5: 0.0}),  # c alone prefers the stored cut
  }
  got = rules.k_on_the_others(by_set, 1)
  # For c the others (a, b) choose 0.5, whatever c's own labels say: 0.0 there.
  assert got['per_set']['c'] == {'k': 0.5, 'f1': 0.0}
  # For a: b (0.5: 40) and c (1: 50) -> mean at 1.0 35, at 0.5 20: the stored cut.
  assert got['per_set']['a'] == {'k': 1.0, 'f1': 10.0}
  assert got['mean'] == pytest.approx((10.0 + 20.0 + 0.0) / 3)
  assert got['one_k'] == {'k': 1.0, 'mean': pytest.approx(80.0 / 3)}


def test_a_fold_without_its_model_is_named(rules, tmp_path):
  argv = [f'--work={tmp_path}', '--crackforest=cf', '--public=pub', '--held_out=gaps384']
  with pytest.raises(SystemExit, match=r'jpeg_short/gaps384/model.safetensors: no fold model'):
    rules.main(argv)
