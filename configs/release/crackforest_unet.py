"""The paper-setting released model `crackforest-unet`: made on a GPU by scripts/release_gpu.sh.

The paper's setting (§IV: full 320x480 images, batch 2, Adam 3e-4, 300 steps per epoch, the
paper's augmentation) with the loss the CPU release chose on its validation part
(`crackforest_unet_cpu.CHOSEN`: exponential q(alpha), beta = 0.75, gamma = 1, with the
Jaccard term, a = 0.5, b = 1), trained for the paper's longest length (70 epochs, its second
baseline's) and exported at the epoch with the best validation ODS F1. Two things differ from
the paper, both so that the file ships inside the package beside `crackforest-unet-cpu` (all
released files together at most ~20 MB, tests/test_released_models.py):

- widths 24...384, 3/8 of the paper's 64...1024 (4.37M parameters instead of 31.03M);
- parameters stored in bfloat16 (`crackjax-export --dtype=bfloat16`: 8.7 MB instead of 17.5 MB;
  the card states the measured change against float32).

The data split is the CPU release's: CrackForest's train split without its last 14 images
(`train[:58]`); those 14 (`train[58:]`) are the validation part that picks the epoch and the
threshold; the 46 test images are scored once, by the exported file, for the card.

Config arguments:
  (none): the release run.
  tiny: seconds on a CPU with a fake CrackForest of ten images (tests of the script): tiny
    widths, 2 epochs of 3 steps of 64x96 crops, the last 2 training images as validation part.
"""

from crackjax.configs import crackforest_exp
from crackjax.configs.release import crackforest_unet_cpu

NAME = 'crackforest-unet'
WIDTHS = (24, 48, 96, 192, 384)
# The stored parameters (crackjax-export --dtype): see the module docstring.
DTYPE = 'bfloat16'
LOSS = crackforest_unet_cpu.LOSSES[crackforest_unet_cpu.CHOSEN]
RELEASE_EPOCHS = 70


def get_config(arg: str | None = None):
  c = crackforest_exp.get_config()
  c.model.widths = WIDTHS
  c.loss.update(LOSS)
  c.data.train_split = 'train[:58]'
  c.data.test_split = 'train[58:]'
  c.num_epochs = RELEASE_EPOCHS
  c.eval.protocols = ('strict',)
  c.eval.every_epochs = 1
  c.eval.num_qualitative = 2
  if arg == 'tiny':
    c.model.widths = (4, 8, 16, 32, 64)
    c.data.input_size = (64, 96)
    c.data.train_split = 'train[:-2]'
    c.data.test_split = 'train[-2:]'
    c.steps_per_epoch = 3
    c.num_epochs = 2
    c.log_every_steps = 1
  elif arg:
    raise ValueError(f"Unknown config argument {arg!r}: give none (the release) or 'tiny'.")
  # Every epoch's checkpoint is kept: the release exports the best validation epoch (about
  # 52 MB each with the optimiser state, 3.6 GB for 70 epochs on the GPU machine's disk).
  c.max_checkpoints_to_keep = c.num_epochs
  return c
