"""Wall time of one `launch.py` run from start to eval.json, with its breakdown.

Runs `launch.py` exactly as a user does (a subprocess, with the given arguments), after
preparing the dataset in a separate process (`--prepare_first`, timed on its own: on a fresh
machine that is what the first launch would spend on it), and splits the run's wall time using
what the run leaves behind:

* compilation: the "Finished XLA compilation of jit(...) in X sec" lines that
  `JAX_LOG_COMPILES=1` makes JAX log (the train step's alone, and all programs together);
* training: the times of the loop's metric records (`metrics.jsonl`): start to first record
  (imports, data check, model init, compilation, the first `log_every_steps` steps), then the
  steady rate over the rest (`bench/loop_vs_step.py`'s `steady_rate`), epoch checkpoints
  included;
* evaluation: last train record to eval.json's modification time (final checkpoint wait,
  evaluation compile and the protocols);
* after eval.json: the rest of the report files and interpreter exit.

Usage (everything after the script's own flags goes to launch.py; the workdir must be new)::

    python bench/launch_breakdown.py --workdir=/tmp/row --json=/tmp/row.json --prepare_first \\
        --config=configs/crackforest_exp.py --config.data.data_dir=/tmp/tfds \\
        --config.data.manual_dir=../shared/datasets/crackforest
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_COMPILE = re.compile(r'Finished XLA compilation of (\S+) in ([0-9.eE+-]+) sec')


def _steady_rate():
  spec = importlib.util.spec_from_file_location(
    'bench_loop_vs_step', REPO / 'bench' / 'loop_vs_step.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.steady_rate


def compile_times(log: str) -> dict[str, float]:
  """Seconds of XLA compilation per jitted function name, summed, from a JAX_LOG_COMPILES log."""
  out: dict[str, float] = {}
  for name, seconds in _COMPILE.findall(log):
    out[name] = out.get(name, 0.0) + float(seconds)
  return out


def _env() -> dict[str, str]:
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(p for p in (str(REPO), env.get('PYTHONPATH')) if p)
  return env


# Prepares the dataset of the config in its arguments (launch.py's flags); a problem with the
# data (absent, unreadable) exits with the first line of its message, no traceback.
PREPARE_CODE = """\
import sys
from crackjax import cli
from crackjax.runs import logs
from crackjax.data import registry as data_registry
from crackjax.experiment.build import build
logs.quiet_third_party_logs()
fv, _ = cli.parse_command('prepare', sys.argv[1:])
try:
  build(fv.config).splits.prepare()
except (data_registry.DatasetError, OSError, ValueError) as e:
  sys.exit(str(e).splitlines()[0])
