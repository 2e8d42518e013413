"""`exclusive(path)`: an inter-process lock whose file is removed when it is released.

Used for ``<data_dir>/<dataset>.lock`` (crackjax/data/registry.py): a plain `filelock.FileLock`
leaves its file behind on POSIX, so every preparation (and every one that ended early) left a
``crackforest.lock`` beside the user's datasets.

Why deleting is safe here. The lock is ``flock`` on the file's inode. Deleting the file while
another process is blocked on it is racy in general: that waiter holds the old inode open, gets
its flock once we release, while a third process opens the path anew, creates a new inode and
flocks it at once, so two processes hold "the" lock. The rule that closes it (the one
filelock >= 4 applies itself: it checks the inode's link count after its flock): a process
counts as holding the lock only when, with its flock taken, the path still names the inode it
locked (``os.path.samestat`` of ``fstat(fd)`` and ``stat(path)``); otherwise it closes and tries
again. The holder removes the file *before* it unlocks, so every waiter that then gets the old
inode sees that it is gone and starts over on the path; a newcomer that created a new file meanwhile
is the next holder. Only the holder ever removes the file, so no one removes a file another
process holds.

A process killed while it holds the lock (kill -9) leaves the file, but the kernel drops its
flock: the next process takes it and removes it on release (unlike an existence lock,
`filelock.SoftFileLock`, which would stay taken for good). On Windows, and where flock is not
supported, `filelock.FileLock` is used as before: Windows's filelock removes the file itself on
release (an open file cannot be deleted there, so it never removes a waited-on one), and without
flock the file stays.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

import filelock

try:
  import fcntl
except ImportError:  # Windows
  fcntl = None


@contextlib.contextmanager
def exclusive(path: str | os.PathLike) -> Iterator[None]:
  """Holds an exclusive lock on `path` (created if missing; its folder must exist) and removes
  the file when released, on success, error and Ctrl-C alike. Blocks while another process
  holds it; the system drops the lock when its holder dies."""
  path = os.fspath(path)
  fd = _take(path) if fcntl is not None else None
  if fd is None:  # Windows, or a file system without flock
    with filelock.FileLock(path):
      yield
    return
  try:
    yield
  finally:
    try:
      with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # still holding it: see the module's docstring
    finally:
      os.close(fd)  # releases the flock


def _take(path: str) -> int | None:
  """An open descriptor of `path` whose flock this process holds and which `path` still names;
  None where flock is not supported."""
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX)
      if _names(path, fd):
        return fd
    except OSError as e:
      os.close(fd)
      if e.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
        return None
      if e.errno != errno.ESTALE:  # on NFS: removed by the holder on another host
        raise
      continue
    except BaseException:  # Ctrl-C while waiting
      os.close(fd)
      raise
    os.close(fd)  # the holder removed the file while we waited: start again on the path


def _names(path: str, fd: int) -> bool:
  """Whether `path` still names the file open as `fd`."""
  try:
    return os.path.samestat(os.fstat(fd), os.stat(path))
  except FileNotFoundError:
    return False
