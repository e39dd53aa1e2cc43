"""Every command follows one exit-status convention (azjax.cli): bad input of any kind exits 2
with one line on stderr naming it, before anything is compiled and without a traceback."""

from __future__ import annotations

import contextlib
import importlib
import os
import pty
import select
import signal
import time
import tomllib

import pytest
from helpers import ROOT, TINY

from azjax.cli import BAD_INPUT, FAILED, INTERRUPTED, OK
from azjax.cli.console import COMMANDS

TTT = str(ROOT / "configs" / "tictactoe.yaml")
TRAIN = ["--config", TTT, "--workdir", "{tmp}/run"]
EVAL = ["--game", "tictactoe", "--a", "random", "--b", "random", "--games", "2", "--quiet"]
PLAY = ["--game", "tictactoe", "--opponent", "random"]
SEED = "0 <= seed < 2**63"

# (command, arguments, what its one line says); {tmp} is a fresh folder holding file.txt
CASES = [
    ("azjax-train", ["--config", "{tmp}/none.yaml", "--workdir", "{tmp}/run"], "none.yaml"),
    ("azjax-train", [*TRAIN, "train.init_from={tmp}/none"], "train.init_from="),
    ("azjax-train", ["--config", TTT], "the following arguments are required: --workdir"),
    ("azjax-train", [*TRAIN, "train.seed=-1"], "train.seed"),
    ("azjax-train", [TRAIN[0], TTT, "train.iterations=3", *TRAIN[2:], "train.seed=-1"], "seed"),
    ("azjax-train", [*TRAIN, "--cpu-devices", "0"], "--cpu-devices: CPU devices must be >= 1"),
    ("azjax-eval", [*EVAL, "--games", "0"], "--games must be >= 1, got 0"),
    ("azjax-eval", [*EVAL, "--seed", "-1"], SEED),
    ("azjax-eval", ["--game", "tictactoe", "--a", ""], "--a: empty agent spec; expected random"),
    ("azjax-eval", ["--game", "tictactoe", "--a", "random"], "--a needs --b"),
    ("azjax-eval", ["--ladder", "x", "--steps", "a"], "--steps 'a': expected comma-separated"),
    ("azjax-eval", ["--game", "tictactoe", "--round-robin", ""], "--round-robin needs at least"),
    ("azjax-eval", [*EVAL, "--json", "{tmp}/file.txt/out"], "--json {tmp}/file.txt/out"),
    ("azjax-eval", ["--ladder", "{tmp}/run", "--png", "{tmp}/file.txt/o"], "--png {tmp}/file"),
    ("azjax-eval", [*EVAL, "--png", "elo.png"], "--png applies to --ladder only"),
    ("azjax-eval", ["--round-robin", "random,greedy", "--b", "x"], "--b applies to --a only"),
    ("azjax-eval", ["--solver", "random", "--games", "2"], "--games applies to --a, --round"),
    ("azjax-eval", ["--a", "random", "--b", "random", "--size", "rows=3"], "--size needs --game"),
    ("azjax-eval", ["--a", "zoo:c4x", "--b", "random"], "no zoo model 'c4x'"),
    ("azjax-play", ["--game", "tictactoe", "--opponent", "nonsense"], "nonsense"),
    ("azjax-play", ["--game", "tictactoe", "--as", "third"], "invalid choice: 'third'"),
    ("azjax-play", [*PLAY, "--seed", str(2**63)], SEED),
    ("azjax-play", [*PLAY, "--save", "/no/such/folder/g.json"], "there is no folder /no/such"),
    ("azjax-play", [*PLAY, "--save", "{tmp}/file.txt/g.json"], "--save {tmp}/file.txt/g.json"),
    ("azjax-play", ["--game", "chess", "--opponent", "random"], "unknown game 'chess'"),
    ("azjax-play", ["--game", "chess", "--opponent", "random"], "name its module in AZJAX_GAMES"),
    ("azjax-play", ["--opponent", "random"], "--game is needed (one of chain_reaction, "),
    ("azjax-play", [], "unless --opponent names a trained model"),
    ("azjax-play", ["--size", "size=6", "--opponent", "zoo:othello"], "--size needs --game"),
    ("azjax-serve", ["--games", "pgx:nope", "--port", "0"], "nope"),
    ("azjax-serve", ["--port", "70000"], "--port: port must be from 1 to 65535"),
    ("azjax-serve", ["--runs", "{tmp}/none", "--port", "0"], "--runs {tmp}/none: no such folder"),
    ("azjax-export", ["{tmp}/none", "--out", "{tmp}/model.azjax"], "none"),
    ("azjax-export", ["runs/x", "--dtype", "float16"], "invalid choice: 'float16'"),
]


def test_the_statuses_are_the_documented_ones():
    assert (OK, FAILED, BAD_INPUT, INTERRUPTED) == (0, 1, 2, 130)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {command: f"azjax.cli.console:{name}" for command, name in COMMANDS.items()}
    assert {command for command, _, _ in CASES} == set(scripts)  # every command is refused


@pytest.mark.parametrize(("command", "args", "named"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, command, args, named):
    (tmp_path / "file.txt").write_text("not a folder")
    main = importlib.import_module(f"azjax.cli.{COMMANDS[command]}").main
    try:
        status = main([a.replace("{tmp}", str(tmp_path)) for a in args])
    except SystemExit as stop:
        status = stop.code
    err = capsys.readouterr().err
    assert status == BAD_INPUT, (status, err)
    assert len(err.splitlines()) == 1 and err.startswith(f"{command}: "), err
    assert named.replace("{tmp}", str(tmp_path)) in err, err
    assert not (tmp_path / "run").exists()  # a refused run leaves no workdir behind


def test_make_train_stopped_by_ctrl_c_ends_as_the_readme_says(tmp_path):
    """Ctrl-C at a terminal during `make train` (SIGINT to make's process group): azjax-train
    saves a checkpoint and exits 130, make reports it and ends by the signal itself, which a
    shell shows as status 130 (README, "Two commands")."""
    run = tmp_path / "run"
    args = " ".join([*TINY, "train.iterations=100000"])
    pid, fd = pty.fork()
    if pid == 0:  # a terminal's job: its own session, make's SIGINT at the default
        os.chdir(ROOT)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execvp(
            "make", ["make", "-o", ".venv/.installed", "train", f"WORKDIR={run}", f"ARGS={args}"]
        )
    said, deadline, status = b"", time.monotonic() + 300, None
    try:
        while status is None and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                with contextlib.suppress(OSError):  # the terminal closed: make has ended
                    said += os.read(fd, 65536)
            if not said.count(b"interrupted") and any((run / "checkpoints").glob("[0-9]*")):
                os.killpg(pid, signal.SIGINT)
                said += b"interrupted: sent\n"
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
    finally:
        if status is None:
            os.killpg(pid, signal.SIGKILL)
    text = said.decode(errors="replace")
    assert status is not None and os.WIFSIGNALED(status), text
    assert os.WTERMSIG(status) == signal.SIGINT, text
    assert "interrupted at iteration" in text, text
    assert "train] Interrupt" in text or "train] Error 130" in text, text
    assert any((run / "checkpoints").glob("[0-9]*"))
