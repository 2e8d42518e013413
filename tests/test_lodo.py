"""Leave-one-dataset-out (issue 55), `crackjax.lodo` and its command bench/lodo.py: which member
each fold holds out, what it trains on and scores; the table and the threshold chosen on the
other held-out sets; (slow) the whole command on tiny fake copies of the five datasets."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crackjax.evaluation import result, threshold_choice
from crackjax.lodo import fold_stages, fold_tables, kept_scores
from crackjax.lodo import folds as folds_lib
from tests import fixtures
from tests.test_sigterm import signal_in_a_gc_callback

REPO = Path(__file__).resolve().parents[1]


def _bench():
  spec = importlib.util.spec_from_file_location('lodo_bench', REPO / 'bench' / 'lodo.py')
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # its dataclass looks its module up
  spec.loader.exec_module(module)
  return module


def test_plan_holds_each_member_out_once(tmp_path, capsys):
  lodo = _bench()
  folds = lodo.plan(['base', 'photometric'], 'short', list(lodo.lodo.MEMBERS), tmp_path)
  assert len(folds) == 10
  for f in folds:
    assert f.held_out not in f.trains_on and len(f.trains_on) == 4
    assert f.run == tmp_path / f'{f.recipe}_short' / f.held_out
    cmd = fold_stages.train_command(f, _campaign(lodo))
    assert f'--config=configs/lodo.py:{f.held_out},{f.recipe},short' in cmd
    # The held-out member's data is never handed to its training.
    assert not any(f'mix.{f.held_out}.' in part for part in cmd)
    assert not any('background_workers' in part for part in cmd)
    cmd = fold_stages.train_command(f, _campaign(lodo, '--eval_workers=2'))
    assert '--config.eval.background_workers=2' in cmd
    score = fold_stages.score_command(f, _campaign(lodo))
    assert f'--data={f.held_out}:test' in score
    assert f'--model={f.run / folds_lib.MODEL_FILE}' in score
    assert f'--manual_dir={f.held_out}=' + ('CF' if f.held_out == 'crackforest' else 'PUB') in score
  # The command line, in this process (a subprocess would spend its seconds importing jax).
  assert lodo.main(['--plan', '--recipes=base']) == 0
  out = capsys.readouterr().out
  assert (
    'base,short: train on deepcrack+crack500+gaps384+aiglern_trimm; score crackforest:test' in out
  )
  with pytest.raises(SystemExit) as bad:
    lodo.main(['--plan', '--recipes=magic'])
  assert bad.value.code == 2 and "unknown recipe ['magic']" in capsys.readouterr().err


def test_test_time_variants_score_the_same_files_again(tmp_path):
  lodo = _bench()
  variants = folds_lib.parse_test_time('base:2,flip,photometric:1+2+flip', ['base', 'photometric'])
  assert variants == [
    ('base', (2.0,), False),
    (None, (1.0,), True),
    ('photometric', (1.0, 2.0), True),
  ]
  folds = lodo.plan(['base', 'photometric'], 'short', ['crackforest', 'gaps384'], tmp_path)
  again = folds_lib.variant_folds(variants, folds)
  # base at 2 (two sets), every recipe mirrored (four folds), photometric at 1+2 mirrored (two).
  assert [(f.recipe, f.test_time) for f in again[::2]] == [
    ('base', 'scales 2'),
    ('base', 'flip'),
    ('photometric', 'flip'),
    ('photometric', 'scales 1,2 + flip'),
  ]
  for f in again:
    # The fold's own file and run, scored into a folder of its own.
    assert f.run == tmp_path / f'{f.recipe}_short' / f.held_out
    assert f.heldout_dir.parent == f.run and f.heldout_dir.name != folds_lib.HELDOUT_DIR
    score = fold_stages.score_command(f, _campaign(lodo), ['strict'])
    assert '--protocols=strict' in score and f'--model={f.run / folds_lib.MODEL_FILE}' in score
  assert again[0].heldout_dir.name == 'heldout_2' and again[2].heldout_dir.name == 'heldout_1_flip'
  for bad, why in (
    ('scale:2', "recipe 'scale' is not in --recipes"),
    ('base:big', "a part is a scale factor or 'flip'"),
    ('1', 'not the plain 1 alone'),
    ('0+2', 'scales must be > 0'),
  ):
    with pytest.raises(ValueError, match=why):
      folds_lib.parse_test_time(bad, ['base', 'photometric'])


def test_the_gpu_budget_is_the_gpu_models_recipe_without_the_held_out_member():
  """configs/lodo.py's ``gpu`` budget (scripts/lodo_gpu.sh) differs from the GPU-made
  roads-unet's config (configs/release/roads_unet.py) only by the member left out and the
  number of epochs: its LODO figure is that recipe's."""
  from crackjax.configs import lodo
  from crackjax.configs.release import roads_unet

  release = roads_unet.get_config().to_dict()
  for held_out in lodo.MEMBERS:
    fold = lodo.get_config(f'{held_out},base,gpu').to_dict()
    assert list(fold['data']['mix']) == sorted(m for m in lodo.MEMBERS if m != held_out)
    fold['data']['mix'][held_out] = release['data']['mix'][held_out]
    differ = {k for k in release if release[k] != fold[k]}
    assert differ == {'num_epochs', 'max_checkpoints_to_keep'}, held_out
    assert fold['num_epochs'] * fold['steps_per_epoch'] == 6000
  # With a recipe, the release run is its folds' training with all five members: nothing else
  # differs, epochs included, so their LODO figure is the release's.
  for recipe in ('base', 'jpeg', 'photometric', 'crop256'):
    release = roads_unet.get_config(recipe).to_dict()
    for held_out in lodo.MEMBERS:
      fold = lodo.get_config(f'{held_out},{recipe},gpu').to_dict()
      fold['data']['mix'][held_out] = release['data']['mix'][held_out]
      assert fold == release, (recipe, held_out)
  assert roads_unet.get_config('jpeg').data.jpeg_probability == 0.5
  tiny = roads_unet.get_config('jpeg,tiny')
  assert tiny.data.jpeg_probability == 0.5 and tiny.model.widths == (4, 8, 16, 32, 64)
  for bad in ('magic', 'jpeg,photometric'):
    with pytest.raises(ValueError, match=r'RECIPE one of \['):
      roads_unet.get_config(bad)