"""


class PrepareError(RuntimeError):
  """The dataset preparation failed; the message is one line saying what is missing."""


def prepare(launch_args: list[str]) -> float:
  """Prepares the dataset of the config in `launch_args` in a subprocess; returns its wall time.

  Raises:
    PrepareError: the preparation failed (message: the last line it wrote to stderr, e.g.
      which `--config.data.manual_dir` does not exist).
  """
  t0 = time.time()
  proc = subprocess.run(
    [sys.executable, '-c', PREPARE_CODE, *launch_args],
    stderr=subprocess.PIPE,
    text=True,
    env=_env(),
    cwd=REPO,
  )
  if proc.returncode == 0:
    sys.stderr.write(proc.stderr)  # TFDS's progress, after the fact
    return time.time() - t0
  lines = proc.stderr.rstrip().splitlines()
  # All but the message itself (a traceback, if the failure was not the data's), then the message.
  sys.stderr.write(''.join(f'{line}\n' for line in lines[:-1]))
  last = lines[-1].strip() if lines else 'no message'
  raise PrepareError(f'dataset preparation failed (exit {proc.returncode}): {last}')


def run(workdir: Path, launch_args: list[str], log_path: Path) -> dict:
  """Runs launch.py into `workdir`; returns the wall-time breakdown."""
  env = _env()
  env['JAX_LOG_COMPILES'] = '1'
  cmd = [sys.executable, str(REPO / 'launch.py'), f'--workdir={workdir}', *launch_args]
  t0 = time.time()
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
  t_end = time.time()
  log_path.write_text(proc.stderr)
  if proc.returncode != 0:
    tail = '\n'.join(proc.stderr.strip().splitlines()[-10:])
    raise RuntimeError(f'launch.py failed (exit {proc.returncode}):\n{tail}')
  rows = [json.loads(line) for line in (workdir / 'metrics.jsonl').read_text().splitlines()]
  train_rows = [r for r in rows if r.get('kind') == 'train']
  rate = _steady_rate()(rows)
  t_eval = (workdir / 'eval.json').stat().st_mtime
  compiles = compile_times(proc.stderr)
  step_compile = sum(s for name, s in compiles.items() if 'train_step' in name)
  total_steps = train_rows[-1]['step']
  first = rate['first_record_step']
  return {
    'command': ' '.join(cmd),
    'launch_to_eval_json_s': t_eval - t0,
    'launch_wall_s': t_end - t0,
    'start_to_first_record_s': rate['first_record_time'] - t0,
    'compile_train_step_s': step_compile,
    'compile_all_s': sum(compiles.values()),
    'compiles': compiles,
    'first_record_step': first,
    'steady_steps_per_s': rate['steps_per_s'],
    'median_interval_steps_per_s': rate['median_logged_steps_per_s'],
    'steps': total_steps,
    'first_steps_at_steady_rate_s': first / rate['steps_per_s'],
    'train_after_first_record_s': rate['last_record_time'] - rate['first_record_time'],
    'evaluation_s': t_eval - rate['last_record_time'],
    'after_eval_json_s': t_end - t_eval,
    'log': str(log_path),
  }


def report(r: dict) -> str:
  """The breakdown as text."""
  lines = []
  if r.get('prepare_s') is not None:
    lines.append(f'dataset preparation (separate process): {r["prepare_s"]:.1f} s')
  lines += [
    f'launch.py start to eval.json:  {r["launch_to_eval_json_s"]:.1f} s '
    f'(process exit at {r["launch_wall_s"]:.1f} s)',
    f'  start to first metric record: {r["start_to_first_record_s"]:.1f} s (imports, data '
    f'check, init, compile, steps 1-{r["first_record_step"]}: about '
    f'{r["first_steps_at_steady_rate_s"]:.1f} s of it at the steady rate)',
    f'    of which XLA compilation:  train step {r["compile_train_step_s"]:.1f} s; all '
    f'programs of the run {r["compile_all_s"]:.1f} s',
    f'  training, steps {r["first_record_step"]}-{r["steps"]}:   '
    f'{r["train_after_first_record_s"]:.1f} s ({r["steady_steps_per_s"]:.2f} steps/s with '
    f'checkpoints; median interval {r["median_interval_steps_per_s"]:.2f} steps/s)',
    f'  evaluation to eval.json:      {r["evaluation_s"]:.1f} s',
    f'  rest (reports, exit):         {r["after_eval_json_s"]:.1f} s',
  ]
  return '\n'.join(lines)


def main(argv: list[str] | None = None) -> dict:
  """Parses the script's flags, passes the rest to launch.py; prints and returns the breakdown."""
  parser = argparse.ArgumentParser(prog='bench/launch_breakdown.py')
  parser.add_argument('--workdir', required=True, type=Path)
  parser.add_argument('--json', type=Path)
  parser.add_argument('--prepare_first', action='store_true')
  args, launch_args = parser.parse_known_args(argv)
  if args.workdir.exists() and any(args.workdir.iterdir()):
    sys.exit(f'bench/launch_breakdown.py: --workdir {args.workdir} is not empty')
  args.workdir.mkdir(parents=True, exist_ok=True)
  try:
    prepare_s = prepare(launch_args) if args.prepare_first else None
    r = run(args.workdir, launch_args, args.workdir.parent / f'{args.workdir.name}.launch.log')
  except RuntimeError as e:  # PrepareError, or launch.py failed (its last lines)
    sys.exit(f'bench/launch_breakdown.py: {e}')
  r['prepare_s'] = prepare_s
  print(report(r))
  if args.json:
    from crackjax.runs import outputs  # strict JSON (NaN as null), as every file crackjax writes

    args.json.write_text(outputs.dumps(r, indent=1))
  return r


if __name__ == '__main__':
  main()
