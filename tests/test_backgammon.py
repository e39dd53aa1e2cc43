"""pgx's Backgammon and Hex for people (games/pgx_games.py, games/backgammon.py): Backgammon's
whole turns against an independent move generator and its features against pgx's board, both
games' notation and text boards."""

from __future__ import annotations

import functools
import re

import jax
import numpy as np
import pytest
from helpers import index, random_trajectories

pytest.importorskip("pgx")

import games

pytestmark = pytest.mark.xdist_group("pgx")

BACKGAMMON, HEX = "pgx:backgammon", "pgx:hex"


@functools.cache
def positions(name: str) -> tuple:
    """The game, and the live States along 48 random games (flat) of at most a game's moves."""
    game = games.make(name)
    length = {BACKGAMMON: 640, HEX: game.max_game_length}[name]
    _, states = random_trajectories(game, jax.random.key(5), 48, length)
    flat = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:]), states)
    return game, index(flat, np.flatnonzero(~flat.terminated))


# ----------------------------------------------------------------------------- the rules
# A position here is (points, bar, off, hit, borne): points[n] the checkers on the mover's
# point n (1-24; positive the mover's, negative the opponent's), the mover's checkers on the
# bar and borne off, the opponent's on its bar and borne off.


def single_moves(pos: tuple, die: int) -> list[tuple]:
    """The positions one die makes, by the rules: enter from the bar first, land on a point the
    opponent holds with at most one checker (hitting it), bear off once all fifteen are home
    (1-6), with a larger die only from the highest point held."""
    points, bar, off, hit, borne = pos

    def land(points: list, to: int) -> tuple:
        hits = points[to] == -1
        points[to] = 1 if hits else points[to] + 1
        return tuple(points), hits

    if bar:
        if points[25 - die] < -1:
            return []
        after, hits = land(list(points), 25 - die)
        return [(after, bar - 1, off, hit + hits, borne)]
    home = all(n <= 0 for n in points[7:25])
    out = []
    for p in range(1, 25):
        if points[p] <= 0:
            continue
        left = list(points)
        left[p] -= 1
        if p - die >= 1 and points[p - die] >= -1:
            after, hits = land(left, p - die)
            out.append((after, bar, off, hit + hits, borne))
        elif p - die < 1 and home and (p == die or all(n <= 0 for n in points[p + 1 : 25])):
            out.append((tuple(left), bar, off + 1, hit, borne))
    return out


def rule_turns(pos: tuple, dice: tuple[int, int]) -> set[tuple]:
    """The positions a whole turn can end in: as many dice played as can be; where one die of
    two can be, the larger if it can."""
    frontier = {(pos, tuple(sorted(dice * 2 if dice[0] == dice[1] else dice)))}
    ends = set()
    while frontier:
        after = set()
        for p, left in frontier:
            children = [
                (q, left[:i] + left[i + 1 :])
                for i, die in enumerate(left)
                if die not in left[:i] and p[2] < 15
                for q in single_moves(p, die)
            ]
            after.update(children) if children else ends.add((p, left))
        frontier = after
    fewest = min(len(left) for _, left in ends)
    ends = {(p, left) for p, left in ends if len(left) == fewest}
    if dice[0] != dice[1] and fewest == 1 and (small := (min(dice),)) in {left for _, left in ends}:
        ends = {(p, left) for p, left in ends if left == small}
    return {p for p, _ in ends}


def from_pgx(board: np.ndarray) -> tuple:
    """pgx's mover's-view board as a position here."""
    points = (0, *(int(board[24 - n]) for n in range(1, 25)))
    return points, int(board[24]), int(board[26]), -int(board[25]), -int(board[27])


def unflip(board: np.ndarray) -> np.ndarray:
    """pgx's board turned back to the previous mover's view (pgx turns it at a turn's end)."""
    return -np.concatenate([board[23::-1], board[25:23:-1], board[27:25:-1]])


@functools.cache
def _afterstates(game):
    return jax.jit(jax.vmap(game.afterstate))


def game_turns(game, starts, chunk: int = 2048) -> list[set]:
    """The positions each turn of `starts` can end in by the game's legal moves, one move (one
    die) after another, to the turn's end; all the turns' moves batched, in chunks of one
    shape (one program to compile)."""
    ends = [set() for _ in range(len(starts.terminated))]
    frontier, owner = starts, np.arange(len(ends))
    while len(owner):
        rows, actions = np.nonzero(np.asarray(frontier.legal_action_mask))
        parts = [
            jax.device_get(
                _afterstates(game)(
                    index(frontier, np.resize(rows[i : i + chunk], chunk)),
                    np.resize(actions[i : i + chunk], chunk).astype(np.int32),
                )
            )
            for i in range(0, len(rows), chunk)
        ]
        after = index(jax.tree.map(lambda *x: np.concatenate(x), *parts), slice(len(rows)))
        board, due, dice = after.env._board, after.chance_due, after.env._playable_dice
        seen, keep = set(), []
        for i, row in enumerate(rows):
            if due[i] or after.terminated[i]:
                ends[owner[row]].add(from_pgx(unflip(board[i]) if due[i] else board[i]))
            elif (key := (owner[row], board[i].tobytes(), dice[i].tobytes())) not in seen:
                seen.add(key)
                keep.append(i)
        frontier, owner = index(after, np.array(keep, int)), owner[rows[keep]]
    return ends


