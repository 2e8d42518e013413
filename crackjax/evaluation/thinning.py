"""Morphological thinning to one-pixel-wide lines (MATLAB ``bwmorph(bw, 'thin', Inf)``).

The tolerance protocols thin every binary prediction (and, for 'tolerance_thin_gt', the
ground truth) before matching; :func:`thin` equals ``skimage.morphology.thin`` but only
visits the foreground and the pixels whose neighbourhood changed, in a loop compiled by numba
(`crackjax.evaluation.kernels`). Kept for that: on 30 maps of 320x480, 0 differing pixels and
skimage's 8.20x slower (`python bench/thinning.py`, 28 Nov 2026, commit after 94dd5d0, 2-core
Intel Xeon with AVX-512, shared with a training run; the numpy version before it: 4.55x).
"""

from __future__ import annotations

import numpy as np

__all__ = ['thin']

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


def _neighbour_offsets(stride: int) -> np.ndarray:
  return (_NB_DY * stride + _NB_DX).astype(np.int64)


def thin_prefixes(ys: np.ndarray, xs: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Thins each prefix ``(ys[:k], xs[:k])``, ``k`` in `ks`, on its own (as `thin_coords`).

  The tolerance protocols' predictions at their thresholds are prefixes of one pixel order
  (decreasing probability); one compiled call thins them all (`kernels.thin_prefixes`).

  Returns:
    ``(pos, starts)``: the pixels left of prefix j are at positions
    ``pos[starts[j]:starts[j + 1]]`` of `ys`/`xs`, in the order given.
  """
  from crackjax.evaluation import kernels  # numba: imported only where thinning runs

  ks = np.asarray(ks, np.int64)
  if ys.size == 0 or not ks.size:
    return np.zeros(0, np.int64), np.zeros(ks.size + 1, np.int64)
  y0, x0 = int(ys.min()), int(xs.min())
  h, w = int(ys.max()) - y0 + 1, int(xs.max()) - x0 + 1
  stride = w + 2  # one pixel of zero padding on every side (mode='constant')
  lin = ((ys - y0 + 1) * stride + (xs - x0 + 1)).astype(np.int64)
  size = (h + 2) * stride
  return kernels.thin_prefixes(lin, ks, size, _neighbour_offsets(stride), _THIN_LUTS)


def thin_coords(ys: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Thins the foreground pixels (ys, xs); returns the remaining pixels' (ys, xs).

  The same result as ``skimage.morphology.thin`` (parallel sub-iterations with the tables
  above, until nothing changes), but each sub-iteration only re-examines pixels whose
  8-neighbourhood changed since that sub-iteration last ran: a pixel's deletion decision
  depends only on its neighbourhood code, so the others cannot change. Those are the
  neighbours of the pixels deleted by the previous two sub-iterations. The work is
  proportional to the foreground and the deletions, not to the image (compiled:
  `kernels.thin_prefixes`). Pixels come back in the order given (restricted to the survivors).
  """
  if ys.size == 0:
    return ys, xs
  pos, _ = thin_prefixes(ys, xs, np.array([ys.size]))
  return ys[pos], xs[pos]


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
  out[thin_coords(*np.nonzero(mask))] = True
  return out
