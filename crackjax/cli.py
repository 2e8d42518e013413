"""The command scaffold: how every command takes its flags and its config, and how it ends.

* `Command` (prog, usage, flags, one-line exits, Ctrl-C): a command's frame; its `run`
  parses the command line and calls the command's body.
* ``--config=configs/x.py[:arg]`` plus ``--config.field=value`` overrides (ml_collections'
  config_flags, `lock_config=True`, so a mistyped field is an error), with errors worded for
  the command line (`parse_flags`); the config file itself is found and diagnosed by
  `crackjax.runs.config_files`.
* ``--help`` lists the command's own flags (`help_text`); `unwritable` checks an output
  folder before any work; `exit_on_sigterm` turns SIGTERM into a checkpointed stop.

launch.py (``crackjax-train``), which runs under absl.app, calls `define_config_flag(flags.FLAGS)`
and passes `parse_flags` to `app.run`; the bench scripts call `parse_command`. Config files
are plain Python (`configs/`): their `get_config(arg)` builds a ConfigDict.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import logging
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import ml_collections
from absl import flags
from ml_collections import config_flags

from crackjax.runs import config_files, exits

T = TypeVar('T')

#: The line after a flag error's message: a hint, not the error (the runner's failure line,
#: taken from a worker's log, skips it).
HELP_HINT = 'Pass --help for the list of flags.'


def define_config_flag(
  flag_values: flags.FlagValues = flags.FLAGS,
  *,
  argv: Sequence[str] | None = None,
  default: str | None = None,
) -> None:
  """Defines ``--config`` (a config file, ``path.py[:arg]``) and its ``--config.*`` overrides.

  Args:
    flag_values: the flag set to define it in.
    argv: the command line that will be parsed (default `sys.argv`): ml_collections reads
      the ``--config.*`` overrides from it.
    default: default config file.
  """
  config_flags.DEFINE_config_file(
    'config',
    default,
    'Config file, configs/<name>.py[:arg]; override any field with '
    '--config.<field>=<value> (configs/base.py documents every field).',
    flag_values=flag_values,
    lock_config=True,
    sys_argv=None if argv is None else list(argv),
  )


def _unquote(detail: str) -> str:
  for _ in range(2):  # ml_collections nests repr()s of the key
    try:
      detail = str(ast.literal_eval(detail))
    except (ValueError, SyntaxError):
      break
  return detail


def _without_traceback(message: str) -> str:
  """A flag error without the config file's traceback: its first line and the exception at
  the end ('Unknown config argument ...')."""
  if 'Traceback (most recent call last)' not in message:
    return message
  first = next(line for line in message.splitlines() if line.strip())
  return f'{first.rstrip(":")}: {config_files.exception_line(message)}'


# Modules whose absl flags a command inherits by importing them (absl's logging, grain, orbax,
# array_record, TFDS): not the command's own, so --help leaves them out.
_LIBRARY_FLAG_MODULES = ('absl.', 'grain.', 'orbax.', 'array_record.', 'tensorflow_datasets.')


def usage_line(flag_values: flags.FlagValues, prog: str) -> str:
  """The default usage line: a config-taking command's, or ``prog [flags]``."""
  if 'config' in flag_values:
    return f'{prog} --config=configs/<name>.py[:arg] [--config.<field>=<value> ...] [flags]'
  return f'{prog} [flags]'


def help_text(flag_values: flags.FlagValues, prog: str, usage: str | None = None) -> str:
  """What ``--help`` prints: the usage line, then every flag the command defined, with its
  help and default (absl's own logging flags are left out; ``--helpfull`` lists them)."""
  lines = [f'usage: {usage or usage_line(flag_values, prog)}', '']
  own = {
    flag.name: flag
    for module, module_flags in flag_values.flags_by_module_dict().items()
    if not module.startswith(_LIBRARY_FLAG_MODULES)
    for flag in module_flags
  }
  for name in sorted(own, key=lambda n: (n != 'config', n)):
    flag = own[name]
    default = flag.default
    if isinstance(default, list | tuple):
      default = ','.join(map(str, default))
    shown = '' if default in (None, '') else f' (default: {default})'
    lines.append(f'  --{name}: {flag.help}{shown}')
  return '\n'.join(lines)


