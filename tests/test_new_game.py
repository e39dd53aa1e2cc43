"""A game defined outside the `games` package, end to end: Connect Three (docs/connect3.py, the
file of docs/adding_a_game.md) goes through `games.testing.check_game`, `games.register`, the
defaults of what it does not define, training, the arena, the web API and, registered by
`AZJAX_GAMES`, the command line."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT
from starlette.testclient import TestClient

import games
from azjax import agents, arena
from azjax.config import load_config
from azjax.train import train_and_evaluate
from azjax.web.app import create_app
from games.core import Game
from games.testing import check_game

sys.path.append(str(ROOT / "docs"))
connect3 = importlib.import_module("connect3")  # registers connect3, as AZJAX_GAMES would

TINY = [*helpers.TINY, "game.name=connect3", "selfplay.chunk_moves=16", "train.iterations=1"]


def test_rules_and_the_contract():
    for size in (4, 6):
        game = games.make("connect3", size=size)
        state = game.init(jax.random.key(0))
        for column in (0, 1, 0, 1):
            state = game.step(state, column)
        bottom = [[1, -1] + [0] * (size - 2)] * 2
        np.testing.assert_array_equal(game.board(state)[-2:], bottom)
        state = game.step(state, 0)  # three in column 1
        assert bool(state.terminated) and state.rewards.tolist() == [1.0, -1.0]
    check_game(games.make("connect3"), num_games=32)


def test_what_a_game_does_not_define_has_defaults():
    game = games.make("connect3")
    state = game.step(game.init(jax.random.key(0)), 2)
    assert len(game.players) == len(game.colours) == len(game.marks) == 2
    assert float(game.heuristic(state, jnp.int32(0))) == 0.0
    assert game.move_order().tolist() == [0, 1, 2, 3]
    assert game.counts(np.asarray(game.board(state))) is None
    # A grid of discs; no clickable cells, as the board's cells are not its moves.
    text = game.svg(state, last_action=2, clickable=True)
    assert text.startswith("<svg") and text.count(f'fill="{game.colours[0]}"') == 1
    assert "data-action" not in text
    for spec in ("greedy", "alphabeta:2"):
        action = jax.jit(agents.make(spec, game))(state, jax.random.key(1))
        assert bool(state.legal_action_mask[action])


def test_register_refuses_clashes_and_non_games():
    ConnectThree = connect3.ConnectThree
    games.register("connect3", ConnectThree)  # the same class again: nothing changes
    assert games.make("connect3") is games.make("connect3", size=4)
    other = type("Other", (ConnectThree,), {})
    with pytest.raises(ValueError, match=r"name is taken by connect3\.ConnectThree"):
        games.register("connect3", other)
    other.name = "connect4"
    with pytest.raises(ValueError, match=r"taken by games\.connect4\.Connect4"):
        games.register("connect4", other)
    with pytest.raises(ValueError, match="set `name = 'connect5'`"):
        games.register("connect5", ConnectThree)
    with pytest.raises(TypeError, match=r"not a subclass of games\.Game"):
        games.register("connect3", object)
    with pytest.raises(TypeError, match="_apply"):
        games.register("half", type("Half", (Game,), {"name": "half"}))
    assert "half" not in games.names()


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("evaluate", ["--zoo"]),
        ("play", []),
        ("serve", ["--port", "0"]),
        ("train", ["--config", "configs/tictactoe.yaml", "--workdir", "unused"]),
        ("export", ["unused", "--out", "unused.azjax"]),
    ],
)
def test_a_plugin_module_that_cannot_be_imported_stops_every_command_in_one_line(
    command, args, monkeypatch, capsys
):
    for empty in (",", " , : ", ""):  # empty names are ignored
        monkeypatch.setenv(games.PLUGINS_ENV, empty)
        assert "tictactoe" in games.names()
    monkeypatch.setenv(games.PLUGINS_ENV, "nonexistent.module")
    monkeypatch.chdir(ROOT)
    try:
        status = importlib.import_module(f"azjax.cli.{command}").main(args)
    except SystemExit as stop:
        status = stop.code
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "'nonexistent.module'" in err, err


def test_train_then_play_in_the_arena_the_browser_and_the_command_line(tmp_path):
    config = load_config(ROOT / "configs" / "tictactoe.yaml", TINY)
    run = tmp_path / "connect3"
    train_and_evaluate(config, run, progress=False)
    game = games.make("connect3")
    trained = agents.make(f"policy:{run}", game)
    result = arena.match(game, trained, agents.make("random", game), 8, jax.random.key(0))
    assert result.games == 8

    with TestClient(create_app(str(tmp_path), analyse=False)) as client:
        options = client.get("/api/options").json()
        assert "connect3" in [g["name"] for g in options["games"]]
        assert [r["game"] for r in options["runs"]] == ["connect3"]
        body = {"game": "connect3", "opponent": f"policy:{run}@1", "human": 0, "seed": 1}
        view = client.post("/api/games", json=body)
        assert view.status_code == 201, view.text
        view = view.json()
        assert view["svg"].startswith("<svg") and view["legal"] == ["1", "2", "3", "4"]
        moved = client.post(f"/api/games/{view['id']}/move", json={"action": 1, "ply": 0})
        assert moved.status_code == 200, moved.text
        assert moved.json()["moves"][0]["notation"] == "2"

    # A new process finds the game through AZJAX_GAMES, at the size asked for.
    env = {**os.environ, games.PLUGINS_ENV: "connect3", "PYTHONPATH": str(ROOT / "docs")}
    command = ["azjax.cli.play", "--game", "connect3", "--size", "size=5", "--opponent", "random"]
    proc = subprocess.run(
        [sys.executable, "-m", *command],
        input="5\n5\n5\n5\nquit\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "connect3" in proc.stdout and "1 2 3 4 5" in proc.stdout, proc.stdout
