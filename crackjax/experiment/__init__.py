"""A config turned into a run's parts, and a workdir turned back into a run.

* `build`: `build(config) -> Experiment`, the one place a run's parts are made, and the
  narrow inputs of the parts below it (`Schedule`, `EvalPlan`, `RestoreSpec`).
* `validation`: `check_config` (every field at once, before any data), `check_data`.
* `specs`: the config as the plain data the parts below take (its groups as dicts, the
  recorded JSON, `LoaderSpec`, `InitSpec`).
* `restored`: a run restored from a workdir, a bare ``checkpoints/`` folder or a model file
  (`load_run`, `load_model`), with its threshold.

The package face imports nothing: import the module you need
(``from crackjax.experiment.build import build``).
"""
