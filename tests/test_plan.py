"""The chunk planner: rates from earlier runs' epoch records, and which jobs fit a time limit."""

import json
import os

import pytest

from crackjax.paper import jobs as campaign_jobs
from crackjax.paper import plan as campaign_plan
from crackjax.paper import records, runner, scheduler

SETTING = {'widths': [64, 128, 256, 512, 1024], 'steps_per_epoch': 300}


SCORES = {'precision': 0.5, 'recall': 0.5, 'f1': 0.5}


def _epoch(epoch, train, evaluation, first=False):
  return {
    'epoch': epoch,
    'train_seconds': train,
    'eval_seconds': evaluation,
    'first_in_process': first,
    # Evaluated (an epoch without results is not: records.complete_jobs).
    'results': {'strict': {'ods': SCORES, 'ois': SCORES}},
  }


def _run(seed=0, kind='GPU X', side_by_side=4, setting=SETTING, group='table1:g', epochs=5):
  # First epoch 50 + 10 s; later ones 8 + 2 s; the row's epoch 8 + 22 s (20 s more evaluation).
  records = [_epoch(1, 50.0, 10.0, first=True)]
  records += [_epoch(e, 8.0, 2.0) for e in range(2, epochs)]
  records += [_epoch(epochs, 8.0, 22.0)]
  return {
    'table': 1,
    'group': group,
    'seed': seed,
    'rows': [{'key': f'g_e{epochs}', 'epochs': epochs}],
    'hardware': {'device_kind': kind},
    'versions': {},
    'side_by_side': side_by_side,
    'setting': dict(setting),
    'epochs': records,
  }


def test_rates_are_the_medians_of_matching_runs():
  rates = campaign_plan.measured_rates([_run(0), _run(1)], 'GPU X', 4, SETTING)
  assert (rates.first, rates.epoch, rates.row_eval, rates.runs) == (60.0, 10.0, 20.0, 2)
  assert rates.job_seconds(epochs=5, row_epochs=1) == 60 + 4 * 10 + 20
  assert rates.job_seconds(epochs=10, row_epochs=2) == 60 + 9 * 10 + 2 * 20


def test_no_rates_from_another_gpu_setting_or_sharing():
  runs = [_run()]
  assert campaign_plan.measured_rates(runs, 'GPU Y', 4, SETTING) is None
  assert campaign_plan.measured_rates(runs, 'GPU X', 2, SETTING) is None
  assert campaign_plan.measured_rates(runs, 'GPU X', 4, {**SETTING, 'widths': [8]}) is None
  # A run cut after its first epoch has no later epoch to measure.
  cut = _run()
  cut['epochs'] = cut['epochs'][:1]
  assert campaign_plan.measured_rates([cut], 'GPU X', 4) is None


def test_plan_skips_what_does_not_fit_and_tries_shorter_jobs():
  rates = campaign_plan.Rates('GPU X', 2, first=60.0, epoch=10.0, row_eval=20.0, runs=1)
  jobs = [('a', 5, 1), ('b', 5, 1), ('c', 5, 1), ('d', 1, 1)]  # 120, 120, 120, 80 s
  planned = campaign_plan.plan(jobs, rates, slots=2, budget_seconds=230, margin=1.0)
  assert [(p.job_id, p.start, p.end, p.fits) for p in planned] == [
    ('a', 0.0, 120.0, True),
    ('b', 0.0, 120.0, True),
    ('c', 120.0, 240.0, False),
    ('d', 120.0, 200.0, True),
  ]
  text = campaign_plan.describe(planned, rates, 230)
  assert 'c' in text and 'does not fit' in text and '3 of 4 jobs fit.' in text


