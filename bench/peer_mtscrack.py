"""Side by side with the published peer MTSCrack: its released ONNX file and crackjax's released
models on the same labelled test sets, scored by crackjax's own protocols; also their false
positives on crack-free patches (crack length per megapixel).

  python bench/peer_mtscrack.py --models=crackforest-unet-cpu,mtscrack \\
      --mtscrack_onnx=PATH/mtscrack_neural_eris_static.onnx \\
      --set=DeepCrack-full=IMAGES_DIR:MASKS_DIR --data=gaps384:test \\
      --manual_dir=gaps384=DIR --data_dir=DIR [--max_images=N|SET=N,...] \\
      [--out=results/peer_mtscrack]

scripts/peer_table.sh runs it on the sets of docs/models.md ("Side by side with MTSCrack").

Models (`--models`, comma-separated): ``mtscrack`` (the peer; needs `--mtscrack_onnx` and
onnxruntime, ``pip install onnxruntime`` or ``pip install -e '.[onnx]'``) and any released
model's name, model file or URL (`crackjax.Predictor.from_pretrained`), or NAME=FILE (a model file
shown as NAME: a release scored before it is registered).

MTSCrack's file (zfsu3722/MTS-Based-Lightweight-Pavement-Crack-Detection-Model,
``model/mtscrack_neural_eris_static.onnx``, which its README names as the exported model ready
for use; its ``mtscrack_ultimate_bgr.onnx`` and ``mtscrack_neural_eris_loop.onnx`` give the
same output) takes one 1 x 3 x 256 x 256 float32 image, BGR, 0-255 (its export script's first
layer makes grey as 0.114 B + 0.587 G + 0.299 R, then / 255) and gives 1 x 1 x 256 x 256 in
[0, 1] (a Hardtanh(0, 1)). Its scripts resize with OpenCV's INTER_LINEAR and count a crack where
the output is > 0 (cross_dataset_generalization_test.py: ``THRESHOLD = 0.0``). Here: the photo's
BGR pixels resized to 256 x 256 (`resize_linear`, INTER_LINEAR's half-pixel bilinear rule
without antialiasing, in numpy), the output resized back to the photo's size the same way;
that map is scored, and its mask is output > 0.

Sets: `--set=NAME=IMAGES_DIR:MASKS_DIR` (repeatable; masks matched by file name, a mask name
may end in _mask, _lab, _label or _gt; read as crackjax's builders read them,
`tfds_builders.reading`: a non-binary mask, e.g. a JPEG one, is crack where > half its range)
and `--data=DATASET:SPLIT` (a registered dataset, `crackjax.data.registry`, prepared into
`--data_dir` from `--manual_dir=DATASET=DIR` if needed). `--max_images` keeps N images of a
set, evenly spaced over its sorted list (deterministic; the output says so).

Scores (`--protocols`, default strict and tolerance_thin_gt): `crackjax.trainer.scoring.score`
on each model's probability maps, as crackjax-evaluate does (ODS F1, OIS F1, AP; the grid of
crackjax's configs: 100 uniform thresholds for strict, BSDS's 99 for the tolerance protocols,
0.5 and the tails), and the F1 of the mask the model delivers (`evaluation.at_threshold` at
0.5 on that 0/1 mask): ours at the model file's stored threshold (probability > t), MTSCrack by
its own rule (output > 0).

False positives (`crackjax.deploy.crack_free`): crack-free patches of each set, the images
whose masks are empty, whole, and the `--fp_window` x `--fp_window` windows of a regular grid
whose ground truth has no crack pixel within `--fp_margin` px (at most `--fp_max_patches`,
evenly spaced); each patch is predicted as a photo of its own and the skeleton length of the
mask (the model's rule as above) is summed, per megapixel.

Writes `--out`.json (everything, with timings) and `--out`.md (the tables).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from absl import flags

from crackjax import cli
from crackjax.runs import logs, outputs

PROG = 'bench/peer_mtscrack.py'
USAGE = (
  f'{PROG} --models=NAME|FILE|NAME=FILE,mtscrack [--mtscrack_onnx=FILE] '
  '(--set=NAME=IMAGES_DIR:MASKS_DIR | --data=DATASET:SPLIT) ... [flags]'
)
PEER = 'mtscrack'
PEER_SIZE = 256
ONNX_INSTALL = "pip install onnxruntime (or, in a clone, pip install -e '.[onnx]')"
MASK_SUFFIXES = ('_mask', '_lab', '_label', '_gt')
DEFAULT_PROTOCOLS = ('strict', 'tolerance_thin_gt')
REPO = Path(__file__).resolve().parents[1]


def _define_flags(fv: flags.FlagValues) -> None:
  d = {'flag_values': fv}
  flags.DEFINE_list(
    'models',
    ['crackforest-unet-cpu', PEER],
    f"models: '{PEER}' (MTSCrack's ONNX file, --mtscrack_onnx) and released models' names, "
    'model files or URLs',
    **d,
  )
  flags.DEFINE_string('mtscrack_onnx', None, "MTSCrack's ONNX file (docs/models.md)", **d)
  flags.DEFINE_multi_string(
    'set', [], 'a labelled folder pair NAME=IMAGES_DIR:MASKS_DIR; repeatable', **d
  )
  flags.DEFINE_multi_string('data', [], 'a registered dataset DATASET:SPLIT; repeatable', **d)
  flags.DEFINE_multi_string(
    'manual_dir', [], "DATASET=DIR: where a registered dataset's files are", **d
  )
  flags.DEFINE_string('data_dir', None, 'TFDS data directory of the registered datasets', **d)
  flags.DEFINE_list('protocols', list(DEFAULT_PROTOCOLS), 'protocols scored', **d)
  flags.DEFINE_list(
    'max_images',
    [],
    'N (every set) or SET=N: keep N images of a set, evenly spaced over its sorted list',
    **d,
  )
  flags.DEFINE_integer('fp_window', 128, 'side of the crack-free windows (px)', **d)
  flags.DEFINE_integer('fp_margin', 16, 'no ground-truth crack within this many px', **d)
  flags.DEFINE_integer('fp_max_patches', 200, 'crack-free patches per set at most', **d)
  flags.DEFINE_integer('workers', os.cpu_count() or 1, 'processes counting the metrics', **d)
  flags.DEFINE_string('out', 'results/peer_mtscrack', 'writes OUT.json and OUT.md', **d)
  flags.DEFINE_bool('progress', True, 'progress bars on stderr', **d)


# ---------------------------------------------------------------------------------------------
# MTSCrack


def resize_linear(array: np.ndarray, height: int, width: int) -> np.ndarray:
  """`array` (H x W or H x W x C) resized to `height` x `width` by OpenCV's INTER_LINEAR rule:
  half-pixel centres (source coordinate (i + 0.5) * H / height - 0.5, clamped to the image),
  two taps per axis, no antialiasing. uint8 in, uint8 out (rounded); else float32."""
  a = np.asarray(array)
  h, w = a.shape[:2]

  def taps(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    src = np.clip(src, 0, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, (src - lo).astype(np.float32)

  y0, y1, fy = taps(height, h)
  x0, x1, fx = taps(width, w)
  f = a.astype(np.float32)
  if f.ndim == 3:
    fy, fx = fy[:, None, None], fx[None, :, None]
  else:
    fy, fx = fy[:, None], fx[None, :]
  rows = f[y0] * (1 - fy) + f[y1] * fy
  out = rows[:, x0] * (1 - fx) + rows[:, x1] * fx
  if a.dtype == np.uint8:
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)
  return out.astype(np.float32)


def onnx_runner(path: str | Path) -> Callable[[np.ndarray], np.ndarray]:
  """The ONNX file's forward function (input 1 x 3 x 256 x 256 float32 -> its first output)
  on onnxruntime's CPU provider; SystemExit saying how to install onnxruntime if missing."""
  try:
    import onnxruntime
  except ImportError:
    sys.exit(f'{PROG}: MTSCrack runs on onnxruntime, which is not installed: {ONNX_INSTALL}.')
  if not Path(path).is_file():
    sys.exit(f'{PROG}: --mtscrack_onnx={path}: no such file (docs/models.md says where it is).')
  options = onnxruntime.SessionOptions()
  options.intra_op_num_threads = max(1, min(4, os.cpu_count() or 1))
  session = onnxruntime.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
  name = session.get_inputs()[0].name
  return lambda x: session.run(None, {name: x})[0]


