"""Predicted masks to a COCO file for a labelling tool, and corrected labels back to folders.

Export (`export_masks`): one COCO ``images`` entry per photo of a crackjax-predict output
folder (``file_name`` its path under the photos' folder, as the labelling task holds it), one
annotation per 8-connected crack component of its mask in category 1 ``crack``: an RLE mask
(pycocotools' compressed ``counts``, ``iscrowd`` 1, as CVAT writes masks) or, with
``polygons=True``, its outlines as polygons (``iscrowd`` 0: what Label Studio's COCO import
reads; not pixel exact, `polygon_masks`). A photo without crack has no annotation.

Import (`import_labels`): a COCO file's images (RLE, compressed or not, or polygons; every
category unless named) into ``images/`` and ``masks/`` (0/255 PNG, the union of its
annotations) of the layout configs/crack_folder.py and configs/finetune.py read. An image of
the file that is not in the photos' folder, or whose size differs from its entry, is left out
with one line naming it; an image without annotations is a crack-free photo (an empty mask).

pycocotools is needed (``pip install 'crackjax[labels]'``).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import shutil
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import PIL.Image
from scipy import ndimage

from crackjax.runs import outputs

CATEGORY = {'id': 1, 'name': 'crack', 'supercategory': 'distress'}
EIGHT = np.ones((3, 3), bool)


def _mask_utils():
  try:
    from pycocotools import mask as mask_utils
  except ImportError as e:
    raise ValueError(
      "COCO files need pycocotools: pip install 'crackjax[labels]' (or pycocotools)"
    ) from e
  return mask_utils


def rle_of(mask: np.ndarray) -> dict[str, Any]:
  """A bool mask as COCO's compressed RLE ({'size': [h, w], 'counts': str})."""
  rle = _mask_utils().encode(np.asfortranarray(mask.astype(np.uint8)))
  return {'size': [int(v) for v in rle['size']], 'counts': rle['counts'].decode('ascii')}


def polygons_of(mask: np.ndarray) -> list[list[float]]:
  """The outlines of a bool mask as COCO polygons [x1, y1, x2, y2, ...] along pixel edges
  (marching squares at 0.5 between pixel centres; holes are not kept)."""
  from skimage import measure as sk_measure

  polygons = []
  for contour in sk_measure.find_contours(np.pad(mask, 1).astype(np.float32), 0.5):
    # Index units with pixel centres at integers, padded by 1; COCO's pixel (x, y) spans
    # [x, x + 1): its centre is x + 0.5.
    xy = (contour[:, ::-1] - 1 + 0.5).round(2)
    if len(xy) >= 3:
      polygons.append([float(v) for v in xy.ravel()])
  return polygons


def _decoded(utils: Any, rle: dict[str, Any]) -> np.ndarray:
  with warnings.catch_warnings():  # pycocotools 2.0.x under numpy 2: a copy keyword warning
    warnings.simplefilter('ignore', DeprecationWarning)
    return utils.decode(rle).astype(bool)


def decode(segmentation: Any, height: int, width: int) -> np.ndarray:
  """An annotation's segmentation (compressed or uncompressed RLE, or polygons) as a bool
  H x W mask.

  Raises:
    ValueError: a segmentation of another form or size.
  """
  utils = _mask_utils()
  if isinstance(segmentation, dict):
    if list(segmentation.get('size', ())) != [height, width]:
      raise ValueError(f'an RLE of size {segmentation.get("size")} on a {height}x{width} image')
    counts = segmentation.get('counts')
    if isinstance(counts, list):
      rle = utils.frPyObjects(segmentation, height, width)
    elif isinstance(counts, str | bytes):
      rle = {'size': [height, width], 'counts': counts}
      rle['counts'] = counts.encode('ascii') if isinstance(counts, str) else counts
    else:
      raise ValueError('an RLE without counts')
    return _decoded(utils, rle)
  if isinstance(segmentation, list):
    polygons = [p for p in segmentation if isinstance(p, list) and len(p) >= 6]
    if not polygons:
      return np.zeros((height, width), bool)
    rles = utils.frPyObjects(polygons, height, width)
    return _decoded(utils, utils.merge(rles))
  raise ValueError(f'a segmentation that is neither RLE nor polygons ({type(segmentation)})')


