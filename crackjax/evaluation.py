"""Crack-detection evaluation: precision, recall and F1 at ODS and OIS, plus AP.

Everything here is numpy/scipy and runs on the host after the model has produced
per-pixel crack probabilities. Images may have different sizes, so inputs are
sequences of arrays rather than one stacked batch.

Protocols
---------
``'strict'``: pixel-to-pixel matching. At threshold ``t`` a pixel is predicted to be
crack iff ``prob > t`` (strictly greater: a probability of exactly 0.5 is *not* crack
at ``t = 0.5``). The thresholds are ``t_i = i / num_thresholds`` for
``i = 0 .. num_thresholds - 1`` (0.00, 0.01, ..., 0.99 by default), each represented
in the probability array's own floating dtype, so a float32 map holding
``np.float32(0.29)`` compares equal to threshold 0.29, exactly as the plain numpy
loop ``prob > i / n`` does. A predicted pixel is a true positive iff its ground-truth
pixel is crack.

``'tolerance'``: the BSDS boundary benchmark (``evaluation_bdry_image`` /
``correspondPixels`` / ``collect_eval_bdry``) that the CrackForest, HED and RCF
evaluations use. Thresholds ``t_i = i / (n + 1)``, ``i = 1..n`` (0.01, ..., 0.99 for the
default ``n = 99``), compared in the probability's dtype, and a pixel is predicted iff
``prob >= t`` (inclusive, unlike 'strict'). The binary prediction is thinned to
one-pixel-wide lines (:func:`thin`, equal to ``skimage.morphology.thin`` and MATLAB's
``bwmorph(bw, 'thin', Inf)``); the ground truth is used as given (BSDS does not thin
it). Predicted and ground-truth pixels are matched one-to-one when their Euclidean
distance is ``<= 0.0075 * sqrt(H^2 + W^2)`` (correspondPixels drops a pair iff
``d > maxDist``), by a maximum-cardinality bipartite matching (a unit-capacity
``scipy.sparse.csgraph.maximum_flow``; not ``maximum_bipartite_matching``, which is
exponentially slow on such graphs, see :func:`_max_matching_size`). correspondPixels computes a
min-cost assignment in which each unmatched pixel costs ``100 * maxDist``; that
minimises the distance moved too, but the metric only uses the number of matched
pixels, and the min-cost assignment has maximum cardinality (except in contrived
cases needing an augmenting path of over ~200 pixel pairs), so the counts agree.
Counts: ``matched_pred`` and ``matched_gt`` are both the size of the matching,
``num_pred`` the number of thinned predicted pixels, ``num_gt`` of ground-truth pixels.

``'tolerance_thin_gt'``: as 'tolerance' but the ground truth is thinned too. For
region-style ground truth several pixels wide (CrackForest test masks: ~3.2 px)
a one-pixel prediction can match only about one GT pixel per crack cross-section,
capping 'tolerance' recall near 1/width; thinning the GT removes that cap.

Protocols are looked up in the explicit dict ``_PROTOCOLS``. Each protocol maps
the images to four count arrays (see :class:`ThresholdCounts`) and everything
downstream (ODS, OIS, AP) is shared; the tolerance protocols switch on the BSDS
variants of ODS, AP and the OIS tie-break (``_Protocol.bsds``), marked [BSDS] below.

Conventions (no NaN is ever produced)
-------------------------------------
* Precision ``P = matched_pred / max(num_pred, 1)``: when nothing is predicted,
  ``P = 0`` (the BSDS benchmark convention). For 'strict', ``P = TP / max(TP+FP, 1)``.
* Recall ``R = matched_gt / max(num_gt, 1)``: when the ground truth has no crack
  pixel, ``R = 0``. For 'strict', ``R = TP / max(TP+FN, 1)``.
* ``F1 = 2PR / (P + R)``, and ``F1 = 0`` when ``P + R = 0``. Hence an image with no
  crack pixel always has ``F1 = 0`` (this pulls ``ois_mean_f1`` down; the pooled
  ``ois`` is unaffected by that, which is one reason it is the default).
* Maxima are taken with exact float equality; ties are broken as follows.
* ODS threshold: the threshold maximising the dataset F1 (counts summed over all
  images). Ties -> fewest errors (false positives + false negatives), then the
  highest threshold. So a dataset whose F1 is 0 everywhere gets the threshold with
  the fewest predictions, never blindly threshold 0. This grid point is reported as
  ``ods_grid`` and is what the OIS rules below call "the ODS threshold".
* [BSDS] ``ods`` is BSDS ``maxF``: for each pair of consecutive thresholds and
  ``d`` in ``linspace(0, 1, 100)``, threshold, R and P are interpolated linearly,
  ``x_i * d + x_{i-1} * (1 - d)``, and F is recomputed; the first maximum in scan order
  (from the lowest threshold, grid point 1 included) is reported with its
  interpolated threshold, P and R. F is ``2PR / (P + R)``, 0 when ``P + R = 0``.
  (For 'strict', ``ods`` equals ``ods_grid``.)
* OIS threshold of one image:

  1. gt has no crack pixel -> the threshold with the fewest predicted positives
     (= false positives); ties -> the highest threshold. (For 'strict', predicted
     positives never increase with the threshold, so this is always the highest
     threshold; thinned predictions need not be monotone.)
  2. otherwise, if the image's F1 is 0 at every threshold -> the ODS threshold
     (taking threshold 0 would flood the pooled counts with false positives).
  3. otherwise, among the thresholds reaching the image's maximal F1, the one
     nearest the ODS threshold; equal distance -> the higher threshold.
     [BSDS] the highest of them (collect_eval_bdry's ``ff(end)``).

  Rule 1 is what BSDS does too (F is 0 at every threshold, ``ff(end)`` is the
  highest); rule 2 differs from BSDS, which would also take the highest threshold.

* ``ois`` (default OIS): the four counts of each image at its OIS threshold are
  summed over images and P/R/F1 are computed from the pooled counts.
  ``ois_mean_f1``: the mean over images of each image's F1 at its OIS threshold
  (the other convention in the literature).
* ``ap``: area under the dataset precision-recall curve over the thresholds, using
  the monotone interpolated precision ``p_interp(r) = max_{r' >= r} p(r')``:
  ``AP = sum_k (r_k - r_{k-1}) * p_interp(r_k)`` over the distinct recalls sorted
  ascending, with ``r_0 = 0``. The area stops at the largest recall reached
  (recall at threshold 0), with no extrapolation to recall 1.
* [BSDS] ``ap`` is collect_eval_bdry's ``Area_PR``: the distinct recalls of the
  dataset curve sorted ascending, each with the precision of its last occurrence in
  threshold order (the highest such threshold, as MATLAB's pre-2013 ``unique``);
  precision is interpolated linearly (``interp1``) at ``r = 0, 0.01, ..., 1`` (101
  points), 0 outside the recall range reached, and ``AP = 0.01 * sum`` of the 101
  values (a rectangle rule, not a trapezoid; no monotone envelope). A curve with a
  single distinct recall (e.g. a binary prediction, even a perfect one) has AP 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import maximum_flow

__all__ = [
  'ThresholdCounts',
  'SUPPORTED_PROTOCOLS',
  'TOLERANCE_MAX_DIST',
  'counts_per_threshold',
  'evaluate',
  'thin',
  'tolerance_counts',
]


class ThresholdCounts(NamedTuple):
  """Per-image, per-threshold counts, each an int64 array of shape (num_images, T).

  Precision is ``matched_pred / num_pred`` and recall ``matched_gt / num_gt``. For
  the strict protocol ``matched_pred == matched_gt == TP``, ``num_pred = TP + FP``
  and ``num_gt = TP + FN``; a tolerance protocol matches predicted and ground-truth
  pixels separately, which is why the two matched counts are kept apart.
  """

  matched_pred: np.ndarray
  num_pred: np.ndarray
  matched_gt: np.ndarray
  num_gt: np.ndarray


# ---------------------------------------------------------------------------
# Input checking
# ---------------------------------------------------------------------------


def _squeeze_channel(a: np.ndarray) -> np.ndarray:
  """Drops a trailing singleton channel so HxW and HxWx1 compare equal."""
  if a.ndim == 3 and a.shape[-1] == 1:
    return a[..., 0]
  return a


def _check_pair(index: int, prob: Any, gt: Any) -> tuple[np.ndarray, np.ndarray]:
  """Validates one (prob, gt) pair and returns (prob, gt as bool), both HxW.

  Raises:
      ValueError: naming ``index`` and the problem.
  """
  prob = np.asarray(prob)
  gt = np.asarray(gt)
  prob_shape, gt_shape = prob.shape, gt.shape  # as given, for the messages
  where = f'image {index}'
  if prob.dtype.kind not in 'fiub':
    raise ValueError(f'{where}: probs must be real numbers, got dtype {prob.dtype}')
  if prob.dtype.kind != 'f':
    # Integer/bool maps are legal only as 0/1 maps; float64 keeps them exact.
    prob = prob.astype(np.float64)
  prob = _squeeze_channel(prob)
  gt = _squeeze_channel(gt)
  if prob.ndim != 2:
    raise ValueError(f'{where}: probs must have shape HxW or HxWx1, got {prob_shape}')
  if gt.shape != prob.shape:
    raise ValueError(f'{where}: shape mismatch between probs {prob_shape} and gt {gt_shape}')
  if prob.size == 0:
    raise ValueError(f'{where}: image has no pixels (shape {prob_shape})')
  if np.isnan(prob).any():
    raise ValueError(f'{where}: probs contain NaN')
  lo, hi = prob.min(), prob.max()
  if lo < 0 or hi > 1:
    raise ValueError(f'{where}: probs must lie in [0, 1], got range [{lo}, {hi}]')
  if gt.dtype != np.bool_:
    if gt.dtype.kind not in 'fiu':
      raise ValueError(f'{where}: gt must be binary, got dtype {gt.dtype}')
    bad = (gt != 0) & (gt != 1)
    if bad.any():
      values = np.unique(gt[bad])[:5].tolist()
      raise ValueError(f'{where}: gt must be binary (0/1), found values {values}')
    gt = gt == 1
  return prob, gt


# ---------------------------------------------------------------------------
# Strict protocol
# ---------------------------------------------------------------------------


def _thresholds_as(dtype: np.dtype, num_thresholds: int) -> np.ndarray:
  """Thresholds i/n in ``dtype``: what ``prob > i / n`` compares against in numpy."""
  return (np.arange(num_thresholds, dtype=np.float64) / num_thresholds).astype(dtype)


def _num_thresholds_below(prob: np.ndarray, num_thresholds: int) -> np.ndarray:
  """Returns, per pixel, ``k = #{i : t_i < prob}`` (an int in [0, n]).

  Then ``prob > t_i`` iff ``i < k``, which turns all thresholds into one histogram.
  ``ceil(prob * n)`` is the answer in exact arithmetic; rounding of the product and
  of the thresholds (e.g. float32(0.29) vs 0.29) can put it off by one near a
  threshold, so it is corrected by comparing against the dtype-exact thresholds.
  This is ~2x faster than ``np.searchsorted`` and gives the same result.
  """
  n = num_thresholds
  p = prob.ravel()
  thr = _thresholds_as(p.dtype, n)
  k = np.ceil(p.astype(np.float64) * n).astype(np.intp)
  np.clip(k, 0, n, out=k)
  # Loop rather than a single pass so the result stays exact even when thresholds
  # collide in a narrow dtype (huge n with float16); normally one pass is a no-op.
  while True:
    up = (k < n) & (thr[np.minimum(k, n - 1)] < p)
    down = (k > 0) & (thr[np.maximum(k - 1, 0)] >= p)
    if not (up.any() or down.any()):
      return k
    # up and down never hold together (thresholds are sorted).
    k += up
    k -= down


def _strict_counts(prob: np.ndarray, gt: np.ndarray, num_thresholds: int) -> np.ndarray:
  """Returns int64 (T, 2) array: predicted positives among [non-crack, crack] pixels."""
  n = num_thresholds
  k = _num_thresholds_below(prob, n)
  # One bincount for both classes: offset crack pixels by n + 1 bins.
  hist = np.bincount(k + gt.ravel().astype(np.intp) * (n + 1), minlength=2 * (n + 1))
  hist = hist.reshape(2, n + 1).astype(np.int64)
  # Predicted at threshold i <=> k > i, i.e. bins i+1..n: a reverse cumulative sum.
  above = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1]  # above[:, j] = sum_{k >= j}
  return above[:, 1:].T  # row i -> pixels with k >= i + 1


def counts_per_threshold(
  prob: np.ndarray, gt: np.ndarray, num_thresholds: int = 100
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Strict (pixel-to-pixel) TP/FP/FN of one image at every threshold at once.

  Identical to looping ``pred = prob > i / num_thresholds`` for each ``i``, with
  the threshold in ``prob``'s dtype, but one pass over the pixels.

  Args:
      prob: HxW or HxWx1 crack probabilities in [0, 1].
      gt: binary ground truth of the same size (bool or 0/1 numbers).
      num_thresholds: number of thresholds ``T``; thresholds are ``i / T``.

  Returns:
      ``(tp, fp, fn)``, each an int64 array of shape ``(T,)``.

  Raises:
      ValueError: on invalid inputs (reported as image 0).
  """
  _check_num_thresholds(num_thresholds)
  prob, gt = _check_pair(0, prob, gt)
  pos = _strict_counts(prob, gt, num_thresholds)
  fp, tp = pos[:, 0].copy(), pos[:, 1].copy()
  fn = np.int64(np.count_nonzero(gt)) - tp
  return tp, fp, fn


