"""Tiny fake datasets generated at test time, reusable by any test.

`make_fake_crackforest` writes a directory laid out like cuilimeng/CrackForest-dataset:
``image/NNN.jpg`` and ``groundTruth/NNN.mat`` (MATLAB struct ``groundTruth`` with fields
``Segmentation`` and ``Boundaries``, both uint8 HxW, loaded by ``scipy.io.loadmat`` as a 1x1
struct array exactly like the real files). Only the first ``n_labelled`` stems get a .mat.

Every Segmentation map has the same known pattern (see the ``*_PIXEL`` constants):
label 2 on row ``CRACK_ROW`` (crack), a 3x3 block of label 3 (background patch, NOT crack),
one pixel of label 4 (faint crack) and 1 everywhere else.

The last section holds what the model tests share: a training run through launch.py and
models built and applied abstractly (`jax.eval_shape`, no full-size weights).
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np
import PIL.Image
import scipy.io

CRACK_ROW = 5  # Segmentation == 2 on this whole row.
PATCH_PIXEL = (10, 10)  # Inside the 3x3 block of label 3 (background).
FAINT_CRACK_PIXEL = (20, 30)  # The single pixel of label 4 (crack).
BACKGROUND_PIXEL = (0, 0)  # Label 1.
REPO = Path(__file__).resolve().parents[1]


def load_bench(name: str):
  """bench/<name>.py as a module (the benches are scripts, not a package)."""
  spec = importlib.util.spec_from_file_location(f'bench_{name}', REPO / 'bench' / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def fake_segmentation(size: tuple[int, int]) -> np.ndarray:
  """Returns the uint8 region map (values 1..4) every fake .mat holds."""
  h, w = size
  if h <= max(CRACK_ROW, PATCH_PIXEL[0] + 1, FAINT_CRACK_PIXEL[0]) or w <= FAINT_CRACK_PIXEL[1]:
    raise ValueError(f'size {size} too small for the fixture pattern')
  seg = np.ones((h, w), np.uint8)
  seg[CRACK_ROW, :] = 2
  r, c = PATCH_PIXEL
  seg[r - 1 : r + 2, c - 1 : c + 2] = 3
  seg[FAINT_CRACK_PIXEL] = 4
  return seg


def fake_crack_mask(size: tuple[int, int]) -> np.ndarray:
  """The binary mask (uint8 HxW, 1 = crack) the builder must derive from the fixture."""
  return np.isin(fake_segmentation(size), (2, 4)).astype(np.uint8)


def write_mat(path: Path, segmentation: np.ndarray) -> None:
  """Writes a CrackForest-style .mat (struct groundTruth {Segmentation, Boundaries})."""
  boundaries = np.zeros_like(segmentation)
  boundaries[:, 1:] |= segmentation[:, 1:] != segmentation[:, :-1]
  boundaries[1:, :] |= segmentation[1:, :] != segmentation[:-1, :]
  # A dict becomes a 1x1 MATLAB struct; loadmat gives mat['groundTruth'][0, 0]['Segmentation'].
  scipy.io.savemat(
    path,
    {
      'groundTruth': {
        'Segmentation': segmentation.astype(np.uint8),
        'Boundaries': boundaries.astype(np.uint8),
      }
    },
  )


def make_fake_crackforest(
  root: Path, n_labelled: int = 10, n_unlabelled: int = 2, size: tuple[int, int] = (32, 48)
) -> Path:
  """Writes a tiny fake CrackForest archive under ``root`` and returns ``root``.

  Args:
    root: directory to create (parents too); becomes the dataset root holding ``image/`` and
      ``groundTruth/``.
    n_labelled: images 001..n_labelled, each with a .mat.
    n_unlabelled: further images without a .mat (ignored by the builder, like 119-155).
    size: (H, W) of every image and Segmentation map.

  Returns:
    ``root``.
  """
  root = Path(root)
  (root / 'image').mkdir(parents=True, exist_ok=True)
  (root / 'groundTruth').mkdir(parents=True, exist_ok=True)
  rng = np.random.default_rng(1234)
  seg = fake_segmentation(size)
  for i in range(1, n_labelled + n_unlabelled + 1):
    stem = f'{i:03d}'
    # Bright noisy pavement with dark cracks, so images differ and look vaguely real.
    image = rng.integers(150, 230, size=(*size, 3), dtype=np.uint8)
    image[np.isin(seg, (2, 4))] = 30
    PIL.Image.fromarray(image).save(root / 'image' / f'{stem}.jpg', quality=95)
    if i <= n_labelled:
      write_mat(root / 'groundTruth' / f'{stem}.mat', seg)
  return root


def fake_data_config(tmp_path: Path, **fake_kwargs) -> ml_collections.ConfigDict:
  """configs/base.py's config pointed at a fake CrackForest under ``tmp_path``.

  The raw files go to ``tmp_path/raw`` (created if missing) and the prepared TFDS data to
  ``tmp_path/tfds``. batch_size is 2 and input_size None (the fixture's stored size).

  Args:
    tmp_path: a fresh temporary directory (e.g. pytest's ``tmp_path``).
    **fake_kwargs: passed to `make_fake_crackforest`.
  """
  from crackjax.configs import base  # Imported here so that merely importing fixtures stays cheap.

  tmp_path = Path(tmp_path)
  raw = tmp_path / 'raw'
  if not (raw / 'groundTruth').exists():
    make_fake_crackforest(raw, **fake_kwargs)
  config = base.get_config()
  config.data.name = 'crackforest'
  config.data.manual_dir = str(raw)
  config.data.data_dir = str(tmp_path / 'tfds')
  config.batch_size = 2
  config.data.input_size = None
  return config


def smoke_data_dirs(root: Path) -> tuple[Path, Path]:
  """A fake CrackForest (10 labelled 32x48 images) under ``root/raw``; returns (raw, tfds)."""
  root = Path(root)
  return make_fake_crackforest(root / 'raw', n_labelled=10, size=(32, 48)), root / 'tfds'


def smoke_config(data_dirs: tuple[Path, Path]) -> ml_collections.ConfigDict:
  """configs/smoke.py reading the fake CrackForest of `smoke_data_dirs`."""
  from crackjax.configs import smoke

  raw, tfds_dir = data_dirs
  config = smoke.get_config()
  config.data.manual_dir = str(raw)
  config.data.data_dir = str(tfds_dir)
  return config


def shared_smoke_run(base_temp: Path) -> Path:
  """The one finished smoke run of a test session, trained by whichever process asks first
  and shared by every xdist worker (a file lock in the session's shared temp folder, the
  parent of a worker's `base_temp`): configs/smoke.py on `smoke_data_dirs`, 2 epochs of 3
  steps (checkpoints 3 and 6), scored under 'strict' at the end (eval.json, threshold.json).

  Read it; never write it (copy it first: shutil.copytree), since other tests read it at
  the same time.
  """
  from crackjax.experiment.build import build
  from crackjax.trainer import loop

  base_temp = Path(base_temp)
  shared = base_temp.parent if os.environ.get('PYTEST_XDIST_WORKER') else base_temp
  root = shared / 'shared_smoke_run'
  with open(shared / 'shared_smoke_run.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process dies
    if not (root / 'complete').exists():
      shutil.rmtree(root, ignore_errors=True)
      config = smoke_config(smoke_data_dirs(root / 'data'))
      config.eval.protocols = ('strict',)
      loop.train_and_evaluate(build(config), root / 'run')
      (root / 'complete').touch()
  return root / 'run'


# ----------------------------------------------------------------------------- image folders
# Shared by the crack_folder, aiglern, crack360 and bjn260 fixtures: every mask has the crack
# pattern `folder_crack_mask` (row CRACK_ROW and column FOLDER_CRACK_COL), images are bright
# noisy pavement with those pixels dark.

FOLDER_CRACK_COL = 3


def folder_crack_mask(size: tuple[int, int]) -> np.ndarray:
  """uint8 HxW, 1 = crack: row CRACK_ROW and column FOLDER_CRACK_COL."""
  mask = np.zeros(size, np.uint8)
  mask[CRACK_ROW, :] = 1
  mask[:, FOLDER_CRACK_COL] = 1
  return mask


def write_image(path: Path, array: np.ndarray, **save_kwargs) -> Path:
  """Saves a uint8 array (HxW or HxWx3) with PIL; the format follows the extension."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  PIL.Image.fromarray(array).save(path, **save_kwargs)
  return path


def fake_pair(
  size: tuple[int, int], seed: int, *, mask_high: int = 255, dark_cracks: bool = False
) -> tuple[np.ndarray, np.ndarray]:
  """(image uint8 HxWx3, mask uint8 HxW) with `folder_crack_mask`'s crack in value mask_high.

  dark_cracks: mask drawn black (0) on white (mask_high) instead.
  """
  crack = folder_crack_mask(size).astype(bool)
  image = np.random.default_rng(seed).integers(150, 230, size=(*size, 3), dtype=np.uint8)
  image[crack] = 30
  mask = np.where(crack != dark_cracks, mask_high, 0).astype(np.uint8)
  return image, mask


def make_fake_folder(
  root: Path,
  n: int = 10,
  size: tuple[int, int] = (32, 48),
  *,
  image_ext: str = '.jpg',
  mask_ext: str = '.png',
  mask_high: int = 255,
  sizes: dict[int, tuple[int, int]] | None = None,
  image_exts: dict[int, str] | None = None,
) -> tuple[Path, Path]:
  """Writes ``root/images/img_NN<ext>`` and ``root/masks/img_NN<ext>``; returns both dirs.

  Args:
    root: created if missing.
    n: number of pairs, named img_00 ... img_{n-1}.
    size: (H, W) of every pair, unless ``sizes`` gives another one for index i.
    image_ext / mask_ext: file extensions (any format PIL writes: .png .jpg .bmp .tif).
    mask_high: value of crack pixels in the masks (255 or 1).
    sizes: per-index (H, W) overrides.
    image_exts: per-index image extension overrides.
  """
  root = Path(root)
  images, masks = root / 'images', root / 'masks'
  for i in range(n):
    shape = (sizes or {}).get(i, size)
    image, mask = fake_pair(shape, i, mask_high=mask_high)
    write_image(
      images / f'img_{i:02d}{(image_exts or {}).get(i, image_ext)}',
      image,
      **({'quality': 95} if image_ext in ('.jpg', '.jpeg') else {}),
    )
    write_image(masks / f'img_{i:02d}{mask_ext}', mask)
  return images, masks


def fake_folder_config(tmp_path: Path, **folder_kwargs) -> ml_collections.ConfigDict:
  """configs/base.py pointed at a fake crack_folder under ``tmp_path`` (prepared in tfds/)."""
  from crackjax.configs import base

  tmp_path = Path(tmp_path)
  images, masks = tmp_path / 'folder' / 'images', tmp_path / 'folder' / 'masks'
  if not images.exists():
    images, masks = make_fake_folder(tmp_path / 'folder', **folder_kwargs)
  config = base.get_config()
  config.data.name = 'crack_folder'
  config.data.folder.images = str(images)
  config.data.folder.masks = str(masks)
  config.data.data_dir = str(tmp_path / 'tfds')
  config.batch_size = 2
  config.data.input_size = None
  return config


def make_fake_aiglern(root: Path, n: int = 8, *, dark_cracks: bool = True) -> Path:
  """A fake CrackDataset archive: ``root/DATASET/{IMAGES,GROUND_TRUTH}/AIGLE_RN/``.

  Ids ``F00A``, ``F01A``, ...; even ids named ``Im_<id>or.png``, odd ones ``Im_<id>.png`` (both
  variants of the real copies); ground truth ``GT_AIGLE_RN_<id>.png``. Grey images, sizes
  alternating (H, W) = (46, 31) and (46, 99) (the real 462x311 / 462x991 scaled by 1/10).
  dark_cracks: ground truth black cracks on white (else white on black). An ``ESAR`` sibling
  dataset with one image must be ignored. Returns ``root``.
  """
  root = Path(root)
  images = root / 'DATASET' / 'IMAGES' / 'AIGLE_RN'
  gts = root / 'DATASET' / 'GROUND_TRUTH' / 'AIGLE_RN'
  for i in range(n):
    size = (46, 31) if i % 2 == 0 else (46, 99)
    image, mask = fake_pair(size, i, dark_cracks=dark_cracks)
    name = f'Im_F{i:02d}Aor.png' if i % 2 == 0 else f'Im_F{i:02d}A.png'
    write_image(images / name, image[..., 0])
    write_image(gts / f'GT_AIGLE_RN_F{i:02d}A.png', mask)
  write_image(root / 'DATASET' / 'IMAGES' / 'ESAR' / 'Im_E01or.png', fake_pair((46, 31), 0)[0])
  return root


CRACKTREE_SIZE = (60, 80)  # (H, W): the real 600x800 scaled by 1/10.
CRKWH_SIZE = (32, 32)


def make_fake_crack360(
  root: Path, n_train: int = 5, n_test: int = 3, *, variant: str = 'subdirs'
) -> Path:
  """A fake Crack360 download under ``root``; returns ``root``.

  variant 'subdirs': ``CrackTree260/image/*.jpg`` + ``CrackTree260/gt/*.bmp`` and
  ``CRKWH100/image/*.png`` + ``CRKWH100/gt/*.bmp``. variant 'siblings' (as the separate
  archives extract, one level down in ``DeepCrack/``): ``CrackTree260/*.jpg`` +
  ``CrackTree260_gt/<name>_gt.png``, ``crkwh100/*.PNG`` + ``CRKWH100-GT/*.bmp``.
  Train images are CRACKTREE_SIZE, test images CRKWH_SIZE; names ``6xxx`` / ``1xxx``.
  """
  root = Path(root)
  if variant == 'subdirs':
    dirs = {
      'train': (root / 'CrackTree260' / 'image', root / 'CrackTree260' / 'gt', '.jpg', ''),
      'test': (root / 'CRKWH100' / 'image', root / 'CRKWH100' / 'gt', '.png', ''),
    }
  elif variant == 'siblings':
    base = root / 'DeepCrack'
    dirs = {
      'train': (base / 'CrackTree260', base / 'CrackTree260_gt', '.jpg', '_gt'),
      'test': (base / 'crkwh100', base / 'CRKWH100-GT', '.PNG', ''),
    }
  else:
    raise ValueError(variant)
  for split, n, size, first in (
    ('train', n_train, CRACKTREE_SIZE, 6000),
    ('test', n_test, CRKWH_SIZE, 1000),
  ):
    image_dir, gt_dir, ext, suffix = dirs[split]
    for i in range(n):
      image, mask = fake_pair(size, first + i)
      write_image(
        image_dir / f'{first + i}{ext}',
        image,
        **({'quality': 95} if ext == '.jpg' else {'format': 'PNG'}),
      )
      gt_ext = '.png' if suffix else '.bmp'
      write_image(gt_dir / f'{first + i}{suffix}{gt_ext}', mask)
  return root


BJN_SIZE = (480, 840)  # (H, W) of the fake originals (the real ones are 2240 x 3968).


def make_fake_bjn260(root: Path, n: int = 6, size: tuple[int, int] = BJN_SIZE) -> Path:
  """A fake ``CarNet_databases-main/datasets/BJN260/{img,gt}/IMG_<date>_<time>.png``.

  Masks are 0/255 with one-pixel-wide cracks (row CRACK_ROW, column FOLDER_CRACK_COL), so a
  test can check they survive the downscale to 480x320. Returns ``root``.
  """
  root = Path(root)
  base = root / 'CarNet_databases-main' / 'datasets' / 'BJN260'
  for i in range(n):
    image, mask = fake_pair(size, i)
    name = f'IMG_201805{i + 1:02d}_2130{i:02d}.png'
    write_image(base / 'img' / name, image)
    write_image(base / 'gt' / name, mask)
  return root


def public_set_folders() -> dict[str, str]:
  """The registry's split-folder datasets -> their copies' folder, the first their LAYOUT names
  (``<manual_dir>/DeepCrack/...``): a new one gets its fixture with no edit here."""
  from crackjax.data import registry
  from crackjax.tfds_builders import split_folders

  return {
    name: re.search(r'<manual_dir>/([^/{]+)/', entry.builder.LAYOUT).group(1)
    for name, entry in registry.DATASETS.items()
    if issubclass(entry.builder, split_folders.SplitFolderBuilder)
  }


PUBLIC_SIZE = (40, 56)  # (H, W): the public crops are ~128-240 pixels a side.


def make_fake_public_set(
  root: Path,
  name: str,
  *,
  layout: str = 'cropped',
  counts: dict[str, int] | None = None,
  size: tuple[int, int] = PUBLIC_SIZE,
) -> Path:
  """A fake copy of public dataset `name` (a key of `public_set_folders`) under ``root``; returns
  ``root``.

  layout 'cropped': ``Datasets/<Set>/{train,valid,test}/<n>.jpg`` + ``{split}_lab/<n>.jpg`` (the
  Lightweight-Modular-Model copy: JPEG masks); 'authors': ``<Set>/{train,test}_img/<n>.jpg`` +
  ``{split}_lab/<n>.png`` (DeepCrack's own); 'crop': ``<Set>/{train,val,test}crop/<n>.jpg`` +
  ``<n>_mask.png`` side by side (CRACK500's own). Names ``<split>_<i>``; every second crop is
  transposed (the copies hold both orientations). counts: images per split (default 3 each;
  'authors' has no validation split).
  """
  root = Path(root)
  folder = public_set_folders()[name]
  splits = {'cropped': ('train', 'valid', 'test'), 'authors': ('train', 'test')}.get(
    layout, ('train', 'val', 'test')
  )
  for split in splits:
    for i in range((counts or {}).get(split, 3)):
      shape = size if i % 2 == 0 else size[::-1]
      image, mask = fake_pair(shape, zlib.crc32(f'{name}{split}{i}'.encode()) % 1000)
      stem = f'{split}_{i}'
      if layout == 'cropped':
        base = root / 'Datasets' / folder
        write_image(base / split / f'{stem}.jpg', image, quality=95)
        write_image(base / f'{split}_lab' / f'{stem}.jpg', mask, quality=90)
      elif layout == 'authors':
        write_image(root / folder / f'{split}_img' / f'{stem}.jpg', image, quality=95)
        write_image(root / folder / f'{split}_lab' / f'{stem}.png', mask)
      elif layout == 'crop':
        write_image(root / folder / f'{split}crop' / f'{stem}.jpg', image, quality=95)
        write_image(root / folder / f'{split}crop' / f'{stem}_mask.png', mask)
      else:
        raise ValueError(layout)
  return root


# ------------------------------------------------------------------------- models, launch.py
# jax and crackjax are imported inside these helpers, as configs in `smoke_config`, so the
# data tests importing this module do not pay for them.


def train_through_launch(
  config: str, workdir: Path, data_dirs: tuple[Path, Path], *flags: str
) -> tuple[subprocess.CompletedProcess, list[dict]]:
  """Trains through launch.py (--mode=train) in a subprocess and checks that it succeeds.

  Args:
    config: the --config argument, e.g. 'configs/compare.py:segnet,smoke'.
    workdir: the run's --workdir.
    data_dirs: (raw, tfds): the fake CrackForest (--config.data.manual_dir) and its TFDS
      directory (--config.data.data_dir).
    *flags: further launch.py flags, e.g. '--config.num_epochs=1'.

  Returns:
    (the finished process, which exited 0; the rows of kind 'train' of its metrics.jsonl).
  """
  raw, tfds_dir = data_dirs
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / 'launch.py'),
      f'--config={config}',
      f'--workdir={workdir}',
      f'--config.data.manual_dir={raw}',
      f'--config.data.data_dir={tfds_dir}',
      *flags,
      '--mode=train',
    ],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=REPO,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [json.loads(line) for line in (Path(workdir) / 'metrics.jsonl').read_text().splitlines()]
  return proc, [r for r in rows if r['kind'] == 'train']


#: The model the fast tier checks through every per-model contract: the paper's revised U-Net.
#: The comparison models of Tables V-VIII are checked the same way in the slow tier (their
#: compiles and traces were about a sixth of the fast tier's time from a cold XLA cache).
FAST_TIER_MODELS = ('unet',)


def per_model(names: list[str]) -> list[Any]:
  """`names` as a parametrize list: the models of `FAST_TIER_MODELS` in the fast tier, the
  others marked slow."""
  import pytest

  return [n if n in FAST_TIER_MODELS else pytest.param(n, marks=pytest.mark.slow) for n in names]


def abstract_variables(model: Any, shape: tuple[int, ...] = (1, 64, 64, 3)) -> Any:
  """`model`'s variables for float32 images of `shape`, as shape structs (`jax.eval_shape`)."""
  import jax
  import jax.numpy as jnp

  return jax.eval_shape(model.init, jax.random.key(0), jax.ShapeDtypeStruct(shape, jnp.float32))


def tree_size(tree: Any) -> int:
  """The number of values in the leaves of `tree` (arrays or shape structs)."""
  import jax

  return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def abstract_outputs_in_both_modes(model: Any, hw: tuple[int, int], batch: int = 2) -> list[Any]:
  """`model`'s outputs (shape structs) for [batch, *hw, 3] float32 images through
  `crackjax.models.apply_model`, in eval mode and in train mode, its variables built abstractly.

  Checks that each mode hands back batch statistics of the structure of the model's own (None
  for a model without BatchNorm).

  Returns:
    [the eval-mode outputs, the train-mode outputs].
  """
  import jax
  import jax.numpy as jnp

  from crackjax.models import apply_model

  x = jax.ShapeDtypeStruct((batch, *hw, 3), jnp.float32)
  variables = abstract_variables(model, (1, *hw, 3))
  params, batch_stats = variables['params'], variables.get('batch_stats')
  outputs = []
  for train in (False, True):
    out, new_stats = jax.eval_shape(
      lambda p, s, x, train=train: apply_model(model.apply, p, x, batch_stats=s, train=train),
      params,
      batch_stats,
      x,
    )
    assert jax.tree.structure(new_stats) == jax.tree.structure(batch_stats), (
      f'train={train}: {jax.tree.structure(new_stats)} != {jax.tree.structure(batch_stats)}'
    )
    outputs.append(out)
  return outputs


def run_gpu_script(script: str, tmp_path: Path, timeout: int = 400, **env: str | None):
  """Runs one of the repository's scripts (scripts/*.sh: the one-call GPU scripts as on the
  device machine, or a CPU one such as release_roads_cpu.sh), on this CPU: its OUT and WORK under
  `tmp_path`, this interpreter first on PATH,
  the settings `env` (environment variables; a value of None removes one). Returns
  (the CompletedProcess, its stdout + stderr)."""
  import subprocess
  import sys

  full = dict(
    os.environ,
    PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get('PATH', '')]),
    OUT=str(tmp_path / 'out'),
    WORK=str(tmp_path / 'work'),
  )
  for key, value in env.items():
    if value is None:
      full.pop(key, None)
    else:
      full[key] = value
  done = subprocess.run(
    ['bash', script],
    capture_output=True,
    text=True,
    cwd=Path(__file__).resolve().parents[1],
    env=full,
    timeout=timeout,
  )
  return done, done.stdout + done.stderr


