"""Dots and Boxes against OpenSpiel: random games step by step, box owners, a known drawn
game, and the observation, rendering and notation checked from the rules."""

from __future__ import annotations

import re

import jax
import numpy as np
import pyspiel
import pytest
from helpers import compare_with_openspiel, heuristics, index, live_positions, random_trajectories

import games

SIZES = [(1, 1), (2, 2), (3, 3), (2, 3), (3, 2)]

# On 2x2 boxes (h lines 0-5, v lines 6-11): draw the border and the middle vertical line
# except the top right and bottom right edges, no box closing; player 0 then takes the left
# column with h(1,0) (two boxes at once), must open the right column with h(0,1), and player 1
# takes its two boxes one after the other: 2-2.
DRAWN_2X2 = [0, 4, 6, 7, 8, 9, 10, 11, 2, 1, 3, 5]
DRAWN_2X2_MOVERS = [0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1]


def spiel_game(rows: int, cols: int, margin: bool = False):
    return pyspiel.load_game(
        f"dots_and_boxes(num_rows={rows},num_cols={cols},utility_margin={str(margin).lower()})"
    )


@pytest.mark.parametrize(("rows", "cols"), SIZES)
def test_random_games_match_openspiel(rows, cols):
    game = games.make("dots_and_boxes", rows=rows, cols=cols)
    batch = 300 if rows * cols <= 4 else 200
    compared = compare_with_openspiel(
        game, spiel_game(rows, cols), batch=batch, length=game.num_actions, seed=rows * 10 + cols
    )
    assert compared == batch * game.num_actions  # every game draws every line


def spiel_lattice(state, rows: int, cols: int) -> np.ndarray:
    """Our board() lattice rebuilt from OpenSpiel's observation tensor [3 cell states
    (empty, player 0, player 1), (rows + 1) * (cols + 1) dots, 3 parts (h line, v line, box)]."""
    tensor = np.asarray(state.observation_tensor(0)).reshape(3, rows + 1, cols + 1, 3)
    who = tensor.argmax(axis=0)  # 0 empty, 1 player 0, 2 player 1
    lattice = np.zeros((2 * rows + 1, 2 * cols + 1), np.int32)
    lattice[0::2, 1::2] = who[:, :cols, 0] > 0
    lattice[1::2, 0::2] = who[:rows, :, 1] > 0
    lattice[1::2, 1::2] = np.select([who[:rows, :cols, 2] == 1, who[:rows, :cols, 2] == 2], [1, -1])
    return lattice


@pytest.mark.parametrize(("rows", "cols"), [(2, 2), (2, 3), (3, 3)])
def test_lines_box_owners_and_score_margin_match_openspiel(rows, cols):
    game = games.make("dots_and_boxes", rows=rows, cols=cols)
    reference = spiel_game(rows, cols, margin=True)
    batch = 40
    actions, states = random_trajectories(game, jax.random.key(7), batch, game.num_actions)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    for b in range(batch):
        ref = reference.new_initial_state()
        for t in range(game.num_actions + 1):
            ours = index(states, t, b)
            np.testing.assert_array_equal(
                game.board(ours), spiel_lattice(ref, rows, cols), err_msg=f"{ref.history()}"
            )
            boxes = np.asarray(ours.boxes)
            np.testing.assert_array_equal(ours.scores, [(boxes > 0).sum(), (boxes < 0).sum()])
            if t < game.num_actions:
                ref.apply_action(int(actions[t, b]))
        assert ref.is_terminal()
        scores = np.asarray(index(states, -1, b).scores)
        assert ref.returns()[0] == scores[0] - scores[1]


def test_drawn_2x2_game_keeps_the_turn_on_boxes_and_ends_level():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    ref = spiel_game(2, 2).new_initial_state()
    state = game.init(jax.random.key(0))
    for action, mover in zip(DRAWN_2X2, DRAWN_2X2_MOVERS, strict=True):
        assert int(state.current_player) == mover == ref.current_player()
        assert not bool(state.terminated)
        state = game.checked_step(state, action)
        ref.apply_action(action)
    assert ref.is_terminal() and ref.returns() == [0.0, 0.0]
    assert bool(state.terminated)
    np.testing.assert_array_equal(state.rewards, [0.0, 0.0])
    np.testing.assert_array_equal(state.scores, [2, 2])
    # Player 0 owns the left column, player 1 the right one.
    np.testing.assert_array_equal(game.board(state)[1::2, 1::2], [[1, -1], [1, -1]])


