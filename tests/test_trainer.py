"""End-to-end training on fake CrackForest data: outputs, resume after a hard kill, NaN stop."""

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from crackjax.data import loader
from crackjax.engine import checkpoints
from crackjax.engine import step as step_lib
from crackjax.experiment.build import build
from crackjax.runs import exits, identity, outputs
from crackjax.trainer import eval_records, loop, periodic, scoring, stopping, train_command
from tests import fixtures

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  """A fake CrackForest archive and its prepared TFDS copy, shared by this module."""
  return fixtures.smoke_data_dirs(tmp_path_factory.mktemp('data'))


smoke_config = fixtures.smoke_config


def _restore_params(config, workdir):
  state = build(config).states.restore(workdir)
  return int(state.step), jax.device_get(state.params)


def _train_rows(workdir):
  rows = [json.loads(line) for line in (Path(workdir) / 'metrics.jsonl').read_text().splitlines()]
  return [r for r in rows if r['kind'] == 'train']


@pytest.mark.slow
def test_train_and_eval_writes_checkpoints_logs_and_eval(data_dirs, tmp_path):
  config = smoke_config(data_dirs)
  config.eval.every_epochs = 1
  config.eval.curve_protocols = ('strict',)
  config.eval.background_workers = 1  # epoch 1 scored beside epoch 2's training
  workdir = tmp_path / 'run'
  train_command.run(build(config), workdir, 'train_and_eval')

  mngr = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep)
  assert mngr.all_steps() == [3, 6]  # one per epoch
  rows = _train_rows(workdir)
  assert [r['step'] for r in rows] == [1, 2, 3, 4, 5, 6]
  assert all(np.isfinite(r['loss']) and r['q'] > 1 for r in rows)
  assert list((workdir / 'tensorboard').glob('events.out.tfevents.*'))

  result = json.loads((workdir / 'eval.json').read_text())
  assert result['step'] == 6 and result['num_images'] == 4  # 40% of 10
  assert result['protocols'] == ['strict', 'tolerance', 'tolerance_thin_gt']
  strict = result['results']['strict']
  assert strict['protocol'] == 'strict' and 'pixel' in strict['protocol_description']
  for res in result['results'].values():
    for key in ('precision', 'recall', 'f1', 'threshold'):
      assert 0.0 <= res['ods'][key] <= 1.0
  assert {row['name'] for row in strict['per_image']} == {
    ex['name'] for ex in build(config).splits.examples()
  }
  threshold = json.loads((workdir / 'threshold.json').read_text())
  assert threshold['threshold'] == strict['ods']['threshold']
  csv_lines = (workdir / 'eval_per_image.csv').read_text().splitlines()
  assert len(csv_lines) == 1 + 4 and csv_lines[0].startswith('name,strict_threshold')
  for png in ('pr_curve.png', 'qualitative.png'):
    assert (workdir / png).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert not (workdir / 'probs').exists()  # probability maps only on request

  # One record format: every epoch's record (config.eval.every_epochs) is eval.json's, without
  # the per-image rows; the curve epoch under curve_protocols, the last under all.
  e1 = json.loads((workdir / 'epoch_001.json').read_text())
  e2 = json.loads((workdir / 'epoch_002.json').read_text())
  assert tuple(e1) == tuple(e2) == tuple(result) == eval_records.RECORD_FIELDS
  assert (e1['epoch'], e1['step'], e1['protocols']) == (1, 3, ['strict'])
  assert e2['protocols'] == result['protocols'] and e2['step'] == 6
  assert e2['dataset'] == 'crackforest' and e2['split'] == 'test' and e2['num_images'] == 4
  assert e1['train_seconds'] > 0 and e1['first_in_process'] and not e2['first_in_process']
  for p, r in result['results'].items():
    assert e2['results'][p] == {k: v for k, v in r.items() if k != 'per_image'}

  # --mode=eval restores the checkpoint and reproduces the numbers.
  (workdir / 'eval.json').unlink()
  config.eval.save_probability_maps = True
  train_command.run(build(config), workdir, 'eval')
  again = json.loads((workdir / 'eval.json').read_text())
  assert again['results'] == result['results']
  assert len(list((workdir / 'probs').glob('*.png'))) == 4


