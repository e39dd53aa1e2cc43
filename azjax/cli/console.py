"""The console scripts (`azjax-train`, ...): each command's `main`, with Ctrl-C and SIGTERM
heeded from the first import on.

JAX and the rest take seconds to load, and a KeyboardInterrupt raised while they load is often
lost: Python drops one raised in a garbage-collector or weak-reference callback (JAX and the
import system have them), and one raised inside an extension's initialisation aborts the
process. So while the command's module loads, a signal is only noted (a second one ends the
process at once); once it has loaded, a noted signal ends the command with INTERRUPTED and one
line, before anything else runs.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable
from typing import Any

from azjax.cli import INTERRUPTED, STOP_SIGNALS, leave

# Each console script's command module in azjax.cli; pyproject.toml's [project.scripts] points
# `azjax-train` at `azjax.cli.console:train`, and so on.
COMMANDS = {
    "azjax-train": "train",
    "azjax-eval": "evaluate",
    "azjax-play": "play",
    "azjax-serve": "serve",
    "azjax-export": "export",
}


def _program(prog: str) -> Callable[[], int | None]:
    """The console script `prog`: `azjax.cli.<COMMANDS[prog]>.main()`."""
    module = COMMANDS[prog]

    def start() -> int | None:
        received: list[int] = []

        def note(signum: int, frame: Any) -> None:
            if received:
                leave(INTERRUPTED)
            received.append(signum)

        previous = {  # a signal ignored at the start (nohup, a background job) stays ignored
            sig: signal.signal(sig, note)
            for sig in STOP_SIGNALS
            if signal.getsignal(sig) is not signal.SIG_IGN
        }
        try:
            main = importlib.import_module(f"azjax.cli.{module}").main
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if received:
            print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
            return INTERRUPTED
        return main()

    return start


train = _program("azjax-train")
evaluate = _program("azjax-eval")
play = _program("azjax-play")
serve = _program("azjax-serve")
export = _program("azjax-export")
