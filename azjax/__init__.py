"""azjax: AlphaZero in JAX. Networks, mctx search, on-device self-play, training and arena."""

__version__ = "0.1.0"
