"""On-device circular replay buffer of training positions, with symmetry augmentation.

`replay_add` stores the valid slots of an `Examples` batch at the write position (a scatter at
computed indices, so every shape is static); `make_sampler` builds the function that draws a
uniform batch and maps each position through a random element of the game's symmetry group.
Everything is pure and jittable; the buffer never leaves the device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from azjax.types import Examples
from games.core import Game, stack_symmetries

Array = jax.Array


@struct.dataclass
class Batch:
    """Training positions: a sampled batch [B], or the buffer's storage [C]."""

    observation: Array  # float32 [N, H, W, Ch]
    policy: Array  # float32 [N, A]
    policy_mask: Array  # bool [N]
    value: Array  # float32 [N]


@struct.dataclass
class ReplayBuffer:
    """Positions in slots [0, size); the next one is written at `position` (mod capacity)."""

    stored: Batch  # [C]
    position: Array  # int32, next slot to write
    size: Array  # int32, filled slots (<= C)
    added: Array  # int32, positions ever added (wraps past 2**31; informational)

    @property
    def capacity(self) -> int:
        return self.stored.value.shape[0]


def replay_init(game: Game, capacity: int) -> ReplayBuffer:
    """An empty buffer of `capacity` positions for `game`."""
    return ReplayBuffer(
        stored=Batch(
            observation=jnp.zeros((capacity, *game.observation_shape), jnp.float32),
            policy=jnp.zeros((capacity, game.num_actions), jnp.float32),
            policy_mask=jnp.zeros((capacity,), jnp.bool_),
            value=jnp.zeros((capacity,), jnp.float32),
        ),
        position=jnp.int32(0),
        size=jnp.int32(0),
        added=jnp.int32(0),
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

    new = Batch(examples.observation, examples.policy, examples.policy_mask, examples.value)
    return buffer.replace(
        stored=jax.tree.map(put, buffer.stored, new),
        position=(buffer.position + count) % capacity,
        size=jnp.minimum(buffer.size + count, capacity),
        added=buffer.added + count,
    )


def make_sampler(game: Game, batch_size: int, augment: bool = True):
    """`sample(buffer, key) -> Batch`: uniform positions, each under a random symmetry.

    Requires `buffer.size >= 1`. With `augment=False` (or a game without symmetries beyond
    the identity) positions are returned as stored.
    """
    symmetries = game.symmetries if augment else game.symmetries[:1]
    cell_source, action_source = (jnp.asarray(a) for a in stack_symmetries(symmetries))
    height, width, channels = game.observation_shape

    def sample(buffer: ReplayBuffer, key: Array) -> Batch:
        index_key, symmetry_key = jax.random.split(key)
        index = jax.random.randint(index_key, (batch_size,), 0, buffer.size)
        g = jax.random.randint(symmetry_key, (batch_size,), 0, cell_source.shape[0])
        picked = jax.tree.map(lambda x: x[index], buffer.stored)
        obs = picked.observation.reshape(batch_size, height * width, channels)
        obs = jnp.take_along_axis(obs, cell_source[g][:, :, None], axis=1)
        return picked.replace(
            observation=obs.reshape(batch_size, height, width, channels),
            policy=jnp.take_along_axis(picked.policy, action_source[g], axis=1),
        )

    return sample
