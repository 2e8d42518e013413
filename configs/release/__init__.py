"""Configs of crackjax's released models, one file per model (docs/models.md)."""
