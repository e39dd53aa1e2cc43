"""Tic-Tac-Toe on a 3x3 board. Action: cell = row * 3 + col; notation 1-9 (row-major)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct

from games import core
from games.core import Array, Game, Symmetry, grid_symmetries, mover_rewards
from games.svg import FAINT, INK, WIN_COLOUR, Picture, Shape, margin, runs

# The eight lines of three cells, as a [8, 3] index array.
_LINES = np.array(
    [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]],
    dtype=np.int32,
)


@struct.dataclass
class State(core.State):
    board: Array  # int8[9]: +1 player 0 (X), -1 player 1 (O), 0 empty


class TicTacToe(Game):
    name = "tictactoe"
    players = ("X", "O")
    colours = ("#d1495b", "#2e86ab")

    def __init__(self) -> None:
        self.num_actions = 9
        self.observation_shape = (3, 3, 2)
        self.max_game_length = 9

    def init(self, key: Array) -> State:
        del key
        return self._new_game(State, board=jnp.zeros(9, jnp.int8))

    def _apply(self, state: State, action: Array) -> State:
        sign = jnp.where(state.current_player == 0, 1, -1).astype(jnp.int8)
        board = state.board.at[action].set(sign)
        won = jnp.any(jnp.all(board[_LINES] == sign, axis=1))
        full = jnp.all(board != 0)
        terminated = won | full
        return State(
            current_player=1 - state.current_player,
            legal_action_mask=(board == 0) & ~terminated,
            terminated=terminated,
            rewards=mover_rewards(state.current_player, jnp.where(won, 1.0, 0.0)),
            board=board,
        )

    def observe(self, state: State) -> Array:
        sign = jnp.where(state.current_player == 0, 1, -1).astype(jnp.int8)
        planes = jnp.stack([state.board == sign, state.board == -sign], axis=-1)
        return planes.astype(jnp.float32).reshape(3, 3, 2)

    def board(self, state: State) -> Array:
        return state.board.astype(jnp.int32).reshape(3, 3)

    def render(self, state: State) -> str:
        """The board with each empty cell showing its number (its name in the notation)."""
        board = np.asarray(self.board(state)).reshape(-1)
        cells = [{1: "X", -1: "O"}.get(int(v), str(i + 1)) for i, v in enumerate(board)]
        return "\n".join(" ".join(cells[r : r + 3]) for r in (0, 3, 6))

    @property
    def symmetries(self) -> tuple[Symmetry, ...]:
        return grid_symmetries(np.arange(9).reshape(3, 3), 9)

    def _parse(self, text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= 9:
            raise ValueError("expected a cell number 1-9")
        return int(text) - 1

    def format_action(self, action: int) -> str:
        return str(self._action_index(action) + 1)

    def notation_help(self) -> str:
        return "Cells are numbered 1-9 row by row from the top left."

    def draw(
        self, board: np.ndarray, legal: np.ndarray, last_action: int | None, cell: float
    ) -> Picture:
        m = margin(cell) / 2
        x_col, o_col = self.colours
        shapes: list[Shape] = []
        for i in (1, 2):
            at = m + i * cell
            shapes.append(Shape("line", (at, m, at, m + 3 * cell), None, INK, 3))
            shapes.append(Shape("line", (m, at, m + 3 * cell, at), None, INK, 3))
        for r in range(3):
            for c in range(3):
                a = r * 3 + c
                x, y = m + c * cell, m + r * cell
                cx, cy, q = x + cell / 2, y + cell / 2, cell * 0.28
                if a == last_action:
                    shapes.append(Shape("rect", (x + 4, y + 4, cell - 8, cell - 8), "#fff3c4"))
                v = int(board[r, c])
                if v > 0:
                    shapes.append(Shape("line", (cx - q, cy - q, cx + q, cy + q), None, x_col, 6))
                    shapes.append(Shape("line", (cx - q, cy + q, cx + q, cy - q), None, x_col, 6))
                elif v < 0:
                    shapes.append(Shape("circle", (cx, cy, q * 1.05), None, o_col, 5.5))
                else:  # the notation of an empty cell, faint
                    shapes.append(Shape("text", (cx, cy, cell * 0.22), FAINT, text=str(a + 1)))
                if legal[a]:
                    shapes.append(Shape("rect", (x, y, cell, cell), "transparent", action=a))
        for (r1, c1), (r2, c2) in runs(board, 3):  # the winning line
            x1, y1 = m + (c1 + 0.5) * cell, m + (r1 + 0.5) * cell
            x2, y2 = m + (c2 + 0.5) * cell, m + (r2 + 0.5) * cell
            shapes.append(Shape("line", (x1, y1, x2, y2), None, WIN_COLOUR, 7))
        side = 3 * cell + 2 * m
        return Picture(side, side, "#ffffff", tuple(shapes))
