"""Tables I-VIII of Li, Wang, Tian and Qi (IEEE T-Cybernetics 2021) as plain Python data.

Every row of the eight result tables is a `Row`: its model, its loss (weighting family of eq.
4-7, beta, gamma, base, Laplace smoothing), the holistic loss's a and b (eq. 8), the epoch
count, and the paper's figures (ODS and OIS precision, recall and F1, mean (std) over 5 runs, in
percent as printed; training time as printed). Data only: `configs/paper_tables.py`
(`apply_row`) sets a row's fields on a config and `configs/table1.py` ... `table4.py` turn a row
into a training config (`--config=configs/table1.py:wce_exp_0.75_e10`, optionally `,cpu` /
`,smoke`).

  Table I   CrackForest  (§IV-A)  17 rows: RSF + 16 trainable
  Table II  AigleRN      (§IV-B)  14 rows: RSF + 13 trainable
  Table III Crack360     (§IV-C)  13 rows: RSF + 12 trainable
  Table IV  BJN260       (§IV-D)  12 rows: RSF + 11 trainable

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
`crackjax.models.MODELS` with its original loss or the paper's dagger variant (the exponential
WCE with the printed beta), the paper's ODS and OIS F1, parameters, GFLOPS, training time TT and
FPS as printed. A row trains with the settings of the Table I-IV of its dataset (`COMPARE_BASE`,
`SETTINGS`: batch, steps per epoch, crops, noise, Adam step size; the paper states no other
settings for the comparison models); `configs/table5.py` ... `table8.py` (via
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
  a = 1, b = 0 (plain WCE) are not printed and taken from eq. 7-8. A row with its original
  loss has `weighting` None (the loss is the model's own, configs/compare.py), except U-Net,
  whose rows take the loss of their Table I-IV row.
* A row's config needs only the model's name and configs/compare.py's entry for it, not the
  model itself (`model_implemented` says whether crackjax.models has it: CrackSeg and
  U-CliqueNet were written at the same time as these tables).
"""

from __future__ import annotations

import dataclasses
import re

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

