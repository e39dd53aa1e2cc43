"""Connect Three: discs drop to the lowest empty cell of a column; three in a row wins.

The complete game of docs/adding_a_game.md, as a user's own module: put it on PYTHONPATH and
name it in AZJAX_GAMES (`AZJAX_GAMES=connect3`), and every azjax command knows `connect3`.
"""

from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from flax import struct

import games
from games.core import Array, Game, Symmetry, grid_symmetries, render_grid


@struct.dataclass
class State:
    current_player: Array  # int32, 0 or 1; player 0 moves first
    legal_action_mask: Array  # bool[num_actions]; all False once the game is over
    terminated: Array  # bool
    rewards: Array  # float32[2]: each player's reward for the move INTO this state
    board: Array  # the game's own fields: here int8[size * size], +1 / -1 / 0


class ConnectThree(Game):
    name = "connect3"
    sizes: ClassVar[dict[str, tuple[int, int]]] = {"size": (4, 8)}  # `--size size=6`

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.num_actions = size  # actions are 0 .. num_actions - 1: the columns
        self.observation_shape = (size, size, 2)  # (height, width, planes) the network sees
        self.max_game_length = size * size  # no game lasts longer
        # every line of three cells (cell = row * size + col, row 0 at the top)
        self.lines = np.array(
            [
                [(r + i * dr) * size + c + i * dc for i in range(3)]
                for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1))
                for r in range(size)
                for c in range(size)
                if 0 <= r + 2 * dr < size and 0 <= c + 2 * dc < size
            ],
            np.int32,
        )

    def init(self, key: Array) -> State:
        return self._new_game(State, board=jnp.zeros(self.size * self.size, jnp.int8))

    def _apply(self, state: State, action: Array) -> State:
        size = self.size
        sign = jnp.where(state.current_player == 0, 1, -1).astype(jnp.int8)
        height = jnp.sum(state.board.reshape(size, size)[:, action] != 0)
        board = state.board.at[(size - 1 - height) * size + action].set(sign)
        won = jnp.any(jnp.all(board[self.lines] == sign, axis=1))
        terminated = won | jnp.all(board != 0)
        mover = jnp.where(won, 1.0, 0.0)
        return State(
            current_player=1 - state.current_player,
            legal_action_mask=(board[:size] == 0) & ~terminated,
            terminated=terminated,
            rewards=jnp.where(jnp.arange(2) == state.current_player, mover, -mover),
            board=board,
        )

    def observe(self, state: State) -> Array:
        sign = jnp.where(state.current_player == 0, 1, -1).astype(jnp.int8)
        planes = jnp.stack([state.board == sign, state.board == -sign], axis=-1)
        return planes.astype(jnp.float32).reshape(self.observation_shape)

    def board(self, state: State) -> Array:
        return state.board.astype(jnp.int32).reshape(self.size, self.size)

    def render(self, state: State) -> str:
        labels = [str(c + 1) for c in range(self.size)]
        return render_grid(self.board(state), {1: "X", -1: "O", 0: "."}, col_labels=labels)

    @property
    def symmetries(self) -> tuple[Symmetry, ...]:
        columns = np.broadcast_to(np.arange(self.size), (self.size, self.size))
        return grid_symmetries(columns, self.size, names=("identity", "flip_lr"))

    def _parse(self, text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= self.size:
            raise ValueError(f"expected a column 1-{self.size}")
        return int(text) - 1

    def format_action(self, action: int) -> str:
        return str(self._action_index(action) + 1)

    def notation_help(self) -> str:
        return f"Type a column, 1-{self.size} from the left."


games.register("connect3", ConnectThree)
