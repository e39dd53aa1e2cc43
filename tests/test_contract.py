"""The game contract (games/core.py), checked by `games.testing.check_game` for every game and
size in GAME_CONFIGS, what the shipped games promise besides, the grid helpers, and
check_game naming the rule a broken game breaks."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import GAME_CONFIGS, config_id
from flax import struct

import games
from games import core, tictactoe
from games.core import IllegalMoveError, mover_rewards
from games.testing import check_game
from games.tictactoe import TicTacToe


@pytest.mark.parametrize("config", GAME_CONFIGS, ids=config_id)
def test_check_game(config):
    """The contract, a symmetry to augment with, and moves refused naming what is legal."""
    name, kwargs = config
    game = games.make(name, **kwargs)
    check_game(game, num_games=16, key=jax.random.key(1))
    assert len(game.symmetries) >= 2
    state = game.init(jax.random.key(0))
    state = game.step(state, game.legal_actions(state)[0])
    mask = np.asarray(state.legal_action_mask)
    legal, illegal = np.flatnonzero(mask), np.flatnonzero(~mask)
    if len(illegal):  # (a Connect Four column is full after six moves: tests/test_connect4.py)
        with pytest.raises(IllegalMoveError, match="Legal moves") as err:
            game.parse_action(game.format_action(int(illegal[0])), state)
        assert game.format_action(int(legal[0])) in str(err.value)
    for bad in (-1, game.num_actions):
        with pytest.raises(IllegalMoveError, match=rf"{bad}.*0-{game.num_actions - 1}"):
            game.format_action(bad)
    with pytest.raises(TypeError, match=r"got 1\.5"):
        game.format_action(1.5)


def test_make_is_cached_and_refuses_unknown_names():
    assert games.make("tictactoe") is games.make("tictactoe")
    assert games.make("othello") is games.make("othello", size=8)
    assert games.make("chain_reaction", rows=5) is games.make("chain_reaction", cols=5)
    with pytest.raises(ValueError, match="bad arguments for game 'othello'"):
        games.make("othello", rows=3)
    with pytest.raises(ValueError, match="unknown game 'chess'"):
        games.make("chess")


def test_a_move_after_the_end_is_refused_as_the_game_being_over():
    game = games.make("tictactoe")
    state = game.init(jax.random.key(0))
    for action in (0, 3, 1, 4, 2):  # X takes the top row
        state = game.checked_step(state, action)
    for refuse in (lambda: game.checked_step(state, 8), lambda: game.parse_action("9", state)):
        with pytest.raises(IllegalMoveError, match="the tictactoe game is over"):
            refuse()


# ----------------------------------------------------------------------------- grid helpers


def test_grid_symmetries_map_connect4_columns_and_refuse_what_has_no_image():
    """An action may own several cells (a Connect4 column): flipping left-right maps each
    column onto one column, in reverse order; a transpose spreads a column over a row."""
    columns = np.broadcast_to(np.arange(7), (6, 7))
    identity, flip = core.grid_symmetries(columns, 7, names=("identity", "flip_lr"))
    assert identity.action_source.tolist() == list(range(7))
    assert flip.action_source.tolist() == list(range(6, -1, -1))
    square = np.broadcast_to(np.arange(4), (4, 4))
    with pytest.raises(ValueError, match=r"^transpose does not map action 0 onto a single action"):
        core.grid_symmetries(square, 4, names=("transpose",))


@pytest.mark.parametrize(("height", "width"), [(4, 4), (3, 5)])
def test_grid_symmetries_are_the_dihedral_maps_they_name(height, width):
    """Each named map takes each cell's contents from where its name says (the quarter turns by
    their composition), and the maps of a grid are distinct."""
    cells = np.arange(height * width).reshape(height, width)
    maps = {s.name: s.cell_source for s in core.grid_symmetries(cells, height * width)}
    sources = {"flip_lr": cells[:, ::-1], "flip_ud": cells[::-1], "rot180": cells[::-1, ::-1]}
    sources["identity"] = cells
    if height == width:
        sources |= {"transpose": cells.T, "anti_transpose": cells[::-1, ::-1].T}
        np.testing.assert_array_equal(maps["rot90"][maps["rot90"]], maps["rot180"])
        np.testing.assert_array_equal(maps["rot90"][maps["rot270"]], maps["identity"])
    assert maps.keys() - sources.keys() == ({"rot90", "rot270"} if height == width else set())
    for name, source in sources.items():
        np.testing.assert_array_equal(maps[name], source.ravel(), err_msg=name)
    assert len({m.tobytes() for m in maps.values()}) == len(maps)


def test_a_text_board_aligns_its_cells_under_their_labels():
    # Cells widen to the widest label or count, and rows to the widest row label.
    board = np.array([[1, 0], [0, -12]])
    labelled = core.render_grid(board, col_labels=["a", "bb"], row_labels=["9", "10"])
    assert labelled.splitlines() == ["     a  bb", " 9  1x   .", "10   . 12o"]
    wide = core.render_grid(board[:1], {1: "X", 0: "."}, col_labels=["10", "11"])
    assert wide.splitlines() == ["10 11", " X  ."]


# ----------------------------------------------------------------------------- check_game


def _after(change):
    """Tic-Tac-Toe whose moves end in `change(state, after)`."""
    return {"_apply": lambda self, s, a: change(s, TicTacToe._apply(self, s, a))}


def _mid_game_reward(state, after):
    mid = mover_rewards(state.current_player, 1.0)
    return after.replace(rewards=jnp.where(after.terminated, after.rewards, mid))


def _stuck(state, after):  # no legal move after the fourth, but not over
    stuck = jnp.sum(after.board != 0) == 4
    return after.replace(legal_action_mask=after.legal_action_mask & ~stuck)


@struct.dataclass
class _KeyedState(tictactoe.State):
    rng: jax.Array


def _short_init(self) -> None:
    TicTacToe.__init__(self)
    self.max_game_length = 5


def _unturned(self):  # the quarter turn's actions left unturned
    identity, turn, *rest = TicTacToe.symmetries.fget(self)
    return (identity, dataclasses.replace(turn, action_source=np.arange(9)), *rest)


BROKEN = [
    (_after(lambda s, n: n.replace(rewards=jnp.maximum(n.rewards, 0.0))), "rewards are not zero"),
    (_after(_mid_game_reward), "rewards must be zero except on the move that ends the game"),
    (_after(lambda s, n: n.replace(rewards=n.rewards / 2)), r"final rewards must be \+1, -1"),
    (_after(_stuck), "a live state must have a legal action"),
    ({"__init__": _short_init}, "a random game lasted longer than max_game_length=5 moves"),
    (
        {"init": lambda self, k: TicTacToe.init(self, k).replace(current_player=jnp.int32(1))},
        "player 0 must move first",
    ),
    ({"heuristic": lambda self, s, p: jnp.int32(0)}, r"heuristic\(state, player\) must be a"),
    ({"board": lambda self, s: TicTacToe.board(self, s).astype(float)}, "board must be an int"),
    (
        {"init": lambda self, k: _KeyedState(**dataclasses.asdict(TicTacToe.init(self, k)), rng=k)},
        r"State.rng must hold bools, integers or floats of at most 4 bytes.*key<fry>",
    ),
    ({"render": lambda self, s: None}, r"render\(state\) must return a str"),
    ({"symmetries": property(_unturned)}, "symmetry rot90 does not commute with step"),
    ({"format_action": lambda self, a: str(9 - int(a))}, r"parse_action\(format_action\(0\)\)"),
    ({"format_action": lambda self, a: str(int(a) + 1)}, r"format_action\(-1\) must refuse it"),
    ({"_parse": lambda self, t: int(t) - 1 if t.isdigit() else 0}, r"parse_action\(''\) must"),
    (
        {"parse_action": lambda self, text, state=None: TicTacToe.parse_action(self, text)},
        r"parse_action accepted illegal move '\d'",
    ),
    ({"checked_step": lambda self, s, a: self.step(s, a)}, "checked_step accepted illegal action"),
    ({"name": ""}, "`name` must be a non-empty str"),
]


@pytest.mark.parametrize(
    ("methods", "message"), BROKEN, ids=[m.replace("\\", "") for _, m in BROKEN]
)
def test_check_game_names_the_rule_a_game_breaks(methods, message):
    """Each variant breaks one rule of Tic-Tac-Toe, which passes (`test_check_game`)."""
    with pytest.raises(AssertionError, match=f"^(tictactoe|Broken): {message}"):
        check_game(type("Broken", (TicTacToe,), methods)(), num_games=2)


def test_parsed_moves_stay_on_the_board():
    unbounded = type("Unbounded", (TicTacToe,), {"_parse": lambda self, text: int(text) - 1})
    with pytest.raises(IllegalMoveError, match=r"^'12' is off the board in tictactoe"):
        unbounded().parse_action("12")