def test_closing_a_box_keeps_the_turn_and_the_last_box_decides():
    game = games.make("dots_and_boxes", rows=1, cols=2)
    # 1x2 boxes: h lines 0-3 (top 0, 1; bottom 2, 3), v lines 4-6 (left, middle, right).
    # Player 0 closes the left box and must then give the right one away: 1-1.
    level = [(5, 1), (1, 0), (0, 1), (2, 0), (4, 0), (3, 1), (6, 1)]  # (action, next mover)
    # Player 1 closes the left box with the middle line, which gives the right box three
    # sides, and closes that one too: 0-2.
    lost = [(0, 1), (2, 0), (1, 1), (6, 0), (4, 1), (5, 1), (3, 1)]
    for moves, scores, returns in [(level, [1, 1], [0.0, 0.0]), (lost, [0, 2], [-1.0, 1.0])]:
        state = game.init(jax.random.key(0))
        ref = spiel_game(1, 2).new_initial_state()
        for action, after in moves:
            assert not bool(state.terminated)
            state = game.checked_step(state, action)
            ref.apply_action(action)
            if not ref.is_terminal():
                assert int(state.current_player) == after == ref.current_player()
                assert not state.rewards.any()
        assert bool(state.terminated) and ref.is_terminal()
        assert not state.legal_action_mask.any()
        np.testing.assert_array_equal(state.scores, scores)
        np.testing.assert_array_equal(state.rewards, returns)
        assert ref.returns() == returns


def test_observation_planes_from_the_movers_view():
    game = games.make("dots_and_boxes", rows=2, cols=3)
    _, states = random_trajectories(game, jax.random.key(3), 16, game.num_actions)
    obs = np.asarray(jax.jit(jax.vmap(jax.vmap(game.observe)))(states))
    states = jax.tree.map(np.asarray, states)
    height, width = 5, 7
    is_line = (np.add.outer(np.arange(height), np.arange(width)) % 2) == 1
    box_cell = np.zeros((height, width), bool)
    box_cell[1::2, 1::2] = True
    checked_both_movers = set()
    for t in range(game.num_actions + 1):
        for b in range(16):
            state = index(states, t, b)
            board = game.board(state)
            planes = obs[t, b]
            sign = 1 if int(state.current_player) == 0 else -1
            checked_both_movers.add(sign)
            drawn = is_line & (board == 1)
            np.testing.assert_array_equal(planes[..., 0], drawn)
            np.testing.assert_array_equal(planes[..., 1], is_line & ~drawn)
            np.testing.assert_array_equal(planes[..., 2], box_cell & (board == sign))
            np.testing.assert_array_equal(planes[..., 3], box_cell & (board == -sign))
            # Drawn sides of each box: its four lattice neighbours.
            padded = np.pad(drawn.astype(int), 1)
            sides = padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:]
            np.testing.assert_array_equal(planes[..., 4], np.where(box_cell, sides / 4, 0))
            margin = sign * (board[box_cell].sum()) / 6
            np.testing.assert_allclose(planes[..., 5], margin, atol=1e-6)
    assert checked_both_movers == {1, -1}


@pytest.mark.parametrize(("rows", "cols", "count"), [(3, 3, 8), (2, 3, 4), (1, 4, 4)])
def test_symmetries_map_lines_to_lines(rows, cols, count):
    game = games.make("dots_and_boxes", rows=rows, cols=cols)
    syms = game.symmetries
    assert len(syms) == count and syms[0].name == "identity"
    horizontal = np.arange(game.num_actions) < (rows + 1) * cols
    for sym in syms:
        turns = sym.name in ("rot90", "rot270", "transpose", "anti_transpose")
        # A quarter turn or transpose swaps horizontal and vertical lines; the rest keep them.
        np.testing.assert_array_equal(
            horizontal[sym.action_map], horizontal ^ turns, err_msg=sym.name
        )