def test_background_scoring_writes_the_same_record_as_scoring_in_the_loop(
  data_dirs, smoke_run, tmp_path, monkeypatch
):
  # In the loop the epoch is streamed (counts kept, maps dropped: issue 45); beside training
  # its maps are held and scored at once (`evaluation.evaluate`): the same record.
  config = smoke_config(data_dirs)
  config.eval.every_epochs = 1
  config.eval.protocols = ('strict', 'tolerance', 'tolerance_thin_gt')
  state = build(config).states.restore(smoke_run)  # step 6: the end of epoch 2
  held = []
  predict_all = scoring.predict_examples
  monkeypatch.setattr(
    scoring, 'predict_examples', lambda *a, **k: held.append(1) or predict_all(*a, **k)
  )
  records = {}
  for workers in (0, 1):
    config.eval.background_workers = workers
    evaluator = periodic.EpochEvaluator(build(config), tmp_path / str(workers))
    returned = evaluator(state, 2, trained=False)
    assert (returned is None) == bool(workers)  # in the background: written later
    assert len(held) == workers  # every map held only for the background scoring
    finished = evaluator.finish()
    evaluator.close()
    records[workers] = json.loads((tmp_path / str(workers) / 'epoch_002.json').read_text())
    typed = finished if workers else returned
    assert json.loads(outputs.dumps(typed.to_json()))['results'] == records[workers]['results']
  assert records[1]['results'] == records[0]['results']
  assert records[1]['step'] == 6 and records[1]['protocols'] == list(config.eval.protocols)
  assert evaluator.finish() is None  # nothing left in flight


def test_an_unusable_pretrained_file_is_one_line(data_dirs, tmp_path):
  config = smoke_config(data_dirs)
  weights = tmp_path / 'weights.npz'
  weights.write_text('not an npz')
  config.model_init.pretrained = str(weights)
  with pytest.raises(SystemExit) as e:
    train_command.run_or_exit(build(config), tmp_path / 'run', 'train_and_eval')
  message = str(e.value)
  assert message == f'launch.py: {weights} is not a .npz file (a zip archive of named .npy arrays).'
  assert len(message.splitlines()) == 1 and 'Traceback' not in message
  assert not (tmp_path / 'run' / 'checkpoints').exists() or not any(
    (tmp_path / 'run' / 'checkpoints').iterdir()
  )


def test_eval_without_checkpoint_is_a_clear_error(data_dirs, tmp_path):
  with pytest.raises(FileNotFoundError, match='No checkpoint'):
    train_command.run(build(smoke_config(data_dirs)), tmp_path / 'empty', 'eval')
  assert not (tmp_path / 'empty').exists()  # nothing is created


@pytest.mark.slow
def test_nan_stops_training_and_keeps_last_good_checkpoint(data_dirs, tmp_path, monkeypatch):
  config = smoke_config(data_dirs)
  real = loader.create_train_iterator

  def poisoned(config, source, *, start_step=0, **kwargs):
    for step, batch in enumerate(
      real(config, source, start_step=start_step, **kwargs), start_step + 1
    ):
      if step == 5:  # mid-way through the second epoch
        batch = dict(batch, image=np.full_like(batch['image'], np.nan))
      yield batch

  monkeypatch.setattr(loader, 'create_train_iterator', poisoned)
  workdir = tmp_path / 'nan'
  with pytest.raises(step_lib.NonFiniteError, match='step 5.*last good checkpoint is step 3'):
    loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
  steps = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep).all_steps()
  assert steps == [3]
  step, params = _restore_params(config, workdir)
  assert step == 3
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(params))


