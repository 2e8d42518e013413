"""The data layer: the dataset registry and preparation (`registry`), the grain training
iterator and the evaluation examples (`loader`) and on-device augmentation (`augment`). The
per-split statistics command is `crackjax.trainer.data_stats`."""
