"""Running a trained model on users' photos: `predictor` (the tiling Predictor; a run is loaded
by `crackjax.experiment.restored`),
`predict_command` (``crackjax-predict``), `measure` (crack ratio, length and width per photo),
`html_report` (its index.html), `export` (``crackjax-export``: jax.export / ONNX) and `hostmem`
(host memory for large photos)."""
