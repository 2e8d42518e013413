"""Leave-one-dataset-out (LODO): the general recipe trained on four of its five public datasets,
to be scored on the fifth, which it never saw (issue 55; bench/lodo.py runs all five folds).

  python launch.py --config=configs/lodo.py:crack500,base,short --workdir=... \\
      --config.data.mix.<name>.manual_dir=DIR ...

The argument is ``HELD_OUT[,RECIPE[,BUDGET]]``:

- ``HELD_OUT``: the member left out, one of `MEMBERS` (the five of
  configs/release/roads_unet_cpu.py). The run trains on the other four's train splits, scores
  every epoch on their validation parts (strict; the epoch with the best mean per-dataset F1 is
  the one kept, its pooled strict ODS threshold the stored one, as for the release), and never
  reads the held-out member: it is not in ``config.data.mix``.
- ``RECIPE`` (default ``base``): a key of `RECIPES`, the training changes under test; each is
  a set of config overrides on top of roads-unet-cpu's recipe. ``base`` is that recipe as
  released.
- ``BUDGET`` (default ``short``): a key of `BUDGETS`, the fixed training length every fold and
  recipe of a comparison shares (steps per epoch x epochs).

Every other field is roads-unet-cpu's (configs/release/roads_unet_cpu.py): U-Net widths
16...256, random 128x128 crops, batch 8, the exponential WCE (beta 0.75) + Jaccard.
"""

from __future__ import annotations

import ml_collections

from crackjax.configs.release import roads_unet_cpu

#: The five public members; each is held out in turn.
MEMBERS: tuple[str, ...] = tuple(roads_unet_cpu.MEMBERS)

#: Photometric and sensor changes a new road's camera brings (crackjax.data.photometric):
#: the ranges of `configs/base.py`'s ``augment.photometric`` group.
PHOTOMETRIC = {
  'enabled': True,
  'brightness': 0.2,
  'contrast': 0.3,
  'gamma': 0.3,
  'saturation': 0.5,
  'greyscale': 0.2,
  'blur': 0.3,
  'blur_sigma': 1.5,
  'noise': 0.3,
  'noise_std': 0.04,
}

#: sqrt of each member's train split size (the cropped copies' crops, CrackForest's 58 photos),
#: rounded: the ``sqrt_size`` recipe's sampling weights.
SQRT_SIZE_WEIGHTS = {
  'crackforest': 7.6,
  'deepcrack': 53.9,
  'crack500': 72.6,
  'gaps384': 30.7,
  'aiglern_trimm': 12.3,
}

#: Half the training crops JPEG-compressed at a quality in [30, 95] and decoded again.
JPEG = {'jpeg_probability': 0.5, 'jpeg_quality': (30, 95)}

#: The recipes under comparison: config overrides (ConfigDict.update semantics) on top of
#: roads-unet-cpu's, applied before the held-out member leaves the mixture.
RECIPES: dict[str, dict] = {
  # roads-unet-cpu's recipe as released.
  'base': {},
  # Colour, exposure, blur and sensor noise drawn per example in the train step.
  'photometric': {'augment': {'photometric': PHOTOMETRIC}},
  # Every training photo resized by a random factor in [0.5, 2] (log-uniform) before the
  # crop: crack widths in pixels as different cameras and distances give them.
  'scale': {'data': {'scale_range': (0.5, 2.0)}},
  # Both.
  'photometric_scale': {
    'augment': {'photometric': PHOTOMETRIC},
    'data': {'scale_range': (0.5, 2.0)},
  },
  # Half the training crops JPEG-compressed (`JPEG`).
  'jpeg': {'data': JPEG},
  # Each member sampled in proportion to the square root of its train split's size (58 photos,
  # 2,908, 5,270, 942 and 152 crops), between every set alike (base) and every crop alike.
  'sqrt_size': {'data': {'mix': {m: {'weight': w} for m, w in SQRT_SIZE_WEIGHTS.items()}}},
  # Larger crops for more context (256x256): a quarter of the budget's batch, the same pixels
  # per step (`CROP_PIXELS`); photos smaller than the crop are mirrored up, as they are today.
  'crop256': {'data': {'input_size': (256, 256)}},
  # `jpeg` with each image standardised per channel inside the model (config.model.input_norm,
  # crackjax/models/unet.py): exposure and contrast of a new camera never reach the network,
  # and the model file carries the normalisation to every prediction.
  'jpeg_standardize': {'data': JPEG, 'model': {'input_norm': 'image'}},
}

