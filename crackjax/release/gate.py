"""The release gate (issue 76): does a new model file lose to the released one, beyond noise?

For every public test split scored by both files (``crackjax-evaluate --model=FILE --out=DIR``:
each file at its own stored threshold and test-time rule), the strict F1 of the split is the
pooled one (TP, FP, FN pixels summed over its photos, F1 = 2TP / (2TP + FP + FN)). A paired
bootstrap over the photos (the same draw of photos, with replacement, for both files) gives
the difference new minus released in points and its 95% interval. A split fails only when that
interval lies wholly below `FLOOR` (-1 point): a loss noise cannot explain. The release also
needs the mean over the splits of the differences to be at least `MIN_MEAN_LEAD` (2) points.

  python -m crackjax.release.gate --new=DIR --old=DIR [--new=DIR2 --old=DIR2] \\
      [--resamples=1000] [--seed=0] [--out=gate.json] [--peer=results/peer_mtscrack.json]

DIR is a ``crackjax-evaluate --out`` folder (one subfolder per split, each with its eval.json,
whose strict per-photo rows hold ``tp``, ``fp``, ``fn`` at the stored threshold), or one such
split folder; the k-th --new is paired with the k-th --old (e.g. the public splits, then the
whole photos scored separately), their splits by folder name. It prints one row per split and
the mean, and exits 0 (allowed), 1 (refused) or 2 (bad input, one line naming the file).
MTSCrack's figures (--peer, `bench/peer_mtscrack.py`'s JSONs) are shown beside, as information.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PROTOCOL = 'strict'
#: A split fails only when its interval's upper end is below this difference (points).
FLOOR = -1.0
#: The mean over the splits of the differences (points) a release needs.
MIN_MEAN_LEAD = 2.0
RESAMPLES = 1000
LEVEL = 0.95
#: Resamples drawn at a time (the same draws whatever the number asked: deterministic).
_BLOCK = 100
PROG = 'python -m crackjax.release.gate'


class GateInputError(ValueError):
  """Input the gate cannot judge: one line, naming the file or split at fault."""


@dataclasses.dataclass(frozen=True)
class SplitCounts:
  """One file's strict counts on one split, at its stored threshold.

  Attributes:
    names: the photos, in the record's order.
    counts: int64 (photos, 3): each photo's TP, FP, FN pixels.
    threshold: the stored threshold they were counted at (None: not known).
    dataset: the record's dataset and split, and its photos (the peer's figure is looked up by
      them).
  """

  names: tuple[str, ...]
  counts: np.ndarray
  threshold: float | None = None
  dataset: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class SplitVerdict:
  """One split: F1 (points) of each file, their difference new minus released and its
  interval (points), whether the split passes (`ok`: the interval not wholly below the floor)."""

  diff: float
  low: float
  high: float
  ok: bool
  new_f1: float
  old_f1: float
  photos: int


@dataclasses.dataclass(frozen=True)
class Verdict:
  """The gate: every split's verdict, the mean of their differences, and the decision."""

  splits: dict[str, SplitVerdict]
  mean: float
  min_mean_lead: float
  floor: float

  @property
  def failed(self) -> list[str]:
    return [name for name, v in self.splits.items() if not v.ok]

  @property
  def ahead(self) -> bool:
    return self.mean >= self.min_mean_lead

  @property
  def ok(self) -> bool:
    return self.ahead and not self.failed


def pooled_f1(counts: np.ndarray) -> np.ndarray:
  """F1 of summed counts (..., 3) (TP, FP, FN), the package's rule (`aggregate.f1_of`: the F1
  of pooled precision and recall, 0 where there is nothing), so that a whole split's equals the
  F1 its record reports at the stored threshold."""
  from crackjax.evaluation.aggregate import f1_of

  tp, fp, fn = (np.asarray(counts)[..., k] for k in range(3))
  return f1_of(tp, tp + fp, tp, tp + fn)