def _campaign(lodo, *flags: str) -> fold_stages.Campaign:
  """The folds' shared settings as the command makes them from its flags."""
  return lodo.campaign(lodo.parse_args(['--crackforest=CF', '--public=PUB', '--workers=1', *flags]))


def _scores(curve_f1, stored=50.0):
  thresholds = [0.1 * i for i in range(10)]
  point = {'stored': stored, 'threshold': 0.5, 'ods': max(curve_f1), 'ods_threshold': 0.0}
  return {
    'strict': point,
    'tolerance_thin_gt': point,
    'curve': {'thresholds': thresholds, 'f1': curve_f1},
  }


def test_a_fold_cut_short_is_exported_only_when_accepted_and_named_in_the_table(
  tmp_path, monkeypatch
):
  """scripts/lodo_gpu.sh's time limit: a fold with 1 of its 3 epochs scored is exported from
  that epoch only with --accept_cut, and the table names it with the epochs it trained."""
  lodo = _bench()
  (fold,) = lodo.plan(['base'], 'gpu', ['gaps384'], tmp_path)
  assert fold.epochs == lodo.planned_epochs('gaps384', 'base', 'gpu') == 3
  assert not folds_lib.exportable(fold, accept_cut=True)  # nothing scored yet
  fold.run.mkdir(parents=True)
  (fold.run / 'epoch_001.json').write_text('{}')
  assert not folds_lib.trained(fold) and folds_lib.epochs_scored(fold) == 1
  assert not folds_lib.exportable(fold, accept_cut=False)
  assert folds_lib.exportable(fold, accept_cut=True)
  for n in (2, 3):
    (fold.run / f'epoch_{n:03d}.json').write_text('{}')
  assert folds_lib.trained(fold) and folds_lib.exportable(fold, accept_cut=False)
  rows = {
    'base (gpu)': {'gaps384': {'epochs': {'scored': 2, 'planned': 4}}, 'crack500': None},
    'jpeg (gpu)': {'gaps384': {'epochs': {'scored': 4, 'planned': 4}}},
  }
  cut = fold_tables.cut_folds(rows, ['gaps384', 'crack500'])
  assert cut == 'base (gpu), gaps384: 2 of 4 epochs'
  # The table's planned epochs are the run's own (its config.json), whatever the budget says now.
  assert folds_lib.recorded_epochs(fold) == 3
  (fold.run / 'config.json').write_text('{"num_epochs": 4}')
  assert folds_lib.recorded_epochs(fold) == 4
  cmd = fold_stages.export_command(fold, 2000, 'bfloat16')
  assert '--dtype=bfloat16' in cmd and '--step=2000' in cmd
  # A file exported at a cut (step 2000) is exported again once its run has a better epoch
  # (a later call resumed it), its held-out scores dropped; at that epoch, not again.
  from crackjax.deploy import release

  monkeypatch.setattr(release, 'best_epoch', lambda run: {'step': 6000})
  (fold.run / 'heldout' / 'gaps384_test').mkdir(parents=True)
  (fold.run / 'heldout_2').mkdir()
  monkeypatch.setattr(folds_lib, 'exported_step', lambda f: 2000)
  assert folds_lib.export_step(fold, accept_cut=True) == 6000
  assert not list(fold.run.glob('heldout*'))
  monkeypatch.setattr(folds_lib, 'exported_step', lambda f: 6000)
  assert folds_lib.export_step(fold, accept_cut=True) is None
  monkeypatch.setattr(folds_lib, 'exported_step', lambda f: None)
  assert folds_lib.export_step(fold, accept_cut=False) == 6000
  settings = _campaign(lodo, '--accept_cut', '--dtype=bfloat16')
  assert settings.accept_cut and settings.dtype == 'bfloat16'


