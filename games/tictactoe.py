"""Tic-Tac-Toe on a 3x3 board. Action: cell = row * 3 + col; notation 1-9 (row-major)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct

from games.core import Array, Game, Symmetry, grid_symmetries, render_grid

# The eight lines of three cells, as a [8, 3] index array.
_LINES = np.array(
    [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]],
    dtype=np.int32,
)


@struct.dataclass
class State:
    current_player: Array  # int32
    legal_action_mask: Array  # bool[9]
    terminated: Array  # bool
    rewards: Array  # float32[2]
    board: Array  # int8[9]: +1 player 0 (X), -1 player 1 (O), 0 empty


class TicTacToe(Game):
    name = "tictactoe"

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
        mover_reward = jnp.where(won, 1.0, 0.0)
        rewards = jnp.where(jnp.arange(2) == state.current_player, mover_reward, -mover_reward)
        return State(
            current_player=1 - state.current_player,
            legal_action_mask=(board == 0) & ~terminated,
            terminated=terminated,
            rewards=rewards.astype(jnp.float32),
            board=board,
        )

    def observe(self, state: State) -> Array:
        sign = jnp.where(state.current_player == 0, 1, -1).astype(jnp.int8)
        planes = jnp.stack([state.board == sign, state.board == -sign], axis=-1)
        return planes.astype(jnp.float32).reshape(3, 3, 2)

    def board(self, state: State) -> Array:
        return np.asarray(state.board, np.int32).reshape(3, 3)

    def render(self, state: State) -> str:
        return render_grid(self.board(state), {1: "X", -1: "O", 0: "."})

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
