"""Ctrl-C and SIGTERM, sent to the commands as a shell sends them (to a process group of their
own), wherever they land: the command keeps what it finished, says so in one line and exits 130
(azjax.cli), never crashing while XLA still compiles or computes. Exact resume after a signal:
tests/test_multihost.py."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import helpers
import pytest
from helpers import ROOT, write_tiny_run

from azjax.checkpoint import list_steps
from azjax.cli import INTERRUPTED
from azjax.cli.train import main as train_main

TRAIN = ["--config", str(ROOT / "configs" / "tictactoe.yaml"), *helpers.TINY]
TRAIN += ["train.iterations=1000", "--cpu-devices", "1"]  # as many iterations as it is given
# Ctrl-C at its default, as at a terminal (a suite started in the background of a shell passes
# an ignored SIGINT down), then the command itself in the same process.
AS_AT_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def compiling(tmp: pathlib.Path) -> dict[str, str]:
    """An empty compilation cache, and JAX saying what it compiles."""
    (tmp / "cache").mkdir()
    return {"AZJAX_JAX_CACHE": str(tmp / "cache"), "JAX_LOG_COMPILES": "1"}


class Running:
    """A command started in a process group of its own, its output read as it comes."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, stdin=None):
        self.process = subprocess.Popen(
            [sys.executable, "-c", AS_AT_A_TERMINAL, *argv],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdin=stdin or subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.out, self.err = bytearray(), bytearray()
        streams = ((self.process.stdout, self.out), (self.process.stderr, self.err))
        self.readers = [threading.Thread(target=self.read, args=s, daemon=True) for s in streams]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def read(stream, into: bytearray) -> None:
        while chunk := os.read(stream.fileno(), 4096):
            into.extend(chunk)

    def wait_for(self, condition, what: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process.poll() is None, f"ended before {what}: {self.err.decode()}"
            assert time.monotonic() < deadline, f"no {what} in {timeout} s: {self.err.decode()}"
            time.sleep(0.05)

    def wait_for_text(self, text: str, stream: str = "err") -> None:
        self.wait_for(lambda: text.encode() in getattr(self, stream), repr(text))

    def stop(self, *signals: int, timeout: float = 240) -> tuple[str, str]:
        """Send `signals`, one after the other; stdout and stderr once it exited 130, cleanly."""
        for sig in signals:
            os.kill(self.process.pid, sig)
        code = self.process.wait(timeout)
        for reader in self.readers:
            reader.join(10)
        out, err = self.out.decode(), self.err.decode()
        assert code == INTERRUPTED, (code, out, err)
        assert "Traceback" not in err and "Exception ignored" not in err, err
        return out, err


def test_ctrl_c_while_xla_compiles_exits_130_not_a_crash(tmp_path):
    # The signal used to leave the compile running on XLA's threads, and Python's teardown
    # then crashed under it (SIGSEGV, status 139).
    argv = ["-m", "azjax.cli.evaluate", "--game", "tictactoe", "--a", "mcts:16", "--b", "random"]
    run = Running([*argv, "--games", "2"], compiling(tmp_path))
    run.wait_for_text("Finished jaxpr to MLIR module conversion jit(play)")
    time.sleep(0.5)  # into XLA's compile
    _, err = run.stop(signal.SIGINT)
    assert err.strip().splitlines()[-1] == "azjax-eval: interrupted", err


def test_ctrl_c_while_the_console_script_loads_jax_exits_130(tmp_path):
    """The console script notes a Ctrl-C while JAX loads and stops before the command starts."""
    script = pathlib.Path(sys.executable).parent / "azjax-train"
    assert script.is_file(), f"no console script {script}: `make test` installs azjax in .venv"
    workdir = tmp_path / "run"
    importing = {"PYTHONPROFILEIMPORTTIME": "1"}  # each import, as it finishes
    run = Running([str(script), *TRAIN, "--workdir", str(workdir)], importing)
    run.wait_for_text(" jax._src.lib\n")  # jax itself goes on loading
    _, err = run.stop(signal.SIGINT, timeout=60)
    assert err.strip().splitlines()[-1] == "azjax-train: interrupted", err
    assert not workdir.exists()  # stopped before the command began


def test_sigterm_keeps_a_matchs_finished_batches(tmp_path):
    result, planned = tmp_path / "match.json", 100_000
    argv = ["-m", "azjax.cli.evaluate", "--game", "tictactoe", "--a", "mcts:4", "--b", "random"]
    run = Running([*argv, "--games", str(planned), "--batch", "2", "--json", str(result)])
    run.wait_for(lambda: re.search(rb"\| [1-9]\d*/", run.err), "a finished batch")
    out, err = run.stop(signal.SIGTERM)
    match = json.loads(result.read_text())["match"]
    assert match["interrupted"] and match["planned_games"] == planned, match
    assert 2 <= match["games"] < planned and match["games"] % 2 == 0, match
    assert f"interrupted after {match['games']} of {planned} games" in err, err
    assert "mcts:4 vs random" in out


def test_training_stopped_by_sigterm_keeps_its_checkpoint(tmp_path):
    workdir = tmp_path / "run"
    run = Running(["-m", "azjax.cli.train", *TRAIN, "--workdir", str(workdir), "--quiet"])
    run.wait_for(lambda: list_steps(workdir), "checkpoint")
    os.kill(run.process.pid, signal.SIGTERM)
    run.wait_for_text("interrupted at iteration", "out")
    out, _ = run.stop(signal.SIGINT)  # a second signal during the exit: ends it at once
    stopped = list_steps(workdir)[-1]
    assert f"interrupted at iteration {stopped}; checkpoint saved; rerun the same command" in out
    assert "done:" not in out and "compiling" not in out, out  # --quiet


def test_training_stopped_while_compiling_leaves_no_empty_run(tmp_path):
    workdir = tmp_path / "run"
    run = Running(["-m", "azjax.cli.train", *TRAIN, "--workdir", str(workdir)], compiling(tmp_path))
    # At once: init compiles in about half a second, and the loop must not have begun.
    run.wait_for_text("Finished jaxpr to MLIR module conversion jit(init)")
    out, err = run.stop(signal.SIGINT)
    cache = tmp_path / "cache"
    said = f"compiling: the first start of a config takes longest; JAX's cache in {cache}"
    assert said in out
    start = "azjax-train: interrupted before the first checkpoint; rerun the same command to start"
    assert start in err.splitlines(), err
    assert not workdir.exists(), sorted(workdir.rglob("*"))


def test_training_stopped_before_its_loop_names_the_checkpoint_kept(tmp_path, monkeypatch, capsys):
    """A resumed run stopped before the loop takes the signal (restoring, compiling)."""
    import azjax.train

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    write_tiny_run(tmp_path, steps=(3, 5))
    monkeypatch.setattr(azjax.train, "train_and_evaluate", interrupted)
    assert train_main([*TRAIN, "--workdir", str(tmp_path), "--quiet"]) == INTERRUPTED
    kept = "azjax-train: interrupted; checkpoint 5 is kept; rerun the same command to resume\n"
    assert capsys.readouterr().err == kept and list_steps(tmp_path) == [3, 5]


RUN_COMMAND = """
import signal, sys
from azjax.cli import OK, check_interrupt, run_command

def ctrl_c(swallowed=True):  # one whose KeyboardInterrupt is dropped, as XLA's compile may do
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        if not swallowed:
            raise

def looping(argv):  # a long loop checks between its steps
    ctrl_c()
    for _ in range(3):
        check_interrupt()
    print("not stopped")

def again(argv):  # a second Ctrl-C while the first one's clean-up runs
    try:
        ctrl_c(swallowed=False)
    except KeyboardInterrupt:
        print("cleaning up", flush=True)
        ctrl_c()
        print("not stopped")

returning = lambda argv: ctrl_c() or OK
sys.exit(run_command("prog", globals()[sys.argv[1]], []))
"""


@pytest.mark.parametrize("main", ["looping", "returning", "again"])
def test_a_ctrl_c_is_never_lost(main):
    """A Ctrl-C whose KeyboardInterrupt was dropped still stops the command with status 130 and
    one line, and a second one ends it at once."""
    out, err = Running(["-c", RUN_COMMAND, main]).stop(timeout=60)
    assert (out, err) == (
        ("cleaning up\n", "") if main == "again" else ("", "\nprog: interrupted\n")
    )
