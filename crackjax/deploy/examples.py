"""Example road photos for a first try (``crackjax-predict --examples``), made here, not shipped.

No public crack photo may be redistributed with crackjax's code (the datasets are for
non-commercial research), so the examples are drawn: a grey asphalt texture (fine grain, stones,
a slow shading) with dark cracks of a few pixels' width along random walks, as a camera held
about a metre above the road sees them. Deterministic: the same photos on every machine.

- ``example_1_longitudinal.png``: one crack along the road with a short branch;
- ``example_2_transverse.png``: one crack across the road;
- ``example_3_alligator.png``: a patch of small interconnected cells (fatigue cracking);
- ``example_4_clean.png``: no crack (the mask should stay empty).

`write_examples` writes only into a folder it owns: a new (or empty) one, or one holding its
manifest (`MANIFEST`: each example's SHA-256 as written) whose examples are unchanged. A folder
of the user's (no manifest), or an example changed since, is refused in one line
(`NotTheirFolder`): nothing of the user's is overwritten, even with --overwrite.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import PIL.Image
from scipy import ndimage
from skimage import draw

from crackjax.runs import outputs

#: Each example's file name and its cracks: 'longitudinal', 'transverse', 'alligator', 'none'.
EXAMPLES: dict[str, str] = {
  'example_1_longitudinal.png': 'longitudinal',
  'example_2_transverse.png': 'transverse',
  'example_3_alligator.png': 'alligator',
  'example_4_clean.png': 'none',
}
SIZE = (320, 480)  # H, W: CrackForest's photos' size
#: The examples' own manifest in their folder: {'files': {name: sha256 as written}}. Not the
#: outputs' manifest (`crackjax.runs.outputs.MANIFEST`): the examples stay photos to a later
#: search of the folder.
MANIFEST = '.crackjax-examples.json'


class NotTheirFolder(ValueError):
  """The examples' folder holds what `write_examples` did not write (one line, naming it)."""


