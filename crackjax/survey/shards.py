"""A survey's prediction split into shards (``crackjax-survey --shards=N``) and merged into
one output folder: the same rows and files as one process predicting every photo.

The photos not yet done in OUT (its manifest, `crackjax.deploy.predict_outputs`) are split in
their order into N contiguous parts; part k is written to ``OUT/.shards/<k>/photos.txt`` and
predicted by a task, ``python -m crackjax.survey.shards <crackjax-predict's flags> <inputs>
--job=shard-<k>``: crackjax-predict itself over the same inputs (so every photo's output name
is the one a single process gives it) with only its part's photos, into ``OUT/.shards/<k>/``
(`predict_command._main`'s `select`). With ``--executor=slurm`` the tasks are one SLURM
array job through crackjax.paper.slurm (submitit; USR2 before the time limit: the task saves
its progress and is requeued, and resumes); with ``--executor=local`` they run here one after
another. Then `merge`: each part's finished photos (its progress file's lines, after all their
maps) have their maps moved into OUT and their lines added to OUT's manifest; a part whose
task did not finish is named with the photos it left, and the same command again gives those
alone to new tasks. Once every photo is merged, crackjax-predict over the same inputs into OUT
finds them all done and writes measurements.csv, cracks.csv and index.html as one process
would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from absl import flags

from crackjax import cli
from crackjax.deploy import predict_command
from crackjax.deploy import predict_outputs as written
from crackjax.deploy.photos import find_inputs, map_files, output_names
from crackjax.paper import slurm
from crackjax.runs import identity

PROG = 'crackjax-survey'
#: The shards' folder inside OUT (hidden: never searched as input).
SHARDS_DIR = '.shards'
PHOTOS_FILE = 'photos.txt'
EXECUTORS = ('local', 'slurm')


def define_shard_flags(fv: flags.FlagValues) -> None:
  """--executor, --shards and the SLURM tasks' settings (crackjax-survey's)."""
  flags.DEFINE_enum(
    'executor',
    'local',
    list(EXECUTORS),
    'where the shards run: local (here, one after another) or slurm (one array job, a task '
    'a shard, through crackjax.paper.slurm)',
    flag_values=fv,
  )
  flags.DEFINE_integer(
    'shards', 1, 'parts the photos are split into', lower_bound=1, flag_values=fv
  )
  flags.DEFINE_integer('slurm_time', 240, 'minutes a SLURM task may run', flag_values=fv)
  flags.DEFINE_string('slurm_partition', None, 'SLURM partition', flag_values=fv)
  flags.DEFINE_string('slurm_account', None, 'SLURM account', flag_values=fv)
  flags.DEFINE_integer('slurm_cpus', None, 'CPU cores per SLURM task', flag_values=fv)
  flags.DEFINE_float('slurm_mem_gb', None, 'memory per SLURM task, GB', flag_values=fv)
  flags.DEFINE_integer('slurm_gpus', 0, 'GPUs per SLURM task', flag_values=fv)
  flags.DEFINE_list('slurm_option', [], "more sbatch options, e.g. 'qos=high'", flag_values=fv)


def plan(names: Sequence[str], count: int) -> list[list[str]]:
  """`names` in `count` contiguous parts of sizes differing by at most one (no empty part)."""
  count = max(1, min(count, len(names)))
  size, extra = divmod(len(names), count)
  parts, start = [], 0
  for k in range(count):
    end = start + size + (k < extra)
    parts.append(list(names[start:end]))
    start = end
  return [p for p in parts if p]


def root(out: Path) -> Path:
  return out / SHARDS_DIR


def shard_folder(out: Path, index: int) -> Path:
  return root(out) / f'{index:04d}'


@dataclasses.dataclass(frozen=True)
class ShardJob:
  """One shard as a SLURM array task (`crackjax.paper.jobs.ArrayJob`)."""

  index: int
  out: Path

  @property
  def id(self) -> str:
    return f'shard-{self.index:04d}'

  def directory(self, workdir: str | Path) -> Path:
    del workdir
    return shard_folder(self.out, self.index)


def predict_flag_names() -> frozenset[str]:
  """The names of crackjax-predict's flags (what a task is given)."""
  scratch = flags.FlagValues()
  predict_command._define_flags(scratch)
  return frozenset(scratch)


