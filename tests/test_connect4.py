"""Connect Four against OpenSpiel (random games, perft) and a plain-Python line check."""

from __future__ import annotations

import re

import jax
import numpy as np
import pyspiel
import pytest
from helpers import (
    compare_with_openspiel,
    heuristics,
    index,
    live_positions,
    openspiel_perft,
    perft,
    random_trajectories,
)

import games

ROWS, COLS = 6, 7


def _lines() -> list[list[tuple[int, int]]]:
    """All 69 lines of four cells, written out independently of games/connect4.py."""
    lines = []
    for r in range(ROWS):
        for c in range(COLS):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + i * dr, c + i * dc) for i in range(4)]
                if all(0 <= rr < ROWS and 0 <= cc < COLS for rr, cc in cells):
                    lines.append(cells)
    return lines


LINES = _lines()


def _spiel_board(ref) -> np.ndarray:
    """OpenSpiel's printed board (x = player 0, top row first) as a signed array."""
    rows = [row for row in str(ref).strip().splitlines() if row]
    assert len(rows) == ROWS, str(ref)
    return np.array([[{"x": 1, "o": -1, ".": 0}[ch] for ch in row] for row in rows])


@pytest.fixture(scope="module")
def game():
    return games.make("connect4")


@pytest.fixture(scope="module")
def spiel():
    return pyspiel.load_game("connect_four")


def test_random_games_match_openspiel(game, spiel):
    compared = compare_with_openspiel(game, spiel, batch=500, length=42, seed=3)
    assert compared > 500 * 7


def test_boards_and_observations_match_openspiel(game, spiel):
    """Our board and observation planes against OpenSpiel's printed board, every ply."""
    batch = 200
    actions, states = random_trajectories(game, jax.random.key(11), batch, 42)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    obs = np.asarray(jax.jit(jax.vmap(jax.vmap(game.observe)))(states))
    for b in range(batch):
        ref = spiel.new_initial_state()
        for t in range(43):
            state = index(states, t, b)
            board = _spiel_board(ref)
            np.testing.assert_array_equal(game.board(state), board, err_msg=f"{b}, {t}")
            sign = 1 if int(state.current_player) == 0 else -1
            np.testing.assert_array_equal(obs[t, b, ..., 0], board == sign)
            np.testing.assert_array_equal(obs[t, b, ..., 1], board == -sign)
            if ref.is_terminal():
                break
            ref.apply_action(int(actions[t, b]))


def _win_along(line, winner: int, spiel, rng) -> list[int]:
    """OpenSpiel moves of a game that `winner` wins by completing `line` (and no other).

    Moves off the line avoid ending the game where they can, so high lines are reached too.
    """
    for _ in range(200):
        ref, heights = spiel.new_initial_state(), [0] * COLS
        while not ref.is_terminal():
            # The line's cells that a disc dropped now would fill.
            ready = [c for r, c in line if r == ROWS - 1 - heights[c]]
            others = [a for a in ref.legal_actions() if a not in ready]
            quiet = [a for a in others if not ref.child(a).is_terminal()]
            if ref.current_player() == winner and ready and rng.random() < 0.5:
                action = int(rng.choice(ready))
            else:
                action = int(rng.choice(quiet or others or ready))
            ref.apply_action(action)
            heights[action] += 1
        board = _spiel_board(ref)
        sign = 1 if winner == 0 else -1
        complete = [i for i, other in enumerate(LINES) if all(board[p] == sign for p in other)]
        if ref.returns()[winner] == 1 and complete == [LINES.index(line)]:
            return ref.history()
    raise AssertionError(f"no game found that completes {line}")


def test_every_line_wins_for_either_player(game, spiel):
    """For each of the 69 lines and each player, a game won by completing exactly that line."""
    rng = np.random.default_rng(0)
    histories = [_win_along(line, winner, spiel, rng) for line in LINES for winner in (0, 1)]
    padded = np.zeros((len(histories), 42), np.int32)  # moves after the end are no-ops
    for i, history in enumerate(histories):
        padded[i, : len(history)] = history

    @jax.jit
    def play(actions):
        def body(states, a):
            states = jax.vmap(game.step)(states, a)
            return states, (states.terminated, states.rewards)

        first = jax.vmap(game.init)(jax.random.split(jax.random.key(0), actions.shape[0]))
        return jax.lax.scan(body, first, actions.T)[1]

    terminated, rewards = map(np.asarray, play(padded))
    for i, history in enumerate(histories):
        winner = i % 2
        ply = len(history) - 1
        assert not terminated[:ply, i].any() and terminated[ply, i], history
        expected = [1.0, -1.0] if winner == 0 else [-1.0, 1.0]
        np.testing.assert_array_equal(rewards[ply, i], expected, err_msg=str(history))


def test_perft_matches_openspiel(game, spiel):
    # Depth 7 includes positions with a full column (823536 < 7**7).
    assert perft(game, 7) == openspiel_perft(spiel, 7)


def test_render_and_notation(game):
    state = game.init(jax.random.key(0))
    for text in ["4", "4", "5", " 3 ", "7"]:
        state = game.checked_step(state, game.parse_action(text, state))
    expected = [
        "1 2 3 4 5 6 7",
        *[". . . . . . ."] * 4,
        ". . . O . . .",
        ". . O X X . X",
    ]
    assert game.render(state) == "\n".join(expected)
    assert [game.format_action(a) for a in range(COLS)] == [str(c) for c in range(1, 8)]
    for bad in ["0", "8", "d", "4 4"]:
        with pytest.raises(games.IllegalMoveError, match="column number 1-7"):
            game.parse_action(bad)


def test_full_column_is_refused_with_the_legal_ones(game):
    state = game.init(jax.random.key(0))
    for _ in range(ROWS):
        state = game.checked_step(state, 2)
    assert game.legal_actions(state) == [0, 1, 3, 4, 5, 6]
    with pytest.raises(games.IllegalMoveError, match="Legal moves") as err:
        game.parse_action("3", state)
    listed = str(err.value).split("Legal moves:")[1]
    assert re.findall(r"\d+", listed) == ["1", "2", "4", "5", "6", "7"]


def test_symmetries_are_identity_and_mirror(game):
    names = [s.name for s in game.symmetries]
    assert names == ["identity", "flip_lr"]
    np.testing.assert_array_equal(game.symmetries[1].action_map, np.arange(COLS)[::-1])


def test_heuristic_counts_open_lines_and_the_centre(game):
    """The alpha-beta leaf value as its docstring defines it, over the lines written here: +1
    per line holding two of a player's discs and none of the other's, +4 per such line with
    three, the opponent's subtracted, and the centre column's discs."""
    states = live_positions(game, jax.random.key(5), 32, 42)
    boards = np.asarray(jax.vmap(game.board)(states))
    values = heuristics(game, states)
    assert len(boards) > 500  # about 20 positions a game
    weight = {2: 1, 3: 4}
    for board, value in zip(boards, values, strict=True):
        for player, sign in enumerate((1, -1)):
            expected = (board[:, COLS // 2] == sign).sum() - (board[:, COLS // 2] == -sign).sum()
            for line in LINES:
                own = sum(board[cell] == sign for cell in line)
                other = sum(board[cell] == -sign for cell in line)
                expected += weight.get(own, 0) * (other == 0) - weight.get(other, 0) * (own == 0)
            assert value[player] == expected, (board, player)


def test_move_order_tries_the_centre_first(game):
    assert game.move_order().tolist() == [3, 2, 4, 1, 5, 0, 6]
