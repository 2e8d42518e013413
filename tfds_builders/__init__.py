"""TFDS dataset builders of crackjax. Importing this package registers them with TFDS.

Shared code (errors, data contract, file handling, the `PairedImageBuilder` base class) is in
`tfds_builders.common`.
"""

from tfds_builders.aiglern import AigleRN
from tfds_builders.bjn260 import BJN260
from tfds_builders.common import CrackDataWarning, DatasetError, DatasetNotFoundError
from tfds_builders.crack360 import Crack360
from tfds_builders.crack_folder import CrackFolder
from tfds_builders.crackforest import CrackForest

__all__ = [
  'AigleRN',
  'BJN260',
  'Crack360',
  'CrackDataWarning',
  'CrackFolder',
  'CrackForest',
  'DatasetError',
  'DatasetNotFoundError',
]
