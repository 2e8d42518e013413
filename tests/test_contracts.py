"""Contract tests: one test per contract, run on every entry of every registry.

As segmentation_models.pytorch tests every encoder with one base test, every model of
`crackjax.models.MODELS`, loss of `crackjax.losses.LOSSES`, protocol of
`crackjax.evaluation.PROTOCOLS` and dataset of `crackjax.data.registry.DATASETS` is checked
here against the contract docs/architecture.md states, so a new entry is covered without a new
test (a new loss needs its hand case below, and a new dataset its fixture: a test says so).
What is particular to one entry (parameter counts, layer structure, a loss's behaviour on
soft labels, a builder's layouts) stays in that entry's own test file.

The fast tier builds models abstractly (`jax.eval_shape`, which traces the model as `jax.jit`
does, without compiling); compiling and training a step of each model's small variant takes
20-30 s per model on a 2-core CPU, so that is the slow tier.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crackjax import evaluation, losses, models
from crackjax.configs import base, compare
from crackjax.data import registry as data_registry
from crackjax.engine import mesh as mesh_lib
from crackjax.engine import train_state
from crackjax.experiment import validation
from crackjax.experiment.build import build
from crackjax.models import pretrained_layouts
from crackjax.trainer.loop import train_step_of
from tests import fixtures

MODEL_NAMES = sorted(models.MODELS)
LOSS_NAMES = sorted(losses.LOSSES)
PROTOCOL_NAMES = sorted(evaluation.PROTOCOLS)
DATASET_NAMES = sorted(data_registry.DATASETS)

# ------------------------------------------------------------------------------------ models


@pytest.mark.parametrize('name', MODEL_NAMES)
def test_model_entry_declares_what_its_configs_need(name):
  entry = models.MODELS[name]
  # Its group builds the model, its original loss builds, and every compare.py config of it
  # (the paper's setting and each small variant) passes validation.
  models.model_from_config(models.model_group(name))
  losses.loss_from_config(dict(entry.original_loss))
  # A smoke variant (tests train it in seconds); variants are configs/base.py's and only
  # override fields of the group.
  assert 'smoke' in entry.small
  assert set(entry.small) <= set(base.VARIANTS)
  for variant, overrides in entry.small.items():
    assert set(overrides) <= set(entry.config), variant
  for variant in ['', *base.variants_for(name)]:
    validation.check_config(compare.get_config(f'{name},{variant}'.rstrip(',')))
  # ImageNet weights: torchvision layouts pretrained.py maps (crackjax's own any model takes).
  if entry.pretrained is not None:
    assert set(entry.pretrained.layouts) <= set(pretrained_layouts.LAYOUTS) - {'crackjax'}
  assert pretrained_layouts.layout_of(name) is entry.pretrained


# The paper's 320x480 in the default tier (the U-Net; the others and a square 512: slow).
@pytest.mark.parametrize('hw', [(320, 480), pytest.param((512, 512), marks=pytest.mark.slow)])
@pytest.mark.parametrize('name', fixtures.per_model(MODEL_NAMES))
def test_model_outputs_one_float32_logit_per_pixel(name, hw):
  # At the paper's setting, in eval and train mode (apply_model; batch statistics keep their
  # structure), traced abstractly.
  model = models.get_model(name)
  assert all(size % models.input_multiple(model) == 0 for size in hw)
  for out in fixtures.abstract_outputs_in_both_modes(model, hw):
    maps = [models.fused_logits(out)]
    if isinstance(out, dict):  # side outputs, for the model's own loss
      assert set(out) <= {'logits', 'side_logits'}
      maps += list(out.get('side_logits', ()))
    for m in maps:
      assert m.shape == (2, *hw, 1) and m.dtype == jnp.float32


@pytest.mark.parametrize('name', MODEL_NAMES)
def test_model_input_multiple(name):
  # A model declaring H and W multiples refuses other sizes with a message naming the
  # multiple; one without (multiple 1) returns a map the size of any input.
  model = models.get_model(name)
  multiple = models.input_multiple(model)
  if multiple == 1:
    x = jax.ShapeDtypeStruct((1, 33, 47, 3), jnp.float32)
    variables = fixtures.abstract_variables(model, x.shape)
    out = jax.eval_shape(model.apply, variables, x)
    assert models.fused_logits(out).shape == (1, 33, 47, 1)
  else:
    with pytest.raises(ValueError, match=f'multiples of {multiple}'):
      fixtures.abstract_variables(model, (1, 2 * multiple + multiple // 2, 2 * multiple, 3))


def _batch(h: int, w: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Two random images in [0, 1] with about 20% crack pixels."""
  rng = np.random.default_rng(seed)
  image = rng.uniform(size=(2, h, w, 3)).astype(np.float32)
  return {'image': image, 'mask': (image[..., :1] > 0.8).astype(np.float32)}


