"""Othello (Reversi) on an 8x8 board, or 6x6 with `size=6`, on bitboards.

Action: cell = row * size + col with row 0 at the top (as OpenSpiel prints the board);
pass = size * size. Player 0 is Black and moves first from the standard start. Pass is the only
legal action exactly when the mover cannot place a disc and the opponent can; the game ends as
soon as neither player can place (a double pass is never played). Result by disc count.
Notation: column letter and row number from the top (`d3`), or `pass`.

Bitboards. JAX runs without 64-bit integers here, so a board is two uint32 words with the rows
interleaved: word 0 holds the even rows and word 1 the odd rows, 8 bits per row, so cell
(r, c) is bit (r // 2) * 8 + c of word r % 2. One step north or south then just swaps the words
(plus an 8-bit shift on one of them), and every one-step shift in any of the 8 directions costs at
most two word shifts with no carry between the words. A 6x6 board lives in the top-left corner of
the same 8x8 layout. Legal moves and flips are the classic shift-and-mask fills in the 8
directions, unrolled: Kogge-Stone occluded fills for the move generator and the flips. Discs on the
edge columns are removed from the fill's propagator for every direction with a horizontal
component, which keeps lines from wrapping from one row to another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from games import core
from games.core import (
    Array,
    Game,
    Symmetry,
    eager_jit,
    grid_symmetries,
    letters,
    mover_rewards,
    player_planes,
    render_grid,
)
from games.svg import INK, Picture, Shape, margin

Bits = tuple[Array, Array]  # (word 0: even rows, word 1: odd rows), uint32 each

_SIZES = (6, 8)
# (row step, column step) of the 8 directions.
_DIRECTIONS = ((0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1))
# Every cell but the two edge columns (0 and 7) of each of the four rows in a word.
_INNER_COLUMNS = 0x7E7E7E7E


def _cell_word_and_bit(row: int, col: int) -> tuple[int, int]:
    return row % 2, (row // 2) * 8 + col


def _shift_word(word: Array, amount: int) -> Array:
    """Shift a uint32 word toward higher bits (amount > 0) or lower bits (amount < 0)."""
    if amount > 0:
        return word << amount
    if amount < 0:
        return word >> -amount
    return word


def _shift(bits: Bits, rows: int, cols: int) -> Bits:
    """Move every disc `rows` down and `cols` right; discs leaving the 64 cells drop off.

    A disc may wrap from one row to another when `cols` != 0; callers mask the edge columns.
    """
    even, odd = bits
    if rows % 2 == 0:
        amount = (rows // 2) * 8 + cols
        return _shift_word(even, amount), _shift_word(odd, amount)
    # An odd row step moves even rows into the odd word and odd rows into the even word.
    new_odd = _shift_word(even, ((rows - 1) // 2) * 8 + cols)
    new_even = _shift_word(odd, ((rows + 1) // 2) * 8 + cols)
    return new_even, new_odd


def _and(a: Bits, b: Bits) -> Bits:
    return a[0] & b[0], a[1] & b[1]


def _or(a: Bits, b: Bits) -> Bits:
    return a[0] | b[0], a[1] | b[1]


def _propagator(theirs: Bits, cols: int) -> Bits:
    """The opponent discs a line in a direction with column step `cols` may run through."""
    if cols == 0:
        return theirs
    mask = jnp.uint32(_INNER_COLUMNS)
    return theirs[0] & mask, theirs[1] & mask


def _run(start: Bits, prop: Bits, rows: int, cols: int) -> Bits:
    """Kogge-Stone occluded fill: `start` plus the propagator squares reachable from it in a
    straight unbroken line in direction (rows, cols). Reaches 7 steps, a whole board line."""
    gen = _or(start, _and(prop, _shift(start, rows, cols)))
    prop = _and(prop, _shift(prop, rows, cols))
    gen = _or(gen, _and(prop, _shift(gen, 2 * rows, 2 * cols)))
    prop = _and(prop, _shift(prop, 2 * rows, 2 * cols))
    return _or(gen, _and(prop, _shift(gen, 4 * rows, 4 * cols)))


def _moves(mine: Bits, theirs: Bits, empty: Bits) -> Bits:
    """Empty cells where a disc of `mine` would flip at least one disc of `theirs`."""
    moves = (jnp.uint32(0), jnp.uint32(0))
    for rows, cols in _DIRECTIONS:
        prop = _propagator(theirs, cols)
        run = _and(_run(mine, prop, rows, cols), prop)  # their discs in line behind mine
        moves = _or(moves, _and(_shift(run, rows, cols), empty))
    return moves


def _flips(move: Bits, mine: Bits, theirs: Bits) -> Bits:
    """The discs of `theirs` flipped by placing `move` (a single bit, or none)."""
    flips = (jnp.uint32(0), jnp.uint32(0))
    for rows, cols in _DIRECTIONS:
        prop = _propagator(theirs, cols)
        run = _and(_run(move, prop, rows, cols), prop)  # their discs in line from the move
        end = _and(_shift(run, rows, cols), mine)  # closed by one of mine
        closed = (end[0] | end[1]) != 0
        flips = _or(flips, (jnp.where(closed, run[0], 0), jnp.where(closed, run[1], 0)))
    return flips


def _count(bits: Bits) -> Array:
    return (lax.population_count(bits[0]) + lax.population_count(bits[1])).astype(jnp.int32)


def _any(bits: Bits) -> Array:
    return (bits[0] | bits[1]) != 0


def _word(bits: Bits, k: Array) -> Array:
    """Word `k` (0 or 1) of a bitboard."""
    return jnp.where(k == 0, bits[0], bits[1])


def _words_once(word: Callable[[Array], Array], count: int) -> Array:
    """uint32[count] of `word(k)` for k = 0 .. count - 1, each computed once.

    XLA on CPU does not share work between the arrays a fused computation outputs: left alone,
    it fuses the whole bit twiddling into every consumer (each disc word, each element of the
    legal mask) and recomputes it there. A loop keeps what it outputs in memory, so on CPU each
    word is computed by one iteration of a scan. Elsewhere (GPU: multi-output fusion, and a
    loop iteration costs a host round trip) the words are plain expressions.
    """
    return lax.platform_dependent(
        cpu=lambda: _words_in_loop(word, count), default=lambda: _words_inline(word, count)
    )


def _words_in_loop(word: Callable[[Array], Array], count: int) -> Array:
    _, words = lax.scan(lambda _, k: (None, word(k)), None, jnp.arange(count))
    return words


def _words_inline(word: Callable[[Array], Array], count: int) -> Array:
    return jnp.stack([word(jnp.int32(k)) for k in range(count)])


def _weights(size: int) -> np.ndarray:
    """Cell weights: corners 10, the squares diagonally next to a corner -5 (they give the
    corner away), the edge squares next to a corner -2, other edge squares 2, inner squares 1."""
    w = np.ones((size, size), np.float32)
    w[[0, -1], :] = w[:, [0, -1]] = 2.0
    for r in (0, size - 1):
        for c in (0, size - 1):
            dr, dc = (1 if r == 0 else -1), (1 if c == 0 else -1)
            w[r, c] = 10.0
            w[r + dr, c + dc] = -5.0
            w[r, c + dc] = w[r + dr, c] = -2.0
    return w


@struct.dataclass
class State(core.State):
    # legal_action_mask: bool[size * size + 1]; the last action is pass
    discs: Array  # uint32[2, 2]: discs[player, word], player 0 Black; see the module docstring


class Othello(Game):
    name = "othello"
    sizes: ClassVar[dict[str, tuple[int, int]]] = {"size": (6, 8)}  # 6 or 8 (no 7)
    players = ("Black", "White")
    colours = ("#1c1c1c", "#f4f4f4")
    marks = ("x", "o")

    def __init__(self, size: int = 8) -> None:
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size not in _SIZES:
            raise ValueError(f"Othello size must be 6 or 8, got {size!r}")
        size = self.size = int(size)
        cells = size * size
        self.pass_action = cells
        self.num_actions = cells + 1
        self.observation_shape = (size, size, 2)
        # Every placement adds a disc, so there are at most cells - 4 of them. A pass leaves the
        # opponent able to place, and placing is then their only legal kind of move, so every
        # pass is directly followed by a placement; the first move (Black can place at the start)
        # follows none. Hence passes <= placements - 1 and a game has at most 2 * (cells - 4) - 1
        # moves.
        self.max_game_length = 2 * (cells - 4) - 1
        word_bit = [_cell_word_and_bit(r, c) for r in range(size) for c in range(size)]
        self._cell_word = np.array([w for w, _ in word_bit], np.int32)
        self._cell_bit = np.array([b for _, b in word_bit], np.uint32)
        region = [0, 0]
        for w, b in word_bit:
            region[w] |= 1 << b
        self._region = tuple(region)
        self._weights = _weights(size)

    # -- rules ------------------------------------------------------------------------------

    def init(self, key: Array) -> State:
        del key
        h = self.size // 2
        board = np.zeros((self.size, self.size), np.int32)
        board[h - 1 : h + 1, h - 1 : h + 1] = [[-1, 1], [1, -1]]  # White on d4 and e5 (8x8)
        return self.from_board(board, 0)

    def from_board(self, board: Array, player: Array | int) -> State:
        """The state with `player` to move on a signed [size, size] board (Black positive), as
        when set up by hand; the pass and end rules apply as after a move, rewards are zero."""
        if tuple(np.shape(board)) != (self.size, self.size):
            raise ValueError(
                f"expected a {self.size}x{self.size} Othello board, got shape {np.shape(board)}"
            )
        return self._from_board(board, player)

    @eager_jit
    def _from_board(self, board: Array, player: Array | int) -> State:
        cells = jnp.asarray(board).reshape(-1)
        bit = jnp.uint32(1) << jnp.asarray(self._cell_bit)
        in_odd_row = jnp.asarray(self._cell_word) == 1
        zero = jnp.uint32(0)

        def bitboard(owned: Array) -> Bits:
            # Distinct bits, so their sum is their union.
            set_bits = jnp.where(owned, bit, zero)
            return (
                jnp.sum(jnp.where(in_odd_row, zero, set_bits), dtype=jnp.uint32),
                jnp.sum(jnp.where(in_odd_row, set_bits, zero), dtype=jnp.uint32),
            )

        player = jnp.asarray(player, jnp.int32)
        mover_sign = jnp.where(player == 0, 1, -1)
        mine, theirs = bitboard(cells * mover_sign > 0), bitboard(cells * mover_sign < 0)
        state = self._position(player, mine, theirs, self._empty(mine, theirs))
        return state.replace(rewards=jnp.zeros(2, jnp.float32))

    def _position(self, mover: Array, mine: Bits, theirs: Bits, empty: Bits) -> State:
        """The state with `mover` (owning `mine`) to play, applying the pass and end rules."""

        def task(k: Array) -> Array:
            # k = 0, 1: word k of the mover's placements; k = 2: whether the other can place.
            other = k == 2
            a = (jnp.where(other, theirs[0], mine[0]), jnp.where(other, theirs[1], mine[1]))
            b = (jnp.where(other, mine[0], theirs[0]), jnp.where(other, mine[1], theirs[1]))
            moves = _moves(a, b, empty)
            return jnp.where(other, _any(moves).astype(jnp.uint32), _word(moves, k))

        out = _words_once(task, 3)
        moves, other_can_place = (out[0], out[1]), out[2] != 0
        can_place = _any(moves)
        must_pass = ~can_place & other_can_place
        terminated = ~can_place & ~other_can_place
        mask = jnp.concatenate([self._cells(moves), must_pass[None]])
        diff = _count(mine) - _count(theirs)  # from the mover's view
        rewards = mover_rewards(mover, jnp.where(terminated, jnp.sign(diff), 0))
        mine_w, theirs_w = jnp.stack(mine), jnp.stack(theirs)
        black_first = mover == 0
        discs = jnp.stack(
            [jnp.where(black_first, mine_w, theirs_w), jnp.where(black_first, theirs_w, mine_w)]
        )
        return State(
            current_player=mover,
            legal_action_mask=mask,
            terminated=terminated,
            rewards=rewards,
            discs=discs,
        )

    def _apply(self, state: State, action: Array) -> State:
        player = state.current_player
        mine_w = jnp.where(player == 0, state.discs[0], state.discs[1])
        theirs_w = jnp.where(player == 0, state.discs[1], state.discs[0])
        mine, theirs = (mine_w[0], mine_w[1]), (theirs_w[0], theirs_w[1])
        # The placed disc as a bitboard; none for pass.
        row, col = action // self.size, action % self.size
        one = jnp.where(action < self.pass_action, jnp.uint32(1), jnp.uint32(0))
        bit = one << ((row // 2) * 8 + col).astype(jnp.uint32)
        zero = jnp.uint32(0)
        odd = (row % 2) == 1
        move = (jnp.where(odd, zero, bit), jnp.where(odd, bit, zero))
        empty = _and(self._empty(mine, theirs), (~move[0], ~move[1]))
        flips_w = _words_once(lambda k: _word(_flips(move, mine, theirs), k), 2)
        flips = (flips_w[0], flips_w[1])
        mine = _or(_or(mine, move), flips)
        theirs = (theirs[0] & ~flips[0], theirs[1] & ~flips[1])
        # Alternation is strict: the opponent either places, passes, or the game is over.
        return self._position(1 - player, theirs, mine, empty)

    def _empty(self, mine: Bits, theirs: Bits) -> Bits:
        region = (jnp.uint32(self._region[0]), jnp.uint32(self._region[1]))
        return _and((~(mine[0] | theirs[0]), ~(mine[1] | theirs[1])), region)

    def _cells(self, bits: Bits) -> Array:
        """bool[size * size] in action order from a bitboard."""
        words = jnp.where(jnp.asarray(self._cell_word) == 1, bits[1], bits[0])
        return ((words >> jnp.asarray(self._cell_bit)) & 1).astype(jnp.bool_)

    def observe(self, state: State) -> Array:
        player = state.current_player
        mine = jnp.where(player == 0, state.discs[0], state.discs[1])
        theirs = jnp.where(player == 0, state.discs[1], state.discs[0])
        planes = jnp.stack(
            [self._cells((mine[0], mine[1])), self._cells((theirs[0], theirs[1]))], axis=-1
        )
        return planes.astype(jnp.float32).reshape(self.observation_shape)

    def heuristic(self, state: State, player: Array) -> Array:
        """Weighted disc difference (`_weights`: corners high, squares giving them away low)."""
        own, opp = player_planes(self.observe(state), state, player)
        return ((own - opp) * jnp.asarray(self._weights)).sum()

    # -- for people and tests ---------------------------------------------------------------

    def board(self, state: State) -> Array:
        words = state.discs[:, jnp.asarray(self._cell_word)]  # [2, cells]
        owned = ((words >> jnp.asarray(self._cell_bit)) & 1).astype(jnp.int32)
        return (owned[0] - owned[1]).reshape(self.size, self.size)

    def counts(self, board: np.ndarray) -> tuple[int, int]:
        """Discs: Black's, White's."""
        return int((board > 0).sum()), int((board < 0).sum())

    def render(self, state: State) -> str:
        return render_grid(
            self.board(state),
            {1: "x", -1: "o", 0: "."},
            col_labels=letters(self.size),
            row_labels=[str(r + 1) for r in range(self.size)],
        )

    @property
    def symmetries(self) -> tuple[Symmetry, ...]:
        cells = self.size * self.size
        return grid_symmetries(np.arange(cells).reshape(self.size, self.size), self.num_actions)

    def _parse(self, text: str) -> int:
        if text == "pass":
            return self.pass_action
        cols = letters(self.size)
        rows = [str(r + 1) for r in range(self.size)]
        if len(text) < 2 or text[0] not in cols or text[1:] not in rows:
            raise ValueError(f"expected a cell a1-{cols[-1]}{self.size} or 'pass'")
        return (int(text[1:]) - 1) * self.size + cols.index(text[0])

    def format_action(self, action: int) -> str:
        action = self._action_index(action)
        if action == self.pass_action:
            return "pass"
        return f"{letters(self.size)[action % self.size]}{action // self.size + 1}"

    def notation_help(self) -> str:
        return (
            f"A move is a column letter and a row number from the top (a1-"
            f"{letters(self.size)[-1]}{self.size}), or 'pass' when no disc can be placed."
        )

    def draw(
        self, board: np.ndarray, legal: np.ndarray, last_action: int | None, cell: float
    ) -> Picture:
        n = self.size
        m = margin(cell)
        black, white = self.colours
        shapes = [Shape("rect", (m, m, n * cell, n * cell), "#2e7d4f", "#174a2c", 3)]
        for i in range(1, n):
            shapes.append(
                Shape("line", (m + i * cell, m, m + i * cell, m + n * cell), None, "#174a2c", 1.5)
            )
            shapes.append(
                Shape("line", (m, m + i * cell, m + n * cell, m + i * cell), None, "#174a2c", 1.5)
            )
        cols = letters(n)
        for i in range(n):
            shapes.append(Shape("text", (m + (i + 0.5) * cell, m / 2, m * 0.5), INK, text=cols[i]))
            shapes.append(
                Shape("text", (m / 2, m + (i + 0.5) * cell, m * 0.5), INK, text=str(i + 1))
            )
        for r in range(n):
            for c in range(n):
                a = r * n + c
                cx, cy = m + (c + 0.5) * cell, m + (r + 0.5) * cell
                v = int(board[r, c])
                if v != 0:
                    fill, edge = (black, "#000000") if v > 0 else (white, "#8a8a8a")
                    shapes.append(Shape("circle", (cx, cy, cell * 0.4), fill, edge, 1.5))
                if a == last_action:
                    shapes.append(Shape("circle", (cx, cy, cell * 0.08), "#e63946"))
                if legal[a]:
                    shapes.append(Shape("circle", (cx, cy, cell * 0.1), "#5fa57a"))
                    square = (m + c * cell, m + r * cell, cell, cell)
                    shapes.append(Shape("rect", square, "transparent", action=a))
        side = n * cell + 1.3 * m  # labels on the top and left only
        return Picture(side, side, "#ffffff", tuple(shapes))
