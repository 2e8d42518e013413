"""Released models and where a model file comes from: a name, a path or a URL.

`resolve(spec)` turns what a user typed (``crackjax-predict --model=SPEC``,
`crackjax.Predictor.from_pretrained(SPEC)`, ``--config.model_init.pretrained=SPEC``) into a
local model file:

* a **name** of `released()` (crackjax-models lists them): the file shipped inside the package
  (``crackjax/models/released/``), checked against its registry SHA-256; an entry without a
  shipped file is downloaded from its ``url`` like a URL with that checksum;
* an **http(s) URL**: downloaded once into the cache (``$CRACKJAX_CACHE``, default
  ``~/.cache/crackjax``), ``<cache>/models/<sha256 of the URL, 16 hex>/<file name>``: to a
  temporary file in that folder, verified (the file's SHA-256 against ``#sha256=<hex>`` at the
  end of the URL when given, pip's convention, or the registry's; always the model file's own
  content checksum), then renamed into place, so an interrupted or damaged download never
  looks finished. Later calls find the file there and work offline;
* anything else: a **path** to a model file.

Any of them may be pinned to the SHA-256 of the whole file, ``#sha256=<64 hex digits>`` at
its end (``FILE#sha256=...``, ``URL#sha256=...``, pip's convention) or `resolve`'s `sha256`:
the file is used only if its bytes have that checksum. A checksum the user got from elsewhere
(the publisher's page, a colleague) is the only guard against a file that was altered on
purpose: its own content checksum and self check (`crackjax.models.output_check`) can be
recomputed by whoever altered it, and guard against damage alone. A released model by name
is pinned by the registry.

The registry (``released/registry.json``) is written by the release script
(scripts/release_cpu.sh, `crackjax.deploy.release`) from each file's card; a test checks that
every shipped file matches its entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from crackjax.models import model_file

RELEASED_DIR = Path(__file__).with_name('released')
REGISTRY = RELEASED_DIR / 'registry.json'
CACHE_ENV = 'CRACKJAX_CACHE'


class ModelNotFoundError(FileNotFoundError):
  """A --model / from_pretrained spec that names no released model, file or URL."""


def cache_dir() -> Path:
  """The download cache: ``$CRACKJAX_CACHE`` or ``~/.cache/crackjax``."""
  return Path(os.environ.get(CACHE_ENV) or Path.home() / '.cache' / 'crackjax').expanduser()


def released() -> list[dict[str, Any]]:
  """The released models' registry entries (name, file or url, sha256, size, card summary)."""
  if not REGISTRY.is_file():
    return []
  return json.loads(REGISTRY.read_text())['models']


def entry(name: str) -> dict[str, Any] | None:
  """The registry entry of the released model `name`, or None."""
  return next((e for e in released() if e['name'] == name), None)


def is_url(spec: str) -> bool:
  return urllib.parse.urlsplit(str(spec)).scheme in ('http', 'https')


PIN = '#sha256='


def split_pin(spec: str | os.PathLike) -> tuple[str, str | None]:
  """(the spec without its ``#sha256=<hex>`` pin, the pin or None). A path that exists as
  written (a file name holding '#sha256=') is not split.

  Raises:
    ModelNotFoundError: a pin that is not 64 hexadecimal digits (one line naming it).
  """
  text = str(spec)
  head, mark, pin = text.rpartition(PIN)
  if not mark or (not is_url(text) and Path(text).expanduser().exists()):
    return text, None
  pin = pin.lower()
  if len(pin) != 64 or any(c not in '0123456789abcdef' for c in pin):
    raise ModelNotFoundError(
      f'{text!r}: the pin {PIN}{pin[:70]} is not a SHA-256 (64 hexadecimal digits, as '
      'sha256sum prints them).'
    )
  return head, pin


