"""Chain Reaction on a rows x cols board (each 2..12, default 5x5).

Action: cell = row * cols + col. Notation `row,col`, 1-based from the top left (`1,1` is the
top-left cell). `board()` holds signed orb counts: player 0 positive, player 1 negative.

Rules: a player places an orb on an empty cell or one of its own. The critical mass of a cell is
its number of orthogonal neighbours (2, 3 or 4). A cell at critical mass explodes: it loses
critical-mass orbs and each neighbour gains one and takes the mover's colour. Explosions go
level by level: every cell unstable at a level explodes together (additions summed), which is
breadth-first order; a level is atomic. A player with no orbs loses, but only once both players
have placed; the game ends at the end of the level that eliminates the opponent, even if cells
are still unstable. There are no draws.

Why every move and every game ends (the arguments behind `max_chain_levels` and
`max_game_length`). Explosions are chip-firing on the grid graph (n cells, m edges): a cell
holding at least its degree `cm` sends one orb to each neighbour, so orbs are conserved, and only
the mover's cells ever reach critical mass (a stable board plus one orb; opponent cells only
change by being captured). A board is stable only if it holds at most
`capacity = sum(cm - 1) = 2m - n` orbs.

* Levels of one move. Let some cell v stay unfired through level t and f(u) count the firings
  of u so far. Orb conservation at every u != v reads L_v f = c_0 - c_t, with L_v the Laplacian
  with v's row and column removed, c_0, c_t >= 0 the orb counts before and after. Its inverse
  G is entrywise non-negative with G(u, w) <= G(u, u) = R_eff(u, v) <= diameter d, so
  f(u) <= d * N for N orbs on the board, and at most (n - 1) * d * N firings (hence levels,
  each has one) happen while any cell is still unfired. A chain that stabilizes leaves some cell
  unfired (the cell whose last firing came first would otherwise end unstable: every neighbour
  fired after it). A chain that never would fires every cell; once every cell has fired, every
  cell has received an orb, so the opponent owns nothing and the loop stops at that level. So a
  move takes at most (n - 1) * d * N + 1 levels with N <= capacity + 1 (5x5: 10 753; 12x12:
  1 211 211), far above anything played (random play reaches 35 levels on 5x5, 89 on 6x9).
  The loop also counts levels against this bound, so it stops on any input, reachable or not.
* Moves of one game. A move that does not end the game leaves a stable board, so after k such
  moves the board holds exactly k <= capacity orbs; the mover always has a legal move (an empty
  cell before both have placed, its own cells after). So move capacity + 1 ends the game at the
  latest: `max_game_length = capacity + 1` (5x5: 56; 12x12: 385) and no move cap is needed.
"""

from __future__ import annotations

import functools
import re
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from games.core import Array, Game, Symmetry, grid_symmetries, render_grid

MIN_SIZE, MAX_SIZE = 2, 12


@struct.dataclass
class State:
    current_player: Array  # int32
    legal_action_mask: Array  # bool[rows * cols]
    terminated: Array  # bool
    rewards: Array  # float32[2]
    board: Array  # int8[rows, cols]: signed orb counts, player 0 positive, player 1 negative


def critical_mass(rows: int, cols: int) -> np.ndarray:
    """int8 [rows, cols]: each cell's number of orthogonal neighbours."""
    mass = np.full((rows, cols), 4, np.int8)
    for edge in (mass[0], mass[-1], mass[:, 0], mass[:, -1]):
        edge -= 1
    return mass


def _explode(xp: ModuleType, board: Array, mass: Array) -> Array:
    """One level on a board signed from the mover's view (mover positive): every cell at or
    above critical mass explodes; receiving cells become the mover's. Works for numpy and jnp."""
    fire = (board >= mass).astype(board.dtype)
    padded = xp.pad(fire, 1)
    incoming = padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:]
    return xp.where(incoming > 0, xp.abs(board) + incoming, board) - mass * fire


