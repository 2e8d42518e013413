"""The crack-type rule (crackjax/deploy/measure.py, `crack_type`) against labelled shapes: its
confusion table, beside the rule it replaced (issue 56).

  python bench/crack_types.py [--per_type=20] [--out=results/crack_types.md]

The shapes are drawn as a road engineer labels them (the LTPP Distress Identification Manual's
types), on 640 x 960 masks at the rule's assumed 2 mm a pixel, each from its own seed:

- ``longitudinal`` / ``transverse`` / ``diagonal``: one crack along a random walk within 15
  degrees of its direction (along the road: up the photo; across it; 45 degrees), 2-5 px wide,
  with 0-6 short spurs (the spurs make branch points: a transverse crack with five is still
  transverse);
- ``alligator``: a patch of small interconnected cells, a jittered grid of 40-120 px sides
  (80-240 mm), 15% of its edges missing;
- ``block``: a jittered grid of 170-260 px cells (340-520 mm).

Each shape's largest crack is typed by `measure.measure_each_crack` (`direction='vertical'`).
The replaced rule called a crack `network` when it enclosed two cells or had four branch points
(`old_type`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import ndimage
from skimage import draw

from crackjax.deploy import measure

SIZE = (640, 960)
TYPES = ('longitudinal', 'transverse', 'diagonal', 'block', 'alligator')
HEADINGS = {'longitudinal': np.pi / 2, 'transverse': 0.0, 'diagonal': np.pi / 4}


def _line(mask: np.ndarray, a, b) -> None:
  rr, cc = draw.line(int(a[0]), int(a[1]), int(b[0]), int(b[1]))
  keep = (rr >= 0) & (rr < mask.shape[0]) & (cc >= 0) & (cc < mask.shape[1])
  mask[rr[keep], cc[keep]] = True


SPREAD = np.deg2rad(15)  # how far a crack's walk strays from its heading


def _walk(rng, start, heading, n, step=8.0, spread=SPREAD) -> list[np.ndarray]:
  points, angle = [np.asarray(start, float)], heading
  for _ in range(n):
    angle = heading + np.clip(angle - heading + 0.2 * rng.standard_normal(), -spread, spread)
    points.append(points[-1] + step * np.array([np.sin(angle), np.cos(angle)]))
  return points


def _grid(rng, mask, side: tuple[int, int], cells: int, missing: float = 0.15) -> None:
  h, w = mask.shape
  s = rng.uniform(*side)
  rows, cols = min(cells, int(h * 0.9 // s)), min(cells, int(w * 0.9 // s))
  top, left = rng.uniform(0, h - rows * s), rng.uniform(0, w - cols * s)
  nodes = {
    (i, j): np.array([top + i * s, left + j * s]) + rng.normal(0, s * 0.08, 2)
    for i in range(rows + 1)
    for j in range(cols + 1)
  }
  for (i, j), p in nodes.items():
    for q in ((i + 1, j), (i, j + 1)):
      if q in nodes and rng.random() >= missing:
        mid = (p + nodes[q]) / 2 + rng.normal(0, s * 0.05, 2)
        _line(mask, p, mid)
        _line(mask, mid, nodes[q])


def shape(kind: str, seed: int) -> np.ndarray:
  """One labelled mask of `kind` (a key of TYPES), from `seed`."""
  rng = np.random.default_rng([TYPES.index(kind), seed])
  mask = np.zeros(SIZE, bool)
  h, w = SIZE
  if kind in HEADINGS:
    heading = HEADINGS[kind] + np.deg2rad(rng.uniform(-10, 10))
    centre = np.array([h / 2, w / 2]) + rng.normal(0, 40, 2)
    back = _walk(rng, centre, heading + np.pi, 40)
    ahead = _walk(rng, centre, heading, 40)
    points = back[::-1] + ahead[1:]
    for a, b in zip(points[:-1], points[1:], strict=True):
      _line(mask, a, b)
    for _ in range(rng.integers(0, 7)):  # short spurs off the crack
      at = points[rng.integers(5, len(points) - 5)]
      side = heading + rng.choice([-1, 1]) * rng.uniform(np.pi / 4, 3 * np.pi / 4)
      spur = _walk(rng, at, side, int(rng.integers(1, 4)))
      for a, b in zip(spur[:-1], spur[1:], strict=True):
        _line(mask, a, b)
  elif kind == 'alligator':
    _grid(rng, mask, (40, 120), 6)
  elif kind == 'block':
    _grid(rng, mask, (170, 260), 3, missing=0.05)
  else:
    raise ValueError(kind)
  width = rng.uniform(2, 5)
  return ndimage.distance_transform_edt(~mask) <= width / 2


def old_type(row: dict) -> str:
  """The replaced rule: `network` at two cells or four branch points, else by the axis."""
  if row['cells'] >= 2 or row['branch_points'] >= 4:
    return 'network'
  return row['type'] if row['type'] in HEADINGS else 'diagonal'


def typed(kind: str, seed: int) -> dict:
  """The measured row of the shape's longest crack."""
  rows = measure.measure_each_crack(shape(kind, seed), direction='vertical')
  return max(rows, key=lambda r: r['length_px'])


def confusion(per_type: int) -> tuple[dict, dict]:
  new = {t: {} for t in TYPES}
  old = {t: {} for t in TYPES}
  for kind in TYPES:
    for seed in range(per_type):
      row = typed(kind, seed)
      new[kind][row['type']] = new[kind].get(row['type'], 0) + 1
      o = old_type(row)
      old[kind][o] = old[kind].get(o, 0) + 1
  return new, old


def table(counts: dict, columns: list[str]) -> str:
  lines = ['| labelled \\ typed | ' + ' | '.join(columns) + ' |', '|' + '---|' * (len(columns) + 1)]
  for kind in TYPES:
    lines.append(f'| {kind} | ' + ' | '.join(str(counts[kind].get(c, 0)) for c in columns) + ' |')
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--per_type', type=int, default=20)
  p.add_argument('--out', default=None)
  args = p.parse_args(argv)
  new, old = confusion(args.per_type)
  right = sum(new[t].get(t, 0) for t in TYPES)
  text = (
    f'Crack types, {args.per_type} labelled shapes a type (bench/crack_types.py): '
    f'{right} of {args.per_type * len(TYPES)} typed as labelled.\n\n'
    + table(new, list(TYPES))
    + '\n\nThe replaced rule (network: two cells or four branch points):\n\n'
    + table(old, [*HEADINGS, 'network'])
  )
  print(text)
  if args.out:
    Path(args.out).write_text(text + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