class _DropNoneWarning(logging.Filter):
  """ml_collections warns on its own line when get_config() returns None; the one-line
  error says it instead."""

  def filter(self, record: logging.LogRecord) -> bool:
    return 'get_config() returned None' not in record.getMessage()


@contextlib.contextmanager
def _without_none_warning() -> Iterator[None]:
  logger, drop = logging.getLogger('absl'), _DropNoneWarning()
  logger.addFilter(drop)
  try:
    yield
  finally:
    logger.removeFilter(drop)


def parse_flags(
  flag_values: flags.FlagValues, argv: Sequence[str], *, prog: str, usage: str | None = None
) -> list[str]:
  """Parses ``argv`` (argv[0] is the program) into `flag_values`; exits with a one-line
  message, not a traceback, on an unknown or mistyped flag, a mistyped config field, an
  unparsable value, a missing ``--config``, a config file that does not exist (naming a close
  one, `config_file_problem`) and one that raises while it loads (`config_load_error`).
  ``--help`` (``-h``) prints `usage` (default `usage_line`) and the command's flags
  (`help_text`) and exits 0.

  Returns:
    The arguments that are not flags (argv[0] first).
  """
  argv = list(argv)
  if any(a in ('--help', '-h', '--helpshort') for a in argv[1:]):
    print(help_text(flag_values, prog, usage))
    sys.exit(0)
  config_value = config_files.config_value(argv) if 'config' in flag_values else None
  shipped = config_files.shipped_config(config_value) if config_value is not None else None
  if shipped is not None:
    # configs/<name>.py from another folder than the repository's: crackjax's own copy.
    print(
      f'{prog}: no {config_value.split(":", 1)[0]} under the current folder: using the config '
      f'crackjax ships, {shipped.split(":", 1)[0]}.',
      file=sys.stderr,
      flush=True,
    )
    argv = config_files.with_config_value(argv, shipped)
    config_value = shipped
  if config_value is not None:
    problem = config_files.config_file_problem(config_value)
    if problem:
      sys.exit(f'{prog}: --config={config_value}: {problem}')
  try:
    with _without_none_warning():
      remaining = flag_values(argv)
  except Exception as e:  # noqa: BLE001 - anything the config file raised is named, else re-raised
    line = config_files.load_error_line(e, config_value) if config_value is not None else None
    if line:
      sys.exit(f'{prog}: --config={config_value}: {line}')
    kind = _returned_kind(config_value, prog) if config_value is not None else None
    if kind:  # an override of a field of a dict (or list ...): the file is the problem
      sys.exit(f'{prog}: --config={config_value}: {_NOT_A_CONFIG_DICT.format(kind=kind)}')
    _exit_on_flag_error(e, flag_values, argv, prog)
    raise
  if config_value is not None:
    try:
      getattr(flag_values['config'].value, 'keys', None)
    except OSError as e:
      # ml_collections keeps an OSError of the config file (e.g. a file that get_config
      # opens) until the config is first used; say it now.
      cause = e.__cause__ or e
      line = config_files.config_load_error(cause, config_value)
      sys.exit(f'{prog}: --config={config_value}: {line or f"{type(cause).__name__}: {cause}"}')
  if 'config' in flag_values and flag_values['config'].value is None:
    if config_value is not None:
      sys.exit(f'{prog}: --config={config_value}: {_RETURNED_NONE}')
    sys.exit(f'{prog}: --config=configs/<name>.py[:arg] is required.')
  if config_value is not None and not _is_config_dict(flag_values['config'].value):
    kind = type(flag_values['config'].value).__name__
    sys.exit(f'{prog}: --config={config_value}: {_NOT_A_CONFIG_DICT.format(kind=kind)}')
  return remaining


def _is_config_dict(value: object) -> bool:
  return isinstance(value, ml_collections.ConfigDict | ml_collections.FrozenConfigDict)


