"""Training and evaluation of crack segmentation models.

The structure follows the flax examples: `create_train_state`, a pure `train_step` and
`eval_step`, and `train_and_evaluate` / `evaluate_checkpoint` that own the loop, the
checkpoints and the logs.

Parallelism is data-parallel SPMD with `jax.jit` over a 1-D `Mesh` of every device of
every process (axis 'data'). Parameters and optimizer state are replicated, the batch is
sharded along its first axis. Because the loss (and so alpha, the background ratio of
the minority weight q) is computed on the global batch array, one process with one
device, one process with N devices and several processes after
`jax.distributed.initialize()` run the same computation.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import json
import queue
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import tqdm
from absl import logging
from flax.training import train_state as flax_train_state
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from crackjax import eval_report, evaluation, input_pipeline, losses
from crackjax.metrics_log import MetricWriter
from crackjax.models import model_from_config

TrainState = flax_train_state.TrainState


class NonFiniteError(FloatingPointError):
  """Raised when training produced a non-finite loss or gradient."""


# ----------------------------------------------------------------------------- setup


def make_mesh() -> Mesh:
  """A 1-D mesh over all devices of all processes, ordered by process.

  `jax.devices()` lists the devices of process 0 first, then process 1, ...; keeping that
  order makes each process's devices a contiguous block of the batch axis, so the rows a
  process loads (see `input_pipeline.create_train_iterator`) land on its own devices.
  """
  return Mesh(np.asarray(jax.devices()), ('data',))


def create_model(config: ml_collections.ConfigDict):
  return model_from_config(config)


def create_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  return optax.adam(config.learning_rate)


def create_train_state(config: ml_collections.ConfigDict, rng: jax.Array,
                       input_shape: tuple[int, int, int]) -> TrainState:
  """Initialises parameters and Adam state for images of shape (H, W, C).

  Args:
    config: reads model, widths, learning_rate.
    rng: PRNG key for the parameters.
    input_shape: (H, W, C) of one training image.

  Returns:
    A TrainState at step 0.
  """
  model = create_model(config)
  params = model.init(rng, jnp.zeros((1, *input_shape), jnp.float32))['params']
  return TrainState.create(apply_fn=model.apply, params=params, tx=create_optimizer(config))


def _init_key(seed: int) -> jax.Array:
  # The RBG generator compiles the ~20 initialiser calls of a U-Net in a few seconds
  # where threefry takes half a minute on the CPU; its output is deterministic per seed.
  return jax.random.key(seed, impl='rbg')


def loss_kwargs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The keyword arguments of `losses.holistic_loss` from `config.loss`."""
  lc = config.loss
  if lc.weighting not in losses.WEIGHTINGS:
    raise ValueError(f'config.loss.weighting={lc.weighting!r} is not one of '
                     f'{sorted(losses.WEIGHTINGS)}.')
  return dict(weighting=lc.weighting, a=lc.a, b=lc.b, beta=lc.beta, gamma=lc.gamma,
              base=lc.base, smooth=lc.jaccard_smooth)


# ----------------------------------------------------------------------------- steps


def train_step(state: TrainState, batch: Mapping[str, jax.Array], *,
               config: ml_collections.ConfigDict) -> tuple[TrainState, dict[str, jax.Array]]:
  """One optimisation step on a global batch.

  Augmentation runs here, on device, keyed by the step number so a resumed run draws the
  same transforms. If the loss or the gradient is not finite the update is skipped (the
  state keeps its last good parameters) and `metrics['finite']` is 0; the host loop turns
  that into a NonFiniteError.

  Args:
    state: replicated TrainState.
    batch: {'image': [B, H, W, 3], 'mask': [B, H, W, 1]} sharded along B.
    config: static configuration (loss, augmentation, seed).

  Returns:
    The new state and scalar metrics: loss, q, alpha, grad_norm, finite.
  """
  rng = jax.random.fold_in(jax.random.key(config.seed), state.step)
  image, mask = input_pipeline.augment_from_config(rng, batch['image'], batch['mask'], config)
  kwargs = loss_kwargs(config)

  def loss_fn(params):
    logits = state.apply_fn({'params': params}, image)
    return losses.holistic_loss(logits, mask, **kwargs)

  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  grad_norm = optax.tree_utils.tree_norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  new_state = state.apply_gradients(grads=grads)
  # Keep the old state on a non-finite step: the run stops at the next check, and the
  # parameters it could still save are the last good ones.
  new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
  alpha = losses.background_ratio(mask)
  metrics = {
      'loss': loss,
      'grad_norm': grad_norm,
      'alpha': alpha,
      'q': losses.minority_weight(mask, kwargs['weighting'], beta=kwargs['beta'],
                                  gamma=kwargs['gamma'], base=kwargs['base']),
      'finite': finite.astype(jnp.float32),
  }
  return new_state, metrics


