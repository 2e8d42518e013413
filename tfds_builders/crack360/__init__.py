"""Crack360 TFDS builder (registered as 'crack360'); see crack360_dataset_builder."""

from crackjax.tfds_builders.crack360.crack360_dataset_builder import Crack360

__all__ = ['Crack360']
