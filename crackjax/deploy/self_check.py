"""A model file's self check as the exporter and the release write it, from a `Predictor`.

The check itself, its image, its tolerances and what it guards (damage, not tampering) are
`crackjax.models.output_check`'s; every load of a model file runs it
(`crackjax.experiment.restored.load_model`: crackjax-predict, crackjax-evaluate --model, a
fine-tuning's start model, crackjax-export of a file and `Predictor.from_pretrained` alike).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from crackjax.experiment.restored import Run
from crackjax.models import output_check as checks
from crackjax.models.output_check import (  # noqa: F401 - the names this module has always offered
  SELF_CHECK_PIXELS,
  SELF_CHECK_SEED,
  SELF_CHECK_SHAPE,
  self_check_image,
)


def self_check(predictor: Any) -> dict[str, Any]:
  """A card's ``self_check`` of the model `predictor` predicts with: its weights (as the file
  will store them), BatchNorm averages and threshold (`crackjax.models.output_check.record`).
  `predictor`: a `crackjax.deploy.predictor.Predictor` (which imports this module)."""
  batch_stats = jax.device_get(predictor.batch_stats) if predictor.batch_stats else None
  return checks.record(
    predictor.model, jax.device_get(predictor.params), batch_stats, predictor.threshold
  )


def verify(run: Run, plain_predictor: Callable[[], Any] | None = None) -> None:
  """The self check of `run`'s model file (`crackjax.models.output_check.verify`), which
  `load_model` ran already (a file that passed is remembered: nothing is computed again); a
  run not from a file is not checked. `plain_predictor` is no longer needed.

  Raises:
    model_file.ModelFileError: one line naming the file and the field at fault or what differs.
  """
  del plain_predictor
  if run.file is None or run.sha256 is None or run.card is None:
    return
  checks.verify(
    run.file, run.sha256, run.card, run.model, run.params, run.batch_stats, run.threshold
  )
