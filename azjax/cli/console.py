"""The console scripts (`azjax-train`, ...): each command's `main`, with Ctrl-C and SIGTERM
heeded from the first import on.

A KeyboardInterrupt raised while JAX loads is often lost (dropped in a garbage-collector or
weak-reference callback) or aborts the process (inside an extension's initialisation). So while
the command's module loads, a signal is only noted (a second one ends the process at once);
once it has loaded, a noted signal ends the command with INTERRUPTED and one line.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable
from typing import Any

from azjax.cli import INTERRUPTED, handle_signals, leave

# Each console script's module in azjax.cli (pyproject.toml's [project.scripts]).
COMMANDS = {
    "azjax-train": "train",
    "azjax-eval": "evaluate",
    "azjax-play": "play",
    "azjax-serve": "serve",
    "azjax-export": "export",
}


def _program(prog: str) -> Callable[[], int | None]:
    def start() -> int | None:
        received: list[int] = []

        def note(signum: int, frame: Any) -> None:
            if received:
                leave(INTERRUPTED)
            received.append(signum)

        previous = handle_signals(note)
        try:
            main = importlib.import_module(f"azjax.cli.{COMMANDS[prog]}").main
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if received:
            print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
            return INTERRUPTED
        return main()

    return start


train, evaluate, play, serve, export = map(_program, COMMANDS)