def task_argv(fv: flags.FlagValues, inputs: Sequence[str]) -> list[str]:
  """A task's command line after the module: the crackjax-predict flags given, the inputs."""
  own = predict_flag_names()
  given = [fv[n].serialize() for n in sorted(own) if fv[n].present]
  return [*given, *inputs]


def done_in(out: Path) -> set[str]:
  """The photos OUT's progress file or manifest lists as done, whose maps are all there."""
  earlier = written.read_progress(out)
  if earlier is None:
    return set()
  return {n for n in earlier[1] if all(f.is_file() for f in map_files(out, n))}


@dataclasses.dataclass
class Merged:
  """What `merge` did: photos merged, and per unfinished shard the photos it left."""

  merged: int
  left: dict[int, list[str]]


def merge(out: Path) -> Merged:
  """Each shard folder's finished photos into OUT (module docstring); a shard whose task
  finished goes, its folder removed; one that did not stays with the photos it left.

  Raises:
    written.SettingsDiffer: a shard was predicted with other settings than OUT's manifest.
  """
  result = Merged(0, {})
  if not root(out).is_dir():
    return result
  already = done_in(out)
  for folder in sorted(p for p in root(out).iterdir() if p.is_dir() and p.name.isdigit()):
    wanted = _wanted(folder)
    earlier = written.read_progress(folder)
    settings, done = (earlier[0], earlier[1]) if earlier else ({}, {})
    progress = written.Progress(out, settings, restart=False) if earlier else None
    for name in wanted:
      if name in already:
        continue
      if progress is not None and name in done and _move_maps(folder, out, name):
        progress.add(name, done[name]['row'], done[name]['cracks'])
        already.add(name)
        result.merged += 1
    finished = (folder / 'measurements.csv').is_file() and not written.unfinished(folder)
    if finished:
      # Its task ended: photos it did not do were skipped (unreadable, too large), said in
      # its log, as one process skips them.
      shutil.rmtree(folder)
    else:
      result.left[int(folder.name)] = [n for n in wanted if n not in already]
  return result


def _locked_merge(out: Path) -> Merged:
  """`merge` with OUT held, as crackjax-predict holds it (a second command ends in one line)."""
  try:
    with identity.lock(out):
      return merge(out)
  except identity.RunLockedError as e:
    sys.exit(f'{PROG}: --out={out}: {e}')


def _wanted(folder: Path) -> list[str]:
  try:
    return [n for n in (folder / PHOTOS_FILE).read_text(encoding='utf-8').splitlines() if n]
  except OSError:
    return []


def _move_maps(folder: Path, out: Path, name: str) -> bool:
  """The maps of `name` from the shard's folder into OUT (those moved already stay); whether
  all of them are in OUT now."""
  for source, target in zip(map_files(folder, name), map_files(out, name), strict=True):
    if source.is_file():
      target.parent.mkdir(parents=True, exist_ok=True)
      os.replace(source, target)
  return all(f.is_file() for f in map_files(out, name))


def _submit_or_run(fv, inputs: Sequence[str], out: Path, parts: list[list[str]]) -> dict:
  """Writes each part's photos.txt and runs its task (here, or as a SLURM array task);
  returns {shard index: SLURM id or the local exit status}."""
  jobs = [ShardJob(k, out) for k in range(len(parts))]
  for job, part in zip(jobs, parts, strict=True):
    folder = job.directory(out)
    folder.mkdir(parents=True, exist_ok=True)
    written.write_text(folder / PHOTOS_FILE, '\n'.join(part) + '\n')
  command = [sys.executable, '-m', 'crackjax.survey.shards', *task_argv(fv, inputs)]
  if fv.executor == 'local':
    status = {}
    for job in jobs:
      with open(job.directory(out) / 'worker.log', 'a') as log:
        ended = subprocess.run(
          [*command, f'--job={job.id}'], stdout=log, stderr=subprocess.STDOUT, check=False
        )
        status[job.index] = f'exit {ended.returncode}'
    return status
  settings = slurm.Settings(
    partition=fv.slurm_partition,
    time_min=fv.slurm_time,
    gpus=fv.slurm_gpus,
    account=fv.slurm_account,
    cpus=fv.slurm_cpus,
    mem_gb=fv.slurm_mem_gb,
    options=tuple(fv.slurm_option),
  )
  ids = slurm.submit(jobs, root(out), settings, command)
  print(
    f'{PROG}: {len(jobs)} shard(s) submitted as SLURM array tasks '
    f'({", ".join(ids.values())}); waiting for them',
    file=sys.stderr,
  )
  _wait(ids)
  return {job.index: ids[job.id] for job in jobs}