def _strict_protocol(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], num_thresholds: int
) -> ThresholdCounts:
  """Pixel-to-pixel counts for all images (inputs already validated)."""
  tp = np.empty((len(probs), num_thresholds), np.int64)
  num_pred = np.empty_like(tp)
  num_gt = np.empty_like(tp)
  for j, (prob, gt) in enumerate(zip(probs, gts, strict=True)):
    pos = _strict_counts(prob, gt, num_thresholds)
    tp[j] = pos[:, 1]
    num_pred[j] = pos.sum(axis=1)
    num_gt[j] = np.count_nonzero(gt)
  return ThresholdCounts(tp, num_pred, tp.copy(), num_gt)


# ---------------------------------------------------------------------------
# Tolerance protocol (BSDS boundary benchmark)
# ---------------------------------------------------------------------------

#: BSDS ``maxDist``: matching tolerance as a fraction of the image diagonal.
TOLERANCE_MAX_DIST = 0.0075

# Neighbour i of a pixel has bit 2**i of the neighbourhood code; the same code as
# skimage.morphology.thin's correlation mask [[8, 4, 2], [16, 0, 1], [32, 64, 128]].
_NB_DY = np.array([0, -1, -1, -1, 0, 1, 1, 1])
_NB_DX = np.array([1, 1, 0, -1, -1, -1, 0, 1])


