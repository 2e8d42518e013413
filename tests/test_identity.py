"""A run's identity: config fingerprint, workdir lock, atomic and checked records."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crackjax.configs import smoke
from crackjax.experiment import specs
from crackjax.runs import identity

REPO = Path(__file__).resolve().parents[1]


def fingerprint(config) -> dict:
  """The fingerprint of `config` as the run records it (config.json's JSON)."""
  return identity.fingerprint(specs.recorded(config))


def _started(workdir: Path) -> None:
  (workdir / 'checkpoints' / '3').mkdir(parents=True)


def test_fingerprint_keeps_the_computation_not_paths_epochs_or_evaluation():
  config = smoke.get_config()
  fp = fingerprint(config)
  assert fp['learning_rate'] == config.learning_rate
  assert fp['model.widths'] == list(config.model.widths)
  assert 'loss.name' in fp and 'seed' in fp and 'augment.rotation_range' in fp
  assert not any(k.startswith('eval.') for k in fp)
  for name in ('data.data_dir', 'data.manual_dir', 'num_epochs', 'log_every_steps'):
    assert name not in fp
  moved = smoke.get_config()
  moved.data.data_dir, moved.num_epochs, moved.eval.protocols = '/elsewhere', 99, ('strict',)
  assert fingerprint(moved) == fp
  # The JSON of a config (config.json) gives the same fingerprint as the config's groups as
  # plain data; a ConfigDict itself is not fingerprinted (only its recorded JSON is).
  assert identity.fingerprint(json.loads(config.to_json_best_effort())) == fp
  assert identity.fingerprint(config.to_dict()) == fp
  with pytest.raises(TypeError, match='config.json'):
    identity.fingerprint(config)


def test_a_started_run_is_never_resumed_under_another_config(tmp_path):
  config = smoke.get_config()
  identity.check_identity(tmp_path, fingerprint(config))
  assert json.loads((tmp_path / identity.FINGERPRINT_FILE).read_text()) == fingerprint(config)
  _started(tmp_path)
  other = smoke.get_config()
  other.learning_rate = 0.01
  other.model.widths = (8, 16, 32, 64, 128)
  with pytest.raises(identity.RunMismatchError) as e:
    identity.check_identity(tmp_path, fingerprint(other))
  message = str(e.value)
  assert str(tmp_path) in message
  assert 'learning_rate: 0.0003 -> 0.01' in message
  assert 'model.widths: [4, 8, 16, 32, 64] -> [8, 16, 32, 64, 128]' in message
  # Extending it, moving its data or evaluating it otherwise is the same run.
  longer = smoke.get_config()
  longer.num_epochs, longer.data.manual_dir = 50, '/moved'
  identity.check_identity(tmp_path, fingerprint(longer))


def test_a_run_without_progress_takes_the_new_config(tmp_path):
  identity.check_identity(tmp_path, fingerprint(smoke.get_config()))
  other = smoke.get_config()
  other.learning_rate = 0.01
  identity.check_identity(tmp_path, fingerprint(other))  # nothing was computed under the first
  assert identity.recorded_fingerprint(tmp_path)['learning_rate'] == 0.01


def test_runs_from_before_fingerprints_compare_their_config_json(tmp_path):
  config = smoke.get_config()
  (tmp_path / 'config.json').write_text(config.to_json_best_effort(indent=2))
  _started(tmp_path)
  identity.check_identity(tmp_path, fingerprint(config))
  other = smoke.get_config()
  other.seed = 7
  with pytest.raises(identity.RunMismatchError, match='seed: 0 -> 7'):
    identity.check_identity(tmp_path, fingerprint(other))


def test_damaged_records_are_set_aside_and_not_counted(tmp_path, capsys):
  identity.write_json(tmp_path / 'epoch_001.json', {'epoch': 1, 'results': {}})
  (tmp_path / 'epoch_002.json').write_text('{"epoch": 2, "resu')  # truncated
  identity.write_json(tmp_path / 'epoch_003.json', {'epoch': 3})  # no results
  assert identity.evaluated_epochs(tmp_path) == [1]
  assert (tmp_path / 'epoch_002.json.damaged').exists()
  assert (tmp_path / 'epoch_003.json.damaged').exists()
  err = capsys.readouterr().err
  assert 'epoch_002.json: damaged record' in err and 'epoch_003.json' in err
  assert not list(tmp_path.glob('.*.tmp'))  # atomic writes leave no temporary file


_HOLDER = textwrap.dedent("""
    import sys, time
    from crackjax.runs import identity
    with identity.lock(sys.argv[1]):
      print('held', flush=True)
      time.sleep(120)
""")


def test_a_second_process_is_kept_out_until_the_holder_dies(tmp_path):
  holder = subprocess.Popen(
    [sys.executable, '-c', _HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO
  )
  try:
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(identity.RunLockedError, match=f'in use by pid {holder.pid} '):
      with identity.lock(tmp_path):
        pass
    os.kill(holder.pid, signal.SIGKILL)  # the kernel drops its lock
    holder.wait(timeout=30)
    with identity.lock(tmp_path):
      with identity.lock(tmp_path):  # re-entrant in one process
        assert f'pid {os.getpid()} ' in (tmp_path / identity.HOLDER_FILE).read_text()
  finally:
    holder.kill()
    holder.wait()


def test_fields_dropped_from_the_identity_later_do_not_stop_an_older_run(tmp_path):
  # A comparison run started when its fingerprint still held model_init.normalization resumes
  # under today's rule (model_init is no part of the identity: only a new run reads it).
  config = smoke.get_config()
  old = {**fingerprint(config), 'model_init.normalization': 'auto'}
  identity.write_json(tmp_path / identity.FINGERPRINT_FILE, old)
  _started(tmp_path)
  config.model_init.normalization = 'caffe'
  identity.check_identity(tmp_path, fingerprint(config))
  assert not any(k.startswith('model_init') for k in fingerprint(config))
  # A field still in the identity does stop it.
  config.seed = 3
  with pytest.raises(identity.RunMismatchError, match='seed: 0 -> 3'):
    identity.check_identity(tmp_path, fingerprint(config))


def test_the_lock_names_whole_arguments(tmp_path, monkeypatch):
  # The holder's command in the lock message: whole arguments, never a path cut in two.
  long_path = '/data/' + 'x' * 150 + '/images'
  argv = ['/usr/bin/launch.py', '--config=configs/smoke.py', f'--workdir={long_path}', '--y=1']
  monkeypatch.setattr(sys, 'argv', argv)
  with identity.lock(tmp_path):
    held = (tmp_path / identity.HOLDER_FILE).read_text()
  assert held.rstrip().endswith('(launch.py --config=configs/smoke.py ...)')
  assert identity.short_command(argv[:2]) == 'launch.py --config=configs/smoke.py'
  assert identity.short_command(argv, limit=1000) == ' '.join(['launch.py', *argv[1:]])


def test_crackjax_imports_without_fcntl():
  # Windows has no fcntl: the locks use filelock, so crackjax (and its Predictor) still import.
  code = "import sys; sys.modules['fcntl'] = None; import crackjax; crackjax.Predictor; print('ok')"
  done = subprocess.run(
    [sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300
  )
  assert done.returncode == 0 and done.stdout.strip() == 'ok', done.stderr[-2000:]


def test_a_mixture_members_folder_is_where_its_data_is_not_what_it_is(tmp_path):
  # A LODO fold resumed with a member's folder spelt another way (relative, moved) is the
  # same run, as data.manual_dir is; its weight is part of the computation.
  from configs import lodo

  config = lodo.get_config('crackforest,base,smoke')
  config.data.mix.deepcrack.manual_dir = '../data'
  identity.check_identity(tmp_path, fingerprint(config))
  _started(tmp_path)
  config.data.mix.deepcrack.manual_dir = '/work/data'
  identity.check_identity(tmp_path, fingerprint(config))
  assert identity.is_machine_path('data.mix.deepcrack.manual_dir')
  assert not identity.is_machine_path('data.mix.deepcrack.weight')
  config.data.mix.deepcrack.weight = 7.0
  with pytest.raises(identity.RunMismatchError, match='data.mix.deepcrack.weight'):
    identity.check_identity(tmp_path, fingerprint(config))
