"""Base configuration: every field crackjax reads, with the paper's defaults (§IV).

Variants import this module, call `get_config()` and override only what differs.

Fields:
  seed: PRNG seed for parameters, data order and augmentation.
  dataset: dataset name, a key of `crackjax.input_pipeline.DATASETS` (e.g. 'crackforest').
  data_dir: TFDS data directory where prepared datasets live (None: TFDS default,
    ~/tensorflow_datasets, or $TFDS_DATA_DIR).
  manual_dir: directory holding the dataset as its publisher ships it (None: download,
    where the builder can). Offline machines point it at ../shared/datasets/<name>.
  folder: your own images, for dataset 'crack_folder' (docs/datasets.md): images / masks
    (directories; matched by file name without extension), train_list / test_list (optional
    text files of names; default a deterministic 80/20 split), mask_threshold (fraction of
    the full range above which a non-binary mask value is crack), mask_polarity ('bright':
    white cracks, 'dark' or 'auto'), mask_suffix (mask name = image name + suffix).
  train_split / test_split: split names used for training and evaluation.
  input_size: (H, W) the network sees during training, or None for the stored size. Each
    dimension must be a multiple of 16 (four 2x2 poolings).
  augment: random affine applied to image and mask together (Keras ImageDataGenerator
    semantics of the zhixuhao/unet recipe the paper follows): rotation_range (degrees),
    width_shift_range / height_shift_range (fraction of size), shear_range (degrees),
    zoom_range (fraction), horizontal_flip, enabled (False turns all of it off).
  noise_std: std of Gaussian noise added to training images in [0, 1] before augmentation
    (0 = none; AigleRN uses 0.1, i.e. variance 0.01).
  model: model name, a key of `crackjax.models.MODELS`.
  widths: channel widths of the U-Net's five stages.
  conv_impl: backward pass of the 3x3 convolutions: 'auto' (blocked on the CPU backend,
    XLA's elsewhere), 'xla' or 'blocked' (crackjax/models/conv.py). Same function and
    parameters; only speed and memory differ.
  compute_dtype: 'float32' or 'bfloat16', the dtype of the model's activations and
    convolutions; parameters, optimizer state, logits and loss stay float32.
  loss.weighting: minority weight q(alpha): 'ce' (q=1), 'xie', 'power', 'log' or 'exp'.
  loss.beta / loss.gamma / loss.base: parameters of q (eq. 4-7).
  loss.a / loss.b: holistic loss a * WCE + b * Jaccard distance (eq. 8).
  loss.jaccard_smooth: Laplace smoothing lambda of the Jaccard index (eq. 10).
  learning_rate: Adam step size.
  batch_size: global batch size (split over all devices of all processes).
  steps_per_epoch / num_epochs: training length; one checkpoint per epoch.
  max_checkpoints_to_keep: how many epoch checkpoints the workdir keeps.
  log_every_steps: how often to write training metrics.
  num_thresholds: thresholds 0, 1/n, ..., (n-1)/n of the strict protocol (the tolerance
    protocols keep the BSDS benchmark's 99).
  eval_protocols: matching protocols to report (crackjax/evaluation.py): 'strict'
    (pixel-to-pixel), 'tolerance' (BSDS benchmark, ground truth as given),
    'tolerance_thin_gt' (BSDS with thinned ground truth); see docs/evaluation.md.
  eval_num_qualitative: test images shown in qualitative.png.
  eval_save_probability_maps: also write every probability map as probs/<name>.png.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0

  c.dataset = 'crackforest'
  c.data_dir = ml_collections.FieldReference(None, field_type=str)
  c.manual_dir = ml_collections.FieldReference(None, field_type=str)
  c.folder = ml_collections.ConfigDict()
  c.folder.images = ml_collections.FieldReference(None, field_type=str)
  c.folder.masks = ml_collections.FieldReference(None, field_type=str)
  c.folder.train_list = ml_collections.FieldReference(None, field_type=str)
  c.folder.test_list = ml_collections.FieldReference(None, field_type=str)
  c.folder.mask_threshold = 0.5
  c.folder.mask_polarity = 'bright'
  c.folder.mask_suffix = ''
  c.train_split = 'train'
  c.test_split = 'test'
  c.input_size = ml_collections.FieldReference(None, field_type=tuple)

  c.augment = ml_collections.ConfigDict()
  c.augment.enabled = True
  c.augment.rotation_range = 0.2
  c.augment.width_shift_range = 0.05
  c.augment.height_shift_range = 0.05
  c.augment.shear_range = 0.05
  c.augment.zoom_range = 0.05
  c.augment.horizontal_flip = True
  c.noise_std = 0.0

  c.model = 'unet'
  c.widths = (64, 128, 256, 512, 1024)
  c.conv_impl = 'auto'
  c.compute_dtype = 'float32'

  c.loss = ml_collections.ConfigDict()
  c.loss.weighting = 'xie'
  c.loss.beta = 1.0
  c.loss.gamma = 1.0
  c.loss.base = 10.0
  c.loss.a = 1.0
  c.loss.b = 0.0
  c.loss.jaccard_smooth = 1.0

  c.learning_rate = 3e-4
  c.batch_size = 2
  c.steps_per_epoch = 300
  c.num_epochs = 10
  c.max_checkpoints_to_keep = 3
  c.log_every_steps = 10

  c.num_thresholds = 100
  c.eval_protocols = ('strict', 'tolerance', 'tolerance_thin_gt')
  c.eval_num_qualitative = 4
  c.eval_save_probability_maps = False
  return c


# Config arguments (`--config=configs/<name>.py:<arg>`) that shrink a paper configuration for
# smaller machines; everything not listed keeps the paper's value.
VARIANTS: dict[str, dict] = {
    # A 2-core CPU: widths 16...256 (1.94M parameters), two epochs.
    'cpu': {'widths': (16, 32, 64, 128, 256), 'num_epochs': 2},
    # Seconds: a tiny U-Net, six steps. Tests use it end to end.
    'smoke': {'widths': (4, 8, 16, 32, 64), 'batch_size': 2, 'steps_per_epoch': 3,
              'num_epochs': 2, 'log_every_steps': 1, 'max_checkpoints_to_keep': 2},
}


def apply_variant(c: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
  """Applies the config argument `arg` (None or '': the paper setting) to `c` in place.

  Raises:
    ValueError: for an argument that is not a key of VARIANTS.
  """
  if not arg:
    return c
  if arg not in VARIANTS:
    raise ValueError(f'Unknown config argument {arg!r}; known: {sorted(VARIANTS)}.')
  c.update(VARIANTS[arg])
  return c
