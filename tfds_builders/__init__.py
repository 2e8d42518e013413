"""TFDS dataset builders of crackjax. Importing this package registers them with TFDS."""

from tfds_builders.crackforest import CrackForest

__all__ = ['CrackForest']
