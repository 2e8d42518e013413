"""Table VIII of the paper, comparison models on BJN260 (§IV-E): one config per row, the row
key as config argument.

  python launch.py --config=configs/table8.py:<key> --workdir=workdirs/table8/<key>
  --config=configs/table8.py:<key>,cpu   (or ,smoke) shrinks it (configs/base.py VARIANTS)

Rows (the model, `_dagger` for the paper's exponential-WCE rows) and the paper's figures are
crackjax/paper/data/table8.csv; the keys, the assumed epochs and the dataset settings (Table
4's, SETTINGS[4]) are crackjax/paper/tables.py's; the models' groups and original losses
are configs/compare.py's. An unknown key lists the valid ones.
"""

from crackjax.configs import compare


def get_config(arg: str | None = None):
  return compare.table_row_config(8, arg)