def test_whole_turns_match_an_independent_generator():
    """At 1,000 turns' starts of random games, half of them in the race home (where pgx's own
    moves went wrong in 2% of turns), the positions a turn can end in by the game's moves are
    those the standard rules allow (`rule_turns`): every die that can be played is, and of two
    dice of which only one can be, the larger where it can."""
    game, states = positions(BACKGAMMON)
    env, rng = states.env, np.random.default_rng(0)
    start = (env._played_dice_num == 0) & (env._step_count < game.max_game_length - 8)
    late = (env._board[:, :18] > 0).sum(1) + env._board[:, 24] <= 2  # checkers not yet home
    picks = [
        rng.choice(np.flatnonzero(start & phase), 500, replace=False) for phase in (late, ~late)
    ]
    starts = index(states, np.concatenate(picks))
    got = game_turns(game, starts)
    dice = starts.env._dice + 1
    wrong = [
        i
        for i, board in enumerate(starts.env._board)
        if got[i] != rule_turns(from_pgx(board), tuple(int(d) for d in dice[i]))
    ]
    assert not wrong, f"{len(wrong)} of 1000 turns differ, e.g. {starts.env._board[wrong[:3]]}"


# ----------------------------------------------------------------------------- people


def test_features_hold_the_whole_board_and_the_dice():
    """Backgammon's observation (TD-Gammon's units) decodes to pgx's board: per point a side's
    checkers are its three units plus twice the fourth; bar and off are scaled counts."""
    game, states = positions(BACKGAMMON)
    obs = np.asarray(jax.jit(jax.vmap(game.observe))(states)).reshape(len(states.terminated), -1)
    board = np.asarray(states.env._board)
    units = obs[:, :192].reshape(-1, 2, 24, 4)
    counts = units[..., :3].sum(-1) + 2 * units[..., 3]
    np.testing.assert_allclose(counts[:, 0] - counts[:, 1], board[:, :24], atol=1e-5)
    assert ((units[..., :3] == 0) | (units[..., :3] == 1)).all()
    scaled = obs[:, 192:196] * np.array([2, -2, 15, -15])
    np.testing.assert_allclose(scaled, board[:, 24:], atol=1e-5)
    np.testing.assert_array_equal(obs[:, 196:], np.asarray(states.env.observation)[:, 28:])
    assert game.observation_shape == (1, 1, 202) and obs[:, 196:].sum(-1).max() > 0


@pytest.mark.parametrize("name", [BACKGAMMON, HEX])
def test_notation_round_trips(name):
    """Every action has its own name, and every legal one of 200 random positions is read back
    as itself in its position; Backgammon's bearing off named without its die (4/off) is a
    legal bearing off from that point."""
    game, states = positions(name)
    names = [game.format_action(a) for a in range(game.num_actions)]
    assert [game.parse_action(text) for text in names] == list(range(game.num_actions))
    assert not any(text.isdigit() for text in names)
    for i in np.random.default_rng(1).choice(len(states.terminated), 200, replace=False):
        state = index(states, i)
        for action in game.legal_actions(state):
            assert game.parse_action(names[action], state) == action
            if names[action].endswith(")") and "off" in names[action]:
                short = game.parse_action(names[action].split("(")[0], state)
                assert state.legal_action_mask[short] and short // 6 == action // 6


def read_board(text: str) -> np.ndarray:
    """Backgammon's text board read back as pgx's board (the mover's view)."""
    lines = text.splitlines()
    mover = re.match(r"\w+ \((.)\)", lines[0])[1]
    marks = {mover: 1, ({"X", "O"} - {mover}).pop(): -1}
    board = np.zeros(28, int)
    for rows, points in ((lines[2:7], range(13, 25)), (lines[12:7:-1], range(12, 0, -1))):
        for k, point in enumerate(points):
            at = 3 * k + 3 * (k >= 6)  # the bar's column after six points
            cells = [row.ljust(42)[at : at + 3].strip() for row in rows]
            count = [int(c) for c in cells if c.isdigit()] or [sum(c in marks for c in cells)]
            board[24 - point] = count[0] * marks.get(cells[0], 0)
    numbers = re.fullmatch(r"bar: . (\d+), . (\d+); off: . (\d+), . (\d+)", lines[-1]).groups()
    board[24:] = np.array([int(n) for n in numbers]) * [1, -1, 1, -1]
    return board


def test_text_boards():
    """Backgammon's board shows, from the mover's side, the 24 points (read back, they are the
    board), the bar and the checkers borne off, whose turn by colour and the dice to play; Hex's
    shows the cells' names and its stones where they were played."""
    game, states = positions(BACKGAMMON)
    for i in np.random.default_rng(2).choice(len(states.terminated), 100, replace=False):
        state = index(states, i)
        text, env = game.render(state), state.env
        np.testing.assert_array_equal(read_board(text), env._board, err_msg=text)
        mover = int(env._turn)
        dice = sorted((int(d) + 1 for d in env._playable_dice if d >= 0), reverse=True)
        head = f"{game.players[mover]} ({game.marks[mover]}) to play {' '.join(map(str, dice))}"
        assert text.startswith(head), text
    start = game.render(game.init(jax.random.key(0)))
    assert start.startswith("Black (X) to play") and "points numbered for Black" in start
    assert game.colours[0] == "#1c1c1c" and game.players == ("Black", "White")
    hex_game = games.make(HEX)
    state = hex_game.init(jax.random.key(0))
    for move in ("c5", "k11"):
        state = hex_game.step(state, hex_game.parse_action(move, state))
    lines = hex_game.render(state).splitlines()
    assert lines[0].startswith("Black (X) to play") and lines[1].split() == list("abcdefghijk")
    assert [line.split()[0] for line in lines[2:]] == [str(r) for r in range(1, 12)]
    assert lines[6].split()[1:12][2] == "X" and lines[12].split()[1:12][10] == "O"
    assert sum(line.count("X") for line in lines[2:]) == 1
