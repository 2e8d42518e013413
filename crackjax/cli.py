"""One way for every command to take its configuration: ``--config=configs/x.py[:arg]``
plus ``--config.field=value`` overrides (ml_collections' config_flags, `lock_config=True`,
so a mistyped field is an error), with errors worded for the command line.

launch.py, `python -m crackjax.paper.complexity`, `python -m crackjax.trainer.data_stats` and
the bench scripts all use it::

    def define_flags(fv):  # the command's own flags (absl.flags)
      flags.DEFINE_integer('repeats', 10, '...', flag_values=fv)

    fv, _ = config_flags.parse_command('python -m crackjax.paper.complexity', argv, define_flags)
    config = fv.config

(launch.py, which runs under absl.app, calls `define_config_flag(flags.FLAGS)` and passes
`parse_flags` to `app.run`.) Commands without a config (crackjax-predict, crackjax-export)
use `parse_flags` alone for the same one-line errors.

Config files are plain Python (`configs/`): their `get_config(arg)` builds a ConfigDict.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import importlib.util
import logging
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import ml_collections
from absl import flags
from ml_collections import config_flags

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


def exception_line(message: str) -> str:
  """The error of a message that holds a traceback (ml_collections puts the config file's
  into its flag error): the exception's line, without its type where that is a ValueError or
  KeyError (their text says it all); a message without one, on one line."""
  lines = [line.strip() for line in message.splitlines() if line.strip()]
  if not any(line.startswith('Traceback (most recent call last)') for line in lines):
    return ' '.join(lines)
  kind, _, detail = lines[-1].partition(': ')
  return detail if kind in ('ValueError', 'KeyError') and detail else lines[-1]


def _without_traceback(message: str) -> str:
  """A flag error without the config file's traceback: its first line and the exception at
  the end ('Unknown config argument ...')."""
  if 'Traceback (most recent call last)' not in message:
    return message
  first = next(line for line in message.splitlines() if line.strip())
  return f'{first.rstrip(":")}: {exception_line(message)}'


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


def _gives_config(argv: Sequence[str]) -> bool:
  """Whether the command line sets ``--config`` itself (``--config=...`` or ``--config ...``)."""
  return any(a == '--config' or a.startswith('--config=') for a in argv[1:])


def _config_value(argv: Sequence[str]) -> str | None:
  """The value of the last ``--config=VALUE`` (or ``--config VALUE``) in `argv`, as absl takes
  it (one or two dashes), or None."""
  value = None
  for i, arg in enumerate(argv[1:], start=1):
    match = re.match(r'^--?config(=|$)', arg)
    if match:
      value = (
        arg.split('=', 1)[1] if match.group(1) else (argv[i + 1] if i + 1 < len(argv) else None)
      )
  return value


def _close_path(path: Path) -> str | None:
  """An existing config file whose path is close to `path` (difflib, one part at a time: a
  folder among the folders beside it, the file among the .py files), or None."""
  current = Path(path.anchor) if path.is_absolute() else Path()
  parts = path.parts[1:] if path.is_absolute() else path.parts
  for i, part in enumerate(parts):
    last = i == len(parts) - 1
    candidate = current / part
    if not (candidate.is_file() if last else candidate.is_dir()):
      try:
        names = [
          e.name
          for e in current.iterdir()
          if (e.is_file() and e.suffix == '.py' if last else e.is_dir())
        ]
      except OSError:
        return None
      close = difflib.get_close_matches(part, names, n=1)
      if not close:
        return None
      candidate = current / close[0]
    current = candidate
  return str(current)


def config_file_problem(value: str) -> str | None:
  """Why the config file of ``--config=value`` (``path.py[:arg]``) cannot be loaded: it does
  not exist (with the closest existing file, if one is close) or it is a folder; None if it
  is a file. Checked before ml_collections loads it, which would report a missing file as a
  traceback when the config is first used."""
  path = value.split(':', 1)[0]
  if not path:
    return 'no config file named; expected configs/<name>.py[:arg].'
  if Path(path).is_file():
    return None
  if Path(path).is_dir():
    return f'{path} is a folder; name a config file in it, e.g. {Path(path) / "<name>.py"}.'
  close = _close_path(Path(path))
  parts = Path(path).parts
  if close is None and len(parts) > 1 and parts[0] == 'configs':
    # From another folder: the close one among the configs crackjax ships, named as typed.
    shipped = shipped_configs_dir()
    found = _close_path(shipped.joinpath(*parts[1:]))
    if found:
      close = str(Path('configs', Path(found).relative_to(shipped)))
  return f'{path} does not exist' + (f'; did you mean {close}?' if close else '.')


def shipped_configs_dir() -> Path:
  """The folder of the configs crackjax ships, `crackjax.configs`: the repository's configs/ in
  a source tree, crackjax/configs/ in site-packages for an installed wheel (found, not
  imported: crackjax's code never imports a config)."""
  spec = importlib.util.find_spec('crackjax.configs')
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError('crackjax.configs is not installed (a damaged install?)')
  return Path(next(iter(spec.submodule_search_locations)))


def shipped_config(value: str) -> str | None:
  """``--config=configs/<name>.py[:arg]`` naming no file under the current folder: the same
  value for the config crackjax ships (an absolute path), if it has that file; else None."""
  path, colon, arg = value.partition(':')
  parts = Path(path).parts
  if Path(path).is_absolute() or len(parts) < 2 or parts[0] != 'configs' or Path(path).exists():
    return None
  shipped = shipped_configs_dir().joinpath(*parts[1:])
  return f'{shipped}{colon}{arg}' if shipped.is_file() else None


def _with_config_value(argv: Sequence[str], value: str) -> list[str]:
  """`argv` with its last ``--config`` value replaced by `value`."""
  argv = list(argv)
  for i in reversed(range(1, len(argv))):
    match = re.match(r'^(--?config)(=|$)', argv[i])
    if match and match.group(2):
      argv[i] = f'{match.group(1)}={value}'
      break
    if match and i + 1 < len(argv):
      argv[i + 1] = value
      break
  return argv


def _frames(error: BaseException) -> Iterator[traceback.FrameSummary]:
  yield from traceback.extract_tb(error.__traceback__)


def config_load_error(error: BaseException, value: str) -> str | None:
  """The one line for `error` if it was raised while the config file of ``--config=value``
  was loaded (its import or its get_config), naming the exception and where in the file;
  None if it came from elsewhere (e.g. a mistyped ``--config.field``)."""
  typed = value.split(':', 1)[0]  # named as the user typed it
  path = os.path.abspath(typed)
  if isinstance(error, SyntaxError) and os.path.abspath(error.filename or '') == path:
    return (
      f'the config file does not parse: SyntaxError: {error.msg} ({typed}, line {error.lineno}).'
    )
  if isinstance(error, AttributeError) and getattr(error, 'name', None) == 'get_config':
    if not any(os.path.abspath(f.filename) == path for f in _frames(error)):
      return 'the config file defines no get_config() function.'
  inside = [f for f in _frames(error) if os.path.abspath(f.filename) == path]
  if not inside:
    return None
  where = inside[-1]  # the line of the config file nearest the error
  detail = str(error)
  return (
    f'loading the config file raised {type(error).__name__}'
    f'{": " + detail if detail else ""} ({typed}, line {where.lineno}, in {where.name}).'
  )


def _load_error_line(error: BaseException, value: str) -> str | None:
  """`config_load_error` of `error` or of an error it was raised from: ml_collections keeps
  an OSError of the config file (a model file not found by configs/finetune.py) and raises
  it, wrapped, when a --config.x override first touches the config."""
  seen: set[int] = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    line = config_load_error(error, value)
    if line:
      return line
    error = error.__cause__  # `raise ... from`, as ml_collections' _ErrorConfig raises
  return None


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
  config_value = _config_value(argv) if 'config' in flag_values else None
  shipped = shipped_config(config_value) if config_value is not None else None
  if shipped is not None:
    # configs/<name>.py from another folder than the repository's: crackjax's own copy.
    print(
      f'{prog}: no {config_value.split(":", 1)[0]} under the current folder: using the config '
      f'crackjax ships, {shipped.split(":", 1)[0]}.',
      file=sys.stderr,
      flush=True,
    )
    argv = _with_config_value(argv, shipped)
    config_value = shipped
  if config_value is not None:
    problem = config_file_problem(config_value)
    if problem:
      sys.exit(f'{prog}: --config={config_value}: {problem}')
  try:
    with _without_none_warning():
      remaining = flag_values(argv)
  except Exception as e:  # noqa: BLE001 - anything the config file raised is named, else re-raised
    line = _load_error_line(e, config_value) if config_value is not None else None
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
      line = config_load_error(cause, config_value)
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
    if overrides and 'config' in flag_values and not _gives_config(argv):
      # absl sees --config.x=... as an unknown flag when no --config defines the fields.
      sys.exit(
        f'{prog}: {overrides[0]} overrides a config field, but no --config was given; pass '
        '--config=configs/<name>.py[:arg] first.'
      )
    missing = re.search(r'Flag --(\w+) must have a value other than None', str(e))
    if missing:
      # absl's words for a required flag left out (mark_flag_as_required); for --config also
      # a config file whose get_config() returned None.
      sys.exit(_missing_flag_line(missing.group(1), _config_value(argv), prog))
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
  value = _config_value(argv)
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


def parse_command(
  prog: str,
  argv: Sequence[str] | None,
  define_flags: Callable[[flags.FlagValues], None] | None = None,
  *,
  default_config: str | None = None,
) -> tuple[flags.FlagValues, list[str]]:
  """Parses a config-taking command's arguments in one call.

  Args:
    prog: the command's name, for messages.
    argv: the arguments without the program name (None: `sys.argv[1:]`).
    define_flags: defines the command's own flags on the flag set it is given.
    default_config: the ``--config`` value when the command line has none.

  Returns:
    (flag values, the full argv parsed, program name first).
  """
  full = [prog, *(sys.argv[1:] if argv is None else argv)]
  if default_config and not any(a == '--config' or a.startswith('--config=') for a in full):
    full.insert(1, f'--config={default_config}')
  flag_values = new_flag_values(full)
  if define_flags is not None:
    define_flags(flag_values)
  parse_flags(flag_values, full, prog=prog)
  return flag_values, full


def exit_on_sigterm() -> None:
  """SIGTERM raises SystemExit once, which unwinds through `loop.train_and_evaluate` (it saves
  a checkpoint on the way out); further SIGTERMs are ignored so that they cannot interrupt
  that save (a runner killed with kill -9 sent its workers a second one, which broke the save
  inside orbax: 'cannot schedule new futures after shutdown', the newest steps lost). SIGKILL
  still ends a process that does not finish."""

  from crackjax.runs import exits

  def handler(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise exits.Terminated(f'Received signal {signum}')

  signal.signal(signal.SIGTERM, handler)


def unwritable(folder: str | Path) -> str | None:
  """Why files could not be written in `folder`, or None if they can; creates nothing. The
  folder, or for a missing one its nearest existing parent (which must be a folder), gets a
  probe file, written and removed: the operating system's own reason ('Read-only file
  system', 'Permission denied') is the answer, whatever the mount or the user.

  Commands check the folders they will write (launch.py's workdir, crackjax-predict's and
  crackjax-export's --out) with it before any work, so the message comes first and names the
  path, rather than an OSError ('[Errno 17] File exists') after minutes of work."""
  existing = Path(os.path.abspath(folder))
  while not existing.exists():
    existing = existing.parent
  if not existing.is_dir():
    return f'{existing} is a file, not a folder'
  probe = existing / f'.crackjax-write-test-{os.getpid()}'
  try:
    probe.write_bytes(b'')
    probe.unlink()
  except OSError as e:
    return f'{e.strerror or e} ({existing})'
  return None