@pytest.mark.slow
@pytest.mark.parametrize('name', MODEL_NAMES)
def test_small_variant_trains_a_step(name):
  # The jitted train step (augmentation, the model's original loss, Adam) of the smoke
  # variant: a finite loss and gradient, and every kind of state moves.
  experiment = build(compare.get_config(f'{name},smoke'))
  multiple = models.input_multiple(experiment.model)
  h = multiple * math.ceil(32 / multiple)
  mesh = experiment.states.mesh
  state = experiment.states.fresh((h, 2 * h, 3))
  before = jax.device_get((state.params, train_state.batch_stats_of(state)))
  step = train_step_of(experiment, state)
  state, metrics = step(state, mesh_lib.global_batch(_batch(h, 2 * h), mesh))
  metrics = jax.device_get(metrics)
  assert int(metrics['finite']) == 1 and int(state.step) == 1
  assert all(np.isfinite(v) for v in metrics.values())
  assert metrics['grad_norm'] > 0
  after = jax.device_get((state.params, train_state.batch_stats_of(state)))
  for old, new in zip(before, after, strict=True):  # the parameters; batch statistics if any
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.any(a != b)), old, new))
    assert old is None or any(changed)


# ------------------------------------------------------------------------------------ losses

# The hand case every loss must match: one 2x2 image whose crack pixel (top left) has logit 2
# and whose background pixels have logits -1, 0.5 and 0; a loss reading side outputs also
# gets one side map of zeros (every pixel's cross-entropy ln 2).
HAND_LOGITS = jnp.array([[2.0, -1.0], [0.5, 0.0]]).reshape(1, 2, 2, 1)
HAND_LABELS = jnp.array([[1.0, 0.0], [0.0, 0.0]]).reshape(1, 2, 2, 1)


def _pos(z: float) -> float:  # -log sigmoid(z): a crack pixel's cross-entropy
  return math.log1p(math.exp(-z))


def _neg(z: float) -> float:  # -log(1 - sigmoid(z)): a background pixel's
  return math.log1p(math.exp(z))


def _sigmoid(z: float) -> float:
  return 1 / (1 + math.exp(-z))


CRACK = _pos(2.0)
BACKGROUND = _neg(-1.0) + _neg(0.5) + _neg(0.0)  # the three background pixels together
LN2 = math.log(2.0)
# alpha = (3 + 1) / (4 + 2) (Laplace-smoothed background ratio); q_exp = beta 10^(2 alpha - 1).
Q_EXP = 0.75 * 10 ** (2 * 4 / 6 - 1)


def _holistic_exp_jaccard() -> float:
  wce = (Q_EXP * CRACK + BACKGROUND) / 4
  p = [_sigmoid(z) for z in (2.0, -1.0, 0.5, 0.0)]
  inter = p[0]
  union = 1 + sum(p) - inter
  return wce + 1 - (inter + 1) / (union + 1)  # eq. 8 with a = b = 1, lambda = 1


def _hed_balanced() -> float:  # beta = |Y-| / |Y| = 3/4 on the crack, 1/4 on background
  return (0.75 * CRACK + 0.25 * BACKGROUND) / 4 + (0.75 * LN2 + 0.25 * 3 * LN2) / 4


def _rcf_robust() -> float:  # beta = 3/4, alpha = lam |Y+| / |Y| = 1.1 / 4
  beta, alpha = 0.75, 1.1 / 4
  return (beta * CRACK + alpha * BACKGROUND) / 4 + (beta * LN2 + alpha * 3 * LN2) / 4


def _median_frequency() -> float:
  # freq(crack) = 1/4, freq(background) = 3/4, median 1/2: weights 2 and 2/3.
  return (2 * CRACK + 2 / 3 * BACKGROUND) / 4


# loss name -> (its config.loss fields, the value its equation gives on the hand case).
HAND_CASES: dict[str, tuple[dict[str, Any], Callable[[], float]]] = {
  'holistic': ({'weighting': 'exp', 'beta': 0.75, 'a': 1.0, 'b': 1.0}, _holistic_exp_jaccard),
  'hed_balanced': ({}, _hed_balanced),
  'rcf_robust': ({}, _rcf_robust),
  'deepcrack_plain': ({}, lambda: (CRACK + BACKGROUND) / 4 + LN2),
  'side_exp_wce': (
    {'beta': 0.75},
    lambda: (Q_EXP * CRACK + BACKGROUND) / 4 + (Q_EXP * LN2 + 3 * LN2) / 4,
  ),
  'median_frequency': ({}, _median_frequency),
}


