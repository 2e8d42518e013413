"""The training command: trains and/or evaluates a crackjax configuration.

  python launch.py --config=configs/crackforest_exp.py --workdir=workdirs/cfd_exp
  crackjax-train --config=configs/crackforest_exp.py --workdir=workdirs/cfd_exp  # the same
  python launch.py --config=configs/crackforest_exp.py:cpu --workdir=/tmp/cfd \
      --config.data.manual_dir=../shared/datasets/crackforest
  python launch.py --config=configs/crackforest_exp.py --workdir=workdirs/cfd_exp --mode=eval
  python launch.py --config=configs/crackforest_exp.py  # workdir: workdirs/crackforest_exp

It parses the flags, builds the experiment once (`crackjax.experiment.build`: every config
problem, then absent data, then images that do not fit, each one clear line) and hands it to
the training loop or the evaluation. Several hosts: start the same command on every host with
--coordinator_address, --num_processes and --process_id (or let jax.distributed.initialize()
detect a SLURM/Kubernetes/Cloud TPU environment with --distributed).
"""

import functools
import sys
from pathlib import Path

import jax
from absl import app, flags, logging

from crackjax import cli
from crackjax.data import registry as data_registry
from crackjax.engine import checkpoints, step
from crackjax.experiment.build import Experiment, check_data
from crackjax.experiment.build import build as build_experiment
from crackjax.models import pretrained
from crackjax.runs import exits, identity, logs, outputs
from crackjax.trainer import before_after, loop, scoring

FLAGS = flags.FLAGS
cli.define_config_flag(FLAGS)
flags.DEFINE_string(
  'workdir',
  None,
  'Directory for checkpoints, logs and results; default workdirs/<config name>[_<arg>] under '
  'the current folder (the same command resumes there).',
)
MODES = ('train', 'eval', 'train_and_eval')
flags.DEFINE_enum('mode', 'train_and_eval', list(MODES), 'What to run.')
flags.DEFINE_bool(
  'overwrite',
  False,
  "--mode=eval: replace the run's eval.json and threshold.json even when they hold a newer "
  'step than the checkpoint evaluated (its newest one damaged); without it that evaluation goes '
  'to <workdir>/eval/step_<N>/.',
)
flags.DEFINE_bool(
  'distributed', False, 'Call jax.distributed.initialize() (auto-detected cluster environments).'
)
flags.DEFINE_string('coordinator_address', None, 'host:port of process 0 (multi-host).')
flags.DEFINE_integer('num_processes', None, 'Number of processes (multi-host).')
flags.DEFINE_integer('process_id', None, 'Index of this process (multi-host).')
flags.mark_flags_as_required(['config'])


def run(experiment: Experiment, workdir: str | Path, mode: str, *, overwrite: bool = False) -> None:
  """Trains and/or evaluates `experiment` (`crackjax.experiment.build`) in `workdir` according
  to `mode` (one of MODES); `overwrite`: an evaluation of an older step than the run's results
  replaces them (`scoring.evaluate_checkpoint`). A fine-tuning (`before_after.start_model`) is
  scored before training too, and prints its before / after table (`before_after`)."""
  if mode not in MODES:
    raise ValueError(f'Unknown mode {mode!r}; expected one of {MODES}.')
  if mode == 'eval':
    # No checkpoint: say so before the lock would create the workdir.
    checkpoints.existing_manager(workdir, experiment.restore_spec.max_to_keep)
    with identity.leader_lock(workdir):  # it writes eval.json and threshold.json
      record = scoring.evaluate_checkpoint(experiment, workdir, overwrite=overwrite)
    before_after.report(workdir, record)  # a fine-tuning's table, with this evaluation
  elif mode == 'train':
    loop.train_and_evaluate(experiment, workdir, evaluate_after=False)
  else:
    # A fine-tuning (a run starting from a model file): the file as shipped scored on the
    # test split first, once, then the table of it and the trained run (`before_after`).
    with identity.leader_lock(workdir):
      before_after.score_start(experiment, workdir)
    loop.train_and_evaluate(experiment, workdir)
    before_after.report(workdir)