#: The pixels of one training crop of roads-unet-cpu's recipe (128 x 128): a recipe with
#: other crops keeps its budget's pixels per step (fewer crops of more pixels).
CROP_PIXELS = 128 * 128

#: Fixed training lengths (steps per epoch, epochs). ``short`` ranks recipes (about 8 minutes
#: of training a fold on a 2-core CPU); ``long`` checks that the ranking holds and makes the
#: final figure; ``gpu`` is the GPU-made `roads-unet`'s model and batch (configs/release/
#: roads_unet.py: widths 32...512, batch 16) for 3 of its epochs, its five folds (and the
#: release run of the same recipe) side by side in one GPU call (scripts/lodo_gpu.sh: on an
#: H200, 30 Nov 2026, five side by side ran ~30 steps/s each, ~70 s an epoch, after ~2 min of
#: start and compilation: 4 epochs and the scoring did not fit one 10-minute call);
#: ``smoke`` is for tests.
BUDGETS: dict[str, dict] = {
  'short': {'steps_per_epoch': 250, 'num_epochs': 4},
  'long': {'steps_per_epoch': 500, 'num_epochs': 12},
  'gpu': {
    'steps_per_epoch': 2000,
    'num_epochs': 3,
    'batch_size': 16,
    'log_every_steps': 100,
    'model': {'widths': (32, 64, 128, 256, 512)},
  },
  'smoke': {'steps_per_epoch': 2, 'num_epochs': 2},
}


def keep_pixels_per_step(c: ml_collections.ConfigDict) -> None:
  """A recipe of other crops than `CROP_PIXELS` takes fewer (more) of them per step."""
  h, w = c.data.input_size
  c.batch_size = max(1, c.batch_size * CROP_PIXELS // (h * w))


def parse_arg(arg: str | None) -> tuple[str, str, str]:
  """(held_out, recipe, budget) of the config argument ``HELD_OUT[,RECIPE[,BUDGET]]``.

  Raises:
    ValueError: no held-out member, or a part that is not a known key (named with the known
      ones).
  """
  parts = [p.strip() for p in (arg or '').split(',')]
  if not parts[0] or len(parts) > 3:
    raise ValueError(
      f'configs/lodo.py needs HELD_OUT[,RECIPE[,BUDGET]], got {arg!r}; '
      f'HELD_OUT one of {list(MEMBERS)}, RECIPE of {list(RECIPES)}, BUDGET of {list(BUDGETS)}.'
    )
  held_out, recipe, budget = (parts + ['base', 'short'][len(parts) - 1 :])[:3]
  for value, known, what in (
    (held_out, MEMBERS, 'held-out member'),
    (recipe, RECIPES, 'recipe'),
    (budget, BUDGETS, 'budget'),
  ):
    if value not in known:
      raise ValueError(f'configs/lodo.py: unknown {what} {value!r}; known: {list(known)}.')
  return held_out, recipe, budget


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  held_out, recipe, budget = parse_arg(arg)
  c = roads_unet_cpu.get_config()
  c.update(RECIPES[recipe])
  c.update(BUDGETS[budget])
  with c.data.mix.unlocked():
    del c.data.mix[held_out]
  keep_pixels_per_step(c)
  c.max_checkpoints_to_keep = c.num_epochs
  if budget == 'smoke':
    c.model.widths = (4, 8, 16, 32, 64)
    c.data.input_size = (64, 64)
    c.batch_size = 2
    c.log_every_steps = 1
    if 'crackforest' in c.data.mix:  # tests' tiny copies hold fewer than 58 train photos
      c.data.mix.crackforest.train_split = 'train[:80%]'
      c.data.mix.crackforest.valid_split = 'train[80%:]'
  return c
