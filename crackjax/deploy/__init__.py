"""Running a trained model on users' photos: `predictor` (load_run, the tiling Predictor),
`cli` (``crackjax-predict``), `measure` (crack ratio, length and width per photo), `export`
(``crackjax-export``: jax.export / ONNX) and `hostmem` (host memory for large photos)."""
