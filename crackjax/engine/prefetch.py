"""Host-to-device feeding: batches transferred ahead of the step, and host memory hygiene."""

from __future__ import annotations

import ctypes
import queue
import sys
import threading
from collections.abc import Iterator, Mapping

import jax
import numpy as np
from jax.sharding import Mesh

from crackjax.engine.mesh import global_batch


class _ProducerError:
  def __init__(self, error: BaseException):
    self.error = error


def prefetch_to_device(
  batches: Iterator[Mapping[str, np.ndarray]], mesh: Mesh, size: int = 2
) -> Iterator[dict[str, jax.Array]]:
  """Yields `global_batch(b, mesh)` for b in `batches`, up to `size` batches ahead.

  A background thread reads the host batches and transfers them to the devices while the
  current step runs, so the step never waits for input. An exception raised by `batches`
  (e.g. a corrupt image) is re-raised here, at the batch it belongs to.
  """
  if size < 1:
    raise ValueError(f'prefetch size must be >= 1, got {size}')
  items: queue.Queue = queue.Queue(maxsize=size)
  stop = threading.Event()
  end = object()

  def put(item) -> bool:
    while not stop.is_set():
      try:
        items.put(item, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def produce() -> None:
    try:
      for local in batches:
        if not put(global_batch(local, mesh)):
          return
    except BaseException as e:  # handed to the consumer, which raises it
      put(_ProducerError(e))
    else:
      put(end)

  thread = threading.Thread(target=produce, name='prefetch_to_device', daemon=True)
  thread.start()
  try:
    while True:
      item = items.get()
      if item is end:
        return
      if isinstance(item, _ProducerError):
        raise item.error
      yield item
  finally:
    stop.set()
    # Let the thread finish the batch it is making: a daemon thread still inside the loader or
    # a transfer when the interpreter shuts down (e.g. after Ctrl-C) crashes it (SIGSEGV).
    if thread is not threading.current_thread():
      thread.join(timeout=30)


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