SETTINGS: dict[int, TableSettings] = {
  1: TableSettings(
    table=1,
    dataset='crackforest',
    widths=(64, 128, 256, 512, 1024),
    steps_per_epoch=300,
    batch_size=2,
    input_size=None,
    noise_std=0.0,
    augment=True,
    learning_rate=3e-4,
    source=_PAPER_DEFAULTS + ' §IV-A: full 480x320 images, 60/40 split; as '
    'configs/crackforest_exp.py.',
  ),
  2: TableSettings(
    table=2,
    dataset='aiglern',
    widths=(32, 64, 128, 256, 512),
    steps_per_epoch=200,
    batch_size=2,
    input_size=(448, 304),
    noise_std=0.1,
    augment=True,
    learning_rate=3e-4,
    source=_PAPER_DEFAULTS + ' §IV-B: widths [32, ..., 512], input "304x448" (W x H, so '
    '(H, W) = (448, 304)), noise N(0, 0.01) read as variance 0.01 (std 0.1), then the usual '
    'augmentation; "200 steps per epoch" is stated for the 50-epoch baseline and applied to '
    'every row, as configs/aiglern_exp.py does (the paper is silent for the other rows; the '
    'printed times, 18-19 s per epoch for every row, support one epoch length).',
  ),
  3: TableSettings(
    table=3,
    dataset='crack360',
    widths=(64, 128, 256, 512, 1024),
    steps_per_epoch=300,
    batch_size=2,
    input_size=(512, 512),
    noise_std=0.0,
    augment=True,
    learning_rate=3e-4,
    source=_PAPER_DEFAULTS + ' §IV-C: train CrackTree260 (800x600) cropped to 512x512, test '
    'CRKWH100; steps per epoch not restated (paper default 300), as configs/crack360_exp.py.',
  ),
  4: TableSettings(
    table=4,
    dataset='bjn260',
    widths=(64, 128, 256, 512, 1024),
    steps_per_epoch=300,
    batch_size=2,
    input_size=None,
    noise_std=0.0,
    augment=True,
    learning_rate=3e-4,
    source=_PAPER_DEFAULTS + ' §IV-D: full 480x320 images, 200 train / 60 test; nothing else '
    'restated, as configs/bjn260_exp.py.',
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


_CELL = re.compile(r'(\d+(?:\.\d+)?)\s*(?:\((\d+(?:\.\d+)?)\))?')


def _figures(text: str) -> tuple[Prf, Prf]:
  """Parses the six cells 'P (std) R (std) F1 (std) P (std) R (std) F1 (std)' of a row."""
  cells = [Score(float(m), float(s) if s else None) for m, s in _CELL.findall(text)]
  if len(cells) != 6:
    raise ValueError(f'Expected 6 figures in {text!r}, got {len(cells)}.')
  return Prf(*cells[:3]), Prf(*cells[3:])


def _num(x: float) -> str:
  return f'{x:g}'


def _gamma_tag(gamma: float) -> str:
  for den in (2, 3, 4):
    if abs(gamma * den - 1) < 1e-9:
      return f'g1_{den}'
  return f'g{_num(gamma)}'


def _key(weighting: str, beta, gamma, a: float, b: float, laplace: bool, epochs: int) -> str:
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


def _rsf(table: int, figures: str) -> Row:
  ods, ois = _figures(figures)
  return Row(
    table=table,
    name='RSF',
    key='rsf',
    weighting=None,
    beta=None,
    gamma=None,
    base=10.0,
    a=1.0,
    b=0.0,
    laplace=False,
    epochs=None,
    time=None,
    ods=ods,
    ois=ois,
    model=None,
    reference=True,
    note='Random structured forest (Shi et al. 2016): reference figures, not trainable here.',
  )


def _rows(
  table: int,
  name: str,
  weighting: str,
  beta: float | None,
  gamma: float | None,
  runs: list[tuple[int, str, str]],
  *,
  a: float = 1.0,
  b: float = 0.0,
  laplace: bool = False,
  note: str = '',
) -> list[Row]:
  """The rows of one method block: runs = [(epochs, time as printed, six figures), ...]."""
  out = []
  for epochs, time, figures in runs:
    ods, ois = _figures(figures)
    out.append(
      Row(
        table=table,
        name=name,
        key=_key(weighting, beta, gamma, a, b, laplace, epochs),
        weighting=weighting,
        beta=beta,
        gamma=gamma,
        base=10.0,
        a=a,
        b=b,
        laplace=laplace,
        epochs=epochs,
        time=time,
        ods=ods,
        ois=ois,
        note=note,
      )
    )
  return out


# Figures: ODS P R F1, OIS P R F1, "mean (std)", copied from the LaTeX (bold removed).
TABLE1: tuple[Row, ...] = (
  _rsf(1, '87.75 72.65 79.49 89.04 76.73 82.42'),
  *_rows(
    1,
    'wce_xie',
    'xie',
    None,
    None,
    [
      (
        70,
        '54min 54s',
        '97.07 (0.22) 75.66 (1.21) 85.04 (0.72) 97.2 (0.16) 77.35 (1.14) 86.14 (0.66)',
      ),
      (
        20,
        '15min 44s',
        '97.36 (0.44) 71.12 (1.56) 82.19 (0.90) 97.26 (0.39) 74.80 (1.65) 84.55 (0.95)',
      ),
      (
        10,
        '7min 54s',
        '98.12 (0.35) 64.49 (3.95) 77.75 (2.82) 97.53 (0.42) 68.46 (3.82) 80.39 (2.58)',
      ),
      (
        5,
        '3min 39s',
        '98.36 (0.46) 57.53 (4.69) 72.49 (3.68) 97.37 (0.43) 63.17 (4.68) 76.53 (3.47)',
      ),
    ],
    note='The second baseline (eq. 1 with eq. 3).',
  ),
  *_rows(
    1,
    'wce_power',
    'power',
    0.5,
    1 / 2,
    [
      (
        20,
        '15min 44s',
        '96.59 (0.34) 77.85 (0.79) 86.21 (0.40) 96.66 (0.34) 80.07 (0.79) 87.58 (0.36)',
      ),
      (
        10,
        '7min 54s',
        '96.52 (0.60) 76.66 (1.47) 85.44 (0.68) 96.73 (0.47) 79.64 (1.23) 87.35 (0.58)',
      ),
    ],
  ),
  *_rows(
    1,
    'wce_power',
    'power',
    0.85,
    1 / 3,
    [
      (
        20,
        '15min 44s',
        '96.15 (1.07) 77.84 (1.27) 86.02 (0.45) 96.37 (0.88) 79.63 (1.13) 87.20 (0.42)',
      ),
      (
        10,
        '7min 54s',
        '96.62 (0.23) 76.62 (0.36) 85.47 (0.28) 96.71 (0.28) 79.24 (0.50) 87.11 (0.26)',
      ),
    ],
  ),
  *_rows(
    1,
    'wce_log',
    'log',
    0.9,
    None,
    [
      (
        20,
        '15min 44s',
        '96.55 (0.22) 77.93 (1.25) 86.24 (0.70) 96.66 (0.26) 80.08 (1.20) 87.58 (0.63)',
      ),
      (
        10,
        '7min 54s',
        '96.30 (0.86) 76.72 (2.88) 85.37 (1.51) 96.52 (0.72) 79.36 (2.72) 87.08 (1.41)',
      ),
    ],
  ),
  *_rows(
    1,
    'wce_exp',
    'exp',
    0.75,
    1.0,
    [
      (
        20,
        '15min 44s',
        '96.22 (0.73) 78.34 (1.39) 86.35 (0.61) 96.52 (0.55) 80.23 (1.15) 87.62 (0.48)',
      ),
      (
        10,
        '7min 54s',
        '96.62 (0.37) 76.83 (0.83) 85.59 (0.37) 96.84 (0.36) 79.44 (0.81) 87.28 (0.37)',
      ),
      (
        5,
        '3min 39s',
        '96.46 (0.40) 76.30 (1.53) 85.19 (0.83) 96.93 (0.40) 78.53 (1.52) 86.75 (0.80)',
      ),
    ],
  ),
  *_rows(
    1,
    '0.75_exp_0.5_wj',
    'exp',
    0.75,
    1.0,
    [
      (
        10,
        '7min 54s',
        '96.62 (0.18) 78.18 (0.83) 86.42 (0.48) 96.95 (0.18) 79.87 (0.84) 87.58 (0.46)',
      ),
    ],
    a=0.5,
    b=1.0,
  ),
  *_rows(
    1,
    '0.75_exp_20_wj',
    'exp',
    0.75,
    1.0,
    [
      (
        5,
        '3min 39s',
        '96.19 (0.46) 76.97 (1.04) 85.51 (0.56) 96.48 (0.48) 79.43 (1.14) 87.12 (0.56)',
      ),
    ],
    a=20.0,
    b=1.0,
  ),
  *_rows(
    1,
    '0.75_exp_50_wj',
    'exp',
    0.75,
    1.0,
    [
      (
        5,
        '3min 39s',
        '95.74 (1.25) 77.34 (1.77) 85.54 (0.70) 96.16 (1.12) 79.66 (1.72) 87.12 (0.68)',
      ),
    ],
    a=50.0,
    b=1.0,
  ),
)

TABLE2: tuple[Row, ...] = (
  _rsf(2, '85.81 88.02 86.9 53.95 95.46 68.94'),
  *_rows(
    2,
    'wce_xie*',
    'xie',
    None,
    None,
    [
      (
        50,
        '15min 5s',
        '85.93 (2.11) 87.38 (1.68) 86.62 (0.58) 90.35 (1.36) 92.03 (0.93) 91.18 (1.02)',
      ),
      (
        15,
        '4min 35s',
        '84.35 (2.25) 87.77 (3.81) 85.97 (1.84) 78.63 (8.09) 93.09 (3.05) 85.02 (4.71)',
      ),
      (
        7,
        '2min 11s',
        '84.79 (3.09) 86.01 (2.54) 85.34 (1.52) 76.46 (4.74) 93.11 (1.71) 83.92 (3.32)',
      ),
      (
        4,
        '1min 17s',
        '83.61 (1.39) 86.81 (0.85) 85.17 (0.66) 66.55 (2.40) 92.80 (0.84) 77.50 (1.91)',
      ),
    ],
    laplace=True,
    note='The second baseline, 200 steps per epoch (§IV-B).',
  ),
  *_rows(
    2,
    'wce_power*',
    'power',
    0.5,
    1 / 2,
    [
      (
        15,
        '4min 35s',
        '86.45 (2.05) 88.64 (2.56) 87.49 (1.14) 93.38 (1.53) 89.63 (2.80) 91.43 (1.39)',
      ),
      (
        7,
        '2min 11s',
        '86.65 (2.30) 86.83 (2.19) 86.69 (0.67) 93.68 (2.05) 88.35 (2.52) 90.90 (1.12)',
      ),
    ],
    laplace=True,
  ),
  *_rows(
    2,
    'wce_log*',
    'log',
    1.0,
    None,
    [
      (
        15,
        '4min 35s',
        '88.05 (1.71) 86.59 (2.23) 87.28 (0.42) 94.03 (1.66) 86.77 (2.91) 90.21 (0.96)',
      ),
      (
        7,
        '2min 11s',
        '87.32 (2.16) 86.00 (3.59) 86.58 (1.13) 95.08 (1.89) 86.47 (4.25) 90.48 (1.66)',
      ),
    ],
    laplace=True,
    note='beta = 1 as printed (0.9 in Tables I, III, IV).',
  ),
  *_rows(
    2,
    'wce_exp*',
    'exp',
    0.75,
    1.0,
    [
      (
        15,
        '4min 35s',
        '87.20 (2.12) 88.31 (3.23) 87.68 (0.83) 93.94 (0.92) 88.72 (3.37) 91.21 (1.60)',
      ),
      (
        7,
        '2min 11s',
        '87.86 (2.72) 86.27 (4.08) 86.94 (1.19) 93.50 (2.56) 88.49 (4.62) 90.82 (2.07)',
      ),
    ],
    laplace=True,
  ),
  *_rows(
    2,
    'wce_exp',
    'exp',
    1.0,
    1.0,
    [
      (
        15,
        '4min 35s',
        '87.56 (2.31) 88.01 (1.99) 87.74 (0.51) 93.48 (1.12) 90.78 (2.36) 92.08 (0.99)',
      ),
      (
        7,
        '2min 11s',
        '87.69 (2.07) 86.70 (1.67) 87.16 (0.67) 94.19 (1.23) 88.75 (2.63) 91.36 (1.07)',
      ),
    ],
    note='Unstarred: the paper does not smooth alpha; crackjax does (negligible for exp).',
  ),
  *_rows(
    2,
    '1_exp_10_wj',
    'exp',
    1.0,
    1.0,
    [
      (
        4,
        '1min 17s',
        '86.51 (1.56) 87.45 (2.32) 86.94 (0.64) 92.78 (1.93) 90.21 (2.30) 91.45 (1.39)',
      ),
    ],
    a=10.0,
    b=1.0,
    note='Unstarred: crackjax smooths alpha anyway (negligible for exp).',
  ),
)

TABLE3: tuple[Row, ...] = (
  _rsf(3, '65.10 67.01 66.04 75.43 88.58 81.48'),
  *_rows(
    3,
    'wce_xie',
    'xie',
    None,
    None,
    [
      (
        70,
        '87min 35s',
        '88.71 (3.43) 90.42 (2.70) 89.54 (2.86) 89.45 (2.06) 97.34 (0.46) 93.21 (1.13)',
      ),
      (
        10,
        '12min 35s',
        '84.41 (3.45) 91.29 (1.63) 87.70 (2.46) 90.04 (1.00) 97.79 (0.30) 93.75 (0.58)',
      ),
      (
        5,
        '6min 20s',
        '82.65 (2.31) 87.11 (2.21) 84.78 (0.77) 88.70 (0.96) 97.33 (0.46) 92.81 (0.64)',
      ),
      (
        3,
        '3min 50s',
        '69.17 (2.37) 83.05 (1.90) 75.46 (1.77) 83.44 (1.51) 96.83 (0.63) 89.63 (1.13)',
      ),
    ],
    note='The second baseline.',
  ),
  *_rows(
    3,
    'wce_power',
    'power',
    0.5,
    1 / 2,
    [
      (
        10,
        '12min 35s',
        '94.30 (0.89) 92.47 (0.88) 93.37 (0.66) 94.40 (0.54) 97.41 (0.29) 95.88 (0.25)',
      ),
      (
        5,
        '6min 20s',
        '91.24 (1.89) 87.14 (1.58) 89.13 (1.47) 92.00(1.82) 96.62 (0.48) 94.24 (0.96)',
      ),
    ],
  ),
  *_rows(
    3,
    'wce_log',
    'log',
    0.9,
    None,
    [
      (
        10,
        '12min 35s',
        '93.36 (0.93) 92.31 (0.56) 92.83 (0.59) 94.20 (1.12) 97.14 (0.40) 95.64 (0.53)',
      ),
      (
        5,
        '6min 20s',
        '90.72 (1.82) 88.26 (2.88) 89.46 (2.20) 90.76 (1.75) 96.81 (0.96) 93.68 (1.06)',
      ),
    ],
  ),
  *_rows(
    3,
    'wce_exp',
    'exp',
    1.0,
    1.0,
    [
      (
        10,
        '12min 35s',
        '94.06 (0.53) 93.26 (0.70) 93.65 (0.44) 93.91 (0.62) 97.29 (0.23) 95.57 (0.33)',
      ),
      (
        5,
        '6min 20s',
        '91.42 (0.53) 88.42 (1.57) 89.89 (0.94) 90.02 (1.06) 97.60 (0.53) 93.65 (0.47)',
      ),
    ],
  ),
  *_rows(
    3,
    '1_exp_10_wj',
    'exp',
    1.0,
    1.0,
    [
      (
        5,
        '6min 20s',
        '94.47 (0.77) 90.54 (1.41) 92.46 (0.84) 96.97 (0.94) 94.31 (1.04) 95.61 (0.58)',
      ),
      (
        3,
        '3min 50s',
        '89.89 (3.70) 89.30 (2.92) 89.57 (2.85) 93.17 (4.06) 94.84 (2.07) 93.93 (1.88)',
      ),
    ],
    a=10.0,
    b=1.0,
    note='a = 10 from the row name and caption; §IV-C text says a = 1.',
  ),
)

TABLE4: tuple[Row, ...] = (
  _rsf(4, '45.08 45.93 45.50 38.49 51.77 44.15'),
  *_rows(
    4,
    'wce_xie',
    'xie',
    None,
    None,
    [
      (
        30,
        '24min',
        '65.82 (1.89) 40.25 (0.60) 49.94 (0.36) 59.84 (2.38) 41.93 (0.50) 49.28 (0.66)',
      ),
      (
        15,
        '12min',
        '66.22 (1.01) 38.90 (0.52) 49.01 (0.60) 51.39 (0.98) 41.10 (0.68) 45.67 (0.73)',
      ),
      (
        7,
        '5min 36s',
        '58.49 (2.18) 35.56 (1.46) 44.23 (1.70) 46.28 (0.76) 37.02 (2.33) 41.10 (1.30)',
      ),
      (5, '4min', '54.15 (2.56) 33.58 (2.21) 41.44 (2.27) 44.67 (1.33) 34.48 (2.64) 38.90 (2.20)'),
    ],
    note='The second baseline.',
  ),
  *_rows(
    4,
    'wce_power',
    'power',
    0.5,
    1 / 2,
    [
      (
        15,
        '12min',
        '67.97 (1.56) 40.17 (0.90) 50.48 (0.30) 64.27 (1.64) 41.77 (0.77) 50.62 (0.34)',
      ),
      (
        7,
        '5min 36s',
        '63.77 (1.76) 41.19 (0.64) 50.05 (0.90) 61.68(1.19) 42.80 (0.79) 50.54 (0.88)',
      ),
    ],
  ),
  *_rows(
    4,
    'wce_log',
    'log',
    0.9,
    None,
    [
      (
        15,
        '12min',
        '68.31 (0.93) 40.28 (0.51) 50.67 (0.32) 64.27 (1.38) 42.16 (0.57) 50.91 (0.33)',
      ),
      (
        7,
        '5min 36s',
        '64.83 (1.69) 40.73 (0.88) 50.02 (0.76) 62.42 (0.81) 42.64 (0.90) 50.66 (0.81)',
      ),
    ],
  ),
  *_rows(
    4,
    'wce_exp',
    'exp',
    0.75,
    1.0,
    [
      (
        15,
        '12min',
        '67.71 (0.94) 40.72 (0.57) 50.85 (0.42) 62.27 (1.01) 42.52 (0.60) 50.52 (0.42)',
      ),
      (
        7,
        '5min 36s',
        '62.80 (1.37) 40.47 (0.62) 49.22 (0.81) 60.50 (1.38) 41.72 (1.07) 49.38 (1.07)',
      ),
    ],
  ),
  *_rows(
    4,
    'power_2_wj',
    'power',
    0.5,
    1 / 2,
    [
      (5, '4min', '63.70 (1.95) 40.38 (1.19) 49.40 (0.72) 65.01 (1.33) 41.14 (1.17) 50.37 (0.71)'),
    ],
    a=2.0,
    b=1.0,
    note='beta = 0.5, gamma = 1/2 from the caption (not in the row name).',
  ),
)

TABLES: dict[int, tuple[Row, ...]] = {1: TABLE1, 2: TABLE2, 3: TABLE3, 4: TABLE4}


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


# ================================================================================================
# Tables V-VIII: the comparison models (§IV-E, "Comparison with other models")
# ================================================================================================

# Table of Tables V-VIII -> the Table I-IV of the same dataset (whose SETTINGS they train with).
COMPARE_BASE: dict[int, int] = {5: 1, 6: 2, 7: 3, 8: 4}


def table_rows(table: int) -> tuple[Row, ...]:
  """The rows of any table, 1-8.

  Raises:
    ValueError: for a table the paper does not have.
  """
  if table in TABLES:
    return TABLES[table]
  if table in COMPARE_TABLES:
    return COMPARE_TABLES[table]
  raise ValueError(f'No Table {table}; tables: {sorted(TABLES) + sorted(COMPARE_TABLES)}.')


def dataset_of(table: int) -> str:
  """The dataset of any table, 1-8."""
  return SETTINGS[COMPARE_BASE.get(table, table)].dataset


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


def _round_half_up(x: float) -> int:
  return int(x + 0.5)


def _compare_table(table: int, printed: list[tuple]) -> tuple[Row, ...]:
  """The rows of Table `table` from the printed cells
  (name, model, dagger, beta, ODS, OIS, params, GFLOPS, TT, FPS), in the paper's order."""
  base = COMPARE_BASE[table]
  base_rows = rows_by_key(base)
  anchor_key = UNET_ROWS[table][0]
  anchor = base_rows[anchor_key].epochs
  originals = {p[1]: parse_time(p[8]) for p in printed if not p[2]}
  rows = []
  for name, model, dagger, beta, ods, ois, params, gflops, time, fps in printed:
    key = model + ('_dagger' if dagger else '')
    unet_row, note = None, ''
    if model == 'unet':
      unet_row = UNET_ROWS[table][int(dagger)]
      epochs = base_rows[unet_row].epochs
      basis = f'Table {base} row {unet_row} (the same figures)'
      note = (
        f'The same training as Table {base} row {unet_row} (identical ODS/OIS; TT printed rounded).'
      )
    elif not dagger:
      epochs = anchor
      basis = _EPOCHS_ASSUMED.format(base=base, anchor=anchor)
    else:
      ratio = parse_time(time) / originals[model]
      epochs = _round_half_up(anchor * ratio)
      basis = _EPOCHS_ASSUMED.format(base=base, anchor=anchor) + (
        f' Here {anchor} x {parse_time(time)} s / {originals[model]} s = {anchor * ratio:.2f}.'
      )
    if model == 'unet':  # the loss of the identical Table I-IV row
      b_row = base_rows[unet_row]
      loss = dict(
        weighting=b_row.weighting, beta=b_row.beta, gamma=b_row.gamma, base=b_row.base,
        a=b_row.a, b=b_row.b, laplace=b_row.laplace,
      )  # fmt: skip
    elif dagger:  # eq. 7-8: exponential family, gamma 1, base 10, plain WCE
      loss = dict(weighting='exp', beta=beta, gamma=1.0, base=10.0, a=1.0, b=0.0, laplace=False)
    else:  # the model's original loss (configs/compare.py)
      loss = dict(weighting=None, beta=None, gamma=None, base=10.0, a=1.0, b=0.0, laplace=False)
    rows.append(
      Row(
        table=table,
        name=name,
        key=key,
        **loss,
        epochs=epochs,
        time=time,
        ods=Prf(None, None, Score(ods, None)),
        ois=Prf(None, None, Score(ois, None)),
        model=model,
        dagger=dagger,
        params=params,
        gflops=gflops,
        fps=fps,
        epochs_basis=basis,
        unet_row=unet_row,
        note=note,
      )
    )
  return tuple(rows)


# Cells as printed: (name, model, dagger, beta, ODS, OIS, params, GFLOPS, TT, FPS); bold and
# green removed. Row order is the paper's.
TABLE5 = _compare_table(
  5,
  [
    ('U-Net', 'unet', False, None, 85.04, 86.14, '31.03M', 128.18, '54min 54s', 32.27),
    ('U-CliqueNet', 'ucliquenet', False, None, 84.95, 86.06, '487.77K', 38.52, '2h 29min', 25.86),
    ('U-Net†', 'unet', True, 0.75, 86.35, 87.62, '31.03M', 128.18, '15min 44s', 32.27),
    ('U-CliqueNet†', 'ucliquenet', True, 1.0, 86.41, 87.50, '487.77K', 38.52, '1h 25min', 25.86),
  ],
)

TABLE6 = _compare_table(
  6,
  [
    ('U-Net', 'unet', False, None, 86.62, 91.18, '7.76M', 28.44, '15min 5s', 11.90),
    ('U-CliqueNet', 'ucliquenet', False, None, 83.31, 90.68, '487.77K', 34.06, '20min 40s', 9.97),
    ('U-Net†', 'unet', True, 1.0, 87.74, 92.08, '7.76M', 28.44, '4min 35s', 11.90),
    ('U-CliqueNet†', 'ucliquenet', True, 1.0, 83.34, 90.82, '487.77K', 34.06, '10min 20s', 9.97),
  ],
)

TABLE7 = _compare_table(
  7,
  [
    ('FCN8s', 'fcn8s', False, None, 91.23, 93.66, '134.27M', 189.5, '2h 54min', 13.92),
    ('HED', 'hed', False, None, 92.48, 95.22, '14.72M', 80.46, '1h 42min', 31.80),
    ('RCF', 'rcf', False, None, 92.71, 94.93, '14.8M', 102.67, '3h 55min', 23.87),
    ('SegNet', 'segnet', False, None, 94.36, 96.86, '29.44M', 160.11, '2h 32min', 26.21),
    ('DeepCrack', 'deepcrack', False, None, 94.59, 96.89, '29.48M', 170.1, '3h 13min', 19.73),
    # OIS printed 94.90 (written 94.9 to keep the row on one line).
    ('Deeplab v3+', 'deeplabv3plus', False, None, 90.52, 94.9, '40.35M', 101.16, '2h 30min', 20.29),
    ('CrackSeg', 'crackseg', False, None, 94.31, 96.88, '53.87M', 197.47, '3h 48min', 11.47),
    ('U-Net', 'unet', False, None, 89.54, 93.21, '31.03M', 218.46, '1h 28min', 23.35),
    ('U-CliqueNet', 'ucliquenet', False, None, 85.47, 93.18, '487.77K', 65.57, '3h 58min', 17.35),
    ('FCN8s†', 'fcn8s', True, 1.0, 95.01, 96.56, '134.27M', 189.5, '1h 27min', 13.92),
    ('HED†', 'hed', True, 1.0, 92.58, 95.91, '14.72M', 80.46, '34min', 31.80),
    ('RCF†', 'rcf', True, 0.75, 93.60, 95.24, '14.8M', 102.67, '1h 57min', 23.87),
    ('SegNet†', 'segnet', True, 0.5, 94.94, 96.67, '29.44M', 160.11, '1h 4min', 26.21),
    ('DeepCrack†', 'deepcrack', True, 0.75, 95.00, 96.41, '29.48M', 170.1, '2h 9min', 19.73),
    ('Deeplab v3+†', 'deeplabv3plus', True, 1.0, 90.34, 96.10, '40.35M', 101.16, '2h 30min', 20.29),
    ('CrackSeg†', 'crackseg', True, 0.75, 94.96, 97.49, '53.87M', 197.47, '1h 54min', 11.47),
    ('U-Net†', 'unet', True, 1.0, 93.65, 95.57, '31.03M', 218.46, '13min', 23.35),
    ('U-CliqueNet†', 'ucliquenet', True, 1.0, 93.26, 95.86, '487.77K', 65.57, '1h 8min', 17.35),
  ],
)

# The paper prints no HED, SegNet or DeepCrack dagger row on BJN260.
TABLE8 = _compare_table(
  8,
  [
    ('FCN8s', 'fcn8s', False, None, 50.11, 51.02, '134.27M', 129.53, '3h 9min', 20.89),
    ('HED', 'hed', False, None, 50.03, 52.23, '14.72M', 47.32, '1h 3min', 41.45),
    ('RCF', 'rcf', False, None, 52.52, 54.74, '14.8M', 60.16, '5h 32min', 32.43),
    ('SegNet', 'segnet', False, None, 44.91, 46.74, '29.44M', 93.99, '3h 25min', 35.50),
    ('DeepCrack', 'deepcrack', False, None, 48.17, 50.22, '29.48M', 99.85, '2h 50min', 27.64),
    ('Deeplab v3+', 'deeplabv3plus', False, None, 44.63, 46.12, '40.35M', 59.76, '1h 6min', 26.88),
    ('CrackSeg', 'crackseg', False, None, 47.34, 48.10, '53.87M', 116.67, '1h', 15.96),
    ('U-Net', 'unet', False, None, 49.94, 49.28, '31.03M', 128.18, '24min', 32.27),
    ('U-CliqueNet', 'ucliquenet', False, None, 48.97, 48.88, '487.77K', 38.52, '52min', 25.86),
    ('FCN8s†', 'fcn8s', True, 0.75, 52.35, 53.14, '134.27M', 129.53, '2h 8min', 20.89),
    ('RCF†', 'rcf', True, 1.0, 54.88, 57.50, '14.8M', 60.16, '4h 15min', 32.43),
    ('Deeplab v3+†', 'deeplabv3plus', True, 0.75, 46.46, 46.26, '40.35M', 59.76, '1h', 26.88),
    ('CrackSeg†', 'crackseg', True, 0.75, 47.33, 48.46, '53.87M', 116.67, '40min', 15.96),
    ('U-Net†', 'unet', True, 0.75, 50.85, 50.52, '31.03M', 128.18, '12min', 32.27),
    ('U-CliqueNet†', 'ucliquenet', True, 0.75, 50.67, 49.82, '487.77K', 38.52, '31min', 25.86),
  ],
)

COMPARE_TABLES: dict[int, tuple[Row, ...]] = {5: TABLE5, 6: TABLE6, 7: TABLE7, 8: TABLE8}
