"""TFDS builder for BJN260 (Beijing night-scene pavement cracks), stored at 480x320.

Layout read (that of ``shiyanrubing/CarNet_databases``; manual download only)::

    <manual_dir>/.../BJN260/img/IMG_<date>_<time>.png     RGB, 3968x2240 (W x H)
    <manual_dir>/.../BJN260/gt/IMG_<date>_<time>.png      0/255, same size

(folder names case- and separator-insensitive; ``images``/``groundTruth``/``label`` etc. are
accepted too, and ``manual_dir`` may be the BJN260 folder itself, or the repository root).
Images and ground truth are matched by file name without extension.

Stored at the paper's 480x320 (W x H, §IV-D), whatever the original size:

* image: ``PIL.Image.resize`` with the Lanczos filter (antialiased: PIL widens the kernel by
  the scale factor, so each output pixel is a smooth weighted average of its ~8x7 source
  pixels; no aliasing of the road texture);
* mask: an output pixel is crack if *any* source crack pixel overlaps its footprint, even
  partly (computed exactly with cumulative sums, `resize_mask`). A crack one or two source
  pixels wide, an eighth of an output pixel, survives as a connected 1-2 pixel line, and the
  mask stays exactly binary.
  The price is a slight widening (a crack straddling a pixel boundary marks both pixels), so
  the crack proportion is a little higher than an area average would give.

Split: names sorted, permuted with ``numpy.random.default_rng(0)``; the first
``round(n * 200 / 260)`` (200 of 260) are ``train``, the rest (60) ``test`` ("200 images chosen
at random for training", §IV-D; the paper does not list them).
"""

from __future__ import annotations

import numpy as np
import PIL.Image
import tensorflow_datasets as tfds

from crackjax.tfds_builders import listing, paired_builder

SIZE = (480, 320)  # (W, H) stored.
TRAIN_FRACTION = 200 / 260
SPLIT_SEED = 0
HOMEPAGE = 'https://github.com/shiyanrubing/CarNet_databases'
LAYOUT = """\
    <manual_dir>/.../BJN260/img/IMG_<date>_<time>.png
    <manual_dir>/.../BJN260/gt/IMG_<date>_<time>.png"""


def resize_image(image: PIL.Image.Image, size: tuple[int, int] = SIZE) -> PIL.Image.Image:
  """Antialiased (Lanczos) resize to size = (W, H)."""
  return image if image.size == size else image.resize(size, PIL.Image.Resampling.LANCZOS)


def _any_overlap(mask: np.ndarray, n_out: int, axis: int) -> np.ndarray:
  """Along ``axis``: output cell k covers source [k*s, (k+1)*s), s = n_in / n_out; it is
  crack if any source pixel overlapping it (even partly) is crack."""
  n_in = mask.shape[axis]
  edges = np.arange(n_out + 1) * (n_in / n_out)
  start = np.floor(edges[:-1]).astype(int)
  stop = np.minimum(np.ceil(edges[1:] - 1e-9).astype(int), n_in)
  stop = np.maximum(stop, start + 1)
  counts = np.cumsum(mask, axis=axis, dtype=np.int64)
  counts = np.concatenate([np.zeros_like(np.take(counts, [0], axis=axis)), counts], axis=axis)
  return (np.take(counts, stop, axis=axis) - np.take(counts, start, axis=axis)) > 0


def resize_mask(mask: np.ndarray, size: tuple[int, int] = SIZE) -> np.ndarray:
  """uint8 0/1 HxW -> uint8 0/1 at size = (W, H); crack if any crack pixel overlaps."""
  if (mask.shape[1], mask.shape[0]) == size:
    return mask
  rows = _any_overlap(mask.astype(np.uint8), size[1], axis=0)
  return _any_overlap(rows.astype(np.uint8), size[0], axis=1).astype(np.uint8)


def split_names(names: list[str]) -> tuple[list[str], list[str]]:
  return listing.random_split(names, round(len(names) * TRAIN_FRACTION), SPLIT_SEED)


class BJN260(paired_builder.PairedImageBuilder):
  """BJN260: 260 night-scene road images at 480x320, 200 train / 60 test."""

  name = 'bjn260'
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release: 480x320 (Lanczos image, any-overlap mask).'}
  HOMEPAGE = HOMEPAGE
  MANUAL_DIR_REQUIRED = True
  MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
  BJN260 is not downloaded automatically. Get datasets/BJN260 of {HOMEPAGE}
  (git clone or the archive of its default branch) into a folder DIR, so that:
{LAYOUT}
  and run with --config.data.manual_dir=DIR (launch.py; a builder:
  DownloadConfig(manual_dir=DIR)). See tfds_builders/bjn260/README.md.
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    pairs = listing.find_pairs(self.manual_root(dl_manager), 'bjn260', layout=LAYOUT)
    train, test = split_names([p.name for p in pairs])
    return self.split_by_name(pairs, train=train, test=test)

  def postprocess(
    self, image: PIL.Image.Image, mask: np.ndarray
  ) -> tuple[PIL.Image.Image, np.ndarray]:
    """To the paper's 480x320, after the size check at full resolution."""
    return resize_image(image), resize_mask(mask)
