"""Base configuration: every field crackjax reads, with the paper's defaults (§IV).

Variants import this module, call `get_config()` and override only what differs. Fields are
grouped as in big_vision: `data`, `augment`, `model`, `loss`, `eval`, plus the training
fields at the top level. Override any of them on the command line, e.g.
`--config.model.widths='(16, 32, 64, 128, 256)'` or `--config.loss.weighting=power`; a
mistyped field is rejected (`lock_config=True`).

Fields:
  seed: PRNG seed for parameters, data order and augmentation.
  data.name: dataset, a key of `crackjax.data.registry.DATASETS` (e.g. 'crackforest').
  data.data_dir: TFDS data directory where prepared datasets live (None: TFDS default,
    ~/tensorflow_datasets, or $TFDS_DATA_DIR).
  data.manual_dir: directory holding the dataset as its publisher ships it (None: download,
    where the builder can). Offline machines point it at ../shared/datasets/<name>.
  data.folder: your own images, for dataset 'crack_folder' (docs/datasets.md): images / masks
    (directories; matched by file name without extension), train_list / test_list (optional
    text files of names; default a deterministic 80/20 split), mask_threshold (fraction of
    the full range above which a non-binary mask value is crack), mask_polarity ('bright':
    white cracks, 'dark' or 'auto'), mask_suffix (mask name = image name + suffix),
    allow_majority_crack (False: a mask that is more than half crack, usually black cracks
    on white read with polarity 'bright', stops preparation naming the files; True: keep it).
  data.train_split / data.test_split: split names used for training and evaluation.
  data.input_size: (H, W) the network sees during training (random crops), or None for the
    stored size. Each dimension must be a multiple of the model's input multiple (16 for
    the U-Net's four 2x2 poolings).
  data.scale_range: (low, high): every training photo is resized by a factor drawn
    log-uniformly from [low, high] before the random crop (crack widths in pixels as other
    cameras and distances give them; a mixture member's own scale multiplies it). (1.0, 1.0):
    as stored, nothing drawn.
  data.noise_std: std of Gaussian noise the loader adds to training images in [0, 1] before
    augmentation (0 = none; AigleRN uses 0.1, i.e. variance 0.01).
  data.jpeg_probability / data.jpeg_quality: each training crop is, with this probability,
    JPEG-compressed at a quality drawn uniformly from jpeg_quality (low, high), 1...100, and
    decoded again (the blocks and ringing of other cameras' files); the mask is untouched.
    0.0: never, nothing drawn.
  augment: random affine applied to image and mask together inside the train step (Keras
    ImageDataGenerator semantics of the zhixuhao/unet recipe the paper follows):
    rotation_range (degrees), width_shift_range / height_shift_range (fraction of size),
    shear_range (degrees), zoom_range (fraction), horizontal_flip, enabled (False turns all
    of it off).
  augment.photometric: per-example changes of the image alone after the affine transform
    (crackjax/data/photometric.py), as another camera gives them: enabled (False: none),
    brightness (largest shift), contrast and saturation (largest relative change), gamma
    (largest |log| of the exponent), greyscale / blur / noise (probabilities), blur_sigma
    (largest Gaussian sigma, pixels), noise_std (largest std of the sensor noise).
  model.name: a key of `crackjax.models.MODELS`; every other field of `model` is passed to
    that model's constructor. For 'unet':
    model.widths: channel widths of the U-Net's five stages.
    model.conv_impl: backward pass of the 3x3 convolutions: 'auto' (blocked on the CPU
      backend, XLA's elsewhere), 'xla' or 'blocked' (crackjax/models/conv.py). Same function
      and parameters; only speed and memory differ.
    model.dtype: 'float32' or 'bfloat16', the dtype of the model's activations and
      convolutions; parameters, optimizer state, logits and loss stay float32.
  model_init.pretrained: a local .npz of named arrays (ImageNet weights in torchvision's VGG16 /
    VGG16-BN / ResNet-50 names, or an earlier run's crackjax paths; docs/pretrained.md) that a
    new run starts from; None: every parameter from scratch. Resuming ignores it; the run's
    init.json records what it started from.
  model_init.normalization: the input the file's first convolution expects, folded into it:
    'auto' (torchvision's mean/std for torchvision names, nothing for crackjax paths),
    'torchvision', 'caffe' (BGR, 0-255, mean-subtracted) or 'none'.
  model_init.start_step: the global step a new run warm-started from a model file begins at
    (0: none). A long run whose machine is gone goes on from its last committed candidate's
    weights (`model_init.pretrained`) at the step the candidate was exported at: the epochs,
    the data order and the learning-rate schedule resume there (Adam's moments start anew).
  plugins: optional, absent here: a tuple of importable module names that register a model,
    loss, dataset or evaluation protocol the config uses (`crackjax.models.register_model`,
    `crackjax.losses.register_loss`, `crackjax.data.registry.register_dataset`,
    `crackjax.evaluation.register_protocol`; crackjax/plugins.py, and the recipes of
    docs/architecture.md). Training, prediction, export and crackjax-evaluate import them
    before building the experiment, so a run that uses a plugin can be predicted and exported
    from its config.json. A config that needs it sets `c.plugins = ('my_models',)`; keeping it
    out of these defaults keeps every other config's JSON and run fingerprint as they were.
  loss.name: a key of `crackjax.losses.LOSSES`; every other field of `loss` is passed to
    that loss's factory. For 'holistic' (the paper's a * WCE + b * Jaccard distance):
    loss.weighting: minority weight q(alpha): 'ce' (q=1), 'xie', 'power', 'log' or 'exp'.
    loss.beta / loss.gamma / loss.base: parameters of q (eq. 4-7).
    loss.a / loss.b: holistic loss a * WCE + b * Jaccard distance (eq. 8).
    loss.jaccard_smooth: Laplace smoothing lambda of the Jaccard index (eq. 10).
  learning_rate: Adam step size (the peak of `lr_schedule`).
  lr_schedule: the step size over the global step (crackjax/engine/learning_rate.py): name
    'constant' (the paper's Adam setting) or 'cosine' (constant until decay_from_step, then a
    half cosine down to end_factor * learning_rate at end_step, held after it); warmup_steps:
    a linear rise over the first steps of a new or warm-started state (0: none).
  batch_size: global batch size (split over all devices of all processes).
  steps_per_epoch / num_epochs: training length; one checkpoint per epoch.
  max_checkpoints_to_keep: how many epoch checkpoints the workdir keeps.
  log_every_steps: how often to write training metrics.
  eval.protocols: matching protocols to report (crackjax/evaluation/): 'strict'
    (pixel-to-pixel), 'tolerance' (BSDS benchmark, ground truth as given),
    'tolerance_thin_gt' (BSDS with thinned ground truth); see docs/evaluation.md.
  eval.num_thresholds: the uniform part of the threshold grid, 0, 1/n, ..., (n-1)/n, of the
    protocols that follow the configured grid ('strict'; the tolerance protocols keep the BSDS
    benchmark's 1/100, ..., 99/100). Every grid also holds 0.5 (eval.json's 'fixed': P/R/F1
    at the threshold a deployed model uses).
  eval.tail_thresholds: also evaluate at 14 thresholds near 0 and 1 (0.003, 0.005, 0.007 and
    0.993, 0.995, 0.997, 0.998, 0.999, 0.9993, 0.9995, 0.9997, 0.9998, 0.9999, 0.99999: the
    LOW_TAIL_THRESHOLDS and HIGH_TAIL_THRESHOLDS of crackjax.evaluation), so that a model
    whose best threshold lies beyond the uniform grid (e.g. one trained with Xie's weighting:
    0.99 or higher) is not capped by the grid. The uniform points stay, so ODS can only
    rise; AP, an area over the recall range the grid reaches, changes (docs/evaluation.md).
    Costs ~0.1 s for 'strict' and ~20% more time for the tolerance protocols on CrackForest;
    False gives the uniform grid plus 0.5.
  eval.num_qualitative: test images shown in qualitative.png.
  eval.save_probability_maps: also write every probability map as probs/<name>.png.
  eval.every_epochs: also score the test split after every N-th epoch (and the last) into
    epoch_<NNN>.json, the same record as eval.json without the per-image rows (0: only at
    the end). The reproduction runner sets 1 (the curves of Figs. 5-6).
  eval.curve_protocols: the protocols of those periodic evaluations, a cheaper set for the
    F1-against-epoch curves (empty: eval.protocols).
  eval.full_epochs: epochs scored under every eval.protocols even when curve_protocols is set
    (the last epoch always is); the runner names the epochs of the table rows.
  eval.scales: test-time scales: every evaluated photo is predicted at each of these factors
    of its size, each map resized back, and the maps averaged ((1.0,): once, as it is). A
    model file keeps them: crackjax-predict, crackjax-evaluate and Predictor use them unless
    told otherwise (--scales).
  eval.flip: also predict each of those copies mirrored left-right and average (--flip).
  eval.photo_threshold: None: every photo's mask at the one stored threshold. A weight w in
    [0, 1]: each photo at its own threshold, chosen without labels, w x the stored one +
    (1 - w) x the Otsu threshold of its probability map (photos of roads unlike the training
    ones, on which the model is less sure of itself). A model file keeps it: crackjax-predict
    and Predictor use it unless told otherwise (--photo_threshold); crackjax-evaluate scores
    it beside the stored threshold (operating point 'photo'; bench/lodo.py measures it on
    held-out sets; crackjax.evaluation.threshold_choice.photo_threshold).
  eval.width_rule: None (off): every photo at eval.scales. A width W in pixels ([1, 100]): a
    photo whose predicted cracks are wider than W (median over the skeleton of its mask at the
    stored threshold) is predicted again at half size (photos of wide cracks, which the model
    draws too thin at their native size; crackjax.evaluation.width_rule). A model file keeps it
    (crackjax-export --width_rule, chosen on validation parts by bench/width_scale.py --choose):
    crackjax-predict, crackjax-evaluate and Predictor use it unless told otherwise
    (--width_rule=PX|off). The training's own evaluation does not apply it.
  eval.store_degenerate_threshold: False: a best threshold that finds nothing, or calls every
    pixel crack, is named and not written to threshold.json (masks keep the threshold stored
    before); True writes it anyway.
  eval.threshold_over: how the run's threshold (threshold.json, a model file's) is chosen on
    its evaluation: 'pooled', the best threshold (ODS) of the split's pooled pixels; 'datasets',
    for a mixture the one threshold best on the mean over its datasets of their F1, every
    dataset alike, as its epoch is chosen (a single dataset: the same as pooled). Pooled
    counts weigh the sets by crack pixels, so the densest set chooses
    (crackjax.evaluation.threshold_choice).
  eval.background_workers: 0: those periodic evaluations score in the training loop (the
    accelerator waits; streamed, no map held). N >= 1: the maps are predicted in the loop and
    held (one epoch's), then scored in a
    background thread (the tolerance protocols counting on N processes) while the next epoch
    trains; an epoch's record is written when its scoring ends, at the latest when the next
    epoch's evaluation starts (at most one epoch in flight), and training waits for the last.
"""

