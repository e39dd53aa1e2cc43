"""On-device circular replay buffer of training positions, with symmetry augmentation.

`replay_add` stores the valid slots of an `Examples` batch at the write position (a scatter at
computed indices, so every shape is static); `make_sampler` builds the function that draws a
uniform batch and maps each position through a random element of the game's symmetry group.
Everything is pure and jittable; the buffer never leaves the device.

With `keep_states`, the buffer also stores each position's game State (for reanalyse: a few
dozen bytes per position, see the README), and the sampler can refresh the targets of the
drawn positions (`refresh`) before the symmetry is applied, so a re-searched policy moves
with its observation.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from azjax.types import Examples
from games.core import Game, State, stack_symmetries

Array = jax.Array


@struct.dataclass
class Batch:
    """Training positions: a sampled batch [B], or the buffer's storage [C]."""

    observation: Array  # float32 [N, H, W, Ch]
    policy: Array  # float32 [N, A]
    policy_mask: Array  # bool [N]
    value: Array  # float32 [N]
    score: Array  # float32 [N], scaled final score margin, mover's view (0: the game has none)
    state: State | None = None  # [N] game states (stored with `keep_states`), else None


@struct.dataclass
class ReplayBuffer:
    """Positions in slots [0, size); the next one is written at `position` (mod capacity)."""

    stored: Batch  # [C]
    position: Array  # int32, next slot to write
    size: Array  # int32, filled slots (<= C)

    @property
    def capacity(self) -> int:
        return self.stored.value.shape[0]


def replay_init(game: Game, capacity: int, keep_states: bool = False) -> ReplayBuffer:
    """An empty buffer of `capacity` positions for `game`, with room for their game states
    when `keep_states`."""
    state = jax.eval_shape(game.init, jax.random.key(0)) if keep_states else None
    return ReplayBuffer(
        stored=Batch(
            observation=jnp.zeros((capacity, *game.observation_shape), jnp.float32),
            policy=jnp.zeros((capacity, game.num_actions), jnp.float32),
            policy_mask=jnp.zeros((capacity,), jnp.bool_),
            value=jnp.zeros((capacity,), jnp.float32),
            score=jnp.zeros((capacity,), jnp.float32),
            state=jax.tree.map(lambda x: jnp.zeros((capacity, *x.shape), x.dtype), state),
        ),
        position=jnp.int32(0),
        size=jnp.int32(0),
    )


def replay_add(buffer: ReplayBuffer, examples: Examples) -> ReplayBuffer:
    """Append the valid examples in order, overwriting the oldest positions when full.

    When a batch holds more valid examples than the capacity, only its last `capacity` are kept.
    """
    capacity = buffer.capacity
    valid = examples.valid
    count = jnp.sum(valid, dtype=jnp.int32)
    rank = jnp.cumsum(valid, dtype=jnp.int32) - 1  # order among the valid examples
    keep = valid & (rank >= count - capacity)
    index = jnp.where(keep, (buffer.position + rank) % capacity, capacity)  # capacity: dropped

    def put(store: Array, values: Array) -> Array:
        return store.at[index].set(values.astype(store.dtype), mode="drop")

    new = Batch(
        examples.observation,
        examples.policy,
        examples.policy_mask,
        examples.value,
        examples.score,
        examples.state,
    )
    return buffer.replace(
        stored=jax.tree.map(put, buffer.stored, new),
        position=(buffer.position + count) % capacity,
        size=jnp.minimum(buffer.size + count, capacity),
    )


def make_sampler(game: Game, batch_size: int, augment: bool = True):
    """`sample(buffer, key, refresh=None) -> Batch`: uniform positions, each under a random
    symmetry, without their states.

    `refresh(batch) -> batch`, when given, replaces the targets of the drawn positions (as
    stored, states included) before the symmetry maps observations and policies. Requires
    `buffer.size >= 1`. With `augment=False` (or a game without symmetries beyond the
    identity) positions are returned as stored.
    """
    symmetries = game.symmetries if augment else game.symmetries[:1]
    cell_source, action_source = (jnp.asarray(a) for a in stack_symmetries(symmetries))
    height, width, channels = game.observation_shape

    def sample(
        buffer: ReplayBuffer, key: Array, refresh: Callable[[Batch], Batch] | None = None
    ) -> Batch:
        index_key, symmetry_key = jax.random.split(key)
        index = jax.random.randint(index_key, (batch_size,), 0, buffer.size)
        g = jax.random.randint(symmetry_key, (batch_size,), 0, cell_source.shape[0])
        picked = jax.tree.map(lambda x: x[index], buffer.stored)
        if refresh is not None:
            picked = refresh(picked)
        obs = picked.observation.reshape(batch_size, height * width, channels)
        obs = jnp.take_along_axis(obs, cell_source[g][:, :, None], axis=1)
        return picked.replace(
            observation=obs.reshape(batch_size, height, width, channels),
            policy=jnp.take_along_axis(picked.policy, action_source[g], axis=1),
            state=None,
        )

    return sample
