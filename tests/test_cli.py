"""Command lines and scripts read their values alike: seeds, game sizes and paths, bad ones refused
in one clear line (the commands' refusals: tests/test_exit_status.py)."""

from __future__ import annotations

import io
import json
import sys

import pytest
from helpers import load_script

from azjax import checks
from azjax.checks import check_seed, parse_size
from azjax.cli import evaluate, play


def test_seeds_are_integers_from_0_below_2_to_the_63():
    assert check_seed(0) == 0 and check_seed(2**63 - 1) == 2**63 - 1
    for bad in (True, False, 1.0, "3", None, -1, 2**63):
        with pytest.raises(ValueError, match=r"seed must be an integer with 0 <= seed < 2\*\*63"):
            check_seed(bad)


def test_eval_accepts_the_largest_seed(capsys):
    argv = ["--game", "tictactoe", "--a", "random", "--b", "random", "--games", "2", "--quiet"]
    assert evaluate.main([*argv, "--seed", str(2**63 - 1)]) == 0
    assert "random vs random" in capsys.readouterr().out


REPLAY = ["--game", "tictactoe", "--moves", "5"]


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("replay", ["--record", "/nonexistent.json"], "cannot read --record /nonexistent.json"),
        ("replay", ["--record", "{tmp}/bad.json"], "is not a game saved by azjax-play"),
        ("replay", [*REPLAY, "--out", "/missing_dir/x.gif"], "/missing_dir"),
        ("replay", [*REPLAY, "--cell", "nan"], "--cell must be"),
        ("replay", ["--moves", "5 1"], "--game is needed with --moves and --agents"),
        ("plot", ["{tmp}/none"], "no metrics.jsonl in"),
        ("plot", ["{tmp}/text"], "has no numeric fields to plot"),
    ],
)
def test_scripts_refuse_bad_values_in_argparse_s_way(script, args, message, tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "file.txt").write_text("not a folder")
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "metrics.jsonl").write_text('{"iteration": 1, "note": "text"}\n')
    args = [a.format(tmp=tmp_path) for a in args]
    if script == "replay" and "--out" not in args:
        args += ["--out", str(tmp_path / "x.gif")]
    with pytest.raises(SystemExit) as exit_info:
        load_script(script).main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()  # argparse's usage, then the reason
    assert ": error: " in err[-1] and message in err[-1], err
    assert not (tmp_path / "x.gif").exists()


@pytest.mark.parametrize(
    ("game", "size", "message"),
    [
        ("chain_reaction", "rows=30", "--size rows=30: chain_reaction rows takes 2-12"),
        (
            "chain_reaction",
            "row=3",
            "--size: chain_reaction has no size 'row' (chain_reaction sizes: rows 2-12, cols 2-12)",
        ),
        (
            "othello",
            "size",
            "--size: expected KEY=VALUE pairs like rows=6,cols=9, got 'size'"
            " (othello sizes: size 6, 8)",
        ),
        ("othello", "size=7", "--size size=7: othello size takes 6, 8"),
        ("tictactoe", "rows=3", "--size: tictactoe has no sizes, got 'rows=3'"),
        ("dots_and_boxes", "cols=two", "--size cols=two: dots_and_boxes cols takes 1-10"),
    ],
)
def test_every_command_line_refuses_a_bad_size_alike(game, size, message, tmp_path, capsys):
    flags = ["--game", game, "--size", size]
    with pytest.raises(SystemExit) as exit_info:
        play.main([*flags, "--opponent", "random"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"azjax-play: error: {message}\n"
    assert evaluate.main([*flags, "--a", "random", "--b", "random", "--quiet"]) == 2
    assert capsys.readouterr().err == f"azjax-eval: {message}\n"
    out = str(tmp_path / "x.gif")
    with pytest.raises(SystemExit) as exit_info:
        load_script("replay").main([*flags, "--agents", "random", "random", "--out", out])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f" error: {message}")


def test_sizes_at_their_bounds_are_taken_and_reach_the_game(tmp_path, monkeypatch, capsys):
    assert parse_size("rows=2, cols=12", "chain_reaction") == {"rows": 2, "cols": 12}
    assert parse_size("rows=1,cols=10", "dots_and_boxes") == {"rows": 1, "cols": 10}
    for beside in ("rows=1", "cols=13"):
        with pytest.raises(ValueError, match=f"chain_reaction {beside[:4]} takes 2-12"):
            parse_size(beside, "chain_reaction")
    for half in ("rows=", "=8", "rows=3,"):
        with pytest.raises(ValueError, match="expected KEY=VALUE pairs like"):
            parse_size(half, "chain_reaction")
    assert checks._spans((4, 5, 6, 8, 10, 11)) == "4-6, 8, 10, 11"  # as refusals list them

    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", io.StringIO("quit\n"))
    flags = ["--game", "chain_reaction", "--size", "rows=3, cols=4"]
    play.main([*flags, "--opponent", "random", "--save", str(save)])
    legal = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Legal: "))
    assert legal.split()[1:] == [f"{r},{c}" for r in range(1, 4) for c in range(1, 5)]
    assert json.loads(save.read_text())["kwargs"] == {"rows": 3, "cols": 4}
