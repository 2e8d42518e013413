"""crackjax: pixel-level road crack detection in JAX/Flax (Li et al., IEEE T-Cybernetics 2021).

`crackjax.Predictor` is the entry point for running a trained model on photos
(`crackjax.deploy.predictor`); it is imported on first use so `import crackjax.data.augment`
and the like stay light.

The folders are layers; a module imports only from its own folder or the ones below
(docs/architecture.md draws them, tests/test_architecture.py checks them).
"""

import importlib.metadata

try:
  __version__ = importlib.metadata.version('crackjax')
except importlib.metadata.PackageNotFoundError:  # a source tree that is not installed
  __version__ = '0+unknown'

__all__ = ['Predictor', '__version__']


def __getattr__(name: str):
  if name == 'Predictor':
    from crackjax.deploy.predictor import Predictor

    return Predictor
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
