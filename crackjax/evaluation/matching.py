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

from crackjax.evaluation.thinning import thin_coords, thin_prefixes


def max_matching_size(nbr: np.ndarray, num_right: int) -> int:
  """Size of a maximum matching of a bipartite graph given by neighbour lists.

  Row ``u`` of ``nbr`` lists the right-vertex ids (in ``[0, num_right)``) adjacent to
  left vertex ``u``, padded with negative entries anywhere in the row.

  Hopcroft-Karp, compiled (`kernels.matching_size`), dead ends marked in each phase. Not
  scipy's ``maximum_bipartite_matching``: its depth-first search never marks dead ends, which
  makes it exponentially slow on the layered graphs that nearby pixel sets form (scipy issue
  #26147; minutes for one ~1000-pixel threshold of a CrackForest image).
  """
  from crackjax.evaluation import kernels  # numba: imported only where matching runs

  nbr = np.asarray(nbr, np.int64)
  if nbr.ndim != 2:
    raise ValueError(f'nbr must be 2-D (left vertices x neighbours), got shape {nbr.shape}')
  edge = nbr >= 0
  start = np.concatenate([[0], np.cumsum(np.count_nonzero(edge, axis=1))]).astype(np.int64)
  return int(kernels.matching_size(start, nbr[edge], int(num_right)))


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
  from crackjax.evaluation import kernels  # numba: imported only where matching runs

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
  # map's dtype; neighbours that coincide there give the same map (counted once).
  flat = prob.ravel()
  thr = thresholds.astype(flat.dtype)
  cand = np.flatnonzero(flat >= thr[0])
  vals = flat[cand]
  order = np.argsort(vals, kind='stable')
  counts = cand.size - np.searchsorted(vals[order], thr, side='left')
  cand = cand[order[::-1]]
  cy, cx = np.divmod(cand, w)
  # One compiled pass thins every distinct prefix, one more matches each (a threshold whose
  # matchable pixels equal the previous one's has its matching size).
  new_map = np.r_[True, counts[1:] != counts[:-1]]
  distinct = np.flatnonzero(new_map)
  pos, starts = thin_prefixes(cy, cx, counts[distinct])
  ty, tx = cy[pos], cx[pos]
  num_thinned = np.diff(starts)
  matched = np.zeros(distinct.size, np.int64)
  if num_gt:
    keep = near[ty, tx]
    left = (ty[keep] + r) * stride + tx[keep] + r
    left_starts = np.concatenate([[0], np.cumsum(keep)])[starts]
    matched = kernels.match_prefixes(left, left_starts, offs, gid, num_gt)
  # Each threshold takes the counts of the last distinct prefix at or before it.
  which = np.cumsum(new_map) - 1
  out[:, 0] = matched[which]
  out[:, 1] = num_thinned[which]
  return out
