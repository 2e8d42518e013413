"""Evaluation of a trained model on a test split, and the files it leaves in the workdir.

`evaluate_checkpoint` predicts every test image with the latest checkpoint (or a given
state) and scores it under every protocol of the experiment's `EvalPlan`
(`crackjax.evaluation`, numpy only), one photo at a time (`stream_score`: counts kept, maps
dropped), then writes the reports (`crackjax.evaluation.plots`).
Scoring reads the run's `Schedule` and `EvalPlan` (`crackjax.experiment.build` derives them),
never the config's fields.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import tqdm
from absl import logging
from flax import linen as nn

from crackjax import evaluation
from crackjax.data import mixture
from crackjax.evaluation import plots
from crackjax.evaluation.eval_plan import EvalPlan
from crackjax.evaluation.inference import predict_probabilities
from crackjax.evaluation.streaming import StreamScorer
from crackjax.experiment import Experiment
from crackjax.runs import identity, metric_writer
from crackjax.runs.metric_writer import MetricWriter
from crackjax.training import train_state

#: An evaluation's per-image rows (`plots.write_per_image_csv`); while its photos are scored,
#: the rows so far are in this name + `plots.PARTIAL_SUFFIX` (`stream_score`).
PER_IMAGE_CSV = 'eval_per_image.csv'


def score(
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  plan: EvalPlan,
  *,
  workers: int = 1,
  progress: bool = True,
) -> dict[str, dict[str, Any]]:
  """`evaluation.evaluate` under every protocol of `plan`, each on its grid.

  Each grid has the protocol's uniform thresholds (`EvalPlan.thresholds_of`), 0.5 and, if
  `plan.tail_thresholds`, the tail thresholds near 0 and 1. Shows a progress bar per
  protocol over the images (process 0 only, on stderr, unless `progress` is False): the
  tolerance protocols can take most of a second per image. `workers` processes count the
  images in parallel (`evaluation.evaluate`).
  """
  results = {}
  for protocol in plan.protocols:
    with tqdm.tqdm(
      total=len(probs),
      desc=f'{protocol} protocol',
      unit='img',
      disable=not progress or jax.process_index() != 0,
    ) as bar:
      results[protocol] = evaluation.evaluate(
        probs,
        gts,
        protocol=protocol,
        num_thresholds=plan.thresholds_of(protocol),
        tail_thresholds=plan.tail_thresholds,
        progress=bar.update,
        workers=workers,
      )
  return results


#: The keys of an `evaluation.evaluate` result that `protocol_summary` keeps, in order.
_SUMMARY_KEYS = (
  'protocol',
  'protocol_description',
  'num_thresholds',
  'tail_thresholds',
  'grid_size',
  'ods',
  'ods_grid',
  'ois',
  'ois_mean_f1',
  'ap',
  'fixed',
  'curve',
)


def protocol_summary(result: dict[str, Any]) -> dict[str, Any]:
  """The compact per-protocol dict of eval.json, from one `evaluation.evaluate` result.

  Everything but the per-image rows (and ``num_images``, which eval.json keeps once):
  protocol, protocol_description, num_thresholds (the uniform part), tail_thresholds,
  grid_size, ods, ods_grid, ois, ois_mean_f1, ap, fixed (P/R/F1 at threshold 0.5) and
  curve (thresholds, precision, recall and F1 of the dataset at every grid point, enough
  to redraw the P-R curve). JSON-serialisable; the values are the result's own (not
  copied).
  """
  return {k: result[k] for k in _SUMMARY_KEYS}


#: The fields of an evaluation record (`_record`), in order: eval.json and every
#: epoch_<NNN>.json, whoever wrote them (launch, the periodic evaluation, the runner).
RECORD_FIELDS = (
  'epoch',
  'step',
  'dataset',
  'split',
  'num_images',
  'protocols',
  'params',
  'train_seconds',
  'eval_seconds',
  'first_in_process',
  'results',
)


def member_results(
  names: Sequence[str],
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  plan: EvalPlan,
  *,
  workers: int = 1,
) -> dict[str, dict[str, Any]] | None:
  """Each member's own results on an evaluation of a mixture of datasets (records named
  ``<member>/<name>``, `crackjax.data.mixture`): ``{member: {'num_images', 'results':
  {protocol: summary}}}``; None when the images are not a mixture's."""
  return _by_member(
    names,
    lambda rows: score(
      [probs[i] for i in rows], [gts[i] for i in rows], plan, workers=workers, progress=False
    ),
  )


