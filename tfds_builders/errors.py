"""The builders' errors and warning: `DatasetError` (a problem with the data, naming the file),
`DatasetNotFoundError` (files not where a builder looks) and `CrackDataWarning`."""

from __future__ import annotations

import warnings


class DatasetError(ValueError):
  """The dataset cannot be prepared: a file or folder is unusable (the message names it)."""


class DatasetNotFoundError(DatasetError):
  """The files a builder needs are not where it looks (e.g. the manual download is missing)."""


class CrackDataWarning(UserWarning):
  """A file was used after a correction (e.g. a non-binary mask was thresholded)."""


def warn(message: str) -> None:
  warnings.warn(message, CrackDataWarning, stacklevel=2)
