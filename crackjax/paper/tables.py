"""Tables I-VIII of Li, Wang, Tian and Qi (IEEE T-Cybernetics 2021): the printed figures, read
from data files, and the rules that make rows of them.

The figures are data: ``crackjax/paper/data/table<T>.csv``, one file per table, one line per
printed row in the paper's order, every cell as printed (bold and colour removed). This module
holds what is not printed: the tables' training settings (`SETTINGS`), the rules that turn a
printed line into a `Row` (its key, its loss, its epochs where the paper gives none, the dagger
loss `DAGGER_LOSS`) and the one loader, `table_rows`: it reads a table's file on first use and
keeps the rows, so importing this module reads nothing. `TABLES` (Tables I-IV) and
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

Tables I-IV's files: method (as printed, with the paper's `*`), weighting, beta, gamma ('1/2'
for 1/2), a, b, epochs, time, the six figures 'mean (std)' (ODS P, R, F1, OIS P, R, F1) and a
note; a row without a weighting is the RSF reference row (figures only).

Row keys: `wce_<family>[_<beta>][_g<gamma>][_ls]_e<epochs>` for plain WCE rows (a=1, b=0;
gamma only for the power family, `g1_2` = 1/2; `_ls` = the paper's `*`, Laplace smoothing) and
`<family>_<beta>[_g<gamma>]_a<a>_wj_e<epochs>` for WCE + Jaccard rows (b=1); `rsf` is the
random structured forest reference row (not trainable: no config).

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

Ambiguities in the paper and how they are resolved here (also in each row's `note`):
* Table III `1_exp_10_wj`: the row name and the caption say a=10, b=1; §IV-C's text says
  "(a=1, b=1)". We follow the row name and caption (a=10).
* Table I power rows: the paper writes the method as `wce_power` for both gamma=1/2 (beta=0.5)
  and gamma=1/3 (beta=0.85); the keys carry gamma to tell them apart.
* Table II `wce_log*` uses beta=1 (0.9 in the other tables), as printed.
* Time is printed per epoch count only (every family with the same epochs has the same time);
  it is kept as printed, `time_s` converts it.
* The issue counted 16/13/12/11 rows: those are the trainable rows; with RSF the tables have
  17/14/13/12.

Tables V-VIII (§IV-E, comparison with other models) are in `COMPARE_TABLES` (`TABLES` holds
Tables I-IV: the paper prints the two groups with different columns); their rows are `Row`s too,
with F1 only (`Prf.p`, `Prf.r` None) and the model's printed cost (`params`, `gflops`, `fps`).
`rows_by_key`, `training_groups` and `table_rows` take any table 1-8. Each row is a model of
`crackjax.models.MODELS` with its original loss or the paper's dagger variant (`DAGGER_LOSS`:
the exponential WCE with the printed beta), the paper's ODS and OIS F1, parameters, GFLOPS,
training time TT and FPS as printed. Their files: method (as printed; `†` marks the dagger
rows), model (the key of `crackjax.models.MODELS`, not printed), beta, ods_f1, ois_f1, params,
gflops, time (TT), fps. A row trains with the settings of the Table I-IV of its dataset
(`COMPARE_BASE`, `SETTINGS`: batch, steps per epoch, crops, noise, Adam step size; the paper
states no other settings for the comparison models); `configs/table5.py` ... `table8.py` (via
configs/compare.py) build the configs, `configs/paper_tables.py` (`apply_compare_row`) sets the
table's fields.

  Table V    CrackForest   4 rows   U-Net, U-CliqueNet, each original and dagger
  Table VI   AigleRN       4 rows   the same
  Table VII  Crack360     18 rows   nine models, each original and dagger
  Table VIII BJN260       15 rows   nine models original, six dagger (no HED, SegNet or
                                    DeepCrack dagger row is printed)

41 rows in all, as the issue says. Row keys: the model (`fcn8s`, `deeplabv3plus`, ...) plus
`_dagger` for the dagger rows. Decisions:
* U-Net's "original loss" in these tables is Xie's WCE: its rows carry exactly the figures of
  the second baseline and of the exp-WCE row of Tables I-IV (`UNET_ROWS`), so they are those
  rows (same config, same epochs; `unet_row`), TT printed rounded ('1h 28min' = 87min 35s).
* Epochs: the paper never says how long the other models trained. A model with its original
  loss is given the second baseline's epochs (70, 50, 70, 30 on Tables V-VIII); its dagger row
  round(that x TT_dagger / TT_original), since the paper states the time of an epoch is fixed
  for a network (§III-B). The same rule gives the known U-Net dagger epochs (20, 15, 10, 15)
  from the printed times. `epochs_basis` says this per row.
* beta is printed only for the dagger rows; the exponential family's gamma = 1, base 10,
  a = 1, b = 0 (plain WCE) are not printed and taken from eq. 7-8 (`DAGGER_LOSS`). A row with
  its original loss has `weighting` None (the loss is the model's own, configs/compare.py),
  except U-Net, whose rows take the loss of their Table I-IV row.
* A row's config needs only the model's name and configs/compare.py's entry for it, not the
  model itself (`model_implemented` says whether crackjax.models has it: CrackSeg and
  U-CliqueNet were written at the same time as these tables).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources

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
class Score:
  """One printed figure in percent: mean over 5 runs and its std (None where not printed)."""

  mean: float
  std: float | None


@dataclasses.dataclass(frozen=True)
class Prf:
  """Precision, recall and F1 at one operating point (ODS or OIS); Tables V-VIII print F1
  only (p and r None there)."""

  p: Score | None
  r: Score | None
  f1: Score


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
      `params_count` as a number), GFLOPS (MACs, see crackjax.paper.complexity) and test FPS.
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
  ods: Prf
  ois: Prf
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
    return COMPARE_BASE.get(self.table, self.table)

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
    return None if self.time is None else parse_time(self.time)

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
      return f'exp WCE beta={_num(self.beta)}'
    if self.weighting == 'xie' and not self.b:
      return "Xie's WCE (the second baseline)"
    beta = '' if self.beta is None else f' beta={_num(self.beta)}'
    gamma = f' gamma={_num(self.gamma)}' if self.weighting == 'power' else ''
    jaccard = f' x {_num(self.a)} + Jaccard' if self.b else ''
    return f'{self.weighting} WCE{beta}{gamma}{jaccard}'

  @property
  def model_implemented(self) -> bool:
    """Whether `model` is in `crackjax.models.MODELS` (imports the models, i.e. jax)."""
    from crackjax.models import MODELS

    return self.model in MODELS


def parse_time(text: str) -> int:
  """A training time as the paper prints it ('54min 54s', '2h 9min', '1h') in seconds.

  Raises:
    ValueError: for a text of another form.
  """
  m = re.fullmatch(r'(?:(\d+)h\s*)?(?:(\d+)min\s*)?(?:(\d+)s)?', text.strip())
  if not m or not any(m.groups()):
    raise ValueError(f'Unparsed time {text!r}.')
  h, mins, s = (int(g or 0) for g in m.groups())
  return 3600 * h + 60 * mins + s


# ------------------------------------------------------------------------------------- the rules

#: Base of the exponential family q = beta * base ** (gamma * (2 alpha - 1)) (eq. 7); every row
#: of the paper has 10.
EXP_BASE = 10.0

#: The paper's dagger (†) loss of Tables V-VIII: its exponential WCE (eq. 7) with gamma 1 and
#: base 10, as plain WCE (eq. 8 with a = 1, b = 0); none of this is printed. beta is printed per
#: row; 0.75 (Table I's wce_exp, the CrackForest setting) is the default where no row gives
#: one (configs/compare.py's `,dagger`). The one statement of the dagger loss: the rows here,
#: configs/compare.py's dagger configs and configs/paper_tables.py's check read it.
DAGGER_LOSS: Mapping[str, str | float] = types.MappingProxyType(
  {'weighting': 'exp', 'beta': 0.75, 'gamma': 1.0, 'base': EXP_BASE, 'a': 1.0, 'b': 0.0}
)

#: How the paper marks a dagger row: 'U-Net†'.
DAGGER_MARK = '†'

#: How the paper marks a row with Laplace-smoothed alpha: 'wce_xie*'.
LAPLACE_MARK = '*'

# Table of Tables V-VIII -> the Table I-IV of the same dataset (whose SETTINGS they train with).
COMPARE_BASE: dict[int, int] = {5: 1, 6: 2, 7: 3, 8: 4}

# The U-Net rows of Tables V-VIII are rows of Tables I-IV (same figures, same times up to
# rounding): (original loss, dagger) -> the Table I-IV key. The "original loss" of U-Net in
# Tables V-VIII is the second baseline, Xie's WCE, at its longest epochs.
UNET_ROWS: dict[int, tuple[str, str]] = {
  5: ('wce_xie_e70', 'wce_exp_0.75_e20'),
  6: ('wce_xie_ls_e50', 'wce_exp_1_e15'),
  7: ('wce_xie_e70', 'wce_exp_1_e10'),
  8: ('wce_xie_e30', 'wce_exp_0.75_e15'),
}

_EPOCHS_ASSUMED = (
  'The paper does not state how long the comparison models trained (§IV-E gives only TT). '
  'Assumed: with its original loss a model trains the epochs of the second baseline of Table '
  "{base} ({anchor}, the budget the paper gives U-Net's original loss); the dagger run trains "
  'round({anchor} x TT_dagger / TT_original) epochs, since "the training time of single epoch '
  'is invariant for the same network" (§III-B), so the printed TT ratio is the epoch ratio. '
  'The rule reproduces the U-Net rows, whose epochs are known (Tables I-IV).'
)


def _num(x: float) -> str:
  return f'{x:g}'


def _gamma_tag(gamma: float) -> str:
  for den in (2, 3, 4):
    if abs(gamma * den - 1) < 1e-9:
      return f'g1_{den}'
  return f'g{_num(gamma)}'


def _key(weighting: str, beta, gamma, a: float, b: float, laplace: bool, epochs: int) -> str:
  """The key of a trainable row of Tables I-IV (the module docstring's pattern)."""
  parts = [weighting]
  if beta is not None:
    parts.append(_num(beta))
  if weighting == 'power':
    parts.append(_gamma_tag(gamma))
  if b:
    parts += [f'a{_num(a)}', 'wj']
  else:
    parts.insert(0, 'wce')
  if laplace:
    parts.append('ls')
  parts.append(f'e{epochs}')
  return '_'.join(parts)


def _compare_key(model: str, dagger: bool) -> str:
  """The key of a row of Tables V-VIII: the model, '_dagger' for the dagger row."""
  return model + ('_dagger' if dagger else '')


def _round_half_up(x: float) -> int:
  return int(x + 0.5)


def _compare_epochs(
  table: int, model: str, dagger: bool, time: str, originals: Mapping[str, int]
) -> tuple[int, str, str | None, str]:
  """(epochs, epochs_basis, unet_row, note) of a row of Table `table` (5-8): a U-Net row's
  from its Table I-IV row, any other model's assumed (`_EPOCHS_ASSUMED`) from the second
  baseline's epochs and, for a dagger row, the printed TT ratio to the model's original row
  (`originals`: model -> TT in seconds)."""
  base = COMPARE_BASE[table]
  base_rows = rows_by_key(base)
  anchor = base_rows[UNET_ROWS[table][0]].epochs
  if model == 'unet':
    unet_row = UNET_ROWS[table][int(dagger)]
    return (
      base_rows[unet_row].epochs,
      f'Table {base} row {unet_row} (the same figures)',
      unet_row,
      f'The same training as Table {base} row {unet_row} (identical ODS/OIS; TT printed rounded).',
    )
  basis = _EPOCHS_ASSUMED.format(base=base, anchor=anchor)
  if not dagger:
    return anchor, basis, None, ''
  ratio = parse_time(time) / originals[model]
  basis += f' Here {anchor} x {parse_time(time)} s / {originals[model]} s = {anchor * ratio:.2f}.'
  return _round_half_up(anchor * ratio), basis, None, ''


def _compare_loss(table: int, dagger: bool, beta: float | None, unet_row: str | None) -> dict:
  """The loss fields of a row of Table `table` (5-8)."""
  if unet_row is not None:  # the loss of the identical Table I-IV row
    b_row = rows_by_key(COMPARE_BASE[table])[unet_row]
    return dict(
      weighting=b_row.weighting, beta=b_row.beta, gamma=b_row.gamma, base=b_row.base,
      a=b_row.a, b=b_row.b, laplace=b_row.laplace,
    )  # fmt: skip
  if dagger:  # eq. 7-8: the dagger loss with the row's beta
    return {**DAGGER_LOSS, 'beta': beta, 'laplace': False}
  # The model's original loss (configs/compare.py).
  return dict(weighting=None, beta=None, gamma=None, base=EXP_BASE, a=1.0, b=0.0, laplace=False)


# ------------------------------------------------------------------------------------ the loader

# The columns of data/table<T>.csv (module docstring), in order.
_RESULT_COLUMNS = (
  'method', 'weighting', 'beta', 'gamma', 'a', 'b', 'epochs', 'time',
  'ods_p', 'ods_r', 'ods_f1', 'ois_p', 'ois_r', 'ois_f1', 'note',
)  # fmt: skip
_COMPARE_COLUMNS = (
  'method', 'model', 'beta', 'ods_f1', 'ois_f1', 'params', 'gflops', 'time', 'fps',
)  # fmt: skip


def _printed(table: int) -> list[dict[str, str]]:
  """The lines of data/table<table>.csv, cells as printed, in the paper's order. The only
  code that reads a table's file.

  Raises:
    ValueError: a file whose header or a line's cell count is not the table's.
  """
  path = resources.files(__package__) / 'data' / f'table{table}.csv'
  reader = csv.DictReader(io.StringIO(path.read_text(encoding='utf-8'), newline=''))
  expected = _COMPARE_COLUMNS if table in COMPARE_BASE else _RESULT_COLUMNS
  if tuple(reader.fieldnames or ()) != expected:
    raise ValueError(f'{path}: columns {reader.fieldnames}, expected {list(expected)}.')
  lines = []
  for cells in reader:
    if None in cells or None in cells.values():  # a cell too many, or too few
      raise ValueError(f'{path}, line {reader.line_num}: expected {len(expected)} cells.')
    lines.append(cells)
  return lines


_CELL = re.compile(r'(\d+(?:\.\d+)?)\s*(?:\((\d+(?:\.\d+)?)\))?')


def _score(cell: str) -> Score:
  """A printed figure 'mean (std)' or 'mean' (also '92.00(1.82)', as Table III prints one)."""
  m = _CELL.fullmatch(cell.strip())
  if m is None:
    raise ValueError(f'Unparsed figure {cell!r}.')
  mean, std = m.groups()
  return Score(float(mean), float(std) if std else None)


def _number(cell: str, default: float | None = None) -> float | None:
  """A printed number ('0.75', '1'), a fraction ('1/3': gamma), or `default` for ''."""
  if not cell:
    return default
  num, _, den = cell.partition('/')
  return int(num) / int(den) if den else float(num)


def _result_row(table: int, cells: Mapping[str, str]) -> Row:
  """A row of Tables I-IV from its printed line."""
  name = cells['method']
  ods = Prf(*(_score(cells[k]) for k in ('ods_p', 'ods_r', 'ods_f1')))
  ois = Prf(*(_score(cells[k]) for k in ('ois_p', 'ois_r', 'ois_f1')))
  loss = dict(
    weighting=cells['weighting'] or None,
    beta=_number(cells['beta']),
    gamma=_number(cells['gamma']),
    base=EXP_BASE,
    a=_number(cells['a'], 1.0),
    b=_number(cells['b'], 0.0),
    laplace=name.endswith(LAPLACE_MARK),
  )
  if loss['weighting'] is None:  # RSF: the paper's figures of a method without a loss
    return Row(
      table=table, name=name, key=name.lower(), **loss, epochs=None, time=None, ods=ods,
      ois=ois, model=None, reference=True, note=cells['note'],
    )  # fmt: skip
  epochs = int(cells['epochs'])
  key = _key(
    loss['weighting'], loss['beta'], loss['gamma'], loss['a'], loss['b'], loss['laplace'], epochs
  )
  return Row(
    table=table, name=name, key=key, **loss, epochs=epochs, time=cells['time'], ods=ods,
    ois=ois, note=cells['note'],
  )  # fmt: skip


def _compare_rows(table: int, printed: Sequence[Mapping[str, str]]) -> tuple[Row, ...]:
  """The rows of Table `table` (5-8) from its printed lines, in the paper's order."""
  dagger = {c['method']: c['method'].endswith(DAGGER_MARK) for c in printed}
  originals = {c['model']: parse_time(c['time']) for c in printed if not dagger[c['method']]}
  rows = []
  for cells in printed:
    name, model, time = cells['method'], cells['model'], cells['time']
    epochs, basis, unet_row, note = _compare_epochs(table, model, dagger[name], time, originals)
    rows.append(
      Row(
        table=table,
        name=name,
        key=_compare_key(model, dagger[name]),
        **_compare_loss(table, dagger[name], _number(cells['beta']), unet_row),
        epochs=epochs,
        time=time,
        ods=Prf(None, None, Score(float(cells['ods_f1']), None)),
        ois=Prf(None, None, Score(float(cells['ois_f1']), None)),
        model=model,
        dagger=dagger[name],
        params=cells['params'],
        gflops=float(cells['gflops']),
        fps=float(cells['fps']),
        epochs_basis=basis,
        unet_row=unet_row,
        note=note,
      )
    )
  return tuple(rows)


@functools.cache
def table_rows(table: int) -> tuple[Row, ...]:
  """The rows of any table, 1-8, in the paper's order: read from its file on first use (a
  Table V-VIII reads its Table I-IV too), then kept.

  Raises:
    ValueError: for a table the paper does not have, or a malformed file.
  """
  if table in TABLES:
    return tuple(_result_row(table, cells) for cells in _printed(table))
  if table in COMPARE_TABLES:
    return _compare_rows(table, _printed(table))
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
COMPARE_TABLES: Mapping[int, tuple[Row, ...]] = _Tables(tuple(COMPARE_BASE))


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
  return SETTINGS[COMPARE_BASE.get(table, table)].dataset
