"""TFDS dataset builders of crackjax. Importing this package registers them with TFDS."""

from tfds_builders.aiglern import AigleRN
from tfds_builders.bjn260 import BJN260
from tfds_builders.crack360 import Crack360
from tfds_builders.crack_folder import CrackFolder
from tfds_builders.crackforest import CrackForest

__all__ = ['AigleRN', 'BJN260', 'Crack360', 'CrackFolder', 'CrackForest']
