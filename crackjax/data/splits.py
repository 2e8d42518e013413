"""A run's dataset as the trainer reads it: prepared on first use, each split opened once.

`Splits` is built once per experiment (`crackjax.experiment.build`) from the ``data`` group
as plain data and the loader's spec; whoever asks for a split (the data check, the train
iterator, the periodic and the final evaluation) gets the same source, so a launch prepares
the dataset and opens each split once. A mixture of datasets (`crackjax.data.mixture`) opens
its members' splits of that role.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from crackjax.data import loader, mixture, registry


class Splits:
  """The prepared dataset of one run and its opened splits.

  Args:
    data: the config's ``data`` group as plain data (a mapping: ``name``, ``train_split``,
      ``test_split``, the builder's fields or a mixture's members).
    spec: what the train iterator reads (`loader.LoaderSpec`).
  """

  def __init__(self, data: Mapping[str, Any], spec: loader.LoaderSpec):
    self.data, self.spec = data, spec
    self.train_split = str(data.get('train_split', 'train'))
    self.test_split = str(data.get('test_split', 'test'))
    self._sources: dict[str, Sequence[dict[str, Any]]] = {}

  @functools.cached_property
  def builder(self) -> Any:
    """The prepared TFDS builder (prepared here on first use); a mixture: its members'.

    Raises:
      data.registry.DatasetError: absent or unusable data (the message names what and where).
    """
    if mixture.is_mixture(self.data):
      return mixture.prepare(self.data)
    return registry.prepare_dataset(self.data)

  def prepare(self) -> Any:
    """Prepares the dataset if needed (once) and returns its builder: launch.py calls it
    early, so absent or invalid data stops a run before a model is compiled."""
    return self.builder

  def source(self, split: str) -> Sequence[dict[str, Any]]:
    """The random-access source of `split`, opened once."""
    if split not in self._sources:
      builder = self.prepare()  # prepared first, whoever asks
      if mixture.is_mixture(self.data):
        self._sources[split] = mixture.open_split(self.data, split)
      else:
        self._sources[split] = registry.ReadableSource(builder, split)
    return self._sources[split]

  @property
  def train_source(self) -> Sequence[dict[str, Any]]:
    return self.source(self.train_split)

  @property
  def test_source(self) -> Sequence[dict[str, Any]]:
    return self.source(self.test_split)

  @functools.cached_property
  def train_image_shape(self) -> tuple[int, int, int]:
    """(H, W, 3) of the images the train step sees: the crop size, else the first train
    image's size."""
    if self.spec.crop_size is not None:
      return *self.spec.crop_size, 3
    h, w = np.asarray(self.train_source[0]['image']).shape[:2]
    return int(h), int(w), 3

  def examples(self, split: str | None = None) -> Iterator[dict[str, Any]]:
    """Every record of `split` (default the test split) once (`loader.eval_examples`)."""
    return loader.eval_examples(self.source(split or self.test_split))

  def train_iterator(self, start_step: int = 0, **kwargs: Any) -> Iterator[dict[str, np.ndarray]]:
    """This process's part of global batches `start_step`, `start_step` + 1, ... of the train
    split (`loader.create_train_iterator`; `kwargs`: its process index and count)."""
    return loader.create_train_iterator(
      self.spec, self.train_source, start_step=start_step, **kwargs
    )