def test_new_road_threshold_is_chosen_on_the_other_sets():
  # Three held-out sets whose best thresholds are 0.2, 0.3 and 0.7.
  a = [0, 10, 80, 60, 40, 30, 20, 10, 0, 0]
  b = [0, 10, 60, 80, 50, 30, 20, 10, 0, 0]
  c = [0, 0, 0, 20, 30, 40, 50, 70, 10, 0]
  chosen = fold_tables.new_road_thresholds({'a': _scores(a), 'b': _scores(b), 'c': _scores(c)})
  # For a: the mean of b and c is best at 0.3 (65 / 2 + ...): b 80 + c 20 = 100 -> 50.0;
  # at 0.7: 10 + 70 = 80 -> 40; so 0.3, where a scores 60.
  assert chosen['per_set']['a'] == {'threshold': pytest.approx(0.3), 'f1': 60}
  # For c: a and b are best together at 0.2 or 0.3 (70 both), the tie to the one nearer 0.5.
  assert chosen['per_set']['c'] == {'threshold': pytest.approx(0.3), 'f1': 20}
  assert chosen['mean_f1'] == pytest.approx((60 + chosen['per_set']['b']['f1'] + 20) / 3)
  assert fold_tables.new_road_thresholds({'a': _scores(a), 'b': _scores(b)}) is None  # too few
  rows = {'base (short)': {'a': _scores(a), 'b': _scores(b), 'c': _scores(c)}}
  text = fold_tables.table(rows, ['a', 'b', 'c', 'd'])
  assert '| base (short) | 50.0 / 80.0 · 50.0 / 80.0 |' in text
  assert '(3 of 4)' in text and '| – |' in text
  # The threshold chosen on the known sets with every set alike (eval.threshold_over='datasets'),
  # a row of its own when every held-out set has it.
  for name, f1 in (('a', 70.0), ('b', 40.0), ('c', 10.0)):
    rows['base (short)'][name]['datasets_alike'] = {'threshold': 0.4, 'f1': f1}
  text = fold_tables.threshold_table(rows, {'base (short)': chosen}, ['a', 'b', 'c'])
  assert (
    "| base (short) | known sets' validation, every set alike | 70.0 (t=0.40) | 40.0 (t=0.40) | "
    '10.0 (t=0.40) | 40.0 |'
  ) in text
  # False positives far from labelled cracks, per set and their mean over the sets measured.
  rows['base (short)']['a']['false_positives'] = 1234.4
  rows['base (short)']['c']['false_positives'] = 100.0
  assert fold_tables.fp_table(rows, ['a', 'b', 'c']).splitlines()[2] == (
    '| base (short) | 1,234 | – | 100 | 667 |'
  )
  assert fold_tables.fp_table({'x': {}}, ['a']) == ''  # nothing measured: no table