def _by_member(
  names: Sequence[str], results_of: Callable[[list[int]], dict[str, dict[str, Any]]]
) -> dict[str, dict[str, Any]] | None:
  """`member_results`' form from `results_of(rows)`, the results of the images at `rows`:
  the images grouped by the member their name starts with (None: not a mixture's)."""
  groups: dict[str, list[int]] = {}
  for i, name in enumerate(names):
    member, _ = mixture.member_of_name(name)
    if member is None:
      return None
    groups.setdefault(member, []).append(i)
  return {
    member: {
      'num_images': len(rows),
      'results': {p: protocol_summary(r) for p, r in results_of(rows).items()},
    }
    for member, rows in groups.items()
  }


def with_members(record: dict[str, Any], members: dict[str, dict[str, Any]] | None) -> dict:
  """`record` with its members' results (`member_results`) and the selection score of a
  mixture: the mean over the members of the first protocol's ODS F1, so that every dataset
  counts alike however many images it has (the pooled ``results`` weigh them by pixels)."""
  if not members:
    return record
  protocol = next(iter(record['results']))
  f1s = [m['results'][protocol]['ods']['f1'] for m in members.values()]
  return {
    **record,
    'datasets': members,
    'selection': {
      'metric': f'mean over the datasets of the {protocol} ODS F1',
      'value': float(np.mean(f1s)),
    },
  }


def _state_facts(state: train_state.TrainState) -> tuple[int, int]:
  """The step of `state` and its number of trainable parameters (Tables V-VIII print them;
  BatchNorm statistics are not counted): what an evaluation record says of the state."""
  return int(jax.device_get(state.step)), sum(int(x.size) for x in jax.tree.leaves(state.params))


def _record(
  epoch_of: Callable[[int], int],
  dataset: str,
  facts: tuple[int, int],
  split: str,
  names: Sequence[str],
  results: dict[str, dict[str, Any]],
  *,
  eval_seconds: float,
  train_seconds: float = math.nan,
  first_in_process: bool = False,
  per_image: bool = False,
) -> dict[str, Any]:
  """The one evaluation record: eval.json (with the per-image rows) and epoch_<NNN>.json
  (without) of launch, of the periodic evaluation and of the reproduction runner; `epoch_of`:
  the epoch of a step (`Schedule.epoch_of`).

  Keyed by dataset + split (the directory, `results_dir`, and the fields), step (and its
  epoch) and protocol (``results``). ``train_seconds`` is the wall time since the previous
  evaluation of this process (NaN when no training preceded it); ``first_in_process`` says
  that it includes the process's start-up and compilation.
  """
  step, params = facts  # `_state_facts`
  return {
    'epoch': epoch_of(step),
    'step': step,
    'dataset': dataset,
    'split': split,
    'num_images': len(names),
    'protocols': list(results),
    'params': params,
    'train_seconds': train_seconds,
    'eval_seconds': eval_seconds,
    'first_in_process': first_in_process,
    'results': {
      protocol: {
        **protocol_summary(r),
        **(
          {'per_image': [dict(name=n, **row) for n, row in zip(names, r['per_image'], strict=True)]}
          if per_image
          else {}
        ),
      }
      for protocol, r in results.items()
    },
  }


def write_epoch_record(
  directory: str | Path, record: dict[str, Any], steps_per_epoch: int
) -> Path | None:
  """Writes `record` (without per-image rows) as its epoch's record, atomically; merged with
  an existing record of the same step (its other protocols and its training time kept).
  Only an epoch's last step has an epoch record (a checkpoint saved mid-epoch, e.g. on an
  interrupt, is not an epoch): returns None and writes nothing for any other step."""
  if record['step'] != record['epoch'] * steps_per_epoch:
    return None
  path = identity.epoch_path(directory, record['epoch'])
  path.parent.mkdir(parents=True, exist_ok=True)
  record = {
    **record,
    'results': {
      p: {k: v for k, v in r.items() if k != 'per_image'} for p, r in record['results'].items()
    },
  }
  old = identity.read_record(path, required=('epoch', 'results')) if path.exists() else None
  if old is not None and old.get('step') == record['step']:
    results = {**old['results'], **record['results']}
    record['results'], record['protocols'] = results, list(results)
    if math.isnan(record['train_seconds']):
      record['train_seconds'] = old.get('train_seconds', math.nan)
      record['first_in_process'] = old.get('first_in_process', False)
  identity.write_json(path, record)
  return path