def _wait(ids: dict[str, str]) -> None:
  """Until none of the SLURM jobs `ids` is queued or running."""
  while True:
    queued = slurm.queue_states()
    if not any(queued.get(i) in slurm.LIVE_STATES for i in ids.values()):
      return
    time.sleep(slurm.POLL_SECONDS)


def predict(fv: flags.FlagValues, inputs: list[str]) -> int:
  """The prediction of `inputs` into --out in --shards parts (module docstring); returns
  crackjax-predict's exit status, or 1 with one line per shard that left photos.

  Raises:
    slurm.SlurmError: SLURM cannot be used, or refused the tasks (one line).
  """
  if fv.shards == 1 and fv.executor == 'local':
    return predict_command._main(fv, inputs)
  if fv.overwrite or fv.examples:
    sys.exit(f'{PROG}: --shards and --executor=slurm take neither --overwrite nor --examples.')
  if fv.executor == 'slurm':
    slurm.check_available()
  out = Path(fv.out)
  live = slurm.live(root(out)) if fv.executor == 'slurm' and root(out).is_dir() else {}
  if live:
    print(
      f'{PROG}: {len(live)} shard(s) of an earlier run still on SLURM: waiting', file=sys.stderr
    )
    _wait(live)
  out.mkdir(parents=True, exist_ok=True)
  _locked_merge(out)  # the work of an earlier run's shards first
  files, _ = find_inputs(inputs, out=out)
  names = output_names(files)
  rest = [n for n in names if n not in done_in(out)]
  if rest:
    parts = plan(rest, fv.shards)
    status = _submit_or_run(fv, inputs, out, parts)
    merged = _locked_merge(out)
    if merged.left:
      for index, left in sorted(merged.left.items()):
        shown = ', '.join(left[:3]) + (f', ... ({len(left)} in all)' if len(left) > 3 else '')
        print(
          f'{PROG}: shard {index} ({status.get(index, "an earlier run")}) did not finish: '
          f'{len(left)} photo(s) not done ({shown}); its log: '
          f'{shard_folder(out, index) / "worker.log"}; run the same command again to predict '
          'them',
          file=sys.stderr,
        )
      return 1
  # Every photo done in OUT: crackjax-predict over the same inputs writes the tables.
  status = predict_command._main(fv, inputs)
  with contextlib.suppress(OSError):
    root(out).rmdir()  # empty once every shard is merged (SLURM's logs stay, under slurm/)
  return status


# ------------------------------------------------------------------------------------ the task


def _define_task_flags(fv: flags.FlagValues) -> None:
  predict_command._define_flags(fv)
  flags.DEFINE_string('job', None, 'the shard, shard-<k>', flag_values=fv)


def _task(fv: flags.FlagValues, inputs: list[str]) -> int:
  """One shard: crackjax-predict over the inputs, its part of the photos into its folder."""
  index = int(str(fv.job).removeprefix('shard-'))
  folder = shard_folder(Path(fv.out), index)
  wanted = set(_wanted(folder))

  def select(files, names, out):
    del out
    keep = [(f, n) for f, n in zip(files, names, strict=True) if n in wanted]
    gone = wanted - {n for _, n in keep}
    if gone:
      print(
        f'{PROG}: shard {index}: {len(gone)} photo(s) of its part are no longer among the '
        f'inputs ({", ".join(sorted(gone)[:3])})',
        file=sys.stderr,
      )
    return [f for f, _ in keep], [n for _, n in keep], folder

  return predict_command._main(fv, inputs, select=select)


TASK = cli.Command.restoring(f'{PROG} (shard)', _define_task_flags)


def main(argv: Sequence[str] | None = None) -> int:
  """A shard's task (`python -m crackjax.survey.shards ... --job=shard-<k>`)."""
  slurm.leave_preemption_to_the_task()
  return TASK.run(_task, argv)


if __name__ == '__main__':
  sys.exit(main())
