"""measurements.csv and cracks.csv read back, and written again with `lat` and `lon` columns.

The cells crackjax-predict wrote are kept as they are (text a spreadsheet would evaluate
stays behind its quote, `crackjax.deploy.predict_outputs.csv_cell`); only `lat` and `lon` are
added after its columns, or replaced where an earlier survey added them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crackjax.deploy import predict_outputs as written

POSITION_COLUMNS = ('lat', 'lon')


def read_table(path: Path) -> tuple[list[str], list[list[str]]]:
  """(header, rows as raw cells) of a CSV table written by crackjax-predict.

  Raises:
    ValueError: it cannot be read, or has no `name` column.
  """
  try:
    with path.open(newline='', encoding='utf-8') as f:
      lines = list(csv.reader(f))
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise ValueError(f'cannot read {path}: {e}') from e
  if not lines or 'name' not in lines[0]:
    raise ValueError(f'{path} is not a table of crackjax-predict (no name column)')
  return lines[0], lines[1:]


def records(header: list[str], rows: list[list[str]]) -> list[dict[str, str]]:
  """The rows as {column: text}, each cell as it was before `csv_cell` quoted it."""
  return [
    {k: written.csv_text(v) for k, v in zip(header, row, strict=False)} for row in rows if row
  ]


def with_positions(
  header: list[str], rows: list[list[str]], cells: Mapping[str, Mapping[str, Any]]
) -> str:
  """The table's text with `lat` and `lon` (`cells[name]`) after its own columns."""
  keep = [i for i, h in enumerate(header) if h not in POSITION_COLUMNS]
  name = header.index('name')
  buffer = io.StringIO(newline='')
  writer = csv.writer(buffer, lineterminator='\r\n')
  writer.writerow([header[i] for i in keep] + list(POSITION_COLUMNS))
  for row in rows:
    if not row:
      continue
    own = cells.get(written.csv_text(row[name]), {})
    writer.writerow([row[i] for i in keep] + [own.get(c, '') for c in POSITION_COLUMNS])
  return buffer.getvalue()
