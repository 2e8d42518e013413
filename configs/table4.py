"""Table 4 of the paper, BJN260 (§IV-D): one config per row, the row key as config argument.

  python launch.py --config=configs/table4.py:<key> --workdir=workdirs/table4/<key>
  --config=configs/table4.py:<key>,cpu   (or ,smoke) shrinks it (configs/base.py VARIANTS)

Rows, their keys, the paper's figures and the table's dataset settings live in
crackjax/paper/tables.py (TABLE4, SETTINGS[4]); an unknown key lists the valid ones.
"""

from configs import paper_tables


def get_config(arg: str | None = None):
  return paper_tables.get_config(4, arg)