def eval_step(params: Any, images: jax.Array, *, apply_fn) -> jax.Array:
  """Crack probabilities [B, H, W, 1] for images [B, H, W, 3]."""
  return jax.nn.sigmoid(apply_fn({'params': params}, images))


def make_train_step(config: ml_collections.ConfigDict, mesh: Mesh, state: TrainState):
  """Jits `train_step` with replicated state, a data-sharded batch and a donated state."""
  replicated = NamedSharding(mesh, P())
  state_sharding = jax.tree.map(lambda _: replicated, state)
  batch_sharding = NamedSharding(mesh, P('data'))
  return jax.jit(
      functools.partial(train_step, config=config),
      in_shardings=(state_sharding, batch_sharding),
      out_shardings=(state_sharding, replicated),
      donate_argnums=(0,),
  )


def global_batch(local: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Assembles the per-process numpy batches into global arrays sharded along 'data'."""
  sharding = NamedSharding(mesh, P('data'))
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}


class _ProducerError:
  def __init__(self, error: BaseException):
    self.error = error


def prefetch_to_device(batches: Iterator[Mapping[str, np.ndarray]], mesh: Mesh,
                       size: int = 2) -> Iterator[dict[str, jax.Array]]:
  """Yields `global_batch(b, mesh)` for b in `batches`, up to `size` batches ahead.

  A background thread reads the host batches and transfers them to the devices while the
  current step runs, so the step never waits for input. An exception raised by `batches`
  (e.g. a corrupt image) is re-raised here, at the batch it belongs to.
  """
  if size < 1:
    raise ValueError(f'prefetch size must be >= 1, got {size}')
  items: queue.Queue = queue.Queue(maxsize=size)
  stop = threading.Event()
  end = object()

  def put(item) -> bool:
    while not stop.is_set():
      try:
        items.put(item, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def produce() -> None:
    try:
      for local in batches:
        if not put(global_batch(local, mesh)):
          return
    except BaseException as e:  # handed to the consumer, which raises it
      put(_ProducerError(e))
    else:
      put(end)

  thread = threading.Thread(target=produce, name='prefetch_to_device', daemon=True)
  thread.start()
  try:
    while True:
      item = items.get()
      if item is end:
        return
      if isinstance(item, _ProducerError):
        raise item.error
      yield item
  finally:
    stop.set()


def release_freed_host_memory() -> None:
  """Returns heap memory that glibc keeps after XLA's compiler frees it (no-op elsewhere).

  Compiling the U-Net's train step on the CPU leaves 0.2-0.5 GB of freed compiler memory
  in the process's heap arenas; the step's own buffers are then allocated on top of it,
  raising peak RSS by that much (docs/performance.md). malloc_trim hands it back.
  """
  if sys.platform != 'linux':
    return
  try:
    ctypes.CDLL('libc.so.6').malloc_trim(0)
  except (OSError, AttributeError):  # not glibc
    pass


# ----------------------------------------------------------------------------- checkpoints


def checkpoint_manager(workdir: str | Path, config: ml_collections.ConfigDict
                       ) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=config.max_checkpoints_to_keep,
                                         create=True)
  return ocp.CheckpointManager(Path(workdir).absolute() / 'checkpoints', options=options)


def _abstract_state(config: ml_collections.ConfigDict, input_shape, mesh: Mesh) -> TrainState:
  replicated = NamedSharding(mesh, P())
  abstract = jax.eval_shape(
      functools.partial(create_train_state, config, input_shape=input_shape),
      _init_key(config.seed))
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), abstract)


def _init_state(config: ml_collections.ConfigDict, input_shape, mesh: Mesh) -> TrainState:
  replicated = NamedSharding(mesh, P())
  init = jax.jit(functools.partial(create_train_state, config, input_shape=input_shape),
                 out_shardings=replicated)
  return init(_init_key(config.seed))


def restore_or_init(config: ml_collections.ConfigDict, mngr: ocp.CheckpointManager,
                    input_shape: tuple[int, int, int], mesh: Mesh) -> TrainState:
  """The latest checkpoint of `mngr` if there is one, else a freshly initialised state."""
  step = mngr.latest_step()
  if step is None:
    return _init_state(config, input_shape, mesh)
  logging.info('Restoring checkpoint of step %d from %s', step, mngr.directory)
  abstract = _abstract_state(config, input_shape, mesh)
  return mngr.restore(step, args=ocp.args.StandardRestore(abstract))


def _input_shape(config: ml_collections.ConfigDict) -> tuple[int, int, int]:
  """(H, W, 3) of the training images: config.input_size or the first train image."""
  if config.input_size is not None:
    h, w = config.input_size
    return int(h), int(w), 3
  source = input_pipeline.get_data_source(config, config.train_split)
  h, w = np.asarray(source[0]['image']).shape[:2]
  return int(h), int(w), 3


# ----------------------------------------------------------------------------- loops


def _check_config(config: ml_collections.ConfigDict) -> None:
  loss_kwargs(config)
  n = jax.device_count()
  if config.batch_size % n:
    raise ValueError(f'config.batch_size={config.batch_size} must be divisible by the '
                     f'number of devices ({n}): the batch is split evenly over them.')


def _fetch_metrics(pending: list[tuple[int, dict[str, jax.Array]]]) -> list[tuple[int, dict]]:
  """Brings buffered per-step metrics to the host in one transfer."""
  steps = [s for s, _ in pending]
  values = jax.device_get([m for _, m in pending])
  return list(zip(steps, values, strict=True))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path,
                       *, evaluate_after: bool = True) -> TrainState:
  """Trains `config` in `workdir`, resuming from its latest checkpoint if there is one.

  Saves a checkpoint at the end of every epoch and when the loop exits early (an
  exception other than a non-finite loss, e.g. KeyboardInterrupt or SIGTERM turned into
  SystemExit). A non-finite loss or gradient raises NonFiniteError without saving, so
  the last checkpoint on disk is the last good one.

  Args:
    config: experiment configuration (see configs/base.py).
    workdir: directory for checkpoints, logs and evaluation results.
    evaluate_after: run `evaluate_checkpoint` on the test split after training.

  Returns:
    The final TrainState.
  """
  workdir = Path(workdir)
  _check_config(config)
  mesh = make_mesh()
  input_shape = _input_shape(config)
  mngr = checkpoint_manager(workdir, config)
  state = restore_or_init(config, mngr, input_shape, mesh)
  start_step = int(jax.device_get(state.step))
  total_steps = config.num_epochs * config.steps_per_epoch
  writer = MetricWriter(workdir)
  if jax.process_index() == 0:
    (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2))
  if start_step:
    logging.info('Resuming at step %d of %d.', start_step, total_steps)

  step_fn = make_train_step(config, mesh, state)
  # Exactly the batches of the remaining steps, so the read-ahead stops at the last one.
  batches = prefetch_to_device(itertools.islice(
      input_pipeline.create_train_iterator(config, start_step=start_step),
      max(total_steps - start_step, 0)), mesh)
  pending: list[tuple[int, dict]] = []
  saved_step = start_step if mngr.latest_step() == start_step else None
  step = start_step
  bar = tqdm.tqdm(total=total_steps, initial=start_step, unit='step', dynamic_ncols=True,
                  disable=jax.process_index() != 0, desc='train')
  t0 = time.time()

  def flush_metrics() -> None:
    nonlocal t0
    if not pending:
      return
    fetched = _fetch_metrics(pending)
    pending.clear()
    for s, m in fetched:
      if not m['finite']:
        raise NonFiniteError(
            f'Non-finite loss or gradient at step {s} (loss={m["loss"]}, grad_norm='
            f'{m["grad_norm"]}); stopping. The last good checkpoint is step '
            f'{mngr.latest_step()} in {mngr.directory}.')
    means = {k: float(np.mean([m[k] for _, m in fetched])) for k in ('loss', 'grad_norm', 'q')}
    now = time.time()
    means['steps_per_sec'] = len(fetched) / max(now - t0, 1e-9)
    t0 = now
    writer.write_scalars(fetched[-1][0], means)
    bar.set_postfix(loss=f'{means["loss"]:.4f}', q=f'{means["q"]:.2f}')

  try:
    while step < total_steps:
      state, metrics = step_fn(state, next(batches))
      if step == start_step:  # the first call compiled the step
        release_freed_host_memory()
      step += 1
      pending.append((step, metrics))
      bar.update(1)
      if step % config.log_every_steps == 0:
        flush_metrics()
      if step % config.steps_per_epoch == 0 or step == total_steps:
        flush_metrics()  # never checkpoint a state that followed a non-finite step
        mngr.save(step, args=ocp.args.StandardSave(state))
        saved_step = step
  except NonFiniteError:
    raise
  except BaseException:
    # Interrupted (Ctrl-C, SIGTERM, an input error): keep the progress made so far if the
    # buffered metrics show it is finite; resume will continue from here.
    try:
      flush_metrics()
      if saved_step != step:
        logging.warning('Saving checkpoint of step %d before exiting.', step)
        mngr.save(step, args=ocp.args.StandardSave(state), force=True)
    except NonFiniteError:
      pass
    raise
  finally:
    batches.close()  # stops the prefetch thread
    bar.close()
    mngr.wait_until_finished()
    writer.close()
  if evaluate_after:
    evaluate_checkpoint(config, workdir, state=state)
  return state


def predict_probabilities(params: Any, config: ml_collections.ConfigDict,
                          images: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
  """Crack probability maps [H, W] for images [H, W, 3] of any size.

  Each image is edge-padded to a multiple of the network's stride and the prediction
  cropped back, so sizes need not be multiples of 16.
  """
  model = create_model(config)
  stride = 2 ** (len(config.widths) - 1)
  apply = jax.jit(functools.partial(eval_step, apply_fn=model.apply))
  for image in images:
    h, w = image.shape[:2]
    ph, pw = -h % stride, -w % stride
    padded = np.pad(image, ((0, ph), (0, pw), (0, 0)), mode='edge')
    prob = apply(params, padded[None])[0, :h, :w, 0]
    yield np.asarray(prob)


def _local_params(state: TrainState) -> Any:
  # Replicated arrays may span other processes' devices; every process holds a full copy
  # on each of its devices, so take the first local one.
  return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), state.params)


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str | Path, *,
                        state: TrainState | None = None,
                        split: str | None = None) -> dict[str, Any]:
  """Evaluates the latest checkpoint (or `state`) on the test split.

  Under every protocol of `config.eval_protocols` (see crackjax/evaluation.py) it writes,
  in `workdir`: `eval.json` (ODS/OIS/AP per protocol, each named, and per-image results),
  `eval_per_image.csv`, `pr_curve.png`, `qualitative.png` (the first
  `config.eval_num_qualitative` test images), `threshold.json` (the strict ODS threshold
  for later prediction) and, if `config.eval_save_probability_maps`, `probs/<name>.png`.

  Returns:
    The evaluation dictionary (also written to eval.json).
  """
  workdir = Path(workdir)
  split = split or config.test_split
  if state is None:
    mesh = make_mesh()
    mngr = checkpoint_manager(workdir, config)
    if mngr.latest_step() is None:
      raise FileNotFoundError(f'No checkpoint in {workdir / "checkpoints"} to evaluate; '
                              'train first (--mode=train or train_and_eval).')
    state = restore_or_init(config, mngr, _input_shape(config), mesh)
  step = int(jax.device_get(state.step))
  params = _local_params(state)
  examples = list(input_pipeline.eval_examples(config, split))
  images = (ex['image'] for ex in examples)
  probs = list(tqdm.tqdm(predict_probabilities(params, config, images), total=len(examples),
                         desc=f'eval {split}', unit='img', disable=jax.process_index() != 0))
  gts = [ex['mask'][..., 0] for ex in examples]
  names = [ex['name'] for ex in examples]
  results = {}
  for protocol in config.eval_protocols:
    # The strict grid follows config.num_thresholds; BSDS-style protocols keep their own 99.
    n = config.num_thresholds if protocol == 'strict' else None
    results[protocol] = evaluation.evaluate(probs, gts, protocol=protocol, num_thresholds=n)
  summary = {
      'step': step,
      'dataset': config.dataset,
      'split': split,
      'num_images': len(examples),
      'protocols': list(results),
      'results': {
          protocol: {
              **{k: r[k] for k in ('protocol', 'protocol_description', 'num_thresholds', 'ods',
                                   'ois', 'ois_mean_f1', 'ap')},
              'per_image': [dict(name=name, **row)
                            for name, row in zip(names, r['per_image'], strict=True)],
          } for protocol, r in results.items()
      },
  }
  if jax.process_index() == 0:
    _write_eval_outputs(config, workdir, summary, results, examples, probs, gts, names)
  return summary


def _write_eval_outputs(config, workdir: Path, summary, results, examples, probs, gts,
                        names) -> None:
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / 'eval.json').write_text(json.dumps(summary, indent=2))
  step, split = summary['step'], summary['split']
  if 'strict' in results:
    threshold = results['strict']['ods']['threshold']
    (workdir / 'threshold.json').write_text(json.dumps({
        'threshold': threshold, 'rule': 'crack where probability > threshold',
        'chosen_by': 'ODS F1 on the test split, strict protocol', 'split': split,
        'step': step}, indent=2))
  else:
    threshold = 0.5
  eval_report.write_per_image_csv(workdir / 'eval_per_image.csv', names, results)
  title = f'{config.dataset} {split}, step {step}'
  eval_report.plot_pr_curves(workdir / 'pr_curve.png', results, title)
  k = min(config.eval_num_qualitative, len(examples))
  if k:
    eval_report.plot_qualitative(
        workdir / 'qualitative.png', [ex['image'] for ex in examples[:k]], gts[:k], probs[:k],
        names[:k], threshold, f'{title}; prediction at the strict ODS threshold')
  if config.eval_save_probability_maps:
    eval_report.save_probability_maps(workdir / 'probs', probs, names)
  writer = MetricWriter(workdir)
  for protocol, r in results.items():
    writer.write_scalars(step, {
        'ods_f1': r['ods']['f1'], 'ods_precision': r['ods']['precision'],
        'ods_recall': r['ods']['recall'], 'ois_f1': r['ois']['f1'], 'ap': r['ap']},
        kind=f'eval_{split}_{protocol}')
    logging.info('Eval (%s protocol) at step %d: ODS F1 %.4f (t=%.2f, P %.4f, R %.4f), '
                 'OIS F1 %.4f, AP %.4f', protocol, step, r['ods']['f1'], r['ods']['threshold'],
                 r['ods']['precision'], r['ods']['recall'], r['ois']['f1'], r['ap'])
  writer.close()


MODES = ('train', 'eval', 'train_and_eval')


def run(config: ml_collections.ConfigDict, workdir: str | Path, mode: str) -> None:
  """Entry point of launch.py: trains and/or evaluates according to `mode`."""
  if mode not in MODES:
    raise ValueError(f'Unknown mode {mode!r}; expected one of {MODES}.')
  if mode == 'eval':
    evaluate_checkpoint(config, workdir)
  else:
    train_and_evaluate(config, workdir, evaluate_after=mode == 'train_and_eval')


__all__ = [
    'NonFiniteError', 'TrainState', 'create_train_state', 'eval_step', 'evaluate_checkpoint',
    'make_mesh', 'predict_probabilities', 'run', 'train_and_evaluate', 'train_step',
]
