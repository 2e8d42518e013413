"""Crack-detection evaluation: precision, recall and F1 at ODS and OIS, plus AP.

Everything here is numpy/scipy and runs on the host after the model has produced
per-pixel crack probabilities. Images may have different sizes, so inputs are
sequences of arrays rather than one stacked batch.

Modules
-------
* :mod:`~crackjax.evaluation.protocols`: input checking, the threshold grids
  (:data:`LOW_TAIL_THRESHOLDS`, :data:`HIGH_TAIL_THRESHOLDS`, :data:`FIXED_THRESHOLD`),
  the per-threshold counts of each protocol (:func:`counts_per_threshold`,
  :func:`tolerance_counts`, :class:`ThresholdCounts`, :data:`TOLERANCE_MAX_DIST`) and the
  protocol table (:class:`Protocol`, :data:`PROTOCOLS`, :func:`get_protocol`,
  :func:`register_protocol` for a plugin's protocol).
* :mod:`~crackjax.evaluation.thinning`: :func:`thin`, one-pixel-wide thinning.
* :mod:`~crackjax.evaluation.matching`: the maximum bipartite matching of the
  tolerance protocols.
* :mod:`~crackjax.evaluation.aggregate`: P/R/F1, ODS, OIS, AP and :func:`evaluate`.

Everything public is re-exported here: ``from crackjax import evaluation;
evaluation.evaluate(...)``.

Threshold grids
---------------
Every protocol evaluates on a sorted grid of nominal thresholds (float64), made of

* its uniform part, ``num_thresholds`` evenly spaced points (below; this part follows
  ``config.eval.num_thresholds`` for 'strict', and is the BSDS benchmark's 0.01 .. 0.99
  for the tolerance protocols);
* :data:`FIXED_THRESHOLD` = 0.5, always (the threshold of a deployed model; reported as
  ``fixed``);
* by default (``tail_thresholds=True``) the tails :data:`LOW_TAIL_THRESHOLDS` =
  0.003, 0.005, 0.007 and :data:`HIGH_TAIL_THRESHOLDS` = 0.993, 0.995, 0.997, 0.998,
  0.999, 0.9993, 0.9995, 0.9997, 0.9998, 0.9999, 0.99999.

The grid is a superset of the uniform one, so uniform points keep their values and a
grid-maximum (ODS) can only rise. The tails exist because a model trained with a
crack-weighted loss (Xie's weighting, q ~ 60 on CrackForest) has its best threshold at
0.99 or above, where the uniform grid stops: without them the grid, not the model,
would cap its ODS. ``Protocol.thresholds(n, tails)`` builds a grid;
:func:`counts_per_threshold` and :func:`tolerance_counts` also take an explicit one.
Each threshold is compared in the probability array's own floating dtype, so a float32
map holding ``np.float32(0.29)`` compares equal to threshold 0.29, exactly as the plain
numpy loop ``prob > t`` does (in a narrow dtype such as float16 neighbouring tail
thresholds may coincide and give the same counts).

Protocols
---------
``'strict'``: pixel-to-pixel matching. At threshold ``t`` a pixel is predicted to be
crack iff ``prob > t`` (strictly greater: a probability of exactly 0.5 is *not* crack
at ``t = 0.5``, as for a deployed model, ``crackjax.Predictor.mask``). The uniform
thresholds are ``t_i = i / num_thresholds`` for ``i = 0 .. num_thresholds - 1`` (0.00,
0.01, ..., 0.99 by default). A predicted pixel is a true positive iff its ground-truth
pixel is crack. All thresholds are counted at once from one histogram of
``searchsorted(thresholds, prob)``.

``'tolerance'``: the BSDS boundary benchmark (``evaluation_bdry_image`` /
``correspondPixels`` / ``collect_eval_bdry``) that the CrackForest, HED and RCF
evaluations use. Uniform thresholds ``t_i = i / (n + 1)``, ``i = 1..n`` (0.01, ..., 0.99
for the default ``n = 99``), compared in the probability's dtype, and a pixel is
predicted iff ``prob >= t`` (inclusive, unlike 'strict'). The binary prediction is
thinned to one-pixel-wide lines (:func:`thin`, equal to ``skimage.morphology.thin`` and MATLAB's
``bwmorph(bw, 'thin', Inf)``); the ground truth is used as given (BSDS does not thin
it). Predicted and ground-truth pixels are matched one-to-one when their Euclidean
distance is ``<= 0.0075 * sqrt(H^2 + W^2)`` (correspondPixels drops a pair iff
``d > maxDist``), by a maximum-cardinality bipartite matching (Hopcroft-Karp compiled by
numba, ``kernels.matching_size``; not scipy's ``maximum_bipartite_matching``, which is
exponentially slow on such graphs, see ``matching.max_matching_size``).
The counts are therefore at least correspondPixels' on the same maps, not always equal:
correspondPixels' min-cost assignment (each unmatched pixel costing ``100 * maxDist``)
reaches only 6 random outlier nodes per pixel and can leave matchable pixels unmatched,
while any matching it returns is a matching of the same graph, never larger than the
maximum (docs/evaluation.md gives the measured difference: a few pixels in some cells,
below 0.001 of ODS F1).
Counts: ``matched_pred`` and ``matched_gt`` are both the size of the matching,
``num_pred`` the number of thinned predicted pixels, ``num_gt`` of ground-truth pixels.

``'tolerance_thin_gt'``: as 'tolerance' but the ground truth is thinned too. For
region-style ground truth several pixels wide (CrackForest test masks: ~3.2 px)
a one-pixel prediction can match only about one GT pixel per crack cross-section,
capping 'tolerance' recall near 1/width; thinning the GT removes that cap.

Protocols are looked up in the explicit dict ``PROTOCOLS`` (or with
:func:`get_protocol`), name -> :class:`Protocol`. Each protocol maps the images to
four count arrays (see :class:`ThresholdCounts`) and everything downstream (ODS, OIS,
AP) is shared; the tolerance protocols switch on the BSDS variants of ODS, AP and the
OIS tie-break (``Protocol.bsds``), marked [BSDS] below. A protocol also owns its
threshold grid: 'strict' follows the configured number of uniform thresholds
(``Protocol.follows_config_grid``; use ``spec.num_thresholds(configured)``), the
tolerance protocols keep the BSDS benchmark's 99; both add 0.5 and the tails.
``Protocol.threshold_rule`` says in words how a probability map becomes that protocol's
mask at a threshold, and only 'strict' has ``Protocol.writes_threshold_file``: its ODS
threshold is a mask threshold for later prediction, while the tolerance thresholds apply
to thinned maps.

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
     nearest the ODS threshold in grid order (fewest grid points between them);
     equal distance -> the higher threshold.
     [BSDS] the highest of them (collect_eval_bdry's ``ff(end)``).

  Rule 1 is what BSDS does too (F is 0 at every threshold, ``ff(end)`` is the
  highest); rule 2 differs from BSDS, which would also take the highest threshold.

* ``ois`` (default OIS): the four counts of each image at its OIS threshold are
  summed over images and P/R/F1 are computed from the pooled counts.
  ``ois_mean_f1``: the mean over images of each image's F1 at its OIS threshold
  (the other convention in the literature).
* ``fixed``: the dataset P, R and F1 at the grid point 0.5 under the protocol's own rule
  (strict: ``prob > 0.5``, what a deployed model predicts; tolerance: ``prob >= 0.5``,
  thinned), never interpolated; ``per_image`` rows carry each image's
  ``fixed_precision``, ``fixed_recall`` and ``fixed_f1``.
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
* Both APs are areas over the recall range that the grid reaches, so unlike ODS they
  depend on the grid: the tails reach lower (high tail) and higher (low tail) recalls
  and usually raise AP, most for saturated maps whose recall at 0.99 is still high.
"""

from __future__ import annotations

from crackjax.evaluation import protocols
from crackjax.evaluation.aggregate import at_threshold, evaluate, protocol_result
from crackjax.evaluation.eval_plan import EvalPlan
from crackjax.evaluation.protocols import *  # noqa: F403 (re-exported: its __all__)
from crackjax.evaluation.thinning import thin

# The public names: protocols.py's (imported with *) and those imported above.
__all__ = [
  *protocols.__all__,
  'at_threshold',
  'EvalPlan',
  'evaluate',
  'protocol_result',
  'thin',
]
