"""TFDS builder for Crack360 = CrackTree260 (train) + CRKWH100 (test), as array_record.

Both sets were published with DeepCrack (Zou et al., IEEE TIP 2019); manual download only.
Layout read, under the manual dir (at any depth up to 4; folder names case- and
separator-insensitive, image extensions .jpg/.png/.bmp/.tif in any case)::

    CrackTree260/{image,images,img,...}/<name>.jpg
    CrackTree260/{gt,groundTruth,label,mask,...}/<name>.bmp
    CRKWH100/{image,...}/<name>.png
    CRKWH100/{gt,...}/<name>.bmp

or, as the separate image and ground-truth archives extract::

    CrackTree260/<name>.jpg   + CrackTree260_gt/<name>.bmp     (also CrackTree260GT, ..._label)
    CRKWH100/<name>.png       + CRKWH100_gt/<name>.bmp

Images and ground truth are matched by file name without extension (a ``_gt``/``_mask``/
``_label`` suffix on the ground-truth name is ignored). CrackTree260: 260 images 800x600;
CRKWH100: 100 images 512x512. Masks: white (or 1) = crack; non-binary masks are thresholded
at half the range, and masks that are mostly crack (black on white?) are reported, in one
warning per split naming up to five files. Split: train = every CrackTree260 image,
test = every CRKWH100 image (the paper's §IV-C; training uses random 512x512 crops, set in
configs/crack360_exp.py, not here).
"""

from __future__ import annotations

import re

import tensorflow_datasets as tfds

from crackjax.tfds_builders import listing, paired_builder

HOMEPAGE = 'https://github.com/qinnzou/DeepCrack'
LAYOUT = """\
    <manual_dir>/CrackTree260/image/<name>.jpg  and  <manual_dir>/CrackTree260/gt/<name>.bmp
    <manual_dir>/CRKWH100/image/<name>.png      and  <manual_dir>/CRKWH100/gt/<name>.bmp
    (or CrackTree260/<name>.jpg + CrackTree260_gt/<name>.bmp, likewise CRKWH100 + CRKWH100_gt)"""
SOURCES = {'train': 'cracktree260', 'test': 'crkwh100'}
_CITATION = """\
@article{zou2019deepcrack,
  title={DeepCrack: Learning Hierarchical Convolutional Features for Crack Detection},
  author={Zou, Qin and Zhang, Zheng and Li, Qingquan and Qi, Xianbiao and Wang, Qian and
          Wang, Song},
  journal={IEEE Transactions on Image Processing}, volume={28}, number={3},
  pages={1498--1512}, year={2019}
}"""


def gt_key(stem: str) -> str:
  """'6192_gt' -> '6192'; other names unchanged."""
  return re.sub(r'[_\-. ]?(gt|mask|label|lab)$', '', stem, flags=re.IGNORECASE) or stem


class Crack360(paired_builder.PairedImageBuilder):
  """Crack360: train = CrackTree260 (260 images 800x600), test = CRKWH100 (100, 512x512)."""

  name = 'crack360'
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release.'}
  HOMEPAGE = HOMEPAGE
  CITATION = _CITATION
  MANUAL_DIR_REQUIRED = True
  MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
  Crack360 is not downloaded automatically. Download CrackTree260 and CRKWH100 with their
  ground truth (links in the DeepCrack repository, {HOMEPAGE}), extract them into a folder DIR:
{LAYOUT}
  and run with --config.data.manual_dir=DIR (launch.py; a builder:
  DownloadConfig(manual_dir=DIR)); on a CPU, --config=configs/crack360_exp.py:cpu (U-Net
  widths 16...256, 2 epochs) instead of the paper's setting. See
  tfds_builders/crack360/README.md.
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    root = self.manual_root(dl_manager)
    return {
      split: self._generate_examples(
        listing.find_pairs(root, key, layout=LAYOUT, what=f'{key} ', mask_key=gt_key), split=split
      )
      for split, key in SOURCES.items()
    }
