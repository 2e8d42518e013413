"""Maximum-cardinality bipartite matching, as used by the tolerance protocols.

Left vertices are predicted pixels, right vertices ground-truth pixels, and an edge
joins two pixels within the matching tolerance; the matching size is the number of
matched pixels of each side.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import maximum_flow


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
