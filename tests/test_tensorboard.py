"""TensorBoard beyond scalars: every evaluation adds its PR curves, qualitative panels and the
run's hyper-parameters, read back here from the event files themselves."""

import json
import struct
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from tensorboardX.proto import event_pb2, plugin_hparams_pb2

from crackjax.experiment.build import build
from crackjax.runs import metric_writer
from crackjax.trainer import loop
from tests import fixtures


def read_events(folder: Path) -> list:
  """Every Event of every event file in `folder` (TFRecord framing: length, its CRC, the
  record, its CRC)."""
  events = []
  for path in sorted(folder.glob('events.out.tfevents.*')):
    data = path.read_bytes()
    at = 0
    while at < len(data):
      (length,) = struct.unpack('<Q', data[at : at + 8])
      event = event_pb2.Event()
      event.ParseFromString(data[at + 12 : at + 12 + length])
      events.append(event)
      at += 12 + length + 4
  return events


def by_plugin(events) -> dict[str, list[tuple[int, object]]]:
  """{plugin name ('scalars', 'pr_curves', 'images', 'hparams'): [(step, value), ...]}."""
  found = defaultdict(list)
  for event in events:
    for value in event.summary.value:
      if value.HasField('image'):
        found['images'].append((event.step, value))
      elif value.metadata.plugin_data.plugin_name:
        found[value.metadata.plugin_data.plugin_name].append((event.step, value))
      elif value.HasField('simple_value'):
        found['scalars'].append((event.step, value))
  return found


def test_the_final_evaluation_adds_pr_curves_images_and_hparams(smoke_run):
  found = by_plugin(read_events(smoke_run / 'tensorboard'))
  curves = {v.tag: (step, v) for step, v in found['pr_curves']}
  assert set(curves) == {'eval_test_strict/pr_curve'}
  step, value = curves['eval_test_strict/pr_curve']
  assert step == 6
  # The tensor is [6, N]: TP, FP, TN, FN, precision, recall; P and R are eval.json's curve.
  tensor = np.asarray(value.tensor.float_val).reshape(6, -1)
  curve = json.loads((smoke_run / 'eval.json').read_text())['results']['strict']['curve']
  order = np.argsort(curve['thresholds'], kind='stable')
  np.testing.assert_allclose(tensor[4], np.asarray(curve['precision'])[order], rtol=1e-6)
  np.testing.assert_allclose(tensor[5], np.asarray(curve['recall'])[order], rtol=1e-6)
  images = [(step, v) for step, v in found['images']]
  # config.eval.num_qualitative = 4 test images (the fake CrackForest's are 32 x 48).
  assert sorted(v.tag for _, v in images) == [f'eval_test/qualitative_{i}' for i in range(4)]
  assert {(v.image.height, v.image.width) for _, v in images} == {(32, 4 * 48 + 3 * 4)}
  config = json.loads((smoke_run / 'config.json').read_text())
  start = [v for _, v in found['hparams'] if v.tag == '_hparams_/session_start_info']
  assert start, 'no hyper-parameters recorded'
  data = plugin_hparams_pb2.HParamsPluginData()
  data.ParseFromString(start[-1].metadata.plugin_data.content)
  hparams = data.session_start_info.hparams
  assert hparams['model.name'].string_value == config['model']['name']
  assert hparams['learning_rate'].number_value == config['learning_rate']
  assert hparams['data.input_size'].string_value == 'null'  # not a scalar: JSON text


@pytest.mark.slow
def test_every_periodic_evaluation_adds_them(tmp_path):
  config = fixtures.smoke_config(fixtures.smoke_data_dirs(tmp_path / 'data'))
  config.eval.protocols = ('strict',)
  config.eval.every_epochs = 1
  config.eval.num_qualitative = 2
  workdir = tmp_path / 'run'
  loop.train_and_evaluate(build(config), workdir, evaluate_after=False)
  found = by_plugin(read_events(workdir / 'tensorboard'))
  assert sorted(step for step, _ in found['pr_curves']) == [3, 6]  # epochs 1 and 2
  assert sorted(step for step, _ in found['images']) == [3, 3, 6, 6]
  assert {step for step, v in found['hparams'] if 'session_start' in v.tag} == {3, 6}
  scalars = {(step, v.tag) for step, v in found['scalars']}
  assert {(3, 'eval_test_strict/ods_f1'), (6, 'eval_test_strict/ods_f1')} <= scalars


def test_flat_hparams():
  flat = metric_writer.flat_hparams(
    {'model': {'name': 'unet', 'widths': [8, 16]}, 'seed': 0, 'x': None, 'on': True}
  )
  assert flat == {
    'model.name': 'unet',
    'model.widths': '[8, 16]',
    'seed': 0,
    'x': 'null',
    'on': True,
  }


def test_a_sliced_split_name_is_a_clean_tag_without_log_lines(tmp_path, caplog):
  """A split such as 'train[58:]' (the release configs' validation part) is spelt as
  TensorBoard takes it, the same tag tensorboardX would make, without its INFO line per tag
  and step ("Summary name ... is illegal")."""
  from tensorboardX.summary import _clean_tag

  writer = metric_writer.MetricWriter(tmp_path)
  kind = 'eval_train[58:]_strict'
  with caplog.at_level('INFO'):
    writer.write_scalars(3, {'ods_f1': 0.5}, kind=kind)
    writer.write_evaluation(
      3,
      curves={
        f'{kind}/pr_curve': {
          'thresholds': [0.1, 0.9],
          'precision': [0.2, 1.0],
          'recall': [1.0, 0.1],
        }
      },
      panels=[('eval_train[58:]/qualitative_0', np.zeros((4, 6, 3), np.uint8))],
      hparams={'lr': 0.1},
      metrics=[f'{kind}/ods_f1'],
    )
    writer.close()
  assert 'is illegal' not in caplog.text
  tags = {v.tag for e in read_events(tmp_path / 'tensorboard') for v in e.summary.value}
  assert {'eval_train_58___strict/ods_f1', 'eval_train_58___strict/pr_curve'} <= tags
  assert 'eval_train_58__/qualitative_0' in tags
  assert metric_writer.tag(f'{kind}/ods_f1') == _clean_tag(f'{kind}/ods_f1')
