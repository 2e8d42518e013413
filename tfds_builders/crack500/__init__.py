"""Crack500 TFDS builder (registered as 'crack500'); see crack500_dataset_builder."""

from crackjax.tfds_builders.crack500.crack500_dataset_builder import Crack500

__all__ = ['Crack500']
