"""Trains and/or evaluates a crackjax configuration.

  python launch.py --config=configs/crackforest_exp.py --workdir=workdirs/cfd_exp
  python launch.py --config=configs/crackforest_exp.py:cpu --workdir=/tmp/cfd \
      --config.manual_dir=../shared/datasets/crackforest
  python launch.py --config=configs/crackforest_exp.py --workdir=workdirs/cfd_exp --mode=eval

Several hosts: start the same command on every host with --coordinator_address,
--num_processes and --process_id (or let jax.distributed.initialize() detect a
SLURM/Kubernetes/Cloud TPU environment with --distributed).
"""

import ast
import os
import signal
import sys

# Repository root on the path so `configs/*.py` can `from configs import base`.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import logging as std_logging  # noqa: E402

import jax  # noqa: E402
from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from crackjax import input_pipeline, train  # noqa: E402

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file('config', None, 'Path to a config file (configs/*.py[:arg]).',
                                lock_config=True)
flags.DEFINE_string('workdir', None, 'Directory for checkpoints, logs and results.')
flags.DEFINE_enum('mode', 'train_and_eval', list(train.MODES), 'What to run.')
flags.DEFINE_bool('distributed', False,
                  'Call jax.distributed.initialize() (auto-detected cluster environments).')
flags.DEFINE_string('coordinator_address', None, 'host:port of process 0 (multi-host).')
flags.DEFINE_integer('num_processes', None, 'Number of processes (multi-host).')
flags.DEFINE_integer('process_id', None, 'Index of this process (multi-host).')
flags.mark_flags_as_required(['config', 'workdir'])


def _sigterm_to_exit(signum, frame):
  # SystemExit unwinds through train_and_evaluate, which saves a checkpoint on the way out.
  raise SystemExit(f'Received signal {signum}')


def _quiet_orbax(record) -> bool:
  # orbax logs every phase of every save at INFO; keep its warnings and errors only.
  return record.levelno >= std_logging.WARNING or '/orbax/' not in record.pathname


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.get_absl_handler().addFilter(_quiet_orbax)
  if FLAGS.distributed or FLAGS.coordinator_address:
    jax.distributed.initialize(coordinator_address=FLAGS.coordinator_address,
                               num_processes=FLAGS.num_processes, process_id=FLAGS.process_id)
  signal.signal(signal.SIGTERM, _sigterm_to_exit)
  logging.info('JAX %s: process %d of %d, %d local / %d global devices (%s)', jax.__version__,
               jax.process_index(), jax.process_count(), jax.local_device_count(),
               jax.device_count(), jax.default_backend())
  try:
    # Absent or invalid data stops the run here, with a message that says what to fetch or
    # fix, before a model is compiled or anything is written to the workdir.
    input_pipeline.prepare_dataset(FLAGS.config)
  except input_pipeline.DatasetError as e:
    sys.exit(f'launch.py: {e}')
  train.run(FLAGS.config, FLAGS.workdir, FLAGS.mode)


def _parse_flags(argv: list[str]) -> list[str]:
  # A mistyped --config.field surfaces from ml_collections as a bare AttributeError/KeyError
  # traceback; say what went wrong instead.
  try:
    return FLAGS(argv)
  except (AttributeError, KeyError) as e:
    detail = str(e.args[0] if e.args else e)
    for _ in range(2):  # ml_collections nests repr()s of the key
      try:
        detail = str(ast.literal_eval(detail))
      except (ValueError, SyntaxError):
        break
    sys.exit(f'launch.py: unknown config field {detail} on the command line; '
             'configs/base.py lists every field.')
  except flags.Error as e:
    sys.exit(f'launch.py: {e}\nPass --helpfull for the list of flags.')


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)
