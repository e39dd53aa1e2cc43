"""Every command follows one exit-status convention (azjax.cli): bad input of any kind exits 2
with one line on stderr, before anything is compiled and without a traceback."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib

import pytest
from helpers import ROOT

from azjax.cli import BAD_INPUT, FAILED, INTERRUPTED, OK
from azjax.cli.console import COMMANDS

TICTACTOE = ROOT / "configs" / "tictactoe.yaml"

# (command, bad arguments, what the line names); {tmp} is a fresh empty folder
BAD_INPUT_CASES = [
    ("azjax-train", ["--config", "{tmp}/none.yaml", "--workdir", "{tmp}/run"], "none.yaml"),
    (
        "azjax-train",
        ["--config", str(TICTACTOE), "--workdir", "{tmp}/run", "train.init_from={tmp}/none"],
        "train.init_from=",
    ),
    ("azjax-eval", ["--game", "tictactoe", "--a", "random", "--b", "random", "--games", "0"], "0"),
    ("azjax-play", ["--game", "tictactoe", "--opponent", "nonsense"], "nonsense"),
    ("azjax-serve", ["--games", "pgx:nope", "--port", "0"], "nope"),
    ("azjax-export", ["{tmp}/none", "--out", "{tmp}/model.azjax"], "none"),
]

# (command, arguments argparse refuses, what the line names)
USAGE_CASES = [
    (
        "azjax-train",
        ["--config", str(TICTACTOE)],
        "the following arguments are required: --workdir",
    ),
    ("azjax-eval", ["--game", "tictactoe", "--a", "random", "--b", "random", "--seed", "-1"], "-1"),
    ("azjax-play", ["--game", "tictactoe", "--as", "third"], "invalid choice: 'third'"),
    ("azjax-serve", ["--port", "70000"], "70000"),
    ("azjax-export", ["runs/x", "--dtype", "float16"], "invalid choice: 'float16'"),
]


def _module(command: str) -> str:
    return f"azjax.cli.{COMMANDS[command]}"


def test_the_statuses_are_the_documented_ones():
    assert (OK, FAILED, BAD_INPUT, INTERRUPTED) == (0, 1, 2, 130)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    # every console script runs its command through azjax.cli.console
    assert scripts == {command: f"azjax.cli.console:{name}" for command, name in COMMANDS.items()}
    assert {command for command, _, _ in BAD_INPUT_CASES} == set(scripts)  # every command
    assert {command for command, _, _ in USAGE_CASES} == set(scripts)


@pytest.mark.parametrize(
    ("command", "args", "named"), BAD_INPUT_CASES, ids=[c[0] for c in BAD_INPUT_CASES]
)
def test_bad_input_is_one_line_and_status_2(tmp_path, command, args, named):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", _module(command), *argv],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == BAD_INPUT, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"{command}: "), proc.stderr
    assert named in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # a refused run leaves no empty workdir behind


@pytest.mark.parametrize(("command", "args", "named"), USAGE_CASES, ids=[c[0] for c in USAGE_CASES])
def test_a_bad_command_line_is_one_line_and_status_2(command, args, named, capsys):
    """argparse's refusals too: one line, without argparse's usage block."""
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(_module(command)).main(args)
    assert exit_info.value.code == BAD_INPUT
    out, err = capsys.readouterr()
    assert not out and err.endswith(f"; see {command} --help\n"), err
    assert len(err.splitlines()) == 1 and err.startswith(f"{command}: ") and named in err, err
