"""Scoring images as they come: each image's per-threshold counts are kept, never its map.

`StreamScorer` takes (probability map, ground truth) pairs one at a time, counts them under
every protocol on its grid (and at the operating points, `aggregate.at_threshold`'s counts)
and drops the maps; `results` then aggregates the counts (`aggregate.from_counts`) into
exactly what `aggregate.evaluate` returns on the same images. What it holds grows by a few
kilobytes a photo (the protocols' count rows, ``4 x grid`` int64 each), not by its map.

The protocols worth it (``Protocol.parallel``: the tolerance protocols, ~0.05 CPU-s a 0.15 MP photo)
are counted in `workers` spawned processes while the caller predicts the next photos; at
most ``max_pending`` photos are in flight (a bounded queue: the caller waits when it is
full), and their counts are taken in image order. The others (strict: milliseconds) are
counted at once in the calling thread. As each image's counts are complete, `on_image` gets
what they alone decide of its per-image row (`aggregate.image_scores`), for a caller that
writes the rows as they come. An operating point may be each photo's own threshold
(`threshold_choice.PhotoThreshold`): computed from the map as it is added, its counts pooled
like any other point's, its reported threshold the mean of the photos' own.
"""

from __future__ import annotations

import collections
import concurrent.futures
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from crackjax.evaluation.aggregate import f1_of, from_counts, image_scores, point_from_counts
from crackjax.evaluation.protocols import ThresholdCounts, _check_pair, get_protocol
from crackjax.evaluation.result import OperatingPoint, ProtocolResult
from crackjax.evaluation.threshold_choice import PhotoThreshold

__all__ = ['StreamScorer', 'count_image']

# One protocol's work on one image: its count function, its grid, the operating points.
_Job = tuple[Callable[..., ThresholdCounts], np.ndarray, tuple[float, ...]]


def worker_start() -> None:
  """A worker process ignores Ctrl-C: the terminal sends it to the whole process group, and
  the parent ends its workers itself (`StreamScorer.close`), in one line, without a
  traceback from each worker."""
  import signal

  signal.signal(signal.SIGINT, signal.SIG_IGN)