def test_render_shows_lines_owners_and_score():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    state = game.init(jax.random.key(0))
    for action in DRAWN_2X2[:9]:
        state = game.checked_step(state, action)
    expected = "\n".join(
        [
            "  1   2   3",
            "1 +---+   +",
            "  | X |   |",
            "2 +---+   +",
            "  | X |   |",
            "3 +---+   +",
            "X 2  O 0  (X to move)",
        ]
    )
    assert game.render(state) == expected


def test_render_counts_match_random_positions():
    game = games.make("dots_and_boxes", rows=3, cols=2)
    _, states = random_trajectories(game, jax.random.key(5), 8, game.num_actions)
    states = jax.tree.map(np.asarray, states)
    for t in (0, 7, game.num_actions):
        for b in range(8):
            state = index(states, t, b)
            picture = game.render(state)
            grid = picture.splitlines()[1:-1]
            lines = np.asarray(state.lines)
            assert sum(row.count("---") for row in grid) == lines[: 4 * 2].sum()
            assert sum(row.count("|") for row in grid) == lines[4 * 2 :].sum()
            boxes = np.asarray(state.boxes)
            assert sum(row.count("X") for row in grid) == (boxes > 0).sum()
            assert sum(row.count("O") for row in grid) == (boxes < 0).sum()
            assert picture.splitlines()[-1].startswith(
                f"X {(boxes > 0).sum()}  O {(boxes < 0).sum()}"
            )


@pytest.mark.parametrize(("rows", "cols"), [(2, 3), (3, 3)])
def test_notation_names_the_same_lines_as_openspiel(rows, cols):
    game = games.make("dots_and_boxes", rows=rows, cols=cols)
    state = spiel_game(rows, cols).new_initial_state()
    for action in range(game.num_actions):
        spiel_name = state.action_to_string(0, action)
        kind, r, c = re.fullmatch(r"P1\(([hv]),(\d+),(\d+)\)", spiel_name).groups()
        assert game.format_action(action) == f"{kind} {int(r) + 1} {int(c) + 1}"
        assert game.parse_action(f" {kind.upper()}{int(r) + 1}, {int(c) + 1} ") == action


def test_notation_refuses_bad_and_illegal_moves():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    for bad in ["h 0 1", "h 4 1", "h 1 3", "v 3 1", "v 1 4", "d 1 1", "h 1", "h 1 1 1"]:
        with pytest.raises(games.IllegalMoveError, match="is not a move"):
            game.parse_action(bad)
    state = game.checked_step(game.init(jax.random.key(0)), 0)
    with pytest.raises(games.IllegalMoveError, match="Legal moves: h 1 2; h 2 1"):
        game.parse_action("h 1 1", state)
    assert game.parse_action("v 2 3", state) == 11


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": 0}, "rows=0"),
        ({"cols": 11}, "cols=11"),
        ({"rows": 2.5}, "rows must be an integer, got 2.5"),
        ({"cols": True}, "cols must be an integer, got True"),
        ({"size": 3}, "bad arguments"),
    ],
)
def test_bad_sizes_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        games.make("dots_and_boxes", **kwargs)


def test_heuristic_is_the_box_margin_and_the_boxes_the_mover_can_take():
    """Box difference, plus each open box with three sides drawn for the player to move (minus
    for the other), read off the lattice; `counts` the boxes each player owns."""
    game = games.make("dots_and_boxes", rows=3, cols=2)
    states = live_positions(game, jax.random.key(4), 24, game.num_actions)
    boards = np.asarray(jax.vmap(game.board)(states))
    values = heuristics(game, states)
    movers = np.asarray(states.current_player)
    boxes = [(2 * r + 1, 2 * c + 1) for r in range(game.rows) for c in range(game.cols)]
    takeable_seen = 0
    for board, value, mover in zip(boards, values, movers, strict=True):
        owned = [sum(board[b] == sign for b in boxes) for sign in (1, -1)]
        assert game.counts(board) == tuple(owned)
        sides = [
            board[r - 1, c] + board[r + 1, c] + board[r, c - 1] + board[r, c + 1] for r, c in boxes
        ]
        takeable = sum(n == 3 for n in sides)
        takeable_seen += takeable > 0 and owned != [0, 0]
        for player in (0, 1):
            margin = owned[player] - owned[1 - player]
            expected = margin + (takeable if player == mover else -takeable)
            assert value[player] == expected, (board, player, mover)
    assert takeable_seen > 20
