"""TFDS dataset builders of crackjax. Importing this package registers them with TFDS.

The shared code, bottom first: `errors` (DatasetError, DatasetNotFoundError, CrackDataWarning),
`contract` (the features and one example), `listing` (finding and pairing files),
`split_report` (corrections reported once per split), `reading` (an image or mask, validated) and
`paired_builder` (`PairedImageBuilder`, the base class of every builder).
"""

from tfds_builders.aiglern import AigleRN
from tfds_builders.bjn260 import BJN260
from tfds_builders.crack360 import Crack360
from tfds_builders.crack_folder import CrackFolder
from tfds_builders.crackforest import CrackForest
from tfds_builders.errors import CrackDataWarning, DatasetError, DatasetNotFoundError

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