def _returned_kind(config_value: str, prog: str) -> str | None:
  """The type's name of what the config file's get_config() returns when that is not a
  ConfigDict (loaded again without the command line's overrides, which failed on it), else
  None."""
  argv = [prog, f'--config={config_value}']
  try:
    with _without_none_warning():
      flag_values = new_flag_values(argv)
      flag_values(argv)
      value = flag_values['config'].value
  except Exception:  # noqa: BLE001 - the file fails on its own: the caller says how
    return None
  return None if value is None or _is_config_dict(value) else type(value).__name__


_NOT_A_CONFIG_DICT = (
  "the config file's get_config() returned a {kind}, not an ml_collections.ConfigDict; return "
  'ml_collections.ConfigDict(...) (or start from configs/base.py, as configs/crackforest_exp.py '
  'does).'
)


_RETURNED_NONE = "the config file's get_config() returned None (a missing return?)."


def _exit_on_flag_error(
  e: Exception, flag_values: flags.FlagValues, argv: Sequence[str], prog: str
) -> None:
  """Exits with the one line for a flag error `e` of `parse_flags`; returns for any other."""
  if isinstance(e, AttributeError | KeyError):
    # A mistyped --config.field surfaces from ml_collections as a bare AttributeError or
    # KeyError; say what went wrong instead.
    # ml_collections gives "'widhts'" and, for a near miss, a second line 'Did you mean
    # "widths" instead of "widhts"?'.
    first, *hint = _unquote(str(e.args[0] if e.args else e)).splitlines()
    detail = _unquote(first)
    # The error names only the last part ('widht'); the command line has the whole path.
    typed = [
      a.split('=', 1)[0].removeprefix('--config.')
      for a in argv[1:]
      if a.startswith('--config.') and detail in a.split('=', 1)[0].split('.')
    ]
    hint_text = f' ({" ".join(h.strip() for h in hint if h.strip())})' if any(hint) else ''
    sys.exit(
      f'{prog}: unknown config field {typed[0] if typed else detail} on the command line'
      f'{hint_text}; configs/base.py lists every field.'
    )
  if isinstance(e, flags.Error):
    overrides = [a.split('=', 1)[0] for a in argv[1:] if a.startswith('--config.')]
    if overrides and 'config' in flag_values and not config_files.gives_config(argv):
      # absl sees --config.x=... as an unknown flag when no --config defines the fields.
      sys.exit(
        f'{prog}: {overrides[0]} overrides a config field, but no --config was given; pass '
        '--config=configs/<name>.py[:arg] first.'
      )
    missing = re.search(r'Flag --(\w+) must have a value other than None', str(e))
    if missing:
      # absl's words for a required flag left out (mark_flag_as_required); for --config also
      # a config file whose get_config() returned None.
      sys.exit(_missing_flag_line(missing.group(1), config_files.config_value(argv), prog))
    sys.exit(f'{prog}: {_without_traceback(str(e))}\n{HELP_HINT}')


def _missing_flag_line(name: str, config_value: str | None, prog: str) -> str:
  """The line for a required flag `name` that has no value."""
  if name != 'config':
    return f'{prog}: --{name} is required.\n{HELP_HINT}'
  if config_value is not None:
    return f'{prog}: --config={config_value}: {_RETURNED_NONE}'
  return f'{prog}: --config=configs/<name>.py[:arg] is required.'


def default_workdir(argv: Sequence[str], root: str | Path = 'workdirs') -> Path | None:
  """The workdir of a command line that names none: ``workdirs/<config name>[_<arg>]`` under
  the current folder (``--config=configs/crack360_exp.py:cpu`` -> ``workdirs/crack360_exp_cpu``),
  so the same command resumes the same run; None without ``--config``."""
  value = config_files.config_value(argv)
  if not value:
    return None
  path, _, arg = value.partition(':')
  name = Path(path).stem + (f'_{arg}' if arg else '')
  return Path(root) / re.sub(r'[^A-Za-z0-9._-]+', '_', name)


def new_flag_values(argv: Sequence[str]) -> flags.FlagValues:
  """A fresh flag set with ``--config`` defined, for commands that do not use absl.app.

  Args:
    argv: the command line to be parsed (argv[0] is the program).
  """
  flag_values = flags.FlagValues()
  define_config_flag(flag_values, argv=argv)
  return flag_values