def paired_bootstrap(
  new: np.ndarray,
  old: np.ndarray,
  *,
  resamples: int = RESAMPLES,
  seed: int = 0,
  level: float = LEVEL,
  floor: float = FLOOR,
) -> SplitVerdict:
  """The difference of pooled F1 (points), new minus old, and its `level` interval: the
  percentiles of the differences over `resamples` draws of the photos with replacement, the
  same draw for both files (their rows are the same photos, in the same order).

  Args:
    new: int (photos, 3), each photo's TP, FP, FN under the new file.
    old: the same under the released file.
    resamples: bootstrap draws (>= 1).
    seed: the draws' seed (the same seed, the same interval).
    level: the interval's coverage.
    floor: the split fails (`ok` False) when the interval's upper end is below it.

  Raises:
    ValueError: shapes that differ or are not (photos, 3), no photo, `resamples` < 1.
  """
  new, old = np.asarray(new, np.int64), np.asarray(old, np.int64)
  if new.shape != old.shape or new.ndim != 2 or new.shape[1] != 3:
    raise ValueError(f'counts of shapes {new.shape} and {old.shape}: expected two (photos, 3)')
  n = len(new)
  if not n or resamples < 1:
    raise ValueError(f'{n} photos, {resamples} resamples: nothing to resample')
  both = np.concatenate([new, old], axis=1).astype(np.float64)  # exact: sums below 2**53
  rng = np.random.default_rng(seed)
  diffs = []
  for start in range(0, resamples, _BLOCK):
    b = min(_BLOCK, resamples - start)
    draw = rng.integers(0, n, size=(b, n)) + n * np.arange(b)[:, None]
    times = np.bincount(draw.ravel(), minlength=b * n).reshape(b, n).astype(np.float64)
    sums = times @ both  # (b, 6): each resample's summed counts of both files
    diffs.append(pooled_f1(sums[:, :3]) - pooled_f1(sums[:, 3:]))
  diffs = 100 * np.concatenate(diffs)
  tail = 100 * (1 - level) / 2
  low, high = (float(x) for x in np.percentile(diffs, [tail, 100 - tail]))
  new_f1, old_f1 = (100 * float(pooled_f1(c.sum(axis=0))) for c in (new, old))
  return SplitVerdict(
    diff=new_f1 - old_f1,
    low=low,
    high=high,
    ok=not high < floor,
    new_f1=new_f1,
    old_f1=old_f1,
    photos=n,
  )


def paired(split: str, new: SplitCounts, old: SplitCounts) -> tuple[np.ndarray, np.ndarray]:
  """The two files' counts of `split`, row for row the same photos (the new file's order).

  Raises:
    GateInputError: photos scored for one file and not the other (named, one line).
  """
  only_new = sorted(set(new.names) - set(old.names))
  only_old = sorted(set(old.names) - set(new.names))
  if only_new or only_old:

    def some(names: list[str]) -> str:
      return ', '.join(names[:3]) + (f' and {len(names) - 3} more' if len(names) > 3 else '')

    parts = [f'{len(only_new)} only for the new file ({some(only_new)})'] if only_new else []
    parts += [f'{len(only_old)} only for the released one ({some(only_old)})'] if only_old else []
    raise GateInputError(f'{split}: not the same photos: {"; ".join(parts)}.')
  row = {name: i for i, name in enumerate(old.names)}
  return new.counts, old.counts[[row[name] for name in new.names]]


def judge(
  splits: Mapping[str, SplitVerdict], min_mean_lead: float = MIN_MEAN_LEAD, floor: float = FLOOR
) -> Verdict:
  """The release's verdict: a split fails only when its interval lies wholly below `floor`;
  the release needs no failed split and the mean over the splits of the full-sample
  differences at least `min_mean_lead` (points).

  Raises:
    GateInputError: no split.
  """
  if not splits:
    raise GateInputError('no split to judge.')
  judged = {k: dataclasses.replace(v, ok=not v.high < floor) for k, v in splits.items()}
  mean = float(np.mean([v.diff for v in judged.values()]))
  return Verdict(judged, mean, min_mean_lead, floor)


