"""crackjax: pixel-level road crack detection in JAX/Flax (Li et al., IEEE T-Cybernetics 2021).

`crackjax.Predictor` is the entry point for running a trained model on photos
(`crackjax.deploy.predictor`); it is imported on first use so `import crackjax.data.augment`
and the like stay light.

The folders are layers; a module imports only from its own folder or the ones below
(docs/architecture.md draws them, tests/test_architecture.py checks them).

The shipped configs and the TFDS builders are `crackjax.configs` and `crackjax.tfds_builders`
(``import crackjax.tfds_builders`` registers the builders with TFDS). The repository keeps them
in its top-level configs/ and tfds_builders/ folders; the wheel installs them inside crackjax
(pyproject.toml's package-dir), and in a source tree `_SourceTreeFinder` finds them there.
"""

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

try:
  __version__ = importlib.metadata.version('crackjax')
except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
  __version__ = '0+unknown'

__all__ = ['Predictor', '__version__']

#: Packages of crackjax that the repository keeps in top-level folders (the wheel maps them).
_REPOSITORY_FOLDERS = {'crackjax.configs': 'configs', 'crackjax.tfds_builders': 'tfds_builders'}


class _SourceTreeFinder(importlib.abc.MetaPathFinder):
  """Finds `_REPOSITORY_FOLDERS` in the source tree that this crackjax was imported from (a
  clone on PYTHONPATH or beside launch.py, an editable install): the names the wheel gives
  them, whichever tree another install points at."""

  def __init__(self, root: Path):
    self.root = root

  def find_spec(self, fullname, path=None, target=None):
    folder = _REPOSITORY_FOLDERS.get(fullname)
    if folder is None:
      return None
    init = self.root / folder / '__init__.py'
    if not init.is_file():
      return None
    return importlib.util.spec_from_file_location(
      fullname, init, submodule_search_locations=[str(init.parent)]
    )


def _find_repository_folders() -> None:
  here = Path(__file__).absolute().parent
  if (here / 'tfds_builders').is_dir() or not (here.parent / 'tfds_builders').is_dir():
    return  # installed from a wheel: they are subpackages of their own
  if not any(isinstance(f, _SourceTreeFinder) for f in sys.meta_path):
    # First: before another install's finder that maps the names to another tree.
    sys.meta_path.insert(0, _SourceTreeFinder(here.parent))


_find_repository_folders()


def __getattr__(name: str):
  if name == 'Predictor':
    from crackjax.deploy.predictor import Predictor

    return Predictor
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
