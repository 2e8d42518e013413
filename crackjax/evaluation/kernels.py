"""Compiled kernels of the tolerance protocols: thinning and maximum bipartite matching.

The tolerance protocols thin the prediction at ~115 thresholds of every photo and match the
thinned pixels to the ground truth at each; as numpy array programs both spent most of their
time in per-call overhead and per-pixel fancy indexing (0.3-0.8 CPU-s a photo, issue 59). These
are the same algorithms as plain loops compiled by numba (``cache=True``: compiled once per
machine into ``__pycache__``, then loaded in ~0.4 s). They are imported only by the functions
that need them (`crackjax.evaluation.thinning`, `crackjax.evaluation.matching`), so importing
crackjax does not import numba.

The results equal the numpy programs they replace exactly (integer counts): tests/test_tolerance.py
checks the thinning against skimage and the counts against skimage and scipy's maximum flow.
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _deletions(img, stamp, sweep, buf, n, sub, offs, luts, gone, num_gone):  # pragma: no cover
  """Adds to `gone` the pixels of ``buf[:n]`` that sub-iteration `sub` deletes (each pixel
  examined once a sweep: `stamp`); returns the new count of `gone`."""
  for t in range(n):
    p = buf[t]
    if stamp[p] == sweep or img[p] == 0:
      continue
    stamp[p] = sweep
    code = 0
    for q in range(8):
      code |= img[p + offs[q]] << q
    if luts[sub, code]:
      gone[num_gone] = p
      num_gone += 1
  return num_gone


@_jit
def _thin_in_place(img, stamp, queued, sweep, lin, k, offs, luts, bufs, gone):  # pragma: no cover
  """Thins the pixels ``lin[:k]`` set in `img` (parallel sub-iterations until nothing
  changes); returns the last sweep number. `bufs` (3, > k) is scratch; `queued` marks the
  sweep that last queued a pixel, so a list holds each pixel once (at most k)."""
  older, newer, spare = bufs[0], bufs[1], bufs[2]
  for i in range(k):
    older[i] = lin[i]
    newer[i] = lin[i]
  # Pixels to examine: neighbours of the deletions of the last two sub-iterations; the first
  # two examine every pixel (the first reads `older` only).
  n_older, n_newer = k, k
  first = True
  sub = 0
  while n_older > 0 or n_newer > 0:
    sweep += 1
    num_gone = _deletions(img, stamp, sweep, older, n_older, sub, offs, luts, gone, 0)
    if not first:
      num_gone = _deletions(img, stamp, sweep, newer, n_newer, sub, offs, luts, gone, num_gone)
    first = False
    for t in range(num_gone):  # all deletions of a sub-iteration happen at once
      img[gone[t]] = 0
    n_fresh = 0
    for t in range(num_gone):
      p = gone[t]
      for q in range(8):
        r = p + offs[q]
        if img[r] == 1 and queued[r] != sweep:
          queued[r] = sweep
          spare[n_fresh] = r
          n_fresh += 1
    older, newer, spare = newer, spare, older
    n_older, n_newer = n_newer, n_fresh
    sub ^= 1
  return sweep


@_jit
def thin_prefixes(lin, ks, size, offs, luts):  # pragma: no cover - compiled
  """Thins each prefix ``lin[:ks[j]]`` of one pixel order on its own.

  Args:
    lin: int64 flat indices of the pixels in an image padded by one zero pixel on every side
      (so ``p + offs[q]`` never leaves it), in the order the prefixes take them.
    ks: int64 prefix lengths.
    size: the padded image's number of pixels.
    offs: int64 (8,) flat offsets of the eight neighbours, neighbour q with bit 2**q.
    luts: bool (2, 256) deletion tables of the two sub-iterations (`thinning._THIN_LUTS`).

  Returns:
    ``(pos, starts)``: the positions in `lin` of the pixels that survive the thinning of prefix
    j are ``pos[starts[j]:starts[j + 1]]``, in `lin`'s order.
  """
  kmax = 0
  for j in range(ks.size):
    kmax = max(kmax, ks[j])
  img = np.zeros(size, np.uint8)
  stamp = np.zeros(size, np.int32)  # the last sweep that examined a pixel (de-duplication)
  queued = np.zeros(size, np.int32)  # the last sweep that queued it for the next ones
  bufs = np.empty((3, kmax + 1), np.int64)
  gone = np.empty(kmax + 1, np.int64)
  pos = np.empty(max(16, kmax), np.int64)
  starts = np.zeros(ks.size + 1, np.int64)
  sweep = 0
  num = 0
  for j in range(ks.size):
    k = ks[j]
    for i in range(k):
      img[lin[i]] = 1
    sweep = _thin_in_place(img, stamp, queued, sweep, lin, k, offs, luts, bufs, gone)
    for i in range(k):
      if img[lin[i]] == 1:
        if num == pos.size:
          grown = np.empty(2 * pos.size, np.int64)
          grown[:num] = pos[:num]
          pos = grown
        pos[num] = i
        num += 1
    for i in range(k):  # cleared after: a pixel listed twice survives twice
      img[lin[i]] = 0
    starts[j + 1] = num
  return pos[:num], starts


@_jit
def _adjacency(left, offs, gid):  # pragma: no cover - compiled
  """CSR neighbour lists (nearest first) of the left pixels `left` (flat indices into `gid`)."""
  nl = left.size
  start = np.zeros(nl + 1, np.int64)
  for u in range(nl):
    count = 0
    for t in range(offs.size):
      if gid[left[u] + offs[t]] >= 0:
        count += 1
    start[u + 1] = start[u] + count
  adj = np.empty(start[nl], np.int64)
  for u in range(nl):
    e = start[u]
    for t in range(offs.size):
      v = gid[left[u] + offs[t]]
      if v >= 0:
        adj[e] = v
        e += 1
  return start, adj


@_jit
def matching_size(start, adj, num_right):  # pragma: no cover - compiled
  """Size of a maximum matching of the bipartite graph with CSR neighbour lists
  (`start`, `adj`: left vertex u's right neighbours are ``adj[start[u]:start[u + 1]]``).

  Hopcroft-Karp after a greedy start (each left vertex takes its first free neighbour). A left
  vertex whose depth-first search fails is marked dead for the phase (its distance set to
  infinity), which keeps the search polynomial on the layered graphs that nearby pixel sets
  form; scipy's ``maximum_bipartite_matching`` does not, and is exponential there.
  """
  nl = start.size - 1
  match_l = np.full(nl, -1, np.int64)
  match_r = np.full(num_right, -1, np.int64)
  size = 0
  for u in range(nl):
    for e in range(start[u], start[u + 1]):
      v = adj[e]
      if match_r[v] < 0:
        match_r[v] = u
        match_l[u] = v
        size += 1
        break
  inf = nl + 1
  dist = np.empty(nl, np.int64)
  queue = np.empty(nl, np.int64)
  ptr = np.empty(nl, np.int64)
  stack = np.empty(nl + 1, np.int64)
  chosen = np.empty(nl + 1, np.int64)
  while True:
    # Breadth-first layers from the free left vertices; stop if no free right one is reached.
    tail = 0
    for u in range(nl):
      if match_l[u] < 0:
        dist[u] = 0
        queue[tail] = u
        tail += 1
      else:
        dist[u] = inf
    head = 0
    found = False
    while head < tail:
      u = queue[head]
      head += 1
      for e in range(start[u], start[u + 1]):
        w = match_r[adj[e]]
        if w < 0:
          found = True
        elif dist[w] == inf:
          dist[w] = dist[u] + 1
          queue[tail] = w
          tail += 1
    if not found:
      return size
    for u in range(nl):
      ptr[u] = start[u]
    for root in range(nl):  # depth-first augmenting paths along the layers
      if match_l[root] >= 0:
        continue
      stack[0] = root
      depth = 1
      while depth > 0:
        u = stack[depth - 1]
        if ptr[u] == start[u + 1]:
          dist[u] = inf  # a dead end for the rest of this phase
          depth -= 1
          continue
        v = adj[ptr[u]]
        ptr[u] += 1
        w = match_r[v]
        if w < 0:
          chosen[depth - 1] = v
          for i in range(depth):
            match_l[stack[i]] = chosen[i]
            match_r[chosen[i]] = stack[i]
          size += 1
          break
        if dist[w] == dist[u] + 1:
          chosen[depth - 1] = v
          stack[depth] = w
          depth += 1


@_jit
def match_prefixes(left, starts, offs, gid, num_right):  # pragma: no cover - compiled
  """Maximum matching size of each segment ``left[starts[j]:starts[j + 1]]`` (the matchable
  thinned pixels of one threshold, flat indices into `gid`) to the ground truth: `gid` holds
  ground-truth pixel ids (-1 elsewhere), `offs` the flat offsets within the tolerance, nearest
  first. A segment equal to the one before it has its size."""
  out = np.zeros(starts.size - 1, np.int64)
  for j in range(out.size):
    a, b = starts[j], starts[j + 1]
    if b == a:
      continue
    if j > 0 and b - a == starts[j] - starts[j - 1]:
      same = True
      c = starts[j - 1]
      for i in range(b - a):
        if left[a + i] != left[c + i]:
          same = False
          break
      if same:
        out[j] = out[j - 1]
        continue
    start, adj = _adjacency(left[a:b], offs, gid)
    out[j] = matching_size(start, adj, num_right)
  return out
