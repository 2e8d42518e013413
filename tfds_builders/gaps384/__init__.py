"""GAPs384 TFDS builder (registered as 'gaps384'); see gaps384_dataset_builder."""

from crackjax.tfds_builders.gaps384.gaps384_dataset_builder import GAPs384

__all__ = ['GAPs384']
