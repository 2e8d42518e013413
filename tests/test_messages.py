"""One-line messages: the config flag's errors (crackjax/cli.py) and data warnings
(crackjax/runs/logs.py), in process."""

import pytest

from crackjax import cli


def _parse(*args: str):
  argv = ['prog', *args]
  return cli.parse_flags(cli.new_flag_values(argv), argv, prog='prog')


def test_overrides_without_config_name_the_missing_config():
  with pytest.raises(SystemExit) as e:
    _parse('--config.learning_rate=0.1')
  assert str(e.value) == (
    'prog: --config.learning_rate overrides a config field, but no --config was given; pass '
    '--config=configs/<name>.py[:arg] first.'
  )


def test_an_unknown_flag_is_still_named_as_one():
  with pytest.raises(SystemExit) as e:
    _parse('--config=configs/smoke.py', '--bogus=1')
  assert "Unknown command line flag 'bogus'" in str(e.value)
  assert 'Traceback' not in str(e.value)


def test_a_config_and_its_overrides_parse():
  flag_values = cli.new_flag_values(
    ['prog', '--config=configs/smoke.py', '--config.learning_rate=0.1']
  )
  cli.parse_flags(
    flag_values, ['prog', '--config=configs/smoke.py', '--config.learning_rate=0.1'], prog='prog'
  )
  assert flag_values.config.learning_rate == 0.1


def test_a_data_warning_is_one_line_without_the_source_line(monkeypatch):
  import warnings

  from crackjax.runs import logs
  from crackjax.tfds_builders.errors import CrackDataWarning

  monkeypatch.setattr(warnings, 'formatwarning', warnings.formatwarning)  # restored after
  logs.quiet_third_party_logs()
  text = warnings.formatwarning('1 mask(s) are not binary: m.jpg', CrackDataWarning, 'x.py', 7)
  assert text == 'CrackDataWarning: 1 mask(s) are not binary: m.jpg\n'
  other = warnings.formatwarning('deprecated', DeprecationWarning, 'x.py', 7, line='f()')
  assert 'x.py:7' in other  # every other warning as Python shows it
