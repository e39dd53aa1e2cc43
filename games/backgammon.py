"""Backgammon on pgx's environment: the standard rules' move mask, the features, the notation,
the text board.

pgx's board is the mover's view: 28 counts, the mover's checkers positive on points 0-23 (they
run up to 23 and bear off beyond it), the opponent's negative, then the mover's bar, the
opponent's bar, the mover's off and the opponent's off (negative). A move (a "micro" action)
plays one die: action = 6 * source + die - 1, source 0 a pass, 1 the bar, 2 + i point i. People
number the points from the mover's side: pgx's point i is the mover's point 24 - i, 1-6 home.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from pgx import backgammon as bg

Array = jax.Array
_SOURCES = jnp.arange(26)  # pass, bar, points 0-23


def _die_moves(board: Array, die: Array) -> Array:
    """bool[26]: whether `die` (0-5) moves a checker from each source, as pgx rules it (its own
    test is 26 times slower: it finds the rearmost checker once per source)."""
    mine, bar = board[:24] > 0, board[24]
    distance = 24 - jnp.arange(24)  # to bearing off
    lands = (distance > die + 1) & (board[jnp.minimum(jnp.arange(24) + die + 1, 23)] >= -1)
    rear = jnp.max(jnp.where(mine, distance, 0))
    home = (bar == 0) & ~mine[:18].any()
    bears = home & ((distance == die + 1) | ((distance == rear) & (rear < die + 1)))
    enters = (bar > 0) & (board[die] >= -1)
    return jnp.concatenate([jnp.array([False]), enters[None], mine & (lands & (bar == 0) | bears)])


def _then(board: Array, die: Array, other: Array) -> Array:
    """bool[26]: whether die `other` has a move after `die`'s move from each source."""
    boards = jax.vmap(lambda source: bg._move(board, source * 6 + die))(_SOURCES)
    return jax.vmap(lambda after: _die_moves(after, other).any())(boards)


def standard_mask(env: Any) -> Array:
    """bool[156]: the legal moves of pgx state `env` by the standard rules, which pgx checks die
    by die: a turn uses as many dice as it can and, where only one die of two can be used, the
    larger one when it can. With two different dice to play, a move is legal if the other die
    can be played after it (when some move allows that), or if it plays the larger die (when
    none does and the larger has a move). Doubles need nothing more: a move never takes a move
    from another checker, so every turn pgx allows plays as many dice as can be. A pass is
    action 0 alone (pgx offers all six), legal when no checker moves."""
    board, dice = env._board, env._playable_dice
    a, b = jnp.maximum(dice[0], 0), jnp.maximum(dice[1], 0)
    two = (dice[0] >= 0) & (dice[1] >= 0) & (a != b)
    moves = jax.vmap(_die_moves, (None, 0))(board, jnp.maximum(dice, 0)) & (dice >= 0)[:, None]
    moves_a, moves_b = moves[0], moves[1]
    both_a, both_b = moves_a & _then(board, a, b), moves_b & _then(board, b, a)
    both = both_a.any() | both_b.any()
    # Where no move plays both dice: the larger die if it moves, else the other.
    use_a = moves_a.any() & ((a > b) | ~moves_b.any())
    first = jnp.stack(
        [jnp.where(both, both_a, moves_a & use_a), jnp.where(both, both_b, moves_b & ~use_a)]
    )
    moves = jnp.where(two, jnp.concatenate([first, jnp.zeros_like(moves[2:])]), moves)
    mask = jnp.zeros((26, 6), jnp.bool_).at[:, jnp.maximum(dice, 0)].max(moves.T).reshape(-1)
    return mask.at[0].set(~mask.any())


# ----------------------------------------------------------------------------- features

FEATURES = 2 * 24 * 4 + 4 + 6


def features(env: Any) -> Array:
    """TD-Gammon's encoding (Tesauro) of the board from the mover's view, float32[FEATURES]:
    per side and point whether it holds >= 1, >= 2, >= 3 checkers and half those past 3 (a blot
    and a made point are one unit each, where a count would leave the net to find them); each
    side's checkers on the bar (halved) and off (/ 15); pgx's playable dice (counts per face)."""
    board = env._board
    counts = jnp.stack([jnp.maximum(board[:24], 0), jnp.maximum(-board[:24], 0)])[..., None]
    units = [counts >= 1, counts >= 2, counts >= 3, jnp.maximum(counts - 3, 0) / 2]
    points = jnp.concatenate([u.astype(jnp.float32) for u in units], -1).reshape(-1)
    rest = jnp.stack([board[24] / 2, -board[25] / 2, board[26] / 15, -board[27] / 15])
    return jnp.concatenate([points, rest, env.observation[28:]]).astype(jnp.float32)