@pytest.mark.slow
def test_interrupted_run_saves_on_exit_and_resumes(data_dirs, tmp_path, monkeypatch):
  # SIGTERM reaches train_and_evaluate as SystemExit (launch.py's handler); Ctrl-C as
  # KeyboardInterrupt. Either way the state of the last finished step is saved.
  config = smoke_config(data_dirs)
  real = loader.create_train_iterator

  def interrupted(config, source, *, start_step=0, **kwargs):
    for step, batch in enumerate(
      real(config, source, start_step=start_step, **kwargs), start_step + 1
    ):
      if step == 5:
        raise exits.Terminated('Received signal 15')  # as exit_on_sigterm's handler does
      yield batch

  monkeypatch.setattr(loader, 'create_train_iterator', interrupted)
  workdir = tmp_path / 'term'
  with pytest.raises(exits.Terminated) as e:
    loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
  # The loop words it: which step, which checkpoint is kept.
  assert e.value.code == (
    f'stopped by SIGTERM (a time limit or kill) at step 4 of 6; the checkpoint of step 4 in '
    f'{workdir / "checkpoints"} is kept: run the same command again to resume from it.'
  )
  steps = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep).all_steps()
  assert steps == [
    3,
    4,
  ]
  monkeypatch.setattr(loader, 'create_train_iterator', real)
  # Resuming under another learning rate would mix two runs: it stops, writing nothing.
  written = (workdir / 'config.json').read_text()
  other = smoke_config(data_dirs)
  other.learning_rate = 0.01
  with pytest.raises(identity.RunMismatchError, match='learning_rate: 0.0003 -> 0.01'):
    loop.train_and_evaluate(build(other), workdir, evaluate_after=False)
  assert (workdir / 'config.json').read_text() == written
  steps = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep).all_steps()
  assert steps == [
    3,
    4,
  ]
  # A config that ends before the checkpoint (num_epochs lowered): it stops, naming what to
  # pass, rather than scoring a mid-epoch state as the run's result.
  short = smoke_config(data_dirs)
  short.num_epochs = 1
  with pytest.raises(checkpoints.CheckpointError, match=r'step 4 in .* past .*num_epochs=2 or'):
    loop.train_and_evaluate(build(short), workdir, evaluate_after=True)
  assert (workdir / 'config.json').read_text() == written
  assert not (workdir / 'eval.json').exists()
  state = loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
  assert int(state.step) == 6
  assert [r['step'] for r in _train_rows(workdir)][-2:] == [5, 6]


@pytest.mark.slow
def test_a_sigterm_swallowed_in_a_gc_callback_stops_the_loop_at_its_next_step(data_dirs, tmp_path):
  # CI: a SLURM worker took its SIGTERM inside JAX's gc callback, which printed the SystemExit
  # and dropped it; the run went on (or hung) and never saved. The handler only remembers a
  # SIGTERM that lands there, and the loop's next step raises it.
  config = smoke_config(data_dirs)
  workdir = tmp_path / 'term'

  def sigterm_during_a_collection(state, epoch):
    def callback(phase, info):  # as JAX's `_xla_gc_callback`: run by the collector at any time
      if phase == 'start' and epoch == 1:
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # bytecodes, where Python runs the handler

    gc.callbacks.append(callback)
    try:
      gc.collect()
    finally:
      gc.callbacks.remove(callback)

  previous = signal.getsignal(signal.SIGTERM)
  exits.exit_on_sigterm()
  try:
    with pytest.raises(exits.Terminated) as e:
      loop.train_and_evaluate(
        build(config), workdir, evaluate_after=False, on_epoch_end=sigterm_during_a_collection
      )
  finally:
    exits.exit_on_sigterm()  # forgets the SIGTERM it took, before the handler is put back
    signal.signal(signal.SIGTERM, previous)
  assert e.value.code == (
    f'stopped by SIGTERM (a time limit or kill) at step 3 of 6; the checkpoint of step 3 in '
    f'{workdir / "checkpoints"} is kept: run the same command again to resume from it.'
  )
  steps = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep).all_steps()
  assert steps == [3]


