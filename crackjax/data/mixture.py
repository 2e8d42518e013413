"""Training on several datasets at once: ``config.data.name = 'mixture'`` and ``config.data.mix``.

``config.data.mix`` maps each member dataset (a key of `crackjax.data.registry.DATASETS`) to
its fields (`MEMBER_FIELDS`): its sampling ``weight``, its ``manual_dir``, the member's own
``train_split`` / ``valid_split`` / ``test_split`` and its crop rule (``scale``: the factor the
member's images are resized by before the random crop; 1.0 = as stored). The mixture's splits
are the members' splits side by side: ``train`` (sampled by weight, `MixedSource.weights`),
``valid`` and ``test``; its records are named ``<member>/<name>``, so an evaluation of the
mixture can also be scored per member (`member_of_name`).

Every member is prepared into ``config.data.data_dir`` as the dataset it is (a member is the
same prepared copy a single-dataset run of it reads). Every function here takes the ``data``
group as plain data (``config.data.to_dict()``, or the ``data`` of a recorded config.json).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crackjax.data import registry

MIXTURE = 'mixture'
#: A member's fields and their defaults.
MEMBER_FIELDS: dict[str, Any] = {
  'weight': 1.0,
  'manual_dir': None,
  'train_split': 'train',
  'valid_split': 'valid',
  'test_split': 'test',
  'scale': 1.0,
}
#: The mixture's split names -> the member field that names each member's own split.
SPLITS = {'train': 'train_split', 'valid': 'valid_split', 'test': 'test_split'}
SEPARATOR = '/'
#: A member's ``scale`` bounds: beyond them a photo is a few pixels, or a crop sees one crack.
SCALE_RANGE = (0.1, 10.0)
#: The smallest share of the samples a member's normalised weight may have: below it the
#: member is never drawn, and grain's mixing fails on it (a denormal weight: 'cannot convert
#: float infinity to integer', 38 lines, after the workdir was written).
MIN_SHARE = 1e-9
#: The train photos of each member whose sizes `crop_problems` reads (spread over the split).
SIZE_SAMPLES = 16


def is_mixture(data: Mapping[str, Any]) -> bool:
  """Whether the config's ``data`` group is a mixture of datasets."""
  return data.get('name') == MIXTURE


def member_fields(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
  """``{member: its fields}`` (defaults filled in), in name order (the order a ConfigDict
  lists ``data.mix`` in, whatever the order of the mapping given: members are numbered in it,
  `MixedSource`)."""
  mix = data.get('mix') or {}
  return {name: {**MEMBER_FIELDS, **dict(fields or {})} for name, fields in sorted(mix.items())}


def problems(data: Mapping[str, Any]) -> list[str]:
  """What is wrong with a mixture's ``data`` group, one line each (empty if nothing)."""
  out = []
  members = member_fields(data)
  if not members:
    return [
      "config.data.name='mixture' needs config.data.mix: {dataset: {weight, manual_dir, ...}}."
    ]
  for name, fields in members.items():
    where = f'config.data.mix.{name}'
    if name not in registry.DATASETS:
      out.append(f'{where}: {name!r} is not a dataset; known: {sorted(registry.DATASETS)}.')
    unknown = sorted(set(fields) - set(MEMBER_FIELDS))
    if unknown:
      out.append(f'{where} has field(s) {unknown}; a member takes {sorted(MEMBER_FIELDS)}.')
    for key in ('weight', 'scale'):
      value = fields[key]
      if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not value > 0
      ):
        out.append(f'{where}.{key}={value!r} must be a finite number > 0.')
      elif key == 'scale' and not SCALE_RANGE[0] <= value <= SCALE_RANGE[1]:
        out.append(
          f'{where}.scale={value!r}: photos resized by it before the crop; it must be in '
          f'[{SCALE_RANGE[0]}, {SCALE_RANGE[1]}].'
        )
  weights = [f['weight'] for f in members.values() if isinstance(f['weight'], int | float)]
  if weights and all(math.isfinite(w) for w in weights) and not math.isfinite(sum(weights)):
    out.append(f'config.data.mix: the weights {weights} sum to infinity; use smaller numbers.')
  elif len(weights) == len(members) and all(math.isfinite(w) and w > 0 for w in weights):
    total = sum(weights)
    for name, fields in members.items():
      share = fields['weight'] / total
      if not share >= MIN_SHARE:
        out.append(
          f'config.data.mix.{name}.weight={fields["weight"]!r} is {share:.3g} of the weights '
          f'once normalised (their sum {total:g}): below {MIN_SHARE:g} the member is never '
          'drawn; give it a larger weight or leave it out.'
        )
  return out


def crop_problems(data: Mapping[str, Any], source: MixedSource) -> list[str]:
  """A line per member whose ``scale`` below 1 resizes its train photos smaller than the
  training crop ``data.input_size`` (they would be mirrored up to it: a crop of a few
  repeated pixels). Read from `SIZE_SAMPLES` photos of each member's train split, spread over
  it (decoding every photo of five datasets would take minutes); checked once the data is
  prepared, before the workdir is written (`crackjax.experiment.build.check_data`)."""
  size = data.get('input_size')
  if not size:
    return []
  out = []
  for name, member, scale in zip(source.names, source.sources, source.scales, strict=True):
    if scale >= 1 or not len(member):
      continue
    picks = sorted(
      {round(i * (len(member) - 1) / max(1, SIZE_SAMPLES - 1)) for i in range(SIZE_SAMPLES)}
    )
    shapes = [np.shape(member[i]['image'])[:2] for i in picks]
    h, w = min(s[0] for s in shapes), min(s[1] for s in shapes)
    sh, sw = round(h * scale), round(w * scale)
    if sh < size[0] or sw < size[1]:
      least = max(size[0] / h, size[1] / w)
      out.append(
        f'config.data.mix.{name}.scale={scale!r} resizes its train photos (the smallest of '
        f'{len(picks)} read: {h}x{w}) to {sh}x{sw}, smaller than the training crop '
        f'config.data.input_size={tuple(size)}; use a scale >= {math.ceil(least * 100) / 100:g} '
        'or a smaller input_size.'
      )
  return out