def evaluate_checkpoint(
  experiment: Experiment,
  workdir: str | Path,
  *,
  state: train_state.TrainState | None = None,
  split: str | None = None,
  train_seconds: float = math.nan,
  first_in_process: bool = False,
  operating_points: dict[str, float] | None = None,
  workers: int = 1,
  out: str | Path | None = None,
  overwrite: bool = False,
  examples: Iterable[dict[str, Any]] | None = None,
  num_examples: int | None = None,
) -> dict[str, Any]:
  """Evaluates the experiment's latest checkpoint in `workdir` (or `state`) on the test split
  (or `split`).

  Under every protocol of the experiment's `EvalPlan` it writes, in `results_dir` (the workdir
  for the run's own test split): `eval.json` (the evaluation record, `_record`, with the
  per-image results), the same record as `epoch_<NNN>.json` when the step ends an epoch,
  `eval_per_image.csv` (its rows appended to `eval_per_image.csv.partial` as the photos are
  scored, that file removed once the whole CSV is written), `pr_curve.png`,
  `qualitative.png` (the first `num_qualitative` test images), `threshold.json` (the ODS
  threshold of the protocol that records one, 'strict', for later prediction) and, if
  `save_probability_maps`, `probs/<name>.png`.

  `operating_points` ({name: threshold}) adds, per protocol, P/R/F1 at those thresholds
  (`evaluation.at_threshold`) as ``results[protocol]['operating_points'][name]``;
  `workers`: processes that count the images (`score`). `out`: write there instead of
  `results_dir` (crackjax-evaluate: always beside the run's own results, `other_results_dir`).

  The photos are read, predicted and scored one at a time (`stream_score`: counts kept, maps
  dropped; memory does not grow with the split), from the split's source or from `examples`
  (`loader.eval_examples`' records, e.g. straight from a folder; `num_examples` of them, for
  the progress bar). eval.json is written last: an evaluation interrupted before it leaves
  the folder's earlier eval.json (if any) as it was.

  A step older than the one whose results `results_dir` holds (the newest checkpoint damaged
  and set aside, `checkpoints.restore_latest_readable`) writes its eval.json, threshold.json
  and plots in `step_results_dir` instead, with a warning, so that the run's final results stay
  those of its newest good evaluation; `overwrite` replaces them all the same.

  Returns:
    The evaluation record (also written to eval.json).
  """
  plan, schedule = experiment.eval_plan, experiment.schedule
  workdir = Path(workdir)
  split = split or plan.split
  out = Path(out) if out is not None else results_dir(plan, workdir, split)
  if out != workdir:
    logging.info(
      "Scoring %s/%s, not the data the run was trained for: results in %s (the run's own "
      'eval.json and threshold.json stay as they are).',
      plan.dataset,
      split,
      out,
    )
  if state is None:
    state = experiment.restore(workdir, inference=True)  # no optimiser state needed
  t0 = time.perf_counter()
  facts = _state_facts(state)
  target = out
  newer = newest_evaluated_step(out) if jax.process_index() == 0 else None
  if newer is not None and newer > facts[0] and not overwrite:
    target = step_results_dir(out, facts[0])
    logging.warning(
      'Evaluated step %d, older than step %d, whose results %s holds (its newest checkpoint '
      "is damaged or gone): the results of step %d are in %s; the run's eval.json and "
      'threshold.json stay those of step %d (--overwrite replaces them).',
      facts[0],
      newer,
      out,
      facts[0],
      target,
      newer,
    )
  if examples is None:
    examples, num_examples = experiment.eval_examples(split), len(experiment.source(split))
  scored = stream_score(
    plan,
    experiment.model,
    state,
    examples,
    total=num_examples,
    desc=f'score {split}',
    workers=workers,
    operating_points=operating_points,
    probs_dir=target / 'probs' if plan.save_probability_maps else None,
    rows_path=target / PER_IMAGE_CSV,
  )
  summary = _record(
    schedule.epoch_of,
    plan.dataset,
    facts,
    split,
    scored.names,
    scored.results,
    eval_seconds=time.perf_counter() - t0,
    train_seconds=train_seconds,
    first_in_process=first_in_process,
    per_image=True,
  )
  summary = with_members(summary, scored.members)
  _add_points(summary, scored.points)
  if jax.process_index() == 0:
    images, gts, probs = scored.first
    hparams = experiment.hparams
    write_eval_outputs(
      plan,
      target,
      summary,
      scored.results,
      images,
      probs,
      gts,
      scored.names,
      hparams,
      probs_saved=True,
    )
    # The epoch record is that step's own (epoch_<NNN>.json), beside the others.
    write_epoch_record(out, summary, schedule.steps_per_epoch)
  return summary


