"""Input pipeline: grain over ``tfds`` array_record data sources, plus pure-JAX augmentation.

Reading never imports TensorFlow: builders store array_record files and we read them with
``builder.as_data_source(split)`` (random access, decoded with PIL).

Training order (see docs/architecture.md): the train split's record indices are shuffled with
``config.seed``, reshuffled every epoch, and the epochs concatenated into one infinite stream;
global batch ``k`` is stream positions ``[k*B, (k+1)*B)``. Every process builds that same
stream and loads only its contiguous slice of each global batch, so the data seen is
independent of the number of processes and resuming at step ``k`` needs no iterator state.
All randomness in the loader (crops, noise) is seeded by ``(config.seed, stream position)``.

Preparation with several processes: every process calls `get_data_source`; the first to take
an exclusive ``fcntl`` lock on ``<data_dir>/<dataset>.lock`` prepares the dataset, the others
block on the lock and then find it prepared. With a data_dir that is not shared between hosts,
each host prepares its own (identical, deterministic) copy. Preparing once before launching
(e.g. ``python -c 'from crackjax import input_pipeline; ...get_data_source(config, "train")'``)
avoids the wait altogether.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import textwrap
from collections.abc import Iterator, Sequence
from typing import Any

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tfds_builders.aiglern import AigleRN
from tfds_builders.bjn260 import BJN260
from tfds_builders.crack360 import Crack360
from tfds_builders.crack_folder import CrackDataError, CrackFolder, ManualFilesMissingError
from tfds_builders.crackforest import CrackForest, CrackForestDataError

# Explicit registry: config.dataset -> builder class.
DATASETS: dict[str, type[tfds.core.GeneratorBasedBuilder]] = {
    'crackforest': CrackForest,
    'aiglern': AigleRN,
    'crack360': Crack360,
    'bjn260': BJN260,
    'crack_folder': CrackFolder,
}


class DatasetError(ValueError):
  """The dataset cannot be prepared: its files are invalid (the message names the file)."""


class DatasetNotFoundError(DatasetError):
  """The dataset's files are not where the config says (message: what to get, where to put it)."""

# Threads decoding PNGs in parallel; PIL releases the GIL while decoding.
_READ_THREADS = 4
_PREFETCH_BATCHES = 4


def _expand(path: str | None) -> str | None:
  return os.path.expandvars(os.path.expanduser(path)) if path else None


def _folder_kwargs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Builder kwargs of dataset 'crack_folder' from ``config.folder`` (configs/base.py)."""
  folder = config.get('folder')
  if folder is None or not folder.get('images') or not folder.get('masks'):
    raise DatasetNotFoundError(
        "Dataset 'crack_folder' needs your folders: pass --config.folder.images=DIR "
        '--config.folder.masks=DIR (images and masks matched by file name; see docs/datasets.md).')
  return dict(image_dir=_expand(folder.images), mask_dir=_expand(folder.masks),
              train_list=_expand(folder.get('train_list')),
              test_list=_expand(folder.get('test_list')),
              mask_threshold=folder.get('mask_threshold'),
              mask_polarity=folder.get('mask_polarity'), mask_suffix=folder.get('mask_suffix'))


def get_builder(config: ml_collections.ConfigDict) -> tfds.core.GeneratorBasedBuilder:
  """Constructs (does not prepare) the builder of ``config.dataset`` in ``config.data_dir``.

  Dataset 'crack_folder' also takes its folders from ``config.folder``.

  Raises:
    ValueError: if ``config.dataset`` is not a key of `DATASETS`.
    DatasetNotFoundError: 'crack_folder' without ``config.folder.images`` / ``.masks``.
  """
  try:
    builder_cls = DATASETS[config.dataset]
  except KeyError:
    raise ValueError(
        f'Unknown dataset {config.dataset!r}; known datasets: {sorted(DATASETS)}') from None
  kwargs = _folder_kwargs(config) if builder_cls is CrackFolder else {}
  return builder_cls(data_dir=_expand(config.data_dir), **kwargs)


def _check_manual_dir(builder: tfds.core.GeneratorBasedBuilder, manual_dir: str | None) -> None:
  """Raises DatasetNotFoundError if the builder needs a manual download that is not there."""
  if not getattr(builder, 'MANUAL_DIR_REQUIRED', False):
    return
  if not manual_dir:
    problem = 'config.manual_dir is not set'
  elif not os.path.isdir(manual_dir):
    problem = f'config.manual_dir={manual_dir} does not exist'
  elif not os.listdir(manual_dir):
    problem = f'config.manual_dir={manual_dir} is empty'
  else:
    return
  instructions = textwrap.dedent(builder.MANUAL_DOWNLOAD_INSTRUCTIONS).strip()
  raise DatasetNotFoundError(
      f'Dataset {builder.name!r} needs files you download yourself, and {problem}.\n'
      f'{instructions}\n'
      f'It is prepared once into {builder.data_dir_root}; later runs with the same '
      '--config.data_dir need no manual_dir.')


def _dataset_error(e: BaseException) -> DatasetError | None:
  """The DatasetError to raise for an error of a builder's preparation, if it is one."""
  while e is not None:
    if isinstance(e, ManualFilesMissingError):
      return DatasetNotFoundError(str(e))
    if isinstance(e, (CrackDataError, CrackForestDataError)):
      return DatasetError(str(e))
    e = e.__cause__ or e.__context__
  return None


