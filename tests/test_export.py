"""crackjax-export: a trained smoke run to jax.export (and ONNX) files that run without crackjax."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from crackjax.deploy import export, export_command, predictor
from crackjax.evaluation import inference
from crackjax.experiment import restored

# Sizes the round trip is checked on: two batch sizes and two spatial sizes, one file.
SHAPES = ((2, 32, 48, 3), (1, 64, 80, 3))


@pytest.fixture(scope='module')
def run_dir(smoke_run):
  """The session's trained smoke run (six steps on a fake CrackForest)."""
  return smoke_run


@pytest.fixture(scope='module')
def run(run_dir):
  return restored.load_run(run_dir)


def _images():
  rng = np.random.default_rng(0)
  return {f'x{i}': rng.random(shape, np.float32) for i, shape in enumerate(SHAPES)}


def _expected(run, images):
  return {
    k: np.asarray(inference.predict_step(run.params, x, apply_fn=run.model.apply))
    for k, x in images.items()
  }


# Runs in a fresh interpreter: only jax and numpy, never crackjax or flax.
_LOAD_SCRIPT = textwrap.dedent("""
  import sys
  import jax
  import numpy as np

  model_path, inputs_path, outputs_path = sys.argv[1:]
  exported = jax.export.deserialize(open(model_path, 'rb').read())
  inputs = np.load(inputs_path)
  outputs = {k: np.asarray(exported.call(inputs[k])) for k in inputs.files}
  try:
    exported.call(np.zeros((1, 40, 48, 3), np.float32))  # not a multiple of 16
    outputs['refused'] = np.array('')
  except ValueError as e:
    outputs['refused'] = np.array(str(e))
  leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('crackjax', 'flax', 'orbax'))
  assert not leaked, leaked
  np.savez(outputs_path, **outputs)
""")


def test_export_metadata_and_the_documented_recipe(run_dir, run, tmp_path):
  pytest.importorskip('flatbuffers')
  out = export.export_run(run_dir, tmp_path / 'unet.jaxexport')
  meta = json.loads(export.sidecar_path(out).read_text())
  assert meta['format'] == 'jax' and meta['input_multiple'] == 16
  assert meta['step'] == run.step == 6 and meta['threshold'] == run.threshold
  assert meta['platforms'] == ['cpu', 'cuda']  # lowered for CUDA on a CPU-only machine
  # docs/export.md's recipe, padding to the sidecar's pad_multiple, gives crackjax-predict's
  # map for a size that is no multiple of anything (its border pixels included).
  assert meta['pad_multiple'] == 32
  f = jax.export.deserialize(out.read_bytes())
  image = np.random.default_rng(3).random((37, 50, 3), dtype=np.float32)
  m = meta['pad_multiple']
  padded = np.pad(image, ((0, -37 % m), (0, -50 % m), (0, 0)), mode='reflect')
  recipe = np.asarray(f.call(padded[None]))[0, :37, :50, 0]
  np.testing.assert_allclose(recipe, predictor.Predictor.from_workdir(run_dir)(image), atol=1e-5)


