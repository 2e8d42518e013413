"""TFDS dataset builders of crackjax, `crackjax.tfds_builders`: ``import crackjax.tfds_builders``
registers them with TFDS. The repository keeps them in tfds_builders/; the wheel installs them
as crackjax/tfds_builders/ (pyproject.toml), and in a source tree crackjax/__init__.py maps the
name to this folder.

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

from crackjax.tfds_builders.aiglern import AigleRN  # noqa: E402
from crackjax.tfds_builders.aiglern_trimm import AigleRNTrimm  # noqa: E402
from crackjax.tfds_builders.bjn260 import BJN260  # noqa: E402
from crackjax.tfds_builders.crack360 import Crack360  # noqa: E402
from crackjax.tfds_builders.crack500 import Crack500  # noqa: E402
from crackjax.tfds_builders.crack_folder import CrackFolder  # noqa: E402
from crackjax.tfds_builders.crackforest import CrackForest  # noqa: E402
from crackjax.tfds_builders.deepcrack import DeepCrack  # noqa: E402
from crackjax.tfds_builders.errors import CrackDataWarning, DatasetError, DatasetNotFoundError  # noqa: E402
from crackjax.tfds_builders.gaps384 import GAPs384  # noqa: E402

__all__ = [
  'AigleRN',
  'AigleRNTrimm',
  'BJN260',
  'Crack360',
  'Crack500',
  'CrackDataWarning',
  'CrackFolder',
  'CrackForest',
  'DatasetError',
  'DatasetNotFoundError',
  'DeepCrack',
  'GAPs384',
]