# ----------------------------------------------------------------------------- notation

HELP = (
    "A move plays one die, from a point to a point, numbered from your side (24 down to your "
    "home 1-6): 13/7, bar/22 (enter from the bar), 6/off (bear off; 4/off(6) bears off with "
    "the 6), or pass when no checker can move."
)
_MOVE = re.compile(r"(bar|\d+)/(off|\d+)\*?(?:\(([1-6])\))?")


def format_move(action: int) -> str:
    """The notation of an action: 13/7, bar/22, 6/off, 4/off(6), pass (pass(2)-pass(6): pgx's
    other passes)."""
    source, die = divmod(action, 6)
    die += 1
    if source == 0:
        return "pass" if die == 1 else f"pass({die})"
    point = 25 if source == 1 else 26 - source
    name, to = "bar" if source == 1 else str(point), point - die
    if to > 0:
        return f"{name}/{to}"
    return f"{name}/off" if to == 0 else f"{name}/off({die})"


def parse_move(text: str) -> int:
    """The action a move names (`format_move`'s notation; spaces and a hit's * allowed)."""
    text = text.replace(" ", "")
    if passed := re.fullmatch(r"pass(?:\(([1-6])\))?", text):
        return int(passed[1] or 1) - 1
    match = _MOVE.fullmatch(text)
    if match is None:
        raise ValueError("expected a move like 13/7, bar/22, 6/off or pass")
    point = 25 if match[1] == "bar" else int(match[1])
    to = 0 if match[2] == "off" else int(match[2])
    die = int(match[3] or point - to)
    exact = die == point - to
    if not (1 <= point <= 25 and 0 <= to < point and die <= 6 and (exact or to == 0 < point < die)):
        raise ValueError(f"no die plays {text}")
    return 6 * (1 if point == 25 else 26 - point) + die - 1


# ----------------------------------------------------------------------------- text board


def render(env: Any, names: tuple[str, str], marks: tuple[str, str], due: bool) -> str:
    """The board from the mover's side (its home at the bottom right), whose turn it is, the
    dice still to play, the checkers on the bar and borne off. `due`: the turn has passed and
    its dice are not rolled yet. The mover is the colour of pgx's `_turn` (0: the first)."""
    board = np.asarray(env._board)
    me = int(env._turn)
    mark = (marks[me], marks[1 - me])
    mover = f"{names[me]} ({mark[0]})"
    if bool(env.terminated):
        head = f"{mover} wins"
    elif due:
        head = f"{mover} to roll"
    else:
        left = " ".join(str(d + 1) for d in sorted(np.asarray(env._playable_dice))[::-1] if d >= 0)
        rolled = "-".join(str(d + 1) for d in np.asarray(env._dice))
        head = f"{mover} to play {left} (rolled {rolled})"

    def cell(point: int, height: int) -> str:  # the stack on `point` at `height` (0: outermost)
        n = int(board[24 - point])
        if abs(n) <= height:
            return ""
        return str(abs(n)) if height == 4 and abs(n) > 5 else mark[int(n < 0)]

    def line(cells: list[str]) -> str:  # a half of the points: two quarters beside the bar
        cells = [f"{c:>3}" for c in cells]
        return "".join(cells[:6]) + "  |" + "".join(cells[6:])

    top, bottom = range(13, 25), range(12, 0, -1)
    lines = [f"{head}; points numbered for {names[me]}:", line([str(p) for p in top])]
    lines += [line([cell(p, h) for p in top]) for h in range(5)] + [""]
    lines += [line([cell(p, h) for p in bottom]) for h in range(4, -1, -1)]
    lines.append(line([str(p) for p in bottom]))
    lines.append(
        f"bar: {mark[0]} {board[24]}, {mark[1]} {-board[25]}; "
        f"off: {mark[0]} {board[26]}, {mark[1]} {-board[27]}"
    )
    return "\n".join(line.rstrip() for line in lines)