def resolve(spec: str | os.PathLike, *, sha256: str | None = None, progress: bool = True) -> Path:
  """The local model file of a released model's name, a URL or a path (module docstring),
  checked against its pin: `sha256` or a ``#sha256=<hex>`` at the end of `spec` (`split_pin`).

  Raises:
    ModelNotFoundError: a spec that is none of these (the message lists the released names),
      or a malformed pin.
    model_file.ModelFileError: a file whose SHA-256 differs from its pin, or a shipped or
      downloaded file whose SHA-256 differs from its registry entry (a download is not kept).
    OSError: a download that failed (the message names the URL).
  """
  text, pinned = split_pin(spec)
  if sha256 is not None:
    given = split_pin(f'{PIN}{sha256}')[1]
    if pinned not in (None, given):
      raise ModelNotFoundError(f'{str(spec)!r}: pinned to two checksums ({sha256}).')
    pinned = given
  found = entry(text)
  if found is not None:
    if pinned not in (None, found['sha256']):
      raise model_file.ModelFileError(
        f'released model {text!r}: pinned to sha256 {pinned}, but it is sha256 '
        f'{found["sha256"]} (its registry entry, crackjax-models); check the pin.'
      )
    if found.get('file'):
      path = RELEASED_DIR / found['file']
      if path.is_file():
        verify_sha256(path, found['sha256'])
        return path
    if not found.get('url'):
      raise ModelNotFoundError(
        f'released model {text!r}: its file {found.get("file")} is missing from this '
        'installation and it has no URL; reinstall crackjax.'
      )
    return download(found['url'], sha256=found['sha256'], progress=progress)
  if is_url(text):
    return download(text + (f'{PIN}{pinned}' if pinned else ''), progress=progress)
  path = Path(text).expanduser()
  if path.is_file():
    actual = model_file.file_sha256(path) if pinned else None
    if actual != pinned:
      raise model_file.ModelFileError(
        f'{path}: its sha256 is {actual}, not the pinned {pinned}: not the file the checksum '
        'names (damaged, altered or another one); get it again from its source.'
      )
    return path
  names = ', '.join(e['name'] for e in released()) or 'none in this installation'
  where = 'a folder, not a model file' if path.is_dir() else 'no such file'
  raise ModelNotFoundError(
    f'--model {text!r}: not a released model ({names}; crackjax-models lists them), not an '
    f'http(s) URL, and {where} (a .safetensors file written by crackjax-export --format=model).'
  )


def verify_sha256(path: Path, expected: str) -> None:
  """Raises ModelFileError unless the file's SHA-256 is `expected`."""
  actual = model_file.file_sha256(path)
  if actual != expected:
    raise model_file.ModelFileError(
      f'{path}: checksum mismatch (expected sha256 {expected}, file {actual}): the file is '
      'damaged or altered; reinstall crackjax or download it again.'
    )


def released_name(path: str | Path) -> str | None:
  """The name of the released model whose registry SHA-256 the file at `path` has (its
  bytes, the file itself or a copy of it), or None: a file that is not, or no longer, a
  released model as shipped."""
  size = Path(path).stat().st_size
  candidates = [e for e in released() if e.get('size') in (None, size)]
  if not candidates:
    return None
  actual = model_file.file_sha256(path)
  return next((e['name'] for e in candidates if e.get('sha256') == actual), None)


def cached_path(url: str) -> Path:
  """Where the download of `url` (without its #fragment) is kept in the cache."""
  bare = urllib.parse.urldefrag(url).url
  name = Path(urllib.parse.urlsplit(bare).path).name or 'model.safetensors'
  digest = hashlib.sha256(bare.encode()).hexdigest()[:16]
  return cache_dir() / 'models' / digest / name


def cache_problem(url: str, error: OSError) -> str:
  """The one line for a cache that cannot hold the download of `url` (a file where the folder
  should be, a read-only or unwritable place), naming $CRACKJAX_CACHE and the way out."""
  where = os.environ.get(CACHE_ENV)
  named = f'${CACHE_ENV}={where}' if where else f'the default cache (${CACHE_ENV} is not set)'
  reason = error.strerror or str(error)
  return (
    f'cannot keep the download of {url} in {cache_dir()} ({named}): {reason}'
    f'{f" ({error.filename})" if error.filename else ""}; set {CACHE_ENV} to a folder you can '
    f'write, e.g. export {CACHE_ENV}=$HOME/.cache/crackjax, or download the file yourself and '
    'pass its path.'
  )


