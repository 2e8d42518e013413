"""crackjax.paper.runner and crackjax.paper.report end to end on a smoke setting: 2 rows x 2
seeds of Table I on a fake CrackForest (the smoke variant's tiny U-Net, 3 steps per epoch), with an
interruption and a resume in side-by-side worker processes, then the report and its export."""

import csv
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from crackjax.paper import jobs as campaign_jobs
from crackjax.paper import records, report, report_stats, runner, scheduler, tables
from crackjax.runs import identity
from crackjax.trainer import eval_records, loop, periodic
from tests import fixtures

ROWS = 'wce_xie_e5,wce_exp_0.75_e5'


def _argv(workdir: Path, data: tuple[Path, Path], *extra: str) -> list[str]:
  raw, tfds_dir = data
  return [
    '--table=1',
    f'--rows={ROWS}',
    '--seeds=2',
    '--variant=smoke',
    f'--set=data.manual_dir={raw}',
    f'--set=data.data_dir={tfds_dir}',
    f'--workdir={workdir}',
    '--curve_protocols=strict',
    *extra,
  ]


def test_list_prints_every_row(capsys):
  assert runner.main(['--list']) == 0
  # Tables V-VIII's 41 rows follow (tests/test_paper_tables_compare.py).
  lines = [
    line
    for line in capsys.readouterr().out.splitlines()
    if line.split()[0] in ('table1', 'table2', 'table3', 'table4')
  ]
  trainable = [line for line in lines if 'reference row' not in line]
  assert len(trainable) == 52  # 16 + 13 + 12 + 11, the count
  assert sum('reference row, not trainable' in line for line in lines) == 4  # RSF per table
  assert any(
    line.split()[:2] == ['table1', 'wce_exp_0.75_e5'] and '85.19' in line for line in lines
  )


def test_jobs_share_one_training_per_group():
  jobs = campaign_jobs.select_jobs(1, ['wce_xie_e5', 'wce_xie_e20', 'wce_exp_0.75_e5'], [0, 1])
  assert [j.id for j in jobs] == [
    '1:wce_xie:0',
    '1:wce_xie:1',
    '1:wce_exp_0.75:0',
    '1:wce_exp_0.75:1',
  ]
  assert jobs[0].epochs == 20 and [r.key for r in jobs[0].rows] == ['wce_xie_e20', 'wce_xie_e5']
  all_jobs = campaign_jobs.select_jobs(1, [], [0])
  assert len(all_jobs) == len(tables.training_groups(1)) == 8
  with pytest.raises(ValueError, match="'rsf'"):
    campaign_jobs.select_jobs(1, ['rsf'], [0])


def test_shortest_first_goes_seed_by_seed():
  rows = ['wce_xie_e10', 'wce_exp_0.75_e10', 'exp_0.75_a20_wj_e5']
  jobs = campaign_jobs.shortest_first(campaign_jobs.select_jobs(1, rows, [0, 1]))
  assert [j.id for j in jobs] == [
    '1:exp_0.75_a20_wj:0',
    '1:exp_0.75_a20_wj:1',
    '1:wce_xie:0',
    '1:wce_exp_0.75:0',
    '1:wce_xie:1',
    '1:wce_exp_0.75:1',
  ]


def test_only_the_scheduler_keeps_off_the_gpus():
  # The workers get the scheduler's --parallel: they must still train on the accelerator.
  assert scheduler.schedules_only(None, parallel=4, max_minutes=0)
  assert scheduler.schedules_only(None, parallel=1, max_minutes=7.5)
  assert not scheduler.schedules_only(None, parallel=1, max_minutes=0)
  assert not scheduler.schedules_only('1:wce_xie:0', parallel=4, max_minutes=0)


def test_bad_flags_end_in_one_line():
  with pytest.raises(SystemExit, match='Not a trainable row of Table 1'):
    runner.main(['--table=1', '--rows=nope', '--workdir=/tmp/unused'])
  with pytest.raises(SystemExit, match='--table and --workdir are required'):
    runner.main(['--table=1'])


