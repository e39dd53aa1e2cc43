"""Checkpoints with orbax: the whole training state, atomically, keeping the newest K.

`WORKDIR/checkpoints/<iteration>/` holds `params` (all `load_for_inference` reads besides
`meta`), `state` (the rest of the trainer's state: optimizer, replay buffer, games in flight,
PRNG key) and `meta` (JSON: iteration, config, every saved array's shape, and the metrics
records since the previous checkpoint, restored on resume when `metrics.jsonl` lost them).

Orbax renames a checkpoint into place once complete, so a killed run keeps the previous ones.
A checkpoint of another game or network shape is refused with `CheckpointError` naming what
differs; an unreadable one is reported as damaged, never silently replaced. A run holds
`WORKDIR/azjax.lock` (`WorkdirLock`), so a second run on the workdir is refused; Ctrl-C or
SIGTERM ask it to finish its iteration, checkpoint and stop (`StopRequest`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging as absl_logging

from azjax import parallel
from azjax.checks import WriteFailure, write_error
from azjax.config import Config, ConfigError, config_from_dict, config_to_dict, differences
from azjax.network import init_params, make_network

CHECKPOINT_DIR = "checkpoints"
absl_logging.set_verbosity(absl_logging.WARNING)

# orbax warns that a manager is read-only: azjax reads checkpoints that way on purpose (a
# reader never touches a directory a training run may be writing)
logging.getLogger("absl").addFilter(
    lambda record: "read only" not in (text := record.getMessage()) and "read_only=True" not in text
)


def _quiet_closed_loop(unraisable: Any, previous: Any = sys.unraisablehook) -> None:
    """Drops the "Event loop is closed" errors of TensorStore reads still in flight when orbax
    gives up on a damaged checkpoint: dozens of tracebacks after the one real error."""
    error = unraisable.exc_value
    if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
        previous(unraisable)


sys.unraisablehook = _quiet_closed_loop


class CheckpointError(ValueError):
    """A checkpoint that is missing, damaged or incompatible with the requested run."""


def _directory(workdir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(workdir).resolve() / CHECKPOINT_DIR


def _manager(workdir: str | pathlib.Path, keep: int | None = None) -> ocp.CheckpointManager:
    """A writer (given `keep`) or a read-only reader, which never touches the directory, so it
    is safe beside a running training."""
    writer = keep is not None
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=writer, read_only=not writer, enable_async_checkpointing=False
    )
    return ocp.CheckpointManager(_directory(workdir), options=options)


def _damaged(workdir: str | pathlib.Path, step: int, item: str, err: Exception) -> CheckpointError:
    """One line naming checkpoint `step`, the damaged file of its `item` and what is wrong
    (TensorStore's errors run to dozens of lines of spec)."""
    chain = [err]
    while cause := chain[-1].__cause__ or chain[-1].__context__:
        chain.append(cause)
    texts = [(str(e).split(" [tensorstore_spec")[0].strip().splitlines() or [""])[0] for e in chain]
    text = next((t for t in reversed(texts) if 'local file "' in t), texts[0])
    folder = _directory(workdir) / str(step) / item
    parts = re.split(r'local file "([^"]+)": ?', text)
    if len(parts) > 1:  # TensorStore's: the innermost file, the array and what is wrong
        where, why = parts[-2], parts[-1]
        array = re.search(r'reading "([^"]+)"', parts[0])
        why = f"array {array.group(1)}: {why}" if array else why
    else:
        where, why = _culprit(folder, text), f"{type(err).__name__}: {text}".rstrip(": ")
    why = why[:77] + "..." if len(why) > 80 else why
    return CheckpointError(
        f"checkpoint {step} in {_directory(workdir)} is damaged: cannot read its {item} "
        f"({where}; {why}). Move it away to use the newest one before it."
    )


def _culprit(folder: pathlib.Path, text: str) -> pathlib.Path:
    """The file of a checkpoint item `folder` that an error's `text` names, else the first of
    its JSON files that does not parse, else the folder."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        if path.name in text:
            return path
    for path in files:
        if path.name in ("_METADATA", "_sharding") or path.parent.name == "array_metadatas":
            try:
                json.loads(path.read_text())
            except (OSError, ValueError):
                return path
    return folder


def list_steps(workdir: str | pathlib.Path) -> list[int]:
    """The iterations with a complete checkpoint in `workdir`, oldest first."""
    if not _directory(workdir).is_dir():
        return []
    with _manager(workdir) as manager:
        return sorted(manager.all_steps())


def signature(tree: Any) -> dict[str, str]:
    """`path -> "dtype[shape]"` for every array leaf: what a compatible checkpoint must match."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(p): f"{x.dtype}{list(x.shape)}" for p, x in leaves}


def saved_shape(workdir: str | pathlib.Path, step: int, path: str) -> tuple[int, ...] | None:
    """The shape checkpoint `step` saved for the array at `path` (a `signature` key, such as
    "['state'].buffer.size"); None when it saved no such array."""
    entry = read_meta(workdir, step)["signature"].get(path)
    return None if entry is None else tuple(json.loads(entry[entry.index("[") :]))


def read_meta(workdir: str | pathlib.Path, step: int) -> dict:
    """The JSON metadata of one checkpoint; CheckpointError when unreadable."""
    try:
        with _manager(workdir) as manager:
            meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = dict(meta["meta"])
        if not {"iteration", "config"} <= meta.keys():
            raise KeyError("iteration/config missing")
        return meta
    except Exception as err:  # orbax raises many kinds; all mean the same to the user
        raise _damaged(workdir, step, "meta", err) from None


def pick_step(workdir: str | pathlib.Path, step: int | None) -> int:
    """`step`, or the newest when None; CheckpointError when `workdir` has no such checkpoint."""
    if not (steps := list_steps(workdir)):
        raise CheckpointError(
            f"no checkpoint in {pathlib.Path(workdir)} (expected {CHECKPOINT_DIR}/<step>/)"
        )
    if step is None:
        return steps[-1]
    if step not in steps:
        raise CheckpointError(
            f"no checkpoint {step} in {workdir}; available: {', '.join(map(str, steps))}"
        )
    return step


def read_config(workdir: str | pathlib.Path, step: int | None = None) -> Config:
    """The resolved config a checkpoint of `workdir` was trained with (the newest when `step` is
    None); CheckpointError when there is none or it is unusable."""
    step = pick_step(workdir, step)
    try:
        return config_from_dict(read_meta(workdir, step)["config"])
    except ConfigError as err:
        message = f"checkpoint {step} in {workdir} has an unusable config: {err}"
        raise CheckpointError(message) from None


def abstract_params(config: Config) -> Any:
    """The parameter shapes of `config`'s network (jax.ShapeDtypeStruct leaves)."""
    game = config.game.make()
    network = make_network(game, config.network)
    return jax.eval_shape(lambda k: init_params(network, game, k), jax.random.key(0))


def load_for_inference(workdir: str, step: int | None = None) -> tuple[Config, Any]:
    """The config and network parameters saved in `workdir` (the newest when `step` is None)."""
    step = pick_step(workdir, step)
    config = read_config(workdir, step)
    here = jax.sharding.SingleDeviceSharding(jax.devices()[0])  # whatever devices trained it
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here), abstract_params(config)
    )
    args = ocp.args.Composite(params=ocp.args.StandardRestore(abstract))
    try:
        with _manager(workdir) as manager:
            restored = manager.restore(step, args=args)
    except Exception as err:
        raise _damaged(workdir, step, "params", err) from None
    return config, restored["params"]