def _thin_luts() -> np.ndarray:
  """(2, 256) deletion tables of the two sub-iterations (Guo & Hall 1989).

  Built from the same conditions G1, G2, G3 / G3' as ``skimage.morphology.thin``
  (which reproduces MATLAB's ``bwmorph(bw, 'thin', Inf)``).
  """
  b = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)  # b[code, i]
  g1 = sum((~b[:, i] & (b[:, i + 1] | b[:, (i + 2) % 8])).astype(int) for i in (0, 2, 4, 6))
  n1 = sum((b[:, k] | b[:, k - 1]).astype(int) for k in (1, 3, 5, 7))
  n2 = sum((b[:, k] | b[:, (k + 1) % 8]).astype(int) for k in (1, 3, 5, 7))
  g12 = (g1 == 1) & np.isin(np.minimum(n1, n2), (2, 3))
  g3 = ~((b[:, 1] | b[:, 2] | ~b[:, 7]) & b[:, 0])
  g3p = ~((b[:, 5] | b[:, 6] | ~b[:, 3]) & b[:, 4])
  return np.stack([g12 & g3, g12 & g3p])


_THIN_LUTS = _thin_luts()


def _dedupe(idx: np.ndarray, stamp: np.ndarray) -> np.ndarray:
  """``idx`` without repeats (order not kept), in O(len(idx)); ``stamp`` is scratch."""
  pos = np.arange(idx.size)
  stamp[idx] = pos  # for repeated indices one position wins
  return idx[stamp[idx] == pos]


