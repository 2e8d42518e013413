"""The training config of a row of Tables I-IV: the configs/base.py defaults, the row's fields
(`crackjax.paper.apply_row`: the paper's tables live in the library as data, where the
reproduction runner and report read them) and an optional size variant (`,cpu`, `,smoke`)."""

from configs import base
from crackjax import paper


def get_config(table: int, arg: str | None):
  """The training config of row `arg` ('<key>' or '<key>,cpu' / '<key>,smoke') of `table`.

  Raises:
    ValueError: for a missing or unknown key (the message lists the keys), a reference row
      (RSF), or an unknown variant.
  """
  key, _, variant = (arg or '').partition(',')
  c = paper.apply_row(base.get_config(), table, key.strip())
  return base.apply_variant(c, variant.strip() or None)
