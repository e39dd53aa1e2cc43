"""pgx environments as azjax games (games/pgx_games.py): the contract, move-by-move agreement
with azjax's own Tic-Tac-Toe, Connect Four and Othello, agents, training and pictures."""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE
from helpers import ROOT, TINY

pytest.importorskip("pgx")

import games
from azjax import agents, arena
from games.pgx_games import game_class
from games.testing import check_game

pytestmark = pytest.mark.xdist_group("pgx")

# azjax game -> the pgx environment with the same rules and action encoding.
PAIRS = {"tictactoe": "pgx:tic_tac_toe", "connect4": "pgx:connect_four", "othello": "pgx:othello"}
OTHELLO_PASS = 64


@pytest.mark.parametrize("env_id", ["hex", "othello"])  # (the rest agree with azjax's: below)
def test_check_game(env_id):
    check_game(games.make(f"pgx:{env_id}"), num_games=4)


def test_make_names_and_errors(monkeypatch):
    game = games.make("pgx:hex")
    assert game is games.make("pgx:hex")
    assert (game.name, game.num_actions, game.observation_shape) == ("pgx:hex", 122, (11, 11, 4))
    assert game.max_game_length == 122  # (its notation round-trips: check_game)
    # A flat observation of N features is one cell of N planes (Backgammon: its own features).
    assert games.make("pgx:backgammon").observation_shape == (1, 1, 202)
    assert "pgx:hex" not in games.names()
    monkeypatch.setattr(games, "_REGISTRY", dict(games._REGISTRY))
    games.register("pgx:hex", game_class("hex"))
    assert "pgx:hex" in games.names() and games.make("pgx:hex") is game
    with pytest.raises(ValueError, match="unknown pgx environment 'nim'") as unknown:
        games.make("pgx:nim")
    offered = str(unknown.value).split(": ")[-1].split(", ")  # only games azjax accepts
    assert "backgammon" in offered and "hex" in offered and "chess" in offered
    assert not {"2048", "kuhn_poker", "minatar-breakout", "sparrow_mahjong"} & set(offered)
    with pytest.raises(ValueError, match="has 1 players, not 2"):
        games.make("pgx:2048")
    with pytest.raises(ValueError, match="bad arguments for game 'pgx:hex'"):
        games.make("pgx:hex", size=9)
    with pytest.raises(ValueError, match="or pgx:<env_id>"):
        games.make("nim")


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("evaluate", ["--a", "random", "--b", "random", "--game", "pgx:kuhn_poker"]),
        ("train", ["--config", "configs/tictactoe.yaml", "--workdir", "{run}", "game.name={game}"]),
        ("serve", ["--games", "pgx:kuhn_poker", "--port", "0"]),
    ],
)
def test_hidden_information_refused(command, args, tmp_path, capsys):
    """By `make`, and by each tool in one line: exit status 2 (bad input)."""
    for env_id in ("kuhn_poker", "leduc_holdem"):
        message = f"^pgx environment '{env_id}' has hidden information .*private state$"
        with pytest.raises(ValueError, match=message):
            games.make(f"pgx:{env_id}")
    args = [arg.format(run=tmp_path / "run", game="pgx:kuhn_poker") for arg in args]
    try:
        status = importlib.import_module(f"azjax.cli.{command}").main(args)
    except SystemExit as stop:
        status = stop.code
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert "'kuhn_poker' has hidden information" in err and not (tmp_path / "run").exists()


def test_missing_pgx_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pgx", None)  # `import pgx` fails
    monkeypatch.delitem(sys.modules, "games.pgx_games")
    with pytest.raises(ValueError, match=r"pip install 'azjax\[pgx\]'") as err:
        games.make("pgx:connect_four")  # a ValueError, as for any game make cannot make
    assert isinstance(err.value, ImportError)
    monkeypatch.undo()
    assert importlib.import_module("games.pgx_games").game_class is game_class


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _play_both(native: games.Game, wrapped: games.Game, batch: int, key: jax.Array):
    """The same random games through both: actions drawn from `native`'s legal moves; once
    `native`'s game is over, `wrapped` is given its last action (Othello's pass)."""

    def ply(carry, key):
        a, b = carry
        actions = jax.vmap(agents.random_legal_action)(
            jax.random.split(key, batch), a.legal_action_mask
        )
        a_next = jax.vmap(native.step)(a, actions)
        b_next = jax.vmap(wrapped.step)(
            b, jnp.where(a.terminated, wrapped.num_actions - 1, actions)
        )
        return (a_next, b_next), (a_next, b_next)

    init_keys = jax.random.split(jax.random.fold_in(key, 0), batch)
    first = (jax.vmap(native.init)(init_keys), jax.vmap(wrapped.init)(init_keys))
    plies = jax.random.split(jax.random.fold_in(key, 1), native.max_game_length + 2)
    _, rest = jax.lax.scan(ply, first, plies)
    fields = ("current_player", "legal_action_mask", "terminated", "rewards")
    both = jax.tree.map(lambda x, y: jnp.concatenate([x[None], y]), first, rest)
    return tuple(
        {"board": jax.vmap(jax.vmap(game.board))(s), **{f: getattr(s, f) for f in fields}}
        for game, s in zip((native, wrapped), both, strict=True)
    )


