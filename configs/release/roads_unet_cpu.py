"""The general released model `roads-unet-cpu`: the paper's U-Net at CPU widths, trained on five
public crack datasets at once (issue 43; docs/models.md says how it was made and scored).

- Training data (`config.data.mix`, `crackjax.data.mixture`): the train splits of CrackForest
  (its first 58 photos), DeepCrack, CRACK500, GAPs384 and the AigleRN-TRIMM crops, each sampled
  with weight 1 (every dataset alike, whatever its size), at the photos' own scale (``scale``
  1: the public crops are cut from the photos without resizing).
- Random 128x128 crops, batch 8: every member's photos are at least ~121 pixels on their short
  side (smaller ones are mirrored up to 128); 20-40 px CRACK500 bands and hairlines both fit.
- Every epoch is scored on the members' validation parts (CrackForest's last 14 train photos,
  the others' ``valid`` folders; strict protocol): pooled (the stored threshold is the pooled
  strict ODS threshold, one threshold for photos of unknown origin) and per dataset; the
  release takes the epoch with the best mean of the per-dataset F1 (`record['selection']`).
- Loss: the paper's exponential WCE (beta 0.75) + Jaccard, as crackforest-unet-cpu.

The members' manual dirs: ``--config.data.mix.<name>.manual_dir=DIR`` (CrackForest: its
repository copy; the four others: the cropped copies' ``Datasets/`` folder of
https://github.com/Omaralmaqtari/Lightweight-Modular-Model). `MANUAL_DIR_FLAGS` builds them from
two folders.

Config arguments:
  (none): the release setting (the 28 Nov file: epoch 11 at the constant step size; the plateau
    run of 30 Nov: epoch 37 of the same, 42 epochs, results/plateau_run_2026-11-30.md).
  cosine: the plateau run of issue 76, the same recipe with a schedule that ends: the constant
    step size to step 11,000 (the 28 Nov file's step), then a cosine decay to 1% of it at step
    22,000 (epoch 22), with a 300-step warm-up after a warm start. Started from the last
    committed candidate (`candidates/roads-unet-cpu/`, or the 28 Nov file at step 11,000):
    ``--config.model_init.pretrained=FILE --config.model_init.start_step=STEP``;
    scripts/plateau_cpu.sh picks them.
  smoke: seconds (tests): widths 4...64, 2 epochs of 3 steps, 64x64 crops.
  cosine_smoke: smoke with the cosine schedule over its 6 steps.
"""

import ml_collections

from crackjax.configs import base
from crackjax.configs.release import crackforest_unet_cpu

#: The members and their fields (`crackjax.data.mixture.MEMBER_FIELDS`); manual dirs are set
#: on the command line.
MEMBERS: dict[str, dict] = {
  'crackforest': {'train_split': 'train[:58]', 'valid_split': 'train[58:]'},
  'deepcrack': {},
  'crack500': {},
  'gaps384': {},
  'aiglern_trimm': {},
}
#: The cosine schedule's first and last steps (config argument 'cosine'): it decays from the
#: step of the 28 Nov file (epoch 11), so a run warm-started from that file decays at once.
COSINE_FROM_STEP = 11_000
COSINE_END_STEP = 22_000
# Which manual dir each member reads: the CrackForest copy or the public crops' Datasets/.
CRACKFOREST_MEMBERS = ('crackforest',)


def manual_dir_flags(crackforest: str, public: str) -> list[str]:
  """The ``--config.data.mix.<name>.manual_dir`` flags for a CrackForest copy and a folder of
  the public crops (the Lightweight-Modular-Model repository's ``Datasets/``)."""
  return [
    f'--config.data.mix.{name}.manual_dir={crackforest if name in CRACKFOREST_MEMBERS else public}'
    for name in MEMBERS
  ]


def get_config(arg: str | None = None):
  c = base.get_config()
  c.data.name = 'mixture'
  c.data.mix = ml_collections.ConfigDict()
  for name, fields in MEMBERS.items():
    member = ml_collections.ConfigDict(
      {
        'weight': 1.0,
        'manual_dir': ml_collections.FieldReference(None, field_type=str),
        'train_split': 'train',
        'valid_split': 'valid',
        'test_split': 'test',
        'scale': 1.0,
      }
    )
    member.update(fields)
    c.data.mix[name] = member
  # The mixture's 'valid' split is scored after every epoch and at the end; each member's test
  # split is scored once, by the exported model (docs/models.md).
  c.data.train_split = 'train'
  c.data.test_split = 'valid'
  c.data.input_size = (128, 128)
  c.model.widths = (16, 32, 64, 128, 256)
  c.loss.update(crackforest_unet_cpu.LOSSES[crackforest_unet_cpu.CHOSEN])
  c.batch_size = 8
  c.steps_per_epoch = 1000
  c.num_epochs = 30
  c.max_checkpoints_to_keep = c.num_epochs
  c.eval.protocols = ('strict',)
  c.eval.every_epochs = 1
  c.eval.num_qualitative = 4
  if arg in ('cosine', 'cosine_smoke'):
    c.lr_schedule.name = 'cosine'
    c.lr_schedule.warmup_steps = 300
    c.lr_schedule.decay_from_step = COSINE_FROM_STEP
    c.lr_schedule.end_step = COSINE_END_STEP
    c.lr_schedule.end_factor = 0.01
    c.num_epochs = COSINE_END_STEP // c.steps_per_epoch
    c.max_checkpoints_to_keep = c.num_epochs
  if arg == 'cosine_smoke':
    arg = 'smoke'
  if arg == 'smoke':
    c.model.widths = (4, 8, 16, 32, 64)
    c.data.input_size = (64, 64)
    c.batch_size = 2
    c.steps_per_epoch = 3
    c.num_epochs = 2
    c.max_checkpoints_to_keep = 2
    c.log_every_steps = 1
    if c.lr_schedule.name == 'cosine':
      c.lr_schedule.warmup_steps = 2
      c.lr_schedule.decay_from_step = 2
      c.lr_schedule.end_step = 6
  elif arg and arg != 'cosine':
    raise ValueError(
      f"Unknown config argument {arg!r}: give none (the release), 'cosine', 'smoke' or "
      "'cosine_smoke'."
    )
  return c
