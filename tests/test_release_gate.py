"""The release gate (crackjax/release/gate.py, issue 76): a paired bootstrap over photos of the
strict F1 difference, new minus released, per test split, each file at its stored threshold; a
split fails only when its 95% interval lies wholly below -1 point, and the release needs the
mean over the splits ahead by 2 points. Also the per-photo counts it reads: each photo's TP, FP
and FN at the threshold in use, recorded by the evaluation (eval.json and its CSV)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from crackjax.evaluation.result import ImageRow, read_record
from crackjax.evaluation.streaming import StreamScorer
from crackjax.release import gate
from crackjax.runs import identity
from crackjax.trainer import eval_records, evaluate_command


def _photos(n: int, quality: float, seed: int, jitter: float = 0.0) -> np.ndarray:
  """(n, 3) TP, FP, FN of `n` photos (crack pixels varying from photo to photo) by a model
  finding `quality` of each photo's crack pixels and as many false ones as it misses, each
  photo's own rate jittered by `jitter` (a model's luck on that photo)."""
  rng = np.random.default_rng(seed)
  cracks = np.random.default_rng(1234).integers(50, 3000, n)  # the same photos for every file
  q = np.clip(quality + jitter * rng.standard_normal(n), 0.05, 0.99)
  tp = rng.binomial(cracks, q)
  fn = cracks - tp
  fp = rng.binomial(cracks, 1 - q)
  return np.stack([tp, fp, fn], axis=1)


def test_pooled_f1_by_hand():
  counts = np.array([[3, 1, 0], [1, 0, 2]])  # TP 4, FP 1, FN 2: F1 = 8 / 11
  assert gate.pooled_f1(counts.sum(axis=0)) == pytest.approx(8 / 11, abs=1e-15)
  assert gate.pooled_f1(np.array([0, 0, 0])) == 0.0
  assert gate.pooled_f1(np.array([0, 5, 0])) == 0.0
  # A bootstrap of identical files: no difference, an interval of one point.
  v = gate.paired_bootstrap(counts, counts, resamples=1000)
  assert (v.diff, v.low, v.high, v.ok, v.photos) == (0.0, 0.0, 0.0, True, 2)
  assert v.new_f1 == pytest.approx(800 / 11)
  # Two photos, each file better on one: the full-sample difference by hand.
  other = np.array([[2, 0, 1], [2, 1, 1]])  # TP 4, FP 1, FN 2 too, pooled: F1 equal
  assert gate.paired_bootstrap(counts, other).diff == pytest.approx(0.0, abs=1e-12)
  better = np.array([[3, 0, 0], [3, 0, 0]])  # F1 1
  v = gate.paired_bootstrap(better, counts)
  assert v.diff == pytest.approx(100 * (1 - 8 / 11)) and v.low <= v.diff <= v.high


def test_a_known_loss_is_caught():
  # Three splits; on the large one the new file finds fewer crack pixels: about 5 points of F1.
  old = {'big': _photos(2000, 0.70, 1, 0.1), 'a': _photos(300, 0.6, 2, 0.1)}
  new = {'big': _photos(2000, 0.65, 3, 0.1), 'a': _photos(300, 0.68, 4, 0.1)}
  splits = {k: gate.paired_bootstrap(new[k], old[k]) for k in old}
  big = splits['big']
  assert -6.5 < big.diff < -3.5 and big.high < -1.0 and not big.ok
  assert splits['a'].diff > 5 and splits['a'].ok
  verdict = gate.judge(splits)
  assert verdict.failed == ['big'] and not verdict.ok
  # Ahead on the mean is no excuse for a split lost beyond noise.
  assert verdict.mean > 0 and not gate.judge(splits, min_mean_lead=-100).ok


def test_two_files_that_differ_only_by_noise_pass():
  # Same underlying quality, each photo's counts drawn again (another seed: another training's
  # luck, photo by photo): no split fails, whatever their sizes.
  splits = {}
  for i, n in enumerate((46, 237, 611, 3313)):
    splits[f's{n}'] = gate.paired_bootstrap(
      _photos(n, 0.7, 10 + i, 0.15), _photos(n, 0.7, 20 + i, 0.15)
    )
  for name, v in splits.items():
    assert v.ok, (name, v)
    assert v.low < v.diff < v.high and v.low < 0 < v.high, (name, v)
    assert abs(v.diff) < 3, (name, v)
  verdict = gate.judge(splits)
  assert not verdict.failed
  # Noise does not make a release either: the mean lead of 2 points is not there.
  assert not verdict.ahead and not verdict.ok
  assert gate.judge(splits, min_mean_lead=-2).ok


def test_the_verdict_by_hand_and_the_floor():
  def v(diff: float, high: float) -> gate.SplitVerdict:
    return gate.SplitVerdict(diff, diff - 1, high, True, 50 + diff, 50, 10)

  splits = {'a': v(4.0, 6.0), 'b': v(-2.0, -0.99), 'c': v(4.0, 5.0)}  # mean 2: just enough
  verdict = gate.judge(splits)
  assert verdict.mean == pytest.approx(2.0) and verdict.ok and not verdict.failed
  splits['b'] = v(-2.0, -1.01)  # the interval wholly below -1
  verdict = gate.judge(splits)
  assert verdict.failed == ['b'] and verdict.ahead and not verdict.ok
  assert gate.judge(splits, floor=-2.0).ok
  assert not gate.judge({'a': v(1.9, 3.0)}).ok  # 1.9 < 2
  with pytest.raises(gate.GateInputError, match='no split'):
    gate.judge({})


def test_the_bootstrap_is_seeded():
  new, old = _photos(3000, 0.68, 5, 0.2), _photos(3000, 0.7, 6, 0.2)
  first = gate.paired_bootstrap(new, old, seed=3)
  assert gate.paired_bootstrap(new, old, seed=3) == first
  other = gate.paired_bootstrap(new, old, seed=4)
  assert other.diff == first.diff and (other.low, other.high) != (first.low, first.high)
  with pytest.raises(ValueError, match='expected two'):
    gate.paired_bootstrap(new, old[:-1])


def test_photos_are_paired_by_name_and_mismatches_refused():
  counts = np.arange(12).reshape(4, 3)
  new = gate.SplitCounts(('a', 'b', 'c', 'd'), counts)
  old = gate.SplitCounts(('d', 'c', 'b', 'a'), counts[::-1])
  got_new, got_old = gate.paired('s', new, old)
  assert (got_new == got_old).all()
  moved = gate.SplitCounts(('a', 'b', 'c', 'x'), counts)
  with pytest.raises(gate.GateInputError) as e:
    gate.paired('deepcrack_test', new, moved)
  assert str(e.value) == (
    'deepcrack_test: not the same photos: 1 only for the new file (d); 1 only for the '
    'released one (x).'
  )


# ----------------------------------------------------------------- records as the evaluation
def _score(folder: Path, gts, probs, threshold: float, names=None) -> Path:
  """An evaluation folder as `crackjax-evaluate --model` leaves it (eval.json and the CSV,
  through the same writers), strict and tolerance, at the file's stored `threshold`."""
  names = names or [f'p{i:03d}' for i in range(len(gts))]
  with StreamScorer({'strict': 100, 'tolerance': 99}, operating_points={'run': threshold}) as s:
    for p, g in zip(probs, gts, strict=True):
      s.add(p, g)
    results, points = s.results()
    results = eval_records.with_tp_fp_fn(results, s.tp_fp_fn(threshold))
    f1 = {p: s.image_f1(p, threshold) for p in results}
  record = eval_records.evaluation_record(
    lambda step: 1, 'ds', (6, 100), 'test', names, results, eval_seconds=1.0, per_image=True
  )
  record = eval_records.add_points(record, points)
  folder.mkdir(parents=True)
  identity.write_json(folder / 'eval.json', record.to_json())
  from crackjax.evaluation import plots

  plots.write_per_image_csv(folder / 'eval_per_image.csv', names, results, (threshold, f1))
  return folder


