"""Command lines refuse bad values with one clear line (no traceback): seeds, agent specs,
file paths, sizes; `scripts/plot.py` panels and `scripts/replay.py` legends."""

from __future__ import annotations

import io
import json
import pathlib
import subprocess
import sys

import pytest
from helpers import ROOT, load_script

from azjax import checks
from azjax.checks import check_seed, parse_size
from azjax.cli import evaluate, play, train
from azjax.config import ConfigError, load_config

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


@pytest.mark.parametrize("bad", [True, False, 1.0, "3", None, -1, 2**63])
def test_check_seed_takes_integers_in_range_only(bad):
    assert check_seed(0) == 0 and check_seed(2**63 - 1) == 2**63 - 1
    with pytest.raises(ValueError, match=r"seed must be an integer with 0 <= seed < 2\*\*63"):
        check_seed(bad)


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


def test_train_takes_overrides_on_both_sides_of_an_option(tmp_path, capsys):
    argv = ["--config", str(TICTACTOE), "train.iterations=3", "--workdir", str(tmp_path)]
    assert train.main([*argv, "--quiet", "train.seed=-1"]) == 2  # the second group is read too
    assert "train.seed" in capsys.readouterr().err
    assert not (tmp_path / "checkpoints").exists()


def test_train_refuses_no_cpu_devices(tmp_path, capsys):
    argv = ["--config", str(TICTACTOE), "--workdir", str(tmp_path), "--cpu-devices", "0"]
    assert train.main(argv) == 2
    assert "--cpu-devices: CPU devices must be >= 1, got 0" in capsys.readouterr().err
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


@pytest.mark.parametrize("where", ["/nonexistent_dir/x/g.json", "{tmp}", "{tmp}/file.txt/g.json"])
def test_play_checks_the_save_path_before_playing(where, tmp_path, monkeypatch, capsys):
    (tmp_path / "file.txt").write_text("not a folder")
    save = where.format(tmp=tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO("5\n1\n9\nquit\n"))
    with pytest.raises(SystemExit) as exit_info:
        play.main(["--game", "tictactoe", "--opponent", "random", "--save", save])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert "--save" in err and save in err and "Traceback" not in err
    assert "Your move" not in out  # refused before the game started


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--record", "/nonexistent.json"], "cannot read --record /nonexistent.json"),
        (["--record", "{tmp}/bad.json"], "is not a game saved by azjax-play"),
        (["--record", "{tmp}/list.json"], "is not a game saved by azjax-play"),
        (["--game", "tictactoe", "--moves", "5", "--out", "/missing_dir/x.gif"], "/missing_dir"),
        (["--game", "tictactoe", "--moves", "5", "--out", "{tmp}/file.txt/x.gif"], "file.txt"),
        (["--game", "tictactoe", "--moves", "5", "--out", "{tmp}/file.txt"], "file.txt"),
        (["--game", "tictactoe", "--moves", "5", "--cell", "-5"], "--cell must be"),
        (["--game", "tictactoe", "--moves", "5", "--cell", "nan"], "--cell must be"),
        (["--game", "tictactoe", "--moves", "5", "--ms", "0"], "--ms must be"),
        (["--moves", "5 1"], "--game is needed with --moves and --agents"),
    ],
)
def test_replay_refuses_bad_paths_and_sizes(args, message, tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "file.txt").write_text("not a folder")
    args = [a.format(tmp=tmp_path) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "x.gif")]
    replay = load_script("replay")
    with pytest.raises(SystemExit) as exit_info:
        replay.main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message.format(tmp=tmp_path) in err[-1], err
    assert not (tmp_path / "x.gif").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--game", "tictactoe", "--a", ""], "--a: empty agent spec; expected random, greedy"),
        (["--game", "tictactoe", "--a", "  "], "--a: empty agent spec; expected random, greedy"),
        (["--game", "tictactoe", "--a", "random", "--b", ""], "--b: empty agent spec"),
        (["--game", "tictactoe", "--a", "random"], "--a needs --b"),
        (["--ladder", ""], "--ladder: empty run directory; expected a folder with checkpoints"),
        (["--ladder", "x", "--steps", "a"], "--steps 'a': expected comma-separated integers"),
        (["--solver", ""], "--solver: empty agent spec; expected random, greedy"),
        (["--game", "tictactoe", "--round-robin", ""], "--round-robin needs at least two"),
    ],
)
def test_eval_names_empty_agent_specs(args, message, capsys):
    assert evaluate.main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"azjax-eval: {message}") and "\n" not in err, err


