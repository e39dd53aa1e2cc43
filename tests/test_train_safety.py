"""Training refuses what it cannot do well, up front, in one line: a busy or unusable workdir,
bad opponents or starting model, non-finite numbers; and survives signals, lost records and
finished runs."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest
from test_train import TICTACTOE, TINY

from azjax import parallel, train
from azjax.checkpoint import (
    LOCK_FILE,
    Checkpointer,
    StopRequest,
    WorkdirInUse,
    WorkdirLock,
    list_steps,
)
from azjax.cli import compilation_cache_dir
from azjax.cli.train import main as train_main
from azjax.config import ConfigError, load_config
from azjax.runlog import read_metrics
from azjax.train import _finished, train_and_evaluate

pytestmark = pytest.mark.xdist_group("train")


def write_lock(workdir, pid: int, host: str | None = None) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    owner = {"pid": pid, "host": host or socket.gethostname(), "since": "earlier"}
    (workdir / LOCK_FILE).write_text(json.dumps(owner))


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ----------------------------------------------------------------------------- refused up front


def test_a_busy_workdir_is_refused_before_training(tmp_path, capsys):
    write_lock(tmp_path, os.getppid())  # a live process of this host holds it
    with pytest.raises(WorkdirInUse, match=f"in use by another run \\(process {os.getppid()} "):
        train_and_evaluate(load_config(TICTACTOE, TINY), tmp_path, progress=False)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.jsonl").exists()

    code = train_main(["--config", str(TICTACTOE), "--workdir", str(tmp_path), "--quiet", *TINY])
    err = capsys.readouterr().err
    assert code == 1 and len(lines(err)) == 1 and str(tmp_path / LOCK_FILE) in err, err


def test_the_lock_names_its_owner_and_stale_locks_are_taken_over(tmp_path, capsys):
    with WorkdirLock(tmp_path):
        owner = json.loads((tmp_path / LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        with pytest.raises(WorkdirInUse, match="in use"), WorkdirLock(tmp_path):
            pass  # a second trainer, even in the same process
    assert not (tmp_path / LOCK_FILE).exists()
    with WorkdirLock(tmp_path):  # its lock replaced meanwhile by another run's: left alone
        write_lock(tmp_path, 1, host="another-host")
    assert json.loads((tmp_path / LOCK_FILE).read_text())["host"] == "another-host"

    write_lock(tmp_path, dead_pid())
    with WorkdirLock(tmp_path):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert "taking over the lock" in capsys.readouterr().out

    write_lock(tmp_path, dead_pid(), host="another-host")  # cannot tell: refused
    with pytest.raises(WorkdirInUse, match="another-host"), WorkdirLock(tmp_path):
        pass
    (tmp_path / LOCK_FILE).write_text('{"pid": 1')  # being written by a starting run
    with pytest.raises(WorkdirInUse, match="unreadable"), WorkdirLock(tmp_path):
        pass


def test_a_workdir_that_is_a_file_is_one_line(tmp_path, capsys):
    workdir = tmp_path / "file"
    workdir.write_text("not a directory")
    code = train_main(["--config", str(TICTACTOE), "--workdir", str(workdir), "--quiet", *TINY])
    err = capsys.readouterr().err  # bad input: exit 2
    assert code == 2 and err == f"azjax-train: workdir {workdir} is a file, expected a directory\n"


def test_a_workdir_the_user_may_not_write_is_bad_input(tmp_path, capsys, monkeypatch):
    """A lock refused by the file system: exit 2 in one line naming the workdir and why."""
    workdir, os_open = tmp_path / "run", os.open

    def refused(path, *args, **kwargs):
        if str(path) == str(workdir / LOCK_FILE):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return os_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    args = ["--config", str(TICTACTOE), "--workdir", str(workdir), "--quiet", *TINY]
    assert train_main(args) == 2
    err = capsys.readouterr().err
    assert len(lines(err)) == 1 and f"workdir {workdir}" in err, err
    assert os.strerror(errno.EACCES) in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("eval.opponents=[random, search:{tmp}/none]", r"eval\.opponents\[1\]=.*no checkpoint in"),
        ("train.init_from={tmp}/none.azjax", r"train\.init_from=.*none\.azjax"),
    ],
    ids=["opponents", "init_from"],
)
def test_bad_opponents_or_starting_model_stop_before_training(tmp_path, monkeypatch, bad, error):
    def no_compiling(*args, **kwargs):
        raise AssertionError("the trainer was built before its opponents and model were checked")

    monkeypatch.setattr(parallel, "make_mesh", no_compiling)
    config = load_config(TICTACTOE, [*TINY, bad.replace("{tmp}", str(tmp_path))])
    with pytest.raises(ConfigError, match=error):
        train_and_evaluate(config, tmp_path / "run", progress=False)
    assert list_steps(tmp_path / "run") == []


def test_a_refused_run_keeps_the_workdir_the_user_made(tmp_path, capsys):
    """A run refused after its workdir was taken removes the folder only if it made it."""
    bad = f"eval.opponents=[random, search:{tmp_path}/none]"
    for made, kept in ((True, True), (False, False)):
        workdir = tmp_path / f"made_{made}"
        if made:
            workdir.mkdir()
        args = ["--config", str(TICTACTOE), "--workdir", str(workdir), "--quiet", *TINY, bad]
        assert train_main(args) == 2
        assert "eval.opponents[1]=" in capsys.readouterr().err
        assert workdir.exists() == kept and not (kept and any(workdir.iterdir()))


# ----------------------------------------------------------------------------- during a run


def test_a_diverging_run_stops_keeping_the_last_good_checkpoint(tmp_path, capsys):
    overrides = [*TINY, "optim.learning_rate=1e30", "replay.min_size=100"]  # trains from it. 2
    workdir = tmp_path / "run"  # made by the command, and kept with its checkpoint
    args = ["--config", str(TICTACTOE), "--workdir", str(workdir), "--quiet", *overrides]
    code = train_main(args)
    err = capsys.readouterr().err
    assert code == 1 and len(lines(err)) == 1, err
    assert "diverged at iteration 2" in err and "checkpoint 1 is kept" in err, err
    assert list_steps(workdir) == [1] and (workdir / "config.yaml").exists()
    records = lines((workdir / "metrics.jsonl").read_text())
    assert [json.loads(r)["iteration"] for r in records] == [1]


@pytest.fixture(scope="module")
def three_sessions(tmp_path_factory):
    """One run of 3 iterations in three sessions: stopped by two signals during its first
    checkpoint; resumed after losing that iteration's metrics line, over a leftover temporary
    checkpoint and a stale lock; run again once finished."""
    workdir = tmp_path_factory.mktemp("sessions")
    config = load_config(TICTACTOE, [*TINY, "train.iterations=3"])
    save = Checkpointer.save

    def interrupted_save(self, iteration, *args, **kwargs):
        if iteration == 1:
            signal.raise_signal(signal.SIGINT)  # "stopping after this iteration"
            signal.raise_signal(signal.SIGINT)  # would have stopped the process mid-save
        save(self, iteration, *args, **kwargs)

    sessions = []
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as out:
        patch.setattr(Checkpointer, "save", interrupted_save)
        result = train_and_evaluate(config, workdir, progress=False)
    sessions.append((result, out.getvalue(), (workdir / "metrics.jsonl").read_text()))

    metrics = workdir / "metrics.jsonl"
    metrics.write_text(metrics.read_text()[:40])  # the record of iteration 1, cut short
    (workdir / "checkpoints" / "2.orbax-checkpoint-tmp-123" / "state").mkdir(parents=True)
    write_lock(workdir, dead_pid())
    for _ in range(2):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            result = train_and_evaluate(config, workdir, progress=False)
        sessions.append((result, out.getvalue(), metrics.read_text()))
    return workdir, sessions


def test_a_second_signal_during_a_save_lets_it_finish(three_sessions):
    _, [(result, out, metrics), *_] = three_sessions
    assert result["interrupted"] and result["iteration"] == 1
    assert out.count("stopping once it is saved") == 1, out
    assert [json.loads(r)["iteration"] for r in lines(metrics)] == [1]


def test_a_lost_record_comes_back_from_the_checkpoint(three_sessions):
    workdir, [(_, _, first), (result, out, metrics), _] = three_sessions
    records = [json.loads(r) for r in lines(metrics)]
    assert [r["iteration"] for r in records] == [1, 2, 3]
    assert records[0] == json.loads(first)
    assert result["iteration"] == 3 and result["start_iteration"] == 1
    assert "taking over the lock" in out and not (workdir / LOCK_FILE).exists()
    assert list_steps(workdir)[-1] == 3
    assert not list((workdir / "checkpoints").glob("*orbax-checkpoint-tmp*"))


def test_a_finished_run_is_left_as_it_is(three_sessions):
    workdir, [_, (_, _, before), (result, out, after)] = three_sessions
    assert result == {"iteration": 3, "finished": True}
    assert list_steps(workdir)[-1] == 3 and not (workdir / LOCK_FILE).exists()
    assert "is finished (iteration 3 of train.iterations=3); raise train.iterations" in out
    assert after == before
    # azjax-train says so, and gives no summary of a session that trained nothing.
    args = ["--config", str(TICTACTOE), "--workdir", str(workdir), "--quiet", *TINY]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert train_main([*args, "train.iterations=3"]) == 0
    assert "is finished" in printed.getvalue() and "done:" not in printed.getvalue()


def test_a_stop_asked_before_the_final_evaluation_skips_it(three_sessions, tmp_path, monkeypatch):
    """Stopped as it resumes for its final evaluation: none played, left for the next command."""
    workdir = tmp_path / "run"
    shutil.copytree(three_sessions[0], workdir)

    class Asked(StopRequest):  # Ctrl-C while the session starts, once the request is installed
        def __init__(self) -> None:
            super().__init__()
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(train, "StopRequest", Asked)
    config = load_config(TICTACTOE, [*TINY, "train.iterations=3", "eval.final_num_games=4"])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = train_and_evaluate(config, workdir, progress=False)
    assert result["interrupted"] and result["iteration"] == 3, result
    assert "interrupted at iteration 3" in printed.getvalue()
    assert not any(r.get("final") for r in read_metrics(workdir / "metrics.jsonl"))
    assert not _finished(workdir, config, 3)


# ----------------------------------------------------------------------------- the cache


def test_the_compilation_cache_lives_in_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("AZJAX_JAX_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation_cache_dir() == str(tmp_path / "azjax" / "jax")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compilation_cache_dir() == str(tmp_path / "home" / ".cache" / "azjax" / "jax")
    monkeypatch.setenv("AZJAX_JAX_CACHE", str(tmp_path / "mine"))
    assert compilation_cache_dir() == str(tmp_path / "mine")