@dataclasses.dataclass(frozen=True)
class Command:
  """One command's frame: its name, usage and flags, and how it ends.

  Every flag-taking command but ``crackjax-train`` (absl.app's, `define_config_flag` and
  `parse_flags`) runs its body through `run`::

      COMMAND = cli.Command('crackjax-predict', _define_flags, usage=USAGE,
                            interrupted=_INTERRUPTED, interruptible=True, quiet_logs=True)

      def main(argv=None):
        return COMMAND.run(_main, argv)

      def _main(fv, inputs):  # the flag values, the arguments that are not flags
        ...

  Attributes:
    prog: the command's name, the first word of every message.
    define_flags: defines the command's own flags on the flag set it is given.
    usage: the usage line of ``--help`` (default `usage_line`).
    takes_config: whether it takes ``--config`` and its ``--config.<field>`` overrides.
    default_config: the ``--config`` value when the command line gives none.
    interrupted: the line for a Ctrl-C: what was kept, how to go on (None: the general one
      of `runs.exits.one_line_exits`).
    errors: exception types whose message is the one line to print (exit status 1).
    interruptible: Ctrl-C raises even where the parent process ignores it
      (`runs.exits.interruptible`).
    watch_interrupts: a Ctrl-C is also remembered where a library swallows it
      (`runs.exits.watch_interrupts`): commands that train.
    quiet_logs: TFDS' and orbax's routine messages go to DEBUG
      (`runs.logs.quiet_third_party_logs`).
  """

  prog: str
  define_flags: Callable[[flags.FlagValues], None] | None = None
  usage: str | None = None
  takes_config: bool = False
  default_config: str | None = None
  interrupted: str | None = None
  errors: tuple[type[BaseException], ...] = ()
  interruptible: bool = False
  watch_interrupts: bool = False
  quiet_logs: bool = False

  def run(
    self, body: Callable[[flags.FlagValues, list[str]], T], argv: Sequence[str] | None = None
  ) -> T:
    """Parses `argv` and returns ``body(flag values, arguments that are not flags)``; a flag
    or config problem, Ctrl-C, a full disk or one of `errors` ends the command in one line.

    Args:
      body: the command's work.
      argv: the arguments without the program name (None: ``sys.argv[1:]``).
    """
    if self.watch_interrupts:
      exits.watch_interrupts()
    with self.ending():
      if self.quiet_logs:
        # Imported here: runs.logs imports jax, which the paper runner's scheduling process
        # must not import before it sets JAX_PLATFORMS.
        from crackjax.runs import logs

        logs.quiet_third_party_logs()
      flag_values, arguments = self.parse(argv)
      return body(flag_values, arguments)

  @classmethod
  def restoring(
    cls,
    prog: str,
    define_flags: Callable[[flags.FlagValues], None],
    *,
    usage: str | None = None,
    interrupted: str | None = None,
    errors: tuple[type[BaseException], ...] = (),
  ) -> Command:
    """A command that restores a run or a model file (crackjax-predict, crackjax-export;
    crackjax-evaluate's settings too): `interruptible`, and `quiet_logs`, since orbax's routine
    restore warnings are not the user's business. The arguments are the fields'."""
    return cls(
      prog,
      define_flags,
      usage=usage,
      interrupted=interrupted,
      errors=errors,
      interruptible=True,
      quiet_logs=True,
    )

  @contextlib.contextmanager
  def ending(self) -> Iterator[None]:
    """How the command ends on what is not a bug: in one line (`runs.exits.one_line_exits`:
    `interrupted` for Ctrl-C and SIGTERM, `exits.terminable`; a full disk, one of `errors`),
    Ctrl-C raised even under a parent that ignores it when `interruptible`. `run` runs the
    body in it; crackjax-train, which absl.app parses, enters it itself."""
    ending = {'errors': self.errors}
    if self.interrupted is not None:
      ending['interrupted'] = self.interrupted
    with contextlib.ExitStack() as stack:
      if self.interruptible:
        stack.enter_context(exits.interruptible())
      stack.enter_context(exits.one_line_exits(self.prog, **ending))
      stack.enter_context(exits.terminable())  # SIGTERM: the same one line, status 143
      yield

  def parse(self, argv: Sequence[str] | None = None) -> tuple[flags.FlagValues, list[str]]:
    """The flag values of `argv` (without the program name; None: ``sys.argv[1:]``) and the
    arguments that are not flags; ``--help`` and a flag or config problem exit
    (`parse_flags`)."""
    full = self.command_line(argv)
    flag_values = new_flag_values(full) if self.takes_config else flags.FlagValues()
    if self.define_flags is not None:
      self.define_flags(flag_values)
    return flag_values, parse_flags(flag_values, full, prog=self.prog, usage=self.usage)[1:]

  def command_line(self, argv: Sequence[str] | None = None) -> list[str]:
    """`argv` (None: ``sys.argv[1:]``) after the program's name, with ``--config`` set to
    `default_config` when it gives none."""
    full = [self.prog, *(sys.argv[1:] if argv is None else argv)]
    if self.default_config and not config_files.gives_config(full):
      full.insert(1, f'--config={self.default_config}')
    return full