RECORD = {  # one line of a real metrics.jsonl
    "elapsed_minutes": 27.3,
    "health/ok": 1,
    "iteration": 146,
    "moves_per_second": 310.7,
    "positions_per_second": 310.7,
    "replay/added": 2048,
    "replay/size": 50000,
    "seconds": 6.59,
    "selfplay/dropped_positions": 0,
    "selfplay/full_search_fraction": 0.125,
    "selfplay/games_finished": 50,
    "selfplay/mean_game_length": 41.3,
    "selfplay/pending_positions": 4004,
    "selfplay/policy_target_fraction": 0.125,
    "selfplay/target_fraction": 1.0,
    "train/grad_norm": 0.65,
    "train/l2": 298.6,
    "train/learning_rate": 0.001,
    "train/loss": 2.81,
    "train/policy_kl": 0.71,
    "train/policy_loss": 1.81,
    "train/policy_std": 2.48,
    "train/step": 4608,
    "train/trained": True,
    "train/value_explained": 0.027,
    "train/value_loss": 0.97,
    "train/value_std": 0.17,
    "train/value_target_var": 0.995,
    "eval/random/win_rate": 0.9,
    "eval/random/score": 0.92,
    "eval/random/wins": 18,
    "eval/random/draws": 1,
    "eval/random/losses": 1,
    "eval/greedy/win_rate": 0.6,
}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (None, "no metrics.jsonl in"),
        ([], "holds no metrics yet"),
        ([{"iteration": 1, "final": True, "eval/random/score": 1.0}], "holds no metrics yet"),
        ([{"iteration": 1, "note": "text"}], "has no numeric fields to plot"),
    ],
)
def test_plot_refuses_a_run_with_nothing_to_plot_in_one_line(lines, message, tmp_path, capsys):
    if lines is not None:
        (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(SystemExit) as exit_info:
        load_script("plot").main([str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert ": error: " in err and message in err, err  # the prog name is argv[0]
    assert not (tmp_path / "metrics.png").exists()


def test_plot_panels_have_one_meaning_and_unit_each(tmp_path):
    plot = load_script("plot")
    rows = [{**RECORD, "iteration": i, "custom/thing": float(i)} for i in range(1, 6)]
    _, _, series = plot.numeric_series(rows)
    groups = dict(plot.panels(series))
    units = {p.title: p.unit for p in plot.PANELS}
    assert groups == {
        "Losses": ["train/loss", "train/policy_kl", "train/policy_loss", "train/value_loss"],
        "Strength vs opponents": [
            "eval/random/win_rate",
            "eval/random/score",
            "eval/greedy/win_rate",
        ],
        "Throughput": ["moves_per_second", "positions_per_second"],
        "Time per iteration": ["seconds"],
        "Learning rate": ["train/learning_rate"],
        "Gradient norm": ["train/grad_norm"],
        "Weights": ["train/l2"],
        "Value head": ["train/value_explained", "train/value_std", "train/value_target_var"],
        "Policy head": ["train/policy_std"],
        "Self-play games": ["selfplay/games_finished"],
        "Game length": ["selfplay/mean_game_length"],
        "Positions": [
            "replay/added",
            "replay/size",
            "selfplay/dropped_positions",
            "selfplay/pending_positions",
        ],
        "Search and targets": [
            "selfplay/full_search_fraction",
            "selfplay/policy_target_fraction",
            "selfplay/target_fraction",
        ],
        "Run health": ["health/ok"],
        "custom/thing": ["custom/thing"],  # unknown fields: a panel each, never mixed
    }
    assert all(units[t] for t in groups if t in units)
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    axes = plot.figure(str(tmp_path)).axes
    shown = {ax.get_title(): ax.get_ylabel() for ax in axes if ax.get_title()}
    assert shown == {t: units.get(t, t) for t in groups}


def test_replay_explains_the_chain_reaction_marks_in_a_legend():
    import games

    replay = load_script("replay")
    game = games.make("chain_reaction", rows=3, cols=3)
    pictures = replay.frames(game, [0, 8, 0], game.players, 40.0)
    for picture, _ in pictures:  # every frame the same size, each with the legend
        texts = [s.text for s in picture.shapes if s.kind == "text"]
        assert any("critical mass" in t for t in texts), texts
        assert any("last move" in t for t in texts)
        assert picture.height == pictures[0][0].height
    ttt = games.make("tictactoe")
    for picture, _ in replay.frames(ttt, [4], ttt.players, 40.0):
        assert not any("critical mass" in s.text for s in picture.shapes)


@pytest.mark.parametrize("option", ["--json", "--png"])
def test_eval_checks_output_paths_before_playing(option, tmp_path, capsys):
    (tmp_path / "file.txt").write_text("not a folder")
    bad = str(tmp_path / "file.txt" / "out")
    argv = ["--game", "tictactoe", "--a", "random", "--b", "random", "--games", "2", "--quiet"]
    if option == "--png":  # a ladder's plot; the run is never opened
        argv = ["--ladder", str(tmp_path / "run"), "--games", "2", "--quiet"]
    assert evaluate.main([*argv, option, bad]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"azjax-eval: {option} {bad}") and "\n" not in err.strip(), err
    assert "random vs random" not in out  # refused before the games


BAD_SIZES = [
    (
        "chain_reaction",
        "rows=30",
        "--size rows=30: chain_reaction rows takes 2-12",
    ),
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
    ("dots_and_boxes", "rows=2,rows=3", "--size: rows is given twice"),
    (
        "dots_and_boxes",
        "cols=two",
        "--size cols=two: dots_and_boxes cols takes 1-10",
    ),
]


@pytest.mark.parametrize(("game", "size", "message"), BAD_SIZES)
def test_every_command_line_refuses_a_bad_size_alike(game, size, message, tmp_path, capsys):
    flags = ["--game", game, "--size", size]
    with pytest.raises(SystemExit) as exit_info:
        play.main([*flags, "--opponent", "random"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"azjax-play: error: {message}"
    assert evaluate.main([*flags, "--a", "random", "--b", "random", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == f"azjax-eval: {message}"
    out = str(tmp_path / "x.gif")
    with pytest.raises(SystemExit) as exit_info:
        load_script("replay").main([*flags, "--agents", "random", "random", "--out", out])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f" error: {message}")


def test_sizes_at_their_bounds_are_taken():
    assert parse_size("rows=2, cols=12", "chain_reaction") == {"rows": 2, "cols": 12}
    assert parse_size("rows=1,cols=10", "dots_and_boxes") == {"rows": 1, "cols": 10}
    for beside in ("rows=1", "cols=13"):
        key = beside.split("=")[0]
        with pytest.raises(ValueError, match=f"chain_reaction {key} takes 2-12"):
            parse_size(beside, "chain_reaction")
    for half in ("rows=", "=8", "rows=3,"):
        with pytest.raises(ValueError, match="expected KEY=VALUE pairs like"):
            parse_size(half, "chain_reaction")
    # The values a size takes, as runs: a gap ends one.
    assert checks._spans((4, 5, 6, 8, 10, 11)) == "4-6, 8, 10, 11"


def test_the_size_reaches_the_game(tmp_path, monkeypatch, capsys):
    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", io.StringIO("quit\n"))
    flags = ["--game", "chain_reaction", "--size", "rows=3, cols=4"]
    play.main([*flags, "--opponent", "random", "--save", str(save)])
    legal = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Legal: "))
    assert legal.split()[1:] == [f"{r},{c}" for r in range(1, 4) for c in range(1, 5)]
    assert json.loads(save.read_text())["kwargs"] == {"rows": 3, "cols": 4}
    argv = ["--a", "random", "--b", "random", "--size", "rows=3"]
    assert evaluate.main(argv) == 2
    assert capsys.readouterr().err.strip() == "azjax-eval: --size needs --game (the game it sizes)"


def test_eval_refuses_options_its_mode_would_ignore(capsys):
    """An option read by one mode only (--png, --steps, ... of --ladder) is refused elsewhere."""
    ttt = ["--game", "tictactoe", "--games", "2"]
    for argv, message in [
        (["--a", "random", "--b", "random", "--png", "elo.png"], "--png applies to --ladder only"),
        (["--round-robin", "random,greedy", "--b", "random"], "--b applies to --a only"),
        (["--a", "random", "--b", "greedy", "--kind", "policy"], "--kind applies to --ladder only"),
        (["--solver", "random", "--steps", "1"], "--steps applies to --ladder only"),
        (
            ["--round-robin", "random,greedy", "--positions", "p.json"],
            "--positions applies to --solver only",
        ),
        (["--solver", "random"], "--games applies to --a, --round-robin and --ladder only"),
    ]:
        assert evaluate.main([*argv, *ttt]) == 2
        assert capsys.readouterr().err.strip() == f"azjax-eval: {message}"
