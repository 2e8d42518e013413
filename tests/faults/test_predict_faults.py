"""Faults of crackjax-predict's outputs (issue 38): an --out inside the input folder, photos
named twice, half-written photos (a full disk, Ctrl-C), two predictions into one --out, a photo
too large for the memory left.

Each ends in the right result or in one line that names the file, flag or value; nothing a
user made is lost. The photos are small: the commands run in-process on the session's smoke
run; the main cases (outputs inside the inputs, a full disk, a held --out) in the fast tier, the
rest in the slow one.
"""

import csv
import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax.deploy import hostmem, photos, predict_batch, predict_command
from crackjax.runs import outputs

REPO = Path(__file__).resolve().parents[2]


def photo(h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  image = rng.integers(150, 230, size=(h, w, 3), dtype=np.uint8)
  image[np.arange(h), np.arange(h) % w] = 30
  return image


def table_names(out: Path, table: str = 'measurements.csv') -> list[str]:
  return sorted(r['name'] for r in csv.DictReader((out / table).open()))


def one_line_exit(argv) -> str:
  with pytest.raises(SystemExit) as e:
    predict_command.main(argv)
  message = e.value.code
  assert isinstance(message, str) and '\n' not in message, message
  return message


@pytest.fixture
def folder(tmp_path):
  photos_dir = tmp_path / 'photos'
  photos_dir.mkdir()
  for i, name in enumerate(('001', '002', '003')):
    PIL.Image.fromarray(photo(seed=i)).save(photos_dir / f'{name}.png')
  return photos_dir


def args(run, out, *inputs, extra=()):
  return [f'--workdir={run}', f'--out={out}', '--notune_malloc', *extra, *map(str, inputs)]


# ------------------------------------------------------------------- outputs are not inputs


@pytest.mark.slow
def test_an_out_inside_the_input_folder_is_never_read_as_input(smoke_run, folder, capsys):
  # Was: the second run predicted its own probs/, masks/ and overlays/ as photos (3 became 12).
  out = folder / 'pred'
  assert predict_command.main(args(smoke_run, out, folder)) == 0
  assert table_names(out) == ['001', '002', '003']
  capsys.readouterr()
  assert predict_command.main(args(smoke_run, out, folder, extra=['--overwrite'])) == 0
  err = capsys.readouterr().err
  assert table_names(out) == ['001', '002', '003']
  said = [line for line in err.splitlines() if 'never read as inputs' in line]
  assert said == [
    f'crackjax-predict: {folder}: left out --out={out}: outputs of crackjax are never read as '
    'inputs'
  ]
  # Another crackjax output folder in there (an earlier --out) is left out by its manifest,
  # a glob included; the user's own photos beside it are not.
  manifest = json.loads((out / outputs.MANIFEST).read_text())['files']
  assert 'probs/001.png' in manifest and 'measurements.csv' in manifest
  other = folder.parent / 'other'
  PIL.Image.fromarray(photo(seed=5)).save(out / 'mine.png')
  assert predict_command.main(args(smoke_run, other, folder)) == 0
  err = capsys.readouterr().err
  assert table_names(other) == ['001', '002', '003', 'pred/mine']
  assert (
    f'crackjax-predict: {folder}: left out 12 file(s) an earlier crackjax command wrote (its '
    '.crackjax-outputs.json): outputs of crackjax are never read as inputs'
  ) in err.splitlines()
  found, problems = photos.find_inputs([f'{folder}/**/*.png'])
  assert sorted(i.path.name for i in found) == ['001.png', '002.png', '003.png', 'mine.png']
  assert any('left out 6 file(s)' in p for p in problems)


@pytest.mark.slow
def test_a_photo_named_twice_is_predicted_once(smoke_run, folder, capsys):
  out = folder.parent / 'out'
  argv = args(smoke_run, out, folder, folder / '002.png', folder / '002.png')
  assert predict_command.main(argv) == 0
  assert table_names(out) == ['001', '002', '003']
  assert (
    f'crackjax-predict: {folder / "002.png"} and 1 more named more than once (a folder and a '
    'file in it, or twice): each photo is predicted once'
  ) in capsys.readouterr().err.splitlines()


# ------------------------------------------------------------------------ half-written photos


def failing_save(monkeypatch, at: int, error: BaseException):
  """PIL's save writes some bytes, then fails with `error`, at its `at`-th call (1-based):
  a disk that fills up in the middle of a file, or a Ctrl-C there."""
  real = PIL.Image.Image.save
  calls = []

  def save(self, fp, *a, **k):
    calls.append(fp)
    if len(calls) == at:
      Path(fp).write_bytes(b'\x89PNG half')
      raise error
    return real(self, fp, *a, **k)

  monkeypatch.setattr(PIL.Image.Image, 'save', save)
  return calls


@pytest.mark.slow
def test_a_full_disk_names_the_file_and_the_same_command_finishes_the_rest(
  smoke_run, folder, monkeypatch, capsys
):
  # Was: a 0-byte map counted as done; the rerun skipped it and left it out of the tables.
  out = folder.parent / 'out'
  argv = args(smoke_run, out, folder)
  # Saves: 001's probs, masks and overlays, then 002's probs, masks (5th: the disk is full;
  # the page's thumbnails come after every photo).
  failing_save(monkeypatch, 5, OSError(errno.ENOSPC, 'No space left on device'))
  assert one_line_exit(argv) == (
    f'crackjax-predict: cannot write {out}/masks/002.png: No space left on device; free some '
    'space there and run the same command again.'
  )
  assert not (out / 'masks' / '002.png').exists()  # never a half file under a map's name
  assert not list(out.rglob('*.partial'))
  assert not (out / 'measurements.csv').exists()
  first = (out / 'probs' / '001.png').read_bytes()
  monkeypatch.undo()
  capsys.readouterr()
  assert predict_command.main(argv) == 0  # the same command again: no flag needed
  err = capsys.readouterr().err
  assert 'wrote 3 image(s) (1 of them done by an earlier run of this command)' in err
  assert table_names(out) == ['001', '002', '003']
  assert (out / 'probs' / '001.png').read_bytes() == first  # done: not predicted again
  for name in ('001', '002', '003'):
    for f in photos.map_files(out, name):
      with PIL.Image.open(f) as image:
        image.load()  # whole files
  page = (out / 'index.html').read_text()
  assert page.count('<div class="card"') == 3
  # Finished: the progress file stays as OUT's manifest, its last line says so ...
  manifest = (out / photos.PROGRESS_FILE).read_text().splitlines()
  assert json.loads(manifest[-1]) == {'finished': 3} and len(manifest) == 5
  # ... and the same command again predicts nothing (every photo is done), other settings are
  # refused in one line: they would mix two predictions in one folder.
  assert predict_command.main(argv) == 0
  err = capsys.readouterr().err
  assert 'wrote 3 image(s) (3 of them done by an earlier run of this command)' in err
  assert (out / 'probs' / '001.png').read_bytes() == first
  threshold = json.loads((smoke_run / 'threshold.json').read_text())['threshold']
  assert one_line_exit([*argv, '--threshold=0.3']) == (
    f'crackjax-predict: {out} holds a prediction made with other settings (threshold: '
    f'{threshold} -> 0.3): its photos would be kept, not predicted again; pass --overwrite to '
    'replace it, or choose another --out.'
  )


@pytest.mark.slow
def test_a_finished_prediction_predicts_only_the_photos_added_since(smoke_run, folder, capsys):
  # A survey's tree grows by a day of photos: the same command predicts those alone.
  out = folder.parent / 'out'
  argv = args(smoke_run, out, folder)
  assert predict_command.main(argv) == 0
  page = (out / 'index.html').read_text()
  before = {n: (out / 'probs' / f'{n}.png').stat().st_mtime_ns for n in ('001', '002', '003')}
  PIL.Image.fromarray(photo(seed=7)).save(folder / '004.png')
  capsys.readouterr()
  assert predict_command.main(argv) == 0
  assert 'wrote 4 image(s) (3 of them done by an earlier run' in capsys.readouterr().err
  assert table_names(out) == ['001', '002', '003', '004']
  assert {n: (out / 'probs' / f'{n}.png').stat().st_mtime_ns for n in before} == before
  # The page of the three as it was, a fourth card beside them (thumbnails from the files).
  assert (out / 'index.html').read_text().count('<div class="card"') == 4
  assert page.count('data:image/jpeg;base64,') == 3
  # A photo gone from the tree stays in OUT and its manifest, not in the tables, said.
  (folder / '001.png').unlink()
  assert predict_command.main(argv) == 0
  assert 'holds 1 photo(s) predicted earlier with these settings that this command does not ' in (
    capsys.readouterr().err
  )
  assert table_names(out) == ['002', '003', '004']


@pytest.mark.slow
def test_ctrl_c_between_a_photos_files_redoes_that_photo(smoke_run, folder, monkeypatch, capsys):
  out = folder.parent / 'out'
  argv = args(smoke_run, out, folder)
  # 6th save: 002's overlay (after 001's three). Its map and mask are in place, its overlay is
  # not.
  failing_save(monkeypatch, 6, KeyboardInterrupt())
  with pytest.raises(SystemExit) as e:
    predict_command.main(argv)
  assert e.value.code == 130
  assert 'run the same command again to predict the others' in capsys.readouterr().err
  assert (out / 'probs' / '002.png').is_file() and not (out / 'overlays' / '002.png').exists()
  monkeypatch.undo()
  # Other settings would mix two predictions in one table: refused in one line.
  threshold = json.loads((smoke_run / 'threshold.json').read_text())['threshold']
  assert one_line_exit([*argv, '--threshold=0.3']) == (
    f'crackjax-predict: {out} holds an unfinished prediction made with other settings '
    f'(threshold: {threshold} -> 0.3): run it again with its own flags to finish it, pass '
    '--overwrite to start again, or choose another --out.'
  )
  assert predict_command.main(argv) == 0
  assert 'wrote 3 image(s) (1 of them done by an earlier run' in capsys.readouterr().err
  assert table_names(out) == ['001', '002', '003']
  assert (out / 'overlays' / '002.jpg').is_file()


@pytest.mark.slow
def test_finishing_an_interrupted_run_keeps_a_users_file_in_out(
  smoke_run, folder, monkeypatch, capsys
):
  # Only maps this command began are its own to write again: a file of the user's under a
  # map's name stays, with or without an unfinished run beside it.
  out = folder.parent / 'out'
  (out / 'probs').mkdir(parents=True)
  (out / 'probs' / '001.png').write_bytes(b'mine')
  argv = args(smoke_run, out, folder)
  failing_save(monkeypatch, 4, KeyboardInterrupt())  # 003's probs, after 002's three saves
  with pytest.raises(SystemExit):
    predict_command.main(argv)
  monkeypatch.undo()
  capsys.readouterr()
  assert predict_command.main(argv) == 0
  err = capsys.readouterr().err
  assert f'skipped {folder}/001.png: {out}/probs/001.png exists (pass --overwrite)' in err
  assert (out / 'probs' / '001.png').read_bytes() == b'mine'
  assert table_names(out) == ['002', '003']


# -------------------------------------------------------------------------------- one --out

_HOLD = textwrap.dedent(
  """
  import sys, time
  from crackjax.runs import identity
  with identity.lock(sys.argv[1]):
    print('held', flush=True)
    time.sleep(60)
  """
)


def test_two_predictions_into_one_out_the_second_ends_in_one_line(smoke_run, folder):
  # Was: both exited 0 and one's tables replaced the other's.
  out = folder.parent / 'out'
  holder = subprocess.Popen(
    [sys.executable, '-c', _HOLD, str(out)], stdout=subprocess.PIPE, text=True, cwd=REPO
  )
  try:
    assert holder.stdout.readline().strip() == 'held'
    message = one_line_exit(args(smoke_run, out, folder))
  finally:
    holder.kill()
    holder.wait()
  assert message.startswith(f'crackjax-predict: --out={out}: {out.resolve()} is in use by pid ')
  assert f'pid {holder.pid} on ' in message and 'Wait for it to end' in message
  assert not (out / 'probs').exists() and not (out / 'measurements.csv').exists()


# ------------------------------------------------------------------------------ memory


@pytest.mark.slow
def test_a_photo_that_will_not_fit_in_memory_is_skipped_with_a_line(
  smoke_run, tmp_path, monkeypatch, capsys
):
  # Was: a 108 MP photo under a 3 GB limit ended in numpy's _ArrayMemoryError traceback.
  folder = tmp_path / 'photos'
  folder.mkdir()
  PIL.Image.fromarray(photo(300, 400)).save(folder / 'a_big.png')
  PIL.Image.fromarray(photo(20, 30)).save(folder / 'b_small.png')
  monkeypatch.setattr(hostmem, 'BYTES_PER_TILE_PIXEL', 0)
  monkeypatch.setattr(hostmem, 'available_bytes', lambda: hostmem.BYTES_PER_PIXEL * 10_000)
  out = tmp_path / 'out'
  assert predict_command.main(args(smoke_run, out, folder)) == 0
  err = capsys.readouterr().err
  assert table_names(out) == ['b_small']
  [line] = [line for line in err.splitlines() if 'a_big.png' in line]
  assert line.startswith(f'crackjax-predict: skipped {folder}/a_big.png: 400x300 (0.12 MP) needs ')
  free = f'{hostmem.BYTES_PER_PIXEL * 10_000 / 1e9:.3g}'
  assert line.endswith(
    f'of memory to predict and measure, and {free} GB are free here; free some memory, '
    'predict it where there is more (or cut it into parts), or try anyway with '
    '--ignore_memory_estimate'
  )
  assert hostmem.PhotoMemory().needs(12000, 9000) == hostmem.BYTES_PER_PIXEL * 108_000_000
  # The override: the same photo predicted.
  again = tmp_path / 'again'
  argv = args(smoke_run, again, folder, extra=['--ignore_memory_estimate'])
  assert predict_command.main(argv) == 0
  assert table_names(again) == ['a_big', 'b_small']


@pytest.mark.slow
def test_a_large_photo_names_each_stage_after_its_tiles(smoke_run, tmp_path, capsys):
  PIL.Image.fromarray(photo(300, 400)).save(tmp_path / 'wide.png')
  out = tmp_path / 'out'
  argv = args(smoke_run, out, tmp_path / 'wide.png', extra=['--tile_size=128'])
  assert predict_command.main(argv) == 0
  err = capsys.readouterr().err
  assert 'wide: after the tiles' in err
  for stage in ('probs/', 'overlays/', 'skeleton', 'widths', 'cracks'):
    assert stage in err


def test_the_memory_estimate_uses_the_photo_not_a_huge_tile_size(monkeypatch):
  """--tile_size=100000 refused a 0.15 MP photo as needing about 6e+03 GB (issue 44)."""
  import jax.numpy as jnp

  from crackjax.deploy.predictor import Predictor

  class Tiny:  # only what Predictor reads of a model here
    input_multiple = 16

    def apply(self, variables, images):
      return jnp.zeros_like(images[..., :1])

  predictor = Predictor(Tiny(), {}, tile_size=100_000)
  memory = hostmem.PhotoMemory(lambda w, h: predictor_command_pixels(predictor, w, h))
  need = memory.needs(480, 320)
  assert need < 1e9, need  # the photo padded to 480x320 at most, not 100000^2 pixels
  assert need == hostmem.BYTES_PER_PIXEL * 480 * 320 + hostmem.BYTES_PER_TILE_PIXEL * 480 * 320
  # A tiled photo: one batch of its tiles.
  tiled = Predictor(Tiny(), {}, tile_size=256)
  th, _, tw, _ = tiled.layout(2000, 3000)
  assert predictor_command_pixels(tiled, 3000, 2000) == th * tw * tiled.batch_size


def predictor_command_pixels(predictor, w, h):
  return predict_batch.call_pixels(predictor, w, h)


def test_an_address_space_limit_is_memory_not_free(monkeypatch):
  """Under `ulimit -v` a 40 MP photo ended in numpy's _ArrayMemoryError: RLIMIT_AS was not
  read (issue 44)."""
  import resource

  monkeypatch.setattr(resource, 'getrlimit', lambda which: (hostmem.resident_bytes() + 10**6, -1))
  free = hostmem.available_bytes()
  assert free is not None and free < 10**6 + 1  # at most what the limit leaves
  memory = hostmem.PhotoMemory()
  assert 'needs about' in memory.refusal('big.jpg', 8000, 5000)


SIGINT_UNDER_IGNORING_PARENT = """
import os, signal, sys, time
from crackjax.deploy import predict_command

def work(fv, inputs):  # the command's body, after its flags
  os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C or `kill -INT` would
  time.sleep(20)
  return 0

predict_command._main = work
sys.exit(predict_command.main([]))
"""


@pytest.mark.slow
def test_predict_under_a_parent_ignoring_sigint_is_stopped_by_it(tmp_path):
  """A parent that ignores SIGINT (trap '' INT, nohup) passed that on: crackjax-predict could
  not be stopped by SIGINT (issue 44)."""
  import signal

  proc = subprocess.run(
    [sys.executable, '-c', SIGINT_UNDER_IGNORING_PARENT],
    capture_output=True,
    text=True,
    timeout=120,
    cwd=REPO,
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
  )
  assert proc.returncode == 130, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith('crackjax-predict: interrupted (Ctrl-C)')


def test_the_sigint_handler_of_the_caller_is_put_back(monkeypatch):
  import signal

  seen = []
  monkeypatch.setattr(predict_command, '_main', lambda fv, inputs: seen.append(signal.getsignal(2)))
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    predict_command.main([])
    assert seen == [signal.default_int_handler]
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
  finally:
    signal.signal(signal.SIGINT, previous)


def test_an_output_folder_without_its_manifest_as_input_gets_a_note(tmp_path):
  """Its manifest deleted, an output folder given as input had its maps predicted as photos
  without a word (issue 44): they still are (the manifest is how outputs are told), said."""
  out = tmp_path / 'pred'
  for kind, suffix in photos.MAP_KINDS:
    (out / kind).mkdir(parents=True)
    PIL.Image.fromarray(photo()).save(out / kind / f'road{suffix}')
  (out / 'measurements.csv').write_text('name\nroad\n')
  found, problems = photos.find_inputs([str(out)])
  assert len(found) == 3
  (note,) = [p for p in problems if p.startswith('note: ')]
  assert f'{out} looks like the output of crackjax-predict' in note
  assert outputs.MANIFEST in note and 'its 3 map(s) are predicted as photos' in note
  # Its map folder alone too; a plain folder of photos gets no such note.
  assert [p for p in photos.find_inputs([str(out / 'probs')])[1] if 'its 1 map(s)' in p]
  plain = tmp_path / 'photos'
  plain.mkdir()
  PIL.Image.fromarray(photo()).save(plain / 'a.png')
  assert photos.find_inputs([str(plain)])[1] == []
