"""Crack probability maps from a trained model, for images of any size.

* `Predictor`: the user-facing path. `Predictor.from_workdir(run)` restores the run's
  parameters and config (`crackjax.experiment.restored.load_run`); calling it on an H x W x 3 uint8
  photo returns the H x W probability map. Images are padded by reflection (zero or edge
  padding draws false cracks along the border) to a shape bucket, so one compilation serves
  every image of that bucket; images larger than the tile size are cut into overlapping
  tiles whose predictions are blended with smooth weights (a raised-cosine cross-fade over
  the overlap by default, or nnU-Net's and MONAI's Gaussian), so no seams appear. Tiles are
  batched and the batch is split over all local devices.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from crackjax.deploy import mask_analysis, self_check
from crackjax.evaluation import width_rule as rule
from crackjax.evaluation.inference import (
  check_scaled_size,
  check_test_time,
  predict_step,
  test_time_average,
)
from crackjax.evaluation.threshold_choice import photo_threshold
from crackjax.experiment.restored import load_model, load_run
from crackjax.models import input_multiple

# ----------------------------------------------------------------------------- tiling


#: The one padding rule of prediction: reflection at the bottom and right, up to the next
#: multiple of `pad_multiple(input_multiple)` = lcm(PAD_BUCKET, input_multiple) in each
#: dimension. Predictor pads so (each multiple is a compile bucket), and an export's sidecar
#: records the number ('pad_multiple') for docs/export.md's loading recipe: the same padding
#: gives the same map (the border pixels depend on how much is padded).
PAD_BUCKET = 32


def pad_multiple(input_multiple: int) -> int:
  """What H and W are reflection-padded up to for a model of `input_multiple`."""
  return math.lcm(PAD_BUCKET, input_multiple)


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def reflect_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
  """Pads [H, W, C] at the bottom and right to [height, width, C] by reflection.

  Reflection keeps texture and cracks continuous across the border (a constant or edge
  padding draws a false straight edge there). A side of one pixel cannot be reflected and
  is repeated instead.
  """
  h, w = image.shape[:2]
  pads = ((0, height - h), (0, width - w), (0, 0))
  if h > 1 and w > 1:
    return np.pad(image, pads, mode='reflect')
  return np.pad(image, pads, mode='symmetric')


def tile_layout(length: int, max_tile: int, overlap: int, multiple: int) -> tuple[int, list[int]]:
  """Tiles along one axis of `length` pixels: (tile size, start offsets).

  As few tiles as cover the axis with at most `max_tile` pixels each and neighbours
  overlapping by at least `overlap` pixels; the tile is then shrunk to the smallest
  multiple of `multiple` that still covers it, and the starts are spread evenly from 0 to
  ``length - tile``. Shrinking, rather than always using `max_tile`, keeps the pixels
  predicted twice near the minimum (a 3000-pixel axis in 512-pixel tiles with 64 of
  overlap: 7 tiles of 496, 1.16x the pixels, not 7 of 512).
  """
  if length <= max_tile:
    return length, [0]
  overlap = min(overlap, max_tile // 2)
  n = math.ceil((length - overlap) / (max_tile - overlap))
  tile = min(_round_up(math.ceil((length - overlap) / n) + overlap, multiple), max_tile)
  n = max(n, math.ceil((length - tile) / (tile - overlap)) + 1)
  return tile, [round(i * (length - tile) / (n - 1)) for i in range(n)]


@functools.lru_cache(maxsize=8)
def gaussian_weights(height: int, width: int, sigma_scale: float = 0.125) -> np.ndarray:
  """[height, width] blending weights: a Gaussian of std sigma_scale x size per axis around
  the tile centre, 1 at the centre and never below 1e-3 (nnU-Net's importance map)."""

  def axis(n):
    x = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
    return np.exp(-0.5 * (x / max(sigma_scale * n, 1e-6)) ** 2)

  w = np.outer(axis(height), axis(width))
  return np.maximum(w / w.max(), 1e-3).astype(np.float32)


@functools.lru_cache(maxsize=8)
def cosine_weights(height: int, width: int, ramp_y: int, ramp_x: int) -> np.ndarray:
  """[height, width] blending weights: 1 inside, falling along a raised cosine to ~0 over the
  `ramp_y` / `ramp_x` pixels nearest each edge (no fall where the ramp is 0), never below 1e-3.

  With the ramp as wide as the overlap of neighbouring tiles, every pixel outside the
  overlap bands is taken whole from the one tile that holds it, and across a band the
  prediction fades from one tile to the other, each weighted by how far its own edge (where
  it lacks context) is; the weights of two tiles sum to ~1 across the band. (A Gaussian
  centred on the tile also weights down pixels that only one tile holds, and whose tails
  hit the 1e-3 floor across a band that is narrow for the tile, where it just averages.)
  """

  def axis(n, ramp):
    if ramp <= 0:  # no neighbour along this axis: nothing to fade into
      return np.ones(n)
    x = np.arange(n, dtype=np.float64)
    distance = np.minimum(x, n - 1 - x) + 0.5  # to the nearer edge, in pixels
    return 0.5 - 0.5 * np.cos(np.pi * np.clip(distance / ramp, 0.0, 1.0))

  w = np.outer(axis(height, ramp_y), axis(width, ramp_x))
  return np.maximum(w, 1e-3).astype(np.float32)


BLENDS = ('cosine', 'gaussian')  # Predictor(blend=...): cosine_weights, gaussian_weights


def _min_overlap(starts: list[int], tile: int) -> int:
  # The narrowest overlap of neighbouring tiles along an axis (0 for a single tile).
  return min((a + tile - b for a, b in zip(starts, starts[1:], strict=False)), default=0)


def as_float_image(image: np.ndarray) -> np.ndarray:
  """H x W x 3 float32 in [0, 1] from uint8 (/255), uint16 (/65535) or float in [0, 1]."""
  image = np.asarray(image)
  if image.ndim != 3 or image.shape[2] != 3:
    raise ValueError(f'expected an H x W x 3 image, got shape {image.shape}')
  if image.dtype == np.uint8:
    return image.astype(np.float32) / 255.0
  if image.dtype == np.uint16:
    return image.astype(np.float32) / 65535.0
  if np.issubdtype(image.dtype, np.floating):
    return image.astype(np.float32)
  raise ValueError(f'expected uint8, uint16 or float pixels, got {image.dtype}')


def _run_defaults(run: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
  """`kwargs` with the run's threshold, BatchNorm averages and test-time scales and flip
  (its config's ``eval`` group) where not given."""
  ev = run.config.get('eval') or {}
  kwargs.setdefault('threshold', run.threshold)
  kwargs.setdefault('batch_stats', run.batch_stats)
  kwargs.setdefault('scales', tuple(ev.get('scales') or (1.0,)))
  kwargs.setdefault('flip', ev.get('flip', False))  # checked as it is: 'false' is no False
  kwargs.setdefault('photo_threshold', ev.get('photo_threshold'))
  kwargs.setdefault('width_rule', ev.get('width_rule'))
  return kwargs


def plain_predictor(run: Any) -> Predictor:
  """A run's predictor as a model file's self check is made: one scale, no flip, whole tiles
  by default, the run's threshold and BatchNorm statistics."""
  return Predictor(run.model, run.params, batch_stats=run.batch_stats, threshold=run.threshold)


class Predictor:
  """Probability maps of a trained model for photos of any size.

  ``Predictor.from_workdir('workdirs/cfd_exp')(photo)`` returns an H x W float32 map for an
  H x W x 3 uint8 photo. An image no larger than `tile_size` is reflection-padded to the
  next multiple of `bucket` (and of the model's input multiple) in each dimension and
  predicted whole; so one compiled function serves every image of that padded shape. A
  larger image is padded the same way and cut into as few tiles of at most `tile_size`
  pixels per side as cover it with neighbours overlapping by at least `overlap` x
  `tile_size` pixels (`tile_layout`); the tiles are predicted `batch_size` at a time and
  blended with smooth weights, so no seam appears: `blend='cosine'` (default) cross-fades
  neighbours over their overlap (`cosine_weights`), `'gaussian'` weights every tile by a
  Gaussian around its centre (`gaussian_weights`, nnU-Net's). At equal cost the cosine
  cross-fade stays closer to the whole-image prediction (docs/prediction.md).

  With `scales` / `flip` (a model file's or run's ``eval.scales`` / ``eval.flip`` by default)
  the photo is predicted at each scale, and mirrored, and the maps averaged
  (`crackjax.evaluation.inference.test_time_average`; one pass per copy). With `width_rule`
  (a model file's or run's ``eval.width_rule`` by default), a photo whose cracks come out wider
  than that many pixels (median over the skeleton of its mask at `threshold`) is predicted
  again at half size (`crackjax.evaluation.width_rule`); `predict` says which scale each photo
  got.

  Attributes:
    model: the linen Module.
    params: its parameters.
    batch_stats: its BatchNorm running averages (None for a model without BatchNorm).
    threshold: default threshold of `mask` (crack where probability > threshold).
    photo_threshold: None (every photo at `threshold`), or a weight w in [0, 1]: each photo
      at its own threshold, w x `threshold` + (1 - w) x the Otsu threshold of its map
      (`crackjax.evaluation.threshold_choice.photo_threshold`; a model file's or run's
      ``eval.photo_threshold`` by default).
    width_rule: None (off), or the width in pixels above which a photo is predicted again at
      half size (`crackjax.evaluation.width_rule`).
  """

  def __init__(
    self,
    model: nn.Module,
    params: Any,
    *,
    batch_stats: Any = None,
    threshold: float = 0.5,
    tile_size: int = 1024,
    overlap: float = 0.125,
    batch_size: int | None = None,
    bucket: int = PAD_BUCKET,
    devices: list[jax.Device] | None = None,
    blend: str = 'cosine',
    scales: Sequence[float] = (1.0,),
    flip: bool = False,
    photo_threshold: float | None = None,
    width_rule: float | None = None,
  ):
    if not 0.0 <= overlap < 1.0:
      raise ValueError(f'overlap must be in [0, 1), got {overlap}')
    if tile_size < 1 or (batch_size is not None and batch_size < 1):
      raise ValueError(f'tile_size and batch_size must be >= 1, got {tile_size}, {batch_size}')
    if isinstance(threshold, bool) or not (
      isinstance(threshold, int | float | np.floating) and 0.0 <= threshold <= 1.0
    ):  # NaN fails the comparison: every mask would be empty
      raise ValueError(f'threshold must be a number in [0, 1], got {threshold!r}')
    if photo_threshold is not None and not (
      isinstance(photo_threshold, int | float) and 0.0 <= photo_threshold <= 1.0
    ):
      raise ValueError(
        f'photo_threshold must be None or a weight in [0, 1], got {photo_threshold!r}'
      )
    if blend not in BLENDS:
      raise ValueError(f'blend must be one of {sorted(BLENDS)}, got {blend!r}')
    self.scales, self.flip = check_test_time(scales, flip)
    self.width_rule = rule.check(width_rule)
    self.blend = blend
    self.model = model
    self.threshold = float(threshold)
    self.photo_threshold = None if photo_threshold is None else float(photo_threshold)
    self.multiple = input_multiple(model)
    self.bucket = math.lcm(bucket, self.multiple)
    self.tile_size = _round_up(tile_size, self.multiple)
    self.overlap = overlap
    devices = devices or jax.local_devices()
    self._mesh = Mesh(np.asarray(devices), ('data',))
    n = len(devices)
    self.batch_size = _round_up(batch_size or n, n)
    self._replicated = NamedSharding(self._mesh, P())
    self._batch_sharding = NamedSharding(self._mesh, P('data'))
    self.params = jax.device_put(params, self._replicated)
    self.batch_stats = jax.device_put(batch_stats, self._replicated) if batch_stats else None
    self.num_traces = 0  # compilations so far: one per padded shape (bucket) seen

    def traced(params, batch_stats, images):
      self.num_traces += 1  # Python side effect: runs when jit traces a new shape only.
      return predict_step(params, images, apply_fn=model.apply, batch_stats=batch_stats)

    self._apply = jax.jit(
      traced,
      in_shardings=(self._replicated, self._replicated, self._batch_sharding),
      out_shardings=self._batch_sharding,
    )

  @classmethod
  def from_workdir(cls, workdir: str | Path, *, step: int | None = None, **kwargs) -> Predictor:
    """The model, parameters and saved threshold of a training run's workdir."""
    run = load_run(workdir, step=step)
    return cls(run.model, run.params, **_run_defaults(run, kwargs))

  @classmethod
  def from_pretrained(
    cls, spec: str | Path, *, allow_plugins: Sequence[str] = (), **kwargs
  ) -> Predictor:
    """A model file's predictor: `spec` is a released model's name (crackjax-models lists
    them), a path to a ``.safetensors`` model file (crackjax-export --format=model) or an
    http(s) URL of one (downloaded once into ``$CRACKJAX_CACHE``, `crackjax.models.hub`).
    The file's threshold is the default of `mask`; `kwargs` are the constructor's.

    `allow_plugins`: the plugin modules the file names that may be imported (a file never
    imports code on its own word; released models need none, `load_model`).

    Raises:
      model_file.ModelFileError: a damaged or altered file, one whose weights do not give its
        card's self check (`crackjax.deploy.self_check.verify`), ... (one line naming it)."""
    run = load_model(spec, allow_plugins=allow_plugins)
    self_check.verify(run, lambda: plain_predictor(run))
    return cls(run.model, run.params, **_run_defaults(run, kwargs))

  def padded_shape(self, height: int, width: int) -> tuple[int, int]:
    """The shape an image is padded to (its compile bucket)."""
    return _round_up(height, self.bucket), _round_up(width, self.bucket)

  def layout(self, height: int, width: int) -> tuple[int, list[int], int, list[int]]:
    """The tiles of a `height` x `width` image: (tile height, row starts, tile width, column
    starts) in its padded shape; one tile of the padded shape if it is not tiled."""
    ph, pw = self.padded_shape(height, width)
    if ph <= self.tile_size and pw <= self.tile_size:
      return ph, [0], pw, [0]
    overlap = round(self.overlap * self.tile_size)
    th, ys = tile_layout(ph, self.tile_size, overlap, self.multiple)
    tw, xs = tile_layout(pw, self.tile_size, overlap, self.multiple)
    return th, ys, tw, xs

  def num_tiles(self, height: int, width: int) -> int:
    """How many model calls' worth of tiles a `height` x `width` image is cut into."""
    _, ys, _, xs = self.layout(height, width)
    return len(ys) * len(xs)

  def pixels_predicted(self, height: int, width: int) -> float:
    """Pixels the model computes for a `height` x `width` image, over its pixels (>= 1: the
    overlap and padding are computed too; what tiling costs beyond the image itself)."""
    th, ys, tw, xs = self.layout(height, width)
    return len(ys) * th * len(xs) * tw / (height * width)

  def _predict_batch(self, tiles: list[np.ndarray]) -> np.ndarray:
    n = len(tiles)
    batch = np.stack(tiles + [np.zeros_like(tiles[0])] * (self.batch_size - n))
    return np.asarray(self._apply(self.params, self.batch_stats, batch))[:n, ..., 0]

  def __call__(
    self, image: np.ndarray, *, progress: Callable[[int], object] | None = None
  ) -> np.ndarray:
    """The H x W crack probability map (float32 in [0, 1]) of an H x W x 3 image;
    `progress(n)` is called as each batch of n tiles is done (a tqdm bar's ``update``)."""
    return self.predict(image, progress=progress)[0]

  def predict(
    self, image: np.ndarray, *, progress: Callable[[int], object] | None = None
  ) -> tuple[np.ndarray, rule.Choice]:
    """(the map of `__call__`, what the width rule chose: the scales the map is from and the
    median crack width of the first map, `width_rule.Choice`). Without `width_rule`, the
    photo at `scales` and no width.

    Raises:
      ValueError: a scale below 1 makes the photo smaller than one model input
        (`inference.check_scaled_size`), before anything is predicted."""
    check_scaled_size(*np.shape(image)[:2], self.scales, self.multiple)
    prob = self._at(image, self.scales, progress)
    if self.width_rule is None:
      return prob, rule.Choice(self.scales, None)
    return rule.apply(
      prob,
      lambda: self._at(image, (rule.HALF,), progress),
      rule.WidthRule(self.width_rule, self.threshold),
      self.scales,
      # mask_analysis's widths (a band of rows at a time): a large photo's memory stays low.
      widths_of=lambda mask: mask_analysis.analyse(mask).widths,
    )

  def _at(
    self,
    image: np.ndarray,
    scales: tuple[float, ...],
    progress: Callable[[int], object] | None,
  ) -> np.ndarray:
    """The map of `image` at `scales` (and mirrored with `flip`), averaged."""
    if scales == (1.0,) and not self.flip:
      return self._predict(image, progress)
    return test_time_average(
      lambda copy: self._predict(copy, progress),
      as_float_image(image),
      scales=scales,
      flip=self.flip,
    )

  def _predict(
    self, image: np.ndarray, progress: Callable[[int], object] | None = None
  ) -> np.ndarray:
    """One pass of the model over the image (tiled where large)."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
      image = as_float_image(image)
    elif image.ndim != 3 or image.shape[2] != 3:
      raise ValueError(f'expected an H x W x 3 image, got shape {image.shape}')
    h, w = image.shape[:2]
    # A uint8 photo is padded as it is and each tile made float when it is predicted: a float
    # copy of a whole 108 MP photo (and another of it padded) took 2.6 GB.
    padded = reflect_pad(image, *self.padded_shape(h, w))
    th, ys, tw, xs = self.layout(h, w)
    if len(ys) == len(xs) == 1:  # not tiled: the whole padded image in one call
      return self._predict_batch([as_float_image(padded)])[0, :h, :w]
    if self.blend == 'gaussian':
      weights = gaussian_weights(th, tw)
    else:
      weights = cosine_weights(th, tw, _min_overlap(ys, th), _min_overlap(xs, tw))
    total = np.zeros(padded.shape[:2], np.float32)
    norm = np.zeros(padded.shape[:2], np.float32)
    corners = [(y, x) for y in ys for x in xs]
    for i in range(0, len(corners), self.batch_size):
      chunk = corners[i : i + self.batch_size]
      probs = self._predict_batch(
        [as_float_image(padded[y : y + th, x : x + tw]) for y, x in chunk]
      )
      for (y, x), prob in zip(chunk, probs, strict=True):
        total[y : y + th, x : x + tw] += prob * weights
        norm[y : y + th, x : x + tw] += weights
      if progress is not None:
        progress(len(chunk))
    del padded
    return np.divide(total, norm, out=total)[:h, :w]

  def threshold_of(self, prob: np.ndarray, threshold: float | None = None) -> float:
    """The threshold of the photo whose map is `prob`: `threshold` (default: the run's), or
    with `photo_threshold` set, that blended with the Otsu threshold of `prob`."""
    t = self.threshold if threshold is None else threshold
    if self.photo_threshold is None:
      return t
    return photo_threshold(prob, t, self.photo_threshold)

  def mask(self, prob: np.ndarray, threshold: float | None = None) -> np.ndarray:
    """Binary crack mask (bool): probability > the photo's threshold (`threshold_of`)."""
    return prob > self.threshold_of(prob, threshold)
