"""Tables I-VIII of Li, Wang, Tian and Qi (IEEE T-Cybernetics 2021) as rows: each table's
training settings and its rows, read on first use.

The figures are data, ``crackjax/paper/data/table<T>.csv``, one file per table;
`crackjax.paper.table_rules` reads a file and holds the rules that make a printed line a row
(its key, its loss, its epochs where the paper gives none, the dagger loss `DAGGER_LOSS`,
the paper's ambiguities and how they are resolved). This module holds the tables' training
settings (`SETTINGS`), the `Row` and the one loader, `table_rows`: it makes a table's rows on
first use and keeps them, so importing this module reads nothing. `TABLES` (Tables I-IV) and
`COMPARE_TABLES` (Tables V-VIII) are mappings of table number to rows, read on first use too.

Every row of the eight result tables is a `Row`: its model, its loss (weighting family of eq.
4-7, beta, gamma, base, Laplace smoothing), the holistic loss's a and b (eq. 8), the epoch
count, and the paper's figures (ODS and OIS precision, recall and F1, mean (std) over 5 runs, in
percent as printed; training time as printed). `configs/paper_tables.py` (`apply_row`) sets a
row's fields on a config and `configs/table1.py` ... `table4.py` turn a row into a training
config (`--config=configs/table1.py:wce_exp_0.75_e10`, optionally `,cpu` / `,smoke`).

  Table I   CrackForest  (§IV-A)  17 rows: RSF + 16 trainable
  Table II  AigleRN      (§IV-B)  14 rows: RSF + 13 trainable
  Table III Crack360     (§IV-C)  13 rows: RSF + 12 trainable
  Table IV  BJN260       (§IV-D)  12 rows: RSF + 11 trainable

Rows that differ only in epochs share a `training_group`: train the group once to its longest
epoch count and evaluate the epoch checkpoints of the shorter rows (constant Adam step size, no
schedule depends on num_epochs; keep enough checkpoints, `max_checkpoints_to_keep`).

Laplace smoothing. The paper smooths alpha only where marked `*` (AigleRN: crops may hold no
crack pixel, so 1 - alpha = 0 in eq. 4-5). crackjax always smooths it,
alpha = (N_bg + 1) / (N + 2) (`crackjax.losses.background_ratio`), so `laplace` is recorded
as data only and every row trains with smoothing. For the unstarred rows this changes q by a
relative amount of about 1 / N_crack for xie/power/log (N_crack: crack pixels in the batch,
thousands here) and about 4.6 / N for exp (N: pixels in the batch, ~3e5): far below the
run-to-run std of the tables, so the unstarred rows are reproduced up to that negligible
difference. Only for a crack-free batch would unsmoothed xie/power/log be undefined (q = inf);
exp is finite either way, which is why the paper needs no `*` on AigleRN's exp beta=1 rows.

Tables V-VIII (§IV-E, comparison with other models) are in `COMPARE_TABLES` (`TABLES` holds
Tables I-IV: the paper prints the two groups with different columns); their rows are `Row`s too,
with F1 only (`Prf.p`, `Prf.r` None) and the model's printed cost (`params`, `gflops`, `fps`).
`rows_by_key`, `training_groups` and `table_rows` take any table 1-8. Each row is a model of
`crackjax.models.MODELS` with its original loss or the paper's dagger variant
(`table_rules.DAGGER_LOSS`: the exponential WCE with the printed beta), the paper's ODS and OIS
F1, parameters, GFLOPS, training time TT and FPS as printed. A row trains with the settings of
the Table I-IV of its dataset (`table_rules.COMPARE_BASE`, `SETTINGS`: batch, steps per epoch,
crops, noise, Adam step size; the paper states no other settings for the comparison models);
`configs/table5.py` ... `table8.py` (via configs/compare.py) build the configs,
`configs/paper_tables.py` (`apply_compare_row`) sets the table's fields.

  Table V    CrackForest   4 rows   U-Net, U-CliqueNet, each original and dagger
  Table VI   AigleRN       4 rows   the same
  Table VII  Crack360     18 rows   nine models, each original and dagger
  Table VIII BJN260       15 rows   nine models original, six dagger (no HED, SegNet or
                                    DeepCrack dagger row is printed)

41 rows in all, as the issue says. A row's config needs only the model's name and
configs/compare.py's entry for it, not the model itself (`model_implemented` says whether
crackjax.models has it: CrackSeg and U-CliqueNet were written at the same time as these tables).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterator, Mapping, Sequence

from crackjax.paper import table_rules

# ------------------------------------------------------------------------------ dataset settings


@dataclasses.dataclass(frozen=True)
class TableSettings:
  """Training settings shared by every row of one table (§IV and its subsections).

  Attributes:
    table: table number (1-4).
    dataset: key of `crackjax.data.registry.DATASETS`.
    widths: U-Net channel widths of the five stages.
    steps_per_epoch: optimizer steps per epoch.
    batch_size: global batch size.
    input_size: (H, W) random training crops, or None for full images.
    noise_std: std of the Gaussian noise added to training images in [0, 1].
    augment: whether the zhixuhao/unet affine augmentation is on (configs/base.py values).
    learning_rate: Adam step size.
    source: where each value comes from.
  """

  table: int
  dataset: str
  widths: tuple[int, ...]
  steps_per_epoch: int
  batch_size: int
  input_size: tuple[int, int] | None
  noise_std: float
  augment: bool
  learning_rate: float
  source: str


_PAPER_DEFAULTS = (
  '§IV "Hyper-parameters": batch 2, widths [64, 128, 256, 512, 1024], Adam 3e-4, 300 steps '
  'per epoch, augmentation as zhixuhao/unet "unless otherwise specified".'
)


def _settings(
  table: int,
  dataset: str,
  source: str,
  *,
  widths: tuple[int, ...] = (64, 128, 256, 512, 1024),
  steps_per_epoch: int = 300,
  input_size: tuple[int, int] | None = None,
  noise_std: float = 0.0,
) -> TableSettings:
  """A table's settings: the paper's defaults (`_PAPER_DEFAULTS`) but where its subsection
  says otherwise (`source`: what it says)."""
  return TableSettings(
    table=table,
    dataset=dataset,
    widths=widths,
    steps_per_epoch=steps_per_epoch,
    batch_size=2,
    input_size=input_size,
    noise_std=noise_std,
    augment=True,
    learning_rate=3e-4,
    source=f'{_PAPER_DEFAULTS} {source}',
  )


SETTINGS: dict[int, TableSettings] = {
  1: _settings(
    1,
    'crackforest',
    '§IV-A: full 480x320 images, 60/40 split; as configs/crackforest_exp.py.',
  ),
  2: _settings(
    2,
    'aiglern',
    '§IV-B: widths [32, ..., 512], input "304x448" (W x H, so (H, W) = (448, 304)), noise '
    'N(0, 0.01) read as variance 0.01 (std 0.1), then the usual augmentation; "200 steps per '
    'epoch" is stated for the 50-epoch baseline and applied to every row, as '
    'configs/aiglern_exp.py does (the paper is silent for the other rows; the printed times, '
    '18-19 s per epoch for every row, support one epoch length).',
    widths=(32, 64, 128, 256, 512),
    steps_per_epoch=200,
    input_size=(448, 304),
    noise_std=0.1,
  ),
  3: _settings(
    3,
    'crack360',
    '§IV-C: train CrackTree260 (800x600) cropped to 512x512, test CRKWH100; steps per epoch '
    'not restated (paper default 300), as configs/crack360_exp.py.',
    input_size=(512, 512),
  ),
  4: _settings(
    4,
    'bjn260',
    '§IV-D: full 480x320 images, 200 train / 60 test; nothing else restated, as '
    'configs/bjn260_exp.py.',
  ),
}

# ------------------------------------------------------------------------------------------ rows


@dataclasses.dataclass(frozen=True)
class Row:
  """One row of any of Tables I-VIII: a model trained with a loss for some epochs, and the
  paper's figures for it.

  Tables I-IV vary the loss of the U-Net; Tables V-VIII train other models with their
  original loss or the paper's dagger variant (the exponential WCE with a printed beta) and
  print F1 only, with the model's parameters, GFLOPS and FPS.

  Attributes:
    table: table number (1-8).
    name: the row's method as the paper prints it ('wce_xie', 'wce_exp*', '0.75_exp_0.5_wj',
      'FCN8s', 'U-Net†').
    key: stable config key (lower case, no spaces), the config argument: Tables I-IV carry
      the epochs ('wce_exp_0.75_e10'), Tables V-VIII the model plus '_dagger' ('rcf_dagger').
    weighting: q(alpha) family ('xie', 'power', 'log', 'exp'); None for the model's original
      loss (Tables V-VIII) and for RSF.
    beta, gamma: parameters of q (None where the paper prints '-').
    base: base of the exponential family (10: eq. 7).
    a, b: holistic loss a * WCE + b * Jaccard distance (plain WCE rows: a=1, b=0).
    laplace: the paper's `*` (Laplace-smoothed alpha); crackjax always smooths (module doc).
    epochs: training epochs (None for RSF).
    time: training time as printed ('54min 54s'), None for RSF.
    ods, ois: the paper's figures in percent.
    model: key of `crackjax.models.MODELS`, whose entry gives configs/compare.py the model's
      group and original loss ('unet' for Tables I-IV; None for RSF).
    dagger: True for the paper's † rows of Tables V-VIII.
    params, gflops, fps: Tables V-VIII: the printed parameter count ('134.27M', '487.77K';
      `params_count` as a number), GFLOPS (MACs, see crackjax.paper.flops) and test FPS.
    epochs_basis: where `epochs` comes from (printed, or assumed for Tables V-VIII).
    unet_row: for the U-Net rows of Tables V-VIII, the key of the identical Table I-IV row.
    reference: True for RSF, a reference row that is not trained.
    note: anything about the row that needed a decision.
  """

  table: int
  name: str
  key: str
  weighting: str | None
  beta: float | None
  gamma: float | None
  base: float
  a: float
  b: float
  laplace: bool
  epochs: int | None
  time: str | None
  ods: table_rules.Prf
  ois: table_rules.Prf
  model: str | None = 'unet'
  dagger: bool = False
  params: str | None = None
  gflops: float | None = None
  fps: float | None = None
  epochs_basis: str = 'printed'
  unet_row: str | None = None
  reference: bool = False
  note: str = ''

  @property
  def base_table(self) -> int:
    """The Table I-IV of the row's dataset, whose settings it trains with (1-4)."""
    return table_rules.COMPARE_BASE.get(self.table, self.table)

  @property
  def dataset(self) -> str:
    return SETTINGS[self.base_table].dataset

  @property
  def training_group(self) -> str | None:
    """Key shared by the rows of this table that differ only in epochs (None for RSF; every
    row of Tables V-VIII is a group of its own)."""
    if self.reference:
      return None
    return f'table{self.table}:' + re.sub(r'_e\d+$', '', self.key)

  @property
  def time_s(self) -> int | None:
    """The printed training time in seconds."""
    return None if self.time is None else table_rules.parse_time(self.time)

  @property
  def params_count(self) -> int | None:
    """The printed parameter count as a number (rounded as printed; None if not printed)."""
    if self.params is None:
      return None
    return round(float(self.params[:-1]) * {'K': 1e3, 'M': 1e6}[self.params[-1]])

  @property
  def loss(self) -> str:
    """The row's loss in words."""
    if self.weighting is None:
      return 'none (reference row)' if self.reference else 'original loss'
    if self.dagger:
      return f'exp WCE beta={self.beta:g}'
    if self.weighting == 'xie' and not self.b:
      return "Xie's WCE (the second baseline)"
    beta = '' if self.beta is None else f' beta={self.beta:g}'
    gamma = f' gamma={self.gamma:g}' if self.weighting == 'power' else ''
    jaccard = f' x {self.a:g} + Jaccard' if self.b else ''
    return f'{self.weighting} WCE{beta}{gamma}{jaccard}'

  @property
  def model_implemented(self) -> bool:
    """Whether `model` is in `crackjax.models.MODELS` (imports the models, i.e. jax)."""
    from crackjax.models import MODELS

    return self.model in MODELS