def _outputs(name: str, logits: jax.Array, sides: tuple[jax.Array, ...]) -> Any:
  """What a model hands the loss: side outputs only to a loss that declares it reads them."""
  if losses.LOSSES[name].side_outputs:
    return {'logits': logits, 'side_logits': sides}
  return logits


@pytest.mark.parametrize('name', LOSS_NAMES)
def test_loss_matches_its_equation_on_the_hand_case(name):
  assert name in HAND_CASES, f'write the hand case of loss {name!r} in HAND_CASES'
  fields, expected = HAND_CASES[name]
  loss_fn = losses.loss_from_config({'name': name, **fields})
  outputs = _outputs(name, HAND_LOGITS, (jnp.zeros_like(HAND_LOGITS),))
  loss, _ = loss_fn(outputs, HAND_LABELS)
  assert float(loss) == pytest.approx(expected(), rel=1e-6)


@pytest.mark.parametrize('name', LOSS_NAMES)
def test_loss_fields_are_keyword_arguments_with_defaults(name):
  # loss_from_config passes config.loss's fields by name; {'name': ...} alone must build.
  entry = losses.LOSSES[name]
  parameters = inspect.signature(entry.build).parameters.values()
  assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in parameters)
  assert entry.fields == tuple(p.name for p in parameters)
  losses.loss_from_config({'name': name})


def _random_maps(seed: int, n: int) -> list[jax.Array]:
  keys = jax.random.split(jax.random.key(seed), n)
  return [2 * jax.random.normal(k, (2, 8, 8, 1)) for k in keys]


@pytest.mark.parametrize('name', LOSS_NAMES)
def test_loss_is_a_scalar_with_finite_gradients_under_jit(name):
  loss_fn = losses.loss_from_config({'name': name})
  fused, side1, side2 = _random_maps(0, 3)
  labels = (jax.random.uniform(jax.random.key(1), fused.shape) < 0.2).astype(jnp.float32)
  outputs = _outputs(name, fused, (side1, side2))
  loss, metrics = loss_fn(outputs, labels)
  assert loss.shape == () and loss.dtype == jnp.float32 and np.isfinite(float(loss))
  assert all(jnp.shape(v) == () and np.isfinite(float(v)) for v in metrics.values())
  value_and_grad = jax.value_and_grad(lambda o: loss_fn(o, labels)[0])
  jitted, grads = jax.jit(value_and_grad)(outputs)
  assert float(jitted) == pytest.approx(float(loss), rel=1e-5)
  for g in jax.tree.leaves(grads):  # the fused map, and each side map a loss reads
    assert np.all(np.isfinite(g)) and np.any(g != 0)


@pytest.mark.parametrize('name', LOSS_NAMES)
def test_loss_reads_the_outputs_it_declares(name):
  # side_outputs=False: the fused map only, whatever else the model returns; True: every
  # side map counts.
  loss_fn = losses.loss_from_config({'name': name})
  fused, side, other = _random_maps(2, 3)
  labels = (jax.random.uniform(jax.random.key(3), fused.shape) < 0.2).astype(jnp.float32)
  with_side = float(loss_fn({'logits': fused, 'side_logits': (side,)}, labels)[0])
  with_other = float(loss_fn({'logits': fused, 'side_logits': (other,)}, labels)[0])
  if losses.LOSSES[name].side_outputs:
    assert with_side != with_other
  else:
    assert with_side == with_other == float(loss_fn(fused, labels)[0])


# --------------------------------------------------------------------------------- protocols


def _thin_lines() -> np.ndarray:
  """40x60 ground truth of two one-pixel lines (unchanged by thinning)."""
  gt = np.zeros((40, 60), bool)
  gt[10, 5:50] = True
  gt[20:36, 40] = True
  return gt


@pytest.mark.parametrize('name', PROTOCOL_NAMES)
def test_protocol_entry_and_its_thresholds(name):
  spec = evaluation.PROTOCOLS[name]
  assert spec.name == name and evaluation.get_protocol(name) is spec and spec.description
  for configured in (None, 20):
    n = spec.num_thresholds(configured)
    grid = spec.thresholds(n)
    assert np.all(np.diff(grid) > 0) and grid[0] >= 0 and grid[-1] <= 1
    assert evaluation.FIXED_THRESHOLD in grid
    assert set(spec.thresholds(n, tails=False)) < set(grid)
  # What evaluate() reports and uses is the entry.
  gt = _thin_lines()
  r = evaluation.evaluate([gt * np.float32(0.7)], [gt], protocol=name)
  assert r['protocol_description'] == spec.description
  n = spec.num_thresholds(None)
  assert r['num_thresholds'] == n and r['curve']['thresholds'] == spec.thresholds(n).tolist()
  assert r['grid_size'] == len(r['curve']['thresholds'])