def read_split(folder: str | Path, protocol: str = PROTOCOL) -> SplitCounts:
  """The strict per-photo counts at the stored threshold of one evaluation folder's eval.json
  (``crackjax-evaluate --model=FILE``'s), checked against the F1 the record reports there.

  Raises:
    GateInputError: no eval.json, no `protocol` results, no per-photo counts (an evaluation
      made before they were recorded: scored again, it has them), no F1 at the stored
      threshold, photos without a name or twice, or counts that do not give that F1.
  """
  from crackjax.evaluation.result import ResultKeyError, read_record

  path = Path(folder) / 'eval.json'
  again = f'score it again: crackjax-evaluate --model=FILE --protocols={protocol} --out=DIR'
  try:
    record = read_record(path)
  except (OSError, ResultKeyError) as e:
    raise GateInputError(f'{path}: not readable ({" ".join(str(e).split())}).') from None
  result = record.results.get(protocol)
  if result is None:
    raise GateInputError(f'{path}: no {protocol} results ({again}).')
  rows = result.per_image or ()
  if not rows or any(r.tp is None for r in rows):
    raise GateInputError(
      f'{path}: no per-photo {protocol} counts at the stored threshold (an evaluation older '
      f'than them); {again}.'
    )
  run = (result.operating_points or {}).get('run')
  if run is None:
    raise GateInputError(f"{path}: no F1 at a model file's stored threshold; {again}.")
  names = tuple(r.name for r in rows)
  if None in names or len(set(names)) != len(names):
    raise GateInputError(f'{path}: its photos are not named once each.')
  counts = np.array([(r.tp, r.fp, r.fn) for r in rows], np.int64)
  f1 = float(pooled_f1(counts.sum(axis=0)))
  if abs(f1 - run.f1) > 1e-9:
    raise GateInputError(
      f'{path}: its per-photo counts give F1 {f1:.6f}, the record {run.f1:.6f} at the stored '
      f'threshold: counted at another threshold; {again}.'
    )
  return SplitCounts(names, counts, run.threshold, (record.dataset, record.split))


def read_folder(folder: str | Path) -> dict[str, SplitCounts]:
  """{split folder name: its counts} of a ``crackjax-evaluate --out`` folder (or of one split
  folder, named by itself).

  Raises:
    GateInputError: no such folder, or no eval.json in it or its subfolders.
  """
  folder = Path(folder)
  if not folder.is_dir():
    raise GateInputError(f'{folder}: no such folder (a crackjax-evaluate --out folder).')
  if (folder / 'eval.json').is_file():
    return {folder.name: read_split(folder)}
  subs = sorted(p for p in folder.iterdir() if (p / 'eval.json').is_file())
  if not subs:
    raise GateInputError(f'{folder}: no split folder with an eval.json (crackjax-evaluate --out).')
  return {p.name: read_split(p) for p in subs}


def read_pairs(
  new_dirs: Sequence[str | Path], old_dirs: Sequence[str | Path]
) -> dict[str, tuple[SplitCounts, SplitCounts]]:
  """{split: (new, released)} of the k-th new folder paired with the k-th old one, splits by
  folder name (with several pairs, named ``<new folder>/<split>``).

  Raises:
    GateInputError: as many new folders as old ones not given, a split scored for one file
      only, or as `read_folder`.
  """
  if len(new_dirs) != len(old_dirs) or not new_dirs:
    raise GateInputError(
      f'{len(new_dirs)} --new and {len(old_dirs)} --old folders: give them in pairs.'
    )
  out = {}
  for new_dir, old_dir in zip(new_dirs, old_dirs, strict=True):
    new, old = read_folder(new_dir), read_folder(old_dir)
    for name in sorted(set(new) ^ set(old)):
      which = f'the new file ({new_dir})' if name in new else f'the released one ({old_dir})'
      raise GateInputError(f'{name}: scored for {which} only; score both on the same splits.')
    for name in new:
      label = name if len(new_dirs) == 1 else f'{Path(new_dir).name}/{name}'
      out[label] = (new[name], old[name])
  return out


def peer_figure(peers: Sequence[Mapping[str, Any]], split: SplitCounts) -> str:
  """MTSCrack's strict F1 (%) at its own rule on the same set (`bench/peer_mtscrack.py`'s JSONs:
  a set ``dataset:split``, or a ``<Dataset> photos`` folder, of as many photos), or '–'."""
  if split.dataset is None:
    return '–'
  dataset, name = split.dataset
  for peer in peers:
    for key, record in peer.get('sets', {}).items():
      same = key == f'{dataset}:{name}' or key.lower().split()[0] == dataset
      if not same or record.get('images_in_set') != len(split.names):
        continue
      f1 = record.get('models', {}).get('MTSCrack', {}).get('protocols', {}).get(PROTOCOL, {})
      if 'f1_model' in f1:
        sub = record.get('images') != record.get('images_in_set')
        return f'{100 * f1["f1_model"]:.1f}' + (f' (on {record["images"]})' if sub else '')
  return '–'