def member_data(data: Mapping[str, Any], name: str) -> dict[str, Any]:
  """The ``data`` group of member `name` alone (a new dict): what a single-dataset run of it
  would have (its name, manual dir and splits; the mixture's data_dir, input size and noise)."""
  fields = member_fields(data)[name]
  own = {k: copy.deepcopy(v) for k, v in data.items() if k != 'mix'}
  own.update(
    name=name,
    manual_dir=fields['manual_dir'],
    train_split=fields['train_split'],
    test_split=fields['test_split'],
  )
  return own


def member_of_name(name: str) -> tuple[str | None, str]:
  """('deepcrack', '11125-1-0') of a mixture record's name 'deepcrack/11125-1-0'; (None, name)
  for a name without a member."""
  member, sep, rest = name.partition(SEPARATOR)
  return (member, rest) if sep else (None, name)


class MixedSource(Sequence):
  """The members' sources of one split, one after the other, as one random-access source.

  Record ``i`` is member ``k``'s record ``i - offsets[k]``, named ``<member>/<name>``, with
  ``'member'`` = k. `weights` (normalised) and `scales` are the members' sampling weights and
  crop rules, in member order.
  """

  def __init__(
    self,
    names: Sequence[str],
    sources: Sequence[Sequence[dict[str, Any]]],
    weights: Sequence[float],
    scales: Sequence[float],
  ):
    self.names = list(names)
    self.sources = list(sources)
    self.lengths = [len(s) for s in self.sources]
    self.offsets = [int(x) for x in np.cumsum([0, *self.lengths[:-1]])]
    total = float(sum(weights))
    self.weights = [float(w) / total for w in weights]
    self.scales = [float(s) for s in scales]

  def __len__(self) -> int:
    return sum(self.lengths)

  def __iter__(self):
    for index in range(len(self)):
      yield self[index]

  def locate(self, index: int) -> tuple[int, int]:
    """(member k, index in member k's source) of record `index`."""
    if not 0 <= index < len(self):
      raise IndexError(index)
    k = int(np.searchsorted(self.offsets, index, side='right')) - 1
    return k, index - self.offsets[k]

  def __getitem__(self, index: int) -> dict[str, Any]:
    k, i = self.locate(index)
    record = dict(self.sources[k][i])
    record['name'] = f'{self.names[k]}{SEPARATOR}{registry.record_name(record)}'
    record['member'] = k
    return record


def prepare(data: Mapping[str, Any]) -> list[Any]:
  """Prepares every member (once; `registry.prepare_dataset`) and returns their builders.

  First every member not prepared yet is checked for its manual dir, and after the
  preparation every member's splits (`split_problems`): all problems in one message, before
  any member is prepared or any step trained.

  Raises:
    registry.DatasetNotFoundError: a member needs a manual dir that is not given or not there
      (each named by its own flag).
    registry.DatasetError: a member's split that does not exist or is empty.
  """
  members = member_fields(data)
  missing = [
    f'{name}: ' + why.replace('config.data.manual_dir', f'config.data.mix.{name}.manual_dir')
    for name in members
    if (why := registry.manual_dir_problem(member_data(data, name)))
  ]
  if missing:
    raise registry.DatasetNotFoundError(
      'Mixture members need their files (--config.data.mix.<member>.manual_dir=DIR):\n'
      + '\n'.join(missing)
    )
  builders = [registry.prepare_dataset(member_data(data, name)) for name in members]
  problems = [
    p
    for name, b in zip(members, builders, strict=True)
    for p in split_problems(name, members[name], b)
  ]
  if problems:
    raise registry.DatasetError('\n'.join(problems))
  return builders


def split_problems(name: str, fields: Mapping[str, Any], builder: Any) -> list[str]:
  """Member `name`'s splits (its train, valid and test split fields) that its prepared
  `builder` does not have, or that select no example (`registry.check_split`); one line each."""
  out = []
  for field in SPLITS.values():
    try:
      registry.check_split(builder, fields[field])
    except registry.DatasetError as e:
      out.append(f'config.data.mix.{name}.{field}={fields[field]!r}: {e}')
  return out


def member_sources(data: Mapping[str, Any], split: str) -> dict[str, Sequence[dict[str, Any]]]:
  """``{member: its own split of role `split`}`` ('train', 'valid' or 'test'), in member order:
  what `open_split` mixes and what `crackjax.trainer.data_stats` describes member by member.

  Raises:
    ValueError: `split` is not one of the mixture's splits.
  """
  if split not in SPLITS:
    raise ValueError(
      f'A mixture of datasets has the splits {sorted(SPLITS)}, not {split!r} (each member '
      'names its own in config.data.mix.<member>.{train,valid,test}_split).'
    )
  return {
    name: registry.get_data_source(member_data(data, name), fields[SPLITS[split]])
    for name, fields in member_fields(data).items()
  }


def open_split(data: Mapping[str, Any], split: str) -> MixedSource:
  """The mixture's `split` ('train', 'valid' or 'test'): each member's own split of that role
  (`member_sources`), sampled by weight.

  Raises:
    ValueError: `split` is not one of the mixture's splits.
  """
  sources = member_sources(data, split)
  members = member_fields(data)
  return MixedSource(
    list(sources),
    list(sources.values()),
    [f['weight'] for f in members.values()],
    [f['scale'] for f in members.values()],
  )
