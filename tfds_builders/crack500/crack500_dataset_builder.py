"""TFDS builder for CRACK500 (Zhang et al., ICIP 2016; Yang et al., T-ITS 2019), as array_record.

Layout read under the manual dir (any depth up to 4, folder names case- and
separator-insensitive; `crackjax.tfds_builders.split_folders`)::

    <manual_dir>/Crack500/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg
    <manual_dir>/CRACK500/{traincrop,valcrop,testcrop}/<name>.jpg + <name>_mask.png
    <manual_dir>/CRACK500/{train,test}_img/<name>.jpg + {train,test}_lab/<name>.png

The authors' archive: 1,896 train, 348 val and 1,124 test crops of 640x360 cut from 250 / 50 /
200 photos of 2000x1500, PNG masks beside the images. The cropped copy of the
Lightweight-Modular-Model repository (``Datasets/Crack500``): 5,270 train, 899 valid and 4,128
test crops of about 213x121 (or 121x213, 224x138) at the 640x360 crops' scale, overlapping and
rotated, JPEG masks (thresholded at half the range); its splits follow the authors' photos.
Cracks are wide: 20-40 px bands at 640x360. Splits: the source's own. Masks: white on black.
"""

from __future__ import annotations

from crackjax.tfds_builders import split_folders

HOMEPAGE = 'https://github.com/fyangneil/pavement-crack-detection'
LAYOUT = """\
    <manual_dir>/Crack500/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg
      (the cropped copy: Lightweight-Modular-Model, Datasets/Crack500)
    <manual_dir>/CRACK500/{traincrop,valcrop,testcrop}/<name>.jpg + <name>_mask.png
      (the authors' archive: 640x360 crops)
    <manual_dir>/CRACK500/{train,test}_img/<name>.jpg + {train,test}_lab/<name>.png"""
LICENSE = (
  'No licence stated by the authors (https://github.com/fyangneil/pavement-crack-detection: '
  '"please cite the corresponding papers when using these datasets"). The cropped copy is '
  'redistributed in the Lightweight-Modular-Model repository (MIT for its code). Use for '
  'research, citing the papers.'
)
_CITATION = (
  """\
@inproceedings{zhang2016road,
  title={Road crack detection using deep convolutional neural network},
  author={Zhang, Lei and Yang, Fan and Zhang, Yimin Daniel and Zhu, Ying Julie},
  booktitle={IEEE International Conference on Image Processing (ICIP)},
  pages={3708--3712}, year={2016}
}
@article{yang2019feature,
  title={Feature Pyramid and Hierarchical Boosting Network for Pavement Crack Detection},
  author={Yang, Fan and Zhang, Lei and Yu, Sijia and Prokhorov, Danil and Mei, Xue and
          Ling, Haibin},
  journal={IEEE Transactions on Intelligent Transportation Systems}, year={2019}
}
"""
  + split_folders.LMM_CITATION
)


class Crack500(split_folders.SplitFolderBuilder):
  """CRACK500: the source's train / valid / test folders."""

  name = 'crack500'
  HOMEPAGE = HOMEPAGE
  CITATION = _CITATION
  KEYS = ('crack500',)
  SIZES = frozenset({(213, 121), (213, 122), (224, 138), (640, 360)})
  LAYOUT = LAYOUT
  LICENSE = LICENSE
  SOURCE = f'the authors (links in {HOMEPAGE}) or {split_folders.LMM_SOURCE}'
