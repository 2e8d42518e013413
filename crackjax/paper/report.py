"""Tables I-VIII as re-run by `crackjax.paper.runner`, beside the paper's figures.

  python -m crackjax.paper.report repro/cpu                      # -> repro/cpu/report/
  python -m crackjax.paper.report repro/cpu --export=results/cpu_scale.json   # small, committable
  python -m crackjax.paper.report results/cpu_scale.json --out=docs/reproduction/cpu_scale

Inputs are campaign directories of `crackjax.paper.runner` (``table<T>/<group>/seed<S>/`` with
``run.json`` and ``epoch_<NNN>.json``) or JSON files written by ``--export`` (the same results
without checkpoints, per-threshold curves or logs: a few kB per run), so a committed report can
be regenerated anywhere.

Written to ``--out``:
  report.md     per table and protocol, the paper's layout: each row's ODS and OIS precision,
                recall and F1 and its F1 at the fixed threshold 0.5, mean (std) over seeds in
                percent, the training time, and beside them the paper's value and the
                difference; then the paper's claim tested: each row against the longest
                wce_xie row (the paper's second baseline) with Welch's t-test.
  report.csv    the same numbers, one line per (table, row, protocol).
  curves_table<T>_<protocol>.png   ODS and OIS F1 against the epoch per training group, mean
                and min-max over seeds (Figs. 5-6 of the paper).
  report_compare.csv   Tables V-VIII (the comparison models), when a run of theirs is there:
                per (table, row, protocol) our ODS / OIS / fixed-threshold F1, time and
                parameter count beside the paper's ODS, OIS, parameters, GFLOPS, TT and FPS.
                report.md shows them too, with each model's dagger row against its original
                one (Welch's t-test), as the paper compares them.
  .crackjax-outputs.json   the files above with their SHA-256: a later report replaces them
                without a word while they are unchanged; any other file of those names (a
                user's own report.md, or one edited since) only with --overwrite. Links in
                --out are refused (`crackjax.runs.outputs`).

Every number names its protocol (docs/evaluation.md) and the hardware it ran on; the paper's
figures are its own protocol's (unnamed there, see docs/reproduction.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import flags

from crackjax import cli
from crackjax.paper import records
from crackjax.paper.report_figures import plot_curves
from crackjax.paper.report_stats import compare_results, left_out
from crackjax.paper.report_tables import markdown, write_compare_csv, write_csv
from crackjax.runs import outputs

PROG = 'python -m crackjax.paper.report'
USAGE = f'{PROG} CAMPAIGN_DIR_OR_EXPORT.json ... [--out=DIR] [--export=FILE] [flags]'


def report_files(runs: Sequence[dict[str, Any]], protocols: Sequence[str]) -> list[str]:
  """The names `write_report` may write in its folder (a curve of each table and protocol
  that the runs hold, whether or not it has points), checked before anything is written."""
  curves = [
    f'curves_table{table}_{protocol}.png'
    for table in sorted({r['table'] for r in runs})
    for protocol in protocols
  ]
  return ['report.md', 'report.csv', 'report_compare.csv', *curves]


def write_report(
  runs: Sequence[dict[str, Any]],
  out: str | Path,
  protocols: Sequence[str],
  left: Sequence[str] = (),
) -> Path:
  """report.md (with the `left_out` lines `left`), report.csv and the curve PNGs in `out`,
  listed in its manifest (`crackjax.runs.outputs.record_outputs`, so that the next report may
  replace them); returns the Markdown's path."""
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  text = markdown(runs, protocols, left)
  figures, written = [], ['report.md', 'report.csv']
  for table in sorted({r['table'] for r in runs}):
    for protocol in protocols:
      name = f'curves_table{table}_{protocol}.png'
      if plot_curves(out / name, runs, table, protocol):
        figures.append(f'![Table {table}, {protocol}]({name})')
        written.append(name)
  (out / 'report.md').write_text(text + '\n' + '\n\n'.join(figures) + '\n')
  write_csv(out / 'report.csv', runs, protocols)
  if any(compare_results(runs, p) for p in protocols):
    write_compare_csv(out / 'report_compare.csv', runs, protocols)
    written.append('report_compare.csv')
  outputs.record_outputs(out, written, PROG)
  return out / 'report.md'


