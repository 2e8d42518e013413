"""TFDS dataset builders of crackjax, `crackjax.tfds_builders`: ``import crackjax.tfds_builders``
registers them with TFDS. The repository keeps them in tfds_builders/; the wheel installs them
as crackjax/tfds_builders/ (pyproject.toml, setup.py), and in a source tree crackjax/__init__.py
maps the name to this folder.

Each builder is a subpackage, tfds_builders/<name>/ (``__init__.py`` exporting the builder
class, ``<name>_dataset_builder.py``, ``README.md``). Every subpackage is found and imported
here, and each builder class its ``__init__`` exports is also ``crackjax.tfds_builders.<Class>``
(``from crackjax.tfds_builders import DeepCrack``): a new builder needs no line in this file,
nor in pyproject.toml.

The shared code, bottom first: `errors` (DatasetError, DatasetNotFoundError, CrackDataWarning),
`contract` (the features and one example), `listing` (finding and pairing files),
`split_report` (corrections reported once per split), `reading` (an image or mask, validated) and
`paired_builder` (`PairedImageBuilder`, the base class of every builder) and `split_folders`
(`SplitFolderBuilder`: the public datasets published with their own split folders).
"""

if __name__ != 'crackjax.tfds_builders':
  # Under a second name TFDS would see every builder registered twice ('Dataset with name
  # crack_forest already registered').
  raise ImportError(
    f'import crackjax.tfds_builders, not {__name__}: the builders are part of crackjax '
    '(import crackjax.tfds_builders registers them with TFDS).'
  )

import importlib  # noqa: E402
import pkgutil  # noqa: E402

import tensorflow_datasets as tfds  # noqa: E402

from crackjax.tfds_builders.errors import CrackDataWarning, DatasetError, DatasetNotFoundError  # noqa: E402


def _import_builders() -> dict[str, type[tfds.core.DatasetBuilder]]:
  """Imports every subpackage, which registers its builders with TFDS, and returns the builder
  classes their ``__all__`` names, by class name (`DeepCrack`, ...).

  Found, not listed: a new tfds_builders/<name>/ is registered, and importable as
  ``crackjax.tfds_builders.<Class>``, without an import line here.

  Raises:
    ImportError: two subpackages export a builder of the same name.
  """
  builders: dict[str, type[tfds.core.DatasetBuilder]] = {}
  for found in pkgutil.iter_modules(__path__):  # sorted by name
    if not found.ispkg:
      continue  # the shared modules (listing, reading, ...): imported by the builders
    package = importlib.import_module(f'{__name__}.{found.name}')
    for name in getattr(package, '__all__', ()):
      value = getattr(package, name)
      if isinstance(value, type) and issubclass(value, tfds.core.DatasetBuilder):
        if builders.get(name, value) is not value:
          raise ImportError(
            f'crackjax.tfds_builders: {found.name} and {builders[name].__module__} both export '
            f'a builder named {name}; rename one.'
          )
        builders[name] = value
  return builders


_BUILDERS = _import_builders()
globals().update(_BUILDERS)

__all__ = ['CrackDataWarning', 'DatasetError', 'DatasetNotFoundError']
__all__ += sorted(_BUILDERS)