class MtsCrack:
  """MTSCrack as a predictor: ``prob = peer(rgb)`` (H x W in [0, 1] for an H x W x 3 uint8
  RGB photo), crack where prob > `threshold` (0: its scripts' rule). `run`: the network,
  1 x 3 x 256 x 256 float32 BGR 0-255 -> 1 x 1 x 256 x 256 (`onnx_runner`, or a stand-in)."""

  name = 'MTSCrack'
  threshold = 0.0
  rule = 'output > 0 (its scripts)'

  def __init__(self, run: Callable[[np.ndarray], np.ndarray]):
    self.run = run

  def __call__(self, image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
      raise ValueError(f'expected an H x W x 3 uint8 RGB image, got {image.shape} {image.dtype}')
    h, w = image.shape[:2]
    bgr = resize_linear(image[..., ::-1], PEER_SIZE, PEER_SIZE)
    x = np.ascontiguousarray(bgr.astype(np.float32).transpose(2, 0, 1)[None])
    y = np.asarray(self.run(x), np.float32).reshape(PEER_SIZE, PEER_SIZE)
    return np.clip(resize_linear(np.clip(y, 0, 1), h, w), 0.0, 1.0)


class Ours:
  """A crackjax model file as a predictor (`crackjax.Predictor.from_pretrained`)."""

  def __init__(self, spec: str):
    from crackjax.deploy.predictor import Predictor

    # NAME=FILE: a model file shown under its release name (scored before it is registered).
    name, _, path = spec.partition('=') if '=' in spec else (spec, '', spec)
    self.name = name
    self.predictor = Predictor.from_pretrained(path)
    self.threshold = self.predictor.threshold
    self.rule = f'probability > {self.threshold:g} (stored in the model file)'

  def __call__(self, image: np.ndarray) -> np.ndarray:
    return self.predictor(image)


def load_models(specs: Sequence[str], onnx: str | None) -> list[Any]:
  models = []
  for spec in specs:
    if spec.lower() == PEER:
      if not onnx:
        sys.exit(f'{PROG}: --models={PEER} needs --mtscrack_onnx=FILE (docs/models.md).')
      models.append(MtsCrack(onnx_runner(onnx)))
    else:
      try:
        models.append(Ours(spec))
      except (OSError, ValueError) as e:
        sys.exit(f'{PROG}: --models: {spec}: {" ".join(str(e).split())}')
  return models


# ---------------------------------------------------------------------------------------------
# Data


def _mask_key(stem: str) -> str:
  for suffix in MASK_SUFFIXES:
    if stem.endswith(suffix):
      return stem[: -len(suffix)]
  return stem


def folder_pairs(images: str | Path, masks: str | Path) -> list[tuple[str, Path, Path]]:
  """(name, image file, mask file) of a labelled folder pair, sorted by name; a mask's name
  may carry one of `MASK_SUFFIXES`. ValueError naming unmatched files."""
  from crackjax.tfds_builders.listing import IMAGE_EXTENSIONS

  def listing(folder: Path) -> dict[str, Path]:
    return {
      p.stem: p
      for p in sorted(Path(folder).iterdir())
      if p.suffix.lower() in IMAGE_EXTENSIONS and not p.name.startswith('.')
    }

  found_images, found_masks = listing(Path(images)), listing(Path(masks))
  by_key = {}
  for stem, path in found_masks.items():
    key = stem if stem in found_images else _mask_key(stem)
    by_key[key] = path
  missing = sorted(set(found_images) - set(by_key))
  if missing:
    raise ValueError(f'{len(missing)} image(s) of {images} have no mask in {masks}: {missing[:5]}')
  return [(k, found_images[k], by_key[k]) for k in sorted(found_images)]


def subsample(n: int, keep: int | None) -> list[int]:
  """Indices of `keep` of `n` items evenly spaced over them (all when `keep` is None or
  >= n): a deterministic subsample of a sorted list."""
  if keep is None or keep >= n:
    return list(range(n))
  return np.unique(np.linspace(0, n - 1, keep).round().astype(int)).tolist()


def read_folder_set(
  images: str, masks: str, keep: int | None
) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], int]:
  """The (name, RGB uint8 image, 0/1 uint8 mask) triples of a folder pair (subsampled), and how
  many the set has."""
  from crackjax.tfds_builders import reading

  pairs = folder_pairs(images, masks)
  out = []
  for i in subsample(len(pairs), keep):
    name, image_path, mask_path = pairs[i]
    image = np.asarray(reading.load_rgb(image_path))
    mask = reading.load_mask(mask_path)
    if mask.shape != image.shape[:2]:
      raise ValueError(f'mask {mask_path} is {mask.shape}, its image {image.shape[:2]}')
    out.append((name, image, mask))
  return out, len(pairs)


