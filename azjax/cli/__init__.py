"""Command-line entry points (`azjax-train`, `azjax-eval`, `azjax-play`, `azjax-serve`,
`azjax-export`) and what they share: the compilation cache, signals and exit statuses.

Every command ends with one of four exit statuses. 0: it did its work. 2: bad input of any kind
(an option, a value, a file, a config, a checkpoint or a model it cannot use, a workdir that is
a file or not the user's to write), said in one line on stderr before anything is compiled. 1:
it failed while working (a workdir in use, a full or failing disk, a diverged run, a port in
use). 130: Ctrl-C or SIGTERM stopped it; what was finished is
kept (training's checkpoint, a match's whole batches, a ladder's matches), one line says so,
and a second signal ends the command at once (training first finishes a checkpoint it is
writing).
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
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def compilation_cache_dir() -> str:
    """Where the CLIs keep JAX's compilation cache: `$AZJAX_JAX_CACHE`, else the user's cache
    directory (`$XDG_CACHE_HOME/azjax/jax`, by default `~/.cache/azjax/jax`)."""
    if os.environ.get("AZJAX_JAX_CACHE"):
        return os.environ["AZJAX_JAX_CACHE"]
    cache = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return str(pathlib.Path(cache) / "azjax" / "jax")


def use_compilation_cache() -> None:
    """Turn on JAX's persistent compilation cache in `compilation_cache_dir()`, keeping programs
    that took a second or more to compile (`$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` sets
    another bound)."""
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
    """Run a command's `main(argv)` with the shared handling of SIGINT and SIGTERM; its status.

    The first signal raises KeyboardInterrupt (SIGTERM too, so that it keeps what Ctrl-C
    keeps); one escaping `main` is reported in one line as INTERRUPTED. The second signal, or
    one after `stopped()`, ends the process at once. Once a KeyboardInterrupt was raised, the
    process ends without Python's teardown: XLA compiles and computes on threads of its own, a
    KeyboardInterrupt leaves the main thread while they go on, and tearing the runtime down
    under them crashes (SIGSEGV). `argv` None (the program's own command line): signals during
    the teardown that follows end the process at once too.
    """
    global _signals
    signals = _signals = _Signals()
    try:
        status = main(argv)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
        status = INTERRUPTED
    except SystemExit as stop:
        if signals.received is not None:
            leave(stop.code)
        signals.restore(leaving=argv is None)
        raise
    except Exception:
        if signals.received is None:
            signals.restore(leaving=argv is None)
            raise
        print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)  # what it broke off
        leave(INTERRUPTED)
    finally:
        _signals = None
    if signals.received is not None:  # its KeyboardInterrupt was swallowed (inside XLA's compile)
        if status in (OK, None):
            print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)
            status = INTERRUPTED
        leave(status)
    signals.restore(leaving=argv is None)
    return status


def stopped() -> int:
    """Say that the running command stopped on a signal it handled itself (training's loop):
    another signal ends the process at once. Returns INTERRUPTED."""
    if _signals is not None:
        _signals.stopped = True
    return INTERRUPTED


def check_interrupt() -> None:
    """KeyboardInterrupt if the running command received a signal whose KeyboardInterrupt was
    lost; long loops call it between their steps."""
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
        self.interrupt: KeyboardInterrupt | None = None  # the one raised, kept: see _handle
        self.stopped = False
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None or self.stopped:
            leave(INTERRUPTED)
        if _lost_in(frame):  # again, once out of there
            again = threading.Timer(0.05, os.kill, (os.getpid(), signum))
            again.daemon = True
            again.start()
            return
        self.received = signum
        # Kept until the process ends (every path after a signal ends in `leave`): freeing its
        # traceback frees the interrupted JAX call's frames, and their objects, while XLA's
        # threads still use them, which crashes (SIGSEGV) now and then.
        self.interrupt = KeyboardInterrupt()
        raise self.interrupt

    def restore(self, leaving: bool) -> None:
        """The handlers from before; when `leaving`, ones that end the process at once."""
        for sig, handler in self._previous.items():
            signal.signal(sig, (lambda signum, frame: leave(INTERRUPTED)) if leaving else handler)
        self._previous = {}


_signals: _Signals | None = None  # those of the running command


def _lost_in(frame: Any) -> bool:
    """Whether an exception raised in `frame` would be printed and dropped: `frame` runs inside
    a destructor, a weak reference's callback or a garbage collector callback (JAX has one)."""
    callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        code = frame.f_code
        if code in callbacks or code.co_name == "__del__" or code.co_filename == weakref.__file__:
            return True
        frame = frame.f_back
    return False
