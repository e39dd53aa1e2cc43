"""The replay buffer: circular storage of valid examples, uniform sampling, augmentation."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import games
from azjax.replay import make_sampler, replay_add, replay_init
from azjax.types import Examples

GAME = games.make("tictactoe")


def examples(ids: np.ndarray, valid: np.ndarray) -> Examples:
    """Examples whose every field encodes an integer id (so positions can be traced)."""
    n = len(ids)
    obs = np.broadcast_to(ids[:, None, None, None], (n, 3, 3, 2)).astype(np.float32)
    policy = np.broadcast_to(ids[:, None], (n, 9)).astype(np.float32)
    return Examples(
        observation=jnp.asarray(obs),
        policy=jnp.asarray(policy),
        policy_mask=jnp.asarray(ids % 2 == 0),
        value=jnp.asarray(ids, jnp.float32),
        score=jnp.asarray(-ids, jnp.float32),
        valid=jnp.asarray(valid),
    )


@pytest.mark.parametrize("capacity", [5, 16, 64])
def test_add_matches_a_plain_circular_buffer(capacity):
    rng = np.random.default_rng(capacity)
    add = jax.jit(replay_add)
    buffer = replay_init(GAME, capacity)
    slots = [None] * capacity  # reference: plain Python ring
    position, size, next_id = 0, 0, 1
    for _ in range(12):
        ids = np.arange(next_id, next_id + 24)  # one static shape: a single compilation
        next_id += 24
        valid = rng.random(24) < rng.random()
        buffer = add(buffer, examples(ids, valid))
        kept = ids[valid]
        for i in kept:  # appending one at a time, overwriting the oldest
            slots[position] = i
            position = (position + 1) % capacity
        size = min(size + len(kept), capacity)
        assert int(buffer.size) == size
        assert int(buffer.position) == position
        stored = np.asarray(buffer.stored.value[:size]).astype(int)
        np.testing.assert_array_equal(stored, [slots[i] for i in range(size)])
        np.testing.assert_array_equal(np.asarray(buffer.stored.policy_mask[:size]), stored % 2 == 0)
        np.testing.assert_array_equal(np.asarray(buffer.stored.observation[:size, 1, 2, 1]), stored)
        np.testing.assert_array_equal(np.asarray(buffer.stored.score[:size]), -stored)


def test_buffer_keeps_the_newest_positions():
    buffer = replay_init(GAME, 8)
    window = collections.deque(maxlen=8)
    for start in range(1, 60, 7):
        ids = np.arange(start, start + 7)
        buffer = replay_add(buffer, examples(ids, np.ones(7, bool)))
        window.extend(ids)
    assert sorted(np.asarray(buffer.stored.value).astype(int)) == sorted(window)


def test_sampling_is_uniform_over_filled_slots():
    buffer = replay_add(replay_init(GAME, 32), examples(np.arange(10), np.ones(10, bool)))
    sample = jax.jit(make_sampler(GAME, 4096, augment=False))
    batch = sample(buffer, jax.random.key(0))
    counts = np.bincount(np.asarray(batch.value).astype(int), minlength=32)
    assert counts[10:].sum() == 0  # never the empty slots
    expected = 4096 / 10
    assert np.all(np.abs(counts[:10] - expected) < 5 * np.sqrt(expected))
    np.testing.assert_array_equal(batch.policy_mask, np.asarray(batch.value).astype(int) % 2 == 0)


def test_augmentation_applies_one_symmetry_to_observation_and_policy():
    # Position k: a single stone on cell k and the policy all on action k. Under any symmetry
    # of Tic-Tac-Toe the stone and the policy's action must move together.
    ids = np.arange(9)
    obs = np.zeros((9, 9, 2), np.float32)
    obs[ids, ids, 0] = 1
    ex = Examples(
        observation=jnp.asarray(obs.reshape(9, 3, 3, 2)),
        policy=jnp.asarray(np.eye(9, dtype=np.float32)),
        policy_mask=jnp.ones(9, bool),
        value=jnp.asarray(ids, jnp.float32),
        score=jnp.zeros(9, jnp.float32),
        valid=jnp.ones(9, bool),
    )
    buffer = replay_add(replay_init(GAME, 9), ex)
    batch = jax.jit(make_sampler(GAME, 2048))(buffer, jax.random.key(1))
    stone = np.asarray(batch.observation).reshape(2048, 9, 2)[:, :, 0].argmax(1)
    np.testing.assert_array_equal(stone, np.asarray(batch.policy).argmax(1))
    # Every image is one the game's symmetries produce, and the images vary (random element).
    source = np.asarray(batch.value).astype(int)
    images = {(int(s), int(t)) for s, t in zip(source, stone, strict=True)}
    allowed = {(k, int(sym.action_map[k])) for sym in GAME.symmetries for k in range(9)}
    assert images <= allowed
    assert images == allowed  # 2048 samples reach every (position, image) pair