# ----------------------------------------------------------------------------- training


# Config keys (and the keys under them) that change the shape of saved arrays.
_SHAPE_KEYS = (
    "game",
    "network.blocks",
    "network.channels",
    "replay.capacity",
    "selfplay.batch_size",
)


class Checkpointer(contextlib.AbstractContextManager):
    """Saves and restores the training state of one workdir (whose `WorkdirLock` it holds)."""

    def __init__(self, workdir: str | pathlib.Path, keep: int, owner: bool = True) -> None:
        """`owner`: the run's own process, which removes saves cut short; a reader (an export
        from a run that may still be saving) leaves them."""
        self.workdir = pathlib.Path(workdir)
        if owner and jax.process_index() == 0:  # saves cut short (killed, or interrupted twice)
            for path in _directory(workdir).glob("*.orbax-checkpoint-tmp*"):
                shutil.rmtree(path, ignore_errors=True)
        self._manager = _manager(workdir, keep)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(
        self, iteration: int, params: Any, state: Any, config: Config, records: Sequence[dict] = ()
    ) -> None:
        """Write checkpoint `iteration` (blocking; atomic) with the metrics `records` of the
        iterations since the previous one."""
        meta = {
            "iteration": iteration,
            "config": config_to_dict(config),
            "signature": signature({"params": params, "state": state}),
            "records": list(records),
        }
        save = ocp.args.StandardSave
        args = ocp.args.Composite(
            params=save(params), state=save(state), meta=ocp.args.JsonSave(meta)
        )
        self._manager.save(iteration, args=args, force=True)
        self._manager.wait_until_finished()

    def restore(
        self, config: Config, abstract_params: Any, abstract_state: Any, step: int | None = None
    ) -> tuple:
        """(iteration, params, state) of checkpoint `step` (the newest when None), placed with
        the shardings of the abstract arrays; CheckpointError when incompatible with `config`
        or damaged."""
        step = pick_step(self.workdir, step)
        expected = signature({"params": abstract_params, "state": abstract_state})
        meta = self.check(config, step, expected)
        restored = {}
        for item, abstract in (("params", abstract_params), ("state", abstract_state)):
            args = {item: ocp.args.StandardRestore(abstract)}
            try:
                restored |= self._manager.restore(step, args=ocp.args.Composite(**args))
            except Exception as err:
                raise _damaged(self.workdir, step, item, err) from None
        return int(meta["iteration"]), restored["params"], restored["state"]

    def check(self, config: Config, step: int, expected: dict[str, str] | None = None) -> dict:
        """The meta of checkpoint `step`; CheckpointError when it is damaged or written by a run
        of another shape than `config` (or, given the `expected` signature, other arrays)."""
        meta = read_meta(self.workdir, step)
        problems = [  # e.g. "game.kwargs.rows: checkpoint 5, config 4"
            f"{key}: checkpoint {json.dumps(old)}, config {json.dumps(new)}"
            for key, old, new in differences(meta["config"], config_to_dict(config))
            if any(key == k or key.startswith(f"{k}.") for k in _SHAPE_KEYS)
        ]
        saved = meta.get("signature", {})
        if not problems and expected is not None and saved != expected:
            bad = min(k for k in expected.keys() | saved.keys() if saved.get(k) != expected.get(k))
            problems = [f"{bad}: checkpoint {saved.get(bad)}, config {expected.get(bad)}"]
        if problems:
            raise CheckpointError(
                f"{_directory(self.workdir)} holds a checkpoint (iteration {step}) of a different "
                f"run: {'; '.join(problems)}. Use another --workdir, or set these keys back."
            )
        return meta

    def records(self, step: int) -> list[dict]:
        """The metrics records saved with checkpoint `step` (none before they were saved)."""
        return list(read_meta(self.workdir, step).get("records", []))

    def close(self) -> None:
        self._manager.close()

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ----------------------------------------------------------------------------- the workdir


