"""The game contract (games/core.py), checked by `games.testing.check_game` for every game and
size in GAME_CONFIGS, plus what only the shipped games promise."""

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
    name, kwargs = config
    game = games.make(name, **kwargs)
    check_game(game, num_games=16, key=jax.random.key(1))
    assert len(game.symmetries) >= 2  # every shipped board has a symmetry to augment with


@pytest.mark.parametrize("config", GAME_CONFIGS, ids=config_id)
def test_parse_refuses_illegal_moves_listing_legal_ones(config):
    name, kwargs = config
    game = games.make(name, **kwargs)
    state = game.init(jax.random.key(0))
    state = game.step(state, game.legal_actions(state)[0])
    mask = np.asarray(state.legal_action_mask)
    legal, illegal = np.flatnonzero(mask), np.flatnonzero(~mask)
    if len(illegal):
        with pytest.raises(games.IllegalMoveError, match="Legal moves") as err:
            game.parse_action(game.format_action(int(illegal[0])), state)
        assert game.format_action(int(legal[0])) in str(err.value)


def test_make_is_cached_and_refuses_unknown_names():
    assert games.make("tictactoe") is games.make("tictactoe")
    assert games.make("othello") is games.make("othello", size=8)
    assert games.make("chain_reaction", rows=5) is games.make("chain_reaction", cols=5)
    with pytest.raises(ValueError, match="bad arguments for game 'othello'"):
        games.make("othello", rows=3)
    with pytest.raises(ValueError, match="unknown game 'chess'"):
        games.make("chess")


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
    """Each named map sends cell (r, c)'s contents where its name says (the rotations by
    their composition), and the maps of a grid are distinct: a duplicate would augment with
    one symmetry twice and another never."""
    cells = np.arange(height * width).reshape(height, width)
    maps = {s.name: s.cell_source for s in core.grid_symmetries(cells, height * width)}
    source = {  # the cell whose contents land on (r, c)
        "identity": lambda r, c: (r, c),
        "flip_lr": lambda r, c: (r, width - 1 - c),
        "flip_ud": lambda r, c: (height - 1 - r, c),
        "rot180": lambda r, c: (height - 1 - r, width - 1 - c),
        "transpose": lambda r, c: (c, r),
        "anti_transpose": lambda r, c: (width - 1 - c, height - 1 - r),
    }
    assert len(maps) == (8 if height == width else 4)
    assert len({m.tobytes() for m in maps.values()}) == len(maps)
    for name, where in source.items():
        if name in maps:
            expected = [where(r, c) for r in range(height) for c in range(width)]
            assert maps[name].tolist() == [r * width + c for r, c in expected], name
    if height == width:
        rot90, rot270 = maps["rot90"], maps["rot270"]
        np.testing.assert_array_equal(rot90[rot90], maps["rot180"])
        np.testing.assert_array_equal(rot90[rot270], maps["identity"])
        assert not np.array_equal(rot90, rot270)


def test_a_move_after_the_end_is_refused_as_the_game_being_over():
    game = games.make("tictactoe")
    state = game.init(jax.random.key(0))
    for action in (0, 3, 1, 4, 2):  # X takes the top row
        state = game.checked_step(state, action)
    assert bool(state.terminated)
    for refuse in (lambda: game.checked_step(state, 8), lambda: game.parse_action("9", state)):
        with pytest.raises(games.IllegalMoveError, match="the tictactoe game is over"):
            refuse()


# ----------------------------------------------------------------------------- check_game


class _Broken(TicTacToe):
    """Tic-Tac-Toe with one rule of the contract broken by `_breaks`, named by check_game."""

    def _apply(self, state, action):
        return self._breaks(state, super()._apply(state, action))

    def _breaks(self, state, after):
        return after


class _NotZeroSum(_Broken):
    def _breaks(self, state, after):
        return after.replace(rewards=jnp.maximum(after.rewards, 0.0))  # the loser gets 0


class _EarlyReward(_Broken):
    def _breaks(self, state, after):
        mid = mover_rewards(state.current_player, 1.0)
        return after.replace(rewards=jnp.where(after.terminated, after.rewards, mid))


class _HalfWin(_Broken):
    def _breaks(self, state, after):
        return after.replace(rewards=after.rewards / 2)


