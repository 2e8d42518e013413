"""A labelled folder read straight from its files, one photo at a time: what crackjax-evaluate
scores with ``--folder=IMAGES:MASKS``, with nothing prepared or copied (no TFDS copy under
``~/tensorflow_datasets``).

The files are found, paired and read as the crack_folder builder does
(`crack_folder_dataset_builder.folder_pairs` and `read_folder`: `listing.pair_by_stem`,
`reading.load_rgb` and `reading.load_mask` with the folder's mask threshold and polarity,
the size check and the split report's warnings), so the same messages name the same files;
the records are those `loader.eval_examples` yields from the prepared copy (which stores
images and masks losslessly as PNG), in name order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from crackjax.data import registry
from crackjax.tfds_builders.crack_folder import crack_folder_dataset_builder as crack_folder


def folder_examples(data: Mapping[str, Any]) -> tuple[int, Iterator[dict[str, Any]]]:
  """(number of photos, their records) of every pair of ``data['folder']`` (a ``crack_folder``
  data group as plain data, ``config.data.to_dict()``; its split lists are not used: every
  image is scored). The pairs are listed
  here (an image without its mask is an error now); each photo is read when its record is
  asked for.

  Yields:
    ``{'image': float32 [H, W, 3] in [0, 1], 'mask': float32 [H, W, 1], 'name': str}``.

  Raises:
    DatasetError / DatasetNotFoundError: as the builder's, naming the file.
  """
  kwargs = registry.builder_kwargs(data)
  kwargs.update(train_list=None, test_list=None)
  config = crack_folder.folder_config(**kwargs)
  pairs = crack_folder.folder_pairs(config)

  def records() -> Iterator[dict[str, Any]]:
    for pair, image, mask in crack_folder.read_folder(config, pairs, 'crack_folder/test'):
      yield {
        'image': np.asarray(image, np.float32) / 255.0,
        'mask': mask[..., None].astype(np.float32),
        'name': pair.name,
      }

  return len(pairs), records()
