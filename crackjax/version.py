"""The installed crackjax's version (`crackjax.__version__`), at the bottom of the layers so that
any module may record it (model files, exports)."""

import importlib.metadata

try:
  __version__ = importlib.metadata.version('crackjax')
except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
  __version__ = '0+unknown'
