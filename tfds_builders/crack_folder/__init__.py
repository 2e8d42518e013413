"""crack_folder TFDS builder: a user's own folder of images and masks; shared file helpers."""

from tfds_builders.crack_folder.common import (
                                               CrackDataError,
                                               CrackDataWarning,
                                               ManualFilesMissingError,
)
from tfds_builders.crack_folder.crack_folder_dataset_builder import (
                                               CrackFolder,
                                               CrackFolderConfig,
                                               folder_config,
)

__all__ = ['CrackDataError', 'CrackDataWarning', 'CrackFolder', 'CrackFolderConfig',
           'ManualFilesMissingError', 'folder_config']
