"""scripts/pack_roads_data.py (the general model's datasets packed for one GPU call) on fake
copies of the five datasets: the fixed fractions, the same files for the same seed, masks the
builders read as the source's, the layouts the builders find; (slow) scripts/release_roads_gpu.sh
with TINY=1 end to end on a tiny pack of them, and scripts/release_roads_cpu.sh from nothing."""

import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from tests import fixtures

REPO = Path(__file__).resolve().parents[1]
COUNTS = {'train': 10, 'valid': 4, 'test': 5}


def _packer():
  spec = importlib.util.spec_from_file_location(
    'pack_roads_data', REPO / 'scripts' / 'pack_roads_data.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.fixture(scope='module')
def sources(tmp_path_factory):
  root = tmp_path_factory.mktemp('sources')
  crackforest = fixtures.make_fake_crackforest(root / 'crackforest', n_labelled=10, n_unlabelled=2)
  for name in fixtures.public_set_folders():
    fixtures.make_fake_public_set(root, name, counts=COUNTS)
  return crackforest, root / 'Datasets'


def test_chosen_is_a_seeded_fraction_in_name_order():
  packer = _packer()
  names = [f'n{i:02d}' for i in range(40)]
  picked = packer.chosen(names, 0.25, 'crack500/train', seed=0)
  assert len(picked) == 10 and picked == sorted(picked)
  # The listing order does not matter; the seed and the key do.
  assert packer.chosen(names[::-1], 0.25, 'crack500/train', seed=0) == picked
  assert packer.chosen(names, 0.25, 'crack500/train', seed=1) != picked
  assert packer.chosen(names, 0.25, 'deepcrack/train', seed=0) != picked
  assert packer.chosen(names, 0.001, 'x', seed=0) and packer.chosen([], 0.5, 'x', seed=0) == []
  # A larger fraction keeps every name of a smaller one: a pack grown keeps its old files.
  assert set(picked) < set(packer.chosen(names, 0.6, 'crack500/train', seed=0))


def _as_packed(packer, source: Path, quality: int) -> bytes:
  """`source` as the packer writes it: JPEG of `quality` where smaller, else its own bytes."""
  buffer = io.BytesIO()
  packer.upright(source).convert('RGB').save(buffer, 'JPEG', quality=quality)
  raw = source.read_bytes()
  return buffer.getvalue() if len(buffer.getvalue()) < len(raw) else raw


def test_pack_keeps_fractions_in_the_builders_layouts(sources, tmp_path):
  from crackjax.tfds_builders import reading, split_folders
  from crackjax.tfds_builders.contract import normalise

  packer = _packer()
  crackforest, public = sources
  fractions = {name: {'train': 0.5, 'valid': 1.0, 'test': 0.4} for name in packer.FOLDERS}
  out = tmp_path / 'roads'
  record = packer.pack(out, crackforest, public, fractions=fractions)
  # CrackForest: the labelled photos and their .mat files, as they are; the unlabelled left out.
  assert sorted(p.name for p in (out / 'crackforest' / 'image').iterdir()) == [
    f'{i:03d}.jpg' for i in range(1, 11)
  ]
  assert (out / 'crackforest/groundTruth/001.mat').read_bytes() == (
    crackforest / 'groundTruth/001.mat'
  ).read_bytes()
  assert record['sets']['crackforest']['labelled'] == {
    'kept': 10,
    'of': 10,
    'bytes': packer.folder_bytes(out / 'crackforest'),
  }
  for name, folder in packer.FOLDERS.items():
    found = split_folders.find_split_folders(out, (normalise(name),), layout='')
    assert sorted(found) == ['test', 'train', 'valid']
    for split, (images, masks) in found.items():
      pairs = split_folders.split_pairs(split, images, masks, what=name)
      kept = round(fractions[name][split] * COUNTS[split])
      assert len(pairs) == kept == record['sets'][name][split]['kept']
      assert record['sets'][name][split]['of'] == COUNTS[split]
      for pair in pairs:
        assert pair.image_path.suffix == '.jpg' and pair.mask_path.suffix == '.png'
        assert PIL.Image.open(pair.mask_path).mode == '1'
        source = public / folder / f'{split}_lab' / f'{pair.name}.jpg'
        np.testing.assert_array_equal(reading.load_mask(pair.mask_path), reading.load_mask(source))
        photo = PIL.Image.open(pair.image_path)
        assert photo.size == PIL.Image.open(public / folder / split / f'{pair.name}.jpg').size
        # Train parts at TRAIN_QUALITY, validation and test at QUALITY (where smaller).
        quality = packer.TRAIN_QUALITY if split == 'train' else packer.QUALITY
        assert pair.image_path.read_bytes() == _as_packed(
          packer, public / folder / split / f'{pair.name}.jpg', quality
        ), (name, split)
  written = json.loads((out / 'pack.json').read_text())
  assert written['sets'] == record['sets'] and written['seed'] == 0
  assert (written['quality'], written['train_quality']) == (90, 75)
  assert written['bytes'] == record['bytes'] > 0
  # The same seed packs the same files; an existing pack is never written over.
  again = packer.pack(tmp_path / 'again', crackforest, public, fractions=fractions)
  assert again['sets'] == record['sets']
  for split in ('train', 'test'):
    assert sorted(p.name for p in (out / 'Datasets/Crack500' / split).iterdir()) == sorted(
      p.name for p in (tmp_path / 'again/Datasets/Crack500' / split).iterdir()
    )
  with pytest.raises(SystemExit, match='exists'):
    packer.pack(out, crackforest, public)


def test_tiny_pack_and_its_report(sources, tmp_path, capsys):
  packer = _packer()
  crackforest, public = sources
  out = tmp_path / 'tiny'
  argv = [f'--out={out}', f'--crackforest={crackforest}', f'--public={public}', '--tiny']
  assert packer.main(argv) == 0
  printed = capsys.readouterr().out
  record = json.loads((out / 'pack.json').read_text())
  assert record['tiny'] and record['fractions'] is None
  assert record['sets']['crack500']['train']['kept'] == min(6, COUNTS['train'])
  assert record['sets']['deepcrack']['valid']['kept'] == 3
  assert 'crack500       train' in printed and 'A device call would send' in printed
  assert 'limit 64 MiB' in printed


def _run_tiny(script: str, sources, tmp_path, **env: str):
  """A one-call GPU script with TINY=1 on this CPU, its tiny pack made from the fake copies
  `sources`, TFDS data under its WORK."""
  crackforest, public = sources
  return fixtures.run_gpu_script(
    script,
    tmp_path,
    timeout=600,
    TINY='1',
    CRACKFOREST=str(crackforest),
    PUBLIC=str(public),
    TFDS_DATA_DIR=None,
    **env,
  )


@pytest.mark.slow
def test_release_roads_gpu_script_tiny_on_fake_datasets(sources, tmp_path):
  """scripts/release_roads_gpu.sh with TINY=1 (about 2 min): the tiny pack of the fake copies,
  the GPU's stages and the CPU's finish; the bfloat16 file comes back with the records, and
  its card holds the file's own test scores of every dataset."""
  from crackjax.models import model_file

  done, log = _run_tiny('scripts/release_roads_gpu.sh', sources, tmp_path)
  assert done.returncode == 0, log[-4000:]
  assert 'train exit code 0' in log and '<- best' in log and '[finish: ' in log
  out = tmp_path / 'out'
  assert sorted(p.name for p in out.iterdir()) == [
    'log.txt',
    'release_run.tar.gz',
    'roads-unet.safetensors',
  ]
  card = model_file.read(out / 'roads-unet.safetensors').card
  tests = {(s['dataset'], s.get('copy')) for s in card['scores'] if s['split'] == 'test'}
  assert tests == {
    ('crackforest', None),
    ('deepcrack', 'crops'),
    ('crack500', 'crops'),
    ('gaps384', None),
    ('aiglern_trimm', None),
  }
  assert 'bfloat16' in card
  # TFDS prepared the pack under WORK, not in the home folder.
  assert (tmp_path / 'work' / 'tfds' / 'crack500').is_dir()
  # Back here: its recipe's LODO row into the card (no condition of the gate), then the gate:
  # roads-unet-cpu scored on the same test images, and the tiny file refused against it.
  from crackjax.configs import lodo

  fold = {'images': 3, 'strict': {'stored': 40.0, 'ods': 50.0}}
  rows = {'base (gpu)': {m: fold for m in lodo.MEMBERS}, 'MTSCrack (its mask: output > 0)': {
    m: {'strict': {'stored': 30.0, 'ods': 30.0}} for m in lodo.MEMBERS}}  # fmt: skip
  (tmp_path / 'lodo.json').write_text(json.dumps({'command': ['bench/lodo.py'], 'rows': rows}))
  done, log = _run_tiny(
    'scripts/release_roads_gpu.sh',
    sources,
    tmp_path,
    STAGES='lodo gate',
    LODO_TABLE=str(tmp_path / 'lodo.json'),
    LODO_ROW='base (gpu)',
  )
  assert done.returncode == 1, log[-4000:]
  assert model_file.read(out / 'roads-unet.safetensors').card['lodo']['lead'] == {'strict': 10.0}
  header = '| split | photos | new | released | difference | 95% interval | verdict | MTSCrack'
  assert header in log and 'Release refused: ' in log
  gate = json.loads((tmp_path / 'work' / 'gate.json').read_text())
  assert sorted(gate['splits']) == sorted(f'{s}_test' for s in lodo.MEMBERS)
  assert not gate['ok'] and gate['resamples'] == 1000


@pytest.mark.slow
def test_lodo_gpu_script_tiny_on_fake_datasets(sources, tmp_path):
  """scripts/lodo_gpu.sh with TINY=1 and RELEASE=1: two held-out sets side by side with the
  release run of the same recipe, each fold trained on the tiny pack's other four, then
  exported and scored on its held-out test part; the table, the folds' records (no checkpoint
  or model file among them), the one fold file asked back and the release's file come back."""
  import tarfile

  from crackjax.models import model_file

  done, log = _run_tiny(
    'scripts/lodo_gpu.sh',
    sources,
    tmp_path,
    RECIPES='base',
    HELD_OUT='crackforest aiglern_trimm',
    TEST_TIME='2',
    RETURN_MODELS='aiglern_trimm',
    FINISH_STAGES='export,score,fp,photo',
    RELEASE='1',
    # A 2-core CPU exports and scores the tiny folds in minutes (the GPU call's 2.5 are short).
    FINISH_MINUTES='15',
  )
  assert done.returncode == 0, log[-4000:]
  for phase in ('train', 'finish'):
    for held_out in ('crackforest', 'aiglern_trimm'):
      assert f'{phase}, held out {held_out}: exit code 0' in log
  assert 'release run (base): exit code 0' in log
  out = tmp_path / 'out'
  assert sorted(p.name for p in out.iterdir()) == [
    'lodo_base_smoke_aiglern_trimm.safetensors',
    'lodo_gpu.json',
    'lodo_gpu.md',
    'lodo_gpu_runs.tar.gz',
    'log.txt',
    'release',
  ]
  # RELEASE=1: the release run of the same recipe beside the folds (configs/release/
  # roads_unet.py:base,tiny), its file and records in release/.
  assert sorted(p.name for p in (out / 'release').iterdir()) == [
    'log.txt',
    'release_run.tar.gz',
    'roads-unet.safetensors',
  ]
  release_log = (out / 'release' / 'log.txt').read_text()
  assert 'config configs/release/roads_unet.py:base,tiny' in release_log
  assert 'train exit code 0' in release_log
  # The file asked back is the fold's export, in bfloat16 (DTYPE's default).
  card = model_file.read(out / 'lodo_base_smoke_aiglern_trimm.safetensors').card
  assert 'bfloat16' in card and 'trained without aiglern_trimm' in card['notes']
  table = json.loads((out / 'lodo_gpu.json').read_text())
  scored = table['rows']['base (smoke)']
  assert set(scored) == {'crackforest', 'aiglern_trimm'}
  assert all(0 <= s['strict']['stored'] <= 100 for s in scored.values())
  # TEST_TIME=2: the same files scored again at scale 2, a row of the same table.
  assert set(table['rows']['base (smoke) at scales 2']) == {'crackforest', 'aiglern_trimm'}
  with tarfile.open(out / 'lodo_gpu_runs.tar.gz') as tar:
    names = tar.getnames()
  assert './base_smoke/aiglern_trimm/heldout/aiglern_trimm_test/eval.json' in names
  assert './base_smoke/aiglern_trimm/heldout_2/aiglern_trimm_test/photo_thresholds.json' in names
  assert not [n for n in names if 'checkpoints' in n or n.endswith('.safetensors')]


@pytest.mark.slow
def test_release_roads_cpu_script_from_nothing_then_resumed(sources, tmp_path):
  """scripts/release_roads_cpu.sh with the `smoke` config (about a minute): a fresh WORK trains
  until its (tiny) plateau and exports the best epoch; the same command again resumes the
  finished run and trains no further epoch."""
  from crackjax.models import model_file

  crackforest, public = sources
  env = dict(
    ARG='smoke',
    CRACKFOREST=str(crackforest),
    PUBLIC=str(public),
    DATA_DIR=str(tmp_path / 'tfds'),
    MIN_EPOCHS='2',
    PATIENCE='1',
    MAX_EPOCHS='3',
    # The fake CrackForest has 6 train photos, not the real one's 72.
    EXTRA='--config.data.mix.crackforest.train_split=train[:4] '
    '--config.data.mix.crackforest.valid_split=train[4:]',
  )
  done, log = fixtures.run_gpu_script(
    'scripts/release_roads_cpu.sh', tmp_path, timeout=600, STAGES='train export', **env
  )
  assert done.returncode == 0, log[-4000:]
  run = tmp_path / 'work' / 'roads-unet-cpu'
  scored = sorted(p.name for p in run.glob('epoch_*.json'))
  assert scored[:2] == ['epoch_001.json', 'epoch_002.json'] and len(scored) <= 3
  assert 'plateau reached' in log or 'MAX_EPOCHS=3 reached' in log
  assert 'Exporting step' in log
  assert model_file.read(tmp_path / 'work' / 'roads-unet-cpu.safetensors').card['name'] == (
    'roads-unet-cpu'
  )
  again, log = fixtures.run_gpu_script(
    'scripts/release_roads_cpu.sh', tmp_path, timeout=600, STAGES='train', **env
  )
  assert again.returncode == 0, log[-4000:]
  assert sorted(p.name for p in run.glob('epoch_*.json')) == scored
  # The lodo stage: a LODO table's row of the five held-out sets into the card.
  from crackjax.configs import lodo

  fold = {'images': 3, 'strict': {'stored': 40.0, 'ods': 50.0}}
  rows = {'mine (short)': {m: fold for m in lodo.MEMBERS}, 'MTSCrack (its mask: output > 0)': {
    m: {'strict': {'stored': 30.0, 'ods': 30.0}} for m in lodo.MEMBERS}}  # fmt: skip
  (tmp_path / 'lodo.json').write_text(json.dumps({'command': ['bench/lodo.py'], 'rows': rows}))
  table = dict(LODO_TABLE=str(tmp_path / 'lodo.json'), LODO_ROW='mine (short)')
  done, log = fixtures.run_gpu_script(
    'scripts/release_roads_cpu.sh', tmp_path, timeout=600, STAGES='lodo', **env, **table
  )
  assert done.returncode == 0, log[-4000:]
  card = model_file.read(tmp_path / 'work' / 'roads-unet-cpu.safetensors').card
  assert sorted(card['lodo']['sets']) == sorted(lodo.MEMBERS)
  assert card['lodo']['lead'] == {'strict': 10.0}
  assert 'strict mean F1 40.0 at the stored threshold, 50.0 at ODS, on 5 held-out sets' in log
  # The gate stage: a file not scored on the test splits (no `score` stage) is refused before
  # `register` (and before the released model is scored), in one line.
  done, log = fixtures.run_gpu_script(
    'scripts/release_roads_cpu.sh', tmp_path, timeout=600, STAGES='gate register', **env
  )
  assert done.returncode == 2, log[-4000:]
  says = f"gate: {tmp_path / 'work' / 'score'}: no such folder (the new file's scores: its score"
  assert says in log
  assert not (tmp_path / 'work' / 'gate.json').exists()
  assert not (tmp_path / 'work' / 'score_released').exists()
