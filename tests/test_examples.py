"""The example road photos of `crackjax-predict --examples` (issue 56): drawn, deterministic,
the cracks where their masks say; the README's first command on a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax.configs import finetune
from crackjax.deploy import examples

REPO = Path(__file__).resolve().parents[1]


def test_examples_are_deterministic_and_labelled():
  for name, kind in examples.EXAMPLES.items():
    photo, mask = examples.example_photo(name)
    again, _ = examples.example_photo(name)
    np.testing.assert_array_equal(photo, again)
    assert photo.shape == (*examples.SIZE, 3) and photo.dtype == np.uint8
    if kind == 'none':
      assert not mask.any()
    else:
      # Cracks are darker than the road around them, and a small part of the photo.
      grey = photo.mean(axis=2)
      assert 0.002 < mask.mean() < 0.1
      assert grey[mask].mean() < grey[~mask].mean() - 20


def _example_files(out: Path) -> list[str]:
  """The photos crackjax-predict ``--examples`` predicts with `out` as --out: those
  `examples.write_into` returns, as `photos.find_inputs` finds them."""
  from crackjax.deploy import photos

  found, _ = photos.find_inputs([str(p) for p in examples.write_into(out)], out=out)
  return sorted(item.path.name for item in found)


def test_examples_never_overwrite_a_users_file(tmp_path):
  # Issue 78 item 2: --examples wrote its photos over a file of the user's of the same name in
  # OUT/examples/, without a word, and predicted every other photo there as an example.
  folder = tmp_path / 'out' / 'examples'
  folder.mkdir(parents=True)
  mine = folder / 'example_2_transverse.png'
  PIL.Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(mine)
  before = mine.read_bytes()
  with pytest.raises(examples.NotTheirFolder) as e:
    _example_files(tmp_path / 'out')
  line = str(e.value)
  assert '\n' not in line and str(folder) in line and examples.MANIFEST in line
  assert mine.read_bytes() == before
  assert sorted(p.name for p in folder.iterdir()) == ['example_2_transverse.png']


def test_examples_predict_only_the_examples_in_a_folder_of_their_own(tmp_path):
  out = tmp_path / 'out'
  assert _example_files(out) == sorted(examples.EXAMPLES)
  assert (out / 'examples' / examples.MANIFEST).is_file()
  # A photo of the user's put there later is no example: left alone, not predicted.
  PIL.Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(out / 'examples' / 'mine.png')
  assert _example_files(out) == sorted(examples.EXAMPLES)
  assert (out / 'examples' / 'mine.png').exists()
  # An example changed since it was written is the user's now: refused, kept as it is.
  changed = out / 'examples' / 'example_4_clean.png'
  changed.write_bytes(b'not the example')
  with pytest.raises(examples.NotTheirFolder, match='changed since') as e:
    _example_files(out)
  assert str(changed) in str(e.value)
  assert changed.read_bytes() == b'not the example'
  # A file where the folder would be, or a link: refused in one line too.
  other = tmp_path / 'other'
  other.mkdir()
  (other / 'examples').write_text('mine')
  with pytest.raises(examples.NotTheirFolder, match='not a folder of the examples'):
    _example_files(other)
  linked = tmp_path / 'linked'
  linked.mkdir()
  (linked / 'examples').symlink_to(tmp_path / 'elsewhere', target_is_directory=True)
  with pytest.raises(ValueError, match='is a symbolic link'):
    _example_files(linked)
  assert not (tmp_path / 'elsewhere').exists()


@pytest.mark.slow
def test_predict_examples_writes_and_predicts_them(smoke_run, tmp_path):
  out = tmp_path / 'predictions'
  done = subprocess.run(
    [
      sys.executable,
      '-m',
      'crackjax.deploy.predict_command',
      f'--workdir={smoke_run}',
      f'--out={out}',
      '--examples',
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert done.returncode == 0, done.stderr[-2000:]
  written = sorted(p.name for p in (out / 'examples').iterdir())
  assert written == sorted([*examples.EXAMPLES, examples.MANIFEST])
  assert len(list((out / 'masks').iterdir())) == len(examples.EXAMPLES)
  shipped = np.asarray(PIL.Image.open(out / 'examples' / 'example_2_transverse.png'))
  np.testing.assert_array_equal(shipped, examples.example_photo('example_2_transverse.png')[0])
  # Issue 78 item 2: a photo of the user's in the folder is never predicted as an example ...
  PIL.Image.fromarray(np.full((64, 64, 3), 128, np.uint8)).save(out / 'examples' / 'mine.png')
  again = subprocess.run(
    [*done.args, '--overwrite'], cwd=REPO, capture_output=True, text=True, timeout=300
  )
  assert again.returncode == 0, again.stderr[-2000:]
  assert not (out / 'masks' / 'mine.png').exists()
  # ... and a folder holding the user's own file under an example's name is refused.
  (out / 'examples' / 'example_1_longitudinal.png').write_bytes(b'mine')
  refused = subprocess.run(
    [*done.args, '--overwrite'], cwd=REPO, capture_output=True, text=True, timeout=300
  )
  assert refused.returncode == 1
  assert refused.stderr.strip().splitlines()[-1].startswith('crackjax-predict: --examples: ')
  assert (out / 'examples' / 'example_1_longitudinal.png').read_bytes() == b'mine'


def test_finetuning_starts_from_the_general_model_by_default():
  c = finetune.get_config()
  assert c.model_init.pretrained == finetune.DEFAULT_MODEL == 'roads-unet-cpu'
  assert finetune.get_config('crackforest-unet-cpu').model_init.pretrained == 'crackforest-unet-cpu'


def test_the_progress_bar_restarts_its_clock_after_compiling():
  import io
  import time

  import tqdm

  from crackjax.runs import logs

  f = io.StringIO()
  bar = logs.progress_bar(10, 100)
  bar.close()
  bar = tqdm.tqdm(total=100, initial=10, desc=bar.desc, file=f, mininterval=0)
  assert 'compiling' in bar.desc
  time.sleep(0.5)  # the first step compiles: slow
  bar.update(1)
  logs.restart_after_compiling(bar, 11)
  for _ in range(5):
    time.sleep(0.01)
    bar.update(1)
  last = f.getvalue().split('\r')[-1]
  assert last.startswith('train: ') and '16/100' in last
  rate = float(last.split(', ')[-1].split('it/s')[0])
  assert rate > 20  # the steps' own rate, not one step per half second
