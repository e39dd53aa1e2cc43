"""Command lines refuse bad values with one clear line (no traceback): seeds, agent specs,
file paths, sizes; `scripts/plot.py` panels and `scripts/replay.py` legends."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from azjax.cli import evaluate, play, train
from azjax.config import ConfigError, load_config

ROOT = pathlib.Path(__file__).resolve().parent.parent
TICTACTOE = ROOT / "configs" / "tictactoe.yaml"
BAD_SEEDS = [str(2**63), str(2**64), "-1", "seven"]


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_play_refuses_seeds_out_of_range(seed, capsys):
    with pytest.raises(SystemExit) as exit_info:
        play.main(["--game", "tictactoe", "--opponent", "random", "--seed", seed])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--seed" in err and "0 <= seed < 2**63" in err and seed in err


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_eval_refuses_seeds_out_of_range(seed, capsys):
    argv = ["--game", "tictactoe", "--a", "random", "--b", "random", "--games", "2", "--quiet"]
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main([*argv, "--seed", seed])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--seed" in err and "0 <= seed < 2**63" in err


def test_eval_accepts_the_largest_seed(capsys):
    argv = ["--game", "tictactoe", "--a", "random", "--b", "random", "--games", "2", "--quiet"]
    assert evaluate.main([*argv, "--seed", str(2**63 - 1)]) == 0
    assert "random vs random" in capsys.readouterr().out


@pytest.mark.parametrize("seed", [2**63 - 1, 2**64, -1])
def test_train_refuses_seeds_out_of_range(seed, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"train\.seed"):
        load_config(TICTACTOE, [f"train.seed={seed}"])
    assert train.main(
        ["--config", str(TICTACTOE), "--workdir", str(tmp_path), f"train.seed={seed}"]
    )
    assert "train.seed" in capsys.readouterr().err
    assert not (tmp_path / "checkpoints").exists()


def test_replay_refuses_seeds_out_of_range(tmp_path):
    out = str(tmp_path / "x.gif")
    args = ["--game", "tictactoe", "--agents", "random", "random", "--out", out]
    proc = run_script("replay.py", *args, "--seed", str(2**63))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--seed" in proc.stderr and "0 <= seed < 2**63" in proc.stderr


def run_script(name: str, *args: str, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )
