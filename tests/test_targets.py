"""Value targets: the reverse scan on hand-made trajectories and the carry-over of unfinished games.

Expected values come from a plain-Python reference that sums each game's rewards from the
mover's point of view (zero-sum: the other player's reward is the negative), independent of
the discount-based scan under test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from azjax import targets
from azjax.types import Trajectory


def make_trajectory(
    players, rewards, terminated, root_value=None, policy_mask=None, ids=None, next_player=None
):
    """A [T, B] trajectory from plain lists ([T] lists are one slot).

    Discounts follow from who moves next (`next_player`, by default the next entry's player).
    """
    players = np.asarray(players, np.int32)
    if players.ndim == 1:
        players, rewards, terminated = (
            np.asarray(x)[:, None] for x in (players, rewards, terminated)
        )
        root_value = None if root_value is None else np.asarray(root_value)[:, None]
        policy_mask = None if policy_mask is None else np.asarray(policy_mask)[:, None]
        ids = None if ids is None else np.asarray(ids)[:, None]
    rewards = np.asarray(rewards, np.float32)
    terminated = np.asarray(terminated, bool)
    length, batch = players.shape
    if next_player is None:
        next_player = np.concatenate([players[1:], players[-1:]])
    discount = np.where(terminated, 0.0, np.where(next_player == players, 1.0, -1.0))
    if ids is None:
        ids = np.arange(length * batch).reshape(length, batch)
    observation = np.zeros((length, batch, 1, 1, 1), np.float32)
    observation[..., 0, 0, 0] = ids
    policy_mask = np.ones_like(terminated) if policy_mask is None else np.asarray(policy_mask)
    policy = np.zeros((length, batch, 3), np.float32)
    policy[..., 1] = 1.0
    return Trajectory(
        observation=jnp.asarray(observation),
        policy=jnp.asarray(policy),
        policy_mask=jnp.asarray(policy_mask, bool),
        action=jnp.zeros((length, batch), jnp.int32),
        reward=jnp.asarray(rewards),
        discount=jnp.asarray(discount, jnp.float32),
        terminated=jnp.asarray(terminated),
        root_value=jnp.zeros((length, batch), jnp.float32)
        if root_value is None
        else jnp.asarray(root_value, jnp.float32),
        valid=jnp.ones((length, batch), bool),
    )


def reference_results(players, rewards, terminated):
    """Plain Python: each position's total reward to its mover until its game ends (or None)."""
    out = []
    for t in range(len(players)):
        total, ended = 0.0, False
        for u in range(t, len(players)):
            total += rewards[u] if players[u] == players[t] else -rewards[u]
            if terminated[u]:
                ended = True
                break
        out.append(total if ended else None)
    return out


def check(players, rewards, terminated):
    value, known = targets.value_targets(make_trajectory(players, rewards, terminated))
    expected = reference_results(players, rewards, terminated)
    assert list(np.asarray(known[:, 0])) == [e is not None for e in expected]
    for t, e in enumerate(expected):
        if e is not None:
            assert float(value[t, 0]) == pytest.approx(e), t
    values = np.asarray(value[:, 0])
    return [None if e is None else float(v) for v, e in zip(values, expected, strict=True)]


def test_alternating_moves():
    # Player 0 wins with the fifth move.
    got = check([0, 1, 0, 1, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1])
    assert got == [1, -1, 1, -1, 1]


def test_repeated_turns_and_two_games():
    # Dots-and-Boxes-like turns (0, 0, 1, 1, 0): player 0 makes the last move and loses; then
    # a new game in which player 1 (moving twice at the end) wins.
    players = [0, 0, 1, 1, 0, 0, 1, 1, 1]
    rewards = [0, 0, 0, 0, -1, 0, 0, 0, 1]
    terminated = [0, 0, 0, 0, 1, 0, 0, 0, 1]
    got = check(players, rewards, terminated)
    assert got == [-1, -1, 1, 1, -1, -1, 1, 1, 1]


def test_intermediate_rewards_and_draw():
    # Rewards along the way (not used by our games, but the scan must add them up) and a draw.
    got = check([0, 1, 1, 0, 1, 0], [0.5, 0, -0.25, 0, 0, 0], [0, 0, 1, 0, 0, 1])
    assert got == [0.75, -0.25, -0.25, 0, 0, 0]


def test_unfinished_game_is_unknown():
    got = check([0, 1, 0, 1, 0, 1], [0, 0, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0])
    assert got == [1, -1, 1, None, None, None]


def test_q_and_mix_targets():
    traj = make_trajectory([0, 1, 0], [0, 0, 0], [0, 0, 0], root_value=[0.2, -0.4, 0.6])
    q, known = targets.value_targets(traj, "q")
    np.testing.assert_allclose(q[:, 0], [0.2, -0.4, 0.6])
    assert bool(known.all())  # q needs no game result
    padded = traj.replace(valid=traj.valid.at[0].set(False))  # a padding entry: not a position
    assert targets.value_targets(padded, "q")[1][:, 0].tolist() == [False, True, True]
    traj = make_trajectory([0, 1, 0], [0, 0, -1], [0, 0, 1], root_value=[0.2, -0.4, 0.6])
    mix, known = targets.value_targets(traj, "mix", 0.25)
    np.testing.assert_allclose(mix[:, 0], [0.75 * -1 + 0.25 * 0.2, 0.75 + 0.25 * -0.4, -0.6])
    assert bool(known.all())


def test_bad_value_target_is_named():
    traj = make_trajectory([0], [0], [1])
    with pytest.raises(ValueError, match="'zq'"):
        targets.value_targets(traj, "zq")
    with pytest.raises(ValueError, match=r"1\.5"):
        targets.value_targets(traj, "mix", 1.5)


def test_resolve_carries_unfinished_game_to_next_chunk():
    capacity = 6
    pending = targets.empty_trajectory(capacity, 1, (1, 1, 1), 3)
    # Chunk 1: a 2-move game ends, then a game starts and is unfinished at the chunk's end.
    chunk1 = make_trajectory(
        [0, 1, 0, 1],
        [0, 1, 0, 0],
        [0, 1, 0, 0],
        policy_mask=[1, 0, 1, 1],
        ids=[10, 11, 12, 13],
        next_player=np.array([1, 0, 1, 0])[:, None],  # player 0 moves first in chunk 2
    )
    ex, pending, counts = targets.resolve(pending, chunk1)
    assert list(np.asarray(ex.valid)) == [True, True, False, False]
    np.testing.assert_allclose(ex.value[:2], [-1, 1])
    np.testing.assert_allclose(ex.observation[:2, 0, 0, 0], [10, 11])
    assert list(np.asarray(ex.policy_mask)) == [True, False, False, False]
    np.testing.assert_allclose(ex.policy[1], 0.0)  # no policy target without a full search
    assert int(counts["emitted"]) == 2 and int(counts["pending"]) == 2
    assert int(counts["dropped"]) == 0
    # Chunk 2: the game of ids 12, 13 ends with player 0 winning on its third move.
    chunk2 = make_trajectory([0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 1, 0], ids=[14, 15, 16, 17])
    ex, pending, counts = targets.resolve(pending, chunk2)
    assert list(np.asarray(ex.valid)) == [True, True, True, True]
    np.testing.assert_allclose(ex.observation[:, 0, 0, 0], [12, 13, 14, 15])
    np.testing.assert_allclose(ex.value, [1, -1, 1, -1])
    assert int(counts["pending"]) == 2  # 16 (known, over the per-chunk quota) and 17
    # Chunk 3: id 16 comes out first, before anything of chunk 3.
    chunk3 = make_trajectory([1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1], ids=[18, 19, 20, 21])
    ex, _, _ = targets.resolve(pending, chunk3)
    np.testing.assert_allclose(ex.observation[ex.valid][:, 0, 0, 0], [16, 17, 18, 19])
    np.testing.assert_allclose(ex.value[ex.valid], [1, 0, 0, 0])


def random_stream(rng, num_moves, max_length):
    """One slot's moves: games of random length with random (sometimes repeated) turns."""
    players, rewards, terminated = [], [], []
    while len(players) < num_moves:
        length = int(rng.integers(1, max_length + 1))
        player = 0
        for i in range(length):
            players.append(player)
            last = i == length - 1
            rewards.append(float(rng.choice([-1, 0, 1])) if last else 0.0)
            terminated.append(last)
            if rng.random() < 0.6:  # otherwise the same player moves again
                player = 1 - player
    return players[:num_moves], rewards[:num_moves], terminated[:num_moves]


@pytest.mark.parametrize("seed,groups", [(0, 1), (1, 1), (2, 5)])
def test_resolve_emits_every_finished_position_once_with_the_right_value(seed, groups):
    rng = np.random.default_rng(seed)
    batch, length, chunks, max_length = 5, 4, 12, 9
    streams = [random_stream(rng, length * chunks + 1, max_length) for _ in range(batch)]
    expected, ends = {}, {}
    for b, (players, rewards, terminated) in enumerate(streams):
        end = None
        for t in reversed(range(len(players))):
            end = t if terminated[t] else end
            ends[(b, t)] = end
        results = reference_results(players, rewards, terminated)
        for t, z in enumerate(results[: length * chunks]):
            expected[(b, t)] = z
    resolve = jax.jit(lambda p, c: targets.resolve(p, c, groups=groups))
    pending = targets.empty_trajectory(max_length, batch, (1, 1, 1), 3)
    emitted = {b: [] for b in range(batch)}
    emitted_before, pooled = np.zeros(groups, int), False
    group_of = np.arange(batch) // (batch // groups)
    for c in range(chunks):
        part = slice(c * length, (c + 1) * length)
        after = slice(c * length + 1, (c + 1) * length + 1)
        cols = [[np.asarray(s[k][part]) for s in streams] for k in range(3)]
        players, rewards, terminated = (np.stack(x, axis=1) for x in cols)
        next_player = np.stack([np.asarray(s[0][after]) for s in streams], axis=1)
        ids = (np.arange(length)[:, None] + c * length) * 100 + np.arange(batch)[None]
        chunk = make_trajectory(players, rewards, terminated, ids=ids, next_player=next_player)
        ex, pending, counts = resolve(pending, chunk)
        assert int(counts["dropped"]) == 0
        assert int(np.asarray(pending.valid).sum(0).max()) <= max_length
        # The T * B example slots are shared: as many known positions as fit come out.
        # Each group's T * B / groups example slots are shared by its game slots: as many
        # known positions as fit come out, emitted examples first.
        known = np.zeros(groups, int)
        for (b, _), e in ends.items():
            known[group_of[b]] += e is not None and e < (c + 1) * length
        valid = np.asarray(ex.valid).reshape(groups, -1)
        count = valid.sum(1)
        np.testing.assert_array_equal(count, np.minimum(valid.shape[1], known - emitted_before))
        assert int(counts["emitted"]) == count.sum()
        assert all(valid[g, : count[g]].all() for g in range(groups))
        emitted_before += count
        per_slot = np.zeros(batch, int)
        for i in np.flatnonzero(np.asarray(ex.valid)):
            ident = int(ex.observation[i, 0, 0, 0])
            t, b = divmod(ident, 100)
            emitted[b].append(t)
            per_slot[b] += 1
            assert expected[(b, t)] == pytest.approx(float(ex.value[i])), (b, t)
        pooled |= bool(per_slot.max() > length)
    assert pooled == (groups == 1), "pooling of example slots over game slots"
    for b in range(batch):
        finished = [t for t in range(length * chunks) if expected[(b, t)] is not None]
        # Oldest first, each once, and nothing emitted before its result was known.
        assert emitted[b] == finished[: len(emitted[b])]
        # What is still held is bounded by the pending buffer.
        assert len(finished) - len(emitted[b]) <= max_length


def test_resolve_refuses_groups_that_do_not_divide_the_slots():
    pending = targets.empty_trajectory(9, 6, (1, 1, 1), 3)
    chunk = targets.empty_trajectory(4, 6, (1, 1, 1), 3)
    for groups in (0, 4):
        with pytest.raises(ValueError, match=f"groups={groups} must be >= 1 and divide the 6"):
            targets.resolve(pending, chunk, groups=groups)