def _maps(n: int, quality: float, seed: int, size=(12, 14)):
  """`n` labelled photos and a model's maps of them: cracks found with probability `quality`
  (the same photos whatever the model: the labels' seed is fixed)."""
  labels = np.random.default_rng(99)
  gts = [labels.random(size) > 0.8 for _ in range(n)]
  rng = np.random.default_rng(seed)
  probs = [
    np.clip(np.where(g, rng.random(size) < quality, rng.random(size) < 0.1) * 0.8 + 0.1, 0, 1)
    for g in gts
  ]
  return gts, [p.astype(np.float32) for p in probs]


def test_per_photo_counts_give_the_f1_at_the_stored_threshold(tmp_path):
  gts, probs = _maps(7, 0.7, 1)
  noise = np.random.default_rng(7)
  probs = [np.clip(p + noise.random(p.shape) * 0.3, 0, 1) for p in probs]
  folder = _score(tmp_path / 's', gts, probs, 0.437)  # no grid point: counted at it exactly
  record = read_record(folder / 'eval.json')
  strict = record.results['strict']
  rows = strict.per_image
  for row, p, g in zip(rows, probs, gts, strict=True):
    pred = p > 0.437
    want = (pred & g, pred & ~g, ~pred & g)
    assert (row.tp, row.fp, row.fn) == tuple(int(x.sum()) for x in want)
  total = np.array([[r.tp, r.fp, r.fn] for r in rows]).sum(axis=0)
  run = strict.operating_points['run']
  assert float(gate.pooled_f1(total)) == run.f1  # exactly the record's F1 there
  assert 2 * total[0] / (2 * total[0] + total[1] + total[2]) == pytest.approx(run.f1, abs=1e-12)
  # The tolerance protocols' counts are not TP, FP and FN: none recorded.
  assert all(r.tp is None for r in record.results['tolerance'].per_image)
  with (folder / 'eval_per_image.csv').open(newline='') as f:
    csv_rows = list(csv.DictReader(f))
  assert [int(r['strict_tp']) for r in csv_rows] == [r.tp for r in rows]
  assert [int(r['strict_fn']) for r in csv_rows] == [r.fn for r in rows]
  assert 'tolerance_tp' not in csv_rows[0]
  # A threshold neither a point nor on the grid is not claimed.
  with StreamScorer({'strict': 100}) as s:
    s.add(probs[0], gts[0])
    assert s.tp_fp_fn(0.437) == {} and list(s.tp_fp_fn(0.43)) == ['strict']
  # A record without them (an older evaluation) still reads: rows without counts.
  data = json.loads((folder / 'eval.json').read_text())
  for row in data['results']['strict']['per_image']:
    for key in ('tp', 'fp', 'fn'):
      del row[key]
  (folder / 'eval.json').write_text(json.dumps(data))
  assert read_record(folder / 'eval.json').results['strict'].per_image[0].tp is None
  assert 'tp' not in ImageRow.from_json(data['results']['strict']['per_image'][0]).to_json()


