"""Two-player pgx environments as azjax games: `games.make("pgx:<env_id>")`.

pgx (https://github.com/sotetsuk/pgx) is an optional extra: `pip install 'azjax[pgx]'`.
`game_class(env_id)` builds one `PgxGame` subclass per environment, named `pgx:<env_id>`, so
that `games.register("pgx:hex", game_class("hex"))` lists it like any other game.

The wrapped pgx state rides in the State beside azjax's four fields. What differs from pgx:

- Players. pgx draws at `init` which player id moves first; azjax's player 0 always moves
  first. The State keeps `first`, pgx's id of player 0: player p is pgx's `p ^ first`.
- Rewards. pgx's final rewards are reduced to their sign (+1, -1 or 0): backgammon's gammons
  become a plain win or loss.
- Hidden information. Environments where a player holds private state (the poker games) are
  refused (`HIDDEN_INFORMATION`): the search reads the whole State it is given.
- Length. `max_game_length` is pgx's own step limit where it has one (Go, the chess and shogi
  games end there) or a bound from the rules (`MAX_GAME_LENGTH`); other environments get
  `DEFAULT_MAX_GAME_LENGTH`. A game still live at `max_game_length` moves, or one that pgx
  truncates, ends as a draw, so the bound holds for every environment.
- Chance. pgx steps that roll dice (backgammon) take a key: the State keeps a uint32 `seed`
  drawn at `init`, and the key of the move after `n` moves is `fold_in(key(seed), n)`. Games
  are thus reproducible from the `init` key, and search, which steps the same State, foresees
  the real dice: fine for the deterministic board games, a leak for backgammon.
- Views. Observations are pgx's (already from the mover's view) as float32; a flat one of N
  features is shaped (1, 1, N). `board` is observation plane 0 minus plane 1, signed for
  player 0: the stones in tic_tac_toe, connect_four, hex, othello and go, whose planes 0 and 1
  are the mover's and the opponent's; a placeholder for the others. Moves are pgx's action
  numbers. There is no heuristic (0) and no symmetry but the identity.
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from games import PGX_PREFIX, core
from games.core import Array, Game, Symmetry, grid_symmetries, render_grid


class MissingPgxError(ImportError, ValueError):
    """pgx is not installed. A ValueError too, as `games.make` raises for a game it cannot
    make, so that configs and command lines report it as they report an unknown game."""


try:
    import pgx
except ImportError as err:
    raise MissingPgxError(
        f"pgx games need pgx, an optional extra: pip install 'azjax[pgx]' ({err})"
    ) from err

# The longest game of an environment in moves: pgx's step limit, or a bound from the rules.
MAX_GAME_LENGTH = {
    "tic_tac_toe": 9,  # nine cells
    "connect_four": 42,  # 42 cells
    "hex": 122,  # 121 cells and one swap
    "othello": 121,  # 60 discs, and a pass is followed by a disc or ends the game (two passes)
    "go_9x9": 162,  # pgx: 2 * 9 * 9
    "go_19x19": 722,  # pgx: 2 * 19 * 19
    "animal_shogi": 256,  # pgx
    "gardner_chess": 256,  # pgx
    "chess": 512,  # pgx, after AlphaZero
    "shogi": 512,  # pgx, after AlphaZero
}
DEFAULT_MAX_GAME_LENGTH = 1000  # environments without a bound from the rules (backgammon)

# pgx environments of imperfect information, refused until the trainer has a method for them:
# search steps the State it is given, and pgx's State holds what one player must not see.
# pgx does not mark them, hence the table.
HIDDEN_INFORMATION = {
    "kuhn_poker": "each player's card is private",
    "leduc_holdem": "each player's private card is hidden from the other",
}


@struct.dataclass
class State(core.State):
    env: Any  # the pgx State
    first: Array  # int32: pgx's player id of player 0
    seed: Array  # uint32: the keys of pgx's chance moves derive from it


class PgxGame(Game):
    """A two-player pgx environment; one subclass per environment (`game_class`)."""

    env_id: ClassVar[str]
    pgx_env: ClassVar[Any]  # the pgx Env

    def __init__(self) -> None:
        example = jax.eval_shape(self.pgx_env.init, jax.random.key(0))
        shape = tuple(int(n) for n in example.observation.shape)
        self.num_actions = int(example.legal_action_mask.shape[0])
        self.observation_shape = shape if len(shape) == 3 else (1, 1, math.prod(shape))
        self.max_game_length = MAX_GAME_LENGTH.get(self.env_id, DEFAULT_MAX_GAME_LENGTH)

    def init(self, key: Array) -> State:
        env_key, seed_key = jax.random.split(key)
        env = self.pgx_env.init(env_key)
        seed = jax.random.bits(seed_key, dtype=jnp.uint32)
        return self._wrap(env, env.current_player.astype(jnp.int32), seed)

    def _apply(self, state: State, action: Array) -> State:
        key = jax.random.fold_in(jax.random.key(state.seed), state.env._step_count)
        return self._wrap(self.pgx_env.step(state.env, action, key), state.first, state.seed)

    def _wrap(self, env: Any, first: Array, seed: Array) -> State:
        """The azjax State of pgx state `env`: players mapped, the length bounded."""
        over = env.terminated | env.truncated | (env._step_count >= self.max_game_length)
        rewards = jnp.where(env.terminated, jnp.sign(env.rewards), 0.0)
        return State(
            current_player=(env.current_player ^ first).astype(jnp.int32),
            legal_action_mask=env.legal_action_mask & ~over,
            terminated=over,
            rewards=rewards[jnp.arange(2) ^ first].astype(jnp.float32),
            env=env,
            first=first,
            seed=seed,
        )

    def observe(self, state: State) -> Array:
        return state.env.observation.astype(jnp.float32).reshape(self.observation_shape)

    def board(self, state: State) -> Array:
        obs = self.observe(state)
        sign = jnp.where(state.current_player == 0, 1, -1)
        return (sign * jnp.sign(obs[..., 0] - obs[..., 1])).astype(jnp.int32)

    def render(self, state: State) -> str:
        return render_grid(np.asarray(self.board(state)), {1: "X", -1: "O", 0: "."})

    @property
    def symmetries(self) -> tuple[Symmetry, ...]:
        no_actions = np.full(self.observation_shape[:2], -1)
        return grid_symmetries(no_actions, self.num_actions, names=("identity",))

    def _parse(self, text: str) -> int:
        if not text.isdigit():
            raise ValueError(f"expected an action number 0-{self.num_actions - 1}")
        return int(text)

    def format_action(self, action: int) -> str:
        return str(self._action_index(action))

    def notation_help(self) -> str:
        return f"Moves are pgx's action numbers of {self.env_id}, 0-{self.num_actions - 1}."


@functools.cache
def game_class(env_id: str) -> type[PgxGame]:
    """The game class of pgx environment `env_id` (its `name` is `pgx:<env_id>`); ValueError
    for an unknown environment, one without exactly two players, or one of hidden information."""
    if env_id not in pgx.available_envs():
        raise ValueError(
            f"unknown pgx environment {env_id!r}; expected one of {', '.join(pgx.available_envs())}"
        )
    if env_id in HIDDEN_INFORMATION:
        raise ValueError(
            f"pgx environment {env_id!r} has hidden information ({HIDDEN_INFORMATION[env_id]}): "
            "azjax's search would read the opponent's private state"
        )
    env = pgx.make(env_id)
    if env.num_players != 2:
        raise ValueError(f"pgx environment {env_id!r} has {env.num_players} players, not 2")
    title = "Pgx" + "".join(part.capitalize() for part in env_id.replace("-", "_").split("_"))
    namespace = {
        "name": PGX_PREFIX + env_id,
        "env_id": env_id,
        "pgx_env": env,
        "__qualname__": title,
    }
    return type(title, (PgxGame,), {"__module__": __name__, **namespace})
