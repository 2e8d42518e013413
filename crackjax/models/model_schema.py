"""The schema of a model file's metadata, and its tensors checked against the model it names.

`problems` lists everything wrong with a model file at once, as `check_config` does for a
config; `crackjax.models.model_file.read` calls it once per load and refuses the file in one
line naming it and every problem (``crackjax.threshold.threshold=nan: expected a finite number
in [0, 1]``). It checks each field of `SCHEMA` (a type and range) and, given the tensors, the
model the metadata describes (``crackjax.model``, its fields judged by the defaults its registry
entry declares, as configs are: `type_problems`, which config validation uses too) and every
tensor's name, dtype and shape against the model's variables (`jax.eval_shape` of its init: no
weights are made).

Why a small declarative schema in code rather than a library: the checks the file needs are
few and exact (a finite number in [0, 1], positive integers, objects and lists of strings),
and the second half (tensors against a model built from the metadata) is code whatever the
schema language. jsonschema would add four packages (one a Rust extension, rpds-py) and its
``minimum``/``maximum`` let NaN through (no comparison with NaN holds); pydantic brings its
compiled core for a dozen fields. Neither is a dependency of crackjax today.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

# A rule: value -> what was expected (None when the value is fine); a mapping rule checks its
# own fields and reports them under their dotted names (`_problems`).
Rule = Callable[[Any], str | None]


def integer(minimum: int) -> Rule:
  return lambda v: None if _is_int(v) and v >= minimum else f'an integer >= {minimum}'


def string(v: Any) -> str | None:
  return None if isinstance(v, str) else 'a string'


def name(v: Any) -> str | None:
  return None if isinstance(v, str) and v else 'a non-empty string'


def probability(v: Any) -> str | None:
  ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
  return None if ok and 0 <= v <= 1 else 'a finite number in [0, 1]'


#: The widths (px) of a downward width rule (`crackjax.evaluation.width_rule`): a photo whose
#: predicted cracks are wider than it is predicted again at half size.
WIDTH_RULE_RANGE = (1.0, 100.0)


def width_rule(v: Any) -> str | None:
  lo, hi = WIDTH_RULE_RANGE
  ok = v is None or (
    isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi
  )
  return None if ok else f'null (off) or a finite width in pixels in [{lo:g}, {hi:g}]'


#: Test-time scales (`crackjax.evaluation.inference.test_time_average`: each photo predicted at
#: these factors of its size, the maps averaged): below a quarter a photo's cracks are a pixel
#: wide or less and the map is noise (0.01 predicted a 5 x 3 px copy of a photo; 1e-300 marked
#: every photo 100% crack); above 4 a photo is 16 times the pixels, a minute a photo on a CPU.
SCALE_RANGE = (0.25, 4.0)


def scales(v: Any) -> str | None:
  lo, hi = SCALE_RANGE
  ok = (
    isinstance(v, list | tuple)
    and len(v) > 0
    and all(_is_number(s) and math.isfinite(s) and lo <= s <= hi for s in v)
  )
  return None if ok else f'a non-empty list of scales in [{lo:g}, {hi:g}] (1: the photo as it is)'


def boolean(v: Any) -> str | None:
  return None if isinstance(v, bool) else 'true or false (a boolean, not a string or number)'


def weight_or_none(v: Any) -> str | None:
  ok = v is None or (_is_number(v) and math.isfinite(v) and 0 <= v <= 1)
  return None if ok else 'null (off) or a weight in [0, 1] (1: the stored threshold itself)'


#: The test-time fields of a config's ``eval`` group, of a model file's ``config.eval`` and
#: of its card's ``test_time``: the one place their values are judged (`test_time_problems`;
#: `crackjax.evaluation.inference.check_test_time`, `crackjax.evaluation.width_rule.check`,
#: config validation, crackjax-export's overrides and this schema all ask it).
TEST_TIME: dict[str, Rule] = {
  'scales': scales,
  'flip': boolean,
  'photo_threshold': weight_or_none,
  'width_rule': width_rule,
}


def test_time_problems(values: Mapping[str, Any], prefix: str = 'config.eval.') -> list[str]:
  """A line per test-time field of `values` (`TEST_TIME`) whose value breaks its rule, named
  ``<prefix><field>=<value>: expected ...`` (prefix ``config.eval.``, ``--`` for a command's
  flags); fields absent are left to their defaults."""
  return [
    p
    for key, rule in TEST_TIME.items()
    if key in values
    for p in _problems(f'{prefix}{key}', values[key], rule)
  ]


def list_of(item: Rule, what: str) -> Rule:
  def rule(v: Any) -> str | None:
    ok = isinstance(v, list) and all(item(x) is None for x in v)
    return None if ok else f'a list of {what}'

  return rule


class Obj:
  """A JSON object with `required` and `optional` fields, each a rule (or another Obj);
  fields not listed are allowed (a later crackjax may add some)."""

  def __init__(self, required: Mapping[str, Any] = (), optional: Mapping[str, Any] = ()):
    self.required, self.optional = dict(required), dict(optional)


# The metadata of a model file (model_file.FIELDS), as this crackjax reads and uses it.
SCHEMA: dict[str, Any] = {
  'format': integer(1),
  'requires': string,
  'model': Obj({'name': name}),  # its other fields: the model's registry entry (check_tensors)
  'plugins': list_of(name, 'module names'),
  'input': Obj(
    optional={'input_multiple': integer(1), 'pad_multiple': integer(1), 'pad_bucket': integer(1)}
  ),
  'threshold': Obj({'threshold': probability}, {'chosen_by': string}),
  'card': Obj(
    optional={
      'name': string,
      'training': Obj(optional={'step': integer(0), 'loss': Obj({'name': name})}),
      'scores': list_of(lambda v: None if isinstance(v, dict) else 'x', 'JSON objects'),
      'notes': string,
      'test_time': Obj(optional={**TEST_TIME, 'chosen_by': string}),
    }
  ),
  'config': Obj(
    optional={
      'model': Obj(),
      'plugins': list_of(name, 'module names'),
      'eval': Obj(optional=TEST_TIME),
    }
  ),
}


def _shown(value: Any) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + '...'


def _problems(field: str, value: Any, rule: Any) -> list[str]:
  if isinstance(rule, Obj):
    if not isinstance(value, dict):
      return [f'{field}={_shown(value)}: expected a JSON object']
    out = [f'{field} lacks {key!r}' for key in rule.required if key not in value]
    for key, sub in {**rule.required, **rule.optional}.items():
      if key in value:
        out += _problems(f'{field}.{key}', value[key], sub)
    return out
  expected = rule(value)
  return [] if expected is None else [f'{field}={_shown(value)}: expected {expected}']


def metadata_problems(meta: Mapping[str, Any], prefix: str = 'crackjax.') -> list[str]:
  """A line per field of `meta` (the decoded metadata) that breaks `SCHEMA`."""
  out = []
  for key, rule in SCHEMA.items():
    if key in meta:
      out += _problems(prefix + key, meta[key], rule)
  return out


def _is_int(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
  return isinstance(value, int | float) and not isinstance(value, bool)


def _expected(default: Any) -> tuple[Callable[[Any], bool], str] | None:
  """What a field whose declared default is `default` must hold: (a test of a value, its
  wording), or None where the default says nothing (None, a mapping, an empty tuple's
  elements). A tuple of positive integers by default (widths, blocks, dilation rates) must
  stay positive."""
  if isinstance(default, bool):
    return (lambda v: isinstance(v, bool)), 'True or False'
  if _is_int(default):
    return _is_int, 'an integer'
  if isinstance(default, float):
    return _is_number, 'a number'
  if isinstance(default, str):
    return (lambda v: isinstance(v, str)), 'a string'
  if not isinstance(default, tuple | list):
    return None
  if default and all(_is_int(d) for d in default):
    if all(d > 0 for d in default):
      item, what = (lambda v: _is_int(v) and v > 0), 'positive integers'
    else:
      item, what = _is_int, 'integers'
  elif default and all(_is_number(d) for d in default):
    item, what = _is_number, 'numbers'
  elif default and all(isinstance(d, str) for d in default):
    item, what = (lambda v: isinstance(v, str)), 'strings'
  else:
    return (lambda v: isinstance(v, tuple | list)), 'a tuple'
  # A non-empty default: a model needs at least one (e.g. one U-Net stage).
  return (lambda v: isinstance(v, tuple | list) and len(v) > 0 and all(map(item, v))), (
    f'a tuple of {what}'
  )


def type_problems(group: str, values: Any, defaults: dict[str, Any]) -> list[str]:
  """A problem per field of `values` (the config group ``config.<group>``) whose value is
  not of the kind its declared default is (`defaults`: a model entry's ``config``, a loss
  factory's keyword defaults), e.g. ``config.model.widths=('abc',): expected a tuple of
  positive integers.`` ml_collections types a number or string given on the command line
  by the field's default, but takes any elements into a tuple field (``--config.model.
  widths=abc`` is ``('abc',)``), and a config file may set anything; caught here, before the
  workdir is written, instead of as a JAX error in the first step."""
  problems = []
  for field, value in values.items():
    kind = _expected(defaults.get(field)) if field in defaults else None
    if kind is not None and not kind[0](value):
      shown = tuple(value) if isinstance(value, list) else value
      problems.append(f'config.{group}.{field}={shown!r}: expected {kind[1]}.')
  return problems


def model_problems(model: Mapping[str, Any], prefix: str = 'crackjax.') -> list[str]:
  """A line per field of the ``crackjax.model`` group not of the kind its registry entry
  declares (`type_problems`), or an unknown model name."""
  from crackjax.models import MODELS

  entry = MODELS.get(model.get('name'))
  if entry is None:
    return [
      f'{prefix}model.name={model.get("name")!r}: not a model of this crackjax ({sorted(MODELS)})'
    ]
  found = type_problems('model', model, dict(entry.config))
  return [p.replace('config.model.', f'{prefix}model.', 1).rstrip('.') for p in found]


def expected_variables(model) -> dict[str, Any]:
  """{'params/...': ShapeDtypeStruct} of `model`'s variables (`jax.eval_shape`, no weights)."""
  import jax
  import jax.numpy as jnp

  from crackjax.models import input_multiple

  multiple = input_multiple(model)
  side = multiple * -(-256 // multiple)
  images = jax.ShapeDtypeStruct((1, side, side, 3), jnp.float32)
  variables = jax.eval_shape(model.init, jax.random.key(0), images)

  def flat(tree: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
      path = f'{prefix}/{key}' if prefix else str(key)
      out.update(flat(value, path) if isinstance(value, Mapping) else {path: value})
    return out

  return flat(variables, '')


def tensor_problems(tensors: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
  """A line per tensor missing, unexpected, or of another shape or kind of dtype than the
  model's variable (a float variable may be stored as float32 or bfloat16)."""
  import numpy as np

  out = [f'tensor {n} is missing (the model has it)' for n in expected if n not in tensors]
  out += [f'tensor {n} is not a variable of the model' for n in tensors if n not in expected]
  for n in expected:
    if n not in tensors:
      continue
    got, want = tensors[n], expected[n]
    if tuple(got.shape) != tuple(want.shape):
      out.append(f'tensor {n} has shape {tuple(got.shape)}; the model needs {tuple(want.shape)}')
    elif (got.dtype.kind == 'f' or got.dtype.name == 'bfloat16') != np.issubdtype(
      want.dtype, np.floating
    ) or got.dtype.name not in ('float32', 'bfloat16', want.dtype.name):
      out.append(f'tensor {n} has dtype {got.dtype.name}; the model needs {want.dtype.name}')
  return out


def problems(meta: Mapping[str, Any], tensors: Mapping[str, Any] | None = None) -> list[str]:
  """Every problem of a model file at once: a line per field of `meta` (the decoded metadata)
  that breaks `SCHEMA` and, given its `tensors` (``params/...`` and ``batch_stats/...``
  arrays), per field of the model group its registry entry does not take (`model_problems`)
  and per tensor that does not fit the model built from it (`tensor_problems`). The model is
  judged only once the metadata is sound (a malformed group builds nothing)."""
  out = metadata_problems(meta)
  if tensors is None or out:
    return out
  found = model_problems(meta['model'])
  if found:
    return found
  try:
    expected = _expected_of(json.dumps(meta['model'], sort_keys=True))
  except Exception as e:  # noqa: BLE001 - any failure to build what the metadata describes
    detail = ' '.join(str(e).split())[:300]
    return [f'crackjax.model cannot be built here ({type(e).__name__}: {detail})']
  found = tensor_problems(tensors, expected)
  if found:
    name = meta['model'].get('name')
    found[0] = f'its tensors do not fit crackjax.model ({name!r}): {found[0]}'
  return found


@functools.lru_cache(maxsize=8)
def _expected_of(model_json: str) -> Mapping[str, Any]:
  """`expected_variables` of the model a file's ``crackjax.model`` group (as sorted JSON)
  builds, once per group in a process: tracing the model takes ~0.3 s (the smoke U-Net) to
  seconds, and a command or a test session reads the same file several times. Read-only."""
  from types import MappingProxyType

  from crackjax.models import model_from_config

  return MappingProxyType(expected_variables(model_from_config(json.loads(model_json))))
