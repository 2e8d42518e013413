"""The general released model `roads-unet`: `roads-unet-cpu`'s recipe at the widest U-Net that
ships, trained in one GPU call by scripts/release_roads_gpu.sh (issue 48, step 2).

The recipe is `roads_unet_cpu`'s (docs/models.md): the five public datasets mixed
(CrackForest, DeepCrack, CRACK500, GAPs384, AigleRN-TRIMM), each sampled with weight 1 at its
photos' own scale; every epoch scored on each member's validation part (strict protocol); the
release takes the epoch with the best mean over the datasets of their validation ODS F1 and
stores one threshold, the pooled validation strict ODS threshold; the loss is the paper's
exponential WCE (beta 0.75) + Jaccard (a = 0.5, b = 1). What differs:

- **Widths 32...512**, half the paper's 64...1024: 7.76M parameters, 15.5 MB as a bfloat16
  model file (`crackjax-export --dtype=bfloat16`). The paper's widths are 31.03M parameters,
  62 MB in bfloat16, over the 16 MB a released file may take; 32...512 is the widest of the
  paper's shape (each stage twice the last) with widths a multiple of 8 that fits (33...528:
  16.5 MB; 36...576: 19.6 MB). Parameters, activations and the loss train in float32.
- **Batch 16 of random 128x128 crops**, 2,000 steps per epoch, up to 40 epochs: a GPU run of
  minutes, cut by the script's time limit (TRAIN_MINUTES; SIGTERM keeps the checkpoints, the
  epochs scored by then are the candidates). Every epoch's checkpoint is kept (~93 MB each
  with Adam's state: 3.7 GB for 40 on the GPU machine's 64 GB disk).
- **The data is a packed subset** (scripts/pack_roads_data.py: what one device call can carry,
  ~30 MB of the ~380 MB): CrackForest whole, a fixed fraction of the other members' train
  splits (DeepCrack 15%, CRACK500 8%, GAPs384 50%, AigleRN-TRIMM all), their validation parts
  whole but CRACK500's (a third). The member splits and manual dirs are the same fields as
  `roads_unet_cpu`'s; the script points the manual dirs at the pack.

Config arguments (``[RECIPE][,tiny]``):
  (none): the release run.
  RECIPE: a training recipe of configs/lodo.py's `RECIPES` (``base``: this recipe; ``jpeg``:
    half the training crops JPEG-compressed; ...), at that file's ``gpu`` budget (3 epochs of
    2,000 steps): the same training as its leave-one-dataset-out folds, with all five members,
    so the folds' figure (scripts/lodo_gpu.sh) is this run's (issue 55). A recipe of other
    crops keeps the pixels per step, as the folds do.
  tiny: seconds on a CPU (the script's TINY=1 try, on a tiny pack): widths 4...64, 2 epochs of
    3 steps of batch 2, 64x64 crops; CrackForest's last 2 train photos validate.
"""

from crackjax.configs import lodo
from crackjax.configs.release import roads_unet_cpu

NAME = 'roads-unet'
WIDTHS = (32, 64, 128, 256, 512)
# The stored parameters (crackjax-export --dtype): see the module docstring.
DTYPE = 'bfloat16'
MEMBERS = roads_unet_cpu.MEMBERS
CRACKFOREST_MEMBERS = roads_unet_cpu.CRACKFOREST_MEMBERS
manual_dir_flags = roads_unet_cpu.manual_dir_flags


def parse_arg(arg: str | None) -> tuple[str | None, bool]:
  """(recipe or None, tiny) of the config argument ``[RECIPE][,tiny]``.

  Raises:
    ValueError: a part that is neither 'tiny' nor a recipe of configs/lodo.py (the known ones
      named).
  """
  parts = [p.strip() for p in (arg or '').split(',') if p.strip()]
  tiny = 'tiny' in parts
  recipes = [p for p in parts if p != 'tiny']
  if len(recipes) > 1 or (recipes and recipes[0] not in lodo.RECIPES):
    raise ValueError(
      f'Unknown config argument {arg!r}: give [RECIPE][,tiny], RECIPE one of '
      f'{list(lodo.RECIPES)} (none: the release run of up to 40 epochs).'
    )
  return (recipes[0] if recipes else None), tiny


def get_config(arg: str | None = None):
  recipe, tiny = parse_arg(arg)
  c = roads_unet_cpu.get_config()
  c.model.widths = WIDTHS
  c.batch_size = 16
  c.steps_per_epoch = 2000
  c.num_epochs = 40
  c.log_every_steps = 100
  c.eval.num_qualitative = 4
  if recipe:
    c.update(lodo.RECIPES[recipe])
    c.num_epochs = lodo.BUDGETS['gpu']['num_epochs']
    lodo.keep_pixels_per_step(c)
  if tiny:
    c.model.widths = (4, 8, 16, 32, 64)
    c.data.input_size = (64, 64)
    c.batch_size = 2
    c.steps_per_epoch = 3
    c.num_epochs = 2
    c.log_every_steps = 1
    # The tiny pack's CrackForest has 12 labelled photos (7 train): its last 2 validate.
    c.data.mix.crackforest.train_split = 'train[:-2]'
    c.data.mix.crackforest.valid_split = 'train[-2:]'
  c.max_checkpoints_to_keep = c.num_epochs
  return c
