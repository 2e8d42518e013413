"""Table V of the paper, comparison models on CrackForest (§IV-E): one config per row, the row
key as config argument.

  python launch.py --config=configs/table5.py:<key> --workdir=workdirs/table5/<key>
  --config=configs/table5.py:<key>,cpu   (or ,smoke) shrinks it (configs/base.py VARIANTS)

Rows (the model, `_dagger` for the paper's exponential-WCE rows) and the paper's figures are
crackjax/paper/data/table5.csv; the keys, the assumed epochs and the dataset settings (Table
1's, SETTINGS[1]) are crackjax/paper/tables.py's; the models' groups and original losses
are configs/compare.py's. An unknown key lists the valid ones.
"""

from crackjax.configs import compare


def get_config(arg: str | None = None):
  return compare.table_row_config(5, arg)
