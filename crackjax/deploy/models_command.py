"""`crackjax-models`: the released models, to use by name without training.

  crackjax-models            # a table: name, model, parameters, size, data and licence, scores
  crackjax-models --json     # the same as a JSON list (name, size, sha256, data, licence,
                             # scores: {protocol: {ods, ois, ap}}, ...)

Each is used by name: ``crackjax-predict --model=NAME --out=DIR photos/``,
``crackjax.Predictor.from_pretrained(NAME)``, ``crackjax-evaluate --model=NAME ...``,
``--config.model_init.pretrained=NAME`` (fine-tuning). The list is the package's registry
(crackjax/models/released/registry.json, `crackjax.models.hub`); how each model was made is
docs/models.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from absl import flags

from crackjax import cli
from crackjax.models import hub
from crackjax.runs import docs, outputs

PROG = 'crackjax-models'


def _percent(value: float | None) -> str:
  return '-' if value is None else f'{100 * value:.1f}'


def table(models: Sequence[dict[str, Any]]) -> str:
  """The released models as a Markdown table."""
  lines = [
    '| name | model | parameters | size | training data (licence) | held-out scores '
    '(ODS F1 / OIS F1 / AP, %) |',
    '|---|---|---|---|---|---|',
  ]
  for m in models:
    widths = 'x'.join(str(w) for w in m.get('widths') or ())
    model = f'{m["model"]} ({widths}, {m.get("dtype", "float32")})' if widths else m['model']
    scores = '; '.join(
      f'{protocol} {_percent(s["ods"])} / {_percent(s["ois"])} / {_percent(s["ap"])}'
      for protocol, s in m['scores'].items()
    )
    where = m.get('scored_on', '')
    if m.get('scores_by_set'):  # several test sets: strict ODS F1 (F1 at its threshold) each
      where = 'their test splits: ' + ', '.join(
        f'{s["set"].replace(" test", "")} {_percent(s["ods"].get("strict"))}'
        f' ({_percent(s["at_threshold"].get("strict"))} at t)'
        for s in m['scores_by_set']
      )
      scores = 'strict ODS F1 (F1 at the stored threshold)'
    name = (
      f'{m["name"]} (superseded by {m["superseded_by"]})' if m.get('superseded_by') else m['name']
    )
    lines.append(
      f'| {name} | {model} | {m["parameters"]:,} | {m["size"] / 2**20:.1f} MiB | '
      f'{m["data"]} ({m["licence"]}) | {scores}{" on " + where if where else ""}'
      f'{_lodo(m.get("lodo"))} |'
    )
  return '\n'.join(lines)


def _lodo(lodo: dict[str, Any] | None) -> str:
  """The registry's LODO means in words: strict F1 (%) at the stored threshold on roads the
  recipe never saw, and the peer's beside it."""
  if not lodo or 'strict' not in lodo['mean']:
    return ''
  text = f'; roads never seen (leave-one-dataset-out, {len(lodo["sets"])} sets): strict F1 '
  text += f'{lodo["mean"]["strict"]["stored"]:.1f} at its threshold'
  peer = lodo.get('peer')
  if peer and 'strict' in peer['mean']:
    text += f' ({peer["row"]}: {peer["mean"]["strict"]["stored"]:.1f})'
  return text


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name); returns the exit status."""
  return COMMAND.run(_main, argv)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_bool('json', False, 'print a JSON list instead', flag_values=fv)


COMMAND = cli.Command(PROG, _define_flags, usage=f'{PROG} [--json]')


def _main(fv: flags.FlagValues, arguments: list[str]) -> int:
  """The table (or JSON list) of the released models."""
  if arguments:
    sys.exit(f'{PROG}: unexpected arguments {arguments}.\n{cli.HELP_HINT}')
  models = hub.released()
  if fv.json:
    print(outputs.dumps(models, indent=2))
    return 0
  if not models:
    print(f'{PROG}: this installation ships no released model.')
    return 0
  print(table(models))
  print(
    f'\nUse one by name: crackjax-predict --model={models[0]["name"]} --out=DIR PHOTOS... '
    f'({docs.doc("models.md")} says how each was made).'
  )
  return 0


if __name__ == '__main__':
  sys.exit(main())