@pytest.mark.parametrize("native_name", list(PAIRS))
def test_pgx_agrees_with_native_rules(native_name):
    """Identical boards, legal moves, players, ends and results at every ply of 64 random games.
    Othello: azjax ends a game as soon as neither player can place; pgx has both pass first,
    so there pgx must offer only the pass for two more plies, then end with the same result."""
    native, wrapped = games.make(native_name), games.make(PAIRS[native_name])
    assert native.num_actions == wrapped.num_actions
    a, b = jax.device_get(_play_both(native, wrapped, 64, jax.random.key(5)))
    assert a["terminated"][-1].all() and b["terminated"][-1].all()
    if native_name != "othello":
        for field in a:
            np.testing.assert_array_equal(a[field], b[field], err_msg=field)
        return
    end = a["terminated"].argmax(0)  # the ply at which each native game ended
    b_end = b["terminated"].argmax(0)
    only_pass = np.zeros(wrapped.num_actions, bool)
    only_pass[OTHELLO_PASS] = True
    for g in range(a["terminated"].shape[1]):
        live = slice(0, end[g])
        for field in a:
            np.testing.assert_array_equal(a[field][live, g], b[field][live, g], err_msg=field)
        assert b_end[g] in (end[g], end[g] + 2)
        for t in range(end[g], b_end[g]):
            np.testing.assert_array_equal(b["legal_action_mask"][t, g], only_pass)
        np.testing.assert_array_equal(a["rewards"][end[g], g], b["rewards"][b_end[g], g])
    assert (b_end > end).any()  # the double pass happened in some game (one, with key 5)


def test_agents_play_a_pgx_game():
    """Pure MCTS (8 simulations, random rollouts) beats random play in pgx's Connect Four."""
    game = games.make("pgx:connect_four")
    a, b = agents.make("mcts:8", game), agents.make("random", game)
    assert arena.match(game, a, b, 16, jax.random.key(7)).score > 0.6


def test_train_on_two_devices(tmp_path):
    """configs/pgx_tic_tac_toe.yaml trains (tiny) through azjax-train on two CPU devices:
    making a pgx game imports pgx, which starts JAX, so the devices are set before that."""
    overrides = [*TINY, "train.iterations=1"]  # (agents play pgx games: above)
    command = [sys.executable, "-m", "azjax.cli.train", "--quiet", "--cpu-devices", "2"]
    command += ["--config", str(ROOT / "configs" / "pgx_tic_tac_toe.yaml")]
    command += ["--workdir", str(tmp_path), *overrides]
    env = {**os.environ, "XLA_FLAGS": FAST_COMPILE}  # no forced device count: the CLI sets it
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pgx:tic_tac_toe on 2 cpu device(s)" in result.stdout, result.stdout
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["iteration"] == 1 and record["train/step"] == 4


def test_svg_is_pgx_drawing():
    """Hex is drawn as pgx draws it, a rhombus of hexagons (a six-point polygon per cell), in a
    labelled document that scales (viewBox); a bare board falls back to the grid."""
    game = games.make("pgx:hex")
    root = ET.fromstring(game.svg(game.init(jax.random.key(0))))
    assert root.get("aria-label") == "pgx:hex board" and root.get("viewBox")
    polygons = [p.get("points").split() for p in root.iter("{http://www.w3.org/2000/svg}polygon")]
    assert sum(len(p) == 6 for p in polygons) >= 121
    assert "<rect" in game.svg(board=np.zeros((11, 11), np.int32))


def test_a_game_still_live_at_its_length_bound_ends_drawn():
    """An environment without a bound of its own (backgammon) ends at `max_game_length` moves,
    drawn, so the bound self-play and the search rely on holds."""
    game = game_class("backgammon")()
    game.max_game_length = 6  # moves: about three turns, far from any end of the game itself
    step = jax.jit(game.step)
    state = game.init(jax.random.key(0))
    for move in range(6):
        assert not bool(state.terminated), move
        state = step(state, game.legal_actions(state)[0])
    assert bool(state.terminated) and not np.asarray(state.legal_action_mask).any()
    np.testing.assert_array_equal(state.rewards, [0.0, 0.0])