def annotations_of(mask: np.ndarray, *, polygons: bool = False) -> list[dict[str, Any]]:
  """One annotation (without ids) per 8-connected component of `mask`."""
  utils = _mask_utils()
  labels, count = ndimage.label(mask, structure=EIGHT)
  found = []
  for index, box in enumerate(ndimage.find_objects(labels), start=1):
    component = labels == index
    rle = rle_of(component)
    encoded = {'size': rle['size'], 'counts': rle['counts'].encode('ascii')}
    y, x = box
    entry = {
      'category_id': CATEGORY['id'],
      'area': int(utils.area(encoded)),
      'bbox': [x.start, y.start, x.stop - x.start, y.stop - y.start],
      'iscrowd': 0 if polygons else 1,
      'segmentation': polygons_of(component) if polygons else rle,
    }
    found.append(entry)
  assert len(found) == count
  return found


@dataclasses.dataclass(frozen=True)
class Exported:
  """What `export_masks` wrote: images, annotations, and photos left out (name: why)."""

  images: int
  annotations: int
  left_out: dict[str, str]


def export_masks(
  rows: Sequence[Mapping[str, Any]],
  masks: Path,
  coco_file: Path,
  *,
  images_root: Path | None = None,
  polygons: bool = False,
) -> Exported:
  """A COCO file of the predicted masks of measurements.csv's `rows` (module docstring).

  Args:
    rows: measurements.csv's rows (name, source, height, width).
    masks: the prediction's masks/ folder (<name>.png, 255 = crack).
    coco_file: the file to write.
    images_root: the folder whose paths `file_name` gives (default: the photos' common
      folder).
    polygons: outlines as polygons instead of RLE masks.
  """
  sources = [Path(r['source']) for r in rows]
  if images_root is None:
    images_root = Path(os.path.commonpath([str(s.resolve().parent) for s in sources]))
  images, annotations, left_out = [], [], {}
  for row, source in zip(rows, sources, strict=True):
    try:
      file_name = source.resolve().relative_to(images_root.resolve()).as_posix()
    except ValueError:
      left_out[row['name']] = f'{source} is not under {images_root}'
      continue
    try:
      with PIL.Image.open(masks / f'{row["name"]}.png') as image:
        mask = np.asarray(image.convert('L')) > 127
    except OSError as e:
      left_out[row['name']] = f'its mask cannot be read ({e})'
      continue
    image_id = len(images) + 1
    height, width = mask.shape
    images.append({'id': image_id, 'file_name': file_name, 'height': height, 'width': width})
    for entry in annotations_of(mask, polygons=polygons):
      annotations.append({'id': len(annotations) + 1, 'image_id': image_id, **entry})
  coco = {
    'info': {'description': 'crackjax-predict masks as pre-annotations (crackjax-labels)'},
    'licenses': [],
    'images': images,
    'annotations': annotations,
    'categories': [CATEGORY],
  }
  coco_file.parent.mkdir(parents=True, exist_ok=True)
  partial = coco_file.with_name(coco_file.name + '.partial')
  partial.write_text(outputs.dumps(coco), encoding='utf-8')
  os.replace(partial, coco_file)
  return Exported(len(images), len(annotations), left_out)


@dataclasses.dataclass
class Imported:
  """What `import_labels` wrote and left out.

  Attributes:
    names: the pairs written (images/<name>.<ext>, masks/<name>.png).
    empty: of them, those without annotations (crack-free).
    left_out: {file_name: why} of the COCO file's images not written.
    lines: one line per kind of problem (the images not found, sizes, categories).
  """

  names: list[str]
  empty: list[str]
  left_out: dict[str, str]
  lines: list[str]


def _load(coco_file: Path) -> dict[str, Any]:
  try:
    coco = json.loads(coco_file.read_text(encoding='utf-8'))
  except (OSError, UnicodeDecodeError, ValueError) as e:
    raise ValueError(f'cannot read the COCO file {coco_file}: {e}') from e
  if not isinstance(coco, dict) or not isinstance(coco.get('images'), list):
    raise ValueError(f'{coco_file} is not a COCO file (no images list)')
  return coco


