"""`PairedImageBuilder`, the base class of every builder: it stores array_record files of the
data contract's features; a builder lists its (image, mask) pairs per split and may override how
one pair is read (`load_pair`) and what happens after the size check (`postprocess`). Masks that
are mostly crack are an error instead of a warning where the builder says so
(`refuse_majority_crack`)."""

from __future__ import annotations

import abc
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import PIL.Image
import tensorflow_datasets as tfds
from etils import epath

from crackjax.tfds_builders.contract import dataset_info, example
from crackjax.tfds_builders.errors import CrackDataWarning, DatasetError
from crackjax.tfds_builders.listing import Pair, manual_dir_or_raise
from crackjax.tfds_builders.reading import check_same_size, load_mask, load_rgb
from crackjax.tfds_builders.split_report import CONDITIONS, SplitReport, reporting_to


class PairedImageBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Base of the crack builders: one (image, mask) file pair -> one record of the contract.

  It is abstract (`_split_generators` is left to subclasses) and created with
  ``skip_registration=True``, so TFDS registers only its subclasses, each by its ``name``.

  A subclass sets ``name``, ``VERSION``, ``RELEASE_NOTES`` and optionally ``HOMEPAGE``,
  ``CITATION`` and ``DESCRIPTION`` (default: the docstring of the subclass's module), and
  implements ``_split_generators`` returning ``{split: self._generate_examples(pairs)}``.
  Hooks, in the order `_generate_examples` calls them for each pair:

  * ``load_pair(pair) -> (RGB PIL image, uint8 HxW mask with 1 = crack)``; the default reads
    the image with `load_rgb` and the mask with `load_mask` (``MASK_THRESHOLD``,
    ``MASK_POLARITY``);
  * `check_same_size` (the mask must have its image's size; not a hook);
  * ``postprocess(image, mask) -> (image, mask)``, e.g. a resize; the default keeps both.

  Each split's corrections and suspicious files are collected in a `SplitReport` and reported
  at the end of the split, one `CrackDataWarning` per condition; masks that are mostly crack
  raise `DatasetError` instead when ``refuse_majority_crack()`` (default False: a warning).

  Files are written as array_record (random access, read without TensorFlow) unless
  ``file_format`` is given.
  """

  HOMEPAGE: ClassVar[str | None] = None
  CITATION: ClassVar[str | None] = None
  DESCRIPTION: ClassVar[str | None] = None
  MASK_THRESHOLD: ClassVar[float] = 0.5
  MASK_POLARITY: ClassVar[str] = 'bright'

  def __init__(self, *, file_format: str | None = None, **kwargs: Any):
    super().__init__(file_format=file_format or 'array_record', **kwargs)
    # Every image and mask file a preparation read: the copy's source
    # (crackjax.data.source_record, written by crackjax.data.registry).
    self.source_paths: list[str] = []

  @classmethod
  def description(cls) -> str:
    """``DESCRIPTION``, else the docstring of the module that defines the builder."""
    if cls.DESCRIPTION is not None:
      return cls.DESCRIPTION
    module = sys.modules.get(cls.__module__)
    return (module and module.__doc__) or cls.__doc__ or ''

  def _info(self) -> tfds.core.DatasetInfo:
    return dataset_info(
      self,
      self.description(),
      homepage=self.HOMEPAGE,
      citation=self.CITATION,
      license=getattr(self, 'LICENSE', None),
    )

  @abc.abstractmethod
  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    """``{split: self._generate_examples(pairs)}``."""

  def manual_root(self, dl_manager: tfds.download.DownloadManager) -> epath.Path:
    """The manual dir, or DatasetNotFoundError with ``MANUAL_DOWNLOAD_INSTRUCTIONS``."""
    return manual_dir_or_raise(dl_manager, self.MANUAL_DOWNLOAD_INSTRUCTIONS)

  def split_by_name(self, pairs: Sequence[Pair], **names: Sequence[str]) -> dict[str, Any]:
    """``{split: self._generate_examples(those pairs)}`` from ``split=[pair names]``."""
    by_name = {p.name: p for p in pairs}
    return {
      split: self._generate_examples([by_name[n] for n in split_names], split=split)
      for split, split_names in names.items()
    }

  def load_pair(self, pair: Pair) -> tuple[PIL.Image.Image, np.ndarray]:
    """Reads one pair: (RGB PIL image, uint8 HxW mask, 1 = crack)."""
    image = load_rgb(pair.image_path)
    mask = load_mask(pair.mask_path, threshold=self.MASK_THRESHOLD, polarity=self.MASK_POLARITY)
    return image, mask

  def postprocess(
    self, image: PIL.Image.Image, mask: np.ndarray
  ) -> tuple[PIL.Image.Image, np.ndarray]:
    """Applied after the size check (e.g. a resize); the default keeps both as they are."""
    return image, mask

  def refuse_majority_crack(self) -> bool:
    """Whether masks that are mostly crack stop preparation (True) or are only warned about."""
    return False

  def majority_crack_advice(self) -> str:
    """What to do about masks that are mostly crack (appended to the warning or error)."""
    return (
      'If cracks are black on white, this builder reads them inverted; if they really cover '
      'most of the image, ignore this.'
    )

  def _generate_examples(
    self, pairs: Sequence[Pair], split: str = ''
  ) -> Iterator[tuple[str, dict[str, Any]]]:
    report = SplitReport(f'{self.name}/{split}' if split else self.name)
    for pair in pairs:
      self.source_paths += [str(pair.image_path), str(pair.mask_path)]
      with reporting_to(report):
        image, mask = self.load_pair(pair)
        check_same_size(image, mask, pair.image_path, pair.mask_path)
        image, mask = self.postprocess(image, mask)
        report.check(image, mask, pair)
      yield pair.name, example(image, mask, pair.name)
    self.report_split(report)

  def report_split(self, report: SplitReport) -> None:
    """One `CrackDataWarning` per condition of ``report``; `DatasetError` for masks that are
    mostly crack if `refuse_majority_crack`."""
    report_split(report, self.refuse_majority_crack(), self.majority_crack_advice())


def report_split(report: SplitReport, refuse_majority_crack: bool, advice: str) -> None:
  """`PairedImageBuilder.report_split` for any reader of a split (a folder read without a
  builder too): one `CrackDataWarning` per condition of ``report``, `DatasetError` for masks
  that are mostly crack if `refuse_majority_crack` (`advice` after the files)."""
  for condition in CONDITIONS:
    if condition in report.notes and condition != 'majority_crack':
      warnings.warn(report.message(condition), CrackDataWarning, stacklevel=3)
  empty = report.empty_message()
  if empty:
    warnings.warn(empty, CrackDataWarning, stacklevel=3)
  if 'majority_crack' in report.notes:
    message = f'{report.message("majority_crack")}. {advice}'
    if refuse_majority_crack:
      raise DatasetError(message)
    warnings.warn(message, CrackDataWarning, stacklevel=3)
