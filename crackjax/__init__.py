"""crackjax: road crack detection with adaptive cost-sensitive losses in JAX/Flax."""
