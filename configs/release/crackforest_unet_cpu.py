"""The released CPU model `crackforest-unet-cpu`: the paper's U-Net at CPU widths on CrackForest.

Made by `bash scripts/release_cpu.sh` (docs/models.md says how and with what result):

- Training data: CrackForest's train split without its last 14 images (`train[:58]`); those 14
  (`train[58:]`) are the validation part on which the loss and the length were chosen. The
  test split (46 images) is scored once, by the exported model file, for the model card.
- Random 160x240 crops (a quarter of a CrackForest image), batch 4: on the 2-core CPU a crop
  step runs ~3.6x faster than a full-image step of batch 2 (2.2 vs 0.6 steps/s), so the model
  sees more varied patches in the same time. The U-Net is fully convolutional and predicts
  whole images of any size.
- Every epoch (500 steps) is scored on the validation part (strict protocol) and its
  checkpoint kept; the release exports the epoch with the best validation ODS F1.

Config arguments:
  (none): the released model's setting (the loss chosen on the validation part).
  select_<loss>: the short selection runs (2 epochs) of each candidate loss in LOSSES.
"""

from crackjax.configs import crackforest_exp

# The losses of the selection runs (the holistic loss's fields, configs/base.py): the paper's
# baseline (Xie's weighting, run for reference only), its best adaptive WCE of Table I and its
# best adaptive WCE + Jaccard at 10 epochs.
LOSSES: dict[str, dict] = {
  'wce_xie': {'weighting': 'xie', 'a': 1.0, 'b': 0.0},
  'wce_exp': {'weighting': 'exp', 'beta': 0.75, 'gamma': 1.0, 'a': 1.0, 'b': 0.0},
  'exp_wj': {'weighting': 'exp', 'beta': 0.75, 'gamma': 1.0, 'a': 0.5, 'b': 1.0},
}
# The candidates: the released model uses one of the paper's adaptive losses (q(alpha) of
# eq. 5-7), so the baseline is scored beside them but cannot be chosen.
CANDIDATES = ('wce_exp', 'exp_wj')
# Chosen on the validation part (docs/models.md, 'How it was made').
CHOSEN = 'exp_wj'
SELECTION_EPOCHS = 2
RELEASE_EPOCHS = 10


def get_config(arg: str | None = None):
  c = crackforest_exp.get_config()
  c.model.widths = (16, 32, 64, 128, 256)
  c.data.train_split = 'train[:58]'
  c.data.test_split = 'train[58:]'
  c.data.input_size = (160, 240)
  c.batch_size = 4
  c.steps_per_epoch = 500
  c.eval.protocols = ('strict',)
  c.eval.every_epochs = 1
  c.eval.num_qualitative = 2
  loss = CHOSEN
  c.num_epochs = RELEASE_EPOCHS
  if arg:
    name = arg.removeprefix('select_')
    if not arg.startswith('select_') or name not in LOSSES:
      raise ValueError(
        f'Unknown config argument {arg!r}: give none (the release) or one of '
        f'{sorted("select_" + k for k in LOSSES)}.'
      )
    loss = name
    c.num_epochs = SELECTION_EPOCHS
  c.loss.update(LOSSES[loss])
  c.max_checkpoints_to_keep = c.num_epochs
  return c
