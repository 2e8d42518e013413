"""Table 4 of the paper, BJN260 (§IV-D): one config per row, the row key as config argument.

  python launch.py --config=configs/table4.py:<key> --workdir=workdirs/table4/<key>
  --config=configs/table4.py:<key>,cpu   (or ,smoke) shrinks it (configs/base.py VARIANTS)

Rows and the paper's figures are crackjax/paper/data/table4.csv; their keys and the table's
dataset settings are crackjax/paper/tables.py's (SETTINGS[4]); an unknown key lists the valid
ones.
"""

from crackjax.configs import paper_tables


def get_config(arg: str | None = None):
  return paper_tables.get_config(4, arg)
