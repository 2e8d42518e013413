"""The documentation pages (docs/*.md) in a clone and in an installed wheel alike.

Messages and --help texts name pages as ``docs/<page>.md``; an installed wheel has no docs/
folder of the repository but ships the pages inside the package (``crackjax/docs/``,
pyproject.toml's package-dir). `doc(page)` is the name to print: ``docs/<page>.md`` in a
source tree (a clone, an editable install), the installed file's path otherwise.
`crackjax-docs` lists the pages with their paths, and prints one page:

  crackjax-docs                  # every page: its path and its title
  crackjax-docs troubleshooting  # the page's text (troubleshooting.md and docs/... alike)
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

PROG = 'crackjax-docs'
_PACKAGE = Path(__file__).resolve().parents[1]  # crackjax/


def docs_dir() -> Path:
  """The folder of the pages: crackjax/docs/ in a wheel, the repository's docs/ in a clone."""
  installed = _PACKAGE / 'docs'
  return installed if installed.is_dir() else _PACKAGE.parent / 'docs'


def doc(page: str) -> str:
  """How a message names `page` ('models.md', 'datasets.md#anchor'): 'docs/<page>' in a
  source tree, the installed file's path in a wheel."""
  folder = docs_dir()
  return f'docs/{page}' if folder == _PACKAGE.parent / 'docs' else str(folder / page)


def _pages() -> list[Path]:
  return sorted(docs_dir().glob('*.md'))


def _title(path: Path) -> str:
  for line in path.read_text(encoding='utf-8').splitlines():
    if line.startswith('# '):
      return line[2:].strip()
  return ''


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name); returns the exit status."""
  parser = argparse.ArgumentParser(
    prog=PROG, description='The documentation pages crackjax ships: list them, or print one.'
  )
  parser.add_argument('page', nargs='?', help='a page to print, e.g. troubleshooting or models')
  parser.add_argument('--path', action='store_true', help="print the page's path, not its text")
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)
  pages = _pages()
  if not pages:
    print(f'{PROG}: no documentation pages in {docs_dir()}.', file=sys.stderr)
    return 1
  if args.page is None:
    print(f'{PROG}: the pages in {docs_dir()} (crackjax-docs PAGE prints one):')
    for path in pages:
      print(f'  {path.stem:<16} {_title(path)}')
    return 0
  name = Path(args.page.split('#')[0]).name
  name = name if name.endswith('.md') else f'{name}.md'
  path = docs_dir() / name
  if not path.is_file():
    print(
      f'{PROG}: no page {args.page!r}; the pages: {", ".join(p.stem for p in pages)}.',
      file=sys.stderr,
    )
    return 1
  try:
    print(path if args.path else path.read_text(encoding='utf-8'), end='\n' if args.path else '')
    sys.stdout.flush()
  except BrokenPipeError:  # `crackjax-docs models | head`: the reader had enough
    _quiet_stdout()
    return 0
  except OSError as e:  # a full disk or a closed stdout
    _quiet_stdout()
    print(f'{PROG}: cannot write the page to standard output ({e.strerror or e}).', file=sys.stderr)
    return 1
  return 0


def _quiet_stdout() -> None:
  """Points stdout at devnull, so that the interpreter's own flush at exit raises nothing."""
  try:
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
  except (OSError, ValueError):
    pass


if __name__ == '__main__':
  sys.exit(main())
