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
  with v's row and column removed, c_0, c_t >= 0 the orb counts at the start and after t. Its
  inverse G is entrywise non-negative, G(u, w) <= G(u, u) = R_eff(u, v) <= diameter d, so
  f(u) <= d * N for N orbs on the board, and at most (n - 1) * d * N firings (hence levels,
  each has one) happen while any cell is still unfired. A chain that settles leaves some cell
  unfired (else the cell whose last firing came first ends unstable: each neighbour fires at
  that level or later, giving it back critical mass). A chain that would not settle therefore
  fires every cell within that many levels; by then every cell has received an orb, so the
  opponent owns nothing and the loop stops. So a move takes at most (n - 1) * d * N + 1 levels
  with N <= capacity + 1 (5x5: 10 753; 12x12: 1 211 211), far above anything played (random
  play reaches 35 levels on 5x5 and 89 on 6x9).
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
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from games import core
from games.core import Array, Game, Symmetry, grid_symmetries, mover_rewards, render_grid
from games.svg import COUNT_COLOUR, INK, Picture, Shape, margin

MIN_SIZE, MAX_SIZE = 2, 12


# Orb centres (as fractions of a cell, about its centre) for 1, 2 and 3 orbs.
_ORB_LAYOUT = {
    1: ((0.0, 0.0),),
    2: ((-0.14, 0.0), (0.14, 0.0)),
    3: ((-0.14, 0.1), (0.14, 0.1), (0.0, -0.14)),
}


@struct.dataclass
class State(core.State):
    board: Array  # int8[rows, cols]: signed orb counts, player 0 positive, player 1 negative


def critical_mass(rows: int, cols: int) -> np.ndarray:
    """int8 [rows, cols]: each cell's number of orthogonal neighbours."""
    mass = np.full((rows, cols), 4, np.int8)
    for edge in (mass[0], mass[-1], mass[:, 0], mass[:, -1]):
        edge -= 1
    return mass


def _explode(xp: ModuleType, board: Array, mass: Array) -> Array:
    """One level on boards [..., rows, cols] signed from the mover's view (mover positive): every
    cell at or above critical mass explodes and the cells receiving orbs become the mover's.
    Written once for numpy (`chain_levels`) and jax.numpy (`step`)."""
    fire = (board >= mass).astype(board.dtype)
    p = xp.pad(fire, [(0, 0)] * (board.ndim - 2) + [(1, 1), (1, 1)])
    incoming = p[..., :-2, 1:-1] + p[..., 2:, 1:-1] + p[..., 1:-1, :-2] + p[..., 1:-1, 2:]
    return xp.where(incoming > 0, xp.abs(board) + incoming, board) - mass * fire


def _unstable(board: Array, mass: Array) -> Array:
    """Whether boards [..., rows, cols] (mover positive) explode further: a cell is at critical
    mass and the opponent still has orbs (before the opponent places, nothing can explode)."""
    return jnp.any(board >= mass, axis=(-2, -1)) & jnp.any(board < 0, axis=(-2, -1))


def _resolve(board: Array, mass: Array, cap: int) -> Array:
    """Explode one board [rows, cols] (mover positive) level by level until it settles."""

    def body(carry: tuple[Array, Array]) -> tuple[Array, Array]:
        board, level = carry
        return _explode(jnp, board, mass), level + 1

    def cond(carry: tuple[Array, Array]) -> Array:
        board, level = carry
        return _unstable(board, mass) & (level < cap)

    return jax.lax.while_loop(cond, body, (board, jnp.int32(0)))[0]


# Batched resolution (the vmap rule of `_resolve`). Under a plain vmap a while_loop runs every
# board until the slowest one settles, yet most moves explode nothing and few chains pass two
# levels, while a large batch waits for its longest chain. On the CPU the batch therefore runs
# _WARMUP levels, then hands its still-unstable boards to a batch of 1/_SHRINK the size (in as
# many rounds as needed), and so on down to _SMALL boards, which run to the end: several times
# the steps/s of the plain loop (measured in docs/results.md#benchmarks). Accelerators run the
# plain loop, whose cheap levels beat the extra launches.
_WARMUP, _SHRINK, _SMALL = 2, 8, 64


