"""AigleRNTrimm TFDS builder (registered as 'aiglern_trimm'); see aiglern_trimm_dataset_builder."""

from crackjax.tfds_builders.aiglern_trimm.aiglern_trimm_dataset_builder import AigleRNTrimm

__all__ = ['AigleRNTrimm']
