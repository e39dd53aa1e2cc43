"""The command lines (`azjax-train`, `-eval`, `-play`, `-serve`, `-export`): their shared
compilation cache, signals and exit statuses.

0: done. 2: bad input (option, file, config, checkpoint, model, unwritable workdir), said in one
line before anything compiles. 1: failed while working (workdir in use, full disk, diverged run,
port in use). 130: Ctrl-C or SIGTERM; what was finished is kept and one line says so; a second
signal ends the command at once (training first finishes a checkpoint it is writing).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pathlib
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

OK, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130


def compilation_cache_dir() -> str:
    """`$AZJAX_JAX_CACHE`, else `azjax/jax` under `$XDG_CACHE_HOME` (default `~/.cache`)."""
    if os.environ.get("AZJAX_JAX_CACHE"):
        return os.environ["AZJAX_JAX_CACHE"]
    cache = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return str(pathlib.Path(cache) / "azjax" / "jax")


def use_compilation_cache() -> None:
    """Keep programs that took 1 s or more to compile in `compilation_cache_dir()` (unless
    `$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` says otherwise)."""
    import jax  # JAX loads slowly: deferred so that --help answers at once

    jax.config.update("jax_compilation_cache_dir", compilation_cache_dir())
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def bad_input(prog: str, message: str) -> int:
    """Say `message` in one line on stderr; the status of bad input."""
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    return BAD_INPUT


def run_command(
    prog: str, main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None
) -> int | None:
    """`main(argv)`'s status; SIGINT and SIGTERM raise KeyboardInterrupt in it (reported as
    INTERRUPTED), a second signal or one after `stopped()` ends the process at once. After a
    signal the process skips Python's teardown (`leave`), which crashes under XLA's threads.
    With `argv` None, signals during the teardown that follows end the process at once too."""
    global _signals
    signals = _signals = _Signals()
    leaving = argv is None
    try:
        status = main(argv)
    except SystemExit as stop:
        if signals.received is None:
            signals.restore(leaving)
            raise
        leave(stop.code)
    except (KeyboardInterrupt, Exception) as err:
        if signals.received is None and not isinstance(err, KeyboardInterrupt):
            signals.restore(leaving)
            raise
        status = _interrupted(prog)  # what a signal broke off, failing or not
    finally:
        _signals = None
    if signals.received is not None:  # its KeyboardInterrupt may be swallowed (inside XLA)
        leave(_interrupted(prog) if status in (OK, None) else status)
    signals.restore(leaving)
    return status


def _interrupted(prog: str) -> int:
    print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
    return INTERRUPTED


def stopped() -> int:
    """INTERRUPTED for a command that handled a signal itself; another one ends the process."""
    if _signals is not None:
        _signals.stopped = True
    return INTERRUPTED


def check_interrupt() -> None:
    """Raise a received signal's lost KeyboardInterrupt; long loops call it between steps."""
    if _signals is not None and _signals.received is not None:
        raise KeyboardInterrupt


def leave(status: int | str | None) -> NoReturn:
    """End the process now with `status` (as `sys.exit`), output flushed, without teardown."""
    if isinstance(status, str):
        print(status, file=sys.stderr)
        status = FAILED
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # closed, or in a flush
            stream.flush()
    os._exit(status or OK)


def handle_signals(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """Install `handler` for SIGINT and SIGTERM (main thread only); the handlers replaced. A
    signal ignored at the start (nohup, a shell's background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {
        sig: signal.signal(sig, handler)
        for sig in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(sig) is not signal.SIG_IGN
    }


class _Signals:
    """SIGINT/SIGTERM while a command runs: the first raises KeyboardInterrupt, the next exits."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.interrupt: KeyboardInterrupt | None = None
        self.stopped = False
        self._previous = handle_signals(self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None or self.stopped:
            leave(INTERRUPTED)
        if _lost_in(frame):  # again, once out of there
            again = threading.Timer(0.05, os.kill, (os.getpid(), signum))
            again.daemon = True
            again.start()
            return
        self.received = signum
        # Kept until the process ends (in `leave`): freeing its traceback would free the
        # interrupted JAX call's objects while XLA's threads still use them (a SIGSEGV).
        self.interrupt = KeyboardInterrupt()
        raise self.interrupt

    def restore(self, leaving: bool) -> None:
        """The handlers from before; when `leaving`, ones that end the process at once."""
        for sig, handler in self._previous.items():
            signal.signal(sig, (lambda signum, frame: leave(INTERRUPTED)) if leaving else handler)
        self._previous = {}


_signals: _Signals | None = None  # those of the running command


def _lost_in(frame: Any) -> bool:
    """Whether an exception raised in `frame` would be dropped: it is inside a destructor, a
    weakref callback or a garbage collector callback (JAX has one)."""
    callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        code = frame.f_code
        if code in callbacks or code.co_name == "__del__" or code.co_filename == weakref.__file__:
            return True
        frame = frame.f_back
    return False
