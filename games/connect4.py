"""Connect Four on 6 rows x 7 columns. Action: the column 0..6; notation 1-7.

The position is two bitboards (the mover's discs and all discs), each split over two uint32
words so that no 64-bit integers are needed: word `lo` holds columns 0-3 and word `hi`
columns 4-6, seven bits per column (six cells from the bottom up, then an always-empty guard
bit), so the disc at height `h` (0 = bottom) of column `c` is bit `7 * (c % 4) + h` of its
word. Read as one number `lo + hi * 2**28`, this is the classic Connect Four bitboard: a
line of four in the direction with bit stride `s` (1 vertical, 7 horizontal, 6 and 8
diagonal) exists iff `m & (m >> 2s)` is nonzero where `m = x & (x >> s)`; the guard bits
stop lines wrapping across columns. A step is a few dozen elementwise integer ops and no
gathers.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct

from games import core
from games.core import (
    Array,
    Game,
    Symmetry,
    grid_symmetries,
    mover_rewards,
    player_planes,
    render_grid,
)
from games.svg import INK, WIN_COLOUR, Picture, Shape, margin, runs

ROWS, COLS = 6, 7
_STRIDE = ROWS + 1  # bits per column: six cells and a guard bit
_LO_COLS = 4  # columns held in the lo word
_LO_BITS = _LO_COLS * _STRIDE  # 28: the hi word starts at bit 28 of the joint number
_LO_MASK = np.uint32((1 << _LO_BITS) - 1)

# Per column: its word (0: lo, 1: hi) and the bits of its bottom and top cells in that word.
_COL_WORD = np.arange(COLS) // _LO_COLS
_COL_BOTTOM = _STRIDE * (np.arange(COLS) % _LO_COLS)
_COL_TOP = _COL_BOTTOM + ROWS - 1
# Per cell (row 0 at the top): its word and bit, for observations.
_CELL_WORD = np.broadcast_to(_COL_WORD, (ROWS, COLS))
_CELL_BIT = _COL_BOTTOM[None, :] + (ROWS - 1 - np.arange(ROWS))[:, None]


def _windows(rows: int, cols: int) -> np.ndarray:
    """Flat cell indices [N, 4] of every line of four on a rows x cols grid."""
    windows = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(4)]
                if all(0 <= rr < rows and 0 <= cc < cols for rr, cc in cells):
                    windows.append([rr * cols + cc for rr, cc in cells])
    return np.array(windows, np.int32)


_WINDOWS = _windows(ROWS, COLS)


@struct.dataclass
class State(core.State):
    # Bitboards as separate uint32 words (lo: columns 0-3, hi: columns 4-6); scalar
    # fields keep every batched word contiguous in memory.
    mine_lo: Array  # discs of the player to move
    mine_hi: Array
    occupied_lo: Array  # every disc
    occupied_hi: Array


def _shift_right(lo: Array, hi: Array, s: int) -> tuple[Array, Array]:
    """The joint number `lo + hi * 2**28` shifted right by `s` bits, as two words."""
    return (lo >> s) | ((hi << (_LO_BITS - s)) & _LO_MASK), hi >> s


def _has_four(lo: Array, hi: Array) -> Array:
    """Whether the bitboard holds four in a row in any direction."""
    # Vertical lines never leave a column, so each word is checked on its own.
    found = [(w & (w >> 1)) & ((w & (w >> 1)) >> 2) for w in (lo, hi)]
    for s in (_STRIDE - 1, _STRIDE, _STRIDE + 1):
        slo, shi = _shift_right(lo, hi, s)
        mlo, mhi = lo & slo, hi & shi
        slo, shi = _shift_right(mlo, mhi, 2 * s)
        found += [mlo & slo, mhi & shi]
    # A reduction (rather than a chain of ors) makes XLA compute this once per step instead
    # of once per State field that depends on it.
    return jnp.any(jnp.stack(found) != 0)


def _bits(lo: Array, hi: Array, word: np.ndarray, bit: np.ndarray) -> Array:
    """The bits at positions `bit` of words `word` (0: lo, 1: hi), shaped like `bit`."""
    return (jnp.where(word == 0, lo, hi) >> bit.astype(np.uint32)) & 1


class Connect4(Game):
    name = "connect4"
    players = ("Red", "Yellow")
    colours = ("#d1495b", "#f2c14e")

    def __init__(self) -> None:
        self.num_actions = COLS
        self.observation_shape = (ROWS, COLS, 2)
        self.max_game_length = ROWS * COLS

    def init(self, key: Array) -> State:
        del key
        empty = jnp.uint32(0)
        return self._new_game(
            State,
            mine_lo=empty,
            mine_hi=empty,
            occupied_lo=empty,
            occupied_hi=empty,
        )

    def _apply(self, state: State, action: Array) -> State:
        # Adding the column's bottom bit to the occupied bits carries up to the lowest empty cell.
        in_hi = action >= _LO_COLS
        shift = (_STRIDE * jnp.where(in_hi, action - _LO_COLS, action)).astype(jnp.uint32)
        bottom = jnp.uint32(1) << shift
        zero = jnp.uint32(0)
        disc_lo = (state.occupied_lo + jnp.where(in_hi, zero, bottom)) & ~state.occupied_lo
        disc_hi = (state.occupied_hi + jnp.where(in_hi, bottom, zero)) & ~state.occupied_hi
        mine_lo, mine_hi = state.mine_lo | disc_lo, state.mine_hi | disc_hi
        occupied_lo, occupied_hi = state.occupied_lo | disc_lo, state.occupied_hi | disc_hi
        won = _has_four(mine_lo, mine_hi)
        legal = _bits(occupied_lo, occupied_hi, _COL_WORD, _COL_TOP) == 0
        terminated = won | ~legal.any()
        return State(
            current_player=1 - state.current_player,
            legal_action_mask=legal & ~terminated,
            terminated=terminated,
            rewards=mover_rewards(state.current_player, jnp.where(won, 1.0, 0.0)),
            mine_lo=occupied_lo ^ mine_lo,  # the next mover's discs
            mine_hi=occupied_hi ^ mine_hi,
            occupied_lo=occupied_lo,
            occupied_hi=occupied_hi,
        )

    def observe(self, state: State) -> Array:
        mine = _bits(state.mine_lo, state.mine_hi, _CELL_WORD, _CELL_BIT)
        occupied = _bits(state.occupied_lo, state.occupied_hi, _CELL_WORD, _CELL_BIT)
        return jnp.stack([mine, occupied ^ mine], axis=-1).astype(jnp.float32)

    def heuristic(self, state: State, player: Array) -> Array:
        """Open lines: +1 per line holding two of `player`'s discs and no opponent disc, +4 per
        such line with three; the same subtracted for the opponent; +1 per disc in the centre."""
        own, opp = player_planes(self.observe(state), state, player)
        windows = jnp.asarray(_WINDOWS)
        n_own = own.reshape(-1)[windows].sum(-1)
        n_opp = opp.reshape(-1)[windows].sum(-1)
        weight = jnp.array([0.0, 0.0, 1.0, 4.0, 0.0])
        lines = jnp.where(n_opp == 0, weight[n_own.astype(jnp.int32)], 0.0).sum()
        lines -= jnp.where(n_own == 0, weight[n_opp.astype(jnp.int32)], 0.0).sum()
        centre = own[:, COLS // 2].sum() - opp[:, COLS // 2].sum()
        return (lines + centre).astype(jnp.float32)

    def move_order(self) -> np.ndarray:
        """Centre columns first."""
        order = np.arange(COLS)
        return np.argsort(np.abs(order - (COLS - 1) / 2), kind="stable").astype(np.int32)

    def board(self, state: State) -> Array:
        mine = _bits(state.mine_lo, state.mine_hi, _CELL_WORD, _CELL_BIT).astype(jnp.int32)
        occupied = _bits(state.occupied_lo, state.occupied_hi, _CELL_WORD, _CELL_BIT)
        theirs = occupied.astype(jnp.int32) - mine
        sign = jnp.where(state.current_player == 0, 1, -1)
        return sign * (mine - theirs)

    def render(self, state: State) -> str:
        labels = [str(c + 1) for c in range(COLS)]
        return render_grid(self.board(state), {1: "X", -1: "O", 0: "."}, col_labels=labels)

    @property
    def symmetries(self) -> tuple[Symmetry, ...]:
        action_grid = np.broadcast_to(np.arange(COLS), (ROWS, COLS))
        return grid_symmetries(action_grid, COLS, names=("identity", "flip_lr"))

    def _parse(self, text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= COLS:
            raise ValueError(f"expected a column number 1-{COLS}")
        return int(text) - 1

    def format_action(self, action: int) -> str:
        return str(self._action_index(action) + 1)

    def notation_help(self) -> str:
        return f"Columns are numbered 1-{COLS} from the left."

    def draw(
        self, board: np.ndarray, legal: np.ndarray, last_action: int | None, cell: float
    ) -> Picture:
        rows, cols = board.shape
        m = margin(cell)
        red, yellow = self.colours
        shapes = [Shape("rect", (m / 2, m / 2, cols * cell, rows * cell), "#1d4e89")]
        last_row = None
        if last_action is not None:  # the top disc of the last column played
            filled = np.flatnonzero(board[:, last_action] != 0)
            last_row = int(filled[0]) if filled.size else None
        for r in range(rows):
            for c in range(cols):
                cx, cy = m / 2 + (c + 0.5) * cell, m / 2 + (r + 0.5) * cell
                v = int(board[r, c])
                fill = red if v > 0 else yellow if v < 0 else "#f7f7f2"
                shapes.append(Shape("circle", (cx, cy, cell * 0.4), fill, "#153a66", 2))
                if last_action == c and last_row == r:
                    shapes.append(Shape("circle", (cx, cy, cell * 0.1), "#ffffff"))
        for (r1, c1), (r2, c2) in runs(board, 4):  # the winning four
            x1, y1 = m / 2 + (c1 + 0.5) * cell, m / 2 + (r1 + 0.5) * cell
            x2, y2 = m / 2 + (c2 + 0.5) * cell, m / 2 + (r2 + 0.5) * cell
            shapes.append(Shape("line", (x1, y1, x2, y2), None, WIN_COLOUR, 8))
        for c in range(cols):
            x = m / 2 + (c + 0.5) * cell
            shapes.append(
                Shape("text", (x, m / 2 + rows * cell + m / 2, m * 0.6), INK, text=str(c + 1))
            )
            if legal[c]:
                column = (m / 2 + c * cell, m / 2, cell, rows * cell)
                shapes.append(Shape("rect", column, "transparent", action=c))
        return Picture(cols * cell + m, rows * cell + 1.5 * m, "#ffffff", tuple(shapes))
