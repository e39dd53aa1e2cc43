"""Command-line entry points (`azjax-train`, `azjax-eval`, `azjax-play`, `azjax-serve`)."""

from __future__ import annotations

import os
import pathlib


def compilation_cache_dir() -> str:
    """Where the CLIs keep JAX's compilation cache: `$AZJAX_JAX_CACHE`, else the user's cache
    directory (`$XDG_CACHE_HOME/azjax/jax`, by default `~/.cache/azjax/jax`)."""
    if os.environ.get("AZJAX_JAX_CACHE"):
        return os.environ["AZJAX_JAX_CACHE"]
    cache = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return str(pathlib.Path(cache) / "azjax" / "jax")


def use_compilation_cache() -> None:
    """Turn on JAX's persistent compilation cache in `compilation_cache_dir()`."""
    import jax  # JAX loads slowly: deferred so that --help answers at once

    jax.config.update("jax_compilation_cache_dir", compilation_cache_dir())
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