def test_kept_folds_outlive_their_work_folder(tmp_path, monkeypatch):
  """--keep: a scored fold's scores are kept in a committed folder; once the machine holding
  its run is gone, the fold is neither trained again nor missing from the table."""
  from crackjax.deploy import release

  lodo = _bench()
  keep = tmp_path / 'results' / 'lodo_long'
  (fold,) = lodo.plan(['base'], 'long', ['gaps384'], tmp_path / 'work')
  (variant,) = folds_lib.variant_folds([(None, (2.0,), False)], [fold])
  scores = {fold.record: _scores([10.0] * 10, stored=41.5), variant.record: _scores([5.0] * 10)}
  monkeypatch.setattr(
    kept_scores, 'fold_scores', lambda f: scores[f.record] if f.record.exists() else None
  )
  selected = {'epoch': 11, 'step': 5500, 'ods_f1': 0.66, 'threshold': 0.95}
  monkeypatch.setattr(release, 'best_epoch', lambda run: selected)
  monkeypatch.setattr(kept_scores, 'datasets_alike', lambda f, step, curve: None)
  for f in (fold, variant):
    f.record.parent.mkdir(parents=True)
    f.record.write_text('{}')
  rows, _ = kept_scores.collect([fold, variant], keep)
  assert kept_scores.kept_path(fold, keep) == keep / 'base_long' / 'gaps384.json'
  assert kept_scores.kept_path(variant, keep) == keep / 'base_long_2' / 'gaps384.json'
  record = kept_scores.kept(fold, keep)
  assert record['fold'] == 'configs/lodo.py:gaps384,base,long'
  assert record['scores']['strict']['stored'] == 41.5 and record['scores']['selected'] == selected
  assert record['scored'].endswith('UTC') and record['commit'] and 'cores' in record['machine']
  # The same scores again: the kept file is left as it was (its date and commit stay the first).
  path = kept_scores.kept_path(fold, keep)
  path.write_text(path.read_text().replace(record['commit'], 'abc1234'))
  kept_scores.collect([fold], keep)
  assert kept_scores.kept(fold, keep)['commit'] == 'abc1234'
  # The machine is recycled: the work folder is gone, the table is the same from the kept files.
  shutil.rmtree(tmp_path / 'work')
  again, _ = kept_scores.collect([fold, variant], keep)
  assert json.loads(json.dumps(rows)) == again
  assert kept_scores.collect([fold, variant])[0] == {
    'base (long)': {},
    'base (long) at scales 2': {},
  }
  head = kept_scores.provenance([fold], 'python bench/lodo.py --keep=K', keep)
  assert head.startswith('Written by `python bench/lodo.py --keep=K` at commit ')
  assert 'kept folds, from ' in head and 'base without gaps384 scored ' in head
  # Nothing is run again for a kept fold; without --keep the same fold trains from the start.
  ran = []
  monkeypatch.setattr(fold_stages, 'run_command', lambda cmd, cwd: ran.append(cmd))
  settings = _campaign(lodo, f'--keep={keep}')
  assert settings.keep == keep and settings.stages == set(fold_stages.STAGES)
  fold_stages.run_stages([fold], [variant], settings)
  assert ran == []
  fold_stages.run_stages([fold], [variant], dataclasses.replace(settings, keep=None))
  assert len(ran) == 1 and ran[0][1] == 'launch.py'


def test_status_says_where_each_fold_stands(tmp_path, monkeypatch, capsys):
  """--status: each fold's epochs, file, scores and whether it is done, or where it was kept;
  nothing is run."""
  lodo = _bench()
  work, keep = tmp_path / 'work', tmp_path / 'kept'
  fold, other = lodo.plan(['base'], 'long', ['gaps384', 'crackforest'], work)
  flags = ['--protocols=strict', '--stages=train,export,score', f'--keep={keep}']
  settings = _campaign(lodo, *flags)
  assert fold_stages.status(fold, [], settings) == f'0/{fold.epochs} epochs'
  fold.run.mkdir(parents=True)
  for n, seconds in ((1, 500), (2, 100)):
    record = {'train_seconds': seconds - 20, 'eval_seconds': 20}
    (fold.run / f'epoch_{n:03d}.json').write_text(json.dumps(record))
  # The epochs left at the pace of the last three recorded: two, 300 s an epoch; then four,
  # the last three 100, 60 and 60 s.
  assert fold_stages.status(fold, [], settings) == (
    f'2/{fold.epochs} epochs, ~{(fold.epochs - 2) * 5} min of training left'
  )
  for n in (3, 4):
    (fold.run / f'epoch_{n:03d}.json').write_text('{"train_seconds": 50, "eval_seconds": 10}')
  assert fold_stages.minutes_left(fold) == pytest.approx((fold.epochs - 4) * 220 / 3 / 60)
  for n in range(5, fold.epochs + 1):
    (fold.run / f'epoch_{n:03d}.json').write_text('{}')
  assert fold_stages.minutes_left(fold) is None
  assert fold_stages.status(fold, [], settings) == f'{fold.epochs}/{fold.epochs} epochs'
  (fold.run / folds_lib.MODEL_FILE).write_text('a file')
  fold.record.parent.mkdir(parents=True)
  fold.record.write_text('{}')
  monkeypatch.setattr(
    folds_lib, 'scored_protocols', lambda f: {'strict'} if f.record.exists() else set()
  )
  line = fold_stages.status(fold, [], settings)
  assert line == f'{fold.epochs}/{fold.epochs} epochs, exported, scored (strict), done'
  assert not fold_stages.status(fold, [], _campaign(lodo, '--keep=K')).endswith('done')
  # A fold scored on a machine since gone: where it was kept from.
  kept = {'scored': '30 Nov 2026 08:11 UTC', 'commit': 'abc1234', 'machine': 'M', 'scores': {}}
  kept_scores.kept_path(other, keep).parent.mkdir(parents=True)
  kept_scores.kept_path(other, keep).write_text(json.dumps(kept))
  assert fold_stages.status(other, [], settings) == (
    'kept: scored 30 Nov 2026 08:11 UTC at abc1234 on M'
  )
  argv = ['--status', '--recipes=base', '--budget=long', '--held_out=gaps384,crackforest']
  assert lodo.main([*argv, f'--work={work}', *flags]) == 0
  assert capsys.readouterr().out.splitlines() == [
    f'base:gaps384      {fold.epochs}/{fold.epochs} epochs, exported, scored (strict), done',
    'base:crackforest  kept: scored 30 Nov 2026 08:11 UTC at abc1234 on M',
    '2 of 2 folds done or kept.',
  ]
  assert not (work / 'base_long' / 'crackforest').exists()  # nothing ran


