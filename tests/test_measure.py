"""Tests of crackjax.deploy.measure (with mask_analysis, measure_summary): crack length, width
and segments of a binary mask.

Expectations are worked out by hand from the conventions in the modules' docstrings.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from skimage.draw import circle_perimeter
from skimage.morphology import skeletonize

from crackjax.deploy import mask_analysis, measure, measure_summary

REPO = Path(__file__).resolve().parents[1]

H, W = 64, 96


def _blank(h: int = H, w: int = W) -> np.ndarray:
  return np.zeros((h, w), dtype=bool)


def _no_nan(result: dict) -> None:
  for key, value in result.items():
    assert value is None or isinstance(value, int | float), key
    assert value is None or math.isfinite(value), key


def test_empty_mask():
  result = measure.measure_cracks(_blank())
  assert result == {
    'crack_pixels': 0,
    'crack_ratio': 0.0,
    'segments': 0,
    'length_px': 0.0,
    'length_mm': None,
    'mean_width_px': 0.0,
    'max_width_px': 0.0,
    'mean_width_mm': None,
    'max_width_mm': None,
    'speckles': 0,
    'speckle_pixels': 0,
    'not_road': None,
  }
  _no_nan(result)
  _no_nan(measure.measure_cracks(_blank(), mm_per_pixel=0.5))
  assert measure.measure_cracks(_blank(), mm_per_pixel=0.5)['length_mm'] == 0.0


def test_horizontal_line():
  mask = _blank()
  mask[20, 10:60] = True  # 50 pixels, 49 unit steps between their centres.
  result = measure.measure_cracks(mask)
  assert result['crack_pixels'] == 50
  assert result['crack_ratio'] == pytest.approx(50 / (H * W))
  assert result['length_px'] == pytest.approx(49.0)
  assert result['mean_width_px'] == 1.0  # d = 1 on a 1-pixel line: 2 * 1 - 1.
  assert result['max_width_px'] == 1.0
  assert result['segments'] == 1
  _no_nan(result)
  # Plain Python numbers, JSON friendly.
  assert type(result['crack_pixels']) is int and type(result['segments']) is int
  assert json.loads(json.dumps(result)) == result


def test_bar_five_wide():
  mask = _blank()
  mask[20:25, 15:75] = True  # 5 rows x 60 columns, away from the border.
  result = measure.measure_cracks(mask)
  assert result['crack_pixels'] == 300
  assert result['segments'] == 1
  # The skeleton is the centre row, shortened by thinning at each end by about the half-width
  # (2 px), possibly ending in a short spur into a corner. The centre line alone is at most
  # 60 - 1 = 59 long and at least 60 - 1 - 2 * (2 + 1) = 53 (half-width plus one pixel of slack
  # per end); a spur adds at most one diagonal step of the slack back. Allow 52..60.
  assert 52.0 <= result['length_px'] <= 60.0
  # Centre row: distance 3 to the nearest background row, 2 * 3 - 1 = 5. Only the few skeleton
  # pixels near the ends see a nearer background, so the mean is within 0.5 of 5.
  assert result['max_width_px'] == 5.0
  assert result['mean_width_px'] == pytest.approx(5.0, abs=0.5)
  assert result['mean_width_px'] <= 5.0


def test_mask_without_background():
  # All crack: the image border bounds the crack, as for the bar above inside a frame (measure
  # calls such a mask no road photo and does not measure it: test_not_a_road_photo_...).
  a = mask_analysis.analyse(np.ones((5, 60), dtype=bool))
  assert a.widths.max() == 5.0
  assert 52.0 <= float(a.axial.sum() + math.sqrt(2) * a.diagonal.sum()) <= 60.0


def test_crack_off_the_border_is_not_cut():
  # A 5-wide vertical bar through the top edge: the border is not background, so the skeleton
  # pixels near the top still see the full width (the bar's sides are the nearest background).
  mask = _blank()
  mask[:40, 20:25] = True
  result = measure.measure_cracks(mask)
  assert result['max_width_px'] == 5.0
  assert result['mean_width_px'] == pytest.approx(5.0, abs=0.5)


def test_diagonal_line():
  mask = _blank()
  mask[10:50, 20:60] = np.eye(40, dtype=bool)  # 40 pixels, 39 diagonal steps.
  result = measure.measure_cracks(mask)
  assert result['length_px'] == pytest.approx(39 * math.sqrt(2), abs=1e-6)
  assert result['segments'] == 1
  assert result['mean_width_px'] == 1.0
  assert result['max_width_px'] == 1.0


def test_anti_diagonal_line():
  mask = _blank()
  mask[10:30, 20:40] = np.fliplr(np.eye(20, dtype=bool))
  assert measure.measure_cracks(mask)['length_px'] == pytest.approx(19 * math.sqrt(2), abs=1e-6)


def test_ring():
  mask = _blank(80, 80)
  rr, cc = circle_perimeter(40, 40, 30)
  mask[rr, cc] = True
  result = measure.measure_cracks(mask)
  assert result['length_px'] == pytest.approx(2 * math.pi * 30, rel=0.10)
  assert result['segments'] == 1
  assert result['max_width_px'] == 1.0


def test_two_lines_add():
  mask = _blank()
  mask[10, 5:55] = True  # 50 pixels: 49.
  mask[40, 30:50] = True  # 20 pixels: 19.
  result = measure.measure_cracks(mask, min_length=0)  # every component
  assert result['segments'] == 2
  assert result['crack_pixels'] == 70
  assert result['length_px'] == pytest.approx(49.0 + 19.0)


def test_isolated_pixel_has_no_length():
  mask = _blank()
  mask[30, 30] = True
  result = measure.measure_cracks(mask, min_length=0)  # every component
  assert result['length_px'] == 0.0
  assert result['segments'] == 1
  assert result['mean_width_px'] == 1.0


def test_diagonal_touch_is_one_segment():
  mask = _blank()
  mask[10, 10:20] = True
  mask[11, 20:30] = True  # Touches the first line only diagonally at (10, 19)-(11, 20).
  result = measure.measure_cracks(mask, min_length=0)  # every component
  assert result['segments'] == 1


def test_speckle_is_left_out_of_the_measurements():
  """The speckle filter (measure.DEFAULT_MIN_LENGTH): components whose skeleton is shorter
  count in nothing but `speckles` / `speckle_pixels`."""
  crack = _blank()
  crack[10, 5:55] = True  # 50 px: length 49, a crack
  crack[30:36, 20:26] = True  # a 6 x 6 blob: skeleton of a few px, speckle
  speckle = _blank()
  speckle[50, 40:50] = True  # 10 px: length 9, speckle
  speckle[5, 80] = speckle[60, 90] = True  # single pixels: length 0
  mask = crack | speckle
  result = measure.measure_cracks(mask)
  blob = 36
  assert result['segments'] == 1 and result['speckles'] == 4
  assert result['crack_pixels'] == 50 and result['speckle_pixels'] == blob + 10 + 2
  assert result['crack_ratio'] == pytest.approx(50 / (H * W))
  assert result['length_px'] == pytest.approx(49.0)
  assert result['mean_width_px'] == result['max_width_px'] == 1.0  # not the blob's
  # The same numbers as the crack alone, and 0 keeps every component.
  alone = measure.measure_cracks(crack)
  assert {k: v for k, v in result.items() if 'speckle' not in k} == {
    k: v for k, v in alone.items() if 'speckle' not in k
  }
  everything = measure.measure_cracks(mask, min_length=0)
  assert everything['segments'] == 5 and everything['speckles'] == 0
  assert everything['crack_pixels'] == int(mask.sum())
  assert everything['length_px'] == pytest.approx(mask_analysis.skeleton_length(skeletonize(mask)))
  # The threshold is the constant's, in pixels of skeleton: a 20-px line is 19 long.
  line = _blank()
  line[20, 10:31] = True  # 21 px: length 20
  assert measure.DEFAULT_MIN_LENGTH == 20.0
  assert measure.measure_cracks(line)['segments'] == 1
  line[20, 30] = False  # 20 px: length 19
  assert measure.measure_cracks(line)['speckles'] == 1
  assert measure.measure_cracks(line, min_length=19)['segments'] == 1


def test_the_photo_row_and_the_crack_rows_leave_out_the_same_speckle():
  mask = _blank()
  mask[10, 5:55] = True
  mask[40, 30:45] = True  # 15 px: speckle at 20, a crack at 10
  for min_length in (None, 10.0, 0.0):
    totals, cracks = measure.measure_photo(mask, min_length=min_length)
    assert totals['segments'] == len(cracks)
    assert totals['length_px'] == pytest.approx(sum(c['length_px'] for c in cracks))
    assert totals['crack_pixels'] + totals['speckle_pixels'] == int(mask.sum())
  assert measure.measure_photo(mask)[0]['segments'] == 1
  with pytest.raises(ValueError, match='min_length must be'):
    measure.measure_cracks(mask, min_length=-1)


def test_summary_counts_the_speckles_left_out():
  rows = [{**ROW_A, 'speckles': 30}, {**ROW_B, 'speckles': 1}]
  summary = measure_summary.summarize(rows)
  assert summary['speckles'] == 31
  assert measure_summary.format_summary(summary) == (
    '2 images: crack length 2,402 px (120.1 mm) in 3 segments (31 speckles left out); mean '
    'crack ratio 2.00%; widest 5.0 px (0.25 mm)'
  )


def test_skeleton_length_l_corner():
  # An L-corner: (0, 0)-(0, 1) and (0, 1)-(1, 1) are unit edges; the diagonal (0, 0)-(1, 1) is
  # dropped because the shared 4-neighbour (0, 1) is on the skeleton: 2, not 2 + sqrt(2).
  skel = np.array([[1, 1], [0, 1]], dtype=bool)
  assert mask_analysis.skeleton_length(skel) == pytest.approx(2.0)
  # The same shape for the other diagonal.
  skel = np.array([[0, 1], [1, 1]], dtype=bool)
  assert mask_analysis.skeleton_length(skel) == pytest.approx(2.0)
  # Without the corner pixel the diagonal counts.
  skel = np.array([[1, 0], [0, 1]], dtype=bool)
  assert mask_analysis.skeleton_length(skel) == pytest.approx(math.sqrt(2))
  # A staircase of three steps: 1 + sqrt(2) + 1 with no shared 4-neighbour on the diagonal step.
  skel = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
  assert mask_analysis.skeleton_length(skel) == pytest.approx(2 + math.sqrt(2))


def test_mm_per_pixel_scales():
  mask = _blank()
  mask[20:25, 15:75] = True
  px = measure.measure_cracks(mask)
  mm = measure.measure_cracks(mask, mm_per_pixel=0.5)
  for key in ('crack_pixels', 'crack_ratio', 'segments', 'length_px', 'mean_width_px'):
    assert mm[key] == px[key]
  assert mm['length_mm'] == pytest.approx(0.5 * px['length_px'])
  assert mm['mean_width_mm'] == pytest.approx(0.5 * px['mean_width_px'])
  assert mm['max_width_mm'] == pytest.approx(2.5)  # 5 px.


def test_channel_axis_and_0_1_input():
  mask = np.zeros((H, W, 1), dtype=np.uint8)
  mask[20, 10:60, 0] = 1
  result = measure.measure_cracks(mask)
  assert result['length_px'] == pytest.approx(49.0)
  assert result['crack_pixels'] == 50


@pytest.mark.parametrize(
  'mask, match',
  [
    (np.zeros((4, 4, 3), dtype=bool), r'\(4, 4, 3\)'),
    (np.zeros((16,), dtype=bool), r'\(16,\)'),
    (np.zeros((2, 4, 4), dtype=bool), r'\(2, 4, 4\)'),
    (np.zeros((0, 4), dtype=bool), r'empty'),
    (np.full((4, 4), 0.7), r'bool or 0/1'),
    (np.full((4, 4), 255, dtype=np.uint8), r'bool or 0/1'),
  ],
)
def test_bad_mask_raises(mask, match):
  with pytest.raises(ValueError, match=match):
    measure.measure_cracks(mask)


@pytest.mark.parametrize('mm_per_pixel', [0, 0.0, -0.5, float('nan'), float('inf'), '0.5', True])
def test_bad_mm_per_pixel_raises(mm_per_pixel):
  with pytest.raises(ValueError, match='mm_per_pixel'):
    measure.measure_cracks(_blank(), mm_per_pixel=mm_per_pixel)


def test_csv_fields():
  assert measure.CSV_FIELDS[0] == 'name'
  keys = measure.measure_cracks(_blank()).keys()
  assert sorted(measure.CSV_FIELDS[1:]) == sorted(keys)
  assert len(set(measure.CSV_FIELDS)) == len(measure.CSV_FIELDS)


ROW_A = {
  'name': 'a.png',
  'crack_pixels': 120,
  'crack_ratio': 0.01,
  'segments': 2,
  'length_px': 100.0,
  'length_mm': 5.0,
  'mean_width_px': 2.0,
  'max_width_px': 3.0,
  'mean_width_mm': 0.1,
  'max_width_mm': 0.15,
}
ROW_B = {
  'name': 'b.png',
  'crack_pixels': 900,
  'crack_ratio': 0.03,
  'segments': 1,
  'length_px': 2302.0,
  'length_mm': 115.1,
  'mean_width_px': 4.0,
  'max_width_px': 5.0,
  'mean_width_mm': 0.2,
  'max_width_mm': 0.25,
}


def test_summarize_two_rows():
  summary = measure_summary.summarize([ROW_A, ROW_B])
  assert summary['images'] == 2
  assert summary['length_px'] == pytest.approx(2402.0)
  assert summary['length_mm'] == pytest.approx(120.1)
  assert summary['mean_crack_ratio'] == pytest.approx(0.02)
  assert summary['segments'] == 3
  assert summary['max_width_px'] == 5.0
  assert summary['max_width_mm'] == pytest.approx(0.25)
  assert measure_summary.format_summary(summary) == (
    '2 images: crack length 2,402 px (120.1 mm) in 3 segments; mean crack ratio 2.00%; '
    'widest 5.0 px (0.25 mm)'
  )


def test_summarize_without_mm_everywhere():
  row_b = {**ROW_B, 'length_mm': None, 'mean_width_mm': None, 'max_width_mm': None}
  summary = measure_summary.summarize([ROW_A, row_b])
  assert summary['length_mm'] is None
  assert summary['max_width_mm'] is None
  assert summary['length_px'] == pytest.approx(2402.0)
  assert measure_summary.format_summary(summary) == (
    '2 images: crack length 2,402 px in 3 segments; mean crack ratio 2.00%; widest 5.0 px'
  )


def test_summarize_one_row_singular():
  summary = measure_summary.summarize([{**ROW_B, 'segments': 1}])
  assert measure_summary.format_summary(summary) == (
    '1 image: crack length 2,302 px (115.1 mm) in 1 segment; mean crack ratio 3.00%; '
    'widest 5.0 px (0.25 mm)'
  )


def test_summarize_no_rows():
  summary = measure_summary.summarize([])
  assert summary['images'] == 0
  assert summary['length_px'] == 0.0
  assert summary['mean_crack_ratio'] == 0.0
  assert summary['segments'] == 0
  assert summary['max_width_px'] == 0.0
  _no_nan(summary)
  assert measure_summary.format_summary(summary).startswith('0 images: crack length 0 px')


def test_csv_round_trip_summarize():
  mask = _blank()
  mask[20, 10:60] = True
  rows = [
    {'name': 'line.png', **measure.measure_cracks(mask, mm_per_pixel=0.5)},
    {'name': 'empty.png', **measure.measure_cracks(_blank(), mm_per_pixel=0.5)},
  ]
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=measure.CSV_FIELDS)
  writer.writeheader()
  writer.writerows(rows)
  buffer.seek(0)
  read_back = list(csv.DictReader(buffer))
  assert [r['name'] for r in read_back] == ['line.png', 'empty.png']
  summary = measure_summary.summarize(read_back)  # Strings from the CSV.
  assert summary == measure_summary.summarize(rows)
  assert summary['length_px'] == pytest.approx(49.0)
  assert summary['length_mm'] == pytest.approx(24.5)
  assert summary['segments'] == 1
  assert summary['max_width_px'] == 1.0


# ----------------------------------------------------------------------------- per crack


def _crack(mask, **kwargs):
  [row] = measure.measure_each_crack(mask, **kwargs)
  return row


def test_straight_cracks_are_typed_by_their_axis_to_the_road():
  across = np.zeros((100, 100), bool)
  across[50, 10:90] = True  # the road runs up the photo (direction='vertical')
  row = _crack(across)
  assert (row['type'], row['orientation_deg']) == ('transverse', 90.0)
  assert (row['x0'], row['y0'], row['x1'], row['y1']) == (10, 50, 89, 50)
  assert row['length_px'] == 79.0 and row['mean_width_px'] == row['max_width_px'] == 1.0
  assert row['crack_id'] == 1 and row['severity'] is None and row['length_mm'] is None
  along = across.T
  assert _crack(along)['type'] == 'longitudinal' and _crack(along)['orientation_deg'] == 0.0
  # The same line with the road running across the photo swaps the two.
  assert _crack(across, direction='horizontal')['type'] == 'longitudinal'
  assert _crack(along, direction='horizontal')['type'] == 'transverse'
  diagonal = np.eye(100, dtype=bool)
  row = _crack(diagonal)
  assert row['type'] == 'diagonal' and row['orientation_deg'] == 45.0
  assert row['length_px'] == pytest.approx(99 * np.sqrt(2))


def test_cells_make_alligator_or_block_by_their_size_and_a_speck_is_no_crack():
  grid = np.zeros((100, 100), bool)
  grid[[20, 50, 80], 20:81] = True
  grid[20:81, [20, 50, 80]] = True
  speck = np.zeros((100, 100), bool)
  speck[5, 5:7] = True  # 2 pixels: shorter than min_length
  row = _crack(grid | speck)
  # Four cells of 29 px: 58 mm at the assumed 2 mm/px, under the manual's 0.3 m.
  assert row['type'] == 'alligator' and row['cells'] == 4 and row['branch_points'] == 5
  # The same grid photographed closer in: 29 px of 20 mm are 0.58 m cells, blocks.
  assert _crack(grid, mm_per_pixel=20.0)['type'] == 'block'
  assert measure.measure_each_crack(speck) == []
  assert len(measure.measure_each_crack(speck, min_length=0)) == 1


def test_branch_points_alone_never_make_a_pattern():
  # One crack across the road with five spurs (five branch points): transverse.
  across = np.zeros((120, 200), bool)
  across[60, 10:190] = True
  for x in (30, 60, 90, 120, 150):
    across[45:60, x] = True
  row = _crack(across)
  assert row['branch_points'] == 5 and row['cells'] == 0 and row['type'] == 'transverse'
  # A single loop (one cell) and two cells keep the axis' type.
  loop = np.zeros((100, 200), bool)
  loop[50, 5:195] = True
  loop[40, 60:100] = True
  loop[40:51, [60, 100]] = True
  assert _crack(loop)['cells'] == 1 and _crack(loop)['type'] == 'transverse'


def test_the_rule_on_labelled_shapes():
  spec = importlib.util.spec_from_file_location('crack_types', REPO / 'bench' / 'crack_types.py')
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)
  new, _ = bench.confusion(per_type=4)
  for kind in ('longitudinal', 'transverse', 'diagonal'):
    # A single crack, spurs or not, is never a pattern of cells.
    assert not new[kind].get('alligator') and not new[kind].get('block'), new
    assert new[kind].get(kind, 0) >= 3
  assert new['alligator'].get('alligator', 0) >= 3 and new['block'].get('block', 0) >= 3


def test_severity_by_mean_width_in_millimetres():
  bar = np.zeros((100, 200), bool)
  bar[38:63, 20:180] = True  # 25 px wide at 1 mm/px: over 19 mm
  row = _crack(bar, mm_per_pixel=1.0)
  assert row['mean_width_mm'] == pytest.approx(25, abs=0.1) and row['severity'] == 'high'
  assert row['type'] == 'transverse'
  assert _crack(bar, mm_per_pixel=0.5)['severity'] == 'moderate'  # 12.5 mm
  assert _crack(bar, mm_per_pixel=0.2)['severity'] == 'low'  # 5 mm
  assert [measure.severity(w) for w in (6.0, 6.01, 19.0, 19.01, None)] == [
    'low',
    'moderate',
    'moderate',
    'high',
    None,
  ]


def test_each_crack_is_its_own_row_and_bad_arguments_are_named():
  mask = np.zeros((60, 60), bool)
  mask[10, 5:55] = True
  mask[20:58, 30] = True
  rows = measure.measure_each_crack(mask)
  assert [r['crack_id'] for r in rows] == [1, 2]
  assert sorted(r['type'] for r in rows) == ['longitudinal', 'transverse']
  assert all(set(r) == set(measure.CRACK_FIELDS) for r in rows)
  with pytest.raises(ValueError, match='direction must be one of'):
    measure.measure_each_crack(mask, direction='up')
  with pytest.raises(ValueError, match='min_length must be'):
    measure.measure_each_crack(mask, min_length=-1)
  with pytest.raises(ValueError, match='mm_per_pixel must be > 0'):
    measure.measure_each_crack(mask, mm_per_pixel=0)


def test_measure_photo_is_both_measurements_from_one_analysis():
  mask = np.zeros((60, 60), bool)
  mask[10, 5:55] = True
  mask[20:58, 28:31] = True
  totals, cracks = measure.measure_photo(mask, mm_per_pixel=0.5, min_length=10)
  assert totals == measure.measure_cracks(mask, mm_per_pixel=0.5)
  assert cracks == measure.measure_each_crack(mask, mm_per_pixel=0.5, min_length=10)
  with pytest.raises(ValueError, match='direction must be one of'):
    measure.measure_photo(mask, direction='up')


def _min_length_bench():
  import importlib.util
  from pathlib import Path

  path = Path(__file__).resolve().parents[1] / 'bench' / 'min_length.py'
  spec = importlib.util.spec_from_file_location('bench_min_length', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_min_length_bench_counts_components_and_their_length_by_hand():
  bench = _min_length_bench()
  mask = np.zeros((40, 60), bool)
  mask[5, 2:32] = True  # a 30-px crack
  mask[20, 10:14] = True  # a 4-px fragment
  mask[30, 40] = True  # a speck
  lengths = np.sort(bench.component_lengths(mask))
  assert lengths[0] < 1 and 3 <= lengths[1] <= 4 and 29 <= lengths[2] <= 30
  gt = [np.asarray([30.0]), np.asarray([50.0, 2.0])]
  pred = [np.asarray([30.0, 3.0, 1.0, 1.0]), np.asarray([50.0, 25.0])]
  rows = bench.table(gt, pred, [0, 5]).splitlines()
  assert rows[2] == '| 0 | 0.0% | 0.00% | 1.50 | 0.0% | 0.00% | 3.00 | 55 | 2.50 |'  # 4/1, 2/2
  # L = 5: GT drops the 2-px piece (1 of 3 components, 2 of 82 px); prediction drops three of
  # six components (5 of 110 px); cracks per image 1 and 1 vs 1 and 2; ratios 1 and 2; the
  # predicted length per image (30 + 75) / 2.
  assert rows[3] == '| 5 | 33.3% | 2.44% | 1.00 | 50.0% | 4.55% | 1.50 | 52 | 1.50 |'


def test_min_length_bench_on_a_folder_with_a_released_model(tmp_path, capsys):
  """--model=NAME --folder=IMAGES:MASKS: a model file's prediction, as crackjax-predict's."""
  from tests import fixtures

  bench = _min_length_bench()
  images, masks = fixtures.make_fake_folder(tmp_path / 'roads', n=3, size=(32, 48))
  (masks / 'img_02.png').rename(masks / 'img_02_x.png')  # no mask of its name: left out
  assert [i.name for i, _ in bench.folder_pairs(images, masks)] == ['img_00.jpg', 'img_01.jpg']
  folder = f'--folder={images}:{masks}'
  args = ['--model=crackforest-unet-cpu', folder, '--lengths=0,20', '--limit=1']
  assert bench.main(args) == 0
  out = capsys.readouterr().out
  assert out.startswith(f'{images}:{masks}: 1 images; model crackforest-unet-cpu, threshold ')
  rows = [line for line in out.splitlines() if line.startswith('| ')]
  assert [r.split('|')[1].strip() for r in rows[1:]] == ['0', '20']
  with pytest.raises(SystemExit, match='give --workdir=RUN, or --model with --folder'):
    bench.main(['--model=crackforest-unet-cpu'])


def _per_component_reference(mask, min_length):
  """Each component's length measured in its own bounding box (the code before issue 38), of
  those at least `min_length` long, in label order."""
  from scipy import ndimage

  labels, _ = ndimage.label(mask, structure=np.ones((3, 3), bool))
  skeleton = skeletonize(mask)
  found = []
  for index, box in enumerate(ndimage.find_objects(labels), start=1):
    bones = skeleton[box] & (labels[box] == index)
    length = mask_analysis.skeleton_length(bones)
    if bones.any() and length >= min_length:
      found.append(length)
  return found


def test_components_measured_in_one_pass_match_each_measured_alone():
  # The lengths of all components come from one pass over the skeleton (a photo of speckle
  # spent its time measuring each component in its bounding box); they are the same.
  from scipy import ndimage

  rng = np.random.default_rng(3)
  for trial in range(20):
    h, w = rng.integers(5, 80, 2)
    field = ndimage.gaussian_filter(rng.standard_normal((h, w)), rng.uniform(0.6, 3))
    mask = field > np.quantile(field, rng.uniform(0.4, 0.9))
    for min_length in (0.0, 6.0):
      totals, cracks = measure.measure_photo(mask, min_length=min_length)
      reference = _per_component_reference(mask, min_length)
      assert [c['length_px'] for c in cracks] == reference
      if min_length == 0:
        assert totals['length_px'] == mask_analysis.skeleton_length(skeletonize(mask)), trial
      assert totals['length_px'] == pytest.approx(sum(reference)), trial
      assert totals['segments'] == len(cracks)


def test_skeleton_distances_in_bands_are_the_whole_transforms(monkeypatch):
  from scipy import ndimage

  monkeypatch.setattr(mask_analysis, '_BAND_PIXELS', 300)  # bands of a few rows, margins exceeded
  rng = np.random.default_rng(4)
  for trial in range(20):
    h, w = rng.integers(1, 100, 2)
    field = ndimage.gaussian_filter(rng.standard_normal((h, w)), rng.uniform(0.5, 25))
    mask = field > np.quantile(field, rng.uniform(0.05, 0.95))
    if trial == 0:
      mask[:] = True  # no background: the border bounds the crack
    pixels = np.flatnonzero(mask)
    if mask.all():
      whole = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
    else:
      whole = ndimage.distance_transform_edt(mask)
    np.testing.assert_array_equal(
      mask_analysis.skeleton_distances(mask, pixels), whole.ravel()[pixels]
    )


def test_measuring_names_each_stage_as_it_begins():
  mask = np.zeros((20, 30), bool)
  mask[5, 2:28] = True
  seen = []
  measure.measure_photo(mask, progress=seen.append)
  assert seen == list(measure.STAGES)


def test_thick_components_thinned_apart_give_the_same_skeleton(monkeypatch):
  # Zhang-Suen thinning passes over the whole image once per pixel of the widest blob's
  # half-width; thick components are thinned each in its own box, exactly as together.
  from scipy import ndimage

  monkeypatch.setattr(mask_analysis, '_THICK', 6)
  rng = np.random.default_rng(5)
  thick_seen = 0
  for trial in range(30):
    h, w = rng.integers(8, 120, 2)
    field = ndimage.gaussian_filter(rng.standard_normal((h, w)), rng.uniform(0.5, 10))
    mask = field > np.quantile(field, rng.uniform(0.2, 0.95))
    labels, segments = ndimage.label(mask, structure=np.ones((3, 3), bool))
    core = ndimage.binary_erosion(mask, np.ones((6, 6), bool))
    thick_seen += bool(core.any() and segments > 1)
    np.testing.assert_array_equal(
      mask_analysis.skeleton_of(mask, labels, segments), skeletonize(mask), err_msg=str(trial)
    )
  assert thick_seen >= 5  # the split was exercised, beside thin components


# ------------------------------------------------------------------ issue 78: edges of a photo


def test_a_crossing_has_no_main_axis_and_is_diagonal():
  """A "+" crossing (docs/prediction.md: its axis is undefined, it reads as diagonal) was typed
  transverse; an "x" too is diagonal; a crack across the road with a short spur keeps its axis."""
  plus = np.zeros((100, 100), bool)
  plus[50, 10:90] = True
  plus[10:90, 50] = True
  row = _crack(plus)
  assert (row['type'], row['orientation_deg']) == ('diagonal', 45.0)
  assert _crack(plus, direction='horizontal')['type'] == 'diagonal'
  # Arms of 80 and 70 px: still no main axis (variances 0.67 of each other).
  shorter = np.zeros((100, 100), bool)
  shorter[50, 10:90] = True
  shorter[15:85, 50] = True
  assert _crack(shorter)['type'] == 'diagonal'
  cross = np.eye(100, dtype=bool) | np.fliplr(np.eye(100, dtype=bool))
  assert _crack(cross)['type'] == 'diagonal'
  spur = np.zeros((100, 100), bool)
  spur[50, 10:90] = True
  spur[50:75, 50] = True
  assert (_crack(spur)['type'], _crack(spur)['branch_points']) == ('transverse', 1)


def test_not_a_road_photo_is_flagged_and_not_measured():
  """An all-black frame was one transverse crack 479 px wide with a crack ratio of 1.0: a mask
  almost all crack, or a photo almost all one value, is flagged and not measured."""
  black = np.zeros((320, 480, 3), np.uint8)
  everything = np.ones((320, 480), bool)  # what a model made of it
  row, cracks = measure.measure_photo(everything, photo=black)
  assert row['not_road'] == 'not a road photo: almost all of it crack (100.0% of its pixels)'
  assert cracks == [] and row['segments'] == 0 and row['speckles'] == 0
  assert all(row[k] is None for k in ('crack_pixels', 'crack_ratio', 'length_px', 'max_width_px'))
  assert set(row) == set(measure.MEASURE_FIELDS)
  assert measure.measure_cracks(everything)['not_road'] == row['not_road']
  assert measure.measure_each_crack(everything) != []  # the per-crack rule alone: unchanged
  # 80% crack is no road; 79% still measured (a close-up of a wide crack).
  mask = np.zeros((100, 100), bool)
  mask[:80] = True
  assert measure.not_road(mask).startswith('not a road photo: almost all of it crack (80.0%')
  mask[79] = False
  assert measure.not_road(mask) is None
  # A blank frame the model finds nothing in: one value (any bit depth).
  row, cracks = measure.measure_photo(np.zeros((320, 480), bool), photo=black)
  assert row['not_road'] == (
    'not a road photo: almost all one value (100.0% of its pixels within 4 levels of one colour)'
  )
  blank = np.zeros((8, 8), bool)
  assert measure.not_road(blank, np.full((8, 8, 3), 40000, np.uint16))
  assert measure.not_road(blank, np.full((8, 8, 3), 0.5, np.float32))
  # A road: texture, a crack; measured as before.
  rng = np.random.default_rng(0)
  road = (120 + rng.normal(0, 18, (320, 480, 3))).clip(0, 255).astype(np.uint8)
  mask = np.zeros((320, 480), bool)
  mask[100, 50:400] = True
  row, cracks = measure.measure_photo(mask, photo=road)
  assert row['not_road'] is None and row['segments'] == len(cracks) == 1


def test_a_photo_not_of_a_road_is_counted_apart_in_the_summary(tmp_path):
  from crackjax.deploy import predict_outputs

  flagged = {'name': 'black.png', **measure.measure_cracks(np.ones((32, 48), bool))}
  rows = [{**ROW_A, 'not_road': None}, flagged]
  summary = measure_summary.summarize(rows)
  assert (summary['images'], summary['not_road'], summary['segments']) == (2, 1, 2)
  assert summary['mean_crack_ratio'] == pytest.approx(0.01) and summary['max_width_px'] == 3.0
  assert measure_summary.format_summary(summary) == (
    '2 images, 1 not a road photo (not measured): crack length 100 px (5.0 mm) in 2 segments; '
    'mean crack ratio 1.00%; widest 3.0 px (0.15 mm)'
  )
  # measurements.csv's cells: the reason, the figures empty; read back, the same summary.
  text = predict_outputs.csv_table(list(measure.CSV_FIELDS), rows)
  read_back = list(csv.DictReader(io.StringIO(text)))
  assert read_back[1]['not_road'] == flagged['not_road'] and read_back[1]['crack_ratio'] == ''
  assert measure_summary.summarize(read_back) == summary
