"""What people look at: the reproduction curves (integer epochs, one legend of the table's
labels, the paper's printed figures marked) and pr_curve.png (its legend off the curves)."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from crackjax.evaluation import plots
from crackjax.evaluation.result import Curve, OperatingPoint, PooledPoint, ProtocolResult
from crackjax.paper import report_figures


@pytest.fixture
def saved(monkeypatch):
  """The figures the plotting functions save, drawn, instead of their files."""
  figures = []

  def keep(fig, path, **kwargs):
    FigureCanvasAgg(fig).draw()  # as savefig draws it
    figures.append(fig)

  monkeypatch.setattr(Figure, 'savefig', keep)
  return figures


def _runs(group: str, table: int, epochs: int, seeds=(0, 1)):
  rng = np.random.default_rng(0)
  return [
    {
      'table': table,
      'group': group,
      'seed': seed,
      'epochs': [
        {
          'epoch': e,
          'results': {
            'strict': {'ods': {'f1': 0.5 + 0.02 * e + rng.normal(0, 0.01)}, 'ois': {'f1': 0.6}}
          },
        }
        for e in range(1, epochs + 1)
      ],
    }
    for seed in seeds
  ]


def _stars(ax) -> set[tuple[float, float]]:
  return {
    (float(line.get_xdata()[0]), round(float(line.get_ydata()[0]), 2))
    for line in ax.get_lines()
    if line.get_marker() == '*'
  }


def test_curves_have_integer_epochs_one_legend_and_the_papers_figures(saved, tmp_path):
  runs = _runs('table1:wce_xie', 1, 12) + _runs('table1:wce_power_0.5_g1_2', 1, 12)
  assert report_figures.plot_curves(tmp_path / 'c.png', runs, 1, 'strict')
  (fig,) = saved
  ods, ois = fig.axes
  assert not ods.get_legend() and not ois.get_legend() and len(fig.legends) == 1
  names = [t.get_text() for t in fig.legends[0].get_texts()]
  # The table's labels (report_tables.method_label), then the markers' meaning.
  assert names[:2] == ['wce_xie', 'wce_power (β=0.5, γ=1/2)']
  assert names[2:] == ["the paper's figure (its table)", 'RSF (paper)']
  for ax in (ods, ois):
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
  # Table I prints wce_xie at 5, 10, 20 and 70 epochs and wce_power (0.5, 1/2) at 10 and 20:
  # those within the 12 trained epochs are marked, at the printed F1.
  assert _stars(ods) == {(5, 72.49), (10, 77.75), (10, 85.44)}
  assert _stars(ois) == {(5, 76.53), (10, 80.39), (10, 87.35)}
  rsf = [line for line in ods.get_lines() if line.get_linestyle() == '--']
  assert [round(float(line.get_ydata()[0]), 2) for line in rsf] == [79.49]


def test_assumed_epochs_are_not_marked(saved, tmp_path):
  # Table VII's comparison models: the paper prints their F1 but not how long they trained.
  assert report_figures.plot_curves(tmp_path / 'c.png', _runs('table7:fcn8s', 7, 70), 7, 'strict')
  (fig,) = saved
  assert not _stars(fig.axes[0])
  assert [t.get_text() for t in fig.legends[0].get_texts()][0] == 'FCN8s'


def test_pr_curve_legend_is_off_the_axes(saved, tmp_path):
  r = np.linspace(0, 1, 50)
  point = OperatingPoint(precision=0.8, recall=0.7, f1=0.75, threshold=0.5)
  curve = Curve(thresholds=tuple(r), precision=tuple(1 - 0.5 * r), recall=tuple(r), f1=tuple(r))
  results = {
    p: ProtocolResult(
      protocol=p,
      protocol_description=p,
      num_thresholds=50,
      tail_thresholds=False,
      grid_size=50,
      ods=point,
      ods_grid=point,
      ois=PooledPoint(precision=0.8, recall=0.7, f1=0.75),
      ois_mean_f1=0.75,
      ap=0.8,
      fixed=point,
      curve=curve,
    )
    for p in ('strict', 'tolerance')
  }
  plots.plot_pr_curves(tmp_path / 'pr.png', results, 'test')
  (fig,) = saved
  (ax,) = fig.axes
  assert ax.get_legend() is None and len(fig.legends) == 1
  renderer = fig.canvas.get_renderer()
  legend_box = fig.legends[0].get_window_extent(renderer)
  assert not legend_box.overlaps(ax.get_window_extent(renderer))