@pytest.mark.slow
def test_interrupted_inside_the_step_keeps_the_last_checkpoint(data_dirs, tmp_path, monkeypatch):
  # A SIGTERM that lands while the jitted step holds the donated state (seen on an H100 on
  # 26 Nov): the old state's buffers are gone, so the epoch checkpoint is the one to keep.
  config = smoke_config(data_dirs)
  real = step_lib.make_train_step

  def make_dying_step(*args, **kwargs):
    step_fn = real(*args, **kwargs)
    calls = []

    def dying(state, batch):
      calls.append(1)
      if len(calls) == 5:  # mid-epoch 2 (3 steps per epoch)
        for x in jax.tree.leaves(state):
          x.delete()  # what donation does to the caller's arrays
        raise SystemExit('Received signal 15')
      return step_fn(state, batch)

    return dying

  monkeypatch.setattr(step_lib, 'make_train_step', make_dying_step)
  workdir = tmp_path / 'term_in_step'
  with pytest.raises(SystemExit):
    loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
  steps = checkpoints.checkpoint_manager(workdir, config.max_checkpoints_to_keep).all_steps()
  assert steps == [3]
  monkeypatch.setattr(step_lib, 'make_train_step', real)
  state = loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
  assert int(state.step) == 6


def test_buffers_deleted():
  tree = {'a': jax.numpy.ones(2), 'b': np.ones(2)}
  assert not stopping.buffers_deleted(tree)
  tree['a'].delete()
  assert stopping.buffers_deleted(tree)


# Runs the smoke config in a subprocess and SIGKILLs itself when asked for the batch of
# step 5 (mid-epoch 2), once the epoch-1 checkpoint (step 3) is safely on disk.
_KILLED_RUN = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from crackjax.configs import smoke
    from crackjax.trainer import loop
    from crackjax.engine import step as step_lib
    from crackjax.data import loader
    from crackjax.experiment.build import build

    config = smoke.get_config()
    config.data.manual_dir, config.data.data_dir = {raw!r}, {tfds!r}
    workdir = Path({workdir!r})
    real = loader.create_train_iterator

    def dying(config, source, *, start_step=0, **kwargs):
      for step, batch in enumerate(real(config, source, start_step=start_step, **kwargs), 1):
        if step == 5:
          deadline = time.time() + 60
          while not (workdir / 'checkpoints' / '3').exists() and time.time() < deadline:
            time.sleep(0.1)
          time.sleep(1.0)
          os.kill(os.getpid(), signal.SIGKILL)
        yield batch

    loader.create_train_iterator = dying
    loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
""")


@pytest.mark.slow
def test_killed_run_resumes_from_last_checkpoint(data_dirs, tmp_path):
  raw, tfds_dir = data_dirs
  config = smoke_config(data_dirs)
  env = dict(os.environ, PYTHONPATH=str(REPO))
  killed = tmp_path / 'killed'
  script = _KILLED_RUN.format(raw=str(raw), tfds=str(tfds_dir), workdir=str(killed))
  proc = subprocess.run(
    [sys.executable, '-c', script], env=env, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
  steps = checkpoints.checkpoint_manager(killed, config.max_checkpoints_to_keep).all_steps()
  assert steps == [3]

  # Relaunch through the real command line: it must pick up step 3 by itself.
  cmd = [
    sys.executable,
    str(REPO / 'launch.py'),
    '--config=' + str(REPO / 'configs/smoke.py'),
    f'--workdir={killed}',
    '--mode=train',
    f'--config.data.manual_dir={raw}',
    f'--config.data.data_dir={tfds_dir}',
  ]
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'Resuming at step 3' in proc.stderr
  steps = [r['step'] for r in _train_rows(killed)]
  # The killed run may have logged step 4 before dying; the resumed run redoes 4, 5, 6.
  assert steps[-3:] == [4, 5, 6] and max(steps[:-3]) <= 4

  # Same numbers as a run that was never interrupted (data order and augmentation are
  # functions of the step, so resuming is exact).
  clean = tmp_path / 'clean'
  loop.train_and_evaluate(build(config), clean, evaluate_after=False)
  step_a, params_a = _restore_params(config, killed)
  step_b, params_b = _restore_params(config, clean)
  assert step_a == step_b == 6
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), params_a, params_b
  )
  loss_resumed = [r['loss'] for r in _train_rows(killed) if r['step'] >= 4][-3:]
  loss_clean = [r['loss'] for r in _train_rows(clean) if r['step'] >= 4]
  np.testing.assert_allclose(loss_resumed, loss_clean, rtol=1e-5)