@contextlib.contextmanager
def _file_lock(path: epath.Path) -> Iterator[None]:
  """Exclusive inter-process lock (POSIX flock), so that only one process prepares."""
  path.parent.mkdir(parents=True, exist_ok=True)
  with open(os.fspath(path), 'a') as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _prepared_builder(config: ml_collections.ConfigDict) -> tfds.core.GeneratorBasedBuilder:
  """Returns the builder of ``config``, preparing the dataset first if needed.

  Raises:
    DatasetNotFoundError: the dataset needs files that are absent (message: what and where).
    DatasetError: a file of the dataset is unusable (the message names it).
  """
  builder = get_builder(config)
  if builder.is_prepared():
    return builder
  lock = epath.Path(builder.data_dir_root) / f'{builder.name}.lock'
  with _file_lock(lock):
    # Another process may have prepared it while we waited for the lock; a fresh builder
    # then reads the dataset info (splits, sizes) from disk.
    builder = get_builder(config)
    if not builder.is_prepared():
      manual_dir = _expand(config.manual_dir)
      _check_manual_dir(builder, manual_dir)
      try:
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
      except Exception as e:  # A builder's data error: re-raise with its message only.
        error = _dataset_error(e)
        if error is None:
          raise
        raise error from e
  return get_builder(config)


def prepare_dataset(config: ml_collections.ConfigDict) -> tfds.core.GeneratorBasedBuilder:
  """Prepares ``config.dataset`` if needed and returns its builder; cheap once prepared.

  Call it first (launch.py does) so that absent or invalid files stop a run at once with
  `DatasetNotFoundError` / `DatasetError`, before any model is built.
  """
  return _prepared_builder(config)


def get_data_source(config: ml_collections.ConfigDict, split: str) -> Sequence[dict[str, Any]]:
  """Random-access source of ``split`` (preparing the dataset first if needed).

  Records are dicts ``{'image': uint8 [H, W, 3], 'mask': uint8 [H, W, 1], 'name': bytes}``.
  """
  return _prepared_builder(config).as_data_source(split)


def _input_size(config: ml_collections.ConfigDict) -> tuple[int, int] | None:
  size = config.get('input_size')
  if size is None:
    return None
  if len(size) != 2:
    raise ValueError(f'config.input_size must be (H, W) or None, got {size!r}')
  return int(size[0]), int(size[1])


def _name(record: dict[str, Any]) -> str:
  name = record['name']
  return name.decode() if isinstance(name, bytes) else str(name)