def read_registered_set(
  dataset: str, split: str, manual_dir: str | None, data_dir: str | None, keep: int | None
) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], int]:
  """The same triples of a registered dataset's split (prepared first if needed)."""
  from crackjax.configs import base
  from crackjax.data import registry

  data = base.get_config().data
  data.name, data.manual_dir, data.data_dir = dataset, manual_dir, data_dir
  source = registry.get_data_source(data.to_dict(), split)
  out = []
  for i in subsample(len(source), keep):
    record = source[i]
    mask = np.asarray(record['mask'], np.uint8)[..., 0]
    out.append((registry.record_name(record), np.asarray(record['image'], np.uint8), mask))
  return out, len(source)


def parse_max_images(items: Sequence[str]) -> tuple[int | None, dict[str, int]]:
  """--max_images: (the default for every set, {set: N})."""
  default, per_set = None, {}
  for item in items:
    name, sep, value = item.rpartition('=')
    if not value.isdigit() or int(value) < 1:
      raise ValueError(f'--max_images={item}: expected N or SET=N with N >= 1')
    if sep:
      per_set[name] = int(value)
    else:
      default = int(value)
  return default, per_set


# ---------------------------------------------------------------------------------------------
# Scoring and tables


def score_model(
  probs: Sequence[np.ndarray],
  masks: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  protocols: Sequence[str],
  *,
  workers: int = 1,
  progress: bool = False,
) -> dict[str, dict[str, float]]:
  """Per protocol: ODS F1 (and its threshold, P, R), OIS F1, AP (`scoring.score`, as
  crackjax-evaluate scores) of the probability maps, and P/R/F1 of the model's own 0/1 `masks`
  (``f1_model``, `evaluation.at_threshold` at 0.5)."""
  from crackjax import evaluation
  from crackjax.evaluation.eval_plan import EvalPlan
  from crackjax.trainer import scoring

  plan = EvalPlan(
    dataset='peer', folder=None, split='test', protocols=tuple(protocols), num_thresholds=100
  )
  results = scoring.score(probs, gts, plan, workers=workers, progress=progress)
  binary = [np.asarray(m, np.float32) for m in masks]
  out = {}
  for protocol, r in results.items():
    point = evaluation.at_threshold(binary, gts, protocol=protocol, threshold=0.5)
    out[protocol] = {
      'ods_f1': r.ods.f1,
      'ods_threshold': r.ods.threshold,
      'ods_precision': r.ods.precision,
      'ods_recall': r.ods.recall,
      'ois_f1': r.ois.f1,
      'ap': r.ap,
      'f1_model': point['f1'],
      'precision_model': point['precision'],
      'recall_model': point['recall'],
    }
  return out


