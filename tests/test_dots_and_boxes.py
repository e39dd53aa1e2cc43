"""Dots and Boxes: hand-made games in lockstep with OpenSpiel (tests/test_rules.py plays random
ones), and the rendering, notation and heuristic checked from the rules."""

from __future__ import annotations

import re

import jax
import numpy as np
import pyspiel
import pytest
from helpers import heuristics, live_positions

import games

# On 2x2 boxes (h lines 0-5, v lines 6-11): draw the border and the middle vertical line
# except the top right and bottom right edges, no box closing; player 0 then takes the left
# column with h(1,0) (two boxes at once), must open the right column with h(0,1), and player 1
# takes its two boxes one after the other: 2-2.
DRAWN_2X2 = [0, 4, 6, 7, 8, 9, 10, 11, 2, 1, 3, 5]


def spiel_state(rows: int, cols: int):
    return pyspiel.load_game(f"dots_and_boxes(num_rows={rows},num_cols={cols})").new_initial_state()


@pytest.mark.parametrize(
    ("rows", "cols", "moves", "movers", "scores"),
    [
        (2, 2, DRAWN_2X2, [0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1], [2, 2]),
        # 1x2 boxes (h lines 0-3, v lines 4-6): player 0 closes the left box and must then
        # give the right one away.
        (1, 2, [5, 1, 0, 2, 4, 3, 6], [0, 1, 0, 1, 0, 0, 1], [1, 1]),
        # Player 1 closes the left box with the middle line, which gives the right box three
        # sides, and closes that one too.
        (1, 2, [0, 2, 1, 6, 4, 5, 3], [0, 1, 0, 1, 0, 1, 1], [0, 2]),
    ],
)
def test_closing_a_box_keeps_the_turn_and_the_most_boxes_win(rows, cols, moves, movers, scores):
    game = games.make("dots_and_boxes", rows=rows, cols=cols)
    ref, state = spiel_state(rows, cols), game.init(jax.random.key(0))
    for action, mover in zip(moves, movers, strict=True):
        assert int(state.current_player) == mover == ref.current_player()
        assert not bool(state.terminated) and not state.rewards.any()
        state = game.checked_step(state, action)
        ref.apply_action(action)
    assert bool(state.terminated) and ref.is_terminal()
    assert not state.legal_action_mask.any()
    assert game.counts(np.asarray(game.board(state))) == tuple(scores)
    margin = np.sign(scores[0] - scores[1])
    np.testing.assert_array_equal(state.rewards, [margin, -margin])
    assert ref.returns() == [margin, -margin]


def test_render_shows_lines_owners_and_score():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    state = game.init(jax.random.key(0))
    for action in DRAWN_2X2[:9]:
        state = game.checked_step(state, action)
    assert game.render(state).splitlines() == [
        "  1   2   3",
        "1 +---+   +",
        "  | X |   |",
        "2 +---+   +",
        "  | X |   |",
        "3 +---+   +",
        "X 2  O 0  (X to move)",
    ]


@pytest.mark.parametrize(("rows", "cols"), [(2, 3), (3, 3)])
def test_notation_names_the_same_lines_as_openspiel(rows, cols):
    game = games.make("dots_and_boxes", rows=rows, cols=cols)
    state = spiel_state(rows, cols)
    for action in range(game.num_actions):
        spiel_name = state.action_to_string(0, action)
        kind, r, c = re.fullmatch(r"P1\(([hv]),(\d+),(\d+)\)", spiel_name).groups()
        assert game.format_action(action) == f"{kind} {int(r) + 1} {int(c) + 1}"
        assert game.parse_action(f" {kind.upper()}{int(r) + 1}, {int(c) + 1} ") == action


def test_bad_moves_and_sizes_are_refused():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    for bad in ["h 0 1", "h 4 1", "h 1 3", "v 3 1", "v 1 4", "d 1 1", "h 1", "h 1 1 1"]:
        with pytest.raises(games.IllegalMoveError, match="is not a move"):
            game.parse_action(bad)
    state = game.checked_step(game.init(jax.random.key(0)), 0)
    with pytest.raises(games.IllegalMoveError, match="Legal moves: h 1 2; h 2 1"):
        game.parse_action("h 1 1", state)
    assert game.parse_action("v 2 3", state) == 11
    for kwargs, message in [
        ({"rows": 0}, "rows=0"),
        ({"cols": 11}, "cols=11"),
        ({"rows": 2.5}, "rows must be an integer, got 2.5"),
        ({"cols": True}, "cols must be an integer, got True"),
        ({"size": 3}, "bad arguments"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            games.make("dots_and_boxes", **kwargs)


def test_heuristic_is_the_box_margin_and_the_boxes_the_mover_can_take():
    """Box difference, plus each open box with three sides drawn for the player to move (minus
    for the other), read off the lattice; `counts` the boxes each player owns."""
    game = games.make("dots_and_boxes", rows=3, cols=2)
    states = live_positions(game, jax.random.key(4), 96, game.max_game_length)
    boards = np.asarray(jax.vmap(game.board)(states))  # [N, 7, 5]
    boxes = boards[:, 1::2, 1::2]
    sides = (
        boards[:, :-2:2, 1::2]
        + boards[:, 2::2, 1::2]
        + boards[:, 1::2, :-2:2]
        + boards[:, 1::2, 2::2]
    )
    takeable = ((sides == 3) & (boxes == 0)).sum((1, 2))
    owned = np.stack([(boxes == 1).sum((1, 2)), (boxes == -1).sum((1, 2))], -1)
    mover = np.asarray(states.current_player)
    for player in (0, 1):
        expected = (
            owned[:, player] - owned[:, 1 - player] + np.where(mover == player, 1, -1) * takeable
        )
        np.testing.assert_array_equal(heuristics(game, states)[:, player], expected)
    assert ((takeable > 0) & (owned.sum(-1) > 0)).sum() > 20
    for board, counts in zip(boards[::20], owned[::20], strict=True):
        assert game.counts(board) == tuple(counts)
