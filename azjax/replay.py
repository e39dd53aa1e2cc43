"""On-device circular replay buffer of training positions, sharded over devices, with
symmetry augmentation.

The `capacity` slots form `shards` contiguous blocks (one per device of the mesh's data axis),
each a circular buffer with its own write position and size: `replay_add` scatters each
device's share of an `Examples` batch into its block, and `make_sampler` draws each device's
share uniformly from its own block under random symmetries of the game. So no position moves
between devices, and the capacity grows with the devices at a fixed memory per device.
`replay_reshard` regroups a buffer for another device count; `replay_newest` and
`replay_examples` carry a run's newest positions to another machine (a resumable model file).
A position is stored as its observation, or as its game State where that is smaller
(`stores_states`; the sampler observes it).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from azjax.selfplay import Examples
from games.core import Game, stack_symmetries

Array = jax.Array


@struct.dataclass
class ReplayBuffer:
    """`shards` circular buffers of `capacity // shards` slots each; shard s holds positions in
    its slots [0, size[s]) and writes the next one at `position[s]`."""

    stored: Examples  # [C]; `valid` marks the filled slots
    position: Array  # int32 [S], next slot to write in each shard (mod C / S)
    size: Array  # int32 [S], filled slots of each shard (<= C / S)

    @property
    def capacity(self) -> int:
        return self.stored.value.shape[0]

    @property
    def shards(self) -> int:
        return self.position.shape[0]


def stores_states(game: Game) -> bool:
    """Whether a position takes fewer bytes as its game State than as its observation."""
    state = jax.tree.leaves(jax.eval_shape(game.init, jax.random.key(0)))
    return (
        sum(math.prod(x.shape) * x.dtype.itemsize for x in state)
        < math.prod(game.observation_shape) * 4
    )


def replay_init(
    game: Game, capacity: int, shards: int = 1, as_states: bool = False
) -> ReplayBuffer:
    """An empty buffer of `capacity` positions of `game` in `shards` blocks (a divisor of the
    capacity), storing game states instead of observations when `as_states`."""
    if shards < 1 or capacity % shards:
        raise ValueError(f"replay capacity {capacity} must be a multiple of shards={shards}")
    state = jax.eval_shape(game.init, jax.random.key(0)) if as_states else None
    return ReplayBuffer(
        stored=Examples(
            observation=None
            if as_states
            else jnp.zeros((capacity, *game.observation_shape), jnp.float32),
            policy=jnp.zeros((capacity, game.num_actions), jnp.float32),
            policy_mask=jnp.zeros((capacity,), jnp.bool_),
            value=jnp.zeros((capacity,), jnp.float32),
            valid=jnp.zeros((capacity,), jnp.bool_),
            state=jax.tree.map(lambda x: jnp.zeros((capacity, *x.shape), x.dtype), state),
        ),
        position=jnp.zeros(shards, jnp.int32),
        size=jnp.zeros(shards, jnp.int32),
    )


def _blocks(tree, shards: int):
    """[N, ...] -> [shards, N // shards, ...] on every leaf."""
    return jax.tree.map(lambda x: x.reshape(shards, x.shape[0] // shards, *x.shape[1:]), tree)


def _flat(tree):
    """[S, M, ...] -> [S * M, ...] on every leaf."""
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), tree)


def _add_one(stored: Examples, position: Array, size: Array, new: Examples, valid: Array):
    """One shard: append the valid positions of `new` in order, overwriting the oldest."""
    capacity = stored.value.shape[0]
    count = jnp.sum(valid, dtype=jnp.int32)
    rank = jnp.cumsum(valid, dtype=jnp.int32) - 1  # order among the valid examples
    keep = valid & (rank >= count - capacity)  # more than the capacity: the last ones
    index = jnp.where(keep, (position + rank) % capacity, capacity)  # capacity: dropped

    def put(store: Array, values: Array) -> Array:
        return store.at[index].set(values.astype(store.dtype), mode="drop")

    stored = jax.tree.map(put, stored, new)
    return stored, (position + count) % capacity, jnp.minimum(size + count, capacity)


def replay_add(buffer: ReplayBuffer, examples: Examples) -> ReplayBuffer:
    """Append the valid examples in order, overwriting the oldest positions when full. The
    examples [N] split into `buffer.shards` contiguous parts, part s going to shard s (a part
    with more valid examples than its shard holds keeps its last ones)."""
    shards = buffer.shards
    if examples.valid.shape[0] % shards:
        raise ValueError(f"{examples.valid.shape[0]} examples do not split into {shards} shards")
    stored, position, size = jax.vmap(_add_one)(
        _blocks(buffer.stored, shards),
        buffer.position,
        buffer.size,
        _blocks(examples, shards),
        _blocks(examples.valid, shards),
    )
    return ReplayBuffer(_flat(stored), position, size)


def replay_reshard(buffer: ReplayBuffer, shards: int) -> ReplayBuffer:
    """The same positions in `shards` blocks: dealt out oldest first, in turn, so each new
    shard gets an even share and keeps the age order (its oldest is overwritten first)."""
    capacity, old = buffer.capacity, buffer.shards
    if shards < 1 or capacity % shards:
        raise ValueError(f"replay capacity {capacity} must be a multiple of shards={shards}")
    block, new_block = capacity // old, capacity // shards
    slot = jnp.arange(capacity)
    shard, local = slot // block, slot % block
    size = buffer.size[shard]
    full = size == block
    age = (local - jnp.where(full, buffer.position[shard], 0)) % block  # 0: the oldest
    valid = local < size
    order = jnp.argsort(jnp.where(valid, age * old + shard, capacity * old))
    rank = jnp.zeros(capacity, jnp.int32).at[order].set(jnp.arange(capacity, dtype=jnp.int32))
    index = jnp.where(valid, (rank % shards) * new_block + rank // shards, capacity)

    def move(x: Array) -> Array:
        return jnp.zeros_like(x).at[index].set(x, mode="drop")

    total = buffer.size.sum()
    new_size = jnp.maximum(total - jnp.arange(shards, dtype=jnp.int32) + shards - 1, 0) // shards
    return ReplayBuffer(jax.tree.map(move, buffer.stored), new_size % new_block, new_size)


def replay_newest(buffer: ReplayBuffer, count: int) -> Examples:
    """The newest `count` positions of `buffer` (all it holds when fewer), oldest first, as host
    numpy arrays [N]."""
    buffer = jax.device_get(buffer)
    block = buffer.capacity // buffer.shards
    slot = np.arange(buffer.capacity)
    shard, local = slot // block, slot % block
    size = buffer.size[shard]
    newest = (buffer.position[shard] - 1 - local) % block  # 0: the shard's newest position
    rank = np.where(local < size, newest * buffer.shards + shard, buffer.capacity)  # < C: held
    picked = np.argsort(rank, kind="stable")[: min(count, int(buffer.size.sum()))][::-1]
    return jax.tree.map(lambda x: np.asarray(x)[picked], buffer.stored)


def replay_examples(positions: Examples, shards: int) -> Examples:
    """Host `Examples` that `replay_add` stores as `positions` [N] (oldest first, as
    `replay_newest` gives them), dealt out in turn so that each of `shards` shards gets an even
    share in age order; N rounded up to a multiple of `shards` with invalid padding."""
    count = positions.value.shape[0]
    per = -(-count // shards)  # each shard's share, rounded up
    rank = np.arange(count)
    index = (rank % shards) * per + rank // shards

    def deal(x: np.ndarray) -> np.ndarray:
        out = np.zeros((shards * per, *x.shape[1:]), x.dtype)
        out[index] = x
        return out

    return jax.tree.map(deal, positions.replace(valid=np.ones(count, np.bool_)))


def make_sampler(game: Game, batch_size: int):
    """`sample(buffer, key) -> Examples`: uniform positions with their observations (not their
    states), each under a random symmetry of the game. Each shard (`size >= 1`) gives
    `batch_size // shards` positions, in shard order, so the batch splits as the buffer does."""
    cell_source, action_source = (jnp.asarray(a) for a in stack_symmetries(game.symmetries))
    height, width, channels = game.observation_shape

    def sample(buffer: ReplayBuffer, key: Array) -> Examples:
        shards = buffer.shards
        if batch_size % shards:
            raise ValueError(f"batch size {batch_size} does not split into {shards} shards")
        index_key, symmetry_key = jax.random.split(key)

        def draw(stored: Examples, size: Array, key: Array) -> Examples:
            index = jax.random.randint(key, (batch_size // shards,), 0, size)
            return jax.tree.map(lambda x: x[index], stored)

        keys = jax.random.split(index_key, shards)
        picked = _flat(jax.vmap(draw)(_blocks(buffer.stored, shards), buffer.size, keys))
        if picked.observation is None:
            picked = picked.replace(observation=jax.vmap(game.observe)(picked.state))
        g = jax.random.randint(symmetry_key, (batch_size,), 0, cell_source.shape[0])
        obs = picked.observation.reshape(batch_size, height * width, channels)
        obs = jnp.take_along_axis(obs, cell_source[g][:, :, None], axis=1)
        return picked.replace(
            observation=obs.reshape(batch_size, height, width, channels),
            policy=jnp.take_along_axis(picked.policy, action_source[g], axis=1),
            state=None,
        )

    return sample
