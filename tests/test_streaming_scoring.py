"""Scoring that streams (issue 45): counts kept instead of maps give `evaluation.evaluate`'s
results; crackjax-evaluate --folder reads the folder's files without a TFDS copy; an
interrupted scoring claims nothing complete; memory does not grow with the photos (slow)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from crackjax import evaluation
from crackjax.evaluation import threshold_choice
from crackjax.evaluation.streaming import StreamScorer
from crackjax.trainer import eval_records, evaluate_command, scoring
from tests import fixtures

PROTOCOLS = ('strict', 'tolerance_thin_gt')


def _close(a, b, where=''):
  """Equal to 1e-6 (numbers) and exactly otherwise, recursively."""
  if isinstance(a, dict):
    assert set(a) == set(b), where
    for k in a:
      _close(a[k], b[k], f'{where}.{k}')
  elif isinstance(a, list | tuple):
    assert len(a) == len(b), where
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
      _close(x, y, f'{where}[{i}]')
  elif isinstance(a, float):
    assert a == pytest.approx(b, abs=1e-6), where
  else:
    assert a == b, where


def _maps(n=6, seed=0):
  rng = np.random.default_rng(seed)
  gts = [np.zeros((24, 32), bool) for _ in range(n)]
  for k, g in enumerate(gts[1:]):
    g[5 + k % 10, 3:29] = True
  probs = [np.clip(g * 0.6 + rng.random(g.shape) * 0.5, 0, 1).astype(np.float32) for g in gts]
  return probs, gts  # image 0 has no crack pixel (OIS rule 1)


@pytest.mark.parametrize('workers', [1, 2])
def test_counts_kept_give_the_results_of_evaluate(workers):
  probs, gts = _maps()
  grids = {'strict': 100, 'tolerance': 99, 'tolerance_thin_gt': 99}
  with StreamScorer(grids, operating_points={'run': 0.37}, workers=workers) as scorer:
    for p, g in zip(probs, gts, strict=True):
      scorer.add(p, g)
    results, points = scorer.results()
    part, _ = scorer.results([1, 3, 4])  # e.g. one dataset of a mixture
  for protocol in grids:
    want = evaluation.evaluate(probs, gts, protocol=protocol)
    _close(results[protocol].to_json(), want, protocol)  # typed, and the same JSON
    point = evaluation.at_threshold(probs, gts, protocol=protocol, threshold=0.37)
    _close(points[protocol]['run'].to_json(threshold_first=True), point)
    sub = evaluation.evaluate([probs[i] for i in (1, 3, 4)], [gts[i] for i in (1, 3, 4)],
                              protocol=protocol)  # fmt: skip
    _close(part[protocol].to_json(), sub)


@pytest.mark.parametrize('workers', [1, 2])
def test_a_photo_threshold_point_counts_each_photo_at_its_own(workers):
  # threshold_choice.PhotoThreshold as an operating point: each image thresholded at its own
  # photo_threshold, the counts pooled; the point's threshold is the mean of theirs. The
  # fixed point beside it is as without it.
  probs, gts = _maps()
  photo = threshold_choice.PhotoThreshold(0.8, 0.3)
  grids = {'strict': 100, 'tolerance_thin_gt': 99}
  with StreamScorer(
    grids, operating_points={'run': 0.37, 'photo': photo}, workers=workers
  ) as scorer:
    for p, g in zip(probs, gts, strict=True):
      scorer.add(p, g)
    _, points = scorer.results()
    _, part = scorer.results([1, 3])
  own = [threshold_choice.photo_threshold(p, 0.8, 0.3) for p in probs]
  assert len(set(own)) > 1 and all(0.3 * 0.8 < t < 0.8 for t in own)  # not one threshold
  for protocol in grids:
    counts = [
      evaluation.get_protocol(protocol).counts([p], [g], np.array([t]))
      for p, g, t in zip(probs, gts, own, strict=True)
    ]
    mp, npred, mg, ngt = (sum(int(c[k][0, 0]) for c in counts) for k in range(4))
    p, r = mp / npred, mg / ngt  # pooled over the images, as at any operating point
    point = points[protocol]['photo']
    assert (point.precision, point.recall) == (pytest.approx(p), pytest.approx(r))
    assert point.f1 == pytest.approx(2 * p * r / (p + r))
    assert point.threshold == pytest.approx(np.mean(own))
    assert part[protocol]['photo'].threshold == pytest.approx(np.mean([own[1], own[3]]))
    fixed = evaluation.at_threshold(probs, gts, protocol=protocol, threshold=0.37)
    _close(points[protocol]['run'].to_json(threshold_first=True), fixed)
  with pytest.raises(ValueError, match=r'a weight in \[0, 1\]'):
    threshold_choice.PhotoThreshold(0.8, 1.5)


@pytest.mark.parametrize('workers', [1, 2])
def test_each_images_row_as_it_comes_is_its_final_one(workers):
  # What an image's counts alone decide (its OIS F1, P/R/F1 at 0.5) is handed on as they are
  # complete, in image order, and equals the final per-image row: a crack-free image, one
  # with F1 0 everywhere and saturated maps (ties, which the ODS threshold breaks) included.
  probs, gts = _maps(8)
  probs[6] = np.zeros_like(probs[6])  # misses its crack at every threshold: F1 0 everywhere
  probs[7] = np.where(gts[7], 1.0, 0.0).astype(np.float32)  # ties over the whole grid
  grids = {'strict': 100, 'tolerance_thin_gt': 99}
  came = []
  with StreamScorer(grids, workers=workers, on_image=lambda i, r: came.append((i, r))) as scorer:
    for p, g in zip(probs, gts, strict=True):
      scorer.add(p, g)
    results, _ = scorer.results()
  assert [i for i, _ in came] == list(range(len(probs)))
  for protocol in grids:
    for i, row in came:
      final = results[protocol].to_json()['per_image'][i]
      assert row[protocol] == {k: final[k] for k in row[protocol]}, (protocol, i)
      assert set(row[protocol]) == {'f1', 'fixed_precision', 'fixed_recall', 'fixed_f1'}


def test_a_bad_map_is_named_by_its_index():
  probs, gts = _maps(3)
  probs[1] = probs[1].copy()
  probs[1][0, 0] = np.nan
  with StreamScorer({'strict': 100}) as scorer, pytest.raises(ValueError, match='image 1'):
    for p, g in zip(probs, gts, strict=True):
      scorer.add(p, g)


def _restored(run):
  from crackjax.experiment import restored
  from crackjax.experiment.build import build

  experiment = build(restored.read_config(run))
  return experiment, experiment.states.restore(run, inference=True)


@pytest.mark.slow
def test_a_folder_streamed_scores_as_evaluate_and_copies_nothing(
  smoke_run, tmp_path, monkeypatch, capsys
):
  home, tfds_dir = tmp_path / 'home', tmp_path / 'tfds'
  home.mkdir()
  monkeypatch.setenv('HOME', str(home))
  monkeypatch.setenv('TFDS_DATA_DIR', str(tfds_dir))

  def no_copy(*args, **kwargs):
    raise AssertionError('--folder prepared a TFDS copy')

  from crackjax.data import registry

  monkeypatch.setattr(registry, '_prepared_builder', no_copy)
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=5, sizes={3: (40, 36)})
  argv = [f'--workdir={run}', f'--folder={images}:{masks}', f'--protocols={",".join(PROTOCOLS)}']
  assert evaluate_command.main([*argv, '--workers=2']) == 0
  assert f'| folder:{images} | strict | 5 |' in capsys.readouterr().out
  # Nothing prepared or copied anywhere: no TFDS folder, no split list in the run.
  assert not (home / 'tensorflow_datasets').exists() and not tfds_dir.exists()
  assert not (run / 'eval' / 'lists').exists()
  [path] = (run / 'eval').glob('crack_folder_test_*/eval.json')
  record = json.loads(path.read_text())
  assert {'eval_per_image.csv', 'pr_curve.png', 'threshold.json'} <= {
    p.name for p in path.parent.iterdir()
  }

  # Today's path: every map held, then `evaluation.evaluate` (and `at_threshold`).
  from crackjax.data import folder_stream

  experiment, state = _restored(run)
  config = evaluate_command.data_configs(experiment.config, [], [f'{images}:{masks}'], {}, run)[0][
    1
  ]
  total, examples = folder_stream.folder_examples(config.data.to_dict())
  examples = list(examples)
  assert total == 5 and [e['name'] for e in examples] == [f'img_{i:02d}' for i in range(5)]
  probs = scoring.predict_examples(experiment.model, state, examples)
  gts = [e['mask'][..., 0] for e in examples]
  threshold = json.loads((run / 'threshold.json').read_text())['threshold']
  assert record['num_images'] == 5 and list(record['results']) == list(PROTOCOLS)
  for protocol in PROTOCOLS:
    old = evaluation.evaluate(
      probs, gts, protocol=protocol, num_thresholds=experiment.eval_plan.thresholds_of(protocol)
    )
    new = record['results'][protocol]
    for key in ('ods', 'ods_grid', 'ois', 'ois_mean_f1', 'ap', 'fixed', 'curve'):
      _close(new[key], old[key], f'{protocol}.{key}')
    counts = ('name', 'tp', 'fp', 'fn')  # strict's TP, FP, FN at the threshold in use
    rows = [{k: v for k, v in r.items() if k not in counts} for r in new['per_image']]
    _close(rows, old['per_image'], f'{protocol}.per_image')
    assert [r['name'] for r in new['per_image']] == [e['name'] for e in examples]
    point = evaluation.at_threshold(probs, gts, protocol=protocol, threshold=threshold)
    _close(new['operating_points']['run'], point)
    if protocol == 'strict':  # each photo's counts at the run's threshold, as it alone gives
      for r, p, g in zip(new['per_image'], probs, gts, strict=True):
        g = np.asarray(g).astype(bool)
        pred = np.asarray(p).reshape(g.shape) > threshold
        assert (r['tp'], r['fp'], r['fn']) == tuple(
          int(x.sum()) for x in (pred & g, pred & ~g, ~pred & g)
        )
    else:
      assert not {'tp', 'fp', 'fn'} & set(new['per_image'][0])


@pytest.mark.slow
def test_an_interrupted_scoring_claims_nothing_complete(smoke_run, tmp_path, monkeypatch):
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=6)
  argv = [f'--workdir={run}', '--data=test', f'--folder={images}:{masks}', '--protocols=strict']
  predict = scoring.predict_probabilities
  calls = []

  def interrupted(*args, **kwargs):
    calls.append(1)
    # The run's 4 test images, the 4 its figure shows again (worst to best), then the
    # folder's third photo.
    if len(calls) == 11:
      raise KeyboardInterrupt
    return predict(*args, **kwargs)

  monkeypatch.setattr(scoring, 'predict_probabilities', interrupted)
  with pytest.raises(SystemExit):
    evaluate_command.main([*argv, '--workers=1'])
  assert len(calls) == 11
  folders = {p.name: p for p in (run / 'eval').iterdir() if p.is_dir()}
  # The first data argument was scored whole; the folder's holds nothing claimed complete,
  # and there is no cross-dataset table of a half-scored pair.
  assert (folders.pop('crackforest_test') / 'eval.json').is_file()
  assert not [e for p in folders.values() for e in p.glob('**/eval.json')]
  assert not (run / 'eval' / 'cross_dataset.md').exists()
  # The per-image rows came as each photo was scored, under a name that claims nothing: the
  # two photos scored before the Ctrl-C, and no eval_per_image.csv.
  (folder,) = folders.values()
  partial = folder / f'{eval_records.PER_IMAGE_CSV}.partial'
  with partial.open(newline='') as f:
    came = list(csv.DictReader(f))
  assert [r['name'] for r in came] == ['img_00', 'img_01']
  assert not (folder / eval_records.PER_IMAGE_CSV).exists()

  # The same command again, whole: the CSV holds every photo, the rows that came equal to its
  # own, and the partial file is gone.
  monkeypatch.setattr(scoring, 'predict_probabilities', predict)
  evaluate_command.main([*argv, '--workers=1'])
  assert (folder / 'eval.json').is_file() and not partial.exists()
  with (folder / eval_records.PER_IMAGE_CSV).open(newline='') as f:
    final = {r['name']: r for r in csv.DictReader(f)}
  assert len(final) == 6
  for row in came:
    assert row == {k: final[row['name']][k] for k in row}

  # A photo that cannot be read mid-way: its one line, and no eval.json either.
  (images / 'img_03.jpg').write_bytes(b'not a jpeg')
  shutil.rmtree(run / 'eval')
  with pytest.raises(SystemExit) as e:
    evaluate_command.main([f'--workdir={run}', f'--folder={images}:{masks}', '--workers=1'])
  assert 'img_03.jpg' in str(e.value) and '\n' not in str(e.value)
  assert not list((run / 'eval').glob('**/eval.json'))


_MEASURE = """
import sys, threading, time
from crackjax.trainer import evaluate_command
peak = [0]
def sample():
  while True:
    with open('/proc/self/status') as f:
      rss = next(int(l.split()[1]) for l in f if l.startswith('VmRSS:'))
    peak[0] = max(peak[0], rss)
    time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
code = evaluate_command.main(sys.argv[1:])
print('PEAK_KB', peak[0])
sys.exit(code)
"""


@pytest.mark.slow
def test_memory_does_not_grow_with_the_photos(smoke_run, tmp_path):
  # Photos of 192x192: the old path held ~0.7 MB of arrays a photo (image, mask, map), so
  # 400 photos would have added ~280 MB over 50; streamed, a photo leaves a few kB.
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  peaks = {}
  for n in (50, 400):
    images, masks = fixtures.make_fake_folder(tmp_path / f'f{n}', n=n, size=(192, 192))
    argv = [f'--workdir={run}', f'--folder={images}:{masks}', '--protocols=strict']
    env = {**os.environ, 'JAX_PLATFORMS': 'cpu'}
    done = subprocess.run(
      [sys.executable, '-c', _MEASURE, *argv, '--workers=1'],
      env=env,
      capture_output=True,
      text=True,
      timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peaks[n] = int(done.stdout.split('PEAK_KB')[1]) / 1024
  assert peaks[400] - peaks[50] < 60, peaks  # MB; ~280 if every map were held