def _thin_coords(ys: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Thins the foreground pixels (ys, xs); returns the remaining pixels' (ys, xs).

  The same result as ``skimage.morphology.thin`` (parallel sub-iterations with the
  tables above, until nothing changes), but each sub-iteration only re-examines
  pixels whose 8-neighbourhood changed since that sub-iteration last ran: a pixel's
  deletion decision depends only on its neighbourhood code, so the others cannot
  change. Those are the neighbours of the pixels deleted by the previous two
  sub-iterations. The neighbourhood codes are kept up to date incrementally (a
  deletion clears one bit in each neighbour's code), so the work is proportional to
  the foreground and the deletions, not to the image. Pixels come back in the order
  given (restricted to the survivors).
  """
  if ys.size == 0:
    return ys, xs
  y0, x0 = int(ys.min()), int(xs.min())
  h, w = int(ys.max()) - y0 + 1, int(xs.max()) - x0 + 1
  stride = w + 2  # one pixel of zero padding on every side (mode='constant')
  img = np.zeros((h + 2) * stride, np.uint8)
  fg = (ys - y0 + 1) * stride + (xs - x0 + 1)
  img[fg] = 1
  offs = _NB_DY * stride + _NB_DX
  # code[p] has bit k set iff pixel p + offs[k] is foreground (valid on the foreground).
  code = np.zeros(img.size, np.uint8)
  code[fg] = np.packbits(img[fg[:, None] + offs], axis=1, bitorder='little')[:, 0]
  stamp = np.empty(img.size, np.intp)  # scratch for sort-free de-duplication
  changed = [fg, fg]  # neighbours of the deletions of the last two sub-iterations
  sub = 0
  while changed[0].size or changed[1].size:
    if changed[0] is changed[1]:
      cand = changed[0]
    else:
      cand = _dedupe(np.concatenate(changed), stamp)
    cand = cand[img[cand] == 1]
    gone = cand[_THIN_LUTS[sub][code[cand]]]
    if gone.size:
      img[gone] = 0  # all deletions of a sub-iteration happen at once
      for k in range(8):
        code[gone - offs[k]] -= np.uint8(1 << k)
      nbrs = (gone[:, None] + offs).ravel()
      nbrs = nbrs[img[nbrs] == 1]
    else:
      nbrs = fg[:0]
    changed = [changed[1], nbrs]
    sub ^= 1
  left = fg[img[fg] == 1]
  return left // stride - 1 + y0, left % stride - 1 + x0


def thin(mask: np.ndarray) -> np.ndarray:
  """Morphological thinning to one-pixel-wide lines, ``bwmorph(mask, 'thin', Inf)``.

  Equal to ``skimage.morphology.thin(mask)`` (tested), computed sparsely.

  Args:
      mask: 2-D array; nonzero is foreground.

  Returns:
      bool array of the same shape.
  """
  mask = np.asarray(mask)
  if mask.ndim != 2:
    raise ValueError(f'thin expects a 2-D mask, got shape {mask.shape}')
  out = np.zeros(mask.shape, bool)
  out[_thin_coords(*np.nonzero(mask))] = True
  return out


def _tolerance_thresholds(num_thresholds: int) -> np.ndarray:
  """BSDS thresholds ``linspace(1/(n+1), 1-1/(n+1), n)``: 0.01..0.99 for n = 99."""
  return np.arange(1, num_thresholds + 1, dtype=np.float64) / (num_thresholds + 1)


def _tolerance_image(
  prob: np.ndarray, gt: np.ndarray, num_thresholds: int, max_dist: float, thin_gt: bool
) -> np.ndarray:
  """Returns int64 (T, 3): [matched, thinned predictions, GT pixels] per threshold.

  One ground truth, so matched predictions == matched GT pixels == matching size.
  """
  h, w = prob.shape
  radius = max_dist * math.sqrt(h * h + w * w)  # correspondPixels: maxDist * diagonal
  out = np.zeros((num_thresholds, 3), np.int64)
  gy, gx = np.nonzero(gt)
  if thin_gt:
    gy, gx = _thin_coords(gy, gx)
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
  # Nearest offsets first: the greedy start of _max_matching_size tries them in order.
  by_dist = np.argsort((dy * dy + dx * dx)[near_offsets], kind='stable')
  offs = (dy[near_offsets] * stride + dx[near_offsets])[by_dist]
  # Pixels with some GT pixel within the radius (only they can be matched).
  near = np.zeros((h + 2 * r) * stride, bool)
  if num_gt:
    g_lin = (gy + r) * stride + gx + r
    near[(g_lin[:, None] + offs).ravel()] = True
  near = near.reshape(h + 2 * r, stride)[r : r + h, r : r + w]

  # Predictions are nested: sort candidate pixels by decreasing prob once; the
  # prediction at threshold i is a prefix of that order.
  flat = prob.ravel()
  thr = _tolerance_thresholds(num_thresholds).astype(flat.dtype)
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
    ty, tx = _thin_coords(cy[:k], cx[:k])
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
      out[i, 0] = _max_matching_size(gid[lin[:, None] + offs], num_gt)
  return out


def _greedy_matches_all_left(nbr: np.ndarray, num_right: int, rounds: int = 4) -> bool:
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


def _max_matching_size(nbr: np.ndarray, num_right: int) -> int:
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
  if deg.all() and _greedy_matches_all_left(nbr, num_right):
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


def tolerance_counts(
  prob: np.ndarray,
  gt: np.ndarray,
  num_thresholds: int = 99,
  max_dist: float = TOLERANCE_MAX_DIST,
  thin_gt: bool = False,
) -> ThresholdCounts:
  """BSDS-style tolerant counts of one image at every threshold.

  At threshold ``t_i = i / (num_thresholds + 1)``, ``i = 1..num_thresholds``, the
  prediction ``prob >= t_i`` is thinned (:func:`thin`) and its pixels are matched
  one-to-one to ground-truth pixels at Euclidean distance ``<= max_dist * diagonal``
  by a maximum bipartite matching. The ground truth is used as given (BSDS), or
  thinned first with ``thin_gt=True``.

  Args:
      prob: HxW or HxWx1 crack probabilities in [0, 1].
      gt: binary ground truth of the same size.
      num_thresholds: number of thresholds ``T``.
      max_dist: tolerance as a fraction of the image diagonal (BSDS ``maxDist``).
      thin_gt: thin the ground truth too (``num_gt`` then counts thinned pixels).

  Returns:
      :class:`ThresholdCounts` of int64 arrays of shape ``(T,)``.
  """
  _check_num_thresholds(num_thresholds)
  if not max_dist >= 0:
    raise ValueError(f'max_dist must be >= 0, got {max_dist}')
  prob, gt = _check_pair(0, prob, gt)
  c = _tolerance_image(prob, gt, int(num_thresholds), float(max_dist), bool(thin_gt))
  return ThresholdCounts(c[:, 0], c[:, 1], c[:, 0].copy(), c[:, 2])


def _tolerance_protocol(
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  num_thresholds: int,
  thin_gt: bool = False,
) -> ThresholdCounts:
  """Tolerant counts for all images (inputs already validated)."""
  c = np.stack(
    [
      _tolerance_image(p, g, num_thresholds, TOLERANCE_MAX_DIST, thin_gt)
      for p, g in zip(probs, gts, strict=True)
    ]
  )
  return ThresholdCounts(c[..., 0], c[..., 1], c[..., 0].copy(), c[..., 2])


def _tolerance_thin_gt_protocol(
  probs: Sequence[np.ndarray], gts: Sequence[np.ndarray], num_thresholds: int
) -> ThresholdCounts:
  return _tolerance_protocol(probs, gts, num_thresholds, thin_gt=True)


# ---------------------------------------------------------------------------
# Protocol registry
# ---------------------------------------------------------------------------


def _strict_thresholds(num_thresholds: int) -> np.ndarray:
  return np.arange(num_thresholds, dtype=np.float64) / num_thresholds


class _Protocol(NamedTuple):
  counts: Callable[[Sequence[np.ndarray], Sequence[np.ndarray], int], ThresholdCounts]
  thresholds: Callable[[int], np.ndarray]  # nominal thresholds (float64) for n
  default_num_thresholds: int
  description: str
  bsds: bool  # BSDS aggregation: interpolated ODS, BSDS AP, OIS ties -> highest t


# name -> protocol. New protocols go here.
_PROTOCOLS: dict[str, _Protocol] = {
  'strict': _Protocol(
    _strict_protocol,
    _strict_thresholds,
    100,
    'pixel-to-pixel matching: a pixel is crack iff prob > t, '
    'thresholds t = i/num_thresholds for i = 0..num_thresholds-1',
    False,
  ),
  'tolerance': _Protocol(
    _tolerance_protocol,
    _tolerance_thresholds,
    99,
    'BSDS boundary benchmark: prediction prob >= t thinned to one pixel, pixels matched '
    f'one-to-one to ground truth within {TOLERANCE_MAX_DIST} x image diagonal; '
    'thresholds t = i/(num_thresholds+1) for i = 1..num_thresholds; '
    'ODS interpolated between neighbouring thresholds, AP as BSDS collect_eval_bdry; '
    'ground truth used as given',
    True,
  ),
  'tolerance_thin_gt': _Protocol(
    _tolerance_thin_gt_protocol,
    _tolerance_thresholds,
    99,
    "as 'tolerance' (BSDS boundary benchmark), but the ground truth is thinned to one "
    'pixel too before matching (for region-style ground truth several pixels wide)',
    True,
  ),
}
SUPPORTED_PROTOCOLS: tuple[str, ...] = tuple(_PROTOCOLS)


# ---------------------------------------------------------------------------
# Shared aggregation
# ---------------------------------------------------------------------------


def _prf(
  matched_pred: np.ndarray, num_pred: np.ndarray, matched_gt: np.ndarray, num_gt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """P, R, F1 elementwise with the module's 0-denominator conventions (no NaN)."""
  p = matched_pred / np.maximum(num_pred, 1)
  r = matched_gt / np.maximum(num_gt, 1)
  denom = p + r
  f1 = np.divide(2 * p * r, denom, out=np.zeros_like(denom), where=denom > 0)
  return p, r, f1


def _average_precision(precision: np.ndarray, recall: np.ndarray) -> float:
  """Area under the P-R curve with monotone interpolated precision (see module doc)."""
  order = np.argsort(recall, kind='stable')
  r = recall[order]
  p = precision[order]
  # p_interp(r_k) = max precision at recall >= r_k: reverse running maximum.
  p_interp = np.maximum.accumulate(p[::-1])[::-1]
  dr = np.diff(r, prepend=0.0)
  return float(np.sum(dr * p_interp))


def _bsds_fmeasure(p: np.ndarray, r: np.ndarray) -> np.ndarray:
  """BSDS ``fmeasure``: ``2pr / (p + r + ((p + r) == 0))``."""
  s = p + r
  return 2 * p * r / (s + (s == 0))


def _bsds_max_f(
  thresholds: np.ndarray, precision: np.ndarray, recall: np.ndarray
) -> tuple[float, float, float, float]:
  """BSDS ``maxF``: best F over the curve linearly interpolated between thresholds.

  For consecutive thresholds i-1, i and d in ``linspace(0, 1, 100)``, t, R and P are
  ``x(i) * d + x(i-1) * (1 - d)``; the first maximum in that scan order (threshold 1
  first) wins, as the benchmark's strict ``f > bestF`` update does.

  Returns:
      (threshold, precision, recall, f1), interpolated.
  """
  d = np.linspace(0.0, 1.0, 100)

  def lerp(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x[:1], (x[1:, None] * d + x[:-1, None] * (1 - d)).ravel()])

  t, p, r = lerp(thresholds), lerp(precision), lerp(recall)
  k = int(np.argmax(_bsds_fmeasure(p, r)))
  return float(t[k]), float(p[k]), float(r[k]), float(_bsds_fmeasure(p[k], r[k]))


def _bsds_average_precision(precision: np.ndarray, recall: np.ndarray) -> float:
  """BSDS ``Area_PR`` of collect_eval_bdry (see the module docstring)."""
  # [Ru, indR] = unique(R) with MATLAB's (pre-2013) last occurrence for repeats.
  order = np.lexsort((np.arange(recall.size), recall))
  r_sorted = recall[order]
  last = np.append(r_sorted[1:] != r_sorted[:-1], True)
  ru, pu = r_sorted[last], precision[order][last]
  if ru.size <= 1:
    return 0.0
  ri = np.arange(101) / 100  # 0 : 0.01 : 1
  p_int = np.interp(ri, ru, pu)
  p_int[(ri < ru[0]) | (ri > ru[-1])] = 0.0  # interp1 gives NaN outside -> 0
  return float(np.sum(p_int) * 0.01)


def _pick_ods(f1: np.ndarray, errors: np.ndarray) -> int:
  """Max F1; ties -> fewest errors; then highest threshold."""
  cand = np.flatnonzero(f1 == f1.max())
  cand = cand[errors[cand] == errors[cand].min()]
  return int(cand[-1])


def _pick_ois(
  f1: np.ndarray, num_pred: np.ndarray, has_crack: bool, ods: int, highest_on_ties: bool
) -> int:
  """OIS threshold index of one image (rules 1-3 of the module docstring)."""
  if not has_crack:
    cand = np.flatnonzero(num_pred == num_pred.min())
    return int(cand[-1])
  best = f1.max()
  if best <= 0:
    return ods
  cand = np.flatnonzero(f1 == best)
  if highest_on_ties:  # BSDS: ff = find(F == max(F)); ff(end)
    return int(cand[-1])
  dist = np.abs(cand - ods)
  cand = cand[dist == dist.min()]
  return int(cand[-1])  # equal distance on both sides -> the higher threshold


def _check_num_thresholds(num_thresholds: int) -> None:
  if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, int | np.integer):
    raise ValueError(f'num_thresholds must be an int, got {num_thresholds!r}')
  if num_thresholds < 1:
    raise ValueError(f'num_thresholds must be >= 1, got {num_thresholds}')


