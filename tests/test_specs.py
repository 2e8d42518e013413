"""The parts below experiment/ take plain data (issue 46 item 2): each registry is given a
config group as a read-only plain mapping (no attribute access, nothing written), as the
recorded config.json holds it, and builds what the config's experiment builds."""

import json
import types

import jax
import numpy as np
import pytest

from crackjax import losses, models
from crackjax.configs import base
from crackjax.data import augment, folder_stream, loader, mixture
from crackjax.data import registry as data_registry
from crackjax.experiment import specs
from crackjax.experiment.build import build
from crackjax.models import pretrained
from crackjax.runs import identity, logs
from tests import fixtures


def _plain(value):
  """`value` as JSON data, its top level a read-only mapping (a dict's reads only)."""
  return types.MappingProxyType(json.loads(json.dumps(value, default=str)))


def _recorded_group(config, name: str):
  """Group `name` of `config` as config.json records it, read-only."""
  return types.MappingProxyType(specs.recorded(config)[name])


@pytest.fixture(scope='module')
def config(tmp_path_factory):
  return fixtures.fake_data_config(tmp_path_factory.mktemp('specs'), n_labelled=6)


def test_the_dataset_registry_takes_a_plain_mapping(config):
  data = _recorded_group(config, 'data')
  builder = data_registry.prepare_dataset(data)
  assert builder.is_prepared()
  assert isinstance(data_registry.get_builder(data), data_registry.DATASETS['crackforest'].builder)
  source = data_registry.get_data_source(data, 'train')
  assert len(source) == len(build(config).splits.train_source) > 0
  # The same field errors as before: the message names the config field.
  with pytest.raises(ValueError, match=r"config.data.name='nope'"):
    data_registry.get_builder({**data, 'name': 'nope'})


def test_a_mixture_takes_a_plain_mapping():
  mix = {'deepcrack': {'weight': 2.0}, 'crack500': {'scale': 0.5, 'manual_dir': '/m'}}
  data = {**base.get_config().data.to_dict(), 'name': 'mixture', 'mix': mix}
  assert mixture.is_mixture(_plain(data)) and not mixture.problems(_plain(data))
  # Members in name order whatever the mapping's order (a ConfigDict's order: members are
  # numbered in it), so the recorded JSON samples as the config does.
  assert list(mixture.member_fields(_plain(data))) == ['crack500', 'deepcrack']
  own = mixture.member_data(data, 'crack500')
  assert type(own) is dict and 'mix' not in own
  assert (own['name'], own['manual_dir'], own['train_split']) == ('crack500', '/m', 'train')
  own['folder']['images'] = 'changed'  # a copy: the mixture's own group is untouched
  assert data['folder']['images'] is None and data['name'] == 'mixture'
  bad = {**data, 'mix': {'deepcrack': {'weight': 0}}}
  assert mixture.problems(_plain(bad)) == [
    'config.data.mix.deepcrack.weight=0 must be a finite number > 0.'
  ]


def test_the_folder_stream_takes_a_plain_mapping(tmp_path):
  config = fixtures.fake_folder_config(tmp_path, n=3)
  total, examples = folder_stream.folder_examples(_recorded_group(config, 'data'))
  assert total == 3 and len(list(examples)) == 3


def test_models_losses_and_augmentation_take_plain_mappings():
  config = base.get_config()
  model = models.model_from_config(_recorded_group(config, 'model'))
  assert model.widths == tuple(config.model.widths)  # JSON's list as the linen field's tuple
  loss_fn = losses.loss_from_config(_recorded_group(config, 'loss'))
  labels = np.zeros((1, 8, 8, 1), np.float32)
  labels[:, 2:4] = 1
  loss, _ = loss_fn(np.zeros_like(labels), labels)
  assert np.isfinite(float(loss))
  with pytest.raises(ValueError, match=r"config.loss has field\(s\) \['alpha'\]"):
    losses.loss_from_config(_plain({**config.loss.to_dict(), 'alpha': 1}))
  image = np.random.default_rng(0).random((2, 16, 16, 3)).astype(np.float32)
  mask = (image[..., :1] > 0.5).astype(np.float32)
  key = jax.random.key(3)
  plain = augment.augment_fn(_recorded_group(config, 'augment'))(key, image, mask)
  built = build(config).augment_fn(key, image, mask)
  for a, b in zip(plain, built, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  off = augment.augment_fn(_plain({**config.augment.to_dict(), 'enabled': False}))
  assert off(key, image, mask)[0] is image


def test_the_loader_takes_a_loader_spec(config):
  spec = specs.loader_spec_of(config)
  assert spec == loader.LoaderSpec(
    batch_size=2, seed=0, crop_size=None, noise_std=0.0, dataset='crackforest', train_split='train'
  )
  experiment = build(config)
  source = experiment.splits.train_source
  one = next(loader.create_train_iterator(spec, source, process_index=0, process_count=1))
  two = next(experiment.splits.train_iterator(process_index=0, process_count=1))
  np.testing.assert_array_equal(one['image'], two['image'])
  with pytest.raises(ValueError, match=r'config.batch_size=3 is not divisible by .* 2'):
    next(
      loader.create_train_iterator(loader.LoaderSpec(batch_size=3, seed=0), source, process_count=2)
    )
  with pytest.raises(ValueError, match=r'config.data.input_size must be \(H, W\)'):
    loader.crop_size({'input_size': (1, 2, 3)})


def test_a_fresh_state_takes_an_init_spec(config, tmp_path):
  spec = specs.init_spec_of(config)
  assert spec == pretrained.InitSpec(model='unet', pretrained=None, normalization='auto')
  experiment = build(config)
  state = experiment.states.fresh((32, 32, 3))
  assert pretrained.initialise(state, spec, tmp_path) is state
  assert json.loads((tmp_path / 'init.json').read_text())['pretrained'] is None


def test_fingerprint_and_header_take_the_recorded_json(config):
  recorded = specs.recorded(config)
  assert recorded == json.loads(build(config).config_json)
  assert identity.fingerprint(recorded) == build(config).fingerprint
  assert logs.run_header(recorded, '/w') == logs.run_header(config.to_dict(), '/w')
