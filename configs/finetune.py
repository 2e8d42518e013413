"""Fine-tune a released model (or any crackjax model file) on your own folder of images and masks.

  python launch.py --config=configs/finetune.py --workdir=workdirs/roads_ft \\
      --config.data.folder.images=roads/images --config.data.folder.masks=roads/masks

The argument is the model to start from: a released model's name (crackjax-models), a
.safetensors path or an http(s) URL (crackjax/models/hub.py); without one, the general model
`roads-unet-cpu` (`DEFAULT_MODEL`: trained on five public road datasets; on photos like none of
them it starts far ahead of `crackforest-unet-cpu`, docs/models.md).

The config takes the file's model group (so the widths fit its parameters), starts every
parameter from the file (`model_init.pretrained`), and trains on `crack_folder` with the loss
the file's card records, for 3 epochs of 100 steps at a tenth of the paper's step size (1e-4
instead of 3e-4; a few dozen photos, and weights that already detect cracks), random 160x240
crops (`--config.data.input_size` to change). The split, formats and checks are those of
configs/crack_folder.py (docs/datasets.md). Override anything on the command line, e.g.
`--config.num_epochs=5`.

The test split is the held-out part of the folder (`--config.data.folder.test_list=test.txt`,
or the fixed 80/20 split's 20%): the run scores the model as shipped on it before the first
step, and itself after the last, under 'strict' and 'tolerance_thin_gt', and prints both
(crackjax/trainer/before_after.py; also <workdir>/before_after.md).
"""

from crackjax.configs import crack_folder

FINETUNE_PLUGINS = (
  'import them at the top of a config file of your own (a copy of configs/finetune.py): your '
  'code, your decision'
)


#: The model a fine-tuning starts from when the config argument names none.
DEFAULT_MODEL = 'roads-unet-cpu'


def get_config(arg: str | None = None):
  arg = arg or DEFAULT_MODEL
  # Imported here: the file is read only when a fine-tuning config is asked for.
  from crackjax import plugins
  from crackjax.experiment import restored
  from crackjax.models import model_file, model_schema

  path, meta = restored.model_file_metadata(arg)  # every field's type and range checked
  # A model file never imports code: plugins it names must be imported by your own config.
  names = [*meta['plugins'], *(meta['config'].get('plugins') or ())]
  plugins.model_file_plugins(str(path), names, how=FINETUNE_PLUGINS)
  problems = model_schema.model_problems(meta['model'])
  if problems:
    raise model_file.ModelFileError(model_file.refusal(path, problems))
  c = crack_folder.get_config()
  if names:
    c.plugins = tuple(dict.fromkeys(names))  # imported already (above): importing is a no-op
  c.model.update(meta['model'])
  loss = meta['card'].get('training', {}).get('loss')
  if loss:
    c.loss.update(loss)
  c.model_init.pretrained = arg
  c.learning_rate = 1e-4
  c.steps_per_epoch = 100
  c.num_epochs = 3
  c.data.input_size = (160, 240)
  # The before / after table's protocols: pixel for pixel, and the BSDS tolerance against
  # thinned ground truth (docs/evaluation.md); 'tolerance' too would double the scoring time.
  c.eval.protocols = ('strict', 'tolerance_thin_gt')
  return c
