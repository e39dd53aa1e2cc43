"""Connect Four: games won along each of the 69 lines, built with OpenSpiel (tests/test_rules.py
plays random games in lockstep with it), and the heuristic, notation and rendering."""

from __future__ import annotations

import jax
import numpy as np
import pyspiel
import pytest
from helpers import heuristics, live_positions

import games

ROWS, COLS = 6, 7
# All 69 lines of four cells, written out independently of games/connect4.py.
LINES = [
    [(r + i * dr, c + i * dc) for i in range(4)]
    for r in range(ROWS)
    for c in range(COLS)
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1))
    if 0 <= r + 3 * dr < ROWS and 0 <= c + 3 * dc < COLS
]


@pytest.fixture(scope="module")
def game():
    return games.make("connect4")


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
        board = np.array(
            [[{"x": 1, "o": -1, ".": 0}[ch] for ch in row] for row in str(ref).split()]
        )
        sign = 1 if winner == 0 else -1
        complete = [i for i, other in enumerate(LINES) if all(board[p] == sign for p in other)]
        if ref.returns()[winner] == 1 and complete == [LINES.index(line)]:
            return ref.history()
    raise AssertionError(f"no game found that completes {line}")


def test_every_line_wins_for_either_player(game):
    """For each of the 69 lines and each player, a game won by completing exactly that line."""
    rng, spiel = np.random.default_rng(0), pyspiel.load_game("connect_four")
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


def test_render_notation_and_a_full_column(game):
    state = game.init(jax.random.key(0))
    for text in ["4", "4", "5", " 3 ", "7"]:
        state = game.checked_step(state, game.parse_action(text, state))
    rows = ["1 2 3 4 5 6 7", *[". . . . . . ."] * 4, ". . . O . . .", ". . O X X . X"]
    assert game.render(state) == "\n".join(rows)
    assert [game.format_action(a) for a in range(COLS)] == [str(c) for c in range(1, 8)]
    for bad in ["0", "8", "d", "4 4"]:
        with pytest.raises(games.IllegalMoveError, match="column number 1-7"):
            game.parse_action(bad)
    for _ in range(ROWS - 1):
        state = game.checked_step(state, 2)
    assert game.legal_actions(state) == [0, 1, 3, 4, 5, 6]
    with pytest.raises(games.IllegalMoveError, match="Legal moves: 1; 2; 4; 5; 6; 7"):
        game.parse_action("3", state)


def test_heuristic_counts_open_lines_and_the_centre(game):
    """The alpha-beta leaf value as its docstring defines it, over the lines written here: +1
    per line holding two of a player's discs and none of the other's, +4 per such line with
    three, the opponent's subtracted, and the centre column's discs; centre columns first."""
    states = live_positions(game, jax.random.key(5), 96, game.max_game_length)
    boards = np.asarray(jax.vmap(game.board)(states))
    cells = np.array(LINES)
    on_lines = boards[:, cells[..., 0], cells[..., 1]]  # [positions, 69 lines, 4 cells]
    weight = np.array([0, 0, 1, 4, 0])  # by the discs of one colour in an open line
    for player, sign in enumerate((1, -1)):
        own, other = (on_lines == sign).sum(-1), (on_lines == -sign).sum(-1)
        centre = (boards[:, :, COLS // 2] == sign).sum(-1) - (boards[:, :, COLS // 2] == -sign).sum(
            -1
        )
        lines = (weight[own] * (other == 0) - weight[other] * (own == 0)).sum(-1)
        np.testing.assert_array_equal(heuristics(game, states)[:, player], centre + lines)
    assert game.move_order().tolist() == [3, 2, 4, 1, 5, 0, 6]