def _resolve_batched(
    board: Array, level: Array, mass: Array, cap: int, compact: bool
) -> tuple[Array, Array]:
    """`_resolve` over boards [S, rows, cols] and their level counts [S]."""
    size = board.shape[0]
    compact = compact and size > _SMALL

    def live(board: Array, level: Array) -> Array:
        return _unstable(board, mass) & (level < cap)

    def explode(carry: tuple[Array, Array, Array, Array]) -> tuple[Array, Array, Array, Array]:
        board, level, alive, steps = carry
        board = jnp.where(alive[:, None, None], _explode(jnp, board, mass), board)
        level = level + alive
        return board, level, live(board, level), steps + 1

    limit = _WARMUP if compact else cap
    start = (board, level, live(board, level), jnp.int32(0))
    board, level, alive, _ = jax.lax.while_loop(
        lambda c: jnp.any(c[2]) & (c[3] < limit), explode, start
    )
    if not compact:
        return board, level
    part = size // _SHRINK

    def hand_over(carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        board, level, alive = carry
        idx = jnp.flatnonzero(alive, size=part, fill_value=size)  # `size` marks no board
        sub_board, sub_level = _resolve_batched(
            board.at[idx].get(mode="fill", fill_value=0),
            level.at[idx].get(mode="fill", fill_value=0),
            mass,
            cap,
            compact,
        )
        board = board.at[idx].set(sub_board, mode="drop")
        level = level.at[idx].set(sub_level, mode="drop")
        return board, level, live(board, level)

    board, level, _ = jax.lax.while_loop(lambda c: jnp.any(c[2]), hand_over, (board, level, alive))
    return board, level


class ChainReaction(Game):
    name = "chain_reaction"
    sizes: ClassVar[dict[str, tuple[int, int]]] = {
        "rows": (MIN_SIZE, MAX_SIZE),
        "cols": (MIN_SIZE, MAX_SIZE),
    }
    players = ("Red", "Green")
    colours = ("#e63946", "#2a9d8f")
    marks = ("x", "o")

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
        self._resolve = jax.custom_batching.custom_vmap(
            functools.partial(_resolve, mass=self.mass, cap=self.max_chain_levels)
        )
        self._resolve.def_vmap(self._resolve_vmap)

    # -- pure functions ------------------------------------------------------------------

    def init(self, key: Array) -> State:
        del key
        return self._new_game(State, board=jnp.zeros((self.rows, self.cols), jnp.int8))

    def _apply(self, state: State, action: Array) -> State:
        sign = (1 - 2 * state.current_player).astype(jnp.int8)
        board = state.board * sign  # the mover's orbs positive
        # The opponent has placed iff the board is not empty before the mover's move (player 0
        # moves first, the turn always passes), so both have placed once this move is made.
        opponent_placed = jnp.any(board != 0)
        placed = jnp.arange(self.num_actions, dtype=jnp.int32).reshape(self.rows, self.cols)
        board = self._resolve(board + (placed == action).astype(jnp.int8))
        won = opponent_placed & ~jnp.any(board < 0)
        return State(
            current_player=1 - state.current_player,
            legal_action_mask=(board <= 0).reshape(-1) & ~won,
            terminated=won,
            rewards=mover_rewards(state.current_player, jnp.where(won, 1.0, 0.0)),
            board=board * sign,
        )

    def _resolve_vmap(
        self, axis_size: int, in_batched: list[bool], board: Array
    ) -> tuple[Array, bool]:
        del in_batched  # one argument: the rule only runs when it is batched
        level = jnp.zeros(axis_size, jnp.int32)
        mass, cap = jnp.asarray(self.mass), self.max_chain_levels
        board, _ = jax.lax.platform_dependent(
            board,
            level,
            cpu=functools.partial(_resolve_batched, mass=mass, cap=cap, compact=True),
            default=functools.partial(_resolve_batched, mass=mass, cap=cap, compact=False),
        )
        return board, True

    def observe(self, state: State) -> Array:
        """Planes: own cells with 1, 2, 3 orbs; opponent cells with 1, 2, 3 orbs; own cells one
        orb short of critical mass; opponent cells one orb short of critical mass."""
        sign = (1 - 2 * state.current_player).astype(jnp.int8)
        board = state.board * sign
        counts = jnp.arange(1, 4, dtype=jnp.int8)
        critical = jnp.asarray(self.mass) - 1
        planes = [
            *(board == c for c in counts),
            *(board == -c for c in counts),
            board == critical,
            board == -critical,
        ]
        return jnp.stack(planes, axis=-1).astype(jnp.float32)

    def heuristic(self, state: State, player: Array) -> Array:
        """Orb difference."""
        return jnp.where(player == 0, 1.0, -1.0) * state.board.astype(jnp.float32).sum()

    # -- for people and tests (host side) ----------------------------------------------

    def board(self, state: State) -> Array:
        return state.board.astype(jnp.int32).reshape(self.rows, self.cols)

    def counts(self, board: np.ndarray) -> tuple[int, int]:
        """Orbs: player 0's, player 1's."""
        return int(board[board > 0].sum()), int(-board[board < 0].sum())

    def render(self, state: State) -> str:
        return render_grid(
            self.board(state),
            col_labels=[str(c + 1) for c in range(self.cols)],
            row_labels=[str(r + 1) for r in range(self.rows)],
        )

    def chain_levels(self, state: State, action: int) -> list[np.ndarray]:
        """Signed boards (player 0 positive) after each explosion level of `action`, the first
        right after the orb is placed, the last equal to `step`'s board. Refuses illegal moves."""
        action = self._integer(action)
        text = self.format_action(action) if 0 <= action < self.num_actions else str(action)
        self._check_legal(state, action, text)
        sign = 1 - 2 * int(state.current_player)
        board = np.asarray(self.board(state)) * sign
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
        row, col = divmod(self._action_index(action), self.cols)
        return f"{row + 1},{col + 1}"

    def notation_help(self) -> str:
        return (
            f"Moves are `row,col`, 1-based from the top left: rows 1-{self.rows}, "
            f"columns 1-{self.cols} (e.g. `1,{self.cols}` is the top-right cell)."
        )

    def draw(
        self, board: np.ndarray, legal: np.ndarray, last_action: int | None, cell: float
    ) -> Picture:
        rows, cols = self.rows, self.cols
        m = margin(cell)
        p0, p1 = self.colours
        shapes = [Shape("rect", (m, m, cols * cell, rows * cell), "#1b1b2f")]
        for c in range(cols):
            shapes.append(
                Shape("text", (m + (c + 0.5) * cell, m / 2, m * 0.5), INK, text=str(c + 1))
            )
        for r in range(rows):
            shapes.append(
                Shape("text", (m / 2, m + (r + 0.5) * cell, m * 0.5), INK, text=str(r + 1))
            )
        for r in range(rows):
            for c in range(cols):
                a = r * cols + c
                x, y = m + c * cell, m + r * cell
                cx, cy = x + cell / 2, y + cell / 2
                last = a == last_action
                edge = "#f1c40f" if last else "#3d3d5c"
                shapes.append(Shape("rect", (x, y, cell, cell), None, edge, 3 if last else 1.5))
                v = int(board[r, c])
                colour = p0 if v > 0 else p1
                count = abs(v)
                if count and count >= self.mass[r, c]:  # an exploding cell (animation frames)
                    shapes.append(Shape("circle", (cx, cy, cell * 0.42), "#f1c40f"))
                for dx, dy in _ORB_LAYOUT.get(min(count, 3), ()):
                    orb = (cx + dx * cell, cy + dy * cell, cell * 0.14)
                    shapes.append(Shape("circle", orb, colour, "#0d0d0d", 1))
                if count > 3:
                    at = (cx, cy + cell * 0.33, cell * 0.2)
                    shapes.append(Shape("text", at, COUNT_COLOUR, text=str(count)))
                if legal[a]:
                    shapes.append(Shape("rect", (x, y, cell, cell), "transparent", action=a))
        return Picture(cols * cell + 2 * m, rows * cell + 2 * m, "#ffffff", tuple(shapes))
