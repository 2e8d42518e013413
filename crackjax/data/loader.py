"""Training and evaluation batches: grain over the array_record sources of `crackjax.data.registry`.

Training order (see docs/architecture.md): the train split's record indices are shuffled with
``config.seed``, reshuffled every epoch, and the epochs concatenated into one infinite stream;
global batch ``k`` is stream positions ``[k*B, (k+1)*B)``. Every process builds that same
stream and loads only its contiguous slice of each global batch, so the data seen is
independent of the number of processes and resuming at step ``k`` needs no iterator state.
All randomness in the loader (crops, noise) is seeded by ``(config.seed, stream position)``.

The loader reads plain data: a `LoaderSpec` (derived once from the config by
`crackjax.experiment.specs.loader_spec_of`) and the ``data`` group as a mapping (`crop_size`).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grain
import jax
import numpy as np
import PIL.Image

from crackjax.data import mixture
from crackjax.data.registry import record_name

# Threads decoding PNGs in parallel; PIL releases the GIL while decoding.
_READ_THREADS = 4
_PREFETCH_BATCHES = 4
# (probability, lowest quality, highest quality) of the JPEG re-compression: never (base config).
JPEG_NEVER = (0.0, 30, 95)


@dataclasses.dataclass(frozen=True)
class LoaderSpec:
  """What the train iterator reads of a run's config (`create_train_iterator`).

  Attributes:
    batch_size: the global batch size (``config.batch_size``), split over the processes.
    seed: the seed of the shuffles, crops and noise (``config.seed``).
    crop_size: (H, W) of the random training crops (`crop_size`); None: whole images.
    noise_std: std of the Gaussian noise added to training images (``config.data.noise_std``).
    scale_range: (low, high) of the random resize before the crop (`scale_range`).
    jpeg: (probability, lowest quality, highest quality) of the JPEG re-compression of a
      crop (`jpeg`); probability 0: none.
    dataset: the dataset's name (``config.data.name``), for messages.
    train_split: the train split's name (``config.data.train_split``), for messages.
  """

  batch_size: int
  seed: int
  crop_size: tuple[int, int] | None = None
  noise_std: float = 0.0
  scale_range: tuple[float, float] = (1.0, 1.0)
  jpeg: tuple[float, int, int] = JPEG_NEVER
  dataset: str = ''
  train_split: str = 'train'


def crop_size(data: Mapping[str, Any]) -> tuple[int, int] | None:
  """(H, W) of the random training crops, ``config.data.input_size`` of the ``data`` group
  `data` (plain data); None: whole images."""
  size = data.get('input_size')
  if size is None:
    return None
  if len(size) != 2:
    raise ValueError(f'config.data.input_size must be (H, W) or None, got {size!r}')
  return int(size[0]), int(size[1])


def scale_range(data: Mapping[str, Any]) -> tuple[float, float]:
  """(low, high) of ``config.data.scale_range`` of the ``data`` group `data` (plain data): every
  training photo is resized by a factor drawn log-uniformly from it before the crop; a recorded
  config from before the field has none: (1.0, 1.0), as stored."""
  low, high = data.get('scale_range') or (1.0, 1.0)
  return float(low), float(high)


def jpeg(data: Mapping[str, Any]) -> tuple[float, int, int]:
  """(probability, low, high) of ``config.data.jpeg_probability`` / ``jpeg_quality`` of the
  ``data`` group `data` (plain data); a recorded config from before the fields has none:
  `JPEG_NEVER`."""
  low, high = data.get('jpeg_quality') or JPEG_NEVER[1:]
  return float(data.get('jpeg_probability') or 0.0), int(low), int(high)


def recompress(image: np.ndarray, quality: int) -> np.ndarray:
  """uint8 H x W x 3 `image` JPEG-encoded at `quality` (PIL, 4:2:0 as most cameras) and
  decoded again."""
  buffer = io.BytesIO()
  PIL.Image.fromarray(image).save(buffer, format='JPEG', quality=int(quality))
  buffer.seek(0)
  with PIL.Image.open(buffer) as decoded:
    return np.asarray(decoded.convert('RGB'))


def _rescale(image: np.ndarray, mask: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
  """Image (bilinear) and mask (nearest) resized by `scale` (a mixture member's crop rule)."""
  if scale == 1.0:
    return image, mask
  h, w = image.shape[:2]
  size = (max(1, round(w * scale)), max(1, round(h * scale)))
  image = np.asarray(PIL.Image.fromarray(image).resize(size, PIL.Image.BILINEAR))
  mask = np.asarray(PIL.Image.fromarray(mask[..., 0]).resize(size, PIL.Image.NEAREST))[..., None]
  return image, mask


def _pad_to(image: np.ndarray, mask: np.ndarray, size: tuple[int, int]):
  """Both mirrored at their bottom and right edges up to at least `size` (H, W): a mixture's
  members include photos smaller than the common crop (CRACK500's 121-pixel side)."""
  (h, w), (th, tw) = image.shape[:2], size
  pad = ((0, max(0, th - h)), (0, max(0, tw - w)), (0, 0))
  if pad[0][1] == 0 and pad[1][1] == 0:
    return image, mask
  return np.pad(image, pad, mode='symmetric'), np.pad(mask, pad, mode='symmetric')


def load_example(
  source: Sequence[dict[str, Any]],
  record_index: int,
  position: int,
  *,
  seed: int,
  input_size: tuple[int, int] | None,
  noise_std: float,
  scale_range: tuple[float, float] = (1.0, 1.0),
  jpeg: tuple[float, int, int] = JPEG_NEVER,
) -> dict[str, np.ndarray]:
  """Reads one training record; scale, crop, JPEG and noise are seeded by (seed, stream
  position).

  A record is first resized by a factor drawn log-uniformly from `scale_range` (nothing drawn
  for (1, 1)) times, in a mixture (`mixture.MixedSource`), its member's ``scale``, and
  mirrored up to the crop size where it is then smaller."""
  record = source[record_index]
  image = np.asarray(record['image'])
  mask = np.asarray(record['mask'])
  rng = np.random.default_rng((seed, position))
  scale = 1.0
  if tuple(scale_range) != (1.0, 1.0):
    low, high = scale_range
    scale = float(np.exp(rng.uniform(np.log(low), np.log(high))))
  mixed = isinstance(source, mixture.MixedSource)
  if mixed:
    scale *= source.scales[record['member']]
  if mixed or scale != 1.0:
    image, mask = _rescale(image, mask, scale)
    if input_size is not None:
      image, mask = _pad_to(image, mask, input_size)
  if input_size is not None and input_size != image.shape[:2]:
    (h, w), (th, tw) = image.shape[:2], input_size
    if th > h or tw > w:
      raise ValueError(
        f'config.data.input_size {input_size} is larger than image {record_name(record)!r} '
        f'({h}x{w}); crops cannot grow an image.'
      )
    top = int(rng.integers(0, h - th + 1))
    left = int(rng.integers(0, w - tw + 1))
    image = image[top : top + th, left : left + tw]
    mask = mask[top : top + th, left : left + tw]
  probability, low, high = jpeg
  if probability > 0 and rng.random() < probability:  # nothing drawn when never
    image = recompress(image, int(rng.integers(low, high + 1)))
  image = image.astype(np.float32) / 255.0
  if noise_std > 0:
    image = np.clip(image + rng.normal(0.0, noise_std, image.shape).astype(np.float32), 0.0, 1.0)
  return {'image': image, 'mask': mask.astype(np.float32), 'name': record_name(record)}


def _stack(examples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
  shapes = {ex['image'].shape for ex in examples}
  if len(shapes) > 1:
    sizes = ', '.join(f'{ex["name"]}: {ex["image"].shape[:2]}' for ex in examples)
    raise ValueError(
      f'Images of one batch differ in size ({sizes}); set config.data.input_size '
      'to crop them to a common size.'
    )
  return {
    'image': np.stack([ex['image'] for ex in examples]),
    'mask': np.stack([ex['mask'] for ex in examples]),
  }


def mixed_stream(source: mixture.MixedSource, seed: int) -> grain.MapDataset:
  """Stream position -> record index of a mixture: each member's records shuffled and
  repeated on their own (seed ``(seed, member)``), interleaved in the proportions of the
  members' weights (`grain.MapDataset.mix`: deterministic, so position k is the same record in
  every process and after a resume)."""
  members = []
  for k, (n, offset) in enumerate(zip(source.lengths, source.offsets, strict=True)):
    if n == 0:
      raise ValueError(f'Mixture member {source.names[k]!r} has an empty train split.')
    stream = grain.MapDataset.range(n).shuffle(seed=seed + 7919 * (k + 1)).repeat()
    members.append(stream.map(lambda i, offset=offset: offset + i))
  return grain.MapDataset.mix(members, weights=source.weights)


def create_train_iterator(
  spec: LoaderSpec,
  source: Sequence[dict[str, Any]],
  *,
  start_step: int = 0,
  process_index: int | None = None,
  process_count: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
  """Infinite iterator over this process's part of global batches start_step, start_step+1, ...

  Args:
    spec: the batch size, seed, crop size and noise (`LoaderSpec`).
    source: the train split's source (`crackjax.data.splits.Splits.train_source`).
    start_step: number of the first global batch to yield (the training step to resume at).
    process_index: this process (default ``jax.process_index()``).
    process_count: number of processes (default ``jax.process_count()``).

  Yields:
    ``{'image': float32 [B_local, H, W, 3] in [0, 1], 'mask': float32 [B_local, H, W, 1]}``
    with ``B_local = spec.batch_size // process_count``, rows
    ``[process_index * B_local, (process_index + 1) * B_local)`` of global batch k.

  Raises:
    ValueError: batch size not divisible by the process count, bad input_size, or (when
      iterating) images of one batch that differ in size with input_size None.
  """
  process_index = jax.process_index() if process_index is None else process_index
  process_count = jax.process_count() if process_count is None else process_count
  if spec.batch_size % process_count:
    raise ValueError(
      f'config.batch_size={spec.batch_size} is not divisible by the process count {process_count}.'
    )
  if not 0 <= process_index < process_count:
    raise ValueError(f'process_index {process_index} not in [0, {process_count}).')
  if start_step < 0:
    raise ValueError(f'start_step must be >= 0, got {start_step}')
  local_batch = spec.batch_size // process_count
  input_size = spec.crop_size
  seed = int(spec.seed)
  noise_std = float(spec.noise_std or 0.0)
  scales = tuple(spec.scale_range)
  jpeg_rule = tuple(spec.jpeg)
  if len(source) == 0:
    raise ValueError(f'Split {spec.train_split!r} of {spec.dataset!r} is empty.')

  def load(group: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    return _stack(
      [
        load_example(
          source,
          record,
          position,
          seed=seed,
          input_size=input_size,
          noise_std=noise_std,
          scale_range=scales,
          jpeg=jpeg_rule,
        )
        for position, record in group
      ]
    )

  # Stream position g -> record index; shuffle-then-repeat reshuffles every epoch.
  if isinstance(source, mixture.MixedSource):
    ds = mixed_stream(source, seed)
  else:
    ds = grain.MapDataset.range(len(source)).shuffle(seed=seed).repeat()
  ds = ds.map_with_index(lambda position, record: (position, record))
  # Local groups: group m = positions [m*B_local, (m+1)*B_local); global batch k is groups
  # k*P .. k*P+P-1, so this process takes every P-th group starting at start_step*P + p.
  ds = ds.batch(local_batch, drop_remainder=True, batch_fn=list)
  ds = ds.slice(slice(start_step * process_count + process_index, None, process_count))
  ds = ds.map(load)
  return iter(
    ds.to_iter_dataset(
      grain.ReadOptions(num_threads=_READ_THREADS, prefetch_buffer_size=_PREFETCH_BATCHES)
    )
  )


def eval_example(source: Sequence[dict[str, Any]], index: int) -> dict[str, Any]:
  """Record `index` of `source` as `eval_examples` yields it."""
  record = source[index]
  return {
    'image': np.asarray(record['image'], np.float32) / 255.0,
    'mask': np.asarray(record['mask'], np.float32),
    'name': record_name(record),
  }


def eval_examples(source: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
  """Every record of `source` (a split's source, `Splits.source`) once, in stored order.

  Yields:
    ``{'image': float32 [H, W, 3] in [0, 1], 'mask': float32 [H, W, 1], 'name': str}``.
  """
  for i in range(len(source)):
    yield eval_example(source, i)
