"""What an evaluation scores and writes: `EvalPlan`, derived once from the config by
`crackjax.experiment.build` (scoring reads these fields, never the config's)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from crackjax.evaluation.protocols import get_protocol

if TYPE_CHECKING:
  from crackjax.evaluation.width_rule import WidthRule


@dataclasses.dataclass(frozen=True)
class EvalPlan:
  """The data, protocols, grids and outputs of an evaluation.

  Attributes:
    dataset: the dataset's registered name (``config.data.name``).
    folder: the image and mask folders of a ``crack_folder`` dataset as plain JSON data
      (``config.data.folder``), None for the others: with `dataset` and the split, what
      makes two evaluations score the same images (`trainer.eval_records.data_key`).
    split: the split scored by default (``config.data.test_split``).
    protocols: every protocol scored (``config.eval.protocols``), the first one's ODS in the
      log line and threshold.json from the first that writes one.
    curve_protocols: the cheaper set of the periodic evaluation's other epochs
      (``config.eval.curve_protocols``; empty: `protocols`).
    num_thresholds: the uniform part of the grid of the protocols that follow the config
      (``config.eval.num_thresholds``; None, and the other protocols: each protocol's own,
      `thresholds_of`).
    tail_thresholds: whether the grids add the thresholds near 0 and 1.
    num_qualitative: test images in qualitative.png.
    save_probability_maps: whether probs/<name>.png are written.
    scales: the test-time scales every photo is predicted at, the maps averaged
      (``config.eval.scales``; (1.0,): as it is, `inference.test_time_average`).
    flip: also predict each copy mirrored (``config.eval.flip``).
    width_rule: None, or each photo predicted again at half size where its cracks come out
      wide (`width_rule.WidthRule`: its width and the stored threshold). Never from a config
      (the training's evaluation chooses its threshold): crackjax-evaluate sets it.
    store_degenerate_threshold: write threshold.json even when the best threshold is
      degenerate (``config.eval.store_degenerate_threshold``; `result.degenerate_threshold`).
    threshold_over: how threshold.json's threshold is chosen (``config.eval.threshold_over``,
      `crackjax.evaluation.threshold_choice`: 'pooled' or a mixture's 'datasets' alike).
    background_workers: processes counting the periodic evaluation beside training (0: in
      the training loop).
    grids: (protocol, the size of its grid's uniform part) of every protocol of `protocols`
      and `curve_protocols`: ``num_thresholds`` for the protocols that follow the config,
      each other protocol's own (`Protocol.num_thresholds`). Computed when the plan is made
      (not an argument): scoring reads it, with no lookup back.
  """

  dataset: str
  folder: Any
  split: str
  protocols: tuple[str, ...]
  curve_protocols: tuple[str, ...] = ()
  num_thresholds: int | None = None
  tail_thresholds: bool = True
  num_qualitative: int = 0
  save_probability_maps: bool = False
  background_workers: int = 0
  scales: tuple[float, ...] = (1.0,)
  store_degenerate_threshold: bool = False
  threshold_over: str = 'pooled'
  flip: bool = False
  width_rule: WidthRule | None = None
  grids: tuple[tuple[str, int], ...] = dataclasses.field(init=False)

  def __post_init__(self) -> None:
    names = dict.fromkeys((*self.protocols, *self.curve_protocols))
    grids = tuple((p, get_protocol(p).num_thresholds(self.num_thresholds)) for p in names)
    object.__setattr__(self, 'grids', grids)

  def thresholds_of(self, protocol: str) -> int:
    """The number of uniform thresholds of `protocol`'s grid under this plan (`grids`; a
    protocol the plan does not score, as it would have it)."""
    sizes = dict(self.grids)
    if protocol in sizes:
      return sizes[protocol]
    return get_protocol(protocol).num_thresholds(self.num_thresholds)

  def with_protocols(self, protocols: tuple[str, ...]) -> EvalPlan:
    return dataclasses.replace(self, protocols=tuple(protocols))
