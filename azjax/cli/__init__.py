"""Command-line entry points (`azjax-train`, `azjax-eval`, `azjax-play`, `azjax-serve`,
`azjax-export`) and what they share: the compilation cache, signals and exit statuses.

Every command ends with one of four exit statuses. 0: it did its work. 2: bad input of any kind
(an option, a value, a file, a config, a checkpoint or a model it cannot use), said in one line
on stderr before anything is compiled. 1: it failed while working (a workdir in use, a full
disk, a diverged run, a port in use). 130: Ctrl-C or SIGTERM stopped it; what was finished is
kept (training's checkpoint, a match's whole batches, a ladder's matches), one line says so,
and a second signal ends the command at once.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import pathlib
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

OK, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def compilation_cache_dir() -> str:
    """Where the CLIs keep JAX's compilation cache: `$AZJAX_JAX_CACHE`, else the user's cache
    directory (`$XDG_CACHE_HOME/azjax/jax`, by default `~/.cache/azjax/jax`)."""
    if os.environ.get("AZJAX_JAX_CACHE"):
        return os.environ["AZJAX_JAX_CACHE"]
    cache = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return str(pathlib.Path(cache) / "azjax" / "jax")


def use_compilation_cache() -> None:
    """Turn on JAX's persistent compilation cache in `compilation_cache_dir()`."""
    import jax

    jax.config.update("jax_compilation_cache_dir", compilation_cache_dir())
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def bad_input(prog: str, message: str) -> int:
    """Say `message` in one line on stderr; the status of bad input."""
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    return BAD_INPUT


def run_command(prog: str, main: Callable[[], int | None]) -> int | None:
    """Run a command's `main` with the shared handling of SIGINT and SIGTERM; its status.

    The first signal raises KeyboardInterrupt (SIGTERM too, so that it keeps what Ctrl-C
    keeps); one escaping `main` is reported in one line as INTERRUPTED. The second signal ends
    the process at once. Once a signal has been received, the process ends without Python's
    teardown: XLA compiles and computes on threads of its own, and a KeyboardInterrupt leaves
    the main thread while they go on; tearing the runtime down under them crashes (SIGSEGV).
    """
    global _signals
    signals = _signals = _Signals()
    try:
        status: int | str | None = main()
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
        status = INTERRUPTED
    except SystemExit as stop:
        if signals.received is None:
            raise
        status = stop.code
    finally:
        signals.restore()
        _signals = None
    if signals.received is not None:
        leave(status)
    # registered last, it runs first, before the runtime's own exit callbacks
    atexit.unregister(_stop_teardown_at_once)
    atexit.register(_stop_teardown_at_once)
    return status


def check_interrupt() -> None:
    """KeyboardInterrupt if a command received a signal whose KeyboardInterrupt was dropped
    (raised inside a destructor or a callback, Python prints and drops it); long loops call it
    between their steps."""
    if _signals is not None and _signals.received is not None:
        raise KeyboardInterrupt


def leave(status: int | str | None) -> NoReturn:
    """End the process now with `status` (as `sys.exit` reads it), its output flushed, without
    Python's teardown."""
    if isinstance(status, str):
        print(status, file=sys.stderr)
        status = FAILED
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # closed, or in a flush
            stream.flush()
    os._exit(status or OK)


class _Signals:
    """SIGINT and SIGTERM, while a command runs: the first raises KeyboardInterrupt, the
    second ends the process at once. A signal ignored when the command started (a background
    job of a shell without job control, nohup) stays ignored."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            leave(INTERRUPTED)
        if _in_gc_callback(frame):  # raised there, it would be printed and dropped
            signal.raise_signal(signum)  # again, once the callback has returned
            return
        self.received = signum
        raise KeyboardInterrupt

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


_signals: _Signals | None = None  # those of the running command


def _stop_teardown_at_once() -> None:
    """At exit: a signal ends the process at once (a Ctrl-C during the runtime's exit callbacks
    would otherwise print a KeyboardInterrupt traceback)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, lambda signum, frame: leave(INTERRUPTED))


def _in_gc_callback(frame: Any) -> bool:
    """Whether `frame` runs inside a garbage collector callback (JAX registers one)."""
    codes = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False
