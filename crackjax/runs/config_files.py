"""A ``--config=path.py[:arg]`` value's file, for the command line (`crackjax.cli`): the value
found on a command line, the shipped copy of ``configs/<name>.py`` when the current folder has
none, why a file cannot be loaded (missing, with the closest name; a folder), and the one line
for an error raised while it loaded. Nothing here imports a config or ml_collections.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path


def exception_line(message: str) -> str:
  """The error of a message that holds a traceback (ml_collections puts the config file's
  into its flag error): the exception's line, without its type where that is a ValueError or
  KeyError (their text says it all); a message without one, on one line."""
  lines = [line.strip() for line in message.splitlines() if line.strip()]
  if not any(line.startswith('Traceback (most recent call last)') for line in lines):
    return ' '.join(lines)
  kind, _, detail = lines[-1].partition(': ')
  return detail if kind in ('ValueError', 'KeyError') and detail else lines[-1]


def gives_config(argv: Sequence[str]) -> bool:
  """Whether the command line sets ``--config`` itself (``--config=...`` or ``--config ...``)."""
  return any(a == '--config' or a.startswith('--config=') for a in argv[1:])


def config_value(argv: Sequence[str]) -> str | None:
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


def with_config_value(argv: Sequence[str], value: str) -> list[str]:
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


def load_error_line(error: BaseException, value: str) -> str | None:
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
