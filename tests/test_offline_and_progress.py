"""Offline errors of dataset preparation, evaluation progress bars, and quiet logs.

Nothing here touches the network: the connection probe and the download are monkeypatched.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import ml_collections
import numpy as np
import pytest
import requests
import tensorflow_datasets as tfds
from absl import logging as absl_logging
from urllib3.connection import HTTPSConnection
from urllib3.exceptions import MaxRetryError, NewConnectionError

from crackjax import evaluation
from crackjax.configs import base
from crackjax.data import registry as data_registry
from crackjax.experiment import build as experiment
from crackjax.experiment import specs
from crackjax.runs import logs
from crackjax.tfds_builders.crackforest import CrackForest
from crackjax.tfds_builders.crackforest import crackforest_dataset_builder as cfd
from crackjax.tfds_builders.errors import DatasetNotFoundError
from crackjax.trainer import scoring
from tests import fixtures

URL = cfd.URL  # the pinned commit's archive


@pytest.fixture
def offline(monkeypatch) -> list[str]:
  """No proxy, every TCP connection fails at once, and a download is recorded and fails."""
  for var in ('https_proxy', 'HTTPS_PROXY', 'all_proxy', 'ALL_PROXY'):
    monkeypatch.delenv(var, raising=False)
  attempts = []

  def no_connection(address, timeout=None, *args, **kwargs):
    attempts.append(f'connect {address}')
    raise socket.gaierror(-3, 'Temporary failure in name resolution')

  def no_download(self, url):
    attempts.append(f'download {url}')
    raise AssertionError('download_and_extract must not be reached offline')

  monkeypatch.setattr(cfd.socket, 'create_connection', no_connection)
  monkeypatch.setattr(tfds.download.DownloadManager, 'download_and_extract', no_download)
  return attempts


def crackforest_data(tmp_path: Path, manual_dir: str | None) -> ml_collections.ConfigDict:
  data = base.get_config().data
  data.name = 'crackforest'
  data.data_dir = str(tmp_path / 'tfds')
  data.manual_dir = manual_dir
  return data


def prepare_error(data: ml_collections.ConfigDict) -> tuple[str, float]:
  start = time.monotonic()
  with pytest.raises(DatasetNotFoundError) as excinfo:
    data_registry.prepare_dataset(data.to_dict())
  return str(excinfo.value), time.monotonic() - start


# ----------------------------------------------------------------------------- (A) offline


def test_missing_manual_dir_is_an_error_at_once(tmp_path, offline):
  missing = tmp_path / 'no_such_dir'
  msg, seconds = prepare_error(crackforest_data(tmp_path, str(missing)))
  assert f'config.data.manual_dir={missing} does not exist' in msg
  assert '--config.data.manual_dir' in msg
  assert seconds < 5 and offline == []  # Neither probed nor downloaded.


def test_empty_manual_dir_is_an_error_at_once(tmp_path, offline):
  (tmp_path / 'empty').mkdir()
  msg, seconds = prepare_error(crackforest_data(tmp_path, str(tmp_path / 'empty')))
  assert f'config.data.manual_dir={tmp_path / "empty"} is empty' in msg
  assert seconds < 5 and offline == []


def test_manual_dir_not_the_dataset_does_not_download(tmp_path, offline):
  (tmp_path / 'wrong').mkdir()
  (tmp_path / 'wrong' / 'notes.txt').write_text('x')
  msg, _ = prepare_error(crackforest_data(tmp_path, str(tmp_path / 'wrong')))
  assert 'does not look like the CrackForest dataset' in msg
  assert offline == []


def test_builder_rejects_given_missing_manual_dir(tmp_path, offline):
  # Through TFDS directly (no crackjax check first): still no fallback to the download.
  builder = CrackForest(data_dir=str(tmp_path / 'tfds'))
  config = tfds.download.DownloadConfig(manual_dir=str(tmp_path / 'missing'))
  with pytest.raises(Exception) as excinfo:
    builder.download_and_prepare(download_config=config)
  errors = list(_chain(excinfo.value))
  assert any(
    isinstance(e, DatasetNotFoundError) and 'does not exist or is empty' in str(e) for e in errors
  ), [str(e) for e in errors]
  assert offline == []


def _chain(e: BaseException | None):
  while e is not None:
    yield e
    e = e.__cause__ or e.__context__


def test_offline_without_manual_dir_fails_fast_with_one_line(tmp_path, offline):
  msg, seconds = prepare_error(crackforest_data(tmp_path, None))
  assert msg == (
    f'Could not download CrackForest from {URL} (gaierror: [Errno -3] Temporary failure in name '
    'resolution). Offline? Get the archive (or a copy of '
    'https://github.com/cuilimeng/CrackForest-dataset) and pass --config.data.manual_dir=DIR.'
  )
  assert '\n' not in msg
  assert seconds < 5
  assert offline == ["connect ('github.com', 443)"]  # Probed once, never downloaded.


def test_download_error_is_one_line_naming_the_url(tmp_path, offline, monkeypatch):
  # The host answers the probe but the download fails (as requests raises it after retries).
  monkeypatch.setattr(cfd, 'probe_connection', lambda url: None)
  reason = NewConnectionError(
    HTTPSConnection('github.com', 443),
    'Failed to establish a new connection: [Errno 101] Network is unreachable',
  )
  error = requests.exceptions.ConnectionError(MaxRetryError(None, '/x.zip', reason))

  def failing_download(self, url):
    raise error

  monkeypatch.setattr(tfds.download.DownloadManager, 'download_and_extract', failing_download)
  msg, _ = prepare_error(crackforest_data(tmp_path, None))
  assert msg.startswith(
    f'Could not download CrackForest from {URL} (ConnectionError: Failed to establish a new '
    'connection: [Errno 101] Network is unreachable). Offline?'
  )
  assert msg.endswith('--config.data.manual_dir=DIR.') and '\n' not in msg


def test_probe_skipped_behind_a_proxy(monkeypatch, offline):
  monkeypatch.setenv('https_proxy', 'http://proxy.invalid:3128')
  cfd.probe_connection(URL)  # No direct connection is attempted.
  assert offline == []


def test_preparation_logs_one_line_and_tfds_noise_is_quiet(tmp_path, caplog, quiet_logs):
  raw = fixtures.make_fake_crackforest(tmp_path / 'raw', n_labelled=4, n_unlabelled=0)
  data = crackforest_data(tmp_path, str(raw))
  caplog.set_level(logging.INFO, logger='absl')
  data_registry.prepare_dataset(data.to_dict())
  data_registry.get_data_source(data.to_dict(), 'train')[0]
  messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
  builder = data_registry.get_builder(data.to_dict())
  assert (
    f'Preparing dataset crackforest into {builder.data_dir} (once; later runs reuse it)...'
    in messages
  )
  assert not [m for m in messages if 'dataset_info' in m or 'OpenCV' in m], messages


# ----------------------------------------------------------------------------- (B) progress


def test_score_shows_a_bar_per_protocol(capsys):
  rng = np.random.default_rng(0)
  probs = [rng.random((24, 32)).astype(np.float32) for _ in range(3)]
  gts = [(rng.random((24, 32)) > 0.8).astype(np.uint8) for _ in range(3)]
  config = base.get_config()
  config.eval.protocols = ('strict', 'tolerance')
  config.eval.num_thresholds = 10
  results = scoring.score(probs, gts, experiment.eval_plan_of(config.to_dict()))
  err = capsys.readouterr().err
  assert 'strict protocol' in err and 'tolerance protocol' in err
  assert err.count('3/3') >= 2
  # Image-by-image counting changes nothing.
  for protocol, n in (('strict', 10), ('tolerance', 99)):
    want = evaluation.evaluate(probs, gts, protocol=protocol, num_thresholds=n)
    assert results[protocol].to_json() == want


def test_evaluate_progress_callback_counts_images():
  probs = [np.full((8, 8), 0.7), np.zeros((8, 8)), np.linspace(0, 1, 64).reshape(8, 8)]
  gts = [np.eye(8, dtype=bool)] * 3
  calls = []
  for protocol in evaluation.SUPPORTED_PROTOCOLS:
    calls.clear()
    with_progress = evaluation.evaluate(probs, gts, protocol=protocol, progress=calls.append)
    assert sum(calls) == 3
    assert with_progress == evaluation.evaluate(probs, gts, protocol=protocol)


# ----------------------------------------------------------------------------- (C) logs


@pytest.fixture
def quiet_logs():
  logs.quiet_third_party_logs()
  yield
  logger = absl_logging.get_absl_logger()
  for f in [f for f in logger.filters if isinstance(f, logs.DemoteNoise)]:
    logger.removeFilter(f)


class _ListHandler(logging.Handler):
  def __init__(self):
    super().__init__(logging.DEBUG)
    self.records: list[logging.LogRecord] = []

  def emit(self, record):
    self.records.append(record)


def _emit(logger: logging.Logger, level: int, pathname: str, msg: str) -> None:
  record = logger.makeRecord(logger.name, level, pathname, 1, msg, (), None)
  if logger.isEnabledFor(level):
    logger.handle(record)  # Applies the logger's filters, as logging.info(...) does.


def test_third_party_noise_demoted_to_debug(quiet_logs):
  logger = absl_logging.get_absl_logger()
  handler = _ListHandler()
  logger.addHandler(handler)
  old_level = logger.level
  tfds_info = '/venv/site-packages/tensorflow_datasets/core/dataset_info.py'
  tfds_files = '/venv/site-packages/tensorflow_datasets/core/utils/file_utils.py'
  tfds_image = '/venv/site-packages/tensorflow_datasets/core/features/image_feature.py'
  orbax = '/venv/site-packages/orbax/checkpoint/checkpointer.py'
  try:
    logger.setLevel(logging.INFO)
    _emit(logger, logging.INFO, tfds_info, 'Load dataset info from /d/crackforest/1.0.0')
    _emit(logger, logging.WARNING, tfds_files, 'Variant folder /d has no dataset_info.json')
    _emit(logger, logging.WARNING, tfds_image, 'OpenCV is not installed. We recommend ...')
    tfds_builder = '/venv/site-packages/tensorflow_datasets/core/dataset_builder.py'
    _emit(logger, logging.WARNING, tfds_builder, 'Using custom data configuration: folder-1a2b')
    _emit(logger, logging.INFO, orbax, 'Finished saving checkpoint')
    _emit(logger, logging.WARNING, tfds_info, 'Some other TFDS warning')
    _emit(logger, logging.INFO, '/repo/crackjax/trainer/loop.py', 'Step 10: loss 0.5')
    assert [r.getMessage() for r in handler.records] == [
      'Some other TFDS warning',
      'Step 10: loss 0.5',
    ]
    handler.records.clear()
    logger.setLevel(logging.DEBUG)  # --verbosity=1: the noise is back, as DEBUG.
    _emit(logger, logging.INFO, tfds_info, 'Load dataset info from /d')
    assert [(r.levelno, r.getMessage()) for r in handler.records] == [
      (logging.DEBUG, 'Load dataset info from /d')
    ]
  finally:
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def test_quiet_is_idempotent(quiet_logs):
  logs.quiet_third_party_logs()
  logger = absl_logging.get_absl_logger()
  assert sum(isinstance(f, logs.DemoteNoise) for f in logger.filters) == 1


def test_run_header_one_line():
  config = base.get_config()
  header = logs.run_header(specs.recorded(config), '/tmp/run')
  assert '\n' not in header
  # The config's groups as plain data give the same line as its recorded JSON (whose lists
  # are shown as the config's tuples, its fields in name order).
  assert logs.run_header(config.to_dict(), '/tmp/run') == header
  for part in (
    'dataset crackforest',
    'model unet(',
    f'widths={config.model.widths}',
    'loss holistic(',
    'beta=1.0',
    'weighting=xie)',
    f'batch {config.batch_size}, {config.steps_per_epoch * config.num_epochs} steps',
    'device(s)',
    'workdir /tmp/run',
  ):
    assert part in header, header