def evaluate(
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  *,
  protocol: str = 'strict',
  num_thresholds: int | None = None,
) -> dict[str, Any]:
  """Evaluates crack probability maps against binary ground truth.

  See the module docstring for the protocol, the 0/0 conventions and tie-breaks.

  Args:
      probs: per-image float arrays in [0, 1], HxW or HxWx1; sizes may differ
          between images.
      gts: per-image binary arrays (bool or 0/1), same size as their prob.
      protocol: matching protocol; one of ``SUPPORTED_PROTOCOLS``.
      num_thresholds: number of thresholds; ``None`` -> the protocol's default
          (strict: 100, thresholds ``i / n`` for ``i = 0..n-1``; tolerance: 99,
          thresholds ``i / (n + 1)`` for ``i = 1..n``).

  Returns:
      A JSON-serialisable dict (python floats/ints/lists only)::

          {'protocol', 'protocol_description', 'num_images', 'num_thresholds',
           'ods': {'precision', 'recall', 'f1', 'threshold'},
           'ods_grid': {'precision', 'recall', 'f1', 'threshold'},
           'ois': {'precision', 'recall', 'f1', 'pooling'},
           'ois_mean_f1', 'ap',
           'curve': {'thresholds', 'precision', 'recall', 'f1'},   # dataset curve
           'per_image': [{'index', 'threshold', 'precision', 'recall', 'f1'}, ...]}

  Raises:
      ValueError: unknown protocol (the message lists the supported ones), bad
          ``num_thresholds``, length mismatch, or a bad image (the message names the
          image index: shape mismatch, NaN, values outside [0, 1], non-binary gt).
  """
  if protocol not in _PROTOCOLS:
    raise ValueError(
      f'unknown protocol {protocol!r}; supported protocols: {list(SUPPORTED_PROTOCOLS)}'
    )
  spec = _PROTOCOLS[protocol]
  if num_thresholds is None:
    num_thresholds = spec.default_num_thresholds
  _check_num_thresholds(num_thresholds)
  num_thresholds = int(num_thresholds)
  probs = list(probs)
  gts = list(gts)
  if len(probs) != len(gts):
    raise ValueError(f'got {len(probs)} probability maps but {len(gts)} ground truths')
  if not probs:
    raise ValueError('no images to evaluate')
  checked = [_check_pair(i, p, g) for i, (p, g) in enumerate(zip(probs, gts, strict=True))]
  probs = [c[0] for c in checked]
  gts = [c[1] for c in checked]

  c = spec.counts(probs, gts, num_thresholds)
  thresholds = spec.thresholds(num_thresholds)

  # ODS: one threshold for the whole dataset, from counts summed over images.
  total = ThresholdCounts(*(a.sum(axis=0) for a in c))
  p_ds, r_ds, f1_ds = _prf(*total)
  errors_ds = (total.num_pred - total.matched_pred) + (total.num_gt - total.matched_gt)
  ods = _pick_ods(f1_ds, errors_ds)
  ods_grid = {
    'precision': float(p_ds[ods]),
    'recall': float(r_ds[ods]),
    'f1': float(f1_ds[ods]),
    'threshold': float(thresholds[ods]),
  }
  if spec.bsds:
    t, p, r, f = _bsds_max_f(thresholds, p_ds, r_ds)
    ods_result = {'precision': p, 'recall': r, 'f1': f, 'threshold': t}
    ap = _bsds_average_precision(p_ds, r_ds)
  else:
    ods_result = dict(ods_grid)
    ap = _average_precision(p_ds, r_ds)

  # OIS: one threshold per image.
  p_im, r_im, f1_im = _prf(*c)
  chosen = np.array(
    [
      _pick_ois(f1_im[j], c.num_pred[j], bool(c.num_gt[j, 0] > 0), ods, spec.bsds)
      for j in range(len(probs))
    ],
    dtype=np.intp,
  )
  rows = np.arange(len(probs))
  pooled = ThresholdCounts(*(np.sum(a[rows, chosen]) for a in c))
  p_ois, r_ois, f1_ois = _prf(*(np.asarray(a) for a in pooled))

  per_image = [
    {
      'index': int(j),
      'threshold': float(thresholds[t]),
      'precision': float(p_im[j, t]),
      'recall': float(r_im[j, t]),
      'f1': float(f1_im[j, t]),
    }
    for j, t in zip(rows, chosen, strict=True)
  ]
  return {
    'protocol': protocol,
    'protocol_description': spec.description,
    'num_images': len(probs),
    'num_thresholds': num_thresholds,
    'ods': ods_result,
    'ods_grid': ods_grid,
    'ois': {
      'precision': float(p_ois),
      'recall': float(r_ois),
      'f1': float(f1_ois),
      'pooling': "counts pooled over images at each image's best threshold",
    },
    'ois_mean_f1': float(f1_im[rows, chosen].mean()),
    'ap': ap,
    'curve': {
      'thresholds': thresholds.tolist(),
      'precision': p_ds.tolist(),
      'recall': r_ds.tolist(),
      'f1': f1_ds.tolist(),
    },
    'per_image': per_image,
  }