def test_a_failing_stage_ends_the_command_in_a_line_naming_it(tmp_path, monkeypatch):
  lodo = _bench()

  def fail(cmd, cwd):
    raise subprocess.CalledProcessError(1, cmd)

  monkeypatch.setattr(fold_stages, 'run_command', fail)
  monkeypatch.setattr(fold_stages, 'stop_children_on_sigterm', lambda: None)  # pytest's own
  argv = ['--budget=long', '--held_out=gaps384', f'--work={tmp_path}', '--public=PUB']
  with pytest.raises(SystemExit) as stopped:
    lodo.main(argv)
  assert str(stopped.value) == (
    'bench/lodo.py: `launch.py --config=configs/lodo.py:gaps384,base,long ...` exited 1 (its '
    'lines above say why); what is done is kept: the same command resumes from there.'
  )


def test_a_slurm_task_runs_its_fold_with_the_commands_own_flags(tmp_path, monkeypatch):
  """--executor=slurm: each task is `bench/lodo.py --job=RECIPE:HELD_OUT` with the command's
  flags but the executor, the SLURM settings and the table; a fold is done when every record
  asked for is there (or kept)."""
  lodo = _bench()
  argv = [
    '--recipes=base,jpeg',
    '--budget=long',
    '--held_out=gaps384,crackforest',
    f'--work={tmp_path / "w"}',
    '--public=PUB',
    '--keep=K',
    '--test_time=2',
    '--protocols=strict',
    '--stages=train,export,score',
    '--accept_cut',
    '--executor=slurm',
    '--slurm_time=30',
    '--slurm_option=qos=high',
    f'--out={tmp_path / "t"}',
  ]
  args = lodo.parse_args(argv)
  again = lodo.parse_args(lodo.worker_argv(args))
  differ = {k for k in vars(args) if getattr(again, k) != getattr(args, k)}
  assert differ == {'executor', 'slurm_time', 'slurm_option', 'out'}
  settings = lodo.slurm_settings(args)
  assert settings.time_min == 30 and settings.options == ('qos=high',)
  assert settings.parameters()['additional_parameters'] == {'qos': 'high'}
  folds = lodo.plan(args.recipes, args.budget, args.held_out, Path(args.work))
  assert [f.id for f in folds] == [
    'base:gaps384',
    'base:crackforest',
    'jpeg:gaps384',
    'jpeg:crackforest',
  ]
  assert folds[0].directory('anything') == folds[0].run
  assert lodo.parse_args([*argv, '--job=jpeg:crackforest']).job == 'jpeg:crackforest'
  with pytest.raises(SystemExit):
    lodo.parse_args([*argv, '--job=jpeg:deepcrack'])  # not a fold of the command
  # Done: its held-out record under the protocols asked, and the variant's (scale 2).
  fold = folds[0]
  variants = folds_lib.variant_folds(args.variants, folds)
  assert not fold_stages.fold_done(fold, variants, lodo.campaign(args))
  for f in (fold, variants[0]):
    f.record.parent.mkdir(parents=True)
    f.record.write_text('{}')
  monkeypatch.setattr(
    folds_lib, 'scored_protocols', lambda f: {'strict'} if f.record.exists() else set()
  )
  assert fold_stages.fold_done(fold, variants, lodo.campaign(args))
  args.protocols = 'strict,tolerance_thin_gt'
  assert not fold_stages.fold_done(fold, variants, lodo.campaign(args))  # one more protocol
  args.protocols, args.stages = 'strict', args.stages | {'fp'}
  assert not fold_stages.fold_done(fold, variants, lodo.campaign(args))  # fp not counted yet


