"""TFDS builder for AigleRN (Chambon et al.), from the "CrackDataset" archive, as array_record.

Layout read (that of the CrackDataset archive; manual download only)::

    <manual_dir>/.../IMAGES/AIGLE_RN/Im_<id>or.png        (some copies: Im_<id>.png)
    <manual_dir>/.../GROUND_TRUTH/AIGLE_RN/GT_AIGLE_RN_<id>.png

Folder names are matched case- and separator-insensitively (``images``, ``ground_truth``,
``gt``, ``AigleRN`` ...), and ``manual_dir`` may also be the AIGLE_RN folder pair's parent or
a folder holding ``images/`` and ``gt/`` directly. Images and ground truth are matched by
``<id>``, the file name with the prefixes ``Im_``, ``GT_``, ``AIGLE_RN_`` and the suffix ``or``
removed (case-insensitive), so ``Im_F01Aor.png``, ``Im_F01A.png`` and ``GT_AIGLE_RN_F01A.png``
all have id ``F01A``. 38 images, 311x462 or 991x462 (W x H), grey or RGB (stored as RGB).

Label polarity: copies differ (white cracks on black, or black on white), so the polarity is
decided per mask: crack = the minority value ('auto' polarity of `reading.binarize`);
non-binary masks (the archive's JPEG-compressed ones) are thresholded at half the range, with
one warning per split giving their count and the first five file names.

Split: ids sorted, permuted with ``numpy.random.default_rng(0)``; the first ``round(0.6 n)``
(23 of 38, as in the paper's conclusion) are ``train``, the rest (15) ``test``.
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from crackjax.tfds_builders import listing, paired_builder

TRAIN_FRACTION = 0.6
SPLIT_SEED = 0
HOMEPAGE = 'https://www.irit.fr/~Sylvie.Chambon/Crack_Detection_Database.html'
LAYOUT = """\
    <manual_dir>/.../IMAGES/AIGLE_RN/Im_<id>or.png   (or Im_<id>.png)
    <manual_dir>/.../GROUND_TRUTH/AIGLE_RN/GT_AIGLE_RN_<id>.png"""
_CITATION = """\
@inproceedings{chambon2011automatic,
  title={Automatic Road Pavement Assessment with Image Processing: Review and Comparison},
  author={Chambon, Sylvie and Moliard, Jean-Marc},
  journal={International Journal of Geophysics}, volume={2011}, year={2011}
}
@article{amhaz2016automatic,
  title={Automatic Crack Detection on Two-Dimensional Pavement Images: An Algorithm Based on
         Minimal Path Selection},
  author={Amhaz, Rabih and Chambon, Sylvie and Idier, J{\\'e}r{\\^o}me and Baltazart, Vincent},
  journal={IEEE Transactions on Intelligent Transportation Systems},
  volume={17}, number={10}, pages={2718--2729}, year={2016}
}"""


def image_id(stem: str) -> str:
  """'Im_F01Aor' -> 'F01A', 'GT_AIGLE_RN_F01A' -> 'F01A', 'Im_GT_AIGLE_RN_F01Aor' -> 'F01A'."""
  s = stem
  for prefix in ('im_', 'gt_', 'aigle_rn_', 'aiglern_'):
    if s.lower().startswith(prefix):
      s = s[len(prefix) :]
  if s.lower().endswith('or') and len(s) > 2:
    s = s[:-2]
  return s.rstrip('_')


def split_ids(ids: list[str]) -> tuple[list[str], list[str]]:
  return listing.random_split(ids, round(len(ids) * TRAIN_FRACTION), SPLIT_SEED)


class AigleRN(paired_builder.PairedImageBuilder):
  """AigleRN: 38 pavement images (311x462 or 991x462), 23 train / 15 test."""

  name = 'aiglern'
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Initial release: crack = minority label per mask; 60/40 split.'}
  HOMEPAGE = HOMEPAGE
  CITATION = _CITATION
  MASK_POLARITY = 'auto'  # Copies differ in polarity: crack = the minority value, per mask.
  MANUAL_DIR_REQUIRED = True  # crackjax.data.registry checks the manual dir before preparing.
  MANUAL_DOWNLOAD_INSTRUCTIONS = f"""\
  AigleRN is not downloaded automatically. Get the "CrackDataset" archive of Chambon et al.
  (IRIT; {HOMEPAGE}, or ask the authors), extract it into a folder DIR so that
{LAYOUT}
  and run with --config.data.manual_dir=DIR (launch.py; a builder:
  DownloadConfig(manual_dir=DIR)). See tfds_builders/aiglern/README.md.
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    pairs = listing.find_pairs(
      self.manual_root(dl_manager), 'aiglern', layout=LAYOUT, image_key=image_id, mask_key=image_id
    )
    train, test = split_ids([p.name for p in pairs])
    return self.split_by_name(pairs, train=train, test=test)
