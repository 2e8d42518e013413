"""Host-to-device feeding: batches transferred ahead of the step, and host memory hygiene."""

from __future__ import annotations

import ctypes
import queue
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from crackjax.engine.mesh import global_batch


def read_ahead(
  items: Iterable[Any], size: int = 2, *, name: str = 'crackjax-read-ahead'
) -> Iterator[Any]:
  """`items` read by a background thread (`name`), up to `size` ahead: the next batch made or
  photo decoded while this one is used. An error of `items` is raised here, at the item it
  belongs to. Closing the generator stops the thread after the item it is making (it is
  joined, up to 30 s: a daemon thread still inside a loader or a transfer when the interpreter
  shuts down, e.g. after Ctrl-C, crashes it with SIGSEGV)."""
  if size < 1:
    raise ValueError(f'read-ahead size must be >= 1, got {size}')
  slots: queue.Queue = queue.Queue(maxsize=size)
  stop = threading.Event()
  end = object()

  def put(item: Any) -> bool:
    while not stop.is_set():
      try:
        slots.put(item, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def produce() -> None:
    try:
      for item in items:
        if not put((item, None)):
          return
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
      put((end, e))
      return
    put((end, None))

  thread = threading.Thread(target=produce, name=name, daemon=True)
  thread.start()
  try:
    while True:
      item, error = slots.get()
      if error is not None:
        raise error
      if item is end:
        return
      yield item
  finally:
    stop.set()
    if thread is not threading.current_thread():
      thread.join(timeout=30)


def prefetch_to_device(
  batches: Iterator[Mapping[str, np.ndarray]], mesh: Mesh, size: int = 2
) -> Iterator[dict[str, jax.Array]]:
  """Yields `global_batch(b, mesh)` for b in `batches`, up to `size` batches ahead.

  A background thread (`read_ahead`) reads the host batches and transfers them to the devices
  while the current step runs, so the step never waits for input. An exception raised by
  `batches` (e.g. a corrupt image) is re-raised here, at the batch it belongs to.
  """
  if size < 1:
    raise ValueError(f'prefetch size must be >= 1, got {size}')
  transferred = (global_batch(local, mesh) for local in batches)
  return read_ahead(transferred, size, name='prefetch_to_device')


def release_freed_host_memory() -> None:
  """Returns heap memory that glibc keeps after XLA's compiler frees it (no-op elsewhere).

  Compiling the U-Net's train step on the CPU leaves 0.2-0.5 GB of freed compiler memory
  in the process's heap arenas; the step's own buffers are then allocated on top of it,
  raising peak RSS by that much (docs/performance.md). malloc_trim hands it back.
  """
  if sys.platform != 'linux':
    return
  try:
    ctypes.CDLL('libc.so.6').malloc_trim(0)
  except (OSError, AttributeError):  # not glibc
    pass