def test_a_workdir_that_cannot_be_written_is_one_line_before_any_job(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a folder')
  with pytest.raises(SystemExit) as e:
    runner.main(['--table=1', '--rows=wce_xie_e5', f'--workdir={blocker / "campaign"}'])
  assert str(e.value) == (
    f'python -m crackjax.paper.runner: cannot write --workdir={blocker / "campaign"}: '
    f'{blocker} is a file, not a folder.'
  )
  assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']


def test_unknown_variant_is_one_line_without_traceback(tmp_path):
  with pytest.raises(SystemExit) as e:
    runner.main(['--table=1', '--rows=wce_xie_e5', '--variant=smok', f'--workdir={tmp_path}'])
  # Named as typed (was: 'flag --config=/path/configs/table1.py:wce_xie_e5,smok: ...').
  assert str(e.value) == (
    "python -m crackjax.paper.runner: --variant=smok: Unknown config argument 'smok' for the "
    "unet model; known: ['cpu', 'cpu_scale', 'smoke']."
  )


@pytest.mark.parametrize(
  ('override', 'says'),
  [
    ('learning_rate=abc', "could not convert string to float: 'abc'"),
    ('nosuchfield', 'expected FIELD=VALUE, e.g. --set=learning_rate=0.001.'),
    ('learning_rate', 'expected FIELD=VALUE, e.g. --set=learning_rate=0.001.'),
    ('data.nosuch=3', "no config field 'data.nosuch'; configs/base.py lists every field."),
  ],
)
def test_a_bad_set_override_is_named_as_typed(tmp_path, override, says):
  # Was: 'flag --config.learning_rate=abc: ...', and 'unknown config field nosuchfield ...'
  # for an override without '='.
  argv = ['--table=1', '--rows=wce_xie_e5', '--seeds=1', f'--workdir={tmp_path}']
  with pytest.raises(SystemExit) as e:
    runner.main([*argv, f'--set={override}'])
  assert str(e.value) == f'python -m crackjax.paper.runner: --set={override}: {says}'


def test_a_failing_job_in_process_is_one_line_and_the_next_goes_on(tmp_path, monkeypatch, capsys):
  # --parallel=1: the jobs run in this process; a failure reads as a worker's does.

  calls = []

  def broken(config, workdir, **kwargs):
    calls.append(workdir)
    raise RuntimeError('the loader broke\nsecond line')

  monkeypatch.setattr(loop, 'train_and_evaluate', broken)
  data = fixtures.smoke_data_dirs(tmp_path / 'data')
  workdir = tmp_path / 'campaign'
  assert runner.main(_argv(workdir, data, '--seeds=1')) == 1
  out = capsys.readouterr().out
  assert len(calls) == 2  # the second job ran after the first failed
  log = workdir / 'table1' / 'wce_xie' / 'seed0' / 'worker.log'
  assert f'failed (RuntimeError: the loader broke), see {log}' in out
  assert '0 of 2 jobs complete.' in out and 'Traceback' not in out
  assert 'Traceback' in log.read_text() and 'second line' in log.read_text()


def test_report_names_a_damaged_file(tmp_path):
  job = tmp_path / 'campaign' / 'table1' / 'wce_xie' / 'seed0'
  job.mkdir(parents=True)
  run = {'table': 1, 'group': 'table1:wce_xie', 'seed': 0, 'rows': [], 'config': {}}
  (job / 'run.json').write_text(json.dumps(run))
  (job / 'epoch_001.json').write_text('{"epoch": 1, "resu')
  with pytest.raises(SystemExit, match=r'epoch_001.json is not valid JSON'):
    report.main([str(tmp_path / 'campaign'), f'--out={tmp_path / "r"}'])
  export = tmp_path / 'export.json'
  export.write_text('{"format": "crackjax.reproduce/1", "runs": [')
  with pytest.raises(SystemExit, match=r'export.json is not valid JSON'):
    report.main([str(export), f'--out={tmp_path / "r"}'])


def test_report_and_runner_name_a_record_that_lacks_keys(tmp_path):
  results = Path(__file__).resolve().parents[1] / 'results' / 'gpu_table1.json'
  data = json.loads(results.read_text())
  del data['runs'][1]['group']
  broken = tmp_path / 'missing_group.json'
  broken.write_text(json.dumps(data))
  want = rf"{broken}, run 1 lacks \['group'\]"
  with pytest.raises(SystemExit, match=want):
    report.main([str(broken), f'--out={tmp_path / "r"}'])
  with pytest.raises(SystemExit, match=want):
    runner.main(
      ['--table=1', '--rows=wce_xie_e5', f'--done={broken}', '--plan', f'--workdir={tmp_path}']
    )
  data = json.loads(results.read_text())
  del data['runs'][0]['epochs'][2]['epoch']
  broken.write_text(json.dumps(data))
  with pytest.raises(SystemExit, match=r"run 0, epoch entry 2 lacks \['epoch'\]"):
    report.main([str(broken), f'--out={tmp_path / "r"}'])
  # A campaign's run.json without a seed.
  job = tmp_path / 'campaign' / 'table1' / 'wce_xie' / 'seed0'
  job.mkdir(parents=True)
  (job / 'run.json').write_text(json.dumps({'table': 1, 'group': 'table1:wce_xie', 'rows': []}))
  with pytest.raises(SystemExit, match=r"run.json lacks \['seed'\]"):
    report.main([str(tmp_path / 'campaign'), f'--out={tmp_path / "r"}'])


def test_report_names_unknown_protocols_and_differing_copies(tmp_path, capsys):
  results = Path(__file__).resolve().parents[1] / 'results' / 'gpu_table1.json'
  with pytest.raises(SystemExit, match=r"--protocols \['bogus'\] not in these results"):
    report.main([str(results), '--protocols=bogus', f'--out={tmp_path / "r"}'])
  # The same job in two inputs, one cut short: the longer is used, and the report says so.
  runs = records.load([results])
  cut = dict(runs[0], epochs=runs[0]['epochs'][:2])
  records.export([cut], tmp_path / 'cut.json')
  assert report.main([str(results), str(tmp_path / 'cut.json'), f'--out={tmp_path / "r"}']) == 0
  err = capsys.readouterr().err
  assert f'{runs[0]["group"]} seed {runs[0]["seed"]} is in two inputs' in err
  n = len(runs[0]['epochs'])  # the committed results' first run (10 epochs since 27 Nov)
  cut_path = tmp_path / 'cut.json'
  assert f'({results} has {n} epochs, {cut_path} 2); using the one in {results}.' in err
  # Identical copies (a campaign and its export) are merged without a word.
  records.load([results, results])
  assert 'two inputs' not in capsys.readouterr().err


def test_report_checks_where_it_writes_before_writing(tmp_path):
  results = Path(__file__).resolve().parents[1] / 'results' / 'gpu_table1.json'
  export = tmp_path / 'again.json'
  with pytest.raises(SystemExit, match='--out is required when the input is an export file'):
    report.main([str(results), f'--export={export}'])
  blocker = tmp_path / 'a_file'
  blocker.write_text('')
  with pytest.raises(SystemExit) as e:
    report.main([str(results), f'--export={export}', f'--out={blocker / "r"}'])
  assert str(e.value) == (
    f'python -m crackjax.paper.report: cannot write --out: {blocker} is a file, not a folder.'
  )
  assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']  # no export written


def _edited_export(tmp_path: Path, edit) -> Path:
  """results/gpu_table1.json after `edit(data)`, in a file of its own."""
  data = json.loads(
    (Path(__file__).resolve().parents[1] / 'results' / 'gpu_table1.json').read_text()
  )
  edit(data)
  path = tmp_path / 'edited.json'
  path.write_text(json.dumps(data))
  return path


@pytest.mark.parametrize(
  ('edit', 'says'),
  [
    (lambda d: d['runs'][1].pop('setting'), r"run 1 lacks \['setting'\]"),
    (lambda d: d['runs'][0].pop('hardware'), r"run 0 lacks \['hardware'\]"),
    (lambda d: d['runs'][0].pop('versions'), r"run 0 lacks \['versions'\]"),
    (lambda d: d['runs'][0].update(seed='zero'), r"""run 0: 'seed' is "zero", not an integer"""),
    (lambda d: d['runs'][0].update(seed=True), r"run 0: 'seed' is true, not an integer"),
    (lambda d: d['runs'][1].update(hardware=None), r"run 1: 'hardware' is null, not an object"),
    (lambda d: d['runs'][0]['rows'][0].pop('epochs'), r"run 0, row entry 0 lacks \['epochs'\]"),
    (
      lambda d: d['runs'][0]['epochs'][1]['results']['strict'].pop('ods'),
      r"run 0, epoch entry 1, results\['strict'\] lacks \['ods'\]",
    ),
    (
      lambda d: d['runs'][0]['epochs'][1].update(train_seconds='1 min'),
      r"""run 0, epoch entry 1: 'train_seconds' is "1 min", not a number""",
    ),
    (lambda d: d.update(runs=[]), r"edited.json holds no runs \('runs' is empty\)"),
  ],
)
def test_report_and_runner_name_a_missing_or_mistyped_field(tmp_path, edit, says):
  # Each was a KeyError traceback, or (a string seed, no runs) exit 0 and a report.
  broken = _edited_export(tmp_path, edit)
  for main, argv in [
    (report.main, [str(broken), f'--out={tmp_path / "r"}']),
    (runner.main, ['--table=1', f'--done={broken}', '--plan', f'--workdir={tmp_path}']),
  ]:
    with pytest.raises(SystemExit, match=f'^[^\n]*{says}[^\n]*$'):
      main(argv)
  assert not (tmp_path / 'r').exists()


def _only_exp_jaccard(data: dict) -> None:
  """Keeps the exp + Jaccard a=20 runs of the committed results (seeds 1 and 2, 5 epochs,
  26 Nov), in that order."""
  data['runs'] = [r for r in data['runs'] if r['group'] == 'table1:exp_0.75_a20_wj']
  assert [r['seed'] for r in data['runs']] == [1, 2]


def test_an_epoch_without_results_or_time_is_not_evaluated_or_timed(tmp_path):
  def edit(data):
    _only_exp_jaccard(data)
    data['runs'][0]['epochs'][2].pop('results')  # epoch 3 of seed 1's 5
    for run in data['runs']:
      run['epochs'][1].pop('train_seconds')  # epoch 2 of both seeds

  def one_time_unknown(data):
    _only_exp_jaccard(data)
    data['runs'][0]['epochs'][1].pop('train_seconds')

  runs = records.load([_edited_export(tmp_path, edit)])
  # Not evaluated: seed 1's job is not complete (a chunk redoes it).
  assert records.complete_jobs(runs) == {(1, 'table1:exp_0.75_a20_wj', 2, 5)}
  assert report.main([str(tmp_path / 'edited.json'), f'--out={tmp_path / "r"}']) == 0
  with (tmp_path / 'r' / 'report.csv').open() as f:
    row = next(r for r in csv.DictReader(f) if r['key'] == 'exp_0.75_a20_wj_e5')
  # Both seeds at the row's epoch 5; its training time (epochs 1-5) unknown, not a partial sum.
  assert row['seeds'] == '1 2' and float(row['ods_f1_mean']) > 0
  assert row['time_s_mean'] == ''
  # One seed's time unknown: the mean is the other's, and the table says over how many.
  path = _edited_export(tmp_path, one_time_unknown)
  assert report.main([str(path), f'--out={tmp_path / "r1"}']) == 0
  table_rows = [
    x for x in (tmp_path / 'r1' / 'report.md').read_text().splitlines() if '| 5 | 2 |' in x
  ]
  assert len(table_rows) == 2 and all('(1 of 2 seeds)' in x for x in table_rows)  # 2 protocols


def _campaign_of(run: dict, workdir: Path) -> Path:
  """`workdir` as a runner's campaign of one job, `run` (an export's): its floats with more
  digits than an export keeps and one epoch's training time unknown (NaN), as the runner
  writes them."""

  def digits(x):
    if isinstance(x, float):
      return x + 3.1e-11
    if isinstance(x, dict):
      return {k: digits(v) for k, v in x.items()}
    return x

  job = workdir / f'table{run["table"]}' / run['group'].split(':')[1] / f'seed{run["seed"]}'
  job.mkdir(parents=True)
  info = {k: run[k] for k in ('table', 'group', 'seed', 'rows', 'hardware', 'versions')}
  config = {'model': {'name': 'unet', 'widths': [64, 128, 256, 512, 1024], 'dtype': 'float32'}}
  (job / 'run.json').write_text(
    json.dumps({**info, 'side_by_side': run['side_by_side'], 'config': config})
  )
  for e in run['epochs']:
    e = digits(e)
    if e['epoch'] == 3:
      e['train_seconds'] = float('nan')
    (job / f'epoch_{e["epoch"]:03d}.json').write_text(json.dumps(e))
  return workdir


def test_a_campaign_and_its_own_export_merge_without_a_note(tmp_path, capsys):
  results = Path(__file__).resolve().parents[1] / 'results' / 'gpu_table1.json'
  campaign = _campaign_of(records.load([results])[0], tmp_path / 'campaign')
  export = tmp_path / 'export.json'
  assert report.main([str(campaign), f'--export={export}']) == 0
  capsys.readouterr()
  # Was: 'is in two inputs with different records; using the one with 5 epochs (the other
  # has 5)': the export's eight decimals and NaN != NaN.
  assert len(records.load([campaign, export])) == 1
  assert capsys.readouterr().err == ''
  # A real difference is named: where, and the two values.
  data = json.loads(export.read_text())
  data['runs'][0]['epochs'][1]['results']['strict']['ods']['f1'] = 0.5
  export.write_text(json.dumps(data))
  records.load([campaign, export])
  err = capsys.readouterr().err
  run = data['runs'][0]
  assert err.startswith(
    f'note: {run["group"]} seed {run["seed"]} is in two inputs with different records '
    '(epoch 2: results.strict.ods.f1 is '
  )
  assert err.endswith(f' in {campaign}, 0.5 in {export}); using the one in {campaign}.\n')


def test_worker_env_shares_gpus():
  env = scheduler.worker_env(3, 4, ['0', '1'], base={})
  assert env == {'CUDA_VISIBLE_DEVICES': '1', 'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.450'}
  assert scheduler.worker_env(1, 2, ['0', '1'], base={}) == {'CUDA_VISIBLE_DEVICES': '1'}
  assert scheduler.worker_env(0, 2, [], base={'A': 'b'}) == {'A': 'b'}


def test_welch_against_hand_computed_values():
  w = report_stats.welch([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
  assert w['diff'] == 0 and w['p'] == pytest.approx(1.0)
  # a: mean 2, var 1; b: mean 5, var 1; se = sqrt(1/3 + 1/3); t = -3 / se = -3.674, df = 4.
  w = report_stats.welch([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
  assert w['diff'] == pytest.approx(-3.0)
  half = 2.776445 * np.sqrt(2 / 3)  # t_{0.975, 4}
  assert (w['low'], w['high']) == pytest.approx((-3 - half, -3 + half), rel=1e-5)
  assert w['p'] == pytest.approx(0.02131, rel=1e-3)
  assert np.isnan(report_stats.welch([1.0], [2.0, 3.0])['p'])


def _epoch_files(workdir: Path) -> dict[str, str]:
  return {str(p.relative_to(workdir)): p.read_text() for p in sorted(workdir.rglob('epoch_*.json'))}


@pytest.mark.slow
def test_runner_resumes_and_report(tmp_path, monkeypatch):
  data = fixtures.smoke_data_dirs(tmp_path / 'data')
  workdir = tmp_path / 'campaign'

  # Interrupt the first job while it evaluates epoch 3 (its checkpoint is saved by then).
  real = periodic.EpochEvaluator.__call__

  def interrupted(self, state, epoch, **kwargs):
    config = self.experiment.config
    if epoch == 3 and config.seed == 0 and config.loss.weighting == 'xie':
      raise KeyboardInterrupt
    return real(self, state, epoch, **kwargs)

  monkeypatch.setattr(periodic.EpochEvaluator, '__call__', interrupted)
  with pytest.raises(SystemExit) as stopped:  # Ctrl-C: one line, exit status 130
    runner.main(_argv(workdir, data))
  assert stopped.value.code == 130
  first = workdir / 'table1' / 'wce_xie' / 'seed0'
  assert identity.evaluated_epochs(first) == [1, 2]
  before = _epoch_files(workdir)

  # Go on side by side: two worker processes (`--job`), as on a GPU machine, each scoring its
  # epochs in the background as scripts/reproduce_gpu.sh has them do (not in the fingerprint).
  background = '--set=eval.background_workers=1'
  out = subprocess.run(
    [
      sys.executable,
      '-m',
      'crackjax.paper.runner',
      *_argv(workdir, data, '--parallel=2', background),
    ],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=Path(__file__).resolve().parents[1],
  )
  assert out.returncode == 0, out.stdout + out.stderr
  assert '4 of 4 jobs complete.' in out.stdout
  assert 'os.fork() was called' not in out.stderr  # JAX's warning at every worker's start
  after = _epoch_files(workdir)
  assert len(after) == 2 * 2 * 5  # 2 groups x 2 seeds x 5 epochs
  assert all(after[k] == v for k, v in before.items())  # finished work is not redone
  # Epoch 3 was evaluated from its checkpoint, then training went on from step 9.
  e3 = json.loads((first / 'epoch_003.json').read_text())
  assert e3['step'] == 9 and e3['train_seconds'] is None  # unknown: null (strict JSON)
  assert (
    max(json.loads(x)['step'] for x in (first / 'metrics.jsonl').read_text().splitlines()) == 15
  )
  assert (
    'Evaluating epoch 3 from its checkpoint (step 9): it has no record (the run stopped before '
    'its evaluation was written).'
  ) in (first / 'worker.log').read_text()
  # Every epoch's line, though scored after its epoch ended (once each).
  log = (workdir / 'table1' / 'wce_xie' / 'seed1' / 'worker.log').read_text()
  assert [log.count(f'1:wce_xie:1 epoch {e}: ') for e in range(1, 6)] == [1] * 5, log[-3000:]
  for e in range(1, 6):
    rec = json.loads((first / f'epoch_{e:03d}.json').read_text())
    assert rec['epoch'] == e and rec['step'] == 3 * e
    assert (
      tuple(rec) == eval_records.RECORD_FIELDS
    )  # launch's record format (tests/test_trainer.py)
    # Both protocols at the rows' epoch, the cheap one for the curve in between.
    expected = {'strict', 'tolerance_thin_gt'} if e == 5 else {'strict'}
    assert set(rec['results']) == expected
    assert 0 <= rec['results']['strict']['ods']['f1'] <= 1
  run = json.loads((first / 'run.json').read_text())
  assert run['side_by_side'] == 2
  assert run['seed'] == 0 and run['config']['seed'] == 0 and run['hardware']['backend'] == 'cpu'
  assert run['config']['num_epochs'] == 5  # the row's epochs, not the smoke variant's 2
  # Seeds differ: different initialisation, so different maps.
  s1 = json.loads((workdir / 'table1' / 'wce_xie' / 'seed1' / 'epoch_005.json').read_text())
  assert (
    s1['results']['strict']['curve']
    != json.loads((first / 'epoch_005.json').read_text())['results']['strict']['curve']
  )

  # A third run finds everything done.
  monkeypatch.setattr(periodic.EpochEvaluator, '__call__', real)
  assert runner.main(_argv(workdir, data)) == 0
  assert _epoch_files(workdir) == after

  # Under another config it stops before anything, naming the field (it used to say
  # "4 of 4 jobs complete" and leave the results of the old config in place).
  with pytest.raises(SystemExit, match=r'learning_rate: 0.0003 -> 0.01'):
    runner.main(_argv(workdir, data, '--set=learning_rate=0.01'))
  assert _epoch_files(workdir) == after

  # A truncated record is set aside and redone from its checkpoint, never counted complete.
  last = workdir / 'table1' / 'wce_exp_0.75' / 'seed1' / 'epoch_005.json'
  last.write_text(last.read_text()[:200])
  assert runner.main(_argv(workdir, data)) == 0
  assert json.loads(last.read_text())['epoch'] == 5
  assert last.with_name('epoch_005.json.damaged').exists()

  # The report, from the campaign and from its export.
  assert report.main([str(workdir), f'--export={tmp_path / "export.json"}']) == 0
  md = (workdir / 'report' / 'report.md').read_text()
  assert '## Table 1 (crackforest), `strict` protocol' in md
  assert '## Table 1 (crackforest), `tolerance_thin_gt` protocol' in md
  # beta beside the paper's method name; the paper's ODS F1 beside ours.
  assert '| wce_exp (β=0.75) | 5 | 2 |' in md and '| 85.19 |' in md
  assert 'Against the second baseline, wce_xie at 5 epochs' in md
  assert (workdir / 'report' / 'curves_table1_strict.png').stat().st_size > 10_000
  with (workdir / 'report' / 'report.csv').open() as f:
    rows = list(csv.DictReader(f))
  assert {(r['key'], r['protocol']) for r in rows} == {
    (k, p) for k in ROWS.split(',') for p in ('strict', 'tolerance_thin_gt')
  }
  xie = next(r for r in rows if r['key'] == 'wce_xie_e5' and r['protocol'] == 'strict')
  f1 = [
    json.loads((workdir / 'table1' / 'wce_xie' / f'seed{s}' / 'epoch_005.json').read_text())[
      'results'
    ]['strict']['ods']['f1']
    for s in (0, 1)
  ]
  assert float(xie['ods_f1_mean']) == pytest.approx(100 * np.mean(f1), abs=1e-4)
  assert float(xie['paper_ods_f1']) == 72.49
  exported = tmp_path / 'export.json'
  assert exported.stat().st_size < 60_000
  assert report.main([str(exported), f'--out={tmp_path / "again"}']) == 0
  assert (tmp_path / 'again' / 'report.md').read_text() == (
    workdir / 'report' / 'report.md'
  ).read_text()

  # A machine that kept only the export skips what it holds (a campaign run in chunks).
  fresh = tmp_path / 'fresh'
  assert runner.main([*_argv(fresh, data), f'--done={exported}']) == 0
  assert not fresh.exists() or not list(fresh.rglob('epoch_*.json'))
  assert records.complete_jobs(records.load([exported])) == {
    (1, f'table1:{g}', s, 5) for g in ('wce_xie', 'wce_exp_0.75') for s in (0, 1)
  }


def _children(pid: int) -> list[int]:
  kids = []
  for stat in Path('/proc').glob('[0-9]*/stat'):
    try:
      fields = stat.read_text().rsplit(')', 1)[1].split()
    except OSError:
      continue
    if int(fields[1]) == pid:
      kids.append(int(stat.parent.name))
  return kids


def _alive(pid: int) -> bool:
  try:
    state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
  except OSError:
    return False
  return state != 'Z'


@pytest.mark.slow
def test_workers_end_with_a_killed_runner(tmp_path):
  # kill -9 of the runner used to leave its workers training (parent 1); a rerun raced them.
  data = fixtures.smoke_data_dirs(tmp_path / 'data')
  # 70 epochs: the workers cannot finish on their own within the wait below.
  argv = [a for a in _argv(tmp_path / 'c', data, '--parallel=2') if not a.startswith('--rows')]
  proc = subprocess.Popen(
    [sys.executable, '-m', 'crackjax.paper.runner', *argv, '--rows=wce_xie_e70'],
    cwd=Path(__file__).resolve().parents[1],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  try:
    deadline = time.monotonic() + 180
    workers = []
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
      workers = _children(proc.pid)
      time.sleep(0.2)
    assert len(workers) == 2
  finally:
    proc.kill()
    proc.wait()
  deadline = time.monotonic() + 45
  while any(_alive(p) for p in workers) and time.monotonic() < deadline:
    time.sleep(0.2)
  assert not any(_alive(p) for p in workers)


@pytest.mark.slow
def test_workers_start_without_forking_the_runner(tmp_path):
  # Popen's preexec_fn forked the runner, multithreaded by then (JAX), and ran Python in the
  # fork: 'RuntimeWarning: os.fork() was called ... will likely lead to a deadlock' at every
  # start. A worker that fails at once (an unknown flag) is enough to start one.
  import jax

  jax.devices()  # JAX's warning at fork comes with its backends
  job = campaign_jobs.select_jobs(1, ['wce_xie_e5'], [0])[0]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    command = [sys.executable, '-m', 'crackjax.paper.runner', '--no_such_flag']
    status = scheduler.run_workers([job], command, tmp_path, parallel=1, gpus=[], deadline=None)
  assert status[job.id].startswith('failed (exit 1: ')
  assert [str(w.message) for w in caught if 'fork' in str(w.message)] == []


@pytest.mark.slow
def test_a_worker_whose_runner_has_ended_stops(tmp_path):
  # The worker sets its end with the runner itself; a runner gone before that sends nothing.
  env = {**os.environ, scheduler.RUNNER_PID_ENV: '1'}  # not this worker's parent
  argv = ['--table=1', f'--workdir={tmp_path}', '--job=1:wce_xie:0']
  out = subprocess.run(
    [sys.executable, '-m', 'crackjax.paper.runner', *argv],
    capture_output=True,
    text=True,
    env=env,
    timeout=120,
    cwd=Path(__file__).resolve().parents[1],
  )
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-1] == (
    'python -m crackjax.paper.runner: the runner (pid 1) has ended; this worker stops too.'
  )
  assert not list(tmp_path.iterdir())


def test_a_failed_worker_is_named_by_the_last_line_of_its_log(tmp_path):
  log = tmp_path / 'worker.log'
  log.write_text('I starting\nTraceback (most recent call last):\n  ...\nRuntimeError: broke\n\n')
  assert scheduler.last_log_line(log) == 'RuntimeError: broke'
  log.write_text('launch.py: ' + 'x' * 300)
  assert len(scheduler.last_log_line(log)) == 200 and scheduler.last_log_line(log).endswith('...')
  assert scheduler.last_log_line(tmp_path / 'none.log') == 'no log'
  # A flag error's message, not the help hint printed after it.
  log.write_text(
    'python -m crackjax.paper.runner: flag --x=1: bad\nPass --help for the list of flags.\n'
  )
  assert scheduler.last_log_line(log) == 'python -m crackjax.paper.runner: flag --x=1: bad'


def test_an_epoch_evaluated_after_an_interruption_says_so():
  # Its record has no training time (NaN): the line says why instead of 'nan s training'.
  record = {
    'train_seconds': float('nan'),
    'eval_seconds': 2.0,
    'results': {'strict': {'ods': {'f1': 0.5}, 'protocol': 'strict'}},
  }
  line = campaign_jobs.epoch_line('t1/wce_xie/s0', 3, record)
  assert line == (
    't1/wce_xie/s0 epoch 3: training time not measured (evaluated later from its checkpoint), '
    '2.0 s evaluation, ODS F1 0.5000 (strict protocol)'
  )
  record['train_seconds'] = 12.34
  assert 'epoch 3: 12.3 s training, 2.0 s evaluation' in campaign_jobs.epoch_line('j', 3, record)


def test_report_export_replaces_a_file_only_when_asked(tmp_path):
  # A user's file (here a copy of committed results) is not replaced by --export unless it is
  # one of the inputs (merged into) or --overwrite is given; nothing is written before.
  committed = Path(__file__).resolve().parents[1] / 'results' / 'cpu_scale_table1.json'
  mine = tmp_path / 'mine.json'
  mine.write_text('{"mine": true}')
  argv = [str(committed), f'--export={mine}', f'--out={tmp_path / "report"}']
  with pytest.raises(SystemExit) as e:
    report.main(argv)
  assert f'--export={mine} exists and is not among the inputs; pass --overwrite' in str(e.value)
  assert mine.read_text() == '{"mine": true}' and not (tmp_path / 'report').exists()
  assert report.main([*argv, '--overwrite']) == 0
  assert json.loads(mine.read_text()) != {'mine': True}