def test_sigterm_is_passed_on_to_the_command_under_way(tmp_path):
  """A SIGTERM (kill, a SLURM time limit through its task) reaches the training it runs, which
  saves and exits 143; bench/lodo.py then exits 143 too, leaving no orphan holding the fold's
  folder. In a SLURM task USR2 (sent to every process of the job) is ignored by both: the
  task's SIGTERM is what stops them."""
  import signal
  import time

  from crackjax.paper import slurm

  child = (
    'import os, signal, sys, time; from pathlib import Path; '
    'signal.signal(signal.SIGTERM, lambda *a: (Path(sys.argv[1]).write_text("saved"), '
    'sys.exit(143))); print("ready", os.getpid(), flush=True); time.sleep(60)'
  )
  parent = (
    'import sys; from pathlib import Path; from crackjax.lodo import fold_stages; '
    'fold_stages.stop_children_on_sigterm(); '
    'from crackjax.paper import slurm; slurm.leave_preemption_to_the_task(); '
    f'fold_stages.run_command([sys.executable, "-c", {child!r}, {str(tmp_path / "saved")!r}], '
    'Path("."))'
  )
  proc = subprocess.Popen(
    [sys.executable, '-c', parent],
    cwd=REPO,
    stdout=subprocess.PIPE,
    text=True,
    env={**os.environ, slurm.TASK_ENV: '123_0'},
  )
  line = ''
  while not line.startswith('ready'):
    line = proc.stdout.readline().strip()
    assert proc.poll() is None, line
  child_pid = int(line.split()[1])
  for pid in (proc.pid, child_pid):
    os.kill(pid, signal.SIGUSR2)
  time.sleep(0.5)
  assert proc.poll() is None  # USR2 ignored by both
  proc.send_signal(signal.SIGTERM)
  assert proc.wait(timeout=60) == 143
  assert (tmp_path / 'saved').read_text() == 'saved'


def test_a_sigterm_between_commands_in_a_gc_callback_stops_before_the_next_command():
  """Between two stages a SIGTERM ends bench/lodo.py at once; one that lands in a garbage
  collection callback (JAX's: bench/lodo.py imports jax), where an exit would be printed and
  dropped, ends it before the next command starts."""
  parent = signal_in_a_gc_callback(
    'SIGTERM',
    """
  import sys
  from pathlib import Path
  from crackjax.lodo import fold_stages

  fold_stages.stop_children_on_sigterm()
  collect()
  print('after the collection', flush=True)
  fold_stages.run_command([sys.executable, '-c', 'print("next command")'], Path('.'))
""",
  )
  proc = subprocess.run(
    [sys.executable, '-c', parent], cwd=REPO, capture_output=True, text=True, timeout=60
  )
  assert proc.returncode == 143, proc.stderr
  assert proc.stdout.splitlines() == ['after the collection']  # the next command never started
  assert 'Exception ignored' not in proc.stderr and 'Traceback' not in proc.stderr


