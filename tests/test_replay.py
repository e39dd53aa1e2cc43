"""The replay buffer: circular storage of valid examples, uniform sampling, augmentation."""

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
    obs = np.broadcast_to(ids[:, None, None, None], (n, 3, 3, 2)).astype(np.float32)
    policy = np.broadcast_to(ids[:, None], (n, 9)).astype(np.float32)
    return Examples(
        observation=jnp.asarray(obs),
        policy=jnp.asarray(policy),
        policy_mask=jnp.asarray(ids % 2 == 0),
        value=jnp.asarray(ids, jnp.float32),
        valid=jnp.asarray(valid),
    )


@pytest.mark.parametrize("capacity", [5, 16])
def test_add_matches_a_plain_circular_buffer(capacity):
    rng = np.random.default_rng(capacity)
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
        assert buffer.size.tolist() == [size]
        assert buffer.position.tolist() == [position]
        stored = np.asarray(buffer.stored.value[:size]).astype(int)
        np.testing.assert_array_equal(stored, [slots[i] for i in range(size)])
        np.testing.assert_array_equal(np.asarray(buffer.stored.policy_mask[:size]), stored % 2 == 0)
        np.testing.assert_array_equal(np.asarray(buffer.stored.observation[:size, 1, 2, 1]), stored)


def test_sampling_is_uniform_over_filled_slots():
    buffer = add(replay_init(GAME, 32), examples(np.arange(10), np.ones(10, bool)))
    sample = jax.jit(make_sampler(GAME, 4096))
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
        valid=jnp.ones(9, bool),
    )
    buffer = add(replay_init(GAME, 9), ex)
    batch = jax.jit(make_sampler(GAME, 2048))(buffer, jax.random.key(1))
    stone = np.asarray(batch.observation).reshape(2048, 9, 2)[:, :, 0].argmax(1)
    np.testing.assert_array_equal(stone, np.asarray(batch.policy).argmax(1))
    # Every image is one the game's symmetries produce, and the images vary (random element).
    source = np.asarray(batch.value).astype(int)
    images = {(int(s), int(t)) for s, t in zip(source, stone, strict=True)}
    allowed = {(k, int(sym.action_map[k])) for sym in GAME.symmetries for k in range(9)}
    assert images <= allowed
    assert images == allowed  # 2048 samples reach every (position, image) pair


def test_each_shard_is_its_own_circular_buffer():
    # 3 shards of 4 slots; examples [12] split into 3 parts of 4, part s going to shard s.
    rng = np.random.default_rng(0)
    buffer = replay_init(GAME, 12, shards=3)
    rings = [collections.deque(maxlen=4) for _ in range(3)]
    for start in range(1, 200, 12):
        ids = np.arange(start, start + 12)
        valid = rng.random(12) < 0.6
        buffer = add(buffer, examples(ids, valid))
        for s in range(3):
            rings[s].extend(ids[4 * s : 4 * s + 4][valid[4 * s : 4 * s + 4]])
        assert buffer.size.tolist() == [len(r) for r in rings]
        values = np.asarray(buffer.stored.value).astype(int).reshape(3, 4)
        for s, ring in enumerate(rings):
            assert sorted(values[s, : len(ring)]) == sorted(ring)
            if len(ring) == 4:  # the next write replaces the shard's oldest
                assert values[s, int(buffer.position[s])] == ring[0]


def test_each_shard_samples_its_own_positions():
    ids = np.arange(1, 13)
    buffer = add(replay_init(GAME, 24, shards=4), examples(ids, ids % 3 != 0))
    batch = jax.jit(make_sampler(GAME, 400))(buffer, jax.random.key(0))
    drawn = np.asarray(batch.value).astype(int).reshape(4, 100)
    for s in range(4):  # shard s holds the valid ids among 3s+1 .. 3s+3
        own = {i for i in ids[3 * s : 3 * s + 3] if i % 3 != 0}
        assert set(drawn[s]) == own
    # Each shard draws with its own key: its two slots' pattern is not the others'.
    patterns = {tuple(drawn[s] == drawn[s].min()) for s in range(4)}
    assert len(patterns) == 4


def test_the_newest_of_a_buffer_not_yet_full_are_all_it_holds():
    buffer = add(replay_init(GAME, 12, shards=2), examples(np.arange(1, 7), np.ones(6, bool)))
    # Shard 0 holds 1, 2, 3 and shard 1 holds 4, 5, 6: by age, oldest first; at each age the
    # shards in turn, the last one first.
    assert replay_newest(buffer, 100).value.astype(int).tolist() == [4, 1, 5, 2, 6, 3]
    assert replay_newest(buffer, 3).value.astype(int).tolist() == [2, 6, 3]


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