def evaluate_state(
  experiment: Experiment,
  state: train_state.TrainState,
  out: str | Path,
  *,
  operating_points: dict[str, float] | None = None,
  extra: dict[str, Any] | None = None,
  desc: str = 'predict',
) -> dict[str, Any]:
  """Scores `state`, parameters that are no checkpoint of the run (e.g. the model file a
  fine-tuning starts from, `trainer.before_after`), on the experiment's test split under every
  protocol of its `EvalPlan`, and writes that evaluation's files in `out` (eval.json with the
  per-image rows and `extra`'s keys, eval_per_image.csv, the plots, threshold.json), as
  `evaluate_checkpoint` does, but no epoch record and nothing of the run's own results.
  `operating_points` as `evaluate_checkpoint`'s. Returns the record."""
  plan = experiment.eval_plan
  t0 = time.perf_counter()
  scored = stream_score(
    plan,
    experiment.model,
    state,
    experiment.eval_examples(plan.split),
    total=len(experiment.source(plan.split)),
    desc=desc,
    operating_points=operating_points,
    probs_dir=Path(out) / 'probs' if plan.save_probability_maps else None,
    rows_path=Path(out) / PER_IMAGE_CSV,
  )
  summary = _record(
    experiment.schedule.epoch_of,
    plan.dataset,
    _state_facts(state),
    plan.split,
    scored.names,
    scored.results,
    eval_seconds=time.perf_counter() - t0,
    per_image=True,
  )
  summary.update(extra or {})
  _add_points(summary, scored.points)
  if jax.process_index() == 0:
    images, gts, probs = scored.first
    write_eval_outputs(
      plan, Path(out), summary, scored.results, images, probs, gts, scored.names, probs_saved=True
    )
  return summary


def _add_points(summary: dict[str, Any], points: dict[str, dict[str, dict[str, float]]]) -> None:
  """Each protocol's operating points (`StreamScorer.results`) into its results, if any."""
  for protocol, result in summary['results'].items():
    for name, point in points.get(protocol, {}).items():
      result.setdefault('operating_points', {})[name] = point


def step_results_dir(directory: str | Path, step: int) -> Path:
  """``<directory>/eval/step_<step>``: where an evaluation of a step older than the results
  of `directory` goes (`evaluate_checkpoint`)."""
  return Path(directory) / 'eval' / f'step_{step}'


def newest_evaluated_step(directory: str | Path) -> int | None:
  """The step whose evaluation `directory`'s eval.json or threshold.json records (the newer
  of the two), or None: neither is there or readable (a damaged one is replaced as before)."""
  steps = []
  for name in ('eval.json', 'threshold.json'):
    try:
      step = json.loads((Path(directory) / name).read_text()).get('step')
    except (OSError, ValueError, AttributeError):
      continue
    if isinstance(step, int) and not isinstance(step, bool):
      steps.append(step)
  return max(steps, default=None)


