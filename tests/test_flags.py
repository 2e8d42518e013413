"""The config flag's one-line errors (crackjax/config/flags.py), in process."""

import pytest

from crackjax.config import flags as config_flags


def _parse(*args: str):
  argv = ['prog', *args]
  return config_flags.parse_flags(config_flags.new_flag_values(argv), argv, prog='prog')


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
  flag_values = config_flags.new_flag_values(
    ['prog', '--config=configs/smoke.py', '--config.learning_rate=0.1']
  )
  config_flags.parse_flags(
    flag_values, ['prog', '--config=configs/smoke.py', '--config.learning_rate=0.1'], prog='prog'
  )
  assert flag_values.config.learning_rate == 0.1