@pytest.mark.parametrize(("old", "new", "rounds"), [(4, 2, 1), (2, 3, 5), (1, 4, 5), (3, 1, 1)])
def test_reshard_keeps_every_position_in_age_order(old, new, rounds):
    # Positions of one shard are written in increasing ids, so there age order is id order.
    rng = np.random.default_rng(old * 10 + new)
    buffer = replay_init(GAME, 12, shards=old)
    for r in range(rounds):
        ids = np.arange(12) + 100 * r + 1
        buffer = add(buffer, examples(ids, rng.random(12) < 0.7))
    kept = np.asarray(buffer.stored.value).astype(int).reshape(old, -1)
    rings = [sorted(kept[s, : int(buffer.size[s])]) for s in range(old)]  # each oldest first
    before = sorted(v for ring in rings for v in ring)
    # Dealt out by age (the k-th oldest of every old shard, in shard order, then the next),
    # each position in turn to the next new shard.
    dealt = [ring[k] for k in range(max(map(len, rings))) for ring in rings if k < len(ring)]
    moved = jax.jit(replay_reshard, static_argnums=1)(buffer, new)
    assert moved.shards == new and int(moved.size.sum()) == len(before)
    assert int(moved.size.max()) - int(moved.size.min()) <= 1  # dealt out evenly
    values = np.asarray(moved.stored.value).astype(int).reshape(new, -1)
    after = []
    for s in range(new):
        size, position = int(moved.size[s]), int(moved.position[s])
        shard = list(values[s, :size])
        after += shard
        assert shard == dealt[s::new]  # oldest first from slot 0 ...
        assert position == size % (12 // new)  # ... so the next write replaces the oldest
        obs = np.asarray(moved.stored.observation).reshape(new, -1, 3, 3, 2)[s, :size, 0, 0, 0]
        np.testing.assert_array_equal(obs, shard)  # every field moved together
    assert sorted(after) == before


@pytest.mark.parametrize(("old", "new"), [(1, 1), (1, 3), (3, 2)])
def test_the_newest_positions_carry_to_a_buffer_of_another_shard_count(old, new):
    rng = np.random.default_rng(old + 10 * new)
    buffer = replay_init(GAME, 12, shards=old)
    part = 12 // old
    rings = [collections.deque(maxlen=part) for _ in range(old)]
    for start in range(1, 60, 12):  # wraps every shard around
        ids, valid = np.arange(start, start + 12), rng.random(12) < 0.7
        buffer = add(buffer, examples(ids, valid))
        for s in range(old):
            rings[s].extend(ids[part * s : part * (s + 1)][valid[part * s : part * (s + 1)]])
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
        filled = add(replay_init(GAME, 12, shards=new), replay_examples(newest, new))
        assert int(filled.size.sum()) == len(got)
        assert int(filled.size.max()) - int(filled.size.min()) <= 1  # dealt out evenly
        stored = np.asarray(filled.stored.value).astype(int).reshape(new, -1)
        for s in range(new):  # in turn: every shard gets old and new positions, oldest first
            assert stored[s, : int(filled.size[s])].tolist() == got[s::new]
        again = replay_newest(filled, count).value.astype(int).tolist()
        assert sorted(again) == sorted(got)
        if new == 1:
            assert again == got  # in age order


def test_states_are_stored_instead_of_observations_when_smaller():
    # A Tic-Tac-Toe State is smaller than its 3x3x2 float32 observation: the buffer keeps the
    # State, and the sampler observes it, giving the same batch as a buffer of observations.
    assert stores_states(GAME)
    states = jax.tree.map(lambda x: x[-1], random_trajectories(GAME, jax.random.key(3), 6, 3)[1])
    plain = examples(np.arange(6), np.ones(6, bool))
    plain = plain.replace(observation=jax.jit(jax.vmap(GAME.observe))(states))
    as_states = plain.replace(observation=None, state=states)
    sample = jax.jit(make_sampler(GAME, 64))
    a = sample(add(replay_init(GAME, 6), plain), jax.random.key(1))
    b = sample(add(replay_init(GAME, 6, as_states=True), as_states), jax.random.key(1))
    assert replay_init(GAME, 6, as_states=True).stored.observation is None
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
