"""BJN260 TFDS builder (registered as 'bjn260'); see bjn260_dataset_builder."""

from crackjax.tfds_builders.bjn260.bjn260_dataset_builder import BJN260

__all__ = ['BJN260']