def evaluate_set(
  models: Sequence[Any],
  triples: Sequence[tuple[str, np.ndarray, np.ndarray]],
  protocols: Sequence[str],
  *,
  fp_window: int = 128,
  fp_margin: int = 16,
  fp_max_patches: int | None = 200,
  workers: int = 1,
  progress: bool = False,
) -> dict[str, Any]:
  """Every model on one set: its scores (`score_model`) and false positives on the set's
  crack-free patches (`crack_free`), with the seconds each part took."""
  import tqdm

  from crackjax.deploy import crack_free

  gts = [np.asarray(t[2], bool) for t in triples]
  patches, counts = crack_free.crack_free_patches(
    triples, size=fp_window, margin=fp_margin, max_patches=fp_max_patches
  )
  result: dict[str, Any] = {
    'images': len(triples),
    'crack_free': {
      'window': fp_window,
      'margin': fp_margin,
      **counts,
      'megapixels': sum(p.shape[0] * p.shape[1] for _, p in patches) / 1e6,
    },
    'models': {},
  }
  for model in models:
    t0 = time.perf_counter()
    probs = []
    for _, image, _ in tqdm.tqdm(triples, desc=f'{model.name} predict', disable=not progress):
      probs.append(np.asarray(model(image), np.float32))
    predict_s = time.perf_counter() - t0
    masks = [p > model.threshold for p in probs]
    t1 = time.perf_counter()
    scores = score_model(probs, masks, gts, protocols, workers=workers, progress=progress)
    score_s = time.perf_counter() - t1
    del probs, masks
    t2 = time.perf_counter()
    fp = None
    if patches:
      with tqdm.tqdm(
        total=len(patches), desc=f'{model.name} crack-free', disable=not progress
      ) as bar:
        fp = crack_free.fp_length_per_mp(
          model, (p for _, p in patches), threshold=model.threshold, progress=bar.update
        )
    result['models'][model.name] = {
      'threshold': model.threshold,
      'rule': model.rule,
      'protocols': scores,
      'crack_free': fp,
      'seconds': {
        'predict': predict_s,
        'score': score_s,
        'crack_free': time.perf_counter() - t2,
      },
    }
  return result