class EpochEvaluator:
  """The periodic evaluation of the run's `Schedule` (``eval_every_epochs``; a periodic
  action, as clu's): after every N-th epoch (and the last) it scores the test split and writes
  the epoch's record (`_record`, `write_epoch_record`) in the run's results directory.

  At the epochs of ``full_eval_epochs`` and the last one it scores every protocol of the
  `EvalPlan`; at the others those of its ``curve_protocols`` (default the same), a cheaper set
  for F1-against-epoch curves. The test images are read once.

  By default (``background_workers`` = 0) an epoch is scored in the loop as
  `evaluate_checkpoint` scores (`stream_score`: each map counted and dropped), so memory does
  not grow with the test split's maps. With the plan's ``background_workers`` = N >= 1 the
  maps are predicted in the training loop (the accelerator's work; the next step donates the
  state) and held until a background thread has scored them, the tolerance protocols
  counting on N processes, while the next epoch trains: the metrics are numpy and scipy work
  on the host, which the accelerator need not wait for. Both write the same record to the
  last bit. At most one epoch is in flight (the next evaluation first waits for it), so a
  process killed mid-training loses at most the newest epoch's record, which the next run
  redoes from its checkpoint (`missing`); `finish` waits for it at the end of training.
  """

  def __init__(self, experiment: Experiment, workdir: str | Path):
    self.experiment = experiment
    self.plan, self.schedule = experiment.eval_plan, experiment.schedule
    self.split = self.plan.split
    self.directory = results_dir(self.plan, workdir, self.split)
    self._examples: list[dict[str, Any]] | None = None
    self._clock, self._first = time.perf_counter(), True
    self._workers = self.plan.background_workers
    self._executor: concurrent.futures.ThreadPoolExecutor | None = None
    self._pending: tuple[int, concurrent.futures.Future] | None = None

  def due(self, epoch: int) -> bool:
    return self.schedule.evaluates(epoch)

  def protocols_at(self, epoch: int) -> tuple[str, ...]:
    curve = self.plan.curve_protocols
    if not curve or self.schedule.full_at(epoch):
      return self.plan.protocols
    return curve

  def missing(self, step: int) -> int | None:
    """The epoch that `step` ends if it is due and has no whole record (a process that died
    while evaluating it), else None."""
    spe = self.schedule.steps_per_epoch
    if not step or step % spe or not self.due(step // spe):
      return None
    epoch = step // spe
    done = identity.evaluated_epochs(self.directory, required=self.protocols_at(epoch))
    return None if epoch in done else epoch

  def __call__(
    self, state: train_state.TrainState, epoch: int, *, trained: bool = True
  ) -> dict[str, Any] | None:
    """Scores `state` (the end of `epoch`), writes and returns its record (None while it is
    scored in the background). `trained`: whether the time since the last call was spent
    training (else its train_seconds is NaN). The training time of the next call is counted
    from the end of this one."""
    train_seconds = time.perf_counter() - self._clock if trained else math.nan
    self.finish()  # the previous epoch's record first: at most one epoch in flight
    t0 = time.perf_counter()
    if self._examples is None:
      self._examples = list(self.experiment.eval_examples(self.split))
    scoring = self.plan.with_protocols(self.protocols_at(epoch))
    names = [ex['name'] for ex in self._examples]
    first = self._first
    self._first = self._first and not trained
    facts = _state_facts(state)  # now: the next train step may donate the state's buffers

    def record_of(
      results: dict[str, dict[str, Any]],
      members: dict[str, dict[str, Any]] | None,
      shown: tuple[Sequence[np.ndarray], Sequence[np.ndarray], Sequence[np.ndarray]],
    ) -> dict[str, Any]:
      """The epoch's record, written; `shown`: (images, ground truths, maps), the first
      ``num_qualitative`` at least, for TensorBoard's panels."""
      record = _record(
        self.schedule.epoch_of,
        self.plan.dataset,
        facts,
        self.split,
        names,
        results,
        eval_seconds=time.perf_counter() - t0,
        train_seconds=train_seconds,
        first_in_process=first,
      )
      record = with_members(record, members)
      self._write(record, epoch)
      if jax.process_index() == 0:
        self._write_tensorboard(record, results, *shown)
      return record

    if not self._workers:
      # In the loop: streamed as `evaluate_checkpoint` scores (counts kept, maps dropped), so
      # memory does not grow with the test split; the same record to the last bit.
      model, desc = self.experiment.model, f'score, epoch {epoch}'
      scored = stream_score(scoring, model, state, self._examples, total=len(names), desc=desc)
      record = record_of(scored.results, scored.members, scored.first)
      self._clock = time.perf_counter()
      return record
    # Beside training: the maps are predicted now (the next train step donates the state's
    # buffers) and held until the background thread has scored them: one epoch's at most.
    probs = predict_examples(
      self.experiment.model, state, self._examples, desc=f'predict, epoch {epoch}'
    )
    gts = [ex['mask'][..., 0] for ex in self._examples]
    images = [ex['image'] for ex in self._examples]

    def job() -> dict[str, Any]:
      results = score(probs, gts, scoring, workers=self._workers, progress=False)
      members = member_results(names, probs, gts, scoring, workers=self._workers)
      return record_of(results, members, (images, gts, probs))

    if self._executor is None:
      self._executor = concurrent.futures.ThreadPoolExecutor(1, 'crackjax-eval')
    self._pending = (epoch, self._executor.submit(job))
    self._clock = time.perf_counter()
    return None

  def _write(self, record: dict[str, Any], epoch: int) -> None:
    if jax.process_index() == 0:
      write_epoch_record(self.directory, record, self.schedule.steps_per_epoch)
    first = next(iter(record['results'].values()))
    seconds = record['train_seconds']
    logging.info(
      'Epoch %d: %s, %.1f s evaluation%s, ODS F1 %.4f (%s protocol).',
      epoch,
      # NaN: evaluated later from its checkpoint, as the runner's line says (paper/jobs.py).
      f'{seconds:.1f} s training'
      if math.isfinite(seconds)
      else 'training time not measured (evaluated later from its checkpoint)',
      record['eval_seconds'],
      ' (scored beside training)' if self._workers else '',
      first['ods']['f1'],
      first['protocol'],
    )

  def _write_tensorboard(self, record, results, images, gts, probs) -> None:
    """The epoch's scalars (as the final evaluation's: an F1-against-epoch curve), PR curves,
    qualitative panels (of the first `images`, `gts`, `probs`) and the run's hyper-parameters,
    to TensorBoard and metrics.jsonl."""
    writer = MetricWriter(self.directory)
    try:
      for protocol, r in results.items():
        writer.write_scalars(record['step'], _eval_scalars(r), kind=f'eval_{self.split}_{protocol}')
      threshold = mask_threshold(results)
      hparams = self.experiment.hparams
      write_tensorboard_extras(
        writer, self.plan, record, results, images, probs, gts, threshold, hparams
      )
    finally:
      writer.close()

  def finish(self) -> dict[str, Any] | None:
    """Waits for the epoch scored in the background, if any, and returns its record (written
    when its scoring ended); an error of that scoring is raised here."""
    if self._pending is None:
      return None
    _, future = self._pending
    self._pending = None
    return future.result()

  def close(self) -> None:
    """`finish`, then stops the background thread."""
    try:
      self.finish()
    finally:
      if self._executor is not None:
        self._executor.shutdown()
        self._executor = None

  def seconds_since_last(self) -> float:
    """Wall seconds since the last evaluation (or the start): the training time before it."""
    return time.perf_counter() - self._clock

  @property
  def first(self) -> bool:
    """Whether no evaluation of this process has counted training time yet."""
    return self._first


@dataclasses.dataclass
class Streamed:
  """What `stream_score` keeps of a split: the names in order, `score`'s results, the
  operating points ({protocol: {name: P/R/F1}}), the members' results of a mixture
  (`member_results`' form, or None) and the first ``plan.num_qualitative`` (images, ground
  truths, maps) for the figures. No other map."""

  names: list[str]
  results: dict[str, dict[str, Any]]
  points: dict[str, dict[str, dict[str, float]]]
  members: dict[str, dict[str, Any]] | None
  first: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]


