"""The deterministic CrackForest train/test split.

Rule: sort the labelled stems, permute them with ``numpy.random.default_rng(SPLIT_SEED)``,
the first ``round(n * 72 / 118)`` are ``train`` and the rest ``test`` (each list then sorted).
72/118 is the paper's "60% / 40%" split as it actually counts it (§IV-A and conclusion:
72 training and 46 testing images); for other n (e.g. test fixtures) it is ~61% / 39%.

The lists for the real dataset (stems 001-118) are recorded below; a test checks that the
rule reproduces them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SPLIT_SEED = 0
TRAIN_FRACTION = 72 / 118


def split_stems(stems: Sequence[str]) -> tuple[list[str], list[str]]:
  """Splits labelled stems into (train, test), each sorted; deterministic in the set of stems."""
  ordered = sorted(stems)
  if len(set(ordered)) != len(ordered):
    raise ValueError('Duplicate stems.')
  order = np.random.default_rng(SPLIT_SEED).permutation(len(ordered))
  n_train = round(len(ordered) * TRAIN_FRACTION)
  train = sorted(ordered[i] for i in order[:n_train])
  test = sorted(ordered[i] for i in order[n_train:])
  return train, test


# fmt: off
# 72 training images of the real dataset.
CRACKFOREST_TRAIN: tuple[str, ...] = (
    '002', '003', '004', '005', '006', '007', '009', '010', '011', '012', '014', '016', '017',
    '018', '019', '020', '021', '022', '023', '024', '025', '026', '028', '029', '031', '035',
    '036', '037', '038', '040', '043', '044', '045', '051', '053', '054', '056', '058', '065',
    '066', '067', '068', '069', '072', '073', '075', '081', '082', '083', '084', '085', '086',
    '087', '088', '089', '091', '092', '093', '094', '097', '098', '099', '100', '102', '103',
    '106', '108', '109', '110', '112', '113', '116',
)
# 46 testing images of the real dataset.
CRACKFOREST_TEST: tuple[str, ...] = (
    '001', '008', '013', '015', '027', '030', '032', '033', '034', '039', '041', '042', '046',
    '047', '048', '049', '050', '052', '055', '057', '059', '060', '061', '062', '063', '064',
    '070', '071', '074', '076', '077', '078', '079', '080', '090', '095', '096', '101', '104',
    '105', '107', '111', '114', '115', '117', '118',
)
# fmt: on
