"""crackjax: pixel-level road crack detection in JAX/Flax (Li et al., IEEE T-Cybernetics 2021).

`crackjax.Predictor` is the entry point for running a trained model on photos
(`crackjax.predict`); it is imported on first use so `import crackjax.augment` and the like
stay light.
"""

__all__ = ['Predictor']


def __getattr__(name: str):
  if name == 'Predictor':
    from crackjax.predict import Predictor

    return Predictor
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