class WorkdirError(ValueError):
    """A workdir path training cannot use (not a directory, not the user's to write)."""


class WorkdirInUse(RuntimeError):
    """A workdir another run holds (or, on a multi-host run, one process 0 could not lock)."""


LOCK_FILE = "azjax.lock"


class WorkdirLock:
    """`with WorkdirLock(workdir):` holds `workdir/azjax.lock`, naming this process and host;
    another run's lock is refused with WorkdirInUse unless its process is gone from this host
    (then it is taken over). Creating it proves the workdir writable. On a multi-host run only
    process 0 holds it."""

    def __init__(self, workdir: str | pathlib.Path) -> None:
        """Create `workdir` if needed: WorkdirError unless it is a directory, WriteFailure when
        the disk fails to give it."""
        self.workdir = pathlib.Path(workdir)
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise WorkdirError(f"workdir {workdir} is a file, expected a directory") from None
        except OSError as err:
            message = f"cannot create workdir {workdir}: {err.strerror or err}"
            raise write_error(message, err, WorkdirError) from None
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
                    who = f"its lock {self.path} is unreadable"
                    if holder is not None:
                        who = f"process {holder['pid']} on {holder['host']}"
                    raise WorkdirInUse(
                        f"workdir {self.workdir} is in use by another run ({who}); stop that run "
                        f"or use another --workdir (if no run uses it, delete {self.path})"
                    ) from None
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
    """Ctrl-C / SIGTERM ask the loop to finish its iteration, checkpoint and stop; a second
    signal interrupts at once (the default behaviour), except while a checkpoint is being
    written: the save finishes first, then the run stops."""

    def __init__(self) -> None:
        self.requested = self._saving = self._told = False
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
            if not self._told:
                print("\nwriting a checkpoint: stopping once it is saved", flush=True)
            self.requested = self._told = True
        elif self.requested:  # a second signal: the default behaviour
            self.restore()
            signal.raise_signal(signum)
        else:
            self.requested = True
            print("\nstopping after this iteration (signal again to stop now)", flush=True)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