def typed_eval_record(
  step: int,
  ods: dict[str, tuple[float, float]],
  *,
  epoch: int = 1,
  split: str = 'test',
  dataset: str = 'crackforest',
  names: tuple[str, ...] | list[str] = ('a', 'b'),
  stored: dict[str, tuple[float, float]] | None = None,
  members: dict[str, float] | None = None,
  start_model: dict | None = None,
  per_image: bool = False,
):
  """A whole evaluation record (`EvalRecord`, as scoring builds it) of the images `names` whose
  protocols have the ODS (F1, threshold) of `ods`; `stored`: each protocol's point at a start
  model's stored threshold (operating point 'stored'); `members`: a mixture's datasets and
  their strict ODS F1 (the selection their mean); `start_model`: a fine-tuning's."""
  import dataclasses

  from crackjax import evaluation
  from crackjax.evaluation.result import MemberResult, OperatingPoint
  from crackjax.trainer import eval_records

  gts = [np.eye(8, dtype=bool)] * len(names)
  probs = [g * np.float32(0.7) for g in gts]

  def point(f1: float, t: float) -> OperatingPoint:
    return OperatingPoint(precision=f1, recall=f1, f1=f1, threshold=t)

  results = {}
  for protocol, value in ods.items():
    r = evaluation.protocol_result(probs, gts, protocol=protocol)
    if stored:
      r = dataclasses.replace(r, operating_points={'stored': point(*stored[protocol])})
    results[protocol] = dataclasses.replace(r, ods=point(*value))
  record = eval_records.evaluation_record(
    lambda s: epoch, dataset, (step, 0), split, list(names), results, eval_seconds=0.0,
    per_image=per_image,
  )  # fmt: skip
  if members:
    strict = results['strict'].summary()
    parts = {
      n: MemberResult(1, {'strict': dataclasses.replace(strict, ods=point(f1, 0.5))})
      for n, f1 in members.items()
    }
    record = eval_records.with_members(record, parts)
  return dataclasses.replace(record, start_model=start_model)


def eval_record(
  epoch: int,
  step: int,
  split: str,
  ods: dict[str, tuple[float, float]],
  *,
  dataset: str = 'crackforest',
  members: dict[str, float] | None = None,
) -> dict:
  """`typed_eval_record`'s JSON, as an epoch_<NNN>.json holds it."""
  from crackjax.runs import outputs

  record = typed_eval_record(step, ods, epoch=epoch, split=split, dataset=dataset, members=members)
  return json.loads(outputs.dumps(record.to_json()))