def _run_gate(capsys, *argv: str) -> tuple[int, str, str]:
  code = gate.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def test_the_command_on_evaluation_folders(tmp_path, capsys):
  # Two splits, the released file fair on both; a new file much better, and one much worse.
  for name, n in (('a_test', 60), ('b_test', 40)):
    gts, fair = _maps(n, 0.6, 1)
    _, good = _maps(n, 0.95, 2)
    _, bad = _maps(n, 0.25, 3)
    _score(tmp_path / 'old' / name, gts, fair, 0.5)
    _score(tmp_path / 'good' / name, gts, good, 0.5)
    _score(tmp_path / 'bad' / name, gts, bad, 0.5)
  out = tmp_path / 'gate.json'
  code, printed, _ = _run_gate(
    capsys, f'--new={tmp_path / "good"}', f'--old={tmp_path / "old"}', f'--out={out}'
  )
  assert code == 0, printed
  lines = printed.splitlines()
  assert lines[0].startswith('Release gate: strict F1 (%) of each split pooled over its photos')
  assert '1000 resamples, seed 0' in lines[0]
  assert lines[2] == '| split | photos | new | released | difference | 95% interval | verdict |'
  assert lines[4].startswith('| a_test | 60 | ') and lines[4].endswith(' | ok |')
  assert lines[5].startswith('| b_test | 40 | ')
  assert lines[-1] == 'Release allowed: no split lost beyond noise, and ahead on the mean.'
  record = json.loads(out.read_text())
  assert record['ok'] and record['resamples'] == 1000
  assert list(record['splits']) == ['a_test', 'b_test']
  a = record['splits']['a_test']
  assert a['low'] <= a['diff'] <= a['high'] and a['new_threshold'] == 0.5
  assert record['mean'] == pytest.approx(np.mean([s['diff'] for s in record['splits'].values()]))
  # The worse file: both splits lost beyond noise.
  code, printed, _ = _run_gate(capsys, f'--new={tmp_path / "bad"}', f'--old={tmp_path / "old"}')
  assert code == 1
  assert '| loss: wholly below -1 |' in printed
  says = 'Release refused: lost beyond noise on a_test, b_test; the mean lead -'
  assert printed.splitlines()[-1].startswith(says)
  # Pairs of folders (the whole photos scored apart): splits named by the new folder.
  code, printed, _ = _run_gate(
    capsys,
    f'--new={tmp_path / "good"}',
    f'--old={tmp_path / "old"}',
    f'--new={tmp_path / "good" / "a_test"}',
    f'--old={tmp_path / "old" / "a_test"}',
  )
  assert code == 0 and '| a_test/a_test | 60 |' in printed and '| good/b_test | 40 |' in printed