def count_image(
  jobs: Sequence[_Job], prob: np.ndarray, gt: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
  """Per job, the image's counts on the job's grid, int64 (4, T) (the `ThresholdCounts`
  fields in order), and at each operating point, int64 (4, P), each point counted alone as
  `aggregate.at_threshold` does. Module-level: the worker processes unpickle it by name."""
  out = []
  for counts, grid, points in jobs:
    row = np.stack([a[0] for a in counts([prob], [gt], grid)])
    at = [np.stack([a[0, 0] for a in counts([prob], [gt], np.array([t]))]) for t in points]
    out.append((row, np.stack(at, axis=1) if at else np.zeros((4, 0), np.int64)))
  return out


class StreamScorer:
  """Counts images under `protocols` as they are `add`-ed; `results` aggregates them.

  Args:
    protocols: {protocol: the size of its grid's uniform part} (`EvalPlan.thresholds_of`).
    tail_thresholds: whether the grids add the tail thresholds (`evaluate`'s argument).
    operating_points: {name: threshold}: per protocol, P/R/F1 pooled at each threshold
      (`aggregate.at_threshold`), in `results`' second part; a `PhotoThreshold` there is each
      photo's own threshold.
    workers: processes counting the parallel protocols (1: all in this thread).
    progress: called with 1 as each image's counts are complete (a tqdm bar's ``update``).
    max_pending: photos in flight to the workers before `add` waits (default 2 per worker).
    on_image: called as ``on_image(index, {protocol: aggregate.image_scores(...)})`` as each
      image's counts are complete, in image order (its OIS F1 and P/R/F1 at 0.5: final).
  """

  def __init__(
    self,
    protocols: Mapping[str, int],
    *,
    tail_thresholds: bool = True,
    operating_points: Mapping[str, float | PhotoThreshold] | None = None,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
    max_pending: int | None = None,
    on_image: Callable[[int, dict[str, dict[str, float]]], None] | None = None,
  ):
    self.protocols = {p: int(n) for p, n in protocols.items()}
    self.tail_thresholds = bool(tail_thresholds)
    self.points = dict(operating_points or {})
    for name, t in self.points.items():
      if not isinstance(t, PhotoThreshold) and not 0.0 <= float(t) <= 1.0:
        raise ValueError(f'threshold must be in [0, 1], got {t} ({name})')
    self.progress = progress
    self.on_image = on_image
    self.num_images = 0
    self._taken = 0  # images whose counts are complete
    self._local: list[str] = []
    self._remote: list[str] = []
    self._jobs: dict[str, _Job] = {}
    self._bsds: dict[str, bool] = {}
    self._own: list[tuple[float, ...]] = []  # each image's thresholds of the points
    for protocol, n in self.protocols.items():
      spec = get_protocol(protocol)
      grid = spec.thresholds(n, self.tail_thresholds)
      self._bsds[protocol] = spec.bsds
      self._jobs[protocol] = (spec.counts, grid, ())  # the points: `add`'s, image by image
      (self._remote if workers > 1 and spec.parallel else self._local).append(protocol)
    self._rows: dict[str, list[np.ndarray]] = {p: [] for p in self.protocols}
    self._at: dict[str, list[np.ndarray]] = {p: [] for p in self.protocols}
    self._pending: collections.deque = collections.deque()
    self._max_pending = max_pending or 2 * workers
    self._pool = None
    if self._remote:
      context = multiprocessing.get_context('spawn')  # the parent may run JAX's threads
      self._pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context, initializer=worker_start
      )

  def __enter__(self) -> StreamScorer:
    return self

  def __exit__(self, kind: type[BaseException] | None, *exc: Any) -> None:
    self.close(abort=kind is not None)

  def close(self, *, abort: bool = False) -> None:
    """Stops the worker processes (the photos in flight are dropped); with `abort` (an error,
    Ctrl-C or SIGTERM left the block) at once, without waiting for the photo each is counting:
    they are terminated, then joined, so none outlives the command."""
    if self._pool is not None:
      if abort:
        for process in list((getattr(self._pool, '_processes', None) or {}).values()):
          process.terminate()  # the executor has no public way (Python 3.14: terminate_workers)
      self._pool.shutdown(wait=True, cancel_futures=True)
      self._pool = None
    self._pending.clear()

  def add(self, prob: Any, gt: Any) -> None:
    """Counts one image (validated as `evaluate` does; errors name it by its index)."""
    prob, gt = _check_pair(self.num_images, prob, gt)
    self.num_images += 1
    points = tuple(
      t.of(prob) if isinstance(t, PhotoThreshold) else float(t) for t in self.points.values()
    )
    self._own.append(points)
    jobs = {p: (counts, grid, points) for p, (counts, grid, _) in self._jobs.items()}
    local = count_image([jobs[p] for p in self._local], prob, gt)
    future = None
    if self._remote:
      future = self._pool.submit(count_image, [jobs[p] for p in self._remote], prob, gt)
    self._pending.append((local, future))
    while self._pending and (
      len(self._pending) > self._max_pending
      or self._pending[0][1] is None
      or self._pending[0][1].done()
    ):
      self._take()

  def _take(self) -> None:
    local, future = self._pending.popleft()
    remote = future.result() if future is not None else []
    for protocol, (row, at) in zip(self._local + self._remote, local + remote, strict=True):
      self._rows[protocol].append(row)
      self._at[protocol].append(at)
    if self.on_image is not None:
      self.on_image(
        self._taken,
        {
          p: image_scores(self._rows[p][-1], self._jobs[p][1], self._bsds[p])
          for p in self.protocols
        },
      )
    self._taken += 1
    if self.progress is not None:
      self.progress(1)

  def finish(self) -> None:
    """Waits for the photos in flight."""
    while self._pending:
      self._take()

  def counts(self, protocol: str, rows: Sequence[int] | None = None) -> ThresholdCounts:
    """The (num_images, T) counts of `protocol` (of the images `rows` only, if given)."""
    self.finish()
    stacked = np.stack(self._rows[protocol]) if self._rows[protocol] else np.zeros((0, 4, 0))
    if rows is not None:
      stacked = stacked[np.asarray(rows, np.intp)]
    return ThresholdCounts(*(stacked[:, k, :] for k in range(4)))

  def image_f1(self, protocol: str, threshold: float) -> np.ndarray:
    """Each image's F1 (in image order) under `protocol` at `threshold`: at an operating point
    where one has that threshold, else at the grid's threshold nearest to it (an ODS threshold
    is on the grid); the package's conventions (`aggregate.f1_of`: 0 without a crack)."""
    at = self.image_counts(protocol, threshold)
    return f1_of(*(at[:, k] for k in range(4)))

  def image_counts(self, protocol: str, threshold: float, *, exact: bool = False) -> np.ndarray:
    """Each image's counts (int64 (num_images, 4), the `ThresholdCounts` fields in order) under
    `protocol` at `threshold`: an operating point's where one has that threshold (counted at
    it exactly, as the point's P/R/F1), else the grid's at the threshold nearest to it.

    Raises:
      ValueError: with `exact`, neither an operating point nor the grid has `threshold`.
    """
    self.finish()
    names = [
      n
      for n, t in self.points.items()
      if not isinstance(t, PhotoThreshold) and float(t) == float(threshold)
    ]
    if names and self._at[protocol]:
      i = list(self.points).index(names[0])
      return np.stack(self._at[protocol])[:, :, i]
    counts = self.counts(protocol)
    grid = np.asarray(self._jobs[protocol][1])
    j = int(np.argmin(np.abs(grid - threshold)))
    if exact and grid[j] != float(threshold):
      raise ValueError(f'{protocol}: no operating point or grid threshold is {threshold:g}')
    return np.stack([c[:, j] for c in counts], axis=1)

  def tp_fp_fn(self, threshold: float) -> dict[str, np.ndarray]:
    """{protocol: each image's TP, FP and FN pixels at `threshold`, int64 (num_images, 3)} of
    the protocols whose counts are those (`Protocol.counts_tp_fp_fn`: strict) and that counted
    `threshold` exactly (an operating point, or a grid threshold; any other is left out): the
    counts whose sums give the F1 the record reports there."""
    out = {}
    for protocol in self.protocols:
      if not get_protocol(protocol).counts_tp_fp_fn:
        continue
      try:
        at = self.image_counts(protocol, threshold, exact=True)
      except ValueError:
        continue
      matched_pred, num_pred, _, num_gt = (at[:, k] for k in range(4))
      out[protocol] = np.stack([matched_pred, num_pred - matched_pred, num_gt - matched_pred], 1)
    return out

  def results(
    self, rows: Sequence[int] | None = None
  ) -> tuple[dict[str, ProtocolResult], dict[str, dict[str, OperatingPoint]]]:
    """({protocol: `protocol_result`'s result}, {protocol: {point name: the point}}), typed,
    of every image so far (of `rows` only, if given: e.g. one dataset of a mixture)."""
    self.finish()
    results, points = {}, {}
    own = np.asarray(self._own, np.float64).reshape(len(self._own), len(self.points))
    if rows is not None:
      own = own[np.asarray(rows, np.intp)]
    # A fixed point's threshold as given; a photo point's, the mean of the photos' own.
    cuts = [
      float(np.mean(own[:, i])) if isinstance(t, PhotoThreshold) else float(t)
      for i, t in enumerate(self.points.values())
    ]
    for protocol, n in self.protocols.items():
      results[protocol] = from_counts(
        protocol, self.counts(protocol, rows), n, self.tail_thresholds
      )
      at = np.stack(self._at[protocol])
      if rows is not None:
        at = at[np.asarray(rows, np.intp)]
      points[protocol] = {
        name: point_from_counts(ThresholdCounts(*(at[:, k, i : i + 1] for k in range(4))), cuts[i])
        for i, name in enumerate(self.points)
      }
    return results, points