# The command's name in its messages: launch.py or crackjax-train, as the user typed it.
PROG = ['launch.py']


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # TFDS and orbax chatter (dataset info loads, every save phase, OpenCV advice) goes to
  # DEBUG before any builder is constructed; --verbosity=1 shows it again.
  logs.quiet_third_party_logs()
  if FLAGS.distributed or FLAGS.coordinator_address:
    jax.distributed.initialize(
      coordinator_address=FLAGS.coordinator_address,
      num_processes=FLAGS.num_processes,
      process_id=FLAGS.process_id,
    )
  if FLAGS.workdir is None:
    # The first line says where the run goes, so the user can find it and resume it.
    FLAGS.workdir = str(cli.default_workdir(sys.argv))
    print(
      f'{PROG[0]}: no --workdir given: the run is in {FLAGS.workdir} (the same command '
      'resumes there).',
      file=sys.stderr,
      flush=True,
    )
  exits.exit_on_sigterm()  # a checkpoint is saved on the way out
  exits.watch_interrupts()  # and on Ctrl-C, even one a library swallowed
  problem = outputs.unwritable(FLAGS.workdir)
  if problem:  # before the data is prepared or a model compiled
    sys.exit(f'{PROG[0]}: cannot write --workdir={FLAGS.workdir}: {problem}.')
  config = FLAGS.config
  with _command().ending():
    try:
      # Every config problem, then absent or invalid data, then images that do not fit the
      # config stop the run here with a message that says what to fix, before a model is
      # compiled or the workdir is written.
      experiment = build_experiment(config)
      # After the config's checks: a bad config ends in its one line, without this one.
      logging.info(
        'JAX %s, %s', jax.__version__, logs.run_header(experiment.hparams, FLAGS.workdir)
      )
      if FLAGS.mode != 'eval':
        identity.check_identity(FLAGS.workdir, experiment.fingerprint, record=False)
      experiment.splits.prepare()
      if FLAGS.mode != 'eval':
        check_data(experiment)
    except ValueError as e:
      if not isinstance(e, USER_ERRORS):
        raise exits.Stopped(_bad_config(e)) from None
      raise
    run(experiment, FLAGS.workdir, FLAGS.mode, overwrite=FLAGS.overwrite)


#: The errors a user can fix, each one line (exit status 1): absent or invalid data, another
#: config's run, a held workdir, no checkpoint or a damaged or foreign one (or one the disk
#: would not take), an unusable pretrained file, a training that diverged, a file that cannot be
#: read or written (the message names the path).
USER_ERRORS = (
  data_registry.DatasetError,
  identity.RunMismatchError,
  identity.RunLockedError,
  checkpoints.CheckpointError,
  pretrained.PretrainedError,
  step.NonFiniteError,
  OSError,
)
# Ctrl-C outside the training loop (which says what it kept): before training or in the final
# evaluation. Every checkpoint saved is complete (orbax writes a step under a temporary name).
_INTERRUPTED = (
  'interrupted (Ctrl-C); every checkpoint saved so far is kept: run the same command again '
  'to go on.'
)


def _command() -> cli.Command:
  """The command as it ends (`cli.Command.ending`): its name as typed (`PROG`), the errors a
  user can fix (`USER_ERRORS`) and Ctrl-C's line, each one line."""
  return cli.Command(PROG[0], errors=USER_ERRORS, interrupted=_INTERRUPTED)


def run_or_exit(
  experiment: Experiment, workdir: str | Path, mode: str, *, overwrite: bool = False
) -> None:
  """`run`, ending in one line and an exit status instead of a traceback for what a user can
  fix or did on purpose (`USER_ERRORS`, Ctrl-C, a full disk; `runs.exits`)."""
  with _command().ending():
    run(experiment, workdir, mode, overwrite=overwrite)


def _bad_config(error: ValueError) -> str:
  lines = str(error).splitlines()
  if len(lines) == 1:
    return f'bad config: {lines[0]}'
  return 'bad config:\n' + '\n'.join(f'  - {line}' for line in lines)


def main(prog: str = 'crackjax-train') -> None:
  """The command (`python launch.py` and the `crackjax-train` console script)."""
  PROG[0] = prog
  app.run(_main, flags_parser=functools.partial(cli.parse_flags, FLAGS, prog=prog))