import ml_collections

from crackjax import models
from crackjax.data import photometric


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0

  c.data = ml_collections.ConfigDict()
  c.data.name = 'crackforest'
  c.data.data_dir = ml_collections.FieldReference(None, field_type=str)
  c.data.manual_dir = ml_collections.FieldReference(None, field_type=str)
  c.data.folder = ml_collections.ConfigDict()
  c.data.folder.images = ml_collections.FieldReference(None, field_type=str)
  c.data.folder.masks = ml_collections.FieldReference(None, field_type=str)
  c.data.folder.train_list = ml_collections.FieldReference(None, field_type=str)
  c.data.folder.test_list = ml_collections.FieldReference(None, field_type=str)
  c.data.folder.mask_threshold = 0.5
  c.data.folder.mask_polarity = 'bright'
  c.data.folder.mask_suffix = ''
  c.data.folder.allow_majority_crack = False
  c.data.train_split = 'train'
  c.data.test_split = 'test'
  c.data.input_size = ml_collections.FieldReference(None, field_type=tuple)
  c.data.scale_range = (1.0, 1.0)
  c.data.noise_std = 0.0
  c.data.jpeg_probability = 0.0
  c.data.jpeg_quality = (30, 95)

  c.augment = ml_collections.ConfigDict()
  c.augment.enabled = True
  c.augment.rotation_range = 0.2
  c.augment.width_shift_range = 0.05
  c.augment.height_shift_range = 0.05
  c.augment.shear_range = 0.05
  c.augment.zoom_range = 0.05
  c.augment.horizontal_flip = True
  c.augment.photometric = ml_collections.ConfigDict(dict(photometric.FIELDS))

  # The paper's U-Net (name, widths, conv_impl, dtype), as its entry in crackjax.models.MODELS
  # declares it.
  c.model = ml_collections.ConfigDict(models.model_group('unet'))

  c.model_init = ml_collections.ConfigDict()
  c.model_init.pretrained = ml_collections.FieldReference(None, field_type=str)
  c.model_init.normalization = 'auto'
  c.model_init.start_step = 0

  # The holistic loss with Xie's weighting (name, weighting, beta, gamma, base, a, b,
  # jaccard_smooth): the U-Net's original loss in its entry.
  c.loss = ml_collections.ConfigDict(dict(models.MODELS['unet'].original_loss))

  c.learning_rate = 3e-4
  c.lr_schedule = ml_collections.ConfigDict()
  c.lr_schedule.name = 'constant'
  c.lr_schedule.warmup_steps = 0
  c.lr_schedule.decay_from_step = 0
  c.lr_schedule.end_step = 0
  c.lr_schedule.end_factor = 0.0
  c.batch_size = 2
  c.steps_per_epoch = 300
  c.num_epochs = 10
  c.max_checkpoints_to_keep = 3
  c.log_every_steps = 10

  c.eval = ml_collections.ConfigDict()
  c.eval.protocols = ('strict', 'tolerance', 'tolerance_thin_gt')
  c.eval.num_thresholds = 100
  c.eval.tail_thresholds = True
  c.eval.num_qualitative = 4
  c.eval.save_probability_maps = False
  c.eval.every_epochs = 0
  c.eval.curve_protocols = ()
  c.eval.full_epochs = ()
  c.eval.background_workers = 0
  c.eval.scales = (1.0,)
  c.eval.flip = False
  c.eval.photo_threshold = ml_collections.FieldReference(None, field_type=float)
  c.eval.width_rule = ml_collections.FieldReference(None, field_type=float)
  c.eval.store_degenerate_threshold = False
  c.eval.threshold_over = 'pooled'
  return c