def _asphalt(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
  """An H x W grey asphalt texture in [0, 1]: grain at several scales, stones, shading."""
  h, w = size
  tex = 0.45 + 0.03 * rng.standard_normal()
  tex = tex + sum(
    a * ndimage.gaussian_filter(rng.standard_normal(size), s) / max(1e-6, 1.0 / (2 * s + 1))
    for a, s in ((0.05, 0.7), (0.02, 2.0), (0.012, 8.0))
  )
  stones = ndimage.gaussian_filter((rng.random(size) < 0.012).astype(float), 1.0)
  tex = tex + 0.9 * stones * rng.choice([-1.0, 1.0], size)
  yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
  tex = tex + 0.05 * (yy - 0.5) * rng.standard_normal() + 0.04 * (xx - 0.5)
  return tex


def _walk(rng, start, angle, steps, step=6.0, wobble=0.25):
  """Points of a random walk from `start` (row, col) heading `angle` (radians)."""
  points = [np.asarray(start, float)]
  for _ in range(steps):
    angle += wobble * rng.standard_normal()
    points.append(points[-1] + step * np.array([np.sin(angle), np.cos(angle)]))
  return points


def _polyline(points, size) -> np.ndarray:
  line = np.zeros(size, bool)
  for a, b in zip(points[:-1], points[1:], strict=True):
    rr, cc = draw.line(int(a[0]), int(a[1]), int(b[0]), int(b[1]))
    keep = (rr >= 0) & (rr < size[0]) & (cc >= 0) & (cc < size[1])
    line[rr[keep], cc[keep]] = True
  return line


def _cracks(rng: np.random.Generator, kind: str, size: tuple[int, int]) -> np.ndarray:
  """The centre lines (bool H x W) of `kind`'s cracks."""
  h, w = size
  lines = np.zeros(size, bool)
  if kind == 'longitudinal':  # along the road: top to bottom of the photo
    main = _walk(rng, (0, w * 0.45), np.pi / 2, 60, wobble=0.18)
    lines |= _polyline(main, size)
    lines |= _polyline(_walk(rng, main[30], np.pi / 2 - 0.9, 12), size)
  elif kind == 'transverse':  # across the road: left to right
    lines |= _polyline(_walk(rng, (h * 0.55, 0), 0.0, 90, wobble=0.15), size)
  elif kind == 'alligator':  # small cells: a jittered grid of short segments in one patch
    cell = 34
    top, left = h * 0.2, w * 0.25
    nodes = {
      (i, j): (top + i * cell + rng.normal(0, 5), left + j * cell + rng.normal(0, 5))
      for i in range(6)
      for j in range(7)
    }
    for (i, j), p in nodes.items():
      for q in ((i + 1, j), (i, j + 1)):
        if q in nodes and rng.random() < 0.85:
          mid = (np.asarray(p) + np.asarray(nodes[q])) / 2 + rng.normal(0, 3, 2)
          lines |= _polyline([np.asarray(p), mid, np.asarray(nodes[q])], size)
  elif kind != 'none':
    raise ValueError(f'unknown example kind {kind!r}')
  return lines


def example_photo(name: str) -> tuple[np.ndarray, np.ndarray]:
  """(H x W x 3 uint8 photo, H x W bool crack mask) of example `name` (a key of EXAMPLES)."""
  kind = EXAMPLES[name]
  rng = np.random.default_rng(sorted(EXAMPLES).index(name) + 2024)
  tex = _asphalt(rng, SIZE)
  lines = _cracks(rng, kind, SIZE)
  # Crack width (px) varies slowly along the crack; darkness falls off with the distance.
  width = 1.2 + 1.3 * ndimage.gaussian_filter(rng.random(SIZE), 20) / 0.5
  distance = ndimage.distance_transform_edt(~lines) if lines.any() else np.full(SIZE, np.inf)
  depth = 0.28 * np.exp(-((distance / width) ** 2))
  tex = tex - depth
  tint = np.array([1.0, 0.99, 0.96]) * (1 + 0.02 * rng.standard_normal(3))
  rgb = np.clip(tex[..., None] * tint, 0, 1)
  return (rgb * 255 + 0.5).astype(np.uint8), distance <= width * 0.8


def _sha256(path: Path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(folder: Path) -> dict[str, str] | None:
  """{name: sha256} of the examples' manifest in `folder`; None: none, or not one of ours."""
  try:
    files = json.loads((folder / MANIFEST).read_text()).get('files')
  except (OSError, ValueError, AttributeError):
    return None
  if not isinstance(files, dict):
    return None
  return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def not_theirs(folder: str | Path) -> str | None:
  """Why `write_examples` must not write into `folder` (one line naming it), or None: the
  folder is new or empty, or holds the examples' manifest and every example there is as it
  was written."""
  folder = Path(folder)
  if not folder.exists() and not folder.is_symlink():
    return None
  advice = 'move it away or choose another --out; nothing was written or predicted.'
  if folder.is_symlink() or not folder.is_dir():
    return f'{folder} is not a folder of the examples: {advice}'
  if not any(folder.iterdir()):
    return None
  own = _manifest(folder)
  if own is None:
    return (
      f'{folder} holds files that --examples did not write (it has no {MANIFEST}), and the '
      f'examples are written only into a folder of their own: {advice}'
    )
  for name in EXAMPLES:
    path = folder / name
    if (path.exists() or path.is_symlink()) and (
      not path.is_file() or path.is_symlink() or own.get(name) != _sha256(path)
    ):
      return f'{path} is not the example --examples wrote there (changed since): {advice}'
  return None


#: The folder of the examples in crackjax-predict's --out.
FOLDER = 'examples'


def write_into(out: str | Path) -> list[Path]:
  """crackjax-predict --examples: the examples written into ``out/examples/`` (`write_examples`,
  every path checked inside `out` first, `outputs.check_inside`); their paths, the only photos
  of that folder to predict.

  Raises:
    ValueError: one line naming the folder or file at fault (`NotTheirFolder`, a link:
      `outputs.UnsafeOutputError`); nothing is written.
  """
  folder = Path(out) / FOLDER
  outputs.check_inside(out, [folder / n for n in [*EXAMPLES, MANIFEST]])
  return write_examples(folder)


def write_examples(folder: str | Path) -> list[Path]:
  """Writes every example photo into `folder` (created) as PNG, and the folder's manifest;
  returns their paths.

  Raises:
    NotTheirFolder: `folder` is not the examples' own (`not_theirs`); nothing is written.
  """
  folder = Path(folder)
  problem = not_theirs(folder)
  if problem:
    raise NotTheirFolder(problem)
  folder.mkdir(parents=True, exist_ok=True)
  paths = []
  for name in EXAMPLES:
    photo, _ = example_photo(name)
    path = folder / name
    PIL.Image.fromarray(photo).save(path)
    paths.append(path)
  files = {p.name: _sha256(p) for p in paths}
  text = outputs.dumps({'written_by': 'crackjax-predict --examples', 'files': files}, indent=1)
  (folder / MANIFEST).write_text(text + '\n')
  return paths
