"""The data layer: the dataset registry and preparation (`registry`), the grain training
iterator and the evaluation examples (`loader`), on-device augmentation (`augment`) and the
per-split statistics command (`stats`, ``python -m crackjax.data.stats``)."""
