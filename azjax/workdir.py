"""A training run's hold on its workdir: the lock, and the request to stop at a checkpoint.

A run holds `WORKDIR/azjax.lock` (`WorkdirLock`), so that a second run on the same workdir is
refused instead of interleaving its checkpoints and metrics with the first. Ctrl-C or SIGTERM
ask it to finish its iteration, write a checkpoint and stop (`StopRequest`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import threading
import time
from typing import Any

import jax

from azjax import parallel
from azjax.checks import WriteFailure, write_error


class WorkdirError(ValueError):
    """A workdir that training cannot use, by the path given: not a directory, not this user's
    to write, a name the file system refuses."""


class WorkdirInUse(RuntimeError):
    """A workdir another run holds (or, on a multi-host run, one process 0 could not lock)."""


LOCK_FILE = "azjax.lock"


def prepare_workdir(workdir: str | pathlib.Path) -> pathlib.Path:
    """Create `workdir` if needed; WorkdirError unless it is a directory, WriteFailure when
    the disk fails to give it."""
    workdir = pathlib.Path(workdir)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise WorkdirError(f"workdir {workdir} is a file, expected a directory") from None
    except OSError as err:
        message = f"cannot create workdir {workdir}: {err.strerror or err}"
        raise write_error(message, err, WorkdirError) from None
    return workdir


class WorkdirLock:
    """`with WorkdirLock(workdir):` holds `workdir/azjax.lock`, naming this process and host.

    Another run's lock is refused with WorkdirInUse, unless stale: its process is no longer
    running on this host, and the lock is taken over. Creating the lock also proves the
    workdir writable. On a multi-host run only process 0 holds it."""

    def __init__(self, workdir: str | pathlib.Path) -> None:
        self.workdir = prepare_workdir(workdir)
        self.path = self.workdir / LOCK_FILE
        self.owner = {"pid": os.getpid(), "host": socket.gethostname()}
        self.held = False

    def __enter__(self) -> WorkdirLock:
        refused = None
        if jax.process_index() == 0:
            try:
                self._acquire()
            except (WorkdirError, WriteFailure, WorkdirInUse) as err:
                refused = err
        if parallel.any_process(refused is not None):  # every process stops, not only 0
            raise refused or WorkdirInUse(f"process 0 could not lock workdir {self.workdir}")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.held and self._holder() == self.owner:
            self.path.unlink(missing_ok=True)
        self.held = False

    def _acquire(self) -> None:
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is None or not _stale(holder):
                    raise self._busy(holder) from None
                print(
                    f"taking over the lock of process {holder['pid']} on {holder['host']}, "
                    f"which is no longer running ({self.path})",
                    flush=True,
                )
                self.path.unlink(missing_ok=True)
                continue
            except OSError as err:
                message = f"cannot lock workdir {self.workdir}: {err.strerror or err}"
                raise write_error(message, err, WorkdirError) from None
            with os.fdopen(fd, "w") as f:
                json.dump({**self.owner, "since": time.strftime("%Y-%m-%d %H:%M:%S")}, f)
            self.held = True
            return

    def _holder(self) -> dict | None:
        """The pid and host in the lock file; None when unreadable (being written)."""
        try:
            data = json.loads(self.path.read_text())
            return {"pid": int(data["pid"]), "host": str(data["host"])}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _busy(self, holder: dict | None) -> WorkdirInUse:
        if holder is None:
            who = f"another run (its lock {self.path} is unreadable)"
        else:
            who = f"another run (process {holder['pid']} on {holder['host']})"
        return WorkdirInUse(
            f"workdir {self.workdir} is in use by {who}; stop that run or use another "
            f"--workdir (if no run uses it, delete {self.path})"
        )


def _stale(holder: dict) -> bool:
    """Whether a lock's process is gone: only decidable for a process of this host."""
    if holder["host"] != socket.gethostname() or holder["pid"] == os.getpid():
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


class StopRequest:
    """Ctrl-C / SIGTERM ask the loop to finish its iteration, checkpoint and stop.

    A second signal interrupts at once (the default behaviour), except while a checkpoint is
    being written: the save finishes first, then the run stops."""

    def __init__(self) -> None:
        self.requested = False
        self._saving = self._told = False
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)

    @contextlib.contextmanager
    def saving(self):
        """Signals while inside only ask to stop once the checkpoint is written."""
        self._saving, self._told = True, False
        try:
            yield
        finally:
            self._saving = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self._saving:
            self.requested = True
            if not self._told:
                print("\nwriting a checkpoint: stopping once it is saved", flush=True)
            self._told = True
            return
        if self.requested:
            self.restore()
            signal.raise_signal(signum)
            return
        self.requested = True
        print("\nstopping after this iteration (signal again to stop now)", flush=True)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