def _cached_problem(path: Path, sha256: str | None) -> str | None:
  """Why the cached copy `path` cannot be used (damaged, or not the pinned file), or None.
  With a pinned sha256 its bytes are the file verified when it was downloaded: not read again
  here (the loader reads and checks it next)."""
  if sha256:
    actual = model_file.file_sha256(path)
    return None if actual == sha256 else f'its sha256 is not the pinned {sha256}'
  try:
    model_file.read(path, build=False)
  except model_file.ModelFileError as e:
    return ' '.join(str(e).replace(str(path), 'it').split())
  return None


def _set_aside(target: Path, url: str, problem: str) -> None:
  """Moves a damaged cached copy aside (kept for a look, never used again) and says so."""
  aside = target.with_name(f'{target.name}.damaged-{int(time.time())}')
  try:
    os.replace(target, aside)
  except OSError as e:
    raise OSError(cache_problem(url, e)) from e
  print(
    f'crackjax: the cached copy of {url} is damaged ({problem}); moved aside to {aside}, '
    'downloading it again.',
    file=sys.stderr,
    flush=True,
  )


def download(url: str, *, sha256: str | None = None, progress: bool = True) -> Path:
  """The cached model file of `url`, downloaded first if the cache lacks it (module docstring).
  A cached copy that is damaged (or not the pinned file) is moved aside, said, and downloaded
  again, once.

  Raises:
    model_file.ModelFileError: the download's checksum differs (nothing is kept).
    OSError: the download failed (naming the URL and the reason), or the cache cannot hold it
      (naming $CRACKJAX_CACHE, `cache_problem`).
  """
  bare, fragment = urllib.parse.urldefrag(url)
  if fragment.startswith('sha256='):
    sha256 = sha256 or fragment.removeprefix('sha256=')
  target = cached_path(url)
  if target.is_file():
    problem = _cached_problem(target, sha256)
    if problem is None:
      return target
    _set_aside(target, bare, problem)
  tmp = target.with_name(f'.{target.name}.download-{os.getpid()}')
  try:
    target.parent.mkdir(parents=True, exist_ok=True)
    out = open(tmp, 'wb')  # noqa: SIM115 - closed below, after the download
  except OSError as e:
    raise OSError(cache_problem(bare, e)) from e
  h = hashlib.sha256()
  try:
    try:
      with urllib.request.urlopen(bare, timeout=60) as response, out as f:
        total = int(response.headers.get('Content-Length') or 0) or None
        import tqdm

        with tqdm.tqdm(
          total=total,
          unit='B',
          unit_scale=True,
          desc=f'download {target.name}',
          file=sys.stderr,
          disable=not progress,
        ) as bar:
          for block in iter(lambda: response.read(1 << 20), b''):
            f.write(block)
            h.update(block)
            bar.update(len(block))
    except (urllib.error.URLError, OSError) as e:
      reason = getattr(e, 'reason', None) or e
      raise OSError(f'cannot download {bare}: {reason}') from e
    if sha256 and h.hexdigest() != sha256:
      raise model_file.ModelFileError(
        f'{bare}: checksum mismatch (expected sha256 {sha256}, downloaded {h.hexdigest()}): '
        'the download was damaged or the file changed; nothing was kept.'
      )
    try:  # its own content checksum, before it counts as downloaded
      model_file.read(tmp, build=False)
    except model_file.ModelFileError as e:
      raise model_file.ModelFileError(str(e).replace(str(tmp), bare)) from e
    os.replace(tmp, target)
  finally:
    out.close()
    tmp.unlink(missing_ok=True)
  return target
