"""Quiet logs: third-party chatter demoted to DEBUG, a one-line header of a run's facts, and
the training's progress bar.

``launch.py`` calls `quiet_third_party_logs` once at start-up and logs `run_header` (of the
config as config.json records it). TFDS logs
every dataset load ("Load dataset info from ...", "Variant folder ... has no dataset_info.json",
"OpenCV is not installed ...") and orbax every phase of every save; these records become DEBUG
records, shown only with ``--verbosity=1`` (absl) or a DEBUG level on the ``absl`` logger.
TFDS and orbax warnings other than the known harmless ones are kept.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import tqdm
from absl import logging as absl_logging

# Warnings of TFDS that every normal run triggers; demoted like its INFO lines.
_HARMLESS_WARNINGS = (
  'has no dataset_info.json',
  'OpenCV is not installed',
  # Every construction of a crack_folder builder: its configs are made from config.data.folder
  # on purpose (six lines per data preparation).
  'Using custom data configuration',
  # orbax, when a checkpointer is pointed at an item folder (state.py no longer does so).
  'Metadata file does not exist',
)
# orbax's errors of a save that failed in its background threads (a full or read-only disk):
# each comes with a traceback, several per failed save, and `engine.checkpoint_saves.save` reports
# the failure itself in one line naming the step, the reason and the checkpoint kept.
_REPORTED_ERRORS = (
  '_SignalingThread.run() raised an exception',
  'Commit operations or the Commit callback in background save thread',
  'Save Finalize thread',
)
# Packages (folder names in a record's pathname) whose INFO lines are demoted.
_CHATTY_PACKAGES = ('tensorflow_datasets', 'orbax', 'jax')


def _from_package(record: logging.LogRecord) -> bool:
  parts = Path(record.pathname).parts
  return any(package in parts for package in _CHATTY_PACKAGES)


def is_noise(record: logging.LogRecord) -> bool:
  """Whether ``record`` is third-party chatter: a TFDS / orbax INFO line, a known warning, or
  an orbax error that crackjax reports itself."""
  if not _from_package(record):
    return False
  if record.levelno >= logging.ERROR:
    return any(text in record.getMessage() for text in _REPORTED_ERRORS)
  if record.levelno < logging.WARNING:
    return True
  message = record.getMessage()
  return any(text in message for text in _HARMLESS_WARNINGS)


class DemoteNoise(logging.Filter):
  """A logger filter that turns `is_noise` records into DEBUG records.

  A demoted record is passed on only if its logger is enabled for DEBUG.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno <= logging.DEBUG or not is_noise(record):
      return True
    record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
    return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


# Warnings addressed to the user about their data
# (crackjax.tfds_builders.errors.CrackDataWarning): the message names the file and the fix,
# so Python's source line after it is noise.
_PLAIN_WARNINGS = ('CrackDataWarning',)


def format_warning(message, category, filename, lineno, line=None) -> str:
  """`warnings.formatwarning` that shows a data warning as one line ('CrackDataWarning:
  message'), without the file, line number and source line of the code that warned."""
  if category.__name__ in _PLAIN_WARNINGS:
    return f'{category.__name__}: {message}\n'
  return _python_format_warning(message, category, filename, lineno, line)


_python_format_warning = warnings.formatwarning


def quiet_third_party_logs() -> None:
  """Demotes TFDS' and orbax's routine INFO lines and known harmless warnings to DEBUG.

  Both log through absl, i.e. the python logger ``absl``; the filter sits on that logger, so
  every handler (absl's stderr handler, pytest's capture, a log file) sees the same. Calling
  it again adds nothing. A warning about the user's data is shown as one line
  (`format_warning`).
  """
  warnings.formatwarning = format_warning
  # jax announces at INFO, on its own logger, each accelerator backend it did not find.
  for logger in (absl_logging.get_absl_logger(), logging.getLogger('jax._src.xla_bridge')):
    if not any(isinstance(f, DemoteNoise) for f in logger.filters):
      logger.addFilter(DemoteNoise())


def _value(value: Any) -> Any:
  """`value` as the config gave it: JSON's lists as the tuples a config holds."""
  return tuple(_value(v) for v in value) if isinstance(value, list) else value


def _fields(group: Mapping[str, Any]) -> str:
  """``k=v, ...`` of a config group, without its ``name``, in name order (as a ConfigDict
  lists them)."""
  return ', '.join(f'{k}={_value(v)}' for k, v in sorted(group.items()) if k != 'name')


def run_header(config: Mapping[str, Any], workdir: Any) -> str:
  """One line with a run's key facts: data, model, loss, schedule, devices and workdir.

  Args:
    config: the config as config.json records it (plain JSON data,
      `crackjax.experiment.build.Experiment.hparams`).
    workdir: the run's workdir.

  Example: ``Run: dataset crackforest | model unet(widths=(4, 8, 16, 32, 64), conv_impl=auto,
  dtype=float32) | loss holistic(weighting=xie, beta=1.0, ...) | batch 2, 6 steps (3/epoch x 2
  epochs), lr 0.0003 | 1 cpu device(s), 1 process(es) | workdir /tmp/run``.
  """
  data = config['data']
  dataset = f'dataset {data["name"]}'
  if data.get('input_size'):
    dataset += f' (train crops HxW {data["input_size"][0]}x{data["input_size"][1]})'
  steps_per_epoch, num_epochs = config.get('steps_per_epoch'), config.get('num_epochs')
  schedule = f'batch {config.get("batch_size")}'
  if steps_per_epoch is not None and num_epochs is not None:
    schedule += (
      f', {steps_per_epoch * num_epochs} steps ({steps_per_epoch}/epoch x {num_epochs} epochs)'
    )
  if config.get('learning_rate') is not None:
    schedule += f', lr {config["learning_rate"]}'
  model, loss = config['model'], config['loss']
  parts = [
    dataset,
    f'model {model["name"]}({_fields(model)})',
    f'loss {loss["name"]}({_fields(loss)})',
    schedule,
    f'{jax.device_count()} {jax.default_backend()} device(s), {jax.process_count()} process(es)',
    f'workdir {workdir}',
  ]
  return 'Run: ' + ' | '.join(parts)


def progress_bar(start_step: int, total_steps: int) -> tqdm.tqdm:
  """The training's progress bar (process 0 only), from `start_step` of `total_steps`; it says
  'compiling' until the first step is done (`restart_after_compiling`)."""
  return tqdm.tqdm(
    total=total_steps,
    initial=start_step,
    unit='step',
    dynamic_ncols=True,
    disable=jax.process_index() != 0,
    desc='train (compiling the step)',
  )


def restart_after_compiling(bar: tqdm.tqdm, step: int) -> None:
  """Restarts the bar's clock after the first step, which compiled: its rate and time left
  count the steps from then on (the compilation made the first estimate hours long)."""
  bar.reset(total=bar.total)
  bar.initial = bar.n = bar.last_print_n = step
  bar.set_description('train')