def test_the_command_names_bad_input_in_one_line(tmp_path, capsys):
  gts, fair = _maps(20, 0.6, 1)
  _score(tmp_path / 'old' / 'a_test', gts, fair, 0.5)
  _score(tmp_path / 'new' / 'a_test', gts, fair, 0.5, names=[f'q{i}' for i in range(20)])
  _score(tmp_path / 'more' / 'a_test', gts, fair, 0.5)
  _score(tmp_path / 'more' / 'c_test', gts, fair, 0.5)
  prog = 'python -m crackjax.release.gate: '
  new, old, more, none = (f'{tmp_path / name}' for name in ('new', 'old', 'more', 'none'))
  cases = [
    (
      [f'--new={new}', f'--old={old}'],
      'a_test: not the same photos: 20 only for the new file (q0, q1, q10 and 17 more); 20 only '
      'for the released one (p000, p001, p002 and 17 more).',
    ),
    (
      [f'--new={more}', f'--old={old}'],
      f'c_test: scored for the new file ({more}) only; score both on the same splits.',
    ),
    ([f'--new={new}', f'--old={old}', '--resamples=100'], '--resamples=100: at least 1000.'),
    (
      [f'--new={new}', f'--new={old}', f'--old={old}'],
      '2 --new and 1 --old folders: give them in pairs.',
    ),  # fmt: skip
    (
      [f'--new={none}', f'--old={old}'],
      f'{none}: no such folder (a crackjax-evaluate --out folder).',
    ),  # fmt: skip
  ]
  for argv, says in cases:
    code, printed, err = _run_gate(capsys, *argv)
    assert (code, printed, err) == (2, '', prog + says + '\n'), argv
  # An evaluation from before the counts were recorded: the file named, how to score it again.
  path = tmp_path / 'new' / 'a_test' / 'eval.json'
  shutil.rmtree(tmp_path / 'new')
  _score(tmp_path / 'new' / 'a_test', gts, fair, 0.5)
  data = json.loads(path.read_text())
  for row in data['results']['strict']['per_image']:
    del row['tp'], row['fp'], row['fn']
  path.write_text(json.dumps(data))
  code, printed, err = _run_gate(capsys, f'--new={tmp_path / "new"}', f'--old={tmp_path / "old"}')
  assert code == 2 and err == (
    f'{prog}{path}: no per-photo strict counts at the stored threshold (an evaluation older '
    'than them); score it again: crackjax-evaluate --model=FILE --protocols=strict --out=DIR.\n'
  )
  # Counts of another threshold than the record's F1 there: refused.
  data = json.loads((tmp_path / 'old' / 'a_test' / 'eval.json').read_text())
  data['results']['strict']['operating_points']['run']['f1'] += 0.01
  path.write_text(json.dumps(data))
  code, _, err = _run_gate(capsys, f'--new={tmp_path / "new"}', f'--old={tmp_path / "old"}')
  assert code == 2 and 'counted at another threshold' in err and err.startswith(f'{prog}{path}: ')


def test_a_real_evaluation_through_the_gate(smoke_run, tmp_path, capsys):
  # The smoke run scored by crackjax-evaluate at its stored threshold; against itself every
  # split is level (difference 0, interval [0, 0]), and the gate refuses it on the mean alone.
  run = Path(shutil.copytree(smoke_run, tmp_path / 'run'))
  out = tmp_path / 'scores'
  argv = [f'--workdir={run}', '--data=test', f'--out={out}', '--protocols=strict', '--workers=1']
  assert evaluate_command.main(argv) == 0
  (folder,) = [p for p in out.iterdir() if p.is_dir()]
  strict = read_record(folder / 'eval.json').results['strict']
  total = np.array([[r.tp, r.fp, r.fn] for r in strict.per_image]).sum(axis=0)
  assert float(gate.pooled_f1(total)) == strict.operating_points['run'].f1
  capsys.readouterr()
  code, printed, _ = _run_gate(capsys, f'--new={out}', f'--old={out}')
  assert code == 1
  assert f'| {folder.name} | {len(strict.per_image)} |' in printed
  assert '| +0.0 | [+0.0, +0.0] | ok |' in printed
  assert printed.splitlines()[-1] == 'Release refused: the mean lead +0.0 < +2.'
  code, _, _ = _run_gate(capsys, f'--new={out}', f'--old={out}', '--min_mean_lead=0')
  assert code == 0
