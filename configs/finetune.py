"""Fine-tune a released model (or any crackjax model file) on your own folder of images and masks.

  python launch.py --config=configs/finetune.py:crackforest-unet-cpu --workdir=workdirs/roads_ft \\
      --config.data.folder.images=roads/images --config.data.folder.masks=roads/masks

The argument is the model: a released model's name (crackjax-models), a .safetensors path or an
http(s) URL (crackjax/models/hub.py). The config takes the file's model group (so the widths
fit its parameters), starts every parameter from the file (`model_init.pretrained`), and trains
on `crack_folder` with the loss the file's card records, for 3 epochs of 100 steps at a tenth
of the paper's step size (1e-4 instead of 3e-4; a few dozen photos, and weights that already
detect cracks), random 160x240 crops (`--config.data.input_size` to change). The split,
formats and checks are those of configs/crack_folder.py (docs/datasets.md). Override anything
on the command line, e.g. `--config.num_epochs=5`.

The test split is the held-out part of the folder (`--config.data.folder.test_list=test.txt`,
or the fixed 80/20 split's 20%): the run scores the model as shipped on it before the first
step, and itself after the last, under 'strict' and 'tolerance_thin_gt', and prints both
(crackjax/trainer/before_after.py; also <workdir>/before_after.md).
"""

from crackjax.configs import crack_folder


def get_config(arg: str | None = None):
  if not arg:
    raise ValueError(
      'configs/finetune.py needs the model to start from: '
      '--config=configs/finetune.py:<released name, .safetensors path or URL> '
      '(crackjax-models lists the released models).'
    )
  # Imported here: the file is read only when a fine-tuning config is asked for.
  from crackjax.models import hub, model_file

  meta = model_file.read_metadata(hub.resolve(arg))
  c = crack_folder.get_config()
  c.model.update(meta['model'])
  c.loss.update(meta['card']['training']['loss'])
  c.model_init.pretrained = arg
  c.learning_rate = 1e-4
  c.steps_per_epoch = 100
  c.num_epochs = 3
  c.data.input_size = (160, 240)
  # The before / after table's protocols: pixel for pixel, and the BSDS tolerance against
  # thinned ground truth (docs/evaluation.md); 'tolerance' too would double the scoring time.
  c.eval.protocols = ('strict', 'tolerance_thin_gt')
  return c
