"""Table 2 of the paper, AigleRN (§IV-B): one config per row, the row key as config argument.

  python launch.py --config=configs/table2.py:<key> --workdir=workdirs/table2/<key>
  --config=configs/table2.py:<key>,cpu   (or ,smoke) shrinks it (configs/base.py VARIANTS)

Rows and the paper's figures are crackjax/paper/data/table2.csv; their keys and the table's
dataset settings are crackjax/paper/tables.py's (SETTINGS[2]); an unknown key lists the valid
ones.
"""

from crackjax.configs import paper_tables


def get_config(arg: str | None = None):
  return paper_tables.get_config(2, arg)