def parse_command(
  prog: str,
  argv: Sequence[str] | None,
  define_flags: Callable[[flags.FlagValues], None] | None = None,
  *,
  default_config: str | None = None,
) -> tuple[flags.FlagValues, list[str]]:
  """Parses a config-taking script's arguments in one call (the bench scripts; a command
  runs through `Command`).

  Args:
    prog: the command's name, for messages.
    argv: the arguments without the program name (None: `sys.argv[1:]`).
    define_flags: defines the command's own flags on the flag set it is given.
    default_config: the ``--config`` value when the command line has none.

  Returns:
    (flag values, the full argv parsed, program name first).
  """
  command = Command(prog, define_flags, takes_config=True, default_config=default_config)
  flag_values, _ = command.parse(argv)
  return flag_values, command.command_line(argv)


def define_model_flags(flag_values: flags.FlagValues, *, model_note: str = '') -> None:
  """The flags that name the model a command reads: ``--workdir`` (a training run), ``--model``
  (instead: a released model, a model file or its URL; `model_note` adds what the command
  asks of it), ``--allow_plugins`` and ``--step`` (at least 1), for crackjax-predict,
  crackjax-evaluate and crackjax-export alike (`refuse_two_models` checks them)."""
  flags.DEFINE_string(
    'workdir',
    None,
    'the training run (the --workdir of launch.py: config.json + checkpoints/)',
    flag_values=flag_values,
  )
  flags.DEFINE_string(
    'model',
    None,
    f'instead of --workdir: a released model (crackjax-models), a model file or its URL'
    f'{model_note}',
    flag_values=flag_values,
  )
  flags.DEFINE_list(
    'allow_plugins',
    [],
    'with --model: plugin modules the model file names that may be imported (a file never '
    'imports code on its own word; only for a file you trust; released models need none)',
    flag_values=flag_values,
  )
  flags.DEFINE_integer(
    'step', None, 'checkpoint step of --workdir (default: the latest)', flag_values=flag_values
  )
  flags.register_validator(
    'step', lambda v: v is None or v >= 1, message='--step must be >= 1', flag_values=flag_values
  )


def define_photo_threshold_flag(flag_values: flags.FlagValues, *, note: str) -> None:
  """``--photo_threshold=W`` of crackjax-predict and -evaluate, `note` added."""
  flags.DEFINE_float(
    'photo_threshold',
    None,
    "each photo at its own threshold, chosen without labels: W x the model's threshold + "
    f"(1 - W) x the Otsu threshold of its map, W in [0, 1] (default: the file's "
    f'eval.photo_threshold, none for most){note}',
    flag_values=flag_values,
  )
  flags.register_validator(
    'photo_threshold',
    lambda v: v is None or 0 <= v <= 1,
    message='--photo_threshold must be a weight in [0, 1] (1: the threshold itself)',
    flag_values=flag_values,
  )


def refuse_two_models(flag_values: flags.FlagValues, prog: str) -> None:
  """Ends the command in one line if both ``--workdir`` and ``--model`` are given."""
  if flag_values.workdir and flag_values.model:
    sys.exit(f'{prog}: give only one of --workdir=RUN and --model=NAME|FILE|URL.')
