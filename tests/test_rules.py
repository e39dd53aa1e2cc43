"""Every shipped game's rules, ply by ply against an independent implementation with OpenSpiel's
state interface: OpenSpiel's where it has the game, else one written from the rules in the
game's test module (Othello 6x6, Chain Reaction); and perft counts."""

from __future__ import annotations

import re
from functools import partial

import jax
import numpy as np
import pyspiel
import pytest
from helpers import index, perft, random_trajectories
from test_chain_reaction import Reference as ChainReference
from test_chain_reaction import critical_mass
from test_othello import Reference as OthelloReference

import games

ROW = r"(\d )?([xo.-] ?)+( \d)?"  # a printed row of cells (Othello's numbered)


def printed(state) -> np.ndarray:
    """OpenSpiel's printed board: its rows of x (player 0), o and empty cells, top first."""
    rows = [line for line in str(state).splitlines() if re.fullmatch(ROW, line.strip())]
    return np.array([[{"x": 1, "o": -1}.get(c, 0) for c in re.findall("[xo.-]", r)] for r in rows])


def lattice(state) -> np.ndarray:
    """Dots and Boxes' lattice (1 on drawn lines, +1 / -1 on the boxes each player owns) from
    OpenSpiel's observation tensor [cell state (empty, player 0, player 1), dot row, dot column,
    part (line right of the dot, line below it, box below right)]."""
    params = state.get_game().get_parameters()
    rows, cols = params["num_rows"], params["num_cols"]
    tensor = np.asarray(state.observation_tensor(0)).reshape(3, rows + 1, cols + 1, 3)
    who = tensor.argmax(axis=0)  # 0 empty, 1 player 0, 2 player 1
    out = np.zeros((2 * rows + 1, 2 * cols + 1), int)
    out[0::2, 1::2] = who[:, :cols, 0] > 0
    out[1::2, 0::2] = who[:rows, :, 1] > 0
    out[1::2, 1::2] = np.select([who[:rows, :cols, 2] == 1, who[:rows, :cols, 2] == 2], [1, -1])
    return out


def pieces(board: np.ndarray, sign: int) -> np.ndarray:
    """Observation: the mover's pieces, the opponent's."""
    return np.stack([board == sign, board == -sign], axis=-1)


def orbs(board: np.ndarray, sign: int) -> np.ndarray:
    """Observation: the mover's cells with 1, 2, 3 orbs, the opponent's, the mover's cells one
    orb short of critical mass, the opponent's."""
    own, short = board * sign, critical_mass(*board.shape) - 1
    counts = [own == k for k in (1, 2, 3)] + [own == -k for k in (1, 2, 3)]
    return np.stack([*counts, own == short, own == -short], axis=-1)


def boxes(board: np.ndarray, sign: int) -> np.ndarray:
    """Observation on the lattice: drawn lines, open lines, the mover's boxes, the opponent's,
    each box's drawn sides / 4, and the box margin (mover's minus opponent's) / boxes."""
    height, width = board.shape
    is_line = np.add.outer(np.arange(height), np.arange(width)) % 2 == 1
    is_box = np.zeros_like(is_line)
    is_box[1::2, 1::2] = True
    drawn = is_line & (board == 1)
    padded = np.pad(drawn, 1).astype(int)
    sides = padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:]
    margin = np.full(board.shape, sign * board[is_box].sum() / is_box.sum())
    owned = [is_box & (board == sign), is_box & (board == -sign)]
    return np.stack([drawn, is_line & ~drawn, *owned, np.where(is_box, sides / 4, 0), margin], -1)


def spiel(name: str):
    return pyspiel.load_game(name).new_initial_state


def written(ref) -> np.ndarray:
    """The board of a reference written here."""
    return ref.board()


DOTS = "dots_and_boxes(num_rows={},num_cols={})"
CASES = [  # game, its sizes, a new reference state, its board, the expected observation
    ("tictactoe", {}, spiel("tic_tac_toe"), printed, pieces),
    ("connect4", {}, spiel("connect_four"), printed, pieces),
    ("othello", {}, spiel("othello"), printed, pieces),
    ("othello", {"size": 6}, partial(OthelloReference, 6), written, pieces),
    *[
        ("dots_and_boxes", {"rows": r, "cols": c}, spiel(DOTS.format(r, c)), lattice, boxes)
        for r, c in [(1, 1), (2, 3), (3, 2), (3, 3)]
    ],
    *[
        ("chain_reaction", {"rows": r, "cols": c}, partial(ChainReference, r, c), written, orbs)
        for r, c in [(2, 2), (3, 3), (3, 4), (5, 5)]
    ],
]
BATCH = 96  # over 64: Chain Reaction's batched steps compact (games/chain_reaction.py)


def same(ours, theirs, where: str) -> None:
    if not np.array_equal(ours, theirs):  # numpy's message names the cells that differ
        np.testing.assert_array_equal(ours, theirs, err_msg=where)


@pytest.mark.parametrize(
    ("name", "kwargs", "reference", "board", "planes"),
    CASES,
    ids=[name + "".join(f"-{v}" for v in kw.values()) for name, kw, *_ in CASES],
)
def test_random_games_match_the_reference(name, kwargs, reference, board, planes):
    """At every ply of random games: the board, the observation (from the board), the player to
    move, the legal moves, the end and the returns; every move is played in some game."""
    game = games.make(name, **kwargs)
    length = game.max_game_length
    actions, states = random_trajectories(game, jax.random.key(0), BATCH, length)
    views = jax.jit(jax.vmap(jax.vmap(lambda s: (game.board(s), game.observe(s)))))(states)
    actions, states, (boards, obs) = jax.device_get((actions, states, views))
    played = set()
    for b in range(BATCH):
        ref, returns = reference(), np.zeros(2)
        for t in range(length + 1):
            ours, where = index(states, t, b), f"game {b} after {actions[:t, b].tolist()}"
            returns += ours.rewards
            same(boards[t, b], board(ref), where)
            expected = planes(board(ref), 1 - 2 * int(ours.current_player))
            if not np.allclose(obs[t, b], expected, rtol=0, atol=1e-6):
                np.testing.assert_allclose(obs[t, b], expected, atol=1e-6, err_msg=where)
            assert bool(ours.terminated) == ref.is_terminal(), where
            if ref.is_terminal():
                same(returns, ref.returns(), where)
                break
            assert int(ours.current_player) == ref.current_player() and t < length, where
            mask = np.zeros(game.num_actions, bool)
            mask[ref.legal_actions()] = True
            same(ours.legal_action_mask, mask, where)
            played.add(int(actions[t, b]))
            ref.apply_action(int(actions[t, b]))
    # Every move was played in some game: Othello's pass too, though not its first discs' cells.
    first = np.flatnonzero(boards[0, 0]) if name == "othello" else np.array([], int)
    assert played == set(range(game.num_actions)) - set(first.tolist())


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("tictactoe", [9, 72, 504, 3024, 15120, 54720, 148176, 200448, 127872]),  # every game
        ("connect4", [7, 49, 343, 2401, 16807, 117649, 823536]),  # 7**7 - 7: full columns
        ("othello", [4, 12, 56, 244, 1396, 8200, 55092]),
    ],
)
def test_perft_matches_published_counts(name, counts):
    assert perft(games.make(name), len(counts), chunk=4096) == counts
