"""DeepCrack TFDS builder (registered as 'deepcrack'); see deepcrack_dataset_builder."""

from crackjax.tfds_builders.deepcrack.deepcrack_dataset_builder import DeepCrack

__all__ = ['DeepCrack']