def _pct(value: float | None) -> str:
  return '' if value is None else f'{100 * value:.1f}'


def markdown(record: dict[str, Any]) -> str:
  """The tables of a record (`main`'s JSON): scores per set, model and protocol; false
  positives on crack-free patches per set and model."""
  lines = [
    f"Scores (percent) of each model on each set; F1 of the model's mask: ours at the model "
    f"file's threshold, MTSCrack where output > 0. {record['command']}",
    '',
    '| set | images | model | protocol | ODS F1 (t) | OIS F1 | AP | F1 of its mask |',
    '|---|---|---|---|---|---|---|---|',
  ]
  for set_name, s in record['sets'].items():
    images = f'{s["images"]}' + (
      f' of {s["images_in_set"]}' if s['images'] != s['images_in_set'] else ''
    )
    for model, m in s['models'].items():
      for protocol, p in m['protocols'].items():
        lines.append(
          f'| {set_name} | {images} | {model} | {protocol} | {_pct(p["ods_f1"])} '
          f'({p["ods_threshold"]:.3g}) | {_pct(p["ois_f1"])} | {_pct(p["ap"])} | '
          f'{_pct(p["f1_model"])} |'
        )
  lines += [
    '',
    "False positives on crack-free patches: skeleton length of the model's mask per megapixel "
    '(whole images whose masks are empty, and windows with no ground-truth crack within the '
    'margin, predicted as photos of their own).',
    '',
    '| set | patches (whole + windows kept) | MP | model | FP length (px / MP) '
    '| patches with any FP |',
    '|---|---|---|---|---|---|',
  ]
  for set_name, s in record['sets'].items():
    c = s['crack_free']
    for model, m in s['models'].items():
      fp = m['crack_free']
      if fp is None:
        lines.append(f'| {set_name} | 0 | 0 | {model} | | |')
        continue
      lines.append(
        f'| {set_name} | {c["kept"]} ({c["whole_images"]} + {c["windows"]} windows '
        f'{c["window"]} px, margin {c["margin"]}) | {c["megapixels"]:.2f} | {model} | '
        f'{fp["length_per_mp"]:.0f} | {fp["images_with_fp"]} of {fp["images"]} |'
      )
  return '\n'.join(lines) + '\n'


def _machine() -> str:
  cpu = platform.processor() or platform.machine()
  try:
    for line in Path('/proc/cpuinfo').read_text().splitlines():
      if line.startswith('model name'):
        cpu = line.split(':', 1)[1].strip()
        break
  except OSError:
    pass
  return f'{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}'


def _commit() -> str | None:
  try:
    out = subprocess.run(
      ['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'],
      capture_output=True,
      text=True,
      check=True,
    )
    return out.stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None


