"""Table 1 of the paper, CrackForest (§IV-A): one config per row, the row key as config argument.

  python launch.py --config=configs/table1.py:<key> --workdir=workdirs/table1/<key>
  --config=configs/table1.py:<key>,cpu   (or ,smoke) shrinks it (configs/base.py VARIANTS)

Rows, their keys, the paper's figures and the table's dataset settings live in
crackjax/paper/tables.py (TABLE1, SETTINGS[1]); an unknown key lists the valid ones.
"""

from configs import paper_tables


def get_config(arg: str | None = None):
  return paper_tables.get_config(1, arg)
