"""Every model shipped in the package (crackjax/models/released/) is what its registry entry and
card say: the same bytes, the same scores, the same predictions.

The card's test scores are reproduced in two ways: its self check (the model's output on a
synthetic image, no data needed) to 1e-5, and, where the CrackForest archive is on this
machine, the per-image F1 of the card's first test images under each protocol, at each image's
recorded threshold, to 1e-4 (tolerance for float32 summation order across machines; the
thresholds sit on a 0.01 grid, so a different map would move F1 by far more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from crackjax.deploy import models_command, predictor, self_check
from crackjax.deploy import release as release_lib
from crackjax.models import hub, model_file

REPO_ROOT = Path(__file__).resolve().parents[1]
CRACKFOREST = next(
  (
    p
    for p in (
      Path('/work/shared/datasets/crackforest'),
      REPO_ROOT.parent / 'shared/datasets/crackforest',
    )
    if (p / 'groundTruth').is_dir()
  ),
  None,
)
MODELS = hub.released()
NAMES = [m['name'] for m in MODELS]


def test_the_package_ships_a_model():
  assert NAMES, 'crackjax/models/released/registry.json lists no model'
  total = sum(m['size'] for m in MODELS)
  assert total <= 20 * 2**20, f'{total / 2**20:.1f} MiB of released models (at most ~20)'


@pytest.mark.parametrize('name', NAMES)
def test_file_matches_its_registry_entry_and_card(name):
  entry = hub.entry(name)
  path = hub.resolve(name)
  assert path == hub.RELEASED_DIR / entry['file']
  assert model_file.file_sha256(path) == entry['sha256']
  assert path.stat().st_size == entry['size']
  # The entry is what the release script derives from the file's card.
  extra = {k: entry[k] for k in ('config', 'made_by', 'superseded_by') if k in entry}
  held_out = entry['scored_on'].split()[1]
  assert release_lib.registry_entry(path, name, held_out, **extra) == entry
  card = model_file.read(path).card
  # A model kept after a newer one took its name carries the name it was released under.
  assert card['name'] == entry.get('superseded_by', name)
  assert card['data']['licence'] == entry['licence']


@pytest.mark.parametrize('name', NAMES)
def test_self_check_reproduces(name):
  card = model_file.read(hub.resolve(name)).card
  got = self_check.self_check(predictor.Predictor.from_pretrained(name))
  want = card['self_check']
  assert got['crack_pixels'] == pytest.approx(want['crack_pixels'], abs=2)
  for key in ('mean_probability', 'max_probability'):
    assert got[key] == pytest.approx(want[key], abs=1e-5)
  np.testing.assert_allclose(
    [p[2] for p in got['pixels']], [p[2] for p in want['pixels']], atol=1e-5
  )


@pytest.fixture(scope='module')
def crackforest_test(tmp_path_factory):
  """The real CrackForest test split, prepared once (skips where the archive is absent)."""
  if CRACKFOREST is None:
    pytest.skip('the CrackForest archive is not on this machine (../shared/datasets/crackforest)')
  import tensorflow_datasets as tfds

  from crackjax import tfds_builders

  builder = tfds_builders.CrackForest(data_dir=str(tmp_path_factory.mktemp('tfds')))
  builder.download_and_prepare(
    download_config=tfds.download.DownloadConfig(manual_dir=str(CRACKFOREST))
  )
  source = builder.as_data_source('test')
  return {bytes(source[i]['name']).decode(): source[i] for i in range(len(source))}


# The released files predicting CrackForest's archive, prepared first: end to end, slow.
@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_card_scores_reproduce_on_crackforest_test_images(name, crackforest_test):
  from crackjax import evaluation

  card = model_file.read(hub.resolve(name)).card
  (scores,) = [s for s in card['scores'] if (s['dataset'], s['split']) == ('crackforest', 'test')]
  model = predictor.Predictor.from_pretrained(name)
  checked = 0
  for protocol, result in scores['protocols'].items():
    for row in result['first_images']:
      example = crackforest_test[row['name']]
      prob = model(np.asarray(example['image']))
      gt = np.asarray(example['mask'])[..., 0]
      got = evaluation.at_threshold([prob], [gt], protocol=protocol, threshold=row['threshold'])
      assert got['f1'] == pytest.approx(row['f1'], abs=1e-4), (protocol, row)
      checked += 1
  assert checked >= 3


def test_crackjax_models_json_lists_each_model():
  out = subprocess.run(
    [sys.executable, '-m', 'crackjax.deploy.models_command', '--json'],
    capture_output=True,
    text=True,
    check=True,
    cwd=REPO_ROOT.parent,  # not the repository: the installed package's registry
  ).stdout
  listed = json.loads(out)
  assert [m['name'] for m in listed] == NAMES
  for m in listed:
    assert {'name', 'size', 'sha256', 'data', 'licence', 'scores'} <= set(m)
    for protocol, s in m['scores'].items():
      assert set(s) == {'ods', 'ois', 'ap'}, protocol
  table = models_command.table(listed)
  assert all(n in table for n in NAMES)


@pytest.mark.slow
def test_from_an_empty_folder_with_only_the_package(tmp_path):
  """The issue's acceptance, as a user runs it: in an empty folder, the installed commands and
  `Predictor.from_pretrained` by name, no run, no repository, no network."""
  from tests import fixtures

  name = NAMES[0]
  env = {**os.environ, hub.CACHE_ENV: str(tmp_path / 'cache')}

  def command(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout

  listed = json.loads(command('crackjax-models', '--json'))
  assert name in [m['name'] for m in listed]
  fixtures.write_image(tmp_path / 'photo.jpg', fixtures.fake_pair((120, 200), 0)[0], quality=95)
  command('crackjax-predict', f'--model={name}', '--out=O', 'photo.jpg')
  assert (tmp_path / 'O' / 'masks' / 'photo.png').is_file()
  code = (
    'import numpy as np, PIL.Image, crackjax; '
    f'p = crackjax.Predictor.from_pretrained({name!r}); '
    "m = p(np.asarray(PIL.Image.open('photo.jpg'))); print(m.shape, m.dtype)"
  )
  assert command(sys.executable, '-c', code).strip() == '(120, 200) float32'
  images, masks = fixtures.make_fake_folder(tmp_path / 'labelled', n=3)
  command('crackjax-evaluate', f'--model={name}', f'--folder={images}:{masks}', '--out=DIR')
  assert list((tmp_path / 'DIR').glob('*/eval.json'))
