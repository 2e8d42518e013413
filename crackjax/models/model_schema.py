"""The schema of a model file's metadata, and its tensors checked against the model it names.

`check_metadata` runs on every load (`crackjax.models.model_file`), before anything is built:
each field of `SCHEMA` has a type and range, and a file that breaks any is refused in one line
naming the file and every field at fault (``crackjax.threshold.threshold=nan: expected a
finite number in [0, 1]``). `check_tensors` then builds the model the metadata describes
(``crackjax.model``, its fields judged by the defaults its registry entry declares, as configs
are: `crackjax.config.validation.type_problems`) and compares every tensor's name, dtype and
shape with the model's variables (`jax.eval_shape` of its init: no weights are made).

Why a small declarative schema in code rather than a library: the checks the file needs are
few and exact (a finite number in [0, 1], positive integers, objects and lists of strings),
and the second half (tensors against a model built from the metadata) is code whatever the
schema language. jsonschema would add four packages (one a Rust extension, rpds-py) and its
``minimum``/``maximum`` let NaN through (no comparison with NaN holds); pydantic brings its
compiled core for a dozen fields. Neither is a dependency of crackjax today.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# A rule: value -> what was expected (None when the value is fine); a mapping rule checks its
# own fields and reports them under their dotted names (`_problems`).
Rule = Callable[[Any], str | None]


def _int(v: Any) -> bool:
  return isinstance(v, int) and not isinstance(v, bool)


def integer(minimum: int) -> Rule:
  return lambda v: None if _int(v) and v >= minimum else f'an integer >= {minimum}'


def string(v: Any) -> str | None:
  return None if isinstance(v, str) else 'a string'


def name(v: Any) -> str | None:
  return None if isinstance(v, str) and v else 'a non-empty string'


def probability(v: Any) -> str | None:
  ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
  return None if ok and 0 <= v <= 1 else 'a finite number in [0, 1]'


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
    }
  ),
  'config': Obj(optional={'model': Obj(), 'plugins': list_of(name, 'module names')}),
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


def refusal(path: Any, problems: Sequence[str]) -> str:
  """The one line for a file whose metadata or tensors break the schema."""
  shown = '; '.join(problems[:6]) + (f'; and {len(problems) - 6} more' if len(problems) > 6 else '')
  return (
    f'{path}: not a usable crackjax model file: {shown}. It was altered or not written by '
    'crackjax-export --format=model; get it again from its source.'
  )


def metadata_problems(meta: Mapping[str, Any], prefix: str = 'crackjax.') -> list[str]:
  """A line per field of `meta` (the decoded metadata) that breaks `SCHEMA`."""
  out = []
  for key, rule in SCHEMA.items():
    if key in meta:
      out += _problems(prefix + key, meta[key], rule)
  return out


def model_problems(model: Mapping[str, Any], prefix: str = 'crackjax.') -> list[str]:
  """A line per field of the ``crackjax.model`` group not of the kind its registry entry
  declares (`crackjax.config.validation.type_problems`), or an unknown model name."""
  from crackjax.config.validation import type_problems
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
  from crackjax.models.pretrained import flat_variables

  multiple = input_multiple(model)
  side = multiple * -(-256 // multiple)
  images = jax.ShapeDtypeStruct((1, side, side, 3), jnp.float32)
  return flat_variables(jax.eval_shape(model.init, jax.random.key(0), images))


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


def checked_model(loaded, *, allow_plugins: Sequence[str] = (), how: str | None = None):
  """The linen Module a model file (`model_file.ModelFile`) describes, once its plugins are
  allowed (`crackjax.plugins.model_file_plugins`: never imported on the file's word alone),
  its model group fits the model's registry entry and every tensor fits the model's variables.

  Raises:
    ModelFileError: one line naming the file and each problem (a plugin not allowed too).
  """
  import ml_collections

  from crackjax import plugins
  from crackjax.models import model_file, model_from_config

  path = loaded.path
  names = [*loaded.meta['plugins'], *(loaded.config.get('plugins') or ())]
  try:
    plugins.model_file_plugins(str(path), names, allow_plugins, how=how)
  except ValueError as e:
    raise model_file.ModelFileError(str(e)) from e
  problems = model_problems(loaded.model)
  if problems:
    raise model_file.ModelFileError(refusal(path, problems))
  try:
    model = model_from_config(ml_collections.ConfigDict(loaded.model))
    expected = expected_variables(model)
  except Exception as e:  # noqa: BLE001 - any failure to build what the metadata describes
    detail = ' '.join(str(e).split())[:300]
    raise model_file.ModelFileError(
      refusal(path, [f'crackjax.model cannot be built here ({type(e).__name__}: {detail})'])
    ) from e
  tensors = model_file.flatten(loaded.params, 'params')
  tensors.update(model_file.flatten(loaded.batch_stats or {}, 'batch_stats'))
  problems = tensor_problems(tensors, expected)
  if problems:
    problems[0] = (
      f'its tensors do not fit crackjax.model ({loaded.model.get("name")!r}): {problems[0]}'
    )
    raise model_file.ModelFileError(refusal(path, problems))
  return model
