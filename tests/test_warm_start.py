"""A learning-rate schedule of the global step and a warm start from a model file at its step
(crackjax/engine/learning_rate.py, config.model_init.start_step), and the candidates folder a
long run keeps its models in (crackjax/release/candidates.py): issue 76, items 1 and 4."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import jax
import numpy as np
import optax
import pytest

from crackjax.deploy import export
from crackjax.engine import learning_rate, train_state
from crackjax.engine.learning_rate import LearningRate
from crackjax.release import candidates
from crackjax.runs import identity
from tests import fixtures


def test_constant_is_the_peak_and_adam_at_a_float():
  lr = LearningRate(peak=3e-4)
  assert lr.is_constant
  assert [float(lr.at(s)) for s in (0, 10, 10**6)] == pytest.approx([3e-4] * 3)
  # Adam at a float: no schedule counter in the optimiser state, as runs before schedules had.
  params = {'w': np.zeros(2, np.float32)}
  plain = jax.tree.structure(optax.adam(3e-4).init(params))
  assert jax.tree.structure(train_state.create_optimizer(lr).init(params)) == plain


def test_cosine_decays_from_its_step_to_its_end_and_holds():
  lr = LearningRate(peak=1.0, name='cosine', decay_from_step=100, end_step=300, end_factor=0.1)
  # Hand-computed: peak before the decay, the half-way point (0.1 + 0.9 / 2), the end.
  assert float(lr.at(0)) == pytest.approx(1.0)
  assert float(lr.at(100)) == pytest.approx(1.0)
  assert float(lr.at(200)) == pytest.approx(0.55)
  assert float(lr.at(150)) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))
  assert float(lr.at(300)) == pytest.approx(0.1)
  assert float(lr.at(10**6)) == pytest.approx(0.1)


def test_warm_start_resumes_the_schedule_at_its_step_after_a_warm_up():
  lr = LearningRate(
    peak=1.0, name='cosine', warmup_steps=10, decay_from_step=0, end_step=200, start_step=100
  )
  schedule = lr.optax_schedule()
  # optax counts from 0 at the warm start's step: its count 0 is global step 100.
  assert float(schedule(0)) == pytest.approx(0.1 * 0.5)  # warm-up 1/10 of cos(pi/2)'s 0.5
  assert float(schedule(9)) == pytest.approx(float(lr.at(109)))
  assert float(schedule(50)) == pytest.approx(0.5 * (1 + math.cos(math.pi * 150 / 200)))
  # And under jit, as the train step takes it.
  assert float(jax.jit(schedule)(50)) == pytest.approx(float(schedule(50)))


def test_an_adam_step_under_the_schedule_takes_its_rate():
  lr = LearningRate(peak=1.0, name='cosine', decay_from_step=0, end_step=4, start_step=2)
  tx = train_state.create_optimizer(lr)
  params = {'w': np.zeros(1, np.float32)}
  state = tx.init(params)
  grads = {'w': np.ones(1, np.float32)}
  updates, _ = tx.update(grads, state, params)
  # Adam's first normalised step is 1 (bias-corrected), times the rate of global step 2: 0.5.
  assert float(updates['w'][0]) == pytest.approx(-0.5, rel=1e-4)


@pytest.mark.parametrize(
  'config, words',
  [
    ({'lr_schedule': {'name': 'linear'}}, "lr_schedule.name='linear'"),
    ({'lr_schedule': {'warmup_steps': -1}}, 'lr_schedule.warmup_steps=-1'),
    ({'lr_schedule': {'end_factor': 2.0}}, 'lr_schedule.end_factor=2.0'),
    (
      {'lr_schedule': {'name': 'cosine', 'decay_from_step': 5, 'end_step': 5}},
      'end_step=5 must be after decay_from_step=5',
    ),
    ({'model_init': {'start_step': 7}}, 'start_step=7 needs config.model_init.pretrained'),
    ({'model_init': {'start_step': 'x', 'pretrained': 'f'}}, "start_step='x'"),
  ],
)
def test_a_bad_schedule_or_start_step_is_one_line_naming_the_field(config, words):
  problems = learning_rate.problems({'learning_rate': 1e-3, **config})
  assert len(problems) == 1 and words in problems[0], problems


def test_the_constant_schedule_leaves_a_runs_fingerprint_as_it_was():
  from crackjax.configs import base

  before = base.get_config().to_dict()
  del before['lr_schedule']
  del before['model_init']['start_step']
  now = base.get_config().to_dict()
  assert identity.fingerprint(now) == identity.fingerprint(before)
  now['lr_schedule']['name'] = 'cosine'
  assert 'lr_schedule.name' in identity.fingerprint(now)


def _epoch_records(run: Path, rows: list[tuple[int, int, float, dict[str, float]]]) -> None:
  for epoch, step, pooled, members in rows:
    record = fixtures.eval_record(epoch, step, 'valid', {'strict': (pooled, 0.5)}, members=members)
    (run / f'epoch_{epoch:03d}.json').write_text(json.dumps(record))


def test_warm_start_goes_on_at_the_files_step_with_its_weights(smoke_run, tmp_path, caplog):
  """A smoke run exported at step 6, then a new run warm-started from it at step 6 with a
  cosine schedule: it trains steps 7-12 only, starts from the file's weights, and records
  the warm start in init.json."""
  from crackjax.experiment.build import build
  from crackjax.experiment.restored import load_model, load_run
  from crackjax.trainer import loop

  file = tmp_path / 'start.safetensors'
  export.export_model_file(smoke_run, file, name='start')
  config = fixtures.smoke_config(fixtures.smoke_data_dirs(tmp_path / 'data'))
  config.eval.protocols = ('strict',)
  config.num_epochs = 4  # steps 7-12 after the file's 6
  config.model_init.pretrained = str(file)
  config.model_init.start_step = 6
  config.lr_schedule.name = 'cosine'
  config.lr_schedule.decay_from_step = 6
  config.lr_schedule.end_step = 12
  config.eval.every_epochs = 1
  experiment = build(config)
  # No fine-tuning: no before / after table (the file's step is scored as its epoch instead).
  from crackjax.trainer import before_after

  assert before_after.start_model(experiment) is None
  seen = {}

  def on_epoch_end(state, epoch):
    seen[epoch] = int(state.step)

  loop.train_and_evaluate(
    experiment, tmp_path / 'run', evaluate_after=False, on_epoch_end=on_epoch_end
  )
  assert seen == {3: 9, 4: 12}  # epochs 3 and 4 only: the first two were the file's
  # The file's own step is scored as epoch 2, said as a warm start (not as a lost evaluation).
  said = [r.getMessage() for r in caplog.records if 'Evaluating epoch 2' in r.getMessage()]
  assert said and 'warm-started at its step' in said[0], said
  assert (tmp_path / 'run' / 'epoch_002.json').exists()
  init = json.loads((tmp_path / 'run' / 'init.json').read_text())
  assert init['start_step'] == 6 and init['pretrained'] == str(file)
  rows = [json.loads(x) for x in (tmp_path / 'run' / 'metrics.jsonl').read_text().splitlines()]
  assert min(r['step'] for r in rows if r['kind'] == 'train') > 6
  # The weights moved from the file's (the run trained), and step 6's are the file's own.
  start = load_model(file).params
  end = load_run(tmp_path / 'run').params
  moved = [
    float(np.abs(a - b).max())
    for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(end), strict=True)
  ]
  assert max(moved) > 0


def test_candidates_keep_the_newest_and_the_best_and_warm_start_from_the_newest(
  smoke_run, tmp_path
):
  run = tmp_path / 'run'
  shutil.copytree(smoke_run, run)
  # Epoch 1 (step 3) scores better than epoch 2 (step 6) on the mean over the datasets.
  _epoch_records(run, [(1, 3, 0.6, {'a': 0.7, 'b': 0.7}), (2, 6, 0.65, {'a': 0.5, 'b': 0.6})])
  folder = tmp_path / 'candidates'
  written = candidates.add(run, folder, name='m')
  assert sorted(p.name for p in written) == ['step_000003.safetensors', 'step_000006.safetensors']
  found = candidates.read(folder)
  assert [c.step for c in found] == [3, 6]
  assert candidates.latest(folder).step == 6
  assert candidates.best(folder).step == 3 and candidates.best(folder).mean_f1 == pytest.approx(0.7)
  record = found[0].record
  assert record['dtype'] == 'bfloat16' and record['validation']['datasets'] == {'a': 0.7, 'b': 0.7}
  # The files are bfloat16 model files of their step.
  from crackjax.models import model_file

  meta = model_file.read_metadata(found[1].path)
  assert meta['card']['training']['step'] == 6 and meta['card']['bfloat16']
  # Adding again writes nothing new.
  assert candidates.add(run, folder) == []
  # The latest command: FILE STEP, what scripts/plateau_cpu.sh warm-starts from.
  assert candidates.main(['latest', f'--dir={folder}']) == 0


def test_a_warm_started_runs_start_is_no_candidate(smoke_run, tmp_path):
  """The first record of a run warm-started at step 3 scores its start file: not exported."""
  run = tmp_path / 'run'
  shutil.copytree(smoke_run, run)
  config = json.loads((run / 'config.json').read_text())
  config['model_init'] = {**config.get('model_init', {}), 'start_step': 3, 'pretrained': 'f'}
  (run / 'config.json').write_text(json.dumps(config))
  _epoch_records(run, [(1, 3, 0.9, {'a': 0.9}), (2, 6, 0.5, {'a': 0.5})])
  written = candidates.add(run, tmp_path / 'candidates')
  assert [p.name for p in written] == ['step_000006.safetensors']
  (run / 'epoch_002.json').unlink()
  assert candidates.add(run, tmp_path / 'more') == []


def test_in_play_keeps_the_newest_the_best_and_the_next_newest():
  def c(step, f1):
    return candidates.Candidate(
      Path(f'step_{step}.safetensors'), step, {'validation': {'mean_f1': f1}}
    )

  found = [c(1, 0.5), c(2, 0.9), c(3, 0.6), c(4, 0.7), c(5, 0.65)]
  assert [x.step for x in candidates.in_play(found, keep=3)] == [2, 4, 5]
  assert [x.step for x in candidates.in_play(found, keep=2)] == [2, 5]
  assert [x.step for x in candidates.in_play(found[:1], keep=3)] == [1]
  assert candidates.in_play([], keep=3) == []


def test_latest_falls_back_to_the_released_model_at_its_cards_step(tmp_path, capsys):
  assert candidates.main(['latest', f'--dir={tmp_path}', '--fallback=roads-unet-cpu']) == 0
  path, step = capsys.readouterr().out.split()
  assert Path(path).name == 'roads-unet-cpu.safetensors' and step == '11000'
  assert candidates.main(['latest', f'--dir={tmp_path}']) == 1


def test_an_unreadable_record_is_one_line_naming_it(tmp_path, capsys):
  (tmp_path / 'step_000010.safetensors').write_bytes(b'x')
  (tmp_path / 'step_000010.json').write_text('{')
  assert candidates.main(['list', f'--dir={tmp_path}']) == 2
  err = capsys.readouterr().err
  assert 'step_000010.json' in err and len(err.strip().splitlines()) == 1
