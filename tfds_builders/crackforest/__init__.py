"""CrackForest TFDS builder (registered as 'crackforest'); see crackforest_dataset_builder."""

from crackjax.tfds_builders.crackforest.crackforest_dataset_builder import CrackForest

__all__ = ['CrackForest']
