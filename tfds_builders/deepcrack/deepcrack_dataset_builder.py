"""TFDS builder for DeepCrack (Liu et al., Neurocomputing 2019), as array_record.

Layout read under the manual dir (any depth up to 4, folder names case- and
separator-insensitive; `crackjax.tfds_builders.split_folders`)::

    <manual_dir>/DeepCrack/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg
    <manual_dir>/DeepCrack/{train,test}_img/<name>.jpg   + {train,test}_lab/<name>.png

The authors' copy (https://github.com/yhlleo/DeepCrack, ``dataset/``): 300 train and 237 test
photos of 544x384 (or 384x544), PNG masks, no validation split. The cropped copy of the
Lightweight-Modular-Model repository (``Datasets/DeepCrack``): 2,908 train, 253 valid and
3,313 test crops of 181x128 (or 128x181) at the photos' own scale, overlapping and rotated,
crack-free crops left out, JPEG masks (thresholded at half the range); its test crops come from
the authors' test photos. Splits: the source's own. Masks: white on black.
"""

from __future__ import annotations

from crackjax.tfds_builders import split_folders

HOMEPAGE = 'https://github.com/yhlleo/DeepCrack'
LAYOUT = """\
    <manual_dir>/DeepCrack/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg
      (the cropped copy: Lightweight-Modular-Model, Datasets/DeepCrack)
    <manual_dir>/DeepCrack/{train,test}_img/<name>.jpg + {train,test}_lab/<name>.png
      (the authors' dataset/ folder: 300 train, 237 test photos of 544x384)"""
LICENSE = (
  'No licence stated by the authors (https://github.com/yhlleo/DeepCrack: a public benchmark; '
  '"if you use this dataset for your research, please cite our paper"). The cropped copy is '
  'redistributed in the Lightweight-Modular-Model repository (MIT for its code). Use for '
  'research, citing the paper.'
)
_CITATION = (
  """\
@article{liu2019deepcrack,
  title={DeepCrack: A Deep Hierarchical Feature Learning Architecture for Crack Segmentation},
  author={Liu, Yahui and Yao, Jian and Lu, Xiaohu and Xie, Renping and Li, Li},
  journal={Neurocomputing}, volume={338}, pages={139--153}, year={2019}
}
"""
  + split_folders.LMM_CITATION
)


class DeepCrack(split_folders.SplitFolderBuilder):
  """DeepCrack: the source's train / (valid) / test folders."""

  name = 'deepcrack'
  HOMEPAGE = HOMEPAGE
  CITATION = _CITATION
  KEYS = ('deepcrack',)
  SIZES = frozenset({(181, 128), (544, 384)})
  LAYOUT = LAYOUT
  LICENSE = LICENSE
  SOURCE = f'{HOMEPAGE} (dataset/) or {split_folders.LMM_SOURCE}'
