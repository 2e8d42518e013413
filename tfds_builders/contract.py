"""The data contract of every builder: the features (image, mask, name), the DatasetInfo of a
local dataset, one example, and names normalised for matching."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import PIL.Image
import tensorflow_datasets as tfds


def features() -> tfds.features.FeaturesDict:
  """The feature dict of docs/architecture.md's data contract (PNG-encoded, lossless)."""
  return tfds.features.FeaturesDict(
    {
      'image': tfds.features.Image(shape=(None, None, 3), dtype=np.uint8, encoding_format='png'),
      'mask': tfds.features.Image(shape=(None, None, 1), dtype=np.uint8, encoding_format='png'),
      'name': tfds.features.Text(),
    }
  )


class _LocalDatasetInfo(tfds.core.DatasetInfo):
  """DatasetInfo of a dataset that is only ever prepared from local files.

  Before a builder's data is prepared, TFDS asks `initialize_from_bucket` for metadata
  pre-computed in gs://tfds-data, where none of the crack datasets is; it creates an empty
  temporary directory first and never removes it: one more in /tmp for every builder built
  (thousands after a test run, one per launch for a user)."""

  def initialize_from_bucket(self) -> None:
    """Nothing to fetch: the metadata comes from preparing the local files."""


def dataset_info(
  builder: tfds.core.DatasetBuilder,
  description: str,
  *,
  homepage: str | None = None,
  citation: str | None = None,
  license: str | None = None,  # noqa: A002 - TFDS' own name for it
) -> tfds.core.DatasetInfo:
  """DatasetInfo shared by the crack builders: the contract's features, (image, mask) as
  supervised keys, and records kept in the order written (sorted names); `license`: the
  dataset's terms of use, where it states them (``info.redistribution_info.license``)."""
  return _LocalDatasetInfo(
    builder=builder,
    description=description,
    features=features(),
    supervised_keys=('image', 'mask'),
    homepage=homepage,
    citation=citation,
    license=license,
    disable_shuffling=True,
  )


def example(image: PIL.Image.Image, mask: np.ndarray, name: str) -> dict[str, Any]:
  """A record of the data contract. PIL images, so TFDS encodes with PIL, not TensorFlow."""
  return {'image': image, 'mask': PIL.Image.fromarray(mask, mode='L'), 'name': name}


def normalise(name: str) -> str:
  """'GROUND_TRUTH' -> 'groundtruth', 'CRKWH100-gt' -> 'crkwh100gt'."""
  return re.sub(r'[^a-z0-9]', '', name.lower())