# A fresh interpreter that imports only jax and numpy: the slow tier.
@pytest.mark.slow
def test_jax_export_round_trip_without_crackjax(run_dir, run, tmp_path):
  pytest.importorskip('flatbuffers')  # jax's serializer needs it (a crackjax dependency)
  out = export.export_run(run_dir, tmp_path / 'unet.jaxexport')
  images = _images()
  np.savez(tmp_path / 'in.npz', **images)
  script = tmp_path / 'load.py'
  script.write_text(_LOAD_SCRIPT)
  result = subprocess.run(
    [sys.executable, str(script), str(out), str(tmp_path / 'in.npz'), str(tmp_path / 'out.npz')],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  got = np.load(tmp_path / 'out.npz')
  for key, want in _expected(run, images).items():
    assert got[key].shape == want.shape == images[key].shape[:3] + (1,)
    np.testing.assert_allclose(got[key], want, atol=1e-5, rtol=0)
  assert 'Division had remainder' in str(got['refused'])

  meta = json.loads(export.sidecar_path(out).read_text())
  assert meta['format'] == 'jax'
  assert meta['input_multiple'] == 16
  assert meta['step'] == run.step == 6
  assert meta['threshold'] == run.threshold
  assert meta['platforms'] == ['cpu', 'cuda']  # lowered for CUDA on a CPU-only machine
  assert meta['input_shape'] == '(b, 16*h, 16*w, 3)'
  assert meta['model_config']['widths'] == [4, 8, 16, 32, 64]
  assert meta['model_config']['conv_impl'] == 'xla'


def test_onnx_export_runs_in_onnxruntime(run_dir, run, tmp_path):
  ort = pytest.importorskip('onnxruntime')
  pytest.importorskip('jax2onnx')
  out = export.export_run(run_dir, tmp_path / 'unet.onnx', format='onnx')
  session = ort.InferenceSession(str(out), providers=['CPUExecutionProvider'])
  assert [i.shape for i in session.get_inputs()] == [['B', 'H', 'W', 3]]
  images = _images()
  for key, want in _expected(run, images).items():
    (got,) = session.run(None, {'images': images[key]})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
  meta = json.loads(export.sidecar_path(out).read_text())
  assert meta['format'] == 'onnx'
  assert meta['threshold'] == run.threshold


def test_onnx_without_jax2onnx_says_what_to_install(run_dir, tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, 'jax2onnx', None)  # import fails as if not installed
  with pytest.raises(ImportError, match=r"pip install -e '\.\[onnx\]'"):
    export.export_run(run_dir, tmp_path / 'unet.onnx', format='onnx')


def _main_error(argv, capsys):
  with pytest.raises(SystemExit) as e:
    export_command.main(argv)
  message = str(e.value.code)
  assert '\n' not in message and 'Traceback' not in message
  return message


def test_cli_refuses_to_overwrite_without_flag(run_dir, tmp_path, capsys):
  pytest.importorskip('flatbuffers')
  out = tmp_path / 'unet.jaxexport'
  out.write_bytes(b'keep me')
  message = _main_error([f'--workdir={run_dir}', f'--out={out}'], capsys)
  assert str(out) in message and '--overwrite' in message
  assert out.read_bytes() == b'keep me'

  export_command.main([f'--workdir={run_dir}', f'--out={out}', '--overwrite'])
  printed = capsys.readouterr().out
  assert f'Wrote {out}' in printed and 'jax.export.deserialize' in printed
  assert f"open('{out}', 'rb')" in printed  # the recipe printed here names the path written
  assert 'threshold.json' in printed.split('Wrote ')[2]  # where the threshold came from
  assert out.read_bytes() != b'keep me'
  assert export.sidecar_path(out).is_file()


def test_cli_missing_workdir_names_it(tmp_path, capsys):
  missing = tmp_path / 'no_such_run'
  message = _main_error([f'--workdir={missing}', f'--out={tmp_path / "m.jaxexport"}'], capsys)
  assert message.startswith('crackjax-export: ') and str(missing) in message
  assert not (tmp_path / 'm.jaxexport').exists()


def test_cli_unwritable_out_is_one_line(run_dir, tmp_path, capsys):
  (tmp_path / 'file.txt').write_text('')
  out = tmp_path / 'file.txt' / 'm.jaxexport'
  message = _main_error([f'--workdir={run_dir}', f'--out={out}'], capsys)
  assert message == (
    f'crackjax-export: cannot write --out={out}: {tmp_path / "file.txt"} is a file, not a folder.'
  )


def test_cli_out_that_is_a_folder_is_one_line_even_with_overwrite(run_dir, tmp_path, capsys):
  for extra in ([], ['--overwrite']):
    message = _main_error([f'--workdir={run_dir}', f'--out={tmp_path}', *extra], capsys)
    assert message == (
      f'crackjax-export: {tmp_path} is a folder; --out (out=) names the file to write, e.g. '
      f'{tmp_path / "unet.jaxexport"}.'
    )


def test_cli_flag_errors_are_one_line(run_dir, tmp_path, capsys):
  out = f'--out={tmp_path / "m.jaxexport"}'
  assert '--workdir is required' in _main_error([out], capsys)
  assert 'multiples of 16' in _main_error([f'--workdir={run_dir}', out, '--hw=40,48'], capsys)
  assert 'steps: [3, 6]' in _main_error([f'--workdir={run_dir}', out, '--step=7'], capsys)
  with pytest.raises(SystemExit) as e:
    export_command.main(['--help'])
  assert e.value.code == 0
  assert '--workdir' in capsys.readouterr().out


def _docs_check_lines() -> str:
  """docs/export.md's jax.export recipe up to its deserialisation (the check included)."""
  doc = (Path(__file__).resolve().parents[1] / 'docs' / 'export.md').read_text()
  block = doc.split('## Loading: `jax.export`')[1].split('```python\n')[1].split('```')[0]
  lines = block.splitlines()
  end = next(i for i, line in enumerate(lines) if line.startswith('f = jax.export.deserialize'))
  return '\n'.join(line for line in lines[: end + 1] if 'from PIL' not in line)


def test_a_damaged_export_is_one_line_in_the_documented_recipe(run_dir, tmp_path, monkeypatch):
  pytest.importorskip('flatbuffers')
  out = export.export_run(run_dir, tmp_path / 'unet.jaxexport')
  meta = json.loads(export.sidecar_path(out).read_text())
  blob = out.read_bytes()
  assert meta['size'] == len(blob) and len(meta['sha256']) == 64
  monkeypatch.chdir(tmp_path)
  code = _docs_check_lines()
  scope: dict = {}
  exec(code, scope)  # the intact file loads
  assert scope['f'].in_avals
  for damaged in (blob[: len(blob) // 2], blob[:-1] + bytes([blob[-1] ^ 1])):
    out.write_bytes(damaged)  # truncated, then one byte changed
    with pytest.raises(SystemExit) as e:
      exec(code, {})
    assert str(e.value).startswith('unet.jaxexport is damaged') and '\n' not in str(e.value)
    # The sidecar's own recipe (what crackjax-export prints) says the same.
    with pytest.raises(SystemExit, match='unet.jaxexport is damaged'):
      exec('\n'.join(meta['load'][:-1]), {})
