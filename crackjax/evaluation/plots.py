"""Files an evaluation leaves in the workdir: CSV, precision-recall plot, qualitative figure.

Everything here works on host numpy arrays and the dicts `crackjax.evaluation.evaluate`
returns, so it can be reused on predictions from anywhere. Figures are drawn with
matplotlib's object-oriented API (`matplotlib.figure.Figure`, rendered by Agg when
saved), so importing this module leaves pyplot and the global backend alone.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image
from matplotlib.figure import Figure

from crackjax.evaluation.result import (
  F1,
  FIXED_F1,
  FIXED_PRECISION,
  FIXED_RECALL,
  PRECISION,
  RECALL,
  THRESHOLD,
  ProtocolResult,
)
from crackjax.runs import outputs

# Colours of the overlay: true positives, false positives, false negatives.
_TP, _FP, _FN = (0, 200, 0), (230, 0, 0), (0, 90, 255)
# Per-image values of each protocol in the CSV (keys of `evaluate`'s per_image rows).
_CSV_KEYS = (THRESHOLD, PRECISION, RECALL, F1, FIXED_PRECISION, FIXED_RECALL, FIXED_F1)


# The per-image values that each image decides alone (`aggregate.image_scores`): those the
# rows written as they come hold.
_STREAMED_KEYS = (F1, FIXED_PRECISION, FIXED_RECALL, FIXED_F1)
#: The suffix of the per-image rows written as they come (`PerImageRows`): a name that claims
#: nothing complete, until `write_per_image_csv` writes the whole CSV and removes that file.
PARTIAL_SUFFIX = '.partial'
#: The per-image CSV's columns of the threshold masks are made at and each image's F1 there.
THRESHOLD_IN_USE = 'threshold_in_use'
F1_IN_USE = 'f1_in_use'
#: The per-image CSV's columns (after the protocol's name) of each image's pixels there.
TP_FP_FN = ('tp', 'fp', 'fn')


class PerImageRows:
  """The per-image rows of an evaluation, appended as its images are scored.

  Written to ``<path>.partial`` (`path`: the evaluation's eval_per_image.csv), one row per
  image in image order, flushed as it comes: ``name`` and, per protocol, the columns of
  `write_per_image_csv` whose values the image decides alone (`aggregate.image_scores`):
  ``<protocol>_f1`` (its OIS F1), ``_fixed_precision``, ``_fixed_recall``, ``_fixed_f1``,
  equal to the final CSV's. Its OIS threshold, precision and recall wait for the whole
  set (the ODS threshold breaks ties), so `write_per_image_csv` writes the whole CSV at the
  end and removes this file; a scoring interrupted leaves it, under its `.partial` name,
  with the images scored so far.
  """

  def __init__(self, path: Path, protocols: Sequence[str]):
    self.path = Path(f'{path}{PARTIAL_SUFFIX}')
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._file = open(self.path, 'w', newline='', encoding='utf-8')  # open while rows come
    fields = ['name'] + [f'{p}_{k}' for p in protocols for k in _STREAMED_KEYS]
    self._writer = csv.DictWriter(self._file, fieldnames=fields)
    with outputs.naming(self.path):  # a full disk's line names this file
      self._writer.writeheader()
      self._file.flush()

  def add(self, name: str, scores: Mapping[str, Mapping[str, float]]) -> None:
    """Appends image `name`'s row: {protocol: `aggregate.image_scores`' dict}."""
    row = {'name': name}
    for protocol, values in scores.items():
      row.update({f'{protocol}_{k}': f'{values[k]:.6g}' for k in _STREAMED_KEYS})
    with outputs.naming(self.path):
      self._writer.writerow(row)
      self._file.flush()  # each row on disk as it comes: an interruption keeps those scored

  def close(self) -> None:
    self._file.close()

  def __enter__(self) -> PerImageRows:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()


def write_per_image_csv(
  path: Path,
  names: Sequence[str],
  results: Mapping[str, ProtocolResult],
  in_use: tuple[float, Mapping[str, Sequence[float]]] | None = None,
  extra: Sequence[Mapping[str, Any]] | None = None,
) -> None:
  """One row per image: under each protocol, its OIS threshold, P, R and F1, and P, R, F1 at 0.5.

  Columns ``<protocol>_threshold``, ``_precision``, ``_recall``, ``_f1`` (at the image's OIS
  threshold), then ``<protocol>_fixed_precision``, ``_fixed_recall``, ``_fixed_f1`` (at the
  fixed threshold 0.5), for each protocol in turn; with `in_use` (the threshold masks are made
  at, {protocol: each image's F1 there}) also ``threshold_in_use`` and
  ``<protocol>_f1_in_use``; then ``<protocol>_tp``, ``_fp``, ``_fn`` (pixels at the threshold
  in use) of each protocol whose rows have them (`ImageRow.tp`: strict). Removes the rows
  written as they came (`PerImageRows`' ``<path>.partial``), if any.
  """
  protocols = list(results)
  fields = ['name'] + [f'{p}_{k}' for p in protocols for k in _CSV_KEYS]
  if in_use is not None:
    fields += [THRESHOLD_IN_USE] + [f'{p}_{F1_IN_USE}' for p in protocols]
  fields += list(extra[0]) if extra else []  # e.g. the width rule's scale and rule_width_px
  counted = [
    p for p in protocols if results[p].per_image and results[p].per_image[0].tp is not None
  ]
  fields += [f'{p}_{k}' for p in counted for k in TP_FP_FN]
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    for i, name in enumerate(names):
      row = {'name': name}
      for p in protocols:
        img = results[p].per_image[i]
        row.update({f'{p}_{k}': f'{getattr(img, k):.6g}' for k in _CSV_KEYS})
      if in_use is not None:
        row[THRESHOLD_IN_USE] = f'{in_use[0]:.6g}'
        row.update({f'{p}_{F1_IN_USE}': f'{in_use[1][p][i]:.6g}' for p in protocols})
      if extra:
        row.update({k: '' if v is None else v for k, v in extra[i].items()})
      row.update(
        {f'{p}_{k}': getattr(results[p].per_image[i], k) for p in counted for k in TP_FP_FN}
      )
      writer.writerow(row)
  # The whole CSV is there: the rows written as they came (`PerImageRows`) are superseded.
  Path(f'{path}{PARTIAL_SUFFIX}').unlink(missing_ok=True)


def plot_pr_curves(path: Path, results: Mapping[str, ProtocolResult], title: str) -> None:
  """Precision-recall curve of every protocol with its ODS, OIS and threshold-0.5 points marked."""
  # The legend goes below the axes (`outside`, constrained layout): inside it covered the
  # curves, which run through every corner of the unit square.
  fig = Figure(figsize=(5.5, 5.6 + 0.16 * len(results)), layout='constrained')
  ax = fig.subplots()
  # Iso-F1 contours make the ODS points readable at a glance.
  r = np.linspace(0.01, 1, 200)
  for f in (0.2, 0.4, 0.6, 0.8):
    p = f * r / (2 * r - f)
    ok = (p > 0) & (p <= 1)
    ax.plot(r[ok], p[ok], color='0.85', lw=0.8, zorder=0)
  for i, (protocol, res) in enumerate(results.items()):
    color = f'C{i}'
    ods, ois, fixed, curve = res.ods, res.ois, res.fixed, res.curve
    ax.plot(
      curve.recall,
      curve.precision,
      color=color,
      label=f'{protocol}: ODS F1 {ods.f1:.3f}, OIS F1 {ois.f1:.3f}, '
      f'AP {res.ap:.3f}, F1@0.5 {fixed.f1:.3f}',
    )
    ax.plot(ods.recall, ods.precision, 'o', color=color, ms=7)
    ax.plot(ois.recall, ois.precision, 's', color=color, ms=6, mfc='none')
    ax.plot(fixed.recall, fixed.precision, 'x', color=color, ms=7)
  ax.plot([], [], 'ko', label='ODS')
  ax.plot([], [], 'ks', mfc='none', label='OIS (pooled)')
  ax.plot([], [], 'kx', label='threshold 0.5')
  ax.set(xlim=(0, 1), ylim=(0, 1.01), xlabel='recall', ylabel='precision', title=title)
  ax.grid(alpha=0.3)
  fig.legend(loc='outside lower center', fontsize=7, ncols=1)
  fig.savefig(path, dpi=120)


def overlay(image: np.ndarray, gt: np.ndarray, pred: np.ndarray) -> np.ndarray:
  """RGB uint8 image with true positives green, false positives red, misses blue."""
  out = (np.clip(image, 0, 1) * 255).astype(np.uint8).copy()
  gt, pred = gt.astype(bool), pred.astype(bool)
  out[gt & pred] = _TP
  out[~gt & pred] = _FP
  out[gt & ~pred] = _FN
  return out


def plot_qualitative(
  path: Path,
  images: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  probs: Sequence[np.ndarray],
  names: Sequence[str],
  threshold: float,
  title: str,
  captions: Sequence[str] | None = None,
) -> None:
  """Rows of image | ground truth | prediction (prob > threshold) | overlay; `captions`: a
  word on each row after its name (e.g. 'worst, F1 0.12')."""
  n = len(images)
  fig = Figure(figsize=(12, 2.2 * n + 0.5))
  axes = fig.subplots(n, 4, squeeze=False)
  captions = captions or [''] * n
  rows = zip(images, gts, probs, names, captions, strict=True)
  for row, (image, gt, prob, name, caption) in enumerate(rows):
    pred = prob > threshold
    panels = [
      (image, f'{name}: {caption}' if caption else f'{name}: image'),
      (gt, 'ground truth'),
      (pred, f'prediction (p > {threshold:.6g})'),
      (overlay(image, gt, pred), 'green TP, red FP, blue FN'),
    ]
    for ax, (panel, label) in zip(axes[row], panels, strict=True):
      ax.imshow(panel, cmap='gray' if panel.ndim == 2 else None, interpolation='nearest')
      ax.set_title(label, fontsize=8)
      ax.axis('off')
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def qualitative_panel(
  image: np.ndarray, gt: np.ndarray, prob: np.ndarray, threshold: float, max_height: int = 384
) -> np.ndarray:
  """One row of `plot_qualitative` as an RGB uint8 array (TensorBoard's qualitative images):
  image | ground truth | probability | overlay at `threshold` (green TP, red FP, blue FN),
  split by 4-pixel white bars; taller images are subsampled to at most `max_height` rows."""
  gt = np.asarray(gt).astype(bool)
  prob = np.clip(np.asarray(prob, np.float32), 0.0, 1.0)
  photo = (np.clip(image, 0, 1) * 255).astype(np.uint8)
  gray = [np.repeat(x[..., None], 3, axis=-1) for x in (gt.astype(np.uint8) * 255, prob * 255)]
  parts = [photo, *(g.astype(np.uint8) for g in gray), overlay(image, gt, prob > threshold)]
  bar = np.full((photo.shape[0], 4, 3), 255, np.uint8)
  row = np.concatenate([x for part in parts for x in (part, bar)][:-1], axis=1)
  stride = -(-row.shape[0] // max_height)
  return row[::stride, ::stride]


def save_probability_maps(
  directory: Path, probs: Sequence[np.ndarray], names: Sequence[str]
) -> None:
  """Each map as an 8-bit grayscale PNG (255 = probability 1), named after its image."""
  directory.mkdir(parents=True, exist_ok=True)
  for prob, name in zip(probs, names, strict=True):
    png = np.round(np.clip(prob, 0, 1) * 255).astype(np.uint8)
    PIL.Image.fromarray(png).save(directory / f'{name}.png')
