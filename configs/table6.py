"""Table VI of the paper, comparison models on AigleRN (§IV-E): one config per row, the row
key as config argument.

  python launch.py --config=configs/table6.py:<key> --workdir=workdirs/table6/<key>
  --config=configs/table6.py:<key>,cpu   (or ,smoke) shrinks it (configs/base.py VARIANTS)

Rows (the model, `_dagger` for the paper's exponential-WCE rows) and the paper's figures are
crackjax/paper/data/table6.csv; the keys, the assumed epochs and the dataset settings (Table
2's, SETTINGS[2]) are crackjax/paper/tables.py's; the models' groups and original losses
are configs/compare.py's. An unknown key lists the valid ones.
"""

from crackjax.configs import compare


def get_config(arg: str | None = None):
  return compare.table_row_config(6, arg)