def test_runner_plan_is_a_dry_run(tmp_path, capsys, monkeypatch):
  monkeypatch.delenv('JAX_PLATFORMS', raising=False)  # the runner sets it; undone after
  # Rates measured at the paper's setting on an H100, as a chunk exports them.
  setting = records.setting_of(
    json.loads(
      campaign_jobs.load_config(
        campaign_jobs.select_jobs(1, ['wce_xie_e10'], [0])[0],
        variant='',
        overrides=[],
        directory=campaign_jobs.configs_dir(),
        protocols=['strict'],
      ).to_json_best_effort()
    )
  )
  done = tmp_path / 'done.json'
  runs = [
    _run(s, kind='H', side_by_side=2, setting=setting, group='table1:exp_0.75_a20_wj')
    for s in (0, 1)
  ]
  records.export(runs, done)
  argv = [
    '--table=1',
    '--rows=wce_xie_e10,exp_0.75_a20_wj_e5',
    '--seeds=3',
    '--parallel=2',
    '--max_minutes=4',
    '--shortest_first',
    f'--done={done}',
    '--device_kind=H',
    f'--workdir={tmp_path / "never"}',
    '--plan',
  ]
  assert runner.main(argv) == 0
  out = capsys.readouterr().out
  # exp+J seeds 0 and 1 are done; seed 2 (5 epochs, 120 s x 1.1) and the 10-epoch wce_xie
  # jobs (170 s x 1.1 = 187 s each) share two slots for 240 s.
  assert '2 jobs complete' in out
  lines = {line.split()[0]: line for line in out.splitlines() if line.startswith('  1:')}
  assert 'does not fit' not in lines['1:exp_0.75_a20_wj:2']
  assert 'does not fit' not in lines['1:wce_xie:0']
  assert 'does not fit' in lines['1:wce_xie:1'] and 'does not fit' in lines['1:wce_xie:2']
  assert not (tmp_path / 'never').exists()
  # A scheduler (--parallel 2, --max_minutes) keeps off the GPUs from the start.
  assert os.environ['JAX_PLATFORMS'] == 'cpu'


def test_runner_without_rates_starts_every_job():
  jobs = campaign_jobs.select_jobs(1, ['wce_xie_e10'], [0, 1])
  kept, message = scheduler.plan_chunk(jobs, lambda j: None, [], None, 4, 300)
  assert kept == jobs and 'No measured rates' in message
  assert message.endswith('are cut: 1:wce_xie:0, 1:wce_xie:1.')  # the dry run lists them


def test_plan_loads_every_config_first(tmp_path, monkeypatch):
  monkeypatch.delenv('JAX_PLATFORMS', raising=False)  # the runner sets it; undone after
  # A bad --set fails the dry run as it would fail the real one (it used to pass: the plan
  # loaded no config without --done).
  argv = ['--table=1', '--rows=wce_xie_e5', '--max_minutes=5', f'--workdir={tmp_path / "w"}']
  with pytest.raises(SystemExit, match='--set=learning_rate=abc: could not convert'):
    runner.main([*argv, '--plan', '--set=learning_rate=abc'])


def test_plan_needs_a_time_limit(tmp_path):
  with pytest.raises(SystemExit, match='--max_minutes'):
    runner.main(['--table=1', '--plan', f'--workdir={tmp_path}'])


def test_report_keeps_complete_runs_only():
  cut = _run(seed=1)
  cut['epochs'] = cut['epochs'][:3]
  unevaluated = _run(seed=2)
  del unevaluated['epochs'][1]['results']  # trained, its evaluation lost: not complete
  kept = records.complete_runs([_run(seed=0), cut, unevaluated])
  assert [r['seed'] for r in kept] == [0]


def test_untimed_epochs_measure_no_rate():
  # An epoch evaluated from a checkpoint has NaN training time; an export of another version
  # may lack a timing field (was: a KeyError traceback from the runner's --plan).
  run = _run(seed=0)
  run['epochs'][2]['train_seconds'] = float('nan')
  del run['epochs'][3]['first_in_process']
  rates = campaign_plan.measured_rates([run, _run(seed=1)], 'GPU X', 4, SETTING)
  assert (rates.first, rates.epoch, rates.row_eval, rates.runs) == (60.0, 10.0, 20.0, 2)
