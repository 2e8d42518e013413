"""The public crack datasets with their own split folders (DeepCrack, CRACK500, GAPs384,
AigleRN-TRIMM crops: every one of the registry) in each of their copies' layouts, and training
on a mixture of datasets (crackjax/data/mixture.py): members, sampling weights, crop rule,
per-dataset validation. Tiny synthetic layouts only."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pytest

from crackjax.configs import base
from crackjax.configs.release import roads_unet_cpu
from crackjax.data import loader, mixture
from crackjax.data import registry as data_registry
from crackjax.experiment import specs, validation
from crackjax.trainer import data_stats, eval_records, scoring
from tests import fixtures

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'


def _data(name: str, tmp_path, **fake):
  data = base.get_config().data
  data.name = name
  data.data_dir = str(tmp_path / 'tfds')
  data.manual_dir = str(fixtures.make_fake_public_set(tmp_path / 'raw', name, **fake))
  return data


# Every split-folder dataset of the registry in the cropped copies' layout (a new one is tested
# here without an edit), and the authors' own layouts of DeepCrack and CRACK500.
LAYOUTS = [
  *(
    (name, 'cropped', {'train': 3, 'valid': 2, 'test': 4}) for name in fixtures.public_set_folders()
  ),
  ('deepcrack', 'authors', {'train': 3, 'test': 4}),
  ('crack500', 'crop', {'train': 3, 'valid': 2, 'test': 4}),
]


@pytest.mark.parametrize(('name', 'layout', 'splits'), LAYOUTS)
def test_public_set_keeps_its_source_splits_in_every_layout(name, layout, splits, tmp_path):
  counts = {('val' if s == 'valid' and layout == 'crop' else s): n for s, n in splits.items()}
  data = _data(name, tmp_path, layout=layout, counts=counts)
  builder = data_registry.prepare_dataset(data.to_dict())
  assert {s: v.num_examples for s, v in builder.info.splits.items()} == splits
  # The licence travels with the prepared data, and the README says the same.
  assert 'licen' in builder.info.redistribution_info.license.lower()
  test = data_registry.get_data_source(data.to_dict(), 'test')
  record = test[1]
  assert data_registry.record_name(record) == ('test_1')
  mask = np.asarray(record['mask'])[..., 0]
  # Every second fake crop is transposed: both orientations are kept as stored.
  assert mask.shape == fixtures.PUBLIC_SIZE[::-1]
  assert set(np.unique(mask)) == {0, 1}
  # The fake crack (row CRACK_ROW, column FOLDER_CRACK_COL) survives the JPEG mask.
  assert mask[:, fixtures.CRACK_ROW].all() or mask[fixtures.CRACK_ROW].all()


def test_public_set_missing_or_doubled_is_one_clear_error(tmp_path):
  data = _data('gaps384', tmp_path)
  data.manual_dir = str(tmp_path / 'empty')
  (tmp_path / 'empty' / 'x').mkdir(parents=True)
  with pytest.raises(data_registry.DatasetNotFoundError, match='split folders of .gaps384.'):
    data_registry.prepare_dataset(data.to_dict())
  # Two copies (the cropped copy twice): the message lists both.
  fixtures.make_fake_public_set(tmp_path / 'two' / 'a', 'gaps384')
  fixtures.make_fake_public_set(tmp_path / 'two' / 'b', 'gaps384')
  data.manual_dir = str(tmp_path / 'two')
  with pytest.raises(data_registry.DatasetNotFoundError, match='Several copies') as e:
    data_registry.prepare_dataset(data.to_dict())
  assert str(tmp_path / 'two' / 'a') in str(e.value) and str(tmp_path / 'two' / 'b') in str(e.value)


def test_public_set_image_without_mask_names_the_file(tmp_path):
  data = _data('deepcrack', tmp_path)
  (tmp_path / 'raw' / 'Datasets' / 'DeepCrack' / 'test_lab' / 'test_0.jpg').unlink()
  with pytest.raises(data_registry.DatasetError, match=r'no mask.*test_0\.jpg'):
    data_registry.prepare_dataset(data.to_dict())


# ------------------------------------------------------------------------------- mixtures


def _mixture_config(tmp_path, weights=None, **member_fields):
  config = roads_unet_cpu.get_config('smoke')
  config.data.data_dir = str(tmp_path / 'tfds')
  raw = fixtures.make_fake_public_set(tmp_path / 'raw', 'deepcrack')
  fixtures.make_fake_public_set(raw, 'crack500', counts={'train': 5, 'valid': 2, 'test': 2})
  fixtures.make_fake_crackforest(tmp_path / 'cfd', n_labelled=10, n_unlabelled=0)
  keep = {'crackforest', 'deepcrack', 'crack500'}
  for name in list(config.data.mix):
    if name not in keep:
      del config.data.mix[name]
  for name in keep:
    member = config.data.mix[name]
    member.manual_dir = str(tmp_path / 'cfd') if name == 'crackforest' else str(raw)
    member.weight = (weights or {}).get(name, 1.0)
    member.update(member_fields.get(name, {}))
  config.data.mix.crackforest.train_split = 'train[:-2]'
  config.data.mix.crackforest.valid_split = 'train[-2:]'
  return config


def test_mixture_splits_are_the_members_splits_named_by_member(tmp_path):
  config = _mixture_config(tmp_path)
  valid = mixture.open_split(config.data.to_dict(), 'valid')
  # Members in the order of config.data.mix (a ConfigDict lists its fields sorted).
  assert valid.names == ['crack500', 'crackforest', 'deepcrack']
  assert valid.lengths == [2, 2, 3]
  names = [data_registry.record_name(r) for r in valid]
  assert names[4:] == ['deepcrack/valid_0', 'deepcrack/valid_1', 'deepcrack/valid_2']
  members = [mixture.member_of_name(n)[0] for n in names]
  assert members == ['crack500'] * 2 + ['crackforest'] * 2 + ['deepcrack'] * 3
  assert mixture.member_of_name('plain') == (None, 'plain')
  with pytest.raises(ValueError, match='splits'):
    mixture.open_split(config.data.to_dict(), 'train[:3]')


def test_mixture_samples_members_by_weight_deterministically(tmp_path):
  config = _mixture_config(
    tmp_path, weights={'crackforest': 1.0, 'deepcrack': 1.0, 'crack500': 2.0}
  )
  source = mixture.open_split(config.data.to_dict(), 'train')
  stream = loader.mixed_stream(source, seed=0)
  # 400 positions: grain's shuffle of a 5-record member costs ~8 ms a lookup (fast for real
  # sizes: 0.03 ms at 3,000), and mix interleaves by weight, so the shares are tight early.
  records = [stream[i] for i in range(400)]
  picks = [source.locate(r)[0] for r in records]
  shares = {k: n / len(picks) for k, n in collections.Counter(picks).items()}
  assert shares == pytest.approx({0: 0.5, 1: 0.25, 2: 0.25}, abs=0.02)  # crack500 first
  # Within a member every record comes round before any repeats (one shuffled epoch each).
  first = [r for r, k in zip(records, picks, strict=True) if k == 0][:5]
  assert sorted(first) == list(range(5))  # crack500's 5 train crops
  # The same seed gives the same stream; resuming at step k gives global batch k.
  again = loader.mixed_stream(source, seed=0)
  assert [again[i] for i in range(50)] == records[:50]
  whole = loader.create_train_iterator(
    specs.loader_spec_of(config), source, process_index=0, process_count=1
  )
  batches = [next(whole) for _ in range(3)]
  resumed = next(
    loader.create_train_iterator(
      specs.loader_spec_of(config), source, start_step=2, process_index=0, process_count=1
    )
  )
  np.testing.assert_array_equal(batches[2]['image'], resumed['image'])
  # Every member's photos, whatever their size, become crops of the one input size.
  for batch in batches:
    assert batch['image'].shape == (config.batch_size, *config.data.input_size, 3)
    assert batch['mask'].shape == (config.batch_size, *config.data.input_size, 1)


def test_mixture_crop_rule_scales_and_mirrors_small_photos_up(tmp_path):
  config = _mixture_config(tmp_path, crack500={'scale': 0.5})
  config.data.input_size = (48, 48)
  source = mixture.open_split(config.data.to_dict(), 'train')
  k = source.names.index('crack500')
  index = source.offsets[k]  # a 40x56 fake crop: 20x28 at scale 0.5, mirrored up to 48x48
  ex = loader.load_example(source, index, 0, seed=0, input_size=(48, 48), noise_std=0.0)
  assert ex['image'].shape == (48, 48, 3) and ex['mask'].shape == (48, 48, 1)
  assert ex['name'].startswith('crack500/')
  assert set(np.unique(ex['mask'])) <= {0.0, 1.0} and ex['mask'].any()


def test_mixture_config_problems_name_the_member_and_field(tmp_path):
  config = _mixture_config(tmp_path)
  config.data.mix.deepcrack.weight = 0.0
  config.data.mix.crack500.scale = -1.0
  config.data.mix.nosuch = {'weight': 1.0}
  with pytest.raises(validation.ConfigError) as e:
    validation.check_config(config)
  text = str(e.value)
  assert 'config.data.mix.deepcrack.weight=0.0 must be a finite number > 0' in text
  assert 'config.data.mix.crack500.scale=-1.0 must be a finite number > 0' in text
  assert "config.data.mix.nosuch: 'nosuch' is not a dataset" in text
  # Infinite weights, a weight sum that overflows, a scale of a few pixels.
  config = _mixture_config(tmp_path)
  config.data.mix.deepcrack.weight = float('inf')
  config.data.mix.crack500.scale = 1e-9
  with pytest.raises(validation.ConfigError) as e:
    validation.check_config(config)
  text = str(e.value)
  assert 'config.data.mix.deepcrack.weight=inf must be a finite number > 0' in text
  assert 'config.data.mix.crack500.scale=1e-09: photos resized by it' in text
  config.data.mix.deepcrack.weight = config.data.mix.crack500.weight = 1e308
  config.data.mix.crack500.scale = 1.0
  with pytest.raises(validation.ConfigError, match='sum to infinity'):
    validation.check_config(config)


def test_mixture_members_checked_before_anything_is_prepared_or_trained(tmp_path):
  config = _mixture_config(tmp_path)
  config.data.mix.deepcrack.manual_dir = None
  config.data.mix.crack500.manual_dir = str(tmp_path / 'nowhere')
  with pytest.raises(data_registry.DatasetNotFoundError) as e:
    mixture.prepare(config.data.to_dict())
  text = str(e.value)
  assert 'deepcrack: ' in text and 'config.data.mix.deepcrack.manual_dir is not set' in text
  assert 'config.data.mix.crack500.manual_dir=' in text and 'does not exist' in text
  assert not (tmp_path / 'tfds' / 'crackforest').exists()  # nothing prepared first
  # A member split that does not exist, and one that selects nothing: named at preparation.
  config = _mixture_config(tmp_path)
  config.data.mix.crackforest.valid_split = 'valid'
  config.data.mix.deepcrack.valid_split = 'valid[:0]'
  with pytest.raises(data_registry.DatasetError) as e:
    mixture.prepare(config.data.to_dict())
  text = str(e.value)
  assert (
    "config.data.mix.crackforest.valid_split='valid': Dataset crackforest has the splits" in text
  )
  assert "deepcrack.valid_split='valid[:0]': Split 'valid[:0]' of dataset deepcrack selects" in text


def test_member_results_score_each_dataset_and_select_on_their_mean():
  rng = np.random.default_rng(0)
  gts = [(rng.random((8, 8)) > 0.7).astype(np.float32) for _ in range(4)]
  # Member a predicted perfectly, member b inverted.
  probs = [gts[0], gts[1], 1 - gts[2], 1 - gts[3]]
  names = ['a/x', 'a/y', 'b/x', 'b/y']
  config = base.get_config()
  config.eval.protocols = ('strict',)
  from crackjax.experiment.build import eval_plan_of

  plan = eval_plan_of(config.to_dict())
  members = scoring.member_results(names, probs, gts, plan)
  assert members['a'].num_images == 2
  assert members['a'].results['strict'].ods.f1 == pytest.approx(1.0)
  f1_b = members['b'].results['strict'].ods.f1
  assert f1_b < 0.6
  results = scoring.score(probs, gts, plan)
  record = eval_records.evaluation_record(
    lambda step: 1, 'mixture', (4, 0), 'test', names, results, eval_seconds=0.0
  )
  record = eval_records.with_members(record, members)
  assert record.selection.value == pytest.approx((1.0 + f1_b) / 2)
  assert scoring.member_results(['x', 'y'], probs[:2], gts[:2], plan) is None
  json.dumps(record.to_json())  # the epoch record stays JSON


@pytest.mark.slow
def test_mixture_trains_and_records_each_dataset_every_epoch(tmp_path):
  config = _mixture_config(tmp_path)
  from crackjax.experiment.build import build
  from crackjax.trainer.loop import train_and_evaluate

  experiment = build(config)
  train_and_evaluate(experiment, tmp_path / 'run')
  for epoch in (1, 2):
    record = json.loads((tmp_path / 'run' / f'epoch_{epoch:03d}.json').read_text())
    assert record['dataset'] == 'mixture' and record['split'] == 'valid'
    assert set(record['datasets']) == {'crackforest', 'deepcrack', 'crack500'}
    assert record['num_images'] == sum(d['num_images'] for d in record['datasets'].values())
    f1s = [d['results']['strict']['ods']['f1'] for d in record['datasets'].values()]
    assert record['selection']['value'] == pytest.approx(np.mean(f1s))
  threshold = json.loads((tmp_path / 'run' / 'threshold.json').read_text())
  assert threshold['split'] == 'valid' and threshold['dataset'] == 'mixture'
  # Its model file's card names every dataset with its licence (the strictest governs) and
  # keeps none of this machine's folders.
  from crackjax.deploy import export
  from crackjax.models import model_file

  export.export_model_file(tmp_path / 'run', tmp_path / 'mix.safetensors', name='mix')
  loaded = model_file.read(tmp_path / 'mix.safetensors')
  data = loaded.card['data']
  assert [d['name'] for d in data['datasets']] == ['crack500', 'crackforest', 'deepcrack']
  assert all(d['licence'] for d in data['datasets'])
  assert 'non-commercial research only (crackforest)' in data['licence']
  assert all(m['manual_dir'] is None for m in loaded.meta['config']['data']['mix'].values())
  assert loaded.threshold['threshold'] == threshold['threshold']


def test_data_stats_describes_a_mixture_member_by_member(tmp_path, capsys):
  config = _mixture_config(tmp_path)
  data = config.data.to_dict()
  stats = data_stats.dataset_stats(data, ('train', 'valid'))
  assert list(stats) == [
    'crack500/train',
    'crack500/valid',
    'crackforest/train',
    'crackforest/valid',
    'deepcrack/train',
    'deepcrack/valid',
  ]
  # Each member's own split of the role: CRACK500's 5 + 2, CrackForest's train[:-2] / train[-2:].
  counts = {k: st['num_images'] for k, st in stats.items()}
  assert counts['crack500/train'] == 5 and counts['crack500/valid'] == 2
  assert counts['crackforest/valid'] == 2
  assert counts == {
    k: len(mixture.member_sources(data, k.split('/')[1])[k.split('/')[0]]) for k in stats
  }
  # A member whose masks hold no crack pixels is named with its split; no input_size advice.
  empty = dict(stats['deepcrack/train'], crack_pixels=0)
  lines = data_stats.diagnose_mixture({**stats, 'deepcrack/train': empty}, data)
  assert any(line.startswith('deepcrack/train: no crack pixels in any of its') for line in lines)
  assert not any('input_size' in line for line in lines)
  with pytest.raises(ValueError, match="not 'train\\[:3\\]'"):
    data_stats.dataset_stats(data, ['train[:3]'])
  # The command on the general model's config (its five members), --json.
  capsys.readouterr()  # what preparing the members above printed
  raw = tmp_path / 'raw'
  for name in ('gaps384', 'aiglern_trimm'):
    fixtures.make_fake_public_set(raw, name)
  rc = data_stats.main(
    [
      f'--config={CONFIGS / "release" / "roads_unet_cpu.py"}:smoke',
      f'--config.data.data_dir={config.data.data_dir}',
      *roads_unet_cpu.manual_dir_flags(str(tmp_path / 'cfd'), str(raw)),
      '--splits=test',
      '--json',
    ]
  )
  out = capsys.readouterr().out
  assert rc == 0
  described = json.loads(out)  # stdout holds the JSON alone (TFDS' preparing notes: stderr)
  assert [k for k in described if k != 'diagnosis'] == [
    f'{m}/test' for m in ('aiglern_trimm', 'crack500', 'crackforest', 'deepcrack', 'gaps384')
  ]
  assert described['crack500/test']['num_images'] == 2
