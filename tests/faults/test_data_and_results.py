"""Issue 38's training / data / report faults: results of different settings in one report,
photos with an EXIF orientation, a damaged newest checkpoint under --mode=eval, a damaged
prepared dataset, an interrupted TFDS preparation."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / 'results' / 'gpu_table1.json'
CPU = REPO / 'results' / 'cpu_scale_table1.json'


# ------------------------------------------------------------------ 1: one setting per row


def _export(path: Path, runs: list[dict]) -> Path:
  from crackjax.paper import records

  records.export(runs, path)
  return path


def test_a_report_over_two_settings_of_one_row_refuses_naming_what_differs(tmp_path, capsys):
  from crackjax.paper import report

  out = tmp_path / 'report'
  with pytest.raises(SystemExit) as e:
    report.main([str(GPU), str(CPU), f'--out={out}'])
  line = str(e.value.code)
  # was: GPU seeds (widths 64..1024) and a CPU-scale seed (widths 8..128) in one mean
  assert line == (
    'python -m crackjax.paper.report: table1:wce_exp_0.75 mixes settings that one row would '
    f'average: seed(s) 0, 1, 2 of {GPU} (input_size null, steps_per_epoch 300, widths '
    f'[64, 128, 256, 512, 1024]) but seed(s) 0, 1, 2 of {CPU} (input_size [160, 240], '
    'steps_per_epoch 100, widths [8, 16, 32, 64, 128]); report each setting on its own (one '
    "command per setting's inputs, each with its own --out)."
  )
  assert not out.exists()  # nothing written


@pytest.mark.parametrize(
  'field, value', [('dtype', 'bfloat16'), ('model', 'hed'), ('steps_per_epoch', 7)]
)
def test_seeds_of_one_row_with_another_setting_are_never_averaged(tmp_path, field, value):
  from crackjax.paper import records

  runs = [r for r in records.load([GPU]) if r['group'] == 'table1:wce_xie']
  other = copy.deepcopy(runs[0])
  other['seed'], other['setting'][field] = 7, value
  a, b = _export(tmp_path / 'a.json', runs), _export(tmp_path / 'b.json', [other])
  with pytest.raises(ValueError, match=rf'table1:wce_xie mixes settings .*\({field} '):
    records.load([a, b])
  # Another setting for another row is fine: each row keeps its own seeds.
  other['group'] = 'table1:wce_log_0.9'
  records.load([a, _export(tmp_path / 'b.json', [other])])


def test_each_setting_line_names_its_rows_when_the_rows_differ(tmp_path):
  from crackjax.paper import records
  from crackjax.paper.report_tables import markdown

  runs = records.load([GPU])
  log = [r for r in records.load([CPU]) if r['group'] == 'table1:wce_log_0.9']
  md = markdown(runs + log, ['strict'])
  settings = [line for line in md.splitlines() if line.startswith('- Setting')]
  assert sorted(s.split(', batch')[0] for s in settings) == [
    '- Setting (rows table1:exp_0.75_a20_wj, table1:wce_exp_0.75, table1:wce_xie): widths '
    '[64, 128, 256, 512, 1024], training input full images, 300 steps/epoch',
    '- Setting (rows table1:wce_log_0.9): widths [8, 16, 32, 64, 128], training input '
    '[160, 240], 100 steps/epoch',
  ]
  assert '(rows' not in markdown(runs, ['strict'])  # one setting: one line, as before


# ---------------------------------------------------------------- 2: EXIF orientation

# How a viewer shows stored pixels of each EXIF orientation (the EXIF 2.3 spec's words for
# where the stored row 0 / column 0 go), written with numpy independently of Pillow; the test
# stores the inverse of each so that every file shows the same upright picture.
SHOWN = {
  1: lambda a: a,
  2: lambda a: a[:, ::-1],  # mirrored left-right
  3: lambda a: a[::-1, ::-1],  # turned 180
  4: lambda a: a[::-1],  # mirrored top-bottom
  5: lambda a: a.swapaxes(0, 1),  # row 0 is the left side, column 0 the top
  6: lambda a: np.rot90(a, -1),  # row 0 is the right side: turned a quarter clockwise
  7: lambda a: a.swapaxes(0, 1)[::-1, ::-1],  # row 0 the right side, column 0 the bottom
  8: lambda a: np.rot90(a, 1),  # row 0 is the left side: turned a quarter anticlockwise
}
STORED = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 8, 7: 7, 8: 6}  # the inverse of each, by SHOWN


def _upright_picture() -> np.ndarray:
  """A 6x10 (HxW) RGB picture with no symmetry: every pixel distinct."""
  h, w = 6, 10
  y, x = np.mgrid[:h, :w]
  return np.stack([y * 40, x * 25, (y * w + x) * 4], axis=-1).astype(np.uint8)


def _write_with_orientation(path: Path, upright: np.ndarray, orientation: int) -> Path:
  import PIL.Image

  stored = np.ascontiguousarray(SHOWN[STORED[orientation]](upright))
  assert np.array_equal(SHOWN[orientation](stored), upright)  # the table is consistent
  exif = PIL.Image.Exif()
  exif[0x0112] = orientation
  PIL.Image.fromarray(stored).save(path, exif=exif)
  with PIL.Image.open(path) as check:  # Pillow wrote the tag
    assert check.getexif().get(0x0112) == orientation
  return path


@pytest.mark.parametrize('orientation', range(1, 9))
def test_images_and_masks_are_read_as_they_are_shown(tmp_path, orientation):
  from crackjax.tfds_builders import reading

  picture = _upright_picture()
  image = reading.load_rgb(_write_with_orientation(tmp_path / 'p.png', picture, orientation))
  assert np.array_equal(np.asarray(image), picture)  # was: the stored pixels, sideways
  from crackjax.deploy.predict_command import load_photo

  assert np.array_equal(load_photo(tmp_path / 'p.png'), picture)  # as crackjax-predict reads it
  mask = (picture[..., 2] > 100).astype(np.uint8) * 255
  read = reading.load_mask(
    _write_with_orientation(tmp_path / 'm.png', np.repeat(mask[..., None], 3, -1), orientation)
  )
  assert np.array_equal(read, mask // 255)


def test_a_photo_stored_sideways_is_trained_and_scored_against_its_upright_mask(tmp_path):
  """crack_folder (training, --mode=eval and crackjax-evaluate --folder read through it): a
  square and a non-square photo with Orientation 6 and masks drawn on them as shown."""
  from tests import fixtures
  from tests.test_datasets_crack_folder import build, read

  images, masks = tmp_path / 'images', tmp_path / 'masks'
  images.mkdir(), masks.mkdir()
  for name, size in (('square', (32, 32)), ('wide', (32, 48))):
    picture = np.repeat((fixtures.folder_crack_mask(size) * 200 + 30)[..., None], 3, -1)
    picture[..., 1] = np.arange(size[1], dtype=np.uint8)[None, :]  # no symmetry
    _write_with_orientation(images / f'{name}.png', picture.astype(np.uint8), 6)
    fixtures.write_image(masks / f'{name}.png', fixtures.folder_crack_mask(size) * 255)
  builder = build(images, masks, tmp_path / 'tfds')
  examples = read(builder, 'train') + read(builder, 'test')
  assert len(examples) == 2  # was: the wide one stopped on a size mismatch
  for e in examples:
    # was: the square one scored rotated against its mask (recall 52 % vs 98 % upright)
    assert np.array_equal(e['image'][..., 0] > 100, e['mask'][..., 0] == 1)


def test_a_mask_of_the_stored_pixels_names_the_exif_orientation(tmp_path):
  from crackjax.tfds_builders import reading
  from crackjax.tfds_builders.errors import DatasetError

  path = _write_with_orientation(tmp_path / 'p.png', _upright_picture(), 6)
  image = reading.load_rgb(path)  # 6x10 upright, 10x6 stored
  with pytest.raises(DatasetError) as e:
    reading.check_same_size(image, np.zeros((10, 6), np.uint8), path, tmp_path / 'm.png')
  assert str(e.value) == (
    f'Mask {tmp_path / "m.png"} is 6x10 (WxH) but its image {path} is 10x6 as shown: its EXIF '
    'orientation 6 turns its stored 6x10 pixels a quarter turn (images are read as viewers '
    'show them). Save the mask turned the same way, or the image without the orientation tag '
    '(e.g. PIL.ImageOps.exif_transpose) if the mask fits its stored pixels.'
  )


# ------------------------------------------- 6: --mode=eval with a damaged newest checkpoint


def _smoke_config(smoke_run: Path):
  from tests import fixtures

  root = smoke_run.parent / 'data'
  config = fixtures.smoke_config((root / 'raw', root / 'tfds'))
  config.eval.protocols = ('strict',)
  return config


@pytest.mark.slow  # seconds: two evaluations of the session's smoke run
def test_evaluating_an_older_step_keeps_the_newest_results(smoke_run, tmp_path, caplog):
  import shutil

  from crackjax.experiment.build import build
  from crackjax.trainer import train_command

  workdir = tmp_path / 'run'
  shutil.copytree(smoke_run, workdir)
  (workdir / 'checkpoints' / '6' / 'default' / 'manifest.ocdbt').unlink()  # step 6 damaged
  final = {n: (workdir / n).read_bytes() for n in ('eval.json', 'threshold.json')}
  assert json.loads(final['eval.json'])['step'] == 6
  caplog.set_level('WARNING')
  train_command.run_or_exit(build(_smoke_config(smoke_run)), workdir, 'eval')
  # was: eval.json and threshold.json of step 6 replaced by those of step 3
  assert {n: (workdir / n).read_bytes() for n in final} == final
  older = workdir / 'eval' / 'step_3'
  assert json.loads((older / 'eval.json').read_text())['step'] == 3
  assert json.loads((older / 'threshold.json').read_text())['step'] == 3
  assert json.loads((workdir / 'epoch_001.json').read_text())['step'] == 3  # its own record
  assert (
    f'Evaluated step 3, older than step 6, whose results {workdir} holds (its newest checkpoint '
    f"is damaged or gone): the results of step 3 are in {older}; the run's eval.json and "
    'threshold.json stay those of step 6 (--overwrite replaces them).'
  ) in caplog.text
  train_command.run_or_exit(build(_smoke_config(smoke_run)), workdir, 'eval', overwrite=True)
  assert json.loads((workdir / 'eval.json').read_text())['step'] == 3
  assert json.loads((workdir / 'threshold.json').read_text())['step'] == 3


def test_the_newest_evaluated_step_is_read_from_either_record(tmp_path):
  from crackjax.trainer import eval_records

  assert eval_records.newest_evaluated_step(tmp_path) is None
  (tmp_path / 'eval.json').write_text('{"step": 4')  # damaged: replaced as before
  assert eval_records.newest_evaluated_step(tmp_path) is None
  (tmp_path / 'threshold.json').write_text(json.dumps({'threshold': 0.4, 'step': 6}))
  assert eval_records.newest_evaluated_step(tmp_path) == 6


# ------------------------------------------------------- 8: a damaged prepared dataset


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
  """A fake CrackForest prepared once for this module: (raw, tfds) folders, not to be changed."""
  from crackjax.data import registry
  from tests import fixtures

  dirs = fixtures.smoke_data_dirs(tmp_path_factory.mktemp('data'))
  registry.prepare_dataset(fixtures.smoke_config(dirs).data.to_dict())
  return dirs


def _damaged_copy(prepared, tmp_path: Path, how: str, split: str = 'test'):
  """A copy of `prepared` whose `split` record file is cut short or has bytes flipped; returns
  (its config, its version folder)."""
  import shutil

  from tests import fixtures

  raw, tfds_dir = prepared
  shutil.copytree(tfds_dir, tmp_path / 'tfds')
  version = tmp_path / 'tfds' / 'crackforest' / '1.0.0'
  path = version / f'crackforest-{split}.array_record-00000-of-00001'
  data = bytearray(path.read_bytes())
  if how == 'cut':
    data = data[: len(data) * 3 // 4]  # its footer gone, as a copy cut short
  else:
    data[100:3000] = bytes(b ^ 0xFF for b in data[100:3000])  # the first record's chunk
  path.write_bytes(bytes(data))
  return fixtures.smoke_config((raw, tmp_path / 'tfds')), version


def _rebuild(version: Path) -> str:
  return (
    f'Delete that folder (rm -r {version}) and run the same command again: it is prepared '
    'again from its files (with --config.data.manual_dir where the dataset needs it).'
  )


def test_a_record_file_cut_short_is_named_before_anything_is_read(prepared, tmp_path):
  from crackjax.data import registry

  config, version = _damaged_copy(prepared, tmp_path, 'cut')
  with pytest.raises(registry.DatasetError) as e:
    registry.prepare_dataset(config.data.to_dict())
  assert str(e.value) == (
    f'The prepared dataset crackforest in {version} is damaged: '
    'crackforest-test.array_record-00000-of-00001 holds 0 of its 4 records (cut short?). '
    + _rebuild(version)
  )
  (version / 'crackforest-test.array_record-00000-of-00001').unlink()
  with pytest.raises(registry.DatasetError, match='-00001 is missing. Delete that folder'):
    registry.prepare_dataset(config.data.to_dict())


def test_a_damaged_record_read_later_is_one_line_too(prepared, tmp_path):
  from crackjax.data import loader, registry

  config, version = _damaged_copy(prepared, tmp_path, 'flipped')
  source = registry.get_data_source(config.data.to_dict(), 'test')  # its footer is whole
  with pytest.raises(registry.DatasetError) as e:
    list(loader.eval_examples(source))
  assert str(e.value).startswith(
    f'The prepared dataset crackforest in {version} is damaged: a record cannot be read '
    '(Corrupted Riegeli/records file: '
  )
  assert str(e.value).endswith(_rebuild(version))
  intact = registry.get_data_source(config.data.to_dict(), 'train')
  assert len(list(loader.eval_examples(intact))) == 6  # the other split reads as before


@pytest.mark.slow  # seconds: launch.py in a subprocess, twice
@pytest.mark.parametrize('how, mode', [('cut', 'eval'), ('flipped', 'train')])
def test_launch_on_a_damaged_dataset_ends_in_one_line(prepared, tmp_path, how, mode):
  import subprocess
  import sys

  config, version = _damaged_copy(prepared, tmp_path, how, 'test' if mode == 'eval' else 'train')
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / 'launch.py'),
      '--config=configs/smoke.py',
      f'--workdir={tmp_path / "run"}',
      f'--config.data.manual_dir={config.data.manual_dir}',
      f'--config.data.data_dir={config.data.data_dir}',
      f'--mode={mode}',
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert 'Traceback' not in proc.stderr  # was: a 9-10 frame 'Corrupted Riegeli' traceback
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith(f'launch.py: The prepared dataset crackforest in {version} is damaged: ')
  assert last.endswith(_rebuild(version))


# ------------------------------------- 9: a disk filled by another writer during a save


def test_asyncio_reports_of_a_failed_orbax_write_are_quiet(caplog):
  """The 3-frame traceback asyncio logged when the disk filled midway through a save (its
  future gathering the writes, not a task, whose report the filter already dropped)."""
  import logging

  from crackjax.engine import checkpoint_saves

  checkpoint_saves.quiet_abandoned_writes()
  error = ValueError(
    'RESOURCE_EXHAUSTED: Error writing "opt_state.0.nu.x/0" in OCDBT database at local file '
    '"/w/checkpoints/6.orbax-checkpoint-tmp/default.orbax-checkpoint-tmp/ocdbt.process_0/": '
    "No space left on device [os_error_code='28']"
  )
  caplog.set_level('ERROR')
  for kind in ('_GatheringFuture', 'Future', 'Task'):
    logging.getLogger('asyncio').error(
      '%s exception was never retrieved\nfuture: <%s finished exception=%r>',
      kind,
      kind,
      error,
      exc_info=(ValueError, error, None),
    )
  assert caplog.records == []  # was: '_GatheringFuture exception ...' and its traceback
  logging.getLogger('asyncio').error('Future exception was never retrieved: something else')
  assert len(caplog.records) == 1  # asyncio's other reports stay


def _full(tmp_path: Path, name: str) -> Path:
  """`tmp_path/name` as a link to /dev/full, where every write fails with ENOSPC."""
  if not Path('/dev/full').exists():
    pytest.skip('no /dev/full here')
  (tmp_path / name).symlink_to('/dev/full')
  return tmp_path / name


def test_a_full_disk_under_the_metrics_and_records_names_the_file(tmp_path, monkeypatch):
  import os

  from crackjax.runs import exits, identity
  from crackjax.runs.metric_writer import MetricWriter

  _full(tmp_path, 'metrics.jsonl')
  writer = MetricWriter(tmp_path)
  with pytest.raises(SystemExit) as e, exits.one_line_exits('launch.py'):
    writer.write_scalars(1, {'loss': 0.5})
  assert e.value.code == (  # was: 'launch.py: cannot write: No space left on device; ...'
    f'launch.py: cannot write {tmp_path / "metrics.jsonl"}: No space left on device; free some '
    'space there and run the same command again.'
  )
  _full(tmp_path, f'.eval.json.{os.getpid()}.tmp')  # write_json's temporary file
  with pytest.raises(OSError) as e:
    identity.write_json(tmp_path / 'eval.json', {'step': 6})
  assert e.value.filename == str(tmp_path / 'eval.json')
  assert not (tmp_path / f'.eval.json.{os.getpid()}.tmp').exists()  # not left behind
  assert not (tmp_path / 'eval.json').exists()


_OTHER_WRITER = """
import shutil, subprocess, sys
from crackjax.engine import checkpoint_saves
disk = sys.argv[1]
real_save = checkpoint_saves.save
def save(mngr, step, state, **kw):
  if step == 6:  # step 3 complete; another writer fills the disk once the check has passed
    checkpoint_saves.finish_saves(mngr)
    free = shutil.disk_usage(mngr.directory).free
    subprocess.run(f'head -c {max(free - 300_000, 0)} /dev/zero > {disk}/filler', shell=True)
    checkpoint_saves._short_of_space = lambda directory, state: None
  return real_save(mngr, step, state, **kw)
