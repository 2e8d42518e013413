"""crack_folder TFDS builder: a user's own folder of images and masks."""

from crackjax.tfds_builders.crack_folder.crack_folder_dataset_builder import (
  CrackFolder,
  CrackFolderConfig,
  folder_config,
)

__all__ = ['CrackFolder', 'CrackFolderConfig', 'folder_config']