@pytest.mark.slow
def test_lodo_end_to_end_on_fake_copies(tmp_path):
  root = tmp_path / 'sources'
  crackforest = fixtures.make_fake_crackforest(root / 'crackforest', n_labelled=10, n_unlabelled=0)
  for name in fixtures.public_set_folders():
    fixtures.make_fake_public_set(root, name, counts={'train': 6, 'valid': 2, 'test': 3})
  work, out = tmp_path / 'lodo', tmp_path / 'table'
  cmd = [
    sys.executable,
    'bench/lodo.py',
    '--budget=smoke',
    '--held_out=aiglern_trimm,crackforest,gaps384',
    f'--work={work}',
    f'--crackforest={crackforest}',
    f'--public={root / "Datasets"}',
    f'--data_dir={tmp_path / "tfds"}',
    '--workers=1',
    '--test_time=2',
    f'--out={out}',
  ]
  done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  record = json.loads(out.with_suffix('.json').read_text())
  folds = record['folds']['base (smoke)']
  for held_out in ('aiglern_trimm', 'crackforest', 'gaps384'):
    run = work / 'base_smoke' / held_out
    config = json.loads((run / 'config.json').read_text())
    assert held_out not in config['data']['mix'] and len(config['data']['mix']) == 4
    scored = json.loads((run / 'heldout' / f'{held_out}_test' / 'eval.json').read_text())
    assert scored['dataset'] == held_out and scored['split'] == 'test'
    assert (
      scored['num_images'] == (46 if held_out == 'crackforest' else 3) or scored['num_images'] > 0
    )
    assert set(folds[held_out]) >= {'strict', 'tolerance_thin_gt', 'selected', 'datasets_alike'}
    # Every set alike: the threshold of the exported epoch's record, the held-out F1 there.
    step = folds[held_out]['selected']['step']
    (epoch,) = [r for r in map(result.read_record, run.glob('epoch_*.json')) if r.step == step]
    alike = folds[held_out]['datasets_alike']
    assert alike['threshold'] == threshold_choice.mean_over_datasets(epoch, 'strict')[0]
    curve = folds[held_out]['curve']
    assert alike['f1'] == curve['f1'][curve['thresholds'].index(alike['threshold'])]
    # False positives far from the held-out set's labelled cracks, at the file's threshold.
    fp = json.loads((run / 'heldout' / f'{held_out}_test' / 'false_positives.json').read_text())
    assert fp['photos'] > 0 and fp['length_per_mp'] == folds[held_out]['false_positives']
    assert fp['threshold'] == folds[held_out]['strict']['threshold']
    # Each photo its own threshold, on the same photos (all of these tiny test splits): at
    # weight 1 the stored threshold, i.e. about the held-out score's strict F1 at it (the
    # Predictor pads a photo as prediction does, the scoring as evaluation does).
    photo = json.loads((run / 'heldout' / f'{held_out}_test' / 'photo_thresholds.json').read_text())
    assert photo['photos'] == scored['num_images'] and photo['weights'][-1] == 1.0
    assert photo['threshold'] == folds[held_out]['strict']['threshold']
    assert 100 * photo['f1'][-1] == pytest.approx(folds[held_out]['strict']['stored'], abs=3)
    assert set(folds[held_out]['photo']) == {'weights', 'f1'}
  assert 'new_road_thresholds' in record and record['new_road_thresholds']['base (smoke)']
  # The test-time row: the same files scored at scale 2 (strict alone), in the same table.
  at_2 = record['folds']['base (smoke) at scales 2']
  for held_out in ('aiglern_trimm', 'crackforest', 'gaps384'):
    scored = json.loads(
      (work / 'base_smoke' / held_out / 'heldout_2' / f'{held_out}_test' / 'eval.json').read_text()
    )
    assert scored['protocols'] == ['strict'] and 'strict' in at_2[held_out]
    # Its false positives and photo thresholds at scale 2 too, at the same stored threshold.
    assert at_2[held_out]['false_positives'] >= 0 and set(at_2[held_out]['photo']) == {
      'weights',
      'f1',
    }
    # (Not compared with the scoring's F1 at scale 2: on these 40 x 56 photos doubled, the
    # Predictor's reflection padding to its bucket and the scoring's edge padding to the
    # model's multiple move 4% of the pixels across the threshold, ~10 points of F1.)
    heldout_2 = work / 'base_smoke' / held_out / 'heldout_2' / f'{held_out}_test'
    for name in ('photo_thresholds.json', 'false_positives.json'):
      at_scale_2 = json.loads((heldout_2 / name).read_text())
      assert at_scale_2['scales'] == [2.0] and at_scale_2['flip'] is False
      assert at_scale_2['threshold'] == folds[held_out]['strict']['threshold']
    assert photo['scales'] == [1.0] and fp['scales'] == [1.0]
  md = out.with_suffix('.md').read_text()
  assert md.startswith('Written by `python bench/lodo.py --budget=smoke')
  assert 'folds scored ' in md.split('\n')[0] and '| base (smoke) at scales 2 |' in md
  # Resumable: a second run trains, exports and scores nothing again.
  again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0
  assert not [line for line in again.stdout.splitlines() if line.startswith('+ ')]
  # --keep: the folds kept, the work folder lost (a recycled machine): nothing runs again
  # and the table is the same, its kept folds named with where they were scored.
  keep = [*cmd, f'--keep={tmp_path / "kept"}']
  assert subprocess.run(keep, cwd=REPO, capture_output=True, timeout=300).returncode == 0
  assert len(list((tmp_path / 'kept').rglob('*.json'))) == 6  # 3 folds, plain and at scale 2
  shutil.rmtree(work)
  kept = subprocess.run(keep, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert kept.returncode == 0, kept.stderr[-3000:]
  assert not [line for line in kept.stdout.splitlines() if line.startswith('+ ')]
  assert not work.exists() or not list(work.rglob('*.json'))
  assert json.loads(out.with_suffix('.json').read_text())['rows'] == record['rows']
  assert 'kept folds, from ' in out.with_suffix('.md').read_text().split('\n')[0]


def test_photo_threshold_weight_is_chosen_on_the_other_sets():
  weights = [0.0, 0.5, 1.0]
  # F1 at weights 0, 0.5, 1 (1: the stored threshold): a and b best at 0.5, c at 0.
  by_set = {
    'a': {'photo': {'weights': weights, 'f1': [40.0, 60.0, 30.0]}},
    'b': {'photo': {'weights': weights, 'f1': [50.0, 70.0, 20.0]}},
    'c': {'photo': {'weights': weights, 'f1': [65.0, 20.0, 10.0]}},
  }
  rule = fold_tables.photo_rule(by_set)
  # a: b and c mean (57.5, 45, 15) -> 0; b: a and c (52.5, 40, 20) -> 0; c: a and b -> 0.5.
  assert {h: r['weight'] for h, r in rule['per_set'].items()} == {'a': 0.0, 'b': 0.0, 'c': 0.5}
  assert rule['mean_f1'] == pytest.approx((40 + 50 + 20) / 3)
  assert rule['mean_stored'] == pytest.approx(20.0)
  # All three: (51.7, 50, 20) -> 0.
  assert rule['one_weight'] == 0.0 and rule['one_weight_mean_f1'] == pytest.approx(155 / 3)
  assert fold_tables.photo_rule({'a': by_set['a'], 'b': by_set['b']}) is None
  text = fold_tables.photo_table({'r (short)': by_set}, ['a', 'b', 'c'])
  assert '| r (short) | 30.0 → 40.0 (w=0) | 20.0 → 50.0 (w=0) | 10.0 → 20.0 (w=0.5) |' in text


def test_peer_rows_from_peer_mtscrack_json(tmp_path):
  entry = {
    'images': 3,
    'images_in_set': 30,
    'models': {
      'MTSCrack': {'protocols': {'strict': {'f1_model': 0.5, 'ods_f1': 0.6}}},
      'roads-unet-cpu': {'protocols': {'strict': {'f1_model': 0.9, 'ods_f1': 0.9}}},
    },
  }
  first, second = tmp_path / 'a.json', tmp_path / 'b.json'
  first.write_text(json.dumps({'sets': {'gaps384:test': entry, 'DeepCrack photos': entry}}))
  later = {**entry, 'images': 30}
  second.write_text(json.dumps({'sets': {'gaps384:test': later, 'crack500:valid': entry}}))
  peer = fold_tables.peer_scores([first, second], ['gaps384', 'crack500'])
  assert peer == {'gaps384': {'strict': {'stored': 50.0, 'ods': 60.0}, 'images': '3 of 30'}}


def test_the_commands_edges_each_end_in_one_line(tmp_path, monkeypatch):
  """Issue 78 item 7: an empty --held_out (or --recipes), a --keep naming a file and a --dtype
  other than a resumed campaign's files each end the command in one line, before any fold's
  work; without --dtype a resumed campaign keeps its files' dtype."""
  import numpy as np
  from safetensors.numpy import save_file

  lodo = _bench()
  ran = []
  monkeypatch.setattr(fold_stages, 'run_stages', lambda folds, variants, c: ran.append(c))
  monkeypatch.setattr(fold_stages, 'stop_children_on_sigterm', lambda: None)  # pytest's own
  monkeypatch.setattr(kept_scores, 'collect', lambda folds, keep: ({}, {}))
  base = ['--budget=long', f'--work={tmp_path / "work"}', '--public=PUB']

  def refusal(*argv: str) -> str:
    with pytest.raises(SystemExit) as stopped:
      lodo.main([*base, *argv])
    message = str(stopped.value)
    assert message.startswith('bench/lodo.py: ') and '\n' not in message
    return message

  for status in ([], ['--status']):
    message = refusal('--held_out=', *status)
    assert message.startswith("bench/lodo.py: --held_out='' names none; give one or more of ")
    assert 'crackforest' in message
  assert "--recipes=',' names none" in refusal('--recipes=,', '--held_out=gaps384')
  # --keep naming a file: refused before the first fold trains.
  kept_file = tmp_path / 'kept.json'
  kept_file.write_text('{}')
  message = refusal('--held_out=gaps384', f'--keep={kept_file}')
  assert f'--keep={kept_file}' in message and 'is a file, not a folder' in message
  assert not ran
  # A campaign whose files are float32: --dtype=bfloat16 is refused, naming a file; without
  # --dtype it resumes as float32; --dtype=float32 as asked.
  (fold,) = lodo.plan(['base'], 'long', ['gaps384'], tmp_path / 'work')
  fold.run.mkdir(parents=True)
  save_file({'params/w': np.zeros(3, np.float32)}, str(fold.run / folds_lib.MODEL_FILE))
  message = refusal('--held_out=gaps384', '--dtype=bfloat16')
  assert message.startswith('bench/lodo.py: --dtype=bfloat16, but the campaign already exported ')
  assert str(fold.run / folds_lib.MODEL_FILE) in message and '--dtype=float32' in message
  assert not ran
  assert lodo.main([*base, '--held_out=gaps384']) == 0
  assert lodo.main([*base, '--held_out=gaps384', '--dtype=float32']) == 0
  assert [c.dtype for c in ran] == ['float32', 'float32']
  # A new campaign takes --dtype as given.
  assert lodo.main([*base, '--held_out=crackforest', '--dtype=bfloat16']) == 0
  assert ran[-1].dtype == 'bfloat16'