def read_ahead(items: Iterable[Any], size: int = 2) -> Iterator[Any]:
  """`items` read by a background thread, up to `size` ahead (decoding the next photo while
  this one is predicted); an error of `items` is raised here, at the item it belongs to.
  Closing the generator stops the thread after the item it is reading."""
  slots: queue.Queue = queue.Queue(maxsize=size)
  stop = threading.Event()
  end = object()

  def put(item: Any) -> bool:
    while not stop.is_set():
      try:
        slots.put(item, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def produce() -> None:
    try:
      for item in items:
        if not put((item, None)):
          return
    except BaseException as e:  # noqa: BLE001 - handed to the consumer
      put((end, e))
      return
    put((end, None))

  thread = threading.Thread(target=produce, name='crackjax-read-ahead', daemon=True)
  thread.start()
  try:
    while True:
      item, error = slots.get()
      if error is not None:
        raise error
      if item is end:
        return
      yield item
  finally:
    stop.set()
    thread.join()


def stream_score(
  plan: EvalPlan,
  model: nn.Module,
  state: train_state.TrainState,
  examples: Iterable[dict[str, Any]],
  *,
  total: int | None = None,
  desc: str = 'score',
  workers: int = 1,
  operating_points: dict[str, float] | None = None,
  probs_dir: Path | None = None,
  rows_path: Path | None = None,
) -> Streamed:
  """Predicts and scores `examples` (`loader.eval_examples`' records) one at a time under
  every protocol of `plan`: the results of `score` (and of `member_results`,
  `evaluation.at_threshold` at `operating_points`) on the same images, to the last bit, with
  memory that does not grow with their number (`evaluation.streaming.StreamScorer`: counts
  kept, maps dropped). The next photo is read while one is predicted (`read_ahead`), and the
  tolerance protocols count on `workers` processes while the next ones are predicted. One
  progress bar (process 0, stderr): photos scored, photos/s and the time left of `total`.
  `probs_dir`: each map written there as it comes (`plots.save_probability_maps`), on
  process 0. `rows_path`: the evaluation's eval_per_image.csv, whose rows are appended to
  ``<rows_path>.partial`` as each photo is scored (`plots.PerImageRows`, process 0), until
  `write_eval_outputs` writes the whole CSV.

  Raises:
    ValueError: no example (`evaluate`'s 'no images to evaluate'), or a bad map.
  """
  params = train_state.local_params(state)
  batch_stats = train_state.local_batch_stats(state)  # BatchNorm's running averages, or None
  keep = plan.num_qualitative
  names: list[str] = []
  first: tuple[list, list, list] = ([], [], [])
  main = jax.process_index() == 0
  grids = {p: plan.thresholds_of(p) for p in plan.protocols}
  rows = plots.PerImageRows(rows_path, plan.protocols) if rows_path and main else None
  with (
    rows or contextlib.nullcontext(),
    tqdm.tqdm(total=total, desc=desc, unit='photo', disable=not main) as bar,
    StreamScorer(
      grids,
      tail_thresholds=plan.tail_thresholds,
      operating_points=operating_points,
      workers=workers,
      progress=bar.update,
      on_image=(lambda i, scores: rows.add(names[i], scores)) if rows else None,
    ) as scorer,
  ):
    reading = read_ahead(examples)
    try:
      for ex in reading:
        [prob] = predict_probabilities(params, model, [ex['image']], batch_stats=batch_stats)
        gt = ex['mask'][..., 0]
        names.append(ex['name'])  # first: `add` may hand its counts to `on_image` at once
        scorer.add(prob, gt)
        if len(first[0]) < keep:
          for kept, x in zip(first, (ex['image'], gt, prob), strict=True):
            kept.append(x)
        if probs_dir is not None and main:
          plots.save_probability_maps(probs_dir, [prob], [ex['name']])
    finally:
      reading.close()
    if not names:
      raise ValueError('no images to evaluate')
    results, points = scorer.results()
    members = _members_of(names, scorer)
  return Streamed(names, results, points, members, first)


def _members_of(names: Sequence[str], scorer: StreamScorer) -> dict[str, dict[str, Any]] | None:
  """`member_results` from the counts a `StreamScorer` kept."""
  return _by_member(names, lambda rows: scorer.results(rows)[0])


def _data_key(data: Any, split: str) -> dict[str, Any]:
  # What makes two evaluations score the same images: the dataset, its folders (for
  # crack_folder) and the split; not where the prepared copy lives (`EvalPlan.data_key`).
  data = json.loads(json.dumps(dict(data), default=str))
  return {'name': data.get('name'), 'folder': data.get('folder'), 'split': split}


def results_dir(plan: EvalPlan, workdir: str | Path, split: str) -> Path:
  """Where an evaluation of `plan`'s data `split` is written: the workdir itself for the
  test split of the data the run was trained on (its config.json), else
  ``<workdir>/eval/<dataset>_<split>`` (plus a short hash of the folders for crack_folder),
  so that scoring a run elsewhere never replaces its own results or its threshold.json."""
  workdir = Path(workdir)
  recorded = workdir / 'config.json'
  if not recorded.is_file():
    return workdir
  own = json.loads(recorded.read_text()).get('data', {})
  if _data_key(own, own.get('test_split', 'test')) == plan.data_key(split):
    return workdir
  return other_results_dir(plan, workdir, split)


def other_results_dir(plan: EvalPlan, workdir: str | Path, split: str) -> Path:
  """``<workdir>/eval/<dataset>_<split>`` (plus a short hash of the folders for crack_folder):
  where an evaluation beside the run's own results goes."""
  name = f'{plan.dataset}_{split}'
  if plan.dataset == 'crack_folder':
    key = plan.data_key(split)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    name = f'{name}_{digest}'
  return Path(workdir) / 'eval' / name


def predict_examples(
  model: nn.Module,
  state: train_state.TrainState,
  examples: Sequence[dict[str, Any]],
  *,
  desc: str = 'predict',
) -> list[np.ndarray]:
  """The crack probability map of every example's image (`loader.eval_examples` records),
  predicted by `model` with `state`'s parameters, with a progress bar on process 0."""
  params = train_state.local_params(state)
  batch_stats = train_state.local_batch_stats(state)  # BatchNorm's running averages, or None
  images = (ex['image'] for ex in examples)
  return list(
    tqdm.tqdm(
      predict_probabilities(params, model, images, batch_stats=batch_stats),
      total=len(examples),
      desc=desc,
      unit='img',
      disable=jax.process_index() != 0,
    )
  )


def mask_threshold(results: dict[str, dict[str, Any]]) -> float:
  """The ODS threshold of the first protocol that records one (threshold.json's), else 0.5:
  the threshold of the qualitative figures."""
  for protocol, r in results.items():
    if evaluation.get_protocol(protocol).writes_threshold_file:
      return r['ods']['threshold']
  return 0.5


def _write_threshold(workdir: Path, results: dict[str, dict[str, Any]], summary) -> float:
  """Writes threshold.json from the first protocol that records one; returns the threshold."""
  for protocol, r in results.items():
    spec = evaluation.get_protocol(protocol)
    if spec.writes_threshold_file:
      threshold = r['ods']['threshold']
      # Atomic, as every record: crackjax-predict reads it (without the lock) at any time.
      identity.write_json(
        workdir / 'threshold.json',
        {
          'threshold': threshold,
          'rule': spec.threshold_rule,
          'chosen_by': f'ODS F1 on the {summary["split"]} split, {protocol} protocol',
          'dataset': summary['dataset'],
          'split': summary['split'],
          'step': summary['step'],
        },
      )
      return threshold
  return 0.5  # No protocol gives a mask threshold: show the qualitative figure at 0.5.


def _eval_scalars(r: dict[str, Any]) -> dict[str, float]:
  """The scalars of one protocol's result (TensorBoard and metrics.jsonl)."""
  return {
    'ods_f1': r['ods']['f1'],
    'ods_precision': r['ods']['precision'],
    'ods_recall': r['ods']['recall'],
    'ois_f1': r['ois']['f1'],
    'ap': r['ap'],
    'fixed_f1': r['fixed']['f1'],
    'fixed_precision': r['fixed']['precision'],
    'fixed_recall': r['fixed']['recall'],
  }


def write_tensorboard_extras(
  writer: MetricWriter,
  plan: EvalPlan,
  record: dict[str, Any],
  results: dict[str, dict[str, Any]],
  images: Sequence[np.ndarray],
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  threshold: float,
  hparams: dict[str, Any] | None,
) -> None:
  """One evaluation's TensorBoard beyond scalars (`MetricWriter.write_evaluation`): each
  protocol's PR curve, the first ``plan.num_qualitative`` images as image | ground truth |
  probability | overlay at `threshold` panels, and the run's hyper-parameters."""
  kind = f'eval_{record["split"]}'
  curves = {f'{kind}_{p}/pr_curve': r['curve'] for p, r in results.items()}
  k = min(plan.num_qualitative, len(images))
  panels = [
    (f'{kind}/qualitative_{i}', plots.qualitative_panel(images[i], gts[i], probs[i], threshold))
    for i in range(k)
  ]
  metrics = [f'{kind}_{p}/{m}' for p in results for m in ('ods_f1', 'ois_f1', 'ap')]
  flat = metric_writer.flat_hparams(hparams) if hparams else None
  writer.write_evaluation(
    record['step'], curves=curves, panels=panels, hparams=flat, metrics=metrics
  )


def write_eval_outputs(
  plan: EvalPlan,
  workdir: Path,
  summary: dict[str, Any],
  results: dict[str, dict[str, Any]],
  images: Sequence[np.ndarray],
  probs: Sequence[np.ndarray],
  gts: Sequence[np.ndarray],
  names: Sequence[str],
  hparams: dict[str, Any] | None = None,
  *,
  probs_saved: bool = False,
) -> None:
  """threshold.json, the CSV, the plots, optional maps and the eval scalars, TensorBoard's PR
  curves, qualitative panels and `hparams` (the run's config as plain data;
  `write_tensorboard_extras`), and eval.json last, so that an eval.json there is a whole
  evaluation's. `images`, `probs` and `gts` may be the first ``plan.num_qualitative`` only
  (with their `names`) when `probs_saved` (the maps already written as they came)."""
  workdir.mkdir(parents=True, exist_ok=True)
  step, split = summary['step'], summary['split']
  threshold = _write_threshold(workdir, results, summary)
  plots.write_per_image_csv(workdir / PER_IMAGE_CSV, names, results)
  title = f'{plan.dataset} {split}, step {step}'
  plots.plot_pr_curves(workdir / 'pr_curve.png', results, title)
  k = min(plan.num_qualitative, len(images))
  if k:
    plots.plot_qualitative(
      workdir / 'qualitative.png',
      images[:k],
      gts[:k],
      probs[:k],
      names[:k],
      threshold,
      f'{title}; prediction at the strict ODS threshold',
    )
  if plan.save_probability_maps and not probs_saved:
    plots.save_probability_maps(workdir / 'probs', probs, names)
  writer = MetricWriter(workdir)
  write_tensorboard_extras(writer, plan, summary, results, images, probs, gts, threshold, hparams)
  for protocol, r in results.items():
    writer.write_scalars(step, _eval_scalars(r), kind=f'eval_{split}_{protocol}')
    logging.info(
      'Eval (%s protocol) at step %d: ODS F1 %.4f (t=%.4g, P %.4f, R %.4f), OIS F1 %.4f, '
      'AP %.4f, F1 %.4f at t=%g (P %.4f, R %.4f)',
      protocol,
      step,
      r['ods']['f1'],
      r['ods']['threshold'],
      r['ods']['precision'],
      r['ods']['recall'],
      r['ois']['f1'],
      r['ap'],
      r['fixed']['f1'],
      r['fixed']['threshold'],
      r['fixed']['precision'],
      r['fixed']['recall'],
    )
  writer.close()
  identity.write_json(workdir / 'eval.json', summary)