checkpoint_saves.save = save
from crackjax.trainer import train_command
sys.argv = ['launch.py', *sys.argv[2:]]
train_command.main('launch.py')
"""


@pytest.mark.slow  # seconds: launch.py on an 8 MB tmpfs
def test_a_disk_filled_by_another_writer_during_a_save_ends_in_one_line_naming_it(
  prepared, tmp_path
):
  import shutil
  import subprocess
  import sys
  import textwrap

  disk = tmp_path / 'disk'
  disk.mkdir()
  unshare = ['unshare', '--user', '--map-root-user', '--mount']
  probe = subprocess.run([*unshare, 'sh', '-c', f'mount -t tmpfs tmpfs {disk}'], check=False)
  if shutil.which('unshare') is None or probe.returncode:
    pytest.skip('no tmpfs can be mounted here')
  (tmp_path / 'driver.py').write_text(_OTHER_WRITER)
  raw, tfds_dir = prepared
  argv = (
    f'{sys.executable} {tmp_path / "driver.py"} {disk} --config=configs/smoke.py '
    f'--workdir={disk / "run"} --config.data.manual_dir={raw} --config.data.data_dir={tfds_dir} '
    '--config.num_epochs=5 --mode=train'
  )
  script = textwrap.dedent(f"""
    mount -t tmpfs -o size=8m tmpfs {disk} || exit 99
    cd {REPO}
    {argv} 2> {tmp_path}/err; echo $? > {tmp_path}/status
    ls -a {disk}/run/checkpoints > {tmp_path}/ls
  """)
  subprocess.run([*unshare, 'bash', '-c', script], check=True, timeout=600)
  err = (tmp_path / 'err').read_text()
  assert (tmp_path / 'status').read_text().strip() == '1', err[-3000:]
  assert 'Traceback' not in err and 'never retrieved' not in err, err[-3000:]
  last = [line for line in err.replace('\r', '\n').splitlines() if line.strip()][-1]
  # The free space is what the other writer left: any figure, but stated.
  assert re.fullmatch(
    re.escape(
      f'launch.py: cannot save the checkpoint of step 6 in {disk / "run" / "checkpoints"}: No '
      'space left on device'
    )
    + r' \(\d+\.\d MB free now\)\. '
    + re.escape(
      'Training stopped; the last complete checkpoint, step 3, is kept. Free space there (or '
      'make it writable) and run the same command again to resume.'
    ),
    last,
  ), last
  assert (tmp_path / 'ls').read_text().split() == ['.', '..', '3']


# ----------------------------------------- 10: a config that is not a ConfigDict; data_dir


@pytest.mark.parametrize(
  'returns, kind', [("{'learning_rate': 0.1}", 'dict'), ('[1]', 'list'), ('3', 'int')]
)
@pytest.mark.parametrize('overrides', [(), ('--config.learning_rate=0.3',)])
def test_a_config_file_returning_no_config_dict_is_one_line(tmp_path, returns, kind, overrides):
  from crackjax import cli

  path = tmp_path / 'mine.py'
  path.write_text(f'def get_config():\n  return {returns}\n')
  argv = ['launch.py', f'--config={path}', *overrides]
  with pytest.raises(SystemExit) as e:
    cli.parse_flags(cli.new_flag_values(argv), argv, prog='launch.py')
  assert e.value.code == (  # was: an 8-frame AttributeError traceback in the validation
    f"launch.py: --config={path}: the config file's get_config() returned a {kind}, not an "
    'ml_collections.ConfigDict; return ml_collections.ConfigDict(...) (or start from '
    'configs/base.py, as configs/crackforest_exp.py does).'
  )


@pytest.mark.parametrize('below', ['', 'sub/tfds'])
def test_a_data_dir_that_is_a_file_names_the_flag(tmp_path, below):
  from crackjax.experiment.validation import ConfigError, check_config
  from tests import fixtures

  (tmp_path / 'afile').write_text('not a folder')
  config = fixtures.smoke_config((tmp_path / 'raw', tmp_path / 'afile' / below))
  with pytest.raises(ConfigError) as e:
    check_config(config)
  where = 'is a file' if not below else f'is inside {tmp_path / "afile"}, a file'
  assert str(e.value) == (  # was: launch.py: [Errno 17] File exists: 'PATH', naming no flag
    f'--config.data.data_dir={config.data.data_dir} {where}, not a folder; name a folder '
    '(created if missing) for the prepared datasets.'
  )
  config.data.data_dir = str(tmp_path / 'new' / 'tfds')  # a folder to be made: fine
  check_config(config)


# ----------------------------------------- 12: interrupted or failed dataset preparation


def _everything(folder: Path) -> list[str]:
  return sorted(str(p.relative_to(folder)) for p in folder.rglob('*'))


def test_an_interrupted_preparation_leaves_nothing_and_the_next_one_prepares(tmp_path, monkeypatch):
  from crackjax.data import registry
  from crackjax.tfds_builders import reading
  from tests import fixtures

  config = fixtures.smoke_config(fixtures.smoke_data_dirs(tmp_path / 'data'))
  real, calls = reading.load_rgb, []

  def ctrl_c_at_the_fourth_image(path):
    calls.append(path)
    if len(calls) == 4:
      raise KeyboardInterrupt
    return real(path)

  monkeypatch.setattr(reading, 'load_rgb', ctrl_c_at_the_fourth_image)
  with pytest.raises(KeyboardInterrupt):
    registry.prepare_dataset(config.data.to_dict())
  tfds_dir = Path(config.data.data_dir)
  assert _everything(tfds_dir) == []  # was: incomplete.* (and crackforest.lock) for good
  monkeypatch.setattr(reading, 'load_rgb', real)
  assert registry.prepare_dataset(config.data.to_dict()).info.splits['test'].num_examples == 4


def test_a_killed_preparations_temporary_folder_is_removed_by_the_next(tmp_path):
  from crackjax.data import registry
  from tests import fixtures

  config = fixtures.smoke_config(fixtures.smoke_data_dirs(tmp_path / 'data'))
  stale = Path(config.data.data_dir) / 'crackforest' / 'incomplete.KILLED_1.0.0'
  stale.mkdir(parents=True)
  (stale / 'crackforest-train.array_record-00000-of-00001').write_bytes(b'half')  # kill -9
  registry.prepare_dataset(config.data.to_dict())
  assert not stale.exists()
  assert [p.name for p in stale.parent.iterdir()] == ['1.0.0']
  # The preparation's lock file goes with it (was: crackforest.lock left in data_dir).
  assert not list(Path(config.data.data_dir).glob('*.lock'))


def test_a_failed_attempt_leaves_no_empty_folders(tmp_path):
  from crackjax.data import registry
  from tests import fixtures

  junk = tmp_path / 'junk'
  junk.mkdir()
  (junk / 'readme.txt').write_text('not the dataset')
  config = fixtures.smoke_config((junk, tmp_path / 'tfds'))
  for _ in range(2):
    with pytest.raises(registry.DatasetNotFoundError, match='does not look like the CrackForest'):
      registry.prepare_dataset(config.data.to_dict())
    # was: empty tfds/crackforest/ and tfds/downloads/extracted/, warned about next time
    assert _everything(tmp_path / 'tfds') == []  # also no crackforest.lock
  assert _everything(junk) == ['readme.txt']  # the user's folder untouched
  (tmp_path / 'tfds' / 'downloads').mkdir()
  (tmp_path / 'tfds' / 'downloads' / 'mine.zip').write_text('kept')
  with pytest.raises(registry.DatasetNotFoundError):
    registry.prepare_dataset(config.data.to_dict())
  assert (tmp_path / 'tfds' / 'downloads' / 'mine.zip').read_text() == 'kept'


# ------------------------------------------- smaller: plain TFDS without the manual files


@pytest.mark.parametrize('name', ['crack360', 'aiglern', 'bjn260'])
def test_plain_tfds_without_manual_files_shows_the_builders_instructions(tmp_path, name):
  import textwrap

  import tensorflow_datasets as tfds

  from crackjax import tfds_builders
  from crackjax.tfds_builders.errors import DatasetNotFoundError

  builder = tfds.builder(name, data_dir=str(tmp_path))
  with pytest.raises(DatasetNotFoundError) as e:
    builder.download_and_prepare()
  message = str(e.value)
  assert 'instructions:)' not in message  # was: '... using instructions:).' as if none
  instructions = textwrap.dedent(type(builder).MANUAL_DOWNLOAD_INSTRUCTIONS).strip()
  assert message == (
    f'Manual directory {tmp_path / "downloads" / "manual"} does not exist or is empty. Put the '
    "dataset's files there, or pass their folder as DownloadConfig(manual_dir=DIR) (launch.py: "
    f'--config.data.manual_dir=DIR), as follows:\n{instructions}'
  )
  assert tfds_builders  # registered by its import


@pytest.mark.slow  # seconds: a run restored and scored
def test_crackjax_evaluate_on_a_damaged_record_ends_in_one_line(smoke_run, tmp_path):
  import shutil

  from crackjax.trainer import evaluate_command

  workdir = tmp_path / 'run'
  shutil.copytree(smoke_run, workdir)
  root = smoke_run.parent / 'data'
  config, version = _damaged_copy((root / 'raw', root / 'tfds'), tmp_path, 'flipped')
  recorded = json.loads((workdir / 'config.json').read_text())
  recorded['data']['data_dir'] = config.data.data_dir  # the run's data, moved and damaged
  (workdir / 'config.json').write_text(json.dumps(recorded))
  with pytest.raises(SystemExit) as e:
    evaluate_command.main([f'--workdir={workdir}', '--protocols=strict', '--workers=1'])
  line = str(e.value.code)
  assert line.startswith(
    f'crackjax-evaluate: crackforest:test: The prepared dataset crackforest in {version} is '
    'damaged: a record cannot be read (Corrupted Riegeli/records file: '
  ), line
  assert line.endswith(_rebuild(version))
