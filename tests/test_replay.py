"""The replay buffer: each shard a circular buffer, uniform sampling per shard, augmentation,
resharding in age order, States stored in place of observations."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_trajectories

import games
from azjax.replay import (
    make_sampler,
    replay_add,
    replay_examples,
    replay_init,
    replay_newest,
    replay_reshard,
    stores_states,
)
from azjax.selfplay import Examples

GAME = games.make("tictactoe")
add = jax.jit(replay_add)  # eagerly, each operation compiles as a program of its own


def examples(ids: np.ndarray, valid: np.ndarray) -> Examples:
    """Examples whose every field encodes an integer id (so positions can be traced)."""
    n = len(ids)
    return Examples(
        observation=jnp.asarray(
            np.broadcast_to(ids[:, None, None, None], (n, 3, 3, 2)), jnp.float32
        ),
        policy=jnp.asarray(np.broadcast_to(ids[:, None], (n, 9)), jnp.float32),
        policy_mask=jnp.asarray(ids % 2 == 0),
        value=jnp.asarray(ids, jnp.float32),
        valid=jnp.asarray(valid),
    )


def filled(capacity: int, shards: int, rounds: int, seed: int = 0):
    """A buffer after `rounds` adds of 12 examples (some invalid), and a plain deque per shard."""
    rng, buffer = np.random.default_rng(seed), replay_init(GAME, capacity, shards=shards)
    part = 12 // shards
    rings = [collections.deque(maxlen=capacity // shards) for _ in range(shards)]
    for r in range(rounds):
        ids, valid = np.arange(12) + 100 * r + 1, rng.random(12) < 0.7
        buffer = add(buffer, examples(ids, valid))
        for s in range(shards):  # part s of the examples goes to shard s
            rings[s].extend(ids[part * s : part * (s + 1)][valid[part * s : part * (s + 1)]])
    return buffer, rings


@pytest.mark.parametrize(("capacity", "shards"), [(5, 1), (12, 3)])
def test_each_shard_is_a_circular_buffer(capacity, shards):
    for rounds in (1, 3, 8):
        buffer, rings = filled(capacity, shards, rounds, seed=capacity)
        assert buffer.size.tolist() == [len(r) for r in rings]
        values = np.asarray(buffer.stored.value).astype(int).reshape(shards, -1)
        masks = np.asarray(buffer.stored.policy_mask).reshape(shards, -1)
        obs = np.asarray(buffer.stored.observation[:, 1, 2, 1]).reshape(shards, -1)
        for s, ring in enumerate(rings):
            held = values[s, : len(ring)]
            np.testing.assert_array_equal(masks[s, : len(ring)], held % 2 == 0)  # fields together
            np.testing.assert_array_equal(obs[s, : len(ring)], held)
            # oldest first from the next slot to write
            assert np.roll(held, -int(buffer.position[s])).tolist() == list(ring)


def test_sampling_is_uniform_over_each_shards_filled_slots():
    buffer = add(replay_init(GAME, 32), examples(np.arange(10), np.ones(10, bool)))
    batch = jax.jit(make_sampler(GAME, 4096))(buffer, jax.random.key(0))
    counts = np.bincount(np.asarray(batch.value).astype(int), minlength=32)
    assert counts[10:].sum() == 0  # never the empty slots
    assert np.all(np.abs(counts[:10] - 409.6) < 5 * np.sqrt(409.6))
    np.testing.assert_array_equal(batch.policy_mask, np.asarray(batch.value).astype(int) % 2 == 0)

    ids = np.arange(1, 13)
    buffer = add(replay_init(GAME, 24, shards=4), examples(ids, ids % 3 != 0))
    drawn = np.asarray(jax.jit(make_sampler(GAME, 400))(buffer, jax.random.key(0)).value)
    drawn = drawn.astype(int).reshape(4, 100)
    for s in range(4):  # shard s holds the valid ids among 3s+1 .. 3s+3
        assert set(drawn[s]) == {i for i in ids[3 * s : 3 * s + 3] if i % 3 != 0}
    # Each shard draws with its own key: its two slots' pattern is not the others'.
    assert len({tuple(drawn[s] == drawn[s].min()) for s in range(4)}) == 4


def test_augmentation_applies_one_symmetry_to_observation_and_policy():
    """A stone on cell k and the policy on k move together under every symmetry."""
    ids = np.arange(9)
    obs = np.zeros((9, 9, 2), np.float32)
    obs[ids, ids, 0] = 1
    ex = examples(ids, np.ones(9, bool))
    ex = ex.replace(observation=jnp.asarray(obs.reshape(9, 3, 3, 2)), policy=jnp.eye(9))
    batch = jax.jit(make_sampler(GAME, 2048))(add(replay_init(GAME, 9), ex), jax.random.key(1))
    stone = np.asarray(batch.observation).reshape(2048, 9, 2)[:, :, 0].argmax(1)
    np.testing.assert_array_equal(stone, np.asarray(batch.policy).argmax(1))
    images = set(zip(np.asarray(batch.value).astype(int).tolist(), stone.tolist(), strict=True))
    assert images == {(k, int(sym.action_map[k])) for sym in GAME.symmetries for k in range(9)}


def test_shard_counts_that_do_not_split_are_refused():
    for shards in (0, 3):
        with pytest.raises(
            ValueError, match=rf"^replay capacity 10 must be a multiple of shards={shards}$"
        ):
            replay_init(GAME, 10, shards=shards)
    buffer = replay_init(GAME, 12, shards=3)
    with pytest.raises(ValueError, match=r"^replay capacity 12 must be a multiple of shards=5$"):
        replay_reshard(buffer, 5)
    with pytest.raises(ValueError, match=r"^4 examples do not split into 3 shards$"):
        replay_add(buffer, examples(np.arange(4), np.ones(4, bool)))
    with pytest.raises(ValueError, match=r"^batch size 4 does not split into 3 shards$"):
        make_sampler(GAME, 4)(buffer, jax.random.key(0))


@pytest.mark.parametrize(("old", "new", "rounds"), [(4, 2, 1), (2, 3, 5), (3, 1, 1)])
def test_reshard_keeps_every_position_in_age_order(old, new, rounds):
    """Dealt out by age in turn to the new shards, oldest first from slot 0."""
    buffer, rings = filled(12, old, rounds, seed=old * 10 + new)
    dealt = [ring[k] for k in range(max(map(len, rings))) for ring in rings if k < len(ring)]
    moved = jax.jit(replay_reshard, static_argnums=1)(buffer, new)
    assert moved.shards == new and int(moved.size.sum()) == len(dealt)
    values = np.asarray(moved.stored.value).astype(int).reshape(new, -1)
    obs = np.asarray(moved.stored.observation).reshape(new, -1, 3, 3, 2)[..., 0, 0, 0]
    for s in range(new):
        size = int(moved.size[s])
        assert values[s, :size].tolist() == dealt[s::new]
        assert int(moved.position[s]) == size % (12 // new)  # the next write: the oldest
        np.testing.assert_array_equal(obs[s, :size], values[s, :size])  # fields together


@pytest.mark.parametrize(("old", "new"), [(1, 1), (1, 3), (3, 2)])
def test_the_newest_positions_carry_to_a_buffer_of_another_shard_count(old, new):
    buffer, rings = filled(12, old, 5, seed=old + 10 * new)  # wraps every shard around
    held = sum(map(len, rings))
    for count in (0, 5, 100):
        newest = replay_newest(buffer, count)
        got = newest.value.astype(int).tolist()
        assert len(got) == min(count, held)
        np.testing.assert_array_equal(newest.observation[:, 1, 2, 1], got)  # fields together
        for ring in rings:  # each shard gives its newest positions, oldest first
            mine = [v for v in got if v in ring]
            assert mine == list(ring)[len(ring) - len(mine) :]
        if count == 5 and old == 3:  # the newest of every shard in turn
            assert sorted(len([v for v in got if v in r]) for r in rings) == [1, 2, 2]
        carried = add(replay_init(GAME, 12, shards=new), replay_examples(newest, new))
        stored = np.asarray(carried.stored.value).astype(int).reshape(new, -1)
        for s in range(new):  # in turn: every shard gets old and new positions, oldest first
            assert stored[s, : int(carried.size[s])].tolist() == got[s::new]
        again = replay_newest(carried, count).value.astype(int).tolist()
        assert again == got if new == 1 else sorted(again) == sorted(got)


def test_states_are_stored_instead_of_observations_when_smaller():
    """A buffer of States samples what a buffer of observations does."""
    assert stores_states(GAME)
    states = jax.tree.map(lambda x: x[-1], random_trajectories(GAME, jax.random.key(3), 6, 3)[1])
    plain = examples(np.arange(6), np.ones(6, bool))
    plain = plain.replace(observation=jax.jit(jax.vmap(GAME.observe))(states))
    as_states = plain.replace(observation=None, state=states)
    sample = jax.jit(make_sampler(GAME, 64))
    a = sample(add(replay_init(GAME, 6), plain), jax.random.key(1))
    b = sample(add(replay_init(GAME, 6, as_states=True), as_states), jax.random.key(1))
    assert replay_init(GAME, 6, as_states=True).stored.observation is None
    jax.tree.map(np.testing.assert_array_equal, a, b)
