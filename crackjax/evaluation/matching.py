"""Maximum-cardinality bipartite matching, as used by the tolerance protocols, and their
counts of one image at every threshold (`tolerance_image`: thinned predictions matched to the
ground truth).

Left vertices are predicted pixels, right vertices ground-truth pixels, and an edge
joins two pixels within the matching tolerance; the matching size is the number of
matched pixels of each side.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import maximum_flow

from crackjax.evaluation.thinning import thin_coords


def greedy_matches_all_left(nbr: np.ndarray, num_right: int, rounds: int = 4) -> bool:
  """Whether a few greedy rounds match every left vertex (each row of ``nbr``).

  Each round, every unmatched left vertex proposes to its first (with nearest-first
  neighbour lists: nearest) right vertex not yet taken, and each proposed right
  vertex accepts one proposer. Only a yes is conclusive.
  """
  taken = np.zeros(num_right + 1, bool)
  taken[-1] = True  # padding (-1) indexes this sentinel: never free
  free = nbr
  for _ in range(rounds):
    ok = ~taken[free]
    if not ok.any(axis=1).all():
      return False
    first = free[np.arange(len(free)), ok.argmax(axis=1)]
    won, idx = np.unique(first, return_index=True)
    taken[won] = True
    lost = np.ones(len(free), bool)
    lost[idx] = False
    free = free[lost]
    if free.size == 0:
      return True
  return False


def max_matching_size(nbr: np.ndarray, num_right: int) -> int:
  """Size of a maximum matching of a bipartite graph given by neighbour lists.

  Row ``u`` of ``nbr`` lists the right-vertex ids (in ``[0, num_right)``) adjacent to
  left vertex ``u``, padded with negative entries.

  Solved as a unit-capacity maximum flow, source -> left -> right -> sink, with
  ``scipy.sparse.csgraph.maximum_flow`` (Dinic, ``O(E sqrt(V))`` on such networks).
  Not ``maximum_bipartite_matching``: its Hopcroft-Karp depth-first search never marks
  dead ends, which makes it exponentially slow on the layered graphs that nearby
  pixel sets form (scipy issue #26147; minutes for one ~1000-pixel threshold of a
  CrackForest image).
  """
  edge = nbr >= 0
  right = nbr[edge]  # row-major: grouped by left vertex
  if right.size == 0:
    return 0
  deg = np.count_nonzero(edge, axis=1)
  nl = deg.size
  if deg.all() and greedy_matches_all_left(nbr, num_right):
    return nl  # a matching covering the left side is maximum; no flow needed
  # Compact the right ids to those adjacent to some left vertex.
  used = np.zeros(num_right, bool)
  used[right] = True
  compact = np.cumsum(used) - 1
  nr = int(compact[-1]) + 1
  # Nodes: 0 source, 1..nl left, nl+1..nl+nr right, nl+nr+1 sink.
  sink = nl + nr + 1
  ne = right.size
  indptr = np.empty(sink + 2, np.int32)
  indptr[0] = 0
  indptr[1] = nl
  np.cumsum(deg, out=indptr[2 : nl + 2])
  indptr[2 : nl + 2] += nl
  indptr[nl + 2 : sink + 1] = np.arange(nl + ne + 1, nl + ne + nr + 1)
  indptr[sink + 1] = nl + ne + nr
  indices = np.empty(nl + ne + nr, np.int32)
  indices[:nl] = np.arange(1, nl + 1)
  indices[nl : nl + ne] = compact[right] + nl + 1
  indices[nl + ne :] = sink
  graph = sparse.csr_array(
    (np.ones(indices.size, np.int32), indices, indptr), shape=(sink + 1, sink + 1)
  )
  return int(maximum_flow(graph, 0, sink, method='dinic').flow_value)


def tolerance_image(
  prob: np.ndarray, gt: np.ndarray, thresholds: np.ndarray, max_dist: float, thin_gt: bool
) -> np.ndarray:
  """The tolerance protocols' counts of one image: int64 (T, 3), [matched, thinned
  predictions, GT pixels] per threshold of `thresholds` (inputs already checked).

  At each threshold the prediction ``prob >= t`` is thinned and its pixels are matched one to
  one to ground-truth pixels (thinned first with `thin_gt`) within ``max_dist`` of the image
  diagonal (`max_matching_size`). One ground truth, so matched predictions == matched GT
  pixels == matching size.
  """
  h, w = prob.shape
  radius = max_dist * math.sqrt(h * h + w * w)  # correspondPixels: maxDist * diagonal
  out = np.zeros((thresholds.size, 3), np.int64)
  gy, gx = np.nonzero(gt)
  if thin_gt:
    gy, gx = thin_coords(gy, gx)
  num_gt = gy.size
  out[:, 2] = num_gt

  # Pixel pairs closer than or at `radius` (BSDS drops a pair iff d > maxDist).
  r = int(math.floor(radius))
  dy, dx = np.mgrid[-r : r + 1, -r : r + 1]
  near_offsets = np.sqrt(dy * dy + dx * dx) <= radius
  # GT pixel ids on a grid padded by r, -1 elsewhere; offsets then never leave it.
  stride = w + 2 * r
  gid = np.full((h + 2 * r) * stride, -1, np.int64)
  gid[(gy + r) * stride + gx + r] = np.arange(num_gt)
  # Nearest offsets first: the greedy start of max_matching_size tries them in order.
  by_dist = np.argsort((dy * dy + dx * dx)[near_offsets], kind='stable')
  offs = (dy[near_offsets] * stride + dx[near_offsets])[by_dist]
  # Pixels with some GT pixel within the radius (only they can be matched).
  near = np.zeros((h + 2 * r) * stride, bool)
  if num_gt:
    g_lin = (gy + r) * stride + gx + r
    near[(g_lin[:, None] + offs).ravel()] = True
  near = near.reshape(h + 2 * r, stride)[r : r + h, r : r + w]

  # Predictions are nested: sort candidate pixels by decreasing prob once; the
  # prediction at threshold i is a prefix of that order. Thresholds are compared in the
  # map's dtype; neighbours that coincide there give the same map (reused below).
  flat = prob.ravel()
  thr = thresholds.astype(flat.dtype)
  cand = np.flatnonzero(flat >= thr[0])
  vals = flat[cand]
  order = np.argsort(vals, kind='stable')
  counts = cand.size - np.searchsorted(vals[order], thr, side='left')
  cand = cand[order[::-1]]
  cy, cx = np.divmod(cand, w)
  prev_k, prev_lin = -1, None
  for i, k in enumerate(counts):
    if k == prev_k:  # same binary map as the previous threshold
      out[i, :2] = out[i - 1, :2]
      continue
    prev_k = k
    ty, tx = thin_coords(cy[:k], cx[:k])
    out[i, 1] = ty.size
    if num_gt == 0 or ty.size == 0:
      prev_lin = None
      continue
    keep = near[ty, tx]
    lin = (ty[keep] + r) * stride + tx[keep] + r
    if prev_lin is not None and np.array_equal(lin, prev_lin):
      out[i, 0] = out[i - 1, 0]  # same matchable pixels -> same graph
      continue
    prev_lin = lin
    if lin.size:
      out[i, 0] = max_matching_size(gid[lin[:, None] + offs], num_gt)
  return out
