"""bench/peer_mtscrack.py and crackjax.deploy.crack_free on tiny synthetic data: MTSCrack's input
rule with a stand-in for its ONNX session, the scores and tables, the crack-free windows and the
false-positive length per megapixel. No real data; onnxruntime only where it is installed."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import pytest

from crackjax import evaluation
from crackjax.deploy import crack_free

REPO = Path(__file__).resolve().parents[1]


def _bench():
  spec = importlib.util.spec_from_file_location(
    'bench_peer_mtscrack', REPO / 'bench' / 'peer_mtscrack.py'
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


bench = _bench()


def _photo(h=48, w=64, column=20, seed=0):
  """A grey road with a dark vertical crack 2 px wide at `column`, and its mask."""
  rng = np.random.default_rng(seed)
  image = np.clip(150 + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)
  mask = np.zeros((h, w), np.uint8)
  if column is not None:
    image[:, column : column + 2] = 40
    mask[:, column : column + 2] = 1
  return image, mask


class Darkness:
  """A fake model: crack probability = how dark the pixel is."""

  def __init__(self, name='dark', threshold=0.5):
    self.name, self.threshold, self.rule = name, threshold, f'> {threshold}'

  def __call__(self, image):
    return 1.0 - np.asarray(image, np.float32).mean(axis=2) / 255.0


class Nothing(Darkness):
  def __call__(self, image):
    return np.zeros(np.asarray(image).shape[:2], np.float32)


# --- MTSCrack's input rule -------------------------------------------------------------------


def test_resize_linear_is_opencv_s_half_pixel_rule():
  a = np.arange(16, dtype=np.uint8).reshape(4, 4) * 10
  # Halving: each output pixel is the mean of a 2 x 2 block (source centres 0.5, 2.5).
  half = bench.resize_linear(a, 2, 2)
  assert half.dtype == np.uint8
  np.testing.assert_array_equal(half, [[25, 45], [105, 125]])
  same = bench.resize_linear(a, 4, 4)
  np.testing.assert_array_equal(same, a)
  # Doubling a float map: the border pixels clamp, the inner ones interpolate by 1/4, 3/4.
  row = bench.resize_linear(np.array([[0.0, 1.0]], np.float32), 1, 4)
  np.testing.assert_allclose(row, [[0.0, 0.25, 0.75, 1.0]])
  rgb = np.zeros((5, 7, 3), np.uint8) + np.array([10, 20, 30], np.uint8)
  assert bench.resize_linear(rgb, 256, 256).shape == (256, 256, 3)
  assert (bench.resize_linear(rgb, 256, 256) == [10, 20, 30]).all()


def test_mtscrack_feeds_bgr_0_255_at_256_and_resizes_the_output_back():
  seen = []

  def fake_session(x):
    seen.append(x)
    out = np.zeros((1, 1, 256, 256), np.float32)
    out[0, 0, :, 100:110] = 0.7  # a vertical band
    out[0, 0, 0, 0] = 3.0  # outside [0, 1]: clipped
    return out

  image = np.zeros((60, 90, 3), np.uint8)
  image[..., 0] = 200  # red
  image[..., 2] = 7  # blue
  peer = bench.MtsCrack(fake_session)
  prob = peer(image)
  (x,) = seen
  assert x.shape == (1, 3, 256, 256) and x.dtype == np.float32
  assert (x[0, 0] == 7).all() and (x[0, 1] == 0).all() and (x[0, 2] == 200).all()  # B, G, R
  assert prob.shape == (60, 90) and prob.dtype == np.float32
  assert prob.min() >= 0 and prob.max() <= 1
  assert peer.threshold == 0.0
  # The band at 100..110 of 256 columns lands near 35..39 of 90.
  cols = np.flatnonzero((prob > peer.threshold).any(axis=0))
  assert 33 <= cols.min() <= 36 and 38 <= cols.max() <= 40
  with pytest.raises(ValueError, match='uint8 RGB'):
    peer(image.astype(np.float32))


def test_missing_onnxruntime_says_how_to_install_it(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, 'onnxruntime', None)
  with pytest.raises(SystemExit, match=r'pip install onnxruntime'):
    bench.onnx_runner(tmp_path / 'x.onnx')
  with pytest.raises(SystemExit, match='needs --mtscrack_onnx'):
    bench.load_models(['mtscrack'], None)


def test_onnx_runner_runs_a_file_like_mtscrack_s(tmp_path):
  """A stand-in ONNX file of MTSCrack's signature (input_bgr 1x3x256x256 -> final_mask
  1x1x256x256: the grey of its first layer / 255) through onnxruntime."""
  pytest.importorskip('onnxruntime')
  onnx = pytest.importorskip('onnx')
  from onnx import TensorProto, helper

  weights = helper.make_tensor('w', TensorProto.FLOAT, [1, 3, 1, 1], [0.114, 0.587, 0.299])
  graph = helper.make_graph(
    [
      helper.make_node('Conv', ['input_bgr', 'w'], ['grey']),
      helper.make_node('Div', ['grey', 'k'], ['final_mask']),
    ],
    'mts_like',
    [helper.make_tensor_value_info('input_bgr', TensorProto.FLOAT, [1, 3, 256, 256])],
    [helper.make_tensor_value_info('final_mask', TensorProto.FLOAT, [1, 1, 256, 256])],
    initializer=[weights, helper.make_tensor('k', TensorProto.FLOAT, [], [255.0])],
  )
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
  model.ir_version = 8
  path = tmp_path / 'mts_like.onnx'
  onnx.save(model, path)
  peer = bench.MtsCrack(bench.onnx_runner(path))
  image = np.full((30, 40, 3), [255, 0, 0], np.uint8)  # pure red: grey 0.299
  np.testing.assert_allclose(peer(image), 0.299, atol=1e-5)


# --- data ------------------------------------------------------------------------------------


def test_folder_pairs_match_mask_suffixes_and_subsample_is_even(tmp_path):
  images, masks = tmp_path / 'img', tmp_path / 'lab'
  images.mkdir()
  masks.mkdir()
  for name in ('a', 'b', 'c'):
    image, mask = _photo(16, 16, column=5)
    PIL.Image.fromarray(image).save(images / f'{name}.jpg')
    PIL.Image.fromarray(mask * 255).save(masks / f'{name}_mask.png')
  pairs = bench.folder_pairs(images, masks)
  assert [p[0] for p in pairs] == ['a', 'b', 'c']
  assert pairs[0][2].name == 'a_mask.png'
  triples, total = bench.read_folder_set(str(images), str(masks), 2)
  assert total == 3 and [t[0] for t in triples] == ['a', 'c']
  assert triples[0][2].dtype == np.uint8 and set(np.unique(triples[0][2])) == {0, 1}
  (masks / 'c_mask.png').unlink()
  with pytest.raises(ValueError, match='have no mask'):
    bench.folder_pairs(images, masks)
  assert bench.subsample(10, 4) == [0, 3, 6, 9]
  assert bench.subsample(3, None) == [0, 1, 2] and bench.subsample(3, 5) == [0, 1, 2]
  assert bench.parse_max_images(['100', 'GAPs=20']) == (100, {'GAPs': 20})
  with pytest.raises(ValueError):
    bench.parse_max_images(['x=0'])


# --- scoring and tables ----------------------------------------------------------------------


def test_scores_are_crackjax_s_and_the_mask_f1_follows_each_model_s_rule():
  photos = [_photo(seed=i, column=10 + 5 * i) for i in range(3)]
  probs = [Darkness()(p[0]) for p in photos]
  gts = [p[1].astype(bool) for p in photos]
  protocols = ('strict', 'tolerance_thin_gt')
  masks = [p > 0.5 for p in probs]
  scores = bench.score_model(probs, masks, gts, protocols)
  for protocol in protocols:
    n = evaluation.get_protocol(protocol).num_thresholds(100)  # the tolerance ones keep 99
    ref = evaluation.evaluate(probs, gts, protocol=protocol, num_thresholds=n)
    assert scores[protocol]['ods_f1'] == pytest.approx(ref['ods']['f1'])
    assert scores[protocol]['ois_f1'] == pytest.approx(ref['ois']['f1'])
    assert scores[protocol]['ap'] == pytest.approx(ref['ap'])
  assert scores['strict']['f1_model'] == pytest.approx(1.0)  # the crack is the dark part
  # A rule "> 0" (MTSCrack's): every pixel of these maps is > 0, so the mask is all crack.
  flood = bench.score_model(probs, [p > 0 for p in probs], gts, ('strict',))
  every = evaluation.at_threshold(probs, gts, protocol='strict', threshold=0.0)
  assert flood['strict']['f1_model'] == pytest.approx(every['f1'])


def test_evaluate_set_scores_each_model_and_their_false_positives():
  triples = [(f'p{i}', *_photo(96, 160, column=140, seed=i)) for i in range(2)]
  triples.append(('clean', *_photo(96, 160, column=None, seed=5)))
  result = bench.evaluate_set(
    [Darkness('dark'), Nothing('none')],
    triples,
    ('strict',),
    fp_window=32,
    fp_margin=8,
    fp_max_patches=None,
  )
  assert result['images'] == 3
  cf = result['crack_free']
  # Per cracked photo (crack in columns 140-141): windows at x = 0, 32, 64, 96 (96 + 31 is 13
  # px from it), not 128; rows 0, 32, 64.
  assert cf['whole_images'] == 1 and cf['windows'] == 2 * 4 * 3 and cf['kept'] == 25
  assert cf['megapixels'] == pytest.approx((96 * 160 + 24 * 32 * 32) / 1e6)
  dark, none = result['models']['dark'], result['models']['none']
  assert dark['protocols']['strict']['f1_model'] == pytest.approx(1.0)
  assert none['protocols']['strict']['f1_model'] == 0.0
  # Clean road: neither predicts a crack (noise never reaches darkness 0.5).
  assert dark['crack_free']['length_px'] == 0 and none['crack_free']['images_with_fp'] == 0
  assert set(dark['seconds']) == {'predict', 'score', 'crack_free'}


def test_main_writes_the_json_and_markdown_tables(tmp_path, monkeypatch, capsys):
  images, masks = tmp_path / 'img', tmp_path / 'lab'
  images.mkdir()
  masks.mkdir()
  for i in range(4):
    image, mask = _photo(64, 64, column=50, seed=i)
    PIL.Image.fromarray(image).save(images / f'{i}.png')
    PIL.Image.fromarray(mask * 255).save(masks / f'{i}.png')

  def fake_models(specs, onnx):
    assert list(specs) == ['mine', 'mtscrack'] and onnx == 'peer.onnx'
    return [Darkness('mine'), bench.MtsCrack(lambda x: (x[:, :1] < 100).astype(np.float32))]

  monkeypatch.setattr(bench, 'load_models', fake_models)
  monkeypatch.setattr(bench, '_sha256', lambda path: 'f' * 64)
  out = tmp_path / 'res' / 'peer'
  record = bench.main(
    [
      '--models=mine,mtscrack',
      '--mtscrack_onnx=peer.onnx',
      f'--set=Tiny={images}:{masks}',
      '--max_images=3',
      '--protocols=strict',
      '--fp_window=32',
      '--workers=1',
      '--noprogress',
      f'--out={out}',
    ]
  )
  saved = json.loads(Path(f'{out}.json').read_text())
  assert saved['sets']['Tiny']['images'] == 3 and saved['sets']['Tiny']['images_in_set'] == 4
  assert saved['sets']['Tiny']['subsampled'] is True
  assert set(saved['sets']['Tiny']['models']) == {'mine', 'MTSCrack'}
  assert saved['models']['MTSCrack']['sha256'] == 'f' * 64
  assert saved == json.loads(json.dumps(record))
  md = Path(f'{out}.md').read_text()
  assert '| Tiny | 3 of 4 | mine | strict | 100.0' in md
  assert '| Tiny | 3 of 4 | MTSCrack | strict |' in md
  assert 'FP length (px / MP)' in md
  assert 'evenly spaced subsample' in capsys.readouterr().out


def test_main_refuses_bad_arguments(tmp_path):
  with pytest.raises(SystemExit, match='at least one --set or --data'):
    bench.main(['--models=x'])
  with pytest.raises(SystemExit, match='expected NAME=IMAGES_DIR:MASKS_DIR'):
    bench.main([f'--set={tmp_path}'])
  with pytest.raises(SystemExit, match='unknown --protocols'):
    bench.main(['--data=crackforest:test', '--protocols=nope'])


# --- crack-free windows and false-positive length -------------------------------------------


def test_crack_free_windows_keep_the_margin_from_every_crack_pixel():
  gt = np.zeros((100, 200), np.uint8)
  gt[:, 120] = 1
  corners = crack_free.crack_free_windows(gt, size=40, margin=10)
  # Brute force: a window is kept iff no crack pixel lies within 10 px of it.
  expected = []
  for y in range(0, 61, 40):
    for x in range(0, 161, 40):
      near = x - 10 <= 120 <= x + 39 + 10
      if not near:
        expected.append((y, x))
  assert corners == expected == [(0, 0), (0, 40), (0, 160), (40, 0), (40, 40), (40, 160)]
  # The margin is Euclidean: a single crack pixel diagonal to a window's corner.
  dot = np.zeros((60, 60), np.uint8)
  dot[40, 40] = 1  # 8 px right and below the corner (31, 31) of the window at (0, 0), size 32
  assert crack_free.crack_free_windows(dot, size=32, margin=12) == [(0, 0)]  # 12.7 > 12
  assert crack_free.crack_free_windows(dot, size=32, margin=13) == []
  assert crack_free.crack_free_windows(np.zeros((64, 64)), size=32, stride=16) == [
    (y, x) for y in (0, 16, 32) for x in (0, 16, 32)
  ]
  with pytest.raises(ValueError):
    crack_free.crack_free_windows(np.zeros((4, 4, 3)))


def test_crack_free_patches_whole_images_windows_and_an_even_cap():
  clean = np.zeros((50, 70), np.uint8)
  cracked = np.zeros((64, 128), np.uint8)
  cracked[:, 100] = 1
  image = np.zeros((64, 128, 3), np.uint8)
  pairs = [('a', np.zeros((50, 70, 3), np.uint8), clean), ('b', image, cracked)]
  patches, counts = crack_free.crack_free_patches(pairs, size=32, margin=8)  # x=64: 5 px off
  assert counts == {'whole_images': 1, 'windows': 4, 'images_with_windows': 1, 'kept': 5}
  assert [n for n, _ in patches] == ['a', 'b@0,0', 'b@0,32', 'b@32,0', 'b@32,32']
  assert patches[0][1].shape == (50, 70, 3) and patches[1][1].shape == (32, 32, 3)
  capped, counts = crack_free.crack_free_patches(pairs, size=32, margin=8, max_patches=3)
  assert [n for n, _ in capped] == ['a', 'b@0,32', 'b@32,32'] and counts['kept'] == 3


def test_fp_length_per_mp_is_the_skeleton_length_per_megapixel():
  mask = np.zeros((100, 100), bool)
  mask[50, 10:61] = True  # 51 pixels in a row: 50 px long
  mask[20, 80] = True  # a speck: 0 long
  result = crack_free.fp_length_of_masks([mask, np.zeros((100, 100), bool)])
  assert result['length_px'] == pytest.approx(50.0)
  assert result['megapixels'] == pytest.approx(0.02)
  assert result['length_per_mp'] == pytest.approx(2500.0)
  assert result['images'] == 2 and result['images_with_fp'] == 1

  class Fake:
    threshold = 0.9

    def __call__(self, image):
      return np.where(np.asarray(image)[..., 0] > 0, 0.95, 0.5).astype(np.float32)

  image = np.zeros((100, 100, 3), np.uint8)
  image[50, 10:61] = 255
  calls = []
  got = crack_free.fp_length_per_mp(Fake(), [image], progress=calls.append)
  assert got['threshold'] == 0.9 and got['length_per_mp'] == pytest.approx(5000.0)
  assert calls == [1]
  # Above the stored threshold nothing: an explicit one overrides it.
  assert crack_free.fp_length_per_mp(Fake(), [image], threshold=0.99)['length_px'] == 0
  assert math.isclose(
    crack_free.fp_length_per_mp(Fake(), [image], threshold=0.4)['length_px'],
    crack_free.skeleton_length(np.ones((100, 100), bool)),
  )
  with pytest.raises(ValueError):
    crack_free.fp_length_of_masks([])


def test_far_false_positives_count_only_what_lies_beyond_the_margin():
  class Fake:
    threshold = 0.9

    def __call__(self, image):  # crack where the image's red channel is bright
      return np.where(np.asarray(image)[..., 0] > 0, 0.95, 0.1).astype(np.float32)

  gt = np.zeros((100, 100), np.uint8)
  gt[:, 10] = 1  # a labelled crack along column 10: pixels within 16 px are near it
  image = np.zeros((100, 100, 3), np.uint8)
  image[:, 10] = 255  # found: not a false positive
  image[:, 20] = 255  # 10 px off the label: near it, not counted either
  image[40, 50:71] = 255  # 21 pixels in a row far from it: 20 px long
  result = crack_free.far_false_positives(Fake(), [(image, gt)])
  far = 100 * (100 - 27)  # columns 27..99 lie farther than 16 px from column 10
  assert result['megapixels'] == pytest.approx(far / 1e6)
  assert result['length_px'] == pytest.approx(20.0)
  assert result['length_per_mp'] == pytest.approx(20.0 / (far / 1e6))
  assert (result['photos'], result['photos_with_fp'], result['threshold']) == (1, 1, 0.9)
  # A photo without a labelled crack counts whole; nothing predicted: no false positive.
  clean = crack_free.far_false_positives(Fake(), [(np.zeros_like(image), np.zeros_like(gt))])
  assert clean['megapixels'] == pytest.approx(0.01) and clean['length_px'] == 0
  with pytest.raises(ValueError, match='farther than 16 px'):
    crack_free.far_false_positives(Fake(), [(image, np.ones_like(gt))])
