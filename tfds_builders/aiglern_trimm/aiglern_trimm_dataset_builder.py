"""TFDS builder for the AigleRN-TRIMM crops (Chambon et al.; cropped by Al-maqtari et al. 2024),
as array_record.

Layout read under the manual dir (any depth up to 4, folder names case- and
separator-insensitive; `crackjax.tfds_builders.split_folders`)::

    <manual_dir>/AigleRN-TRIMM/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg

The cropped copy of the Lightweight-Modular-Model repository (``Datasets/AigleRN-TRIMM``): 152
train, 39 valid and 78 test crops of 240x141 (or 141x240) of the AigleRN and TRIMM pavement
photos, RGB JPEG masks (reduced to grey, thresholded at half the range). Grey pavement with
thin dark cracks. Not the paper's ``aiglern`` dataset (38 whole photos, its own 23/15 split).
Splits: the source's own. Masks: white on black.
"""

from __future__ import annotations

from crackjax.tfds_builders import split_folders

HOMEPAGE = 'https://www.irit.fr/~Sylvie.Chambon/Crack_Detection_Database.html'
LAYOUT = """\
    <manual_dir>/AigleRN-TRIMM/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg
      (the cropped copy: Lightweight-Modular-Model, Datasets/AigleRN-TRIMM)"""
LICENSE = (
  'AigleRN and TRIMM (Chambon et al., IRIT / LCPC) are published for research; no licence is '
  'stated. The cropped copy is redistributed in the Lightweight-Modular-Model repository (MIT '
  'for its code). Non-commercial research use, citing the papers.'
)
_CITATION = (
  """\
@article{amhaz2016automatic,
  title={Automatic Crack Detection on Two-Dimensional Pavement Images: An Algorithm Based on
         Minimal Path Selection},
  author={Amhaz, Rabih and Chambon, Sylvie and Idier, J{\\'e}r{\\^o}me and Baltazart, Vincent},
  journal={IEEE Transactions on Intelligent Transportation Systems},
  volume={17}, number={10}, pages={2718--2729}, year={2016}
}
"""
  + split_folders.LMM_CITATION
)


class AigleRNTrimm(split_folders.SplitFolderBuilder):
  """AigleRN-TRIMM crops: the source's train / valid / test folders."""

  name = 'aiglern_trimm'
  HOMEPAGE = HOMEPAGE
  CITATION = _CITATION
  KEYS = ('aiglerntrimm',)
  SIZES = frozenset({(240, 141)})
  LAYOUT = LAYOUT
  LICENSE = LICENSE
  SOURCE = split_folders.LMM_SOURCE