def _load_example(source: Sequence[dict[str, Any]], record_index: int, position: int, *,
                  seed: int, input_size: tuple[int, int] | None,
                  noise_std: float) -> dict[str, np.ndarray]:
  """Reads one training record; crop and noise are seeded by (seed, stream position)."""
  record = source[record_index]
  image = np.asarray(record['image'])
  mask = np.asarray(record['mask'])
  rng = np.random.default_rng((seed, position))
  if input_size is not None and input_size != image.shape[:2]:
    (h, w), (th, tw) = image.shape[:2], input_size
    if th > h or tw > w:
      raise ValueError(
          f'config.input_size {input_size} is larger than image {_name(record)!r} '
          f'({h}x{w}); crops cannot grow an image.')
    top = int(rng.integers(0, h - th + 1))
    left = int(rng.integers(0, w - tw + 1))
    image = image[top:top + th, left:left + tw]
    mask = mask[top:top + th, left:left + tw]
  image = image.astype(np.float32) / 255.0
  if noise_std > 0:
    image = np.clip(image + rng.normal(0.0, noise_std, image.shape).astype(np.float32), 0.0, 1.0)
  return {'image': image, 'mask': mask.astype(np.float32), 'name': _name(record)}


def _stack(examples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
  shapes = {ex['image'].shape for ex in examples}
  if len(shapes) > 1:
    sizes = ', '.join(f"{ex['name']}: {ex['image'].shape[:2]}" for ex in examples)
    raise ValueError(f'Images of one batch differ in size ({sizes}); set config.input_size '
                     'to crop them to a common size.')
  return {
      'image': np.stack([ex['image'] for ex in examples]),
      'mask': np.stack([ex['mask'] for ex in examples]),
  }


def create_train_iterator(config: ml_collections.ConfigDict, *, start_step: int = 0,
                          process_index: int | None = None,
                          process_count: int | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Infinite iterator over this process's part of global batches start_step, start_step+1, ...

  Args:
    config: reads dataset, data_dir, manual_dir, train_split, seed, batch_size, input_size,
      noise_std.
    start_step: number of the first global batch to yield (the training step to resume at).
    process_index: this process (default ``jax.process_index()``).
    process_count: number of processes (default ``jax.process_count()``).

  Yields:
    ``{'image': float32 [B_local, H, W, 3] in [0, 1], 'mask': float32 [B_local, H, W, 1]}``
    with ``B_local = config.batch_size // process_count``, rows
    ``[process_index * B_local, (process_index + 1) * B_local)`` of global batch k.

  Raises:
    ValueError: batch size not divisible by the process count, bad input_size, or (when
      iterating) images of one batch that differ in size with input_size None.
  """
  process_index = jax.process_index() if process_index is None else process_index
  process_count = jax.process_count() if process_count is None else process_count
  if config.batch_size % process_count:
    raise ValueError(f'config.batch_size={config.batch_size} is not divisible by the '
                     f'process count {process_count}.')
  if not 0 <= process_index < process_count:
    raise ValueError(f'process_index {process_index} not in [0, {process_count}).')
  if start_step < 0:
    raise ValueError(f'start_step must be >= 0, got {start_step}')
  local_batch = config.batch_size // process_count
  input_size = _input_size(config)
  seed = int(config.seed)
  noise_std = float(config.get('noise_std', 0.0) or 0.0)
  source = get_data_source(config, config.train_split)
  if len(source) == 0:
    raise ValueError(f'Split {config.train_split!r} of {config.dataset!r} is empty.')

  def load(group: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    return _stack([
        _load_example(source, record, position, seed=seed, input_size=input_size,
                      noise_std=noise_std) for position, record in group
    ])

  # Stream position g -> record index; shuffle-then-repeat reshuffles every epoch.
  ds = grain.MapDataset.range(len(source)).shuffle(seed=seed).repeat()
  ds = ds.map_with_index(lambda position, record: (position, record))
  # Local groups: group m = positions [m*B_local, (m+1)*B_local); global batch k is groups
  # k*P .. k*P+P-1, so this process takes every P-th group starting at start_step*P + p.
  ds = ds.batch(local_batch, drop_remainder=True, batch_fn=list)
  ds = ds.slice(slice(start_step * process_count + process_index, None, process_count))
  ds = ds.map(load)
  return iter(ds.to_iter_dataset(
      grain.ReadOptions(num_threads=_READ_THREADS, prefetch_buffer_size=_PREFETCH_BATCHES)))


def eval_examples(config: ml_collections.ConfigDict,
                  split: str | None = None) -> Iterator[dict[str, Any]]:
  """Every record of ``split`` (default ``config.test_split``) once, in stored order.

  Yields:
    ``{'image': float32 [H, W, 3] in [0, 1], 'mask': float32 [H, W, 1], 'name': str}``.
  """
  source = get_data_source(config, split or config.test_split)
  for i in range(len(source)):
    record = source[i]
    yield {
        'image': np.asarray(record['image'], np.float32) / 255.0,
        'mask': np.asarray(record['mask'], np.float32),
        'name': _name(record),
    }


# ----------------------------------------------------------------------------- augmentation


def _affine_matrix(key: jax.Array, height: int, width: int, *, rotation_range: float,
                   width_shift_range: float, height_shift_range: float, shear_range: float,
                   zoom_range: float, horizontal_flip: bool) -> tuple[jax.Array, jax.Array]:
  """Samples one Keras-style transform; returns (3x3 output->input matrix, flip flag).

  Coordinates are (row, col, 1), as in Keras' ``apply_affine_transform`` (which hands the
  matrix to ``scipy.ndimage.affine_transform``, i.e. it maps output pixels to input pixels).
  """
  # One draw of 7 numbers in [-1, 1) (a single threefry call compiles much faster than 6).
  u = jax.random.uniform(key, (7,), minval=-1.0, maxval=1.0)
  theta = jnp.deg2rad(u[0] * rotation_range)
  tx = u[1] * height_shift_range * height  # Keras: tx shifts rows, from the height range.
  ty = u[2] * width_shift_range * width
  shear = jnp.deg2rad(u[3] * shear_range)
  zx, zy = 1.0 + u[4] * zoom_range, 1.0 + u[5] * zoom_range  # Independent zoom per axis.
  one, zero = jnp.ones(()), jnp.zeros(())
  rotation = jnp.array([[jnp.cos(theta), -jnp.sin(theta), zero],
                        [jnp.sin(theta), jnp.cos(theta), zero], [zero, zero, one]])
  shift = jnp.array([[one, zero, tx], [zero, one, ty], [zero, zero, one]])
  shear_m = jnp.array([[one, -jnp.sin(shear), zero], [zero, jnp.cos(shear), zero],
                       [zero, zero, one]])
  zoom = jnp.array([[zx, zero, zero], [zero, zy, zero], [zero, zero, one]])
  matrix = rotation @ shift @ shear_m @ zoom  # Same composition order as Keras.
  # About the image centre. Keras uses h/2 + 0.5, one pixel off; (h-1)/2 is the true centre
  # of pixel-centred coordinates, and keeps the identity transform exact.
  cr, cc = (height - 1) / 2.0, (width - 1) / 2.0
  to_centre = jnp.array([[1.0, 0.0, cr], [0.0, 1.0, cc], [0.0, 0.0, 1.0]])
  from_centre = jnp.array([[1.0, 0.0, -cr], [0.0, 1.0, -cc], [0.0, 0.0, 1.0]])
  matrix = to_centre @ matrix @ from_centre
  flip = jnp.logical_and(horizontal_flip, u[6] < 0.0)  # Probability 1/2.
  return matrix, flip


def _sample(image: jax.Array, rows: jax.Array, cols: jax.Array, order: int) -> jax.Array:
  """Samples image [H, W, C] at float coordinates [H', W'] with 'nearest' edge fill."""
  h, w = image.shape[:2]
  if order == 0:
    r = jnp.clip(jnp.round(rows), 0, h - 1).astype(jnp.int32)
    c = jnp.clip(jnp.round(cols), 0, w - 1).astype(jnp.int32)
    return image[r, c]
  if order != 1:
    raise ValueError(f'order must be 0 or 1, got {order}')
  # Bilinear; clipping the corner indices is scipy's mode='nearest' (edge replication).
  r0, c0 = jnp.floor(rows), jnp.floor(cols)
  fr, fc = (rows - r0)[..., None], (cols - c0)[..., None]
  r0i = jnp.clip(r0, 0, h - 1).astype(jnp.int32)
  r1i = jnp.clip(r0 + 1, 0, h - 1).astype(jnp.int32)
  c0i = jnp.clip(c0, 0, w - 1).astype(jnp.int32)
  c1i = jnp.clip(c0 + 1, 0, w - 1).astype(jnp.int32)
  top = image[r0i, c0i] * (1 - fc) + image[r0i, c1i] * fc
  bottom = image[r1i, c0i] * (1 - fc) + image[r1i, c1i] * fc
  return (top * (1 - fr) + bottom * fr).astype(image.dtype)


def augment(rng: jax.Array, image: jax.Array, mask: jax.Array, *, rotation_range: float = 0.0,
            width_shift_range: float = 0.0, height_shift_range: float = 0.0,
            shear_range: float = 0.0, zoom_range: float = 0.0, horizontal_flip: bool = False,
            image_order: int = 1) -> tuple[jax.Array, jax.Array]:
  """Random affine transform of a batch, the same per example for image and mask.

  Keras ``ImageDataGenerator`` semantics (the zhixuhao/unet recipe): rotation by
  U(-rotation_range, rotation_range) degrees, shifts by U(-r, r) * size, shear by
  U(-shear_range, shear_range) degrees, zoom factors U(1 - zoom_range, 1 + zoom_range)
  drawn independently per axis, all about the image centre, then a horizontal flip with
  probability 1/2 if enabled; fill_mode 'nearest' (edge pixels extend outward).

  Args:
    rng: PRNG key; each example gets its own split of it.
    image: [B, H, W, C] float images.
    mask: [B, H, W, Cm] masks; sampled with nearest neighbour so binary stays binary.
    rotation_range: degrees.
    width_shift_range: fraction of the width.
    height_shift_range: fraction of the height.
    shear_range: degrees (Keras' shear angle).
    zoom_range: fraction.
    horizontal_flip: whether to flip left-right with probability 1/2.
    image_order: 1 (bilinear, like Keras) or 0 (nearest) interpolation for the image.

  Returns:
    (image, mask) transformed, same shapes and dtypes.
  """
  batch, height, width = image.shape[:3]
  if mask.shape[:3] != (batch, height, width):
    raise ValueError(f'image {image.shape} and mask {mask.shape} differ in [B, H, W].')
  rows, cols = jnp.meshgrid(jnp.arange(height, dtype=jnp.float32),
                            jnp.arange(width, dtype=jnp.float32), indexing='ij')

  def one(key, img, msk):
    matrix, flip = _affine_matrix(
        key, height, width, rotation_range=rotation_range,
        width_shift_range=width_shift_range, height_shift_range=height_shift_range,
        shear_range=shear_range, zoom_range=zoom_range, horizontal_flip=horizontal_flip)
    # Keras flips after the affine transform: output column c reads affine column W-1-c.
    out_cols = jnp.where(flip, width - 1 - cols, cols)
    src_rows = matrix[0, 0] * rows + matrix[0, 1] * out_cols + matrix[0, 2]
    src_cols = matrix[1, 0] * rows + matrix[1, 1] * out_cols + matrix[1, 2]
    return (_sample(img, src_rows, src_cols, image_order),
            _sample(msk, src_rows, src_cols, 0))

  return jax.vmap(one)(jax.random.split(rng, batch), image, mask)


def augment_from_config(rng: jax.Array, image: jax.Array, mask: jax.Array,
                        config: ml_collections.ConfigDict) -> tuple[jax.Array, jax.Array]:
  """`augment` with the ranges of ``config.augment``; identity if it is not enabled."""
  aug = config.augment
  if not aug.enabled:
    return image, mask
  return augment(rng, image, mask, rotation_range=aug.rotation_range,
                 width_shift_range=aug.width_shift_range,
                 height_shift_range=aug.height_shift_range, shear_range=aug.shear_range,
                 zoom_range=aug.zoom_range, horizontal_flip=aug.horizontal_flip)