class _Stuck(_Broken):
    def _breaks(self, state, after):  # no legal move after the fourth, but not over
        stuck = jnp.sum(after.board != 0) == 4
        return after.replace(legal_action_mask=after.legal_action_mask & ~stuck)


class _TooShort(TicTacToe):
    def __init__(self) -> None:
        super().__init__()
        self.max_game_length = 5


class _SecondFirst(TicTacToe):
    def init(self, key):
        return super().init(key).replace(current_player=jnp.int32(1))


class _IntegerHeuristic(TicTacToe):
    def heuristic(self, state, player):
        return jnp.int32(0)


class _FloatBoard(TicTacToe):
    def board(self, state):
        return super().board(state).astype(jnp.float32)


@struct.dataclass
class _KeyedState(tictactoe.State):
    rng: jax.Array


class _TypedKey(TicTacToe):
    """Keeps a typed PRNG key in its State, which the search tree cannot store as bytes."""

    def init(self, key):
        fields = dataclasses.asdict(super().init(key))
        return _KeyedState(**fields, rng=key)


class _NoText(TicTacToe):
    def render(self, state):
        return None


class _MirroredActions(TicTacToe):
    @property
    def symmetries(self):
        identity, turn, *rest = super().symmetries  # the turn's actions left unturned
        return (identity, dataclasses.replace(turn, action_source=np.arange(9)), *rest)


class _Backwards(TicTacToe):
    def format_action(self, action):
        return str(9 - self._action_index(action))


class _AnyNumber(TicTacToe):
    def format_action(self, action):
        return str(int(action) + 1)  # -1 and 9 get a name too


class _QuietParse(TicTacToe):
    def _parse(self, text):
        return int(text) - 1 if text.isdigit() else 0  # malformed text is the first cell


class _AnyMoveParsed(TicTacToe):
    def parse_action(self, text, state=None):
        return super().parse_action(text)  # the state's legal moves never asked


class _UncheckedStep(TicTacToe):
    def checked_step(self, state, action):
        return self.step(state, action)


BROKEN = [
    (_NotZeroSum, "rewards are not zero-sum"),
    (_EarlyReward, "rewards must be zero except on the move that ends the game"),
    (_HalfWin, r"final rewards must be \+1, -1 or 0"),
    (_Stuck, "a live state must have a legal action"),
    (_TooShort, "a random game lasted longer than max_game_length=5 moves"),
    (_SecondFirst, "player 0 must move first"),
    (_IntegerHeuristic, r"heuristic\(state, player\) must be a float32 scalar, got int32"),
    (_FloatBoard, "board must be an integer array"),
    (_TypedKey, r"State.rng must hold bools, integers or floats of at most 4 bytes.*key<fry>"),
    (_NoText, r"render\(state\) must return a str"),
    (_MirroredActions, "symmetry rot90 does not commute with step"),
    (_Backwards, r"parse_action\(format_action\(0\)\) gave 8"),
    (_AnyNumber, r"format_action\(-1\) must refuse it"),
    (_QuietParse, r"parse_action\(''\) must raise IllegalMoveError"),
    (_AnyMoveParsed, r"parse_action accepted illegal move '\d'"),
    (_UncheckedStep, "checked_step accepted illegal action"),
]


@pytest.mark.parametrize(("cls", "message"), BROKEN, ids=[c.__name__[1:] for c, _ in BROKEN])
def test_check_game_names_the_rule_a_game_breaks(cls, message):
    """Each variant breaks one rule of Tic-Tac-Toe, which passes (`test_check_game`)."""
    with pytest.raises(AssertionError, match=f"^tictactoe: {message}"):
        check_game(cls(), num_games=2)


def test_a_game_needs_a_name_and_its_parsed_moves_stay_on_the_board():
    nameless = type("Nameless", (TicTacToe,), {"name": ""})
    with pytest.raises(AssertionError, match=r"^Nameless: `name` must be a non-empty str"):
        check_game(nameless(), num_games=2)
    unbounded = type("Unbounded", (TicTacToe,), {"_parse": lambda self, text: int(text) - 1})
    with pytest.raises(IllegalMoveError, match=r"^'12' is off the board in tictactoe"):
        unbounded().parse_action("12")
