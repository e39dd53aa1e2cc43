"""Shared test setup: fast compilation, a persistent compilation cache and the list of game
configurations."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib


def _older_cpu_emitters() -> str:
    """XLA's flag for its older CPU fusion emitters, where this jaxlib still has them.

    A version test, as XLA aborts the process on a flag it does not know (jaxlib 0.11 dropped
    this one) and reads XLA_FLAGS once, so it cannot be probed in the process that sets them."""
    major, minor = (int(part) for part in importlib.metadata.version("jaxlib").split(".")[:2])
    return " --xla_cpu_use_fusion_emitters=false" if (major, minor) < (0, 11) else ""


# The suite's time is mostly XLA compiling tiny programs: skip LLVM's costly optimisations
# (about a third less time per compilation) and, before jaxlib 0.11, compile fusions with XLA's
# older CPU emitters (the tiny trainer of tests/test_train.py: 2.6 s in place of 6.8; the suite
# runs in about half the time). Subprocesses inherit it through the environment.
FAST_COMPILE = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    + _older_cpu_emitters()
)
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()

import jax  # noqa: E402  (after XLA_FLAGS)

CACHE_DIR = pathlib.Path(__file__).resolve().parent.parent / ".jax_cache"
# Every program is kept, however fast it compiled: the suite compiles many small programs more
# than once (in both workers, and again in the command lines it starts, which inherit the
# environment), and reading one back costs less than compiling it.
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
jax.config.update("jax_compilation_cache_dir", str(CACHE_DIR))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
os.environ.setdefault("AZJAX_JAX_CACHE", str(CACHE_DIR))

# Every game and size the suite checks against the shared contract (tests/test_contract.py).
GAME_CONFIGS: list[tuple[str, dict]] = [
    ("tictactoe", {}),
    ("connect4", {}),
    ("dots_and_boxes", {}),
    ("dots_and_boxes", {"rows": 2, "cols": 3}),
    ("othello", {}),
    ("othello", {"size": 6}),
    ("chain_reaction", {}),
    ("chain_reaction", {"rows": 3, "cols": 4}),
]


def config_id(config: tuple[str, dict]) -> str:
    name, kwargs = config
    return name + "".join(f"-{k}{v}" for k, v in sorted(kwargs.items()))
