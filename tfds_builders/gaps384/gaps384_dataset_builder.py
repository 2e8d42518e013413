"""TFDS builder for GAPs384 (Eisenbach et al., IJCNN 2017; pixel labels of Yang et al., T-ITS
2019), the cropped copy, as array_record.

Layout read under the manual dir (any depth up to 4, folder names case- and
separator-insensitive; `crackjax.tfds_builders.split_folders`)::

    <manual_dir>/GAPs384/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg

The cropped copy of the Lightweight-Modular-Model repository (``Datasets/GAPs384``): 942 train,
157 valid and 611 test crops of 133x133 cut from GAPs384's 640x540 tiles of grey 1920x1080
road photos (stored as RGB), JPEG masks (thresholded at half the range). Mostly thin, faint
cracks on asphalt. Splits: the source's own. Masks: white on black.
"""

from __future__ import annotations

from crackjax.tfds_builders import split_folders

HOMEPAGE = 'https://github.com/fyangneil/pavement-crack-detection'
LAYOUT = """\
    <manual_dir>/GAPs384/{train,valid,test}/<name>.jpg + {train,valid,test}_lab/<name>.jpg
      (the cropped copy: Lightweight-Modular-Model, Datasets/GAPs384)"""
LICENSE = (
  'The GAPs dataset (TU Ilmenau, https://www.tu-ilmenau.de/neurob/data-sets-code/gaps) is '
  'licensed for non-commercial research only, after registration; the GAPs384 pixel labels '
  'were published with FPHB (https://github.com/fyangneil/pavement-crack-detection). The '
  'cropped copy is redistributed in the Lightweight-Modular-Model repository (MIT for its '
  'code). Non-commercial research only.'
)
_CITATION = (
  """\
@inproceedings{eisenbach2017how,
  title={How to Get Pavement Distress Detection Ready for Deep Learning? A Systematic Approach},
  author={Eisenbach, Markus and Stricker, Ronny and Seichter, Daniel and Amende, Karl and
          Debes, Klaus and Sesselmann, Maximilian and Ebersbach, Dirk and Stoeckert, Ulrike
          and Gross, Horst-Michael},
  booktitle={International Joint Conference on Neural Networks (IJCNN)},
  pages={2039--2047}, year={2017}
}
"""
  + split_folders.LMM_CITATION
)


class GAPs384(split_folders.SplitFolderBuilder):
  """GAPs384 crops: the source's train / valid / test folders."""

  name = 'gaps384'
  HOMEPAGE = HOMEPAGE
  CITATION = _CITATION
  KEYS = ('gaps384',)
  SIZES = frozenset({(133, 133)})
  LAYOUT = LAYOUT
  LICENSE = LICENSE
  SOURCE = split_folders.LMM_SOURCE