# Config arguments (`--config=configs/<name>.py:<arg>`) that shrink a paper configuration for
# smaller machines, for every model: the one variant system (configs/compare.py and the table
# configs use it too). Everything not listed keeps the paper's value. A variant's fields here
# update the config (ConfigDict.update is recursive: nested dicts update the matching group
# only); what it does to the model is the model's own (`small` of its entry in
# crackjax.models.MODELS: the U-Net's widths, a comparison model's width_scale and depth). A
# variant the model's entry does not declare does not apply to that model.
VARIANTS: dict[str, dict] = {
  # A 2-core CPU: two epochs (U-Net widths 16...256, a quarter of the comparison models'
  # widths).
  'cpu': {'num_epochs': 2},
  # The reduced protocol of the CPU-scale reproduction (docs/reproduction.md): random 160x240
  # crops (a quarter of a CrackForest image), 100 steps per epoch (a third of the paper's), U-Net
  # widths 8...128; epochs, losses, batch, step size and augmentation stay the paper's. Chosen
  # so that Table I's central comparison (3 seeds) fits a few hours of a 2-core CPU; 50 steps
  # per epoch learnt too little in 5 epochs (strict ODS F1 0.09). U-Net only.
  'cpu_scale': {'data': {'input_size': (160, 240)}, 'steps_per_epoch': 100},
  # Seconds: tiny models, six steps. Tests use it end to end.
  'smoke': {
    'batch_size': 2,
    'steps_per_epoch': 3,
    'num_epochs': 2,
    'log_every_steps': 1,
    'max_checkpoints_to_keep': 2,
  },
}


def variants_for(model: str) -> list[str]:
  """The VARIANTS that apply to `model` (a key of crackjax.models.MODELS): those its entry
  declares (none for an unknown name)."""
  entry = models.MODELS.get(model)
  return sorted(k for k in VARIANTS if entry is not None and k in entry.small)


def apply_variant(c: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
  """Applies the config argument `arg` (None or '': the paper setting) to `c` in place.

  Raises:
    ValueError: for an argument that is not a key of VARIANTS, or one that does not apply to
      the config's model.
  """
  if not arg:
    return c
  name = c.model.name
  if arg not in variants_for(name):
    raise ValueError(
      f'Unknown config argument {arg!r} for the {name} model; known: {variants_for(name)}.'
    )
  c.model.update(models.MODELS[name].small[arg])
  c.update(VARIANTS[arg])
  return c
