"""The builders' READMEs run as written (as tests/test_recipes.py runs the recipes), and
CrackForest's download is a pinned commit checked by content, its licence in its info."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow_datasets as tfds

from crackjax.tfds_builders.crackforest import CrackForest
from crackjax.tfds_builders.crackforest import crackforest_dataset_builder as cfd
from crackjax.tfds_builders.errors import DatasetError
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]
REAL_CRACKFOREST = Path('/work/shared/datasets/crackforest')


def readme_snippets() -> dict[str, str]:
  """Builder name -> its README's python block (each README has at most one)."""
  found = {}
  for readme in sorted((REPO / 'tfds_builders').glob('*/README.md')):
    blocks = re.findall(r'```python\n(.*?)```', readme.read_text(), flags=re.DOTALL)
    assert len(blocks) <= 1, f'{readme}: one python block expected'
    if blocks:
      found[readme.parent.name] = blocks[0]
  return found


def test_every_snippet_is_tested():
  assert set(readme_snippets()) == {'crackforest', 'crack_folder'}


@pytest.mark.parametrize('builder', ['crackforest', 'crack_folder'])
def test_snippet_runs_as_written_and_writes_under_home(builder, tmp_path):
  home, work = tmp_path / 'home', tmp_path / 'work'
  work.mkdir(parents=True)
  # The data where the snippet says it is: a copy of the repository under ~/data, or the
  # roads/images and roads/masks folders of the current folder.
  if builder == 'crackforest':
    fixtures.make_fake_crackforest(home / 'data' / 'CrackForest-dataset', n_labelled=6)
  else:
    fixtures.make_fake_folder(work / 'roads', n=6)
  script = work / 'snippet.py'
  script.write_text(readme_snippets()[builder] + '\nprint("records", len(train))\n')
  env = {**os.environ, 'HOME': str(home), 'PYTHONPATH': str(REPO)}
  done = subprocess.run(
    [sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=300
  )
  assert done.returncode == 0, done.stderr[-2000:]
  assert re.search(r'^records [1-9]', done.stdout, flags=re.MULTILINE), done.stdout
  assert (home / 'tensorflow_datasets' / builder).is_dir()
  # TFDS does not expand '~': a snippet passing '~/...' made a folder named '~' here.
  assert not (work / '~').exists()


def test_download_is_a_pinned_commit():
  assert re.fullmatch(r'[0-9a-f]{40}', cfd.COMMIT)
  assert cfd.URL.endswith(f'/archive/{cfd.COMMIT}.zip')
  assert 'refs/heads' not in cfd.URL


@pytest.mark.skipif(not REAL_CRACKFOREST.is_dir(), reason='the real CrackForest is not here')
def test_the_checksum_is_that_of_the_published_dataset():
  # /work/shared/datasets/crackforest is the repository at that commit, file for file.
  assert cfd.content_sha256(REAL_CRACKFOREST) == cfd.CONTENT_SHA256


@pytest.fixture
def downloads(tmp_path, monkeypatch):
  """A 'download' that extracts to a fake CrackForest archive folder, no network."""
  extracted = tmp_path / 'extracted'
  fixtures.make_fake_crackforest(extracted / f'CrackForest-dataset-{cfd.COMMIT}', n_labelled=6)
  monkeypatch.setattr(cfd, 'probe_connection', lambda url: None)
  monkeypatch.setattr(
    tfds.download.DownloadManager, 'download_and_extract', lambda self, url: str(extracted)
  )
  return extracted


def _causes(error: BaseException):
  while error is not None:
    yield error
    error = error.__cause__ or error.__context__


def test_a_download_of_other_content_is_refused(downloads, tmp_path):
  builder = CrackForest(data_dir=str(tmp_path / 'tfds'))
  with pytest.raises(Exception) as raised:
    builder.download_and_prepare()
  messages = [str(e) for e in _causes(raised.value) if isinstance(e, DatasetError)]
  assert messages and f'is not commit {cfd.COMMIT[:12]}' in messages[0], messages
  assert cfd.URL in messages[0] and '--config.data.manual_dir' in messages[0]


def test_a_download_of_the_pinned_content_prepares(downloads, tmp_path, monkeypatch):
  digest = cfd.content_sha256(downloads / f'CrackForest-dataset-{cfd.COMMIT}')
  monkeypatch.setattr(cfd, 'CONTENT_SHA256', digest)
  builder = CrackForest(data_dir=str(tmp_path / 'tfds'))
  builder.download_and_prepare()
  assert len(builder.as_data_source('train')) + len(builder.as_data_source('test')) == 6


def test_the_licence_is_in_the_dataset_info(tmp_path):
  info = CrackForest(data_dir=str(tmp_path / 'tfds')).info
  assert 'non-commercial research purposes only' in info.redistribution_info.license