# ----------------------------------------------------------------------------------- the tables


@functools.cache
def table_rows(table: int) -> tuple[Row, ...]:
  """The rows of any table, 1-8, in the paper's order: read from its file on first use (a
  Table V-VIII reads its Table I-IV too), then kept.

  Raises:
    ValueError: for a table the paper does not have, or a malformed file.
  """
  if table in TABLES:
    return tuple(
      Row(table=table, **table_rules.result_fields(c)) for c in table_rules.printed(table)
    )
  if table in COMPARE_TABLES:
    lines = table_rules.printed(table)
    fields = table_rules.compare_fields(table, lines, rows_by_key(table_rules.COMPARE_BASE[table]))
    return tuple(Row(table=table, **f) for f in fields)
  raise ValueError(f'No Table {table}; tables: {sorted(TABLES) + sorted(COMPARE_TABLES)}.')


class _Tables(Mapping[int, tuple[Row, ...]]):
  """Table number -> its rows (`table_rows`): the numbers are known, a table's rows are read
  when first asked for (membership and iteration read nothing)."""

  def __init__(self, numbers: Sequence[int]) -> None:
    self._numbers = tuple(numbers)

  def __getitem__(self, table: int) -> tuple[Row, ...]:
    if table not in self._numbers:
      raise KeyError(table)
    return table_rows(table)

  def __contains__(self, table: object) -> bool:
    return table in self._numbers

  def __iter__(self) -> Iterator[int]:
    return iter(self._numbers)

  def __len__(self) -> int:
    return len(self._numbers)

  def __repr__(self) -> str:
    return f'<tables {list(self._numbers)}, read on first use>'


#: Tables I-IV (the loss study, the U-Net): table -> rows.
TABLES: Mapping[int, tuple[Row, ...]] = _Tables((1, 2, 3, 4))
#: Tables V-VIII (the comparison models): table -> rows.
COMPARE_TABLES: Mapping[int, tuple[Row, ...]] = _Tables(tuple(table_rules.COMPARE_BASE))


def rows_by_key(table: int) -> dict[str, Row]:
  """The rows of any table (1-8) by key, in the paper's order."""
  return {r.key: r for r in table_rows(table)}


def training_groups(table: int) -> dict[str, tuple[Row, ...]]:
  """Trainable rows of `table` by training group, longest run first.

  A runner trains the first row's config and evaluates the checkpoints at the others' epochs.
  """
  groups: dict[str, list[Row]] = {}
  for r in table_rows(table):
    if not r.reference:
      groups.setdefault(r.training_group, []).append(r)
  return {g: tuple(sorted(rs, key=lambda r: -r.epochs)) for g, rs in groups.items()}


def dataset_of(table: int) -> str:
  """The dataset of any table, 1-8."""
  return SETTINGS[table_rules.COMPARE_BASE.get(table, table)].dataset
