"""Crack-detection evaluation: precision, recall and F1 at ODS and OIS, plus AP.

Everything here is pure numpy and runs on the host after the model has produced
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

Protocols are looked up in the explicit dict ``_PROTOCOLS``. Each protocol maps
the images to four count arrays (see :class:`ThresholdCounts`) and everything
downstream (ODS, OIS, AP) is shared, so a tolerance-based protocol, where matched
predictions and matched ground-truth pixels can differ, slots in without changing
the aggregation.

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
  the fewest predictions, never blindly threshold 0.
* OIS threshold of one image:

  1. gt has no crack pixel -> the threshold with the fewest predicted positives
     (= false positives); ties -> the highest threshold. (Predicted positives never
     increase with the threshold, so this is always the highest threshold; its
     counts are the minimum false-positive counts.)
  2. otherwise, if the image's F1 is 0 at every threshold -> the ODS threshold
     (taking threshold 0 would flood the pooled counts with false positives).
  3. otherwise, among the thresholds reaching the image's maximal F1, the one
     nearest the ODS threshold; equal distance -> the higher threshold.

* ``ois`` (default OIS): the four counts of each image at its OIS threshold are
  summed over images and P/R/F1 are computed from the pooled counts.
  ``ois_mean_f1``: the mean over images of each image's F1 at its OIS threshold
  (the other convention in the literature).
* ``ap``: area under the dataset precision-recall curve over the thresholds, using
  the monotone interpolated precision ``p_interp(r) = max_{r' >= r} p(r')``:
  ``AP = sum_k (r_k - r_{k-1}) * p_interp(r_k)`` over the distinct recalls sorted
  ascending, with ``r_0 = 0``. The area stops at the largest recall reached
  (recall at threshold 0), with no extrapolation to recall 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "ThresholdCounts",
    "SUPPORTED_PROTOCOLS",
    "counts_per_threshold",
    "evaluate",
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
    where = f"image {index}"
    if prob.dtype.kind not in "fiub":
        raise ValueError(f"{where}: probs must be real numbers, got dtype {prob.dtype}")
    if prob.dtype.kind != "f":
        # Integer/bool maps are legal only as 0/1 maps; float64 keeps them exact.
        prob = prob.astype(np.float64)
    prob = _squeeze_channel(prob)
    gt = _squeeze_channel(gt)
    if prob.ndim != 2:
        raise ValueError(f"{where}: probs must have shape HxW or HxWx1, got {prob_shape}")
    if gt.shape != prob.shape:
        raise ValueError(f"{where}: shape mismatch between probs {prob_shape} and gt {gt_shape}")
    if prob.size == 0:
        raise ValueError(f"{where}: image has no pixels (shape {prob_shape})")
    if np.isnan(prob).any():
        raise ValueError(f"{where}: probs contain NaN")
    lo, hi = prob.min(), prob.max()
    if lo < 0 or hi > 1:
        raise ValueError(f"{where}: probs must lie in [0, 1], got range [{lo}, {hi}]")
    if gt.dtype != np.bool_:
        if gt.dtype.kind not in "fiu":
            raise ValueError(f"{where}: gt must be binary, got dtype {gt.dtype}")
        bad = (gt != 0) & (gt != 1)
        if bad.any():
            values = np.unique(gt[bad])[:5].tolist()
            raise ValueError(f"{where}: gt must be binary (0/1), found values {values}")
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


# name -> (counts function, one-line description). New protocols go here.
_PROTOCOLS: dict[
    str, tuple[Callable[[Sequence[np.ndarray], Sequence[np.ndarray], int], ThresholdCounts], str]
] = {
    "strict": (
        _strict_protocol,
        "pixel-to-pixel matching: a pixel is crack iff prob > t, "
        "thresholds t = i/num_thresholds for i = 0..num_thresholds-1",
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
    order = np.argsort(recall, kind="stable")
    r = recall[order]
    p = precision[order]
    # p_interp(r_k) = max precision at recall >= r_k: reverse running maximum.
    p_interp = np.maximum.accumulate(p[::-1])[::-1]
    dr = np.diff(r, prepend=0.0)
    return float(np.sum(dr * p_interp))


def _pick_ods(f1: np.ndarray, errors: np.ndarray) -> int:
    """Max F1; ties -> fewest errors; then highest threshold."""
    cand = np.flatnonzero(f1 == f1.max())
    cand = cand[errors[cand] == errors[cand].min()]
    return int(cand[-1])


def _pick_ois(f1: np.ndarray, num_pred: np.ndarray, has_crack: bool, ods: int) -> int:
    """OIS threshold index of one image (rules 1-3 of the module docstring)."""
    if not has_crack:
        cand = np.flatnonzero(num_pred == num_pred.min())
        return int(cand[-1])
    best = f1.max()
    if best <= 0:
        return ods
    cand = np.flatnonzero(f1 == best)
    dist = np.abs(cand - ods)
    cand = cand[dist == dist.min()]
    return int(cand[-1])  # equal distance on both sides -> the higher threshold


def _check_num_thresholds(num_thresholds: int) -> None:
    if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, int | np.integer):
        raise ValueError(f"num_thresholds must be an int, got {num_thresholds!r}")
    if num_thresholds < 1:
        raise ValueError(f"num_thresholds must be >= 1, got {num_thresholds}")


def evaluate(
    probs: Sequence[np.ndarray],
    gts: Sequence[np.ndarray],
    *,
    protocol: str = "strict",
    num_thresholds: int = 100,
) -> dict[str, Any]:
    """Evaluates crack probability maps against binary ground truth.

    See the module docstring for the protocol, the 0/0 conventions and tie-breaks.

    Args:
        probs: per-image float arrays in [0, 1], HxW or HxWx1; sizes may differ
            between images.
        gts: per-image binary arrays (bool or 0/1), same size as their prob.
        protocol: matching protocol; one of ``SUPPORTED_PROTOCOLS``.
        num_thresholds: number of thresholds; thresholds are ``i / num_thresholds``.

    Returns:
        A JSON-serialisable dict (python floats/ints/lists only)::

            {'protocol', 'protocol_description', 'num_images', 'num_thresholds',
             'ods': {'precision', 'recall', 'f1', 'threshold'},
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
            f"unknown protocol {protocol!r}; supported protocols: {list(SUPPORTED_PROTOCOLS)}"
        )
    _check_num_thresholds(num_thresholds)
    num_thresholds = int(num_thresholds)
    probs = list(probs)
    gts = list(gts)
    if len(probs) != len(gts):
        raise ValueError(f"got {len(probs)} probability maps but {len(gts)} ground truths")
    if not probs:
        raise ValueError("no images to evaluate")
    checked = [_check_pair(i, p, g) for i, (p, g) in enumerate(zip(probs, gts, strict=True))]
    probs = [c[0] for c in checked]
    gts = [c[1] for c in checked]

    counts_fn, description = _PROTOCOLS[protocol]
    c = counts_fn(probs, gts, num_thresholds)
    thresholds = np.arange(num_thresholds, dtype=np.float64) / num_thresholds

    # ODS: one threshold for the whole dataset, from counts summed over images.
    total = ThresholdCounts(*(a.sum(axis=0) for a in c))
    p_ds, r_ds, f1_ds = _prf(*total)
    errors_ds = (total.num_pred - total.matched_pred) + (total.num_gt - total.matched_gt)
    ods = _pick_ods(f1_ds, errors_ds)

    # OIS: one threshold per image.
    p_im, r_im, f1_im = _prf(*c)
    chosen = np.array(
        [
            _pick_ois(f1_im[j], c.num_pred[j], bool(c.num_gt[j, 0] > 0), ods)
            for j in range(len(probs))
        ],
        dtype=np.intp,
    )
    rows = np.arange(len(probs))
    pooled = ThresholdCounts(*(np.sum(a[rows, chosen]) for a in c))
    p_ois, r_ois, f1_ois = _prf(*(np.asarray(a) for a in pooled))

    per_image = [
        {
            "index": int(j),
            "threshold": float(thresholds[t]),
            "precision": float(p_im[j, t]),
            "recall": float(r_im[j, t]),
            "f1": float(f1_im[j, t]),
        }
        for j, t in zip(rows, chosen, strict=True)
    ]
    return {
        "protocol": protocol,
        "protocol_description": description,
        "num_images": len(probs),
        "num_thresholds": num_thresholds,
        "ods": {
            "precision": float(p_ds[ods]),
            "recall": float(r_ds[ods]),
            "f1": float(f1_ds[ods]),
            "threshold": float(thresholds[ods]),
        },
        "ois": {
            "precision": float(p_ois),
            "recall": float(r_ois),
            "f1": float(f1_ois),
            "pooling": "counts pooled over images at each image's best threshold",
        },
        "ois_mean_f1": float(f1_im[rows, chosen].mean()),
        "ap": _average_precision(p_ds, r_ds),
        "curve": {
            "thresholds": thresholds.tolist(),
            "precision": p_ds.tolist(),
            "recall": r_ds.tolist(),
            "f1": f1_ds.tolist(),
        },
        "per_image": per_image,
    }