def _few(items: Sequence[str], shown: int = 3) -> str:
  return ', '.join(items[:shown]) + (f', ... ({len(items)} in all)' if len(items) > shown else '')


def _stem(file_name: str) -> str:
  """A COCO file_name as a flat file name without extension (folders joined by '__')."""
  return '__'.join(PurePosixPath(file_name).with_suffix('').parts)


def _labelled_mask(path: Path, image: Mapping[str, Any], annotations) -> np.ndarray | str:
  """The union of an image's annotations as a bool mask, or why it cannot be made."""
  try:
    with PIL.Image.open(path) as opened:
      width, height = opened.size
  except OSError as e:
    return f'cannot be read ({e})'
  if (image.get('height'), image.get('width')) != (height, width):
    return f'{width}x{height} in the folder, {image.get("width")}x{image.get("height")} in the file'
  mask = np.zeros((height, width), bool)
  try:
    for ann in annotations:
      mask |= decode(ann.get('segmentation'), height, width)
  except ValueError as e:
    return f'an annotation cannot be read ({e})'
  return mask


def import_labels(
  coco_file: Path,
  images_dir: Path,
  dataset: Path,
  *,
  categories: Sequence[str] | None = None,
) -> Imported:
  """The COCO file's labelled images into `dataset`/images and `dataset`/masks (module
  docstring).

  Args:
    coco_file: the corrected labels (CVAT's or Label Studio's COCO export).
    images_dir: the folder of the photos its file_names name (a file_name not found under it
      is looked for by its file name alone, where only one photo has it).
    dataset: the folder to write images/ and masks/ into.
    categories: the category names that are crack (default: every category).

  Raises:
    ValueError: the file cannot be read, or names none of `categories`.
  """
  coco = _load(coco_file)
  known = {c.get('id'): str(c.get('name')) for c in coco.get('categories') or []}
  wanted = set(known) if not categories else {i for i, n in known.items() if n in categories}
  if categories and not wanted:
    raise ValueError(
      f'{coco_file} has no category {", ".join(categories)} (it has: '
      f'{", ".join(known.values()) or "none"})'
    )
  by_image = collections.defaultdict(list)
  for ann in coco.get('annotations') or []:
    if ann.get('category_id') in wanted:
      by_image[ann.get('image_id')].append(ann)
  by_file_name = collections.defaultdict(list)
  for path in images_dir.rglob('*'):
    if path.is_file():
      by_file_name[path.name].append(path)
  result = Imported([], [], {}, [])
  stems: dict[str, str] = {}
  for image in coco['images']:
    file_name = str(image.get('file_name', ''))
    path = images_dir / file_name
    if not path.is_file():
      same = by_file_name.get(PurePosixPath(file_name).name, [])
      path = same[0] if len(same) == 1 else None
    stem = _stem(file_name)
    if path is None:
      result.left_out[file_name] = f'not in {images_dir}'
      continue
    if stem in stems:
      result.left_out[file_name] = f'the same name as {stems[stem]}'
      continue
    mask = _labelled_mask(path, image, by_image.get(image.get('id'), []))
    if isinstance(mask, str):
      result.left_out[file_name] = mask
      continue
    (dataset / 'images').mkdir(parents=True, exist_ok=True)
    (dataset / 'masks').mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, dataset / 'images' / f'{stem}{path.suffix.lower()}')
    PIL.Image.fromarray(mask.view(np.uint8) * np.uint8(255)).save(dataset / 'masks' / f'{stem}.png')
    stems[stem] = file_name
    result.names.append(stem)
    if not mask.any():
      result.empty.append(stem)
  missing = [f for f, why in result.left_out.items() if why.startswith('not in ')]
  if missing:
    result.lines.append(
      f'{len(missing)} image(s) of {coco_file.name} are not in {images_dir}, left out: '
      f'{_few(missing)}'
    )
  others = [f'{f} ({why})' for f, why in result.left_out.items() if f not in missing]
  if others:
    result.lines.append(f'{len(others)} image(s) of {coco_file.name} left out: {_few(others)}')
  return result