def _sha256(path: str | Path) -> str:
  return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  argv = [PROG, *(sys.argv[1:] if argv is None else argv)]
  logs.quiet_third_party_logs()
  fv = flags.FlagValues()
  _define_flags(fv)
  cli.parse_flags(fv, argv, prog=PROG, usage=USAGE)
  if not fv.set and not fv.data:
    sys.exit(f'{PROG}: give at least one --set or --data; usage: {USAGE}')
  from crackjax import evaluation

  unknown = [p for p in fv.protocols if p not in evaluation.PROTOCOLS]
  if unknown:
    sys.exit(f'{PROG}: unknown --protocols {unknown}; known: {sorted(evaluation.PROTOCOLS)}')
  try:
    default_keep, keep = parse_max_images(fv.max_images)
  except ValueError as e:
    sys.exit(f'{PROG}: {e}')
  manual = dict(item.partition('=')[::2] for item in fv.manual_dir)
  sets = []
  for spec in fv.set:
    name, sep, dirs = spec.partition('=')
    images, sep2, masks = dirs.partition(':')
    if not (sep and sep2 and name and images and masks):
      sys.exit(f'{PROG}: --set={spec}: expected NAME=IMAGES_DIR:MASKS_DIR')
    for path in (images, masks):
      if not Path(path).is_dir():
        sys.exit(f'{PROG}: --set={spec}: {path} is not a folder')
    sets.append((name, 'folder', (images, masks)))
  for spec in fv.data:
    dataset, sep, split = spec.partition(':')
    if not (sep and dataset and split):
      sys.exit(f'{PROG}: --data={spec}: expected DATASET:SPLIT')
    sets.append((spec, 'data', (dataset, split)))
  models = load_models(fv.models, fv.mtscrack_onnx)
  record: dict[str, Any] = {
    'command': shlex.join(['python', PROG, *argv[1:]]),  # quoted as a shell takes it
    'commit': _commit(),
    'machine': _machine(),
    'date': datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC'),
    'protocols': list(fv.protocols),
    'models': {
      m.name: {
        'threshold': m.threshold,
        'rule': m.rule,
        **(
          {'onnx': str(fv.mtscrack_onnx), 'sha256': _sha256(fv.mtscrack_onnx)}
          if isinstance(m, MtsCrack)
          else {}
        ),
      }
      for m in models
    },
    'sets': {},
  }
  out = Path(fv.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  for name, kind, args in sets:
    n = keep.get(name, default_keep)
    t0 = time.perf_counter()
    try:
      if kind == 'folder':
        triples, total = read_folder_set(*args, n)
        source = f'folder {args[0]} : {args[1]}'
      else:
        triples, total = read_registered_set(args[0], args[1], manual.get(args[0]), fv.data_dir, n)
        source = f'registered dataset {args[0]}, split {args[1]}'
    except Exception as e:  # DatasetError, ValueError, OSError: one line naming the set
      sys.exit(f'{PROG}: {name}: {type(e).__name__}: {" ".join(str(e).split())}')
    read_s = time.perf_counter() - t0
    subsampled = len(triples) < total
    print(
      f'{PROG}: {name}: {len(triples)} of {total} images'
      + (' (evenly spaced subsample, --max_images)' if subsampled else '')
      + f', read in {read_s:.1f} s',
      flush=True,
    )
    result = evaluate_set(
      models,
      triples,
      fv.protocols,
      fp_window=fv.fp_window,
      fp_margin=fv.fp_margin,
      fp_max_patches=fv.fp_max_patches,
      workers=fv.workers,
      progress=fv.progress,
    )
    record['sets'][name] = {
      'source': source,
      'images_in_set': total,
      'subsampled': subsampled,
      'read_seconds': read_s,
      **result,
    }
    for model, m in result['models'].items():
      scores = ', '.join(f'{p} ODS F1 {v["ods_f1"]:.3f}' for p, v in m['protocols'].items())
      fp = m['crack_free']
      fp_text = f', FP {fp["length_per_mp"]:.0f} px/MP' if fp else ''
      secs = ', '.join(f'{k} {v:.0f} s' for k, v in m['seconds'].items())
      print(f'  {model}: {scores}{fp_text} ({secs})', flush=True)
    # Written after every set, so that a long run interrupted keeps what it measured.
    Path(f'{out}.json').write_text(outputs.dumps(record, indent=2) + '\n')
    Path(f'{out}.md').write_text(markdown(record))
  print(markdown(record))
  print(f'{PROG}: wrote {out}.json and {out}.md')
  return record


if __name__ == '__main__':
  main()
  sys.exit(0)