class ChainReaction(Game):
    name = "chain_reaction"

    def __init__(self, rows: int = 5, cols: int = 5) -> None:
        for label, value in (("rows", rows), ("cols", cols)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"chain_reaction {label} must be an integer, got {value!r}")
            if not MIN_SIZE <= value <= MAX_SIZE:
                raise ValueError(
                    f"chain_reaction {label} must be from {MIN_SIZE} to {MAX_SIZE}, got {value}"
                )
        self.rows, self.cols = int(rows), int(cols)
        n = self.rows * self.cols
        self.mass = critical_mass(self.rows, self.cols)
        self.capacity = int((self.mass.astype(np.int32) - 1).sum())  # orbs a stable board holds
        diameter = self.rows + self.cols - 2
        self.max_chain_levels = (n - 1) * diameter * (self.capacity + 1) + 1
        self.num_actions = n
        self.observation_shape = (self.rows, self.cols, 8)
        self.max_game_length = self.capacity + 1

    # -- pure functions ------------------------------------------------------------------

    def init(self, key: Array) -> State:
        del key
        return State(
            current_player=jnp.int32(0),
            legal_action_mask=jnp.ones(self.num_actions, jnp.bool_),
            terminated=jnp.bool_(False),
            rewards=jnp.zeros(2, jnp.float32),
            board=jnp.zeros((self.rows, self.cols), jnp.int8),
        )

    def _apply(self, state: State, action: Array) -> State:
        mass = jnp.asarray(self.mass)
        sign = (1 - 2 * state.current_player).astype(jnp.int8)
        board = state.board * sign  # the mover's orbs positive
        # The opponent has placed iff the board is not empty before the mover's move (player 0
        # moves first, the turn always passes), so both have placed once this move is made.
        opponent_placed = jnp.any(board != 0)
        placed = jnp.arange(self.num_actions, dtype=jnp.int32).reshape(self.rows, self.cols)
        board = board + (placed == action).astype(jnp.int8)

        def live(board: Array, level: Array) -> Array:
            # Before the opponent places, the board holds one orb and nothing can explode.
            unstable = jnp.any(board >= mass) & jnp.any(board < 0)
            return unstable & (level < self.max_chain_levels)

        def body(carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
            board, level, _ = carry
            board = _explode(jnp, board, mass)
            return board, level + 1, live(board, level + 1)

        start = (board, jnp.int32(0), live(board, jnp.int32(0)))
        board, _, _ = jax.lax.while_loop(lambda carry: carry[2], body, start)
        won = opponent_placed & ~jnp.any(board < 0)
        rewards = jnp.where(jnp.arange(2) == state.current_player, 1.0, -1.0) * won
        return State(
            current_player=1 - state.current_player,
            legal_action_mask=(board <= 0).reshape(-1) & ~won,
            terminated=won,
            rewards=rewards.astype(jnp.float32),
            board=board * sign,
        )

    def observe(self, state: State) -> Array:
        """Planes: own cells with 1, 2, 3 orbs; opponent cells with 1, 2, 3 orbs; own cells one
        orb short of critical mass; opponent cells one orb short of critical mass."""
        sign = (1 - 2 * state.current_player).astype(jnp.int8)
        board = state.board * sign
        counts = jnp.arange(1, 4, dtype=jnp.int8)
        edge = jnp.asarray(self.mass) - 1
        planes = [
            *(board == c for c in counts),
            *(board == -c for c in counts),
            (board == edge),
            (board == -edge),
        ]
        return jnp.stack(planes, axis=-1).astype(jnp.float32)

    # -- for people and tests (host side) ----------------------------------------------

    def board(self, state: State) -> np.ndarray:
        return np.asarray(state.board, np.int32).reshape(self.rows, self.cols)

    def render(self, state: State) -> str:
        return render_grid(
            self.board(state),
            col_labels=[str(c + 1) for c in range(self.cols)],
            row_labels=[str(r + 1) for r in range(self.rows)],
        )

    def chain_levels(self, state: State, action: int) -> list[np.ndarray]:
        """Signed boards (player 0 positive) after each explosion level of `action`, the first
        right after the orb is placed, the last equal to `step`'s board. Refuses illegal moves."""
        action = int(action)
        text = self.format_action(action) if 0 <= action < self.num_actions else str(action)
        self._check_legal(state, action, text)
        sign = 1 - 2 * int(state.current_player)
        board = self.board(state) * sign
        board.reshape(-1)[action] += 1
        mass = self.mass.astype(np.int32)
        levels = [board * sign]
        while (board >= mass).any() and (board < 0).any() and len(levels) <= self.max_chain_levels:
            board = _explode(np, board, mass)
            levels.append(board * sign)
        return levels

    @functools.cached_property
    def symmetries(self) -> tuple[Symmetry, ...]:
        n = self.num_actions
        return grid_symmetries(np.arange(n).reshape(self.rows, self.cols), n)

    def _parse(self, text: str) -> int:
        match = re.fullmatch(r"(\d+)\s*[,\s]\s*(\d+)", text)
        if match is None:
            raise ValueError("expected `row,col`")
        row, col = int(match[1]), int(match[2])
        if not 1 <= row <= self.rows:
            raise ValueError(f"row {row} is outside 1-{self.rows}")
        if not 1 <= col <= self.cols:
            raise ValueError(f"column {col} is outside 1-{self.cols}")
        return (row - 1) * self.cols + col - 1

    def format_action(self, action: int) -> str:
        row, col = divmod(int(action), self.cols)
        return f"{row + 1},{col + 1}"

    def notation_help(self) -> str:
        return (
            f"Moves are `row,col`, 1-based from the top left: rows 1-{self.rows}, "
            f"columns 1-{self.cols} (e.g. `1,{self.cols}` is the top-right cell)."
        )