def table(
  verdict: Verdict,
  pairs: Mapping[str, tuple[SplitCounts, SplitCounts]],
  peers: Sequence[Mapping[str, Any]] = (),
) -> str:
  """The gate as printed: one row per split, then the mean and the decision."""
  lines = [
    '| split | photos | new | released | difference | 95% interval | verdict |'
    + (' MTSCrack (information) |' if peers else ''),
    '|---|---|---|---|---|---|---|' + ('---|' if peers else ''),
  ]
  for name, v in verdict.splits.items():
    says = 'ok' if v.ok else f'loss: wholly below {verdict.floor:+g}'
    row = (
      f'| {name} | {v.photos} | {v.new_f1:.1f} | {v.old_f1:.1f} | {v.diff:+.1f} | '
      f'[{v.low:+.1f}, {v.high:+.1f}] | {says} |'
    )
    lines.append(row + (f' {peer_figure(peers, pairs[name][0])} |' if peers else ''))
  lines += [
    '',
    f'Mean difference over {len(verdict.splits)} splits: {verdict.mean:+.1f} points '
    f'(at least {verdict.min_mean_lead:+g} asked).',
  ]
  if verdict.ok:
    lines.append('Release allowed: no split lost beyond noise, and ahead on the mean.')
  else:
    why = [f'lost beyond noise on {", ".join(verdict.failed)}'] if verdict.failed else []
    why += (
      [] if verdict.ahead else [f'the mean lead {verdict.mean:+.1f} < {verdict.min_mean_lead:+g}']
    )
    lines.append(f'Release refused: {"; ".join(why)}.')
  return '\n'.join(lines)


def gate(args: argparse.Namespace) -> tuple[Verdict, str, dict[str, Any]]:
  """The gate on the parsed flags: (verdict, printed table, the record --out writes).

  Raises:
    GateInputError: as `read_pairs`, `paired`, `judge`, or a --peer file unreadable.
  """
  import json

  pairs = read_pairs(args.new, args.old)
  splits = {}
  for name, (new, old) in pairs.items():
    new_counts, old_counts = paired(name, new, old)
    splits[name] = paired_bootstrap(
      new_counts, old_counts, resamples=args.resamples, seed=args.seed, floor=args.floor
    )
  verdict = judge(splits, args.min_mean_lead, args.floor)
  peers = []
  for path in args.peer:
    try:
      peers.append(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as e:
      raise GateInputError(f'--peer={path}: not readable ({e}).') from None
  head = (
    f"Release gate: {PROTOCOL} F1 (%) of each split pooled over its photos, at each file's "
    f'stored threshold; 95% interval of a paired bootstrap over photos ({args.resamples} '
    f'resamples, seed {args.seed}).'
  )
  text = f'{head}\n\n{table(verdict, pairs, peers)}'
  record = {
    'command': PROG,
    'new': [str(d) for d in args.new],
    'old': [str(d) for d in args.old],
    'protocol': PROTOCOL,
    'resamples': args.resamples,
    'seed': args.seed,
    'level': LEVEL,
    'floor': args.floor,
    'min_mean_lead': args.min_mean_lead,
    'splits': {
      name: {
        **dataclasses.asdict(v),
        'new_threshold': pairs[name][0].threshold,
        'old_threshold': pairs[name][1].threshold,
      }
      for name, v in verdict.splits.items()
    },
    'mean': verdict.mean,
    'ok': verdict.ok,
  }
  return verdict, text, record


def main(argv: list[str] | None = None) -> int:
  """The command; returns 0 (allowed), 1 (refused) or 2 (bad input, one line on stderr)."""
  p = argparse.ArgumentParser(prog=PROG, description=__doc__.split('\n\n')[0])
  p.add_argument('--new', action='append', required=True, help="the new file's scores (DIR)")
  p.add_argument('--old', action='append', required=True, help="the released one's (DIR)")
  p.add_argument('--resamples', type=int, default=RESAMPLES)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--floor', type=float, default=FLOOR, help='a split fails below it (points)')
  p.add_argument('--min_mean_lead', type=float, default=MIN_MEAN_LEAD, help='points')
  p.add_argument('--peer', action='append', default=[], help='bench/peer_mtscrack.py JSON')
  p.add_argument('--out', help='the verdict as JSON')
  args = p.parse_args(argv)
  if args.resamples < 1000:
    print(f'{PROG}: --resamples={args.resamples}: at least 1000.', file=sys.stderr)
    return 2
  try:
    verdict, text, record = gate(args)
  except GateInputError as e:
    print(f'{PROG}: {e}', file=sys.stderr)
    return 2
  print(text)
  if args.out:
    from crackjax.runs import outputs

    Path(args.out).write_text(outputs.dumps(record, indent=2) + '\n')
  return 0 if verdict.ok else 1


if __name__ == '__main__':
  sys.exit(main())