@pytest.mark.parametrize('name', PROTOCOL_NAMES)
def test_protocol_scores_a_perfect_prediction_one_and_an_empty_one_zero(name):
  gt = _thin_lines()
  perfect = evaluation.evaluate([gt.astype(np.float32)], [gt], protocol=name)
  assert perfect['ods']['f1'] == perfect['ois']['f1'] == 1.0
  empty = evaluation.evaluate([np.zeros(gt.shape, np.float32)], [gt], protocol=name)
  assert empty['ods']['f1'] == empty['ois']['f1'] == empty['ap'] == 0.0
  assert empty['ods']['precision'] == empty['ods']['recall'] == 0.0


# ---------------------------------------------------------------------------------- datasets


def _crack_folder(root: Path) -> dict[str, Any]:
  images, masks = fixtures.make_fake_folder(root, n=5)
  return {'folder': {'images': str(images), 'masks': str(masks)}}


# dataset name -> writes a fixture in its real layout under a folder, returns the
# config.data fields that read it.
DATASET_FIXTURES: dict[str, Callable[[Path], dict[str, Any]]] = {
  'crackforest': lambda root: {
    'manual_dir': str(fixtures.make_fake_crackforest(root, n_labelled=5, n_unlabelled=0))
  },
  'aiglern': lambda root: {'manual_dir': str(fixtures.make_fake_aiglern(root, n=4))},
  'crack360': lambda root: {
    'manual_dir': str(fixtures.make_fake_crack360(root, n_train=2, n_test=2))
  },
  'bjn260': lambda root: {'manual_dir': str(fixtures.make_fake_bjn260(root, n=4))},
  'crack_folder': _crack_folder,
  **{
    name: (lambda root, name=name: {'manual_dir': str(fixtures.make_fake_public_set(root, name))})
    for name in fixtures.public_set_folders()
  },
}


@pytest.mark.parametrize('name', DATASET_NAMES)
def test_dataset_prepares_train_and_test_splits_of_image_mask_pairs(name, tmp_path):
  assert name in DATASET_FIXTURES, f'write a fixture of dataset {name!r} in DATASET_FIXTURES'
  data = base.get_config().data
  data.name = name
  data.data_dir = str(tmp_path / 'tfds')
  data.update(DATASET_FIXTURES[name](tmp_path / 'raw'))
  builder = data_registry.prepare_dataset(data.to_dict())
  assert builder.info.file_format.value == 'array_record'  # read without TensorFlow
  names = {}
  for split in ('train', 'test'):
    source = data_registry.get_data_source(data.to_dict(), split)
    assert len(source) > 0, split
    records = [source[i] for i in range(len(source))]
    names[split] = {data_registry.record_name(r) for r in records}
    assert len(names[split]) == len(records) and all(names[split])
    for record in records:
      image, mask = np.asarray(record['image']), np.asarray(record['mask'])
      assert image.dtype == mask.dtype == np.uint8
      assert image.ndim == 3 and image.shape[2] == 3 and mask.shape == (*image.shape[:2], 1)
      assert set(np.unique(mask)) <= {0, 1} and mask.any()  # every fixture has cracks
  assert not names['train'] & names['test']


@pytest.mark.parametrize('name', DATASET_NAMES)
def test_dataset_builder_arguments_are_config_fields(name, tmp_path):
  # Each argument an entry takes from config.data is a field configs/base.py documents, and
  # one it requires, left unset, is a DatasetNotFoundError saying what to pass.
  entry = data_registry.DATASETS[name]
  data = base.get_config().data
  data.name = name
  data.data_dir = str(tmp_path)
  for arg in entry.args.values():
    group = data
    for part in arg.field.split('.'):
      assert part in group, f'config.data.{arg.field} is not a configs/base.py field'
      group = group[part]
  if any(arg.required for arg in entry.args.values()):
    with pytest.raises(data_registry.DatasetNotFoundError, match=f'{name!r} needs'):
      data_registry.get_builder(data.to_dict())
  else:
    assert isinstance(data_registry.get_builder(data.to_dict()), entry.builder)