def _protocols_of(runs: Sequence[dict[str, Any]]) -> list[str]:
  seen: dict[str, None] = {}
  for run in runs:
    for e in run['epochs']:
      seen.update(dict.fromkeys(e.get('results', {})))  # no 'results': not evaluated
  return list(seen)


def main(argv: Sequence[str] | None = None) -> int:
  """The command (argv without the program name; default sys.argv's). Ctrl-C or a full or
  read-only disk end it in one line (`crackjax.runs.exits`)."""
  return COMMAND.run(_main, argv)


def _define_flags(fv: flags.FlagValues) -> None:
  flags.DEFINE_string(
    'out', None, 'Report directory (default: <first input>/report).', flag_values=fv
  )
  flags.DEFINE_string(
    'export', None, 'Also write the results as one small JSON file.', flag_values=fv
  )
  flags.DEFINE_bool(
    'overwrite',
    False,
    'Replace an existing --export file that is not among the inputs (one that is, is merged '
    'into), and files in --out that an earlier report did not write or that changed since (its '
    'own unchanged ones it replaces anyway).',
    flag_values=fv,
  )
  flags.DEFINE_list('protocols', None, 'Protocols to report (default: all found).', flag_values=fv)
  flags.DEFINE_bool(
    'complete_only',
    False,
    'Keep only the jobs evaluated at every epoch up to their longest row (drop runs cut at a '
    "chunk's time limit, which the next chunk redoes from scratch).",
    flag_values=fv,
  )


_INTERRUPTED = 'interrupted (Ctrl-C); the inputs are untouched: run the same command again.'
COMMAND = cli.Command(PROG, _define_flags, usage=USAGE, interrupted=_INTERRUPTED)


def _main(fv: flags.FlagValues, inputs: list[str]) -> int:
  """The report of the campaigns or exports named by `inputs`, on the parsed flags."""
  if not inputs:
    sys.exit(f'usage: {USAGE}')
  try:
    runs = records.load(inputs)
  except (OSError, ValueError) as e:
    sys.exit(f'{PROG}: {e}')
  if fv.complete_only:
    runs = records.complete_runs(runs)
    if not runs:
      sys.exit(
        f'{PROG}: --complete_only: no run in {", ".join(inputs)} is evaluated at every epoch '
        'of its rows; nothing to report or export.'
      )
  found = _protocols_of(runs)
  if not found:
    sys.exit(f'{PROG}: no epoch in {", ".join(inputs)} was evaluated; nothing to report.')
  unknown = [p for p in fv.protocols or () if p not in found]
  if unknown:
    sys.exit(f'{PROG}: --protocols {unknown} not in these results; they hold {list(found)}.')
  # Every flag checked before anything is written (was: the export written, then this).
  out = fv.out or (Path(inputs[0]) / 'report' if Path(inputs[0]).is_dir() else None)
  if out is None:
    sys.exit(f'{PROG}: --out is required when the input is an export file.')
  targets = [('--out', out)] + ([('--export', Path(fv.export).parent)] if fv.export else [])
  for flag, folder in targets:
    outputs.require_writable(PROG, flag, folder)
  if fv.export and Path(fv.export).exists() and not fv.overwrite:
    # A file the user made (e.g. the committed results of earlier chunks) is replaced only on
    # request; an export that is one of the inputs is merged into, as docs/reproduction.md does.
    if Path(fv.export).resolve() not in {Path(i).resolve() for i in inputs}:
      sys.exit(
        f'{PROG}: --export={fv.export} exists and is not among the inputs; pass --overwrite '
        'to replace it, or name it as an input to merge these results into it.'
      )
  protocols = fv.protocols or found
  # A user's own report.md (or a report's, edited since) is replaced only on request; the
  # report's own unchanged outputs (its manifest) are, so that rerunning it needs no flag.
  names = report_files(runs, protocols)
  outputs.refuse_unsafe(PROG, out, names, fv.overwrite)
  if fv.export:
    records.export(runs, fv.export)
    print(f'exported {len(runs)} runs to {fv.export}')
  left = left_out(runs, protocols, records.set_aside(inputs))
  for line in left:
    print(f'note: left out {line}', file=sys.stderr)
  print(f'wrote {write_report(runs, out, protocols, left)}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
