"""AigleRN TFDS builder (registered as 'aiglern'); see aiglern_dataset_builder."""

from crackjax.tfds_builders.aiglern.aiglern_dataset_builder import AigleRN

__all__ = ['AigleRN']
