"""Self-play: legal replayable games with auto-reset, PCR masks, batch independence, examples;
value targets: the reverse scan (`returns`) and the carry-over of unfinished games (`resolve`)
against a plain-Python reference that sums each game's rewards from the mover's view."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import games
from azjax.search import SearchConfig, run_search
from azjax.selfplay import (
    SelfPlayConfig,
    Trajectory,
    empty_trajectory,
    make_rollout,
    make_selfplay,
    new_game,
    resolve,
    returns,
)

# The tic-tac-toe rollouts are shared with the tests below that play tic-tac-toe: one worker.
SHARED = pytest.mark.xdist_group("tictactoe_integer_rollout")
GAMES = [
    pytest.param("tictactoe", {}, "gumbel", marks=SHARED, id="tictactoe-gumbel"),
    pytest.param("dots_and_boxes", {"rows": 2, "cols": 2}, "puct", id="dots_and_boxes-puct"),
    pytest.param("chain_reaction", {"rows": 3, "cols": 3}, "gumbel", id="chain_reaction-gumbel"),
]


def integer_evaluator(game):
    """A fixed linear evaluator whose sums are exact in float32 (0/1 planes, integer weights),
    so its outputs do not depend on the batch size the way a conv net's rounding does."""
    size = int(np.prod(game.observation_shape))
    rng = np.random.default_rng(0)
    w_logits = jnp.asarray(rng.integers(-3, 4, (size, game.num_actions)), jnp.float32)
    w_value = jnp.asarray(rng.integers(-3, 4, size), jnp.float32)

    def evaluate(params, states, key):
        del params, key
        obs = jax.vmap(game.observe)(states).reshape(-1, size)
        return (obs @ w_logits) / 4.0, jnp.tanh((obs @ w_value) / 8.0)

    return evaluate


@functools.cache
def integer_rollout(name: str, algorithm: str, **kwargs):
    """`(game, jitted rollout)` with the integer evaluator, built once per game and algorithm:
    the tests that play tic-tac-toe at `sizes(game)` share one compilation."""
    game = games.make(name, **kwargs)
    search = SearchConfig(algorithm=algorithm, num_simulations=8, max_num_considered_actions=4)
    selfplay = SelfPlayConfig(fast_simulations=3, temperature_moves=3)
    return game, jax.jit(make_rollout(game, integer_evaluator(game), search, selfplay))


def sizes(game) -> tuple[int, int]:
    """(batch, length) of a rollout: long enough for every slot to finish a game."""
    return 4, min(2 * game.max_game_length + 5, 60)


def start(game, batch):
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), batch))
    return states, jnp.zeros(batch, jnp.int32)


def rollout_inputs(length, batch, seed, full_every=3):
    full = jnp.arange(length) % full_every == 0
    return full, jax.random.split(jax.random.key(seed), (length, batch))


@SHARED
def test_fast_searches_past_the_temperature_moves_do_not_explore():
    """Playout cap randomisation's fast searches add no root noise once the temperature moves
    are played (their moves and values do not depend on the keys), and do inside them. The
    batch is the legality test's, so its compiled rollout is shared."""
    game, rollout = integer_rollout("tictactoe", "gumbel")
    batch, length = sizes(game)
    states, first = start(game, batch)
    fast = jnp.zeros(length, bool)
    for moves, same in ((jnp.full(batch, 3, jnp.int32), True), (first, False)):
        a, b = (
            rollout(None, states, moves, fast, rollout_inputs(length, batch, s)[1])[2]
            for s in (1, 2)
        )
        # the first 5 moves: no game of Tic-Tac-Toe ends (and restarts at move 0) before
        assert np.array_equal(a.action[:5], b.action[:5]) == same
        assert np.array_equal(a.root_value[:5], b.root_value[:5]) == same


@pytest.mark.parametrize("name,kwargs,algorithm", GAMES)
def test_selfplay_games_are_legal_and_replay_exactly(name, kwargs, algorithm):
    """Replaying each slot's recorded moves from the start position reproduces every
    observation, reward, discount and game end, and every move was legal; a finished
    game is followed at once by a new game (auto-reset) in the same slot."""
    game, rollout = integer_rollout(name, algorithm, **kwargs)
    batch, length = sizes(game)
    full, keys = rollout_inputs(length, batch, seed=1)
    states, moves, traj = rollout(None, *start(game, batch), full, keys)
    traj = jax.tree.map(np.asarray, traj)

    @jax.jit
    def step(state, action):  # one move and what the checks read of it: one transfer a move
        nxt = game.step(state, action)
        mover = state.current_player
        seen = (game.observe(state), state.legal_action_mask[action], nxt.rewards[mover])
        return nxt, (*seen, nxt.terminated, nxt.current_player == mover)

    observe = jax.jit(game.observe)
    initial = game.init(jax.random.key(0))
    ended_games = 0
    for b in range(batch):
        state, count = initial, 0
        for t in range(length):
            where = f"slot {b}, step {t}"
            action = int(traj.action[t, b])
            nxt, seen = step(state, action)
            observation, legal, reward, terminated, same_mover = jax.device_get(seen)
            np.testing.assert_array_equal(observation, traj.observation[t, b], err_msg=where)
            assert legal, f"illegal move {action} at {where}"
            assert reward == traj.reward[t, b], where
            assert terminated == traj.terminated[t, b], where
            expected_discount = 0.0 if terminated else (1.0 if same_mover else -1.0)
            assert traj.discount[t, b] == expected_discount, where
            count += 1
            if terminated:
                ended_games += 1
                nxt, count = initial, 0
            state = nxt
        assert int(moves[b]) == count
        final = jax.tree.map(lambda x, b=b: x[b], states)
        np.testing.assert_array_equal(observe(state), observe(final))
    assert ended_games >= 1, "no game finished: the auto-reset was not exercised"
    assert traj.valid.all()


@SHARED
@pytest.mark.parametrize("algorithm", ["gumbel", "puct"])
def test_each_slot_plays_the_same_game_whatever_the_other_slots_play(algorithm):
    """Slot b's game depends only on its own keys: with every other slot's keys replaced it
    plays the same game, value for value (a key or a statistic shared across slots would change
    it). The batch is the legality test's, so its compiled rollout is shared."""
    game, rollout = integer_rollout("tictactoe", algorithm)
    batch, length = sizes(game)
    full, keys = rollout_inputs(length, batch, seed=2, full_every=2)
    others = rollout_inputs(length, batch, seed=5, full_every=2)[1]
    _, _, together = rollout(None, *start(game, batch), full, keys)
    for b in (0, batch - 1):
        mixed = others.at[:, b].set(keys[:, b])
        _, _, alone = rollout(None, *start(game, batch), full, mixed)
        assert not (np.asarray(alone.action) == np.asarray(together.action)).all()
        for field in together.__dataclass_fields__:
            if getattr(together, field) is None:  # no states kept
                continue
            np.testing.assert_array_equal(
                getattr(together, field)[:, b], getattr(alone, field)[:, b], f"slot {b}, {field}"
            )
    # The slots play different games (their keys differ).
    assert len({tuple(np.asarray(together.action[:, b])) for b in range(batch)}) > 1


@SHARED
def test_playout_cap_randomization_masks():
    game, rollout = integer_rollout("tictactoe", "puct")
    batch, length = sizes(game)
    full = jnp.asarray(np.resize([1, 0, 0, 1, 1, 0, 1, 0], length), bool)
    keys = jax.random.split(jax.random.key(3), (length, batch))
    _, _, traj = rollout(None, *start(game, batch), full, keys)
    mask = np.asarray(traj.policy_mask)
    np.testing.assert_array_equal(mask, np.broadcast_to(np.asarray(full)[:, None], mask.shape))
    sums = np.asarray(traj.policy).sum(-1)
    np.testing.assert_allclose(sums[mask], 1.0, rtol=1e-5)  # full search: a policy target
    assert (sums[~mask] == 0).all()  # fast search: none
    # A full PUCT search's policy is its visit distribution over the 8 simulations.
    visits = np.asarray(traj.policy)[mask] * 8
    np.testing.assert_allclose(visits, np.round(visits), atol=1e-4)


# A fast search of as many simulations as a full one is a full one: PCR is off.
@pytest.mark.parametrize(("prob", "fast"), [(0.25, 2), (0.5, 6)])
def test_chunks_emit_every_position_once_with_pcr_masks(prob, fast):
    game = games.make("tictactoe")
    evaluate = integer_evaluator(game)
    search = SearchConfig(num_simulations=6, max_num_considered_actions=4)
    cfg = SelfPlayConfig(batch_size=6, chunk_moves=5, full_search_prob=prob, fast_simulations=fast)
    init_fn, chunk_fn = (jax.jit(f) for f in make_selfplay(game, evaluate, search, cfg))
    carry = init_fn(jax.random.key(0))
    emitted, finished, chunks, full = 0, 0, 6, 0
    for c in range(chunks):
        carry, ex, metrics = chunk_fn(None, carry, jax.random.key(c + 1))
        full += round(float(metrics["full_search_fraction"]) * 5)  # moves searched fully
        ex = jax.tree.map(np.asarray, ex)
        assert ex.valid.shape == (30,) and ex.observation.shape == (30, 3, 3, 2)
        valid = ex.valid
        assert not (ex.policy_mask & ~valid).any()
        sums = ex.policy.sum(-1)
        np.testing.assert_allclose(sums[ex.policy_mask], 1.0, rtol=1e-5)
        assert (sums[~ex.policy_mask] == 0).all()
        # z targets of tic-tac-toe are game results.
        assert set(np.unique(ex.value[valid])) <= {-1.0, 0.0, 1.0}
        assert (ex.value[~valid] == 0).all()
        assert int(metrics["dropped_positions"]) == 0
        assert float(metrics["target_fraction"]) == pytest.approx(valid.sum() / 30)
        if fast == 6:
            assert (ex.policy_mask == valid).all()
            assert float(metrics["full_search_fraction"]) == 1.0
        emitted += int(valid.sum())
        finished += int(metrics["games_finished"])
        assert 5 <= float(metrics["mean_game_length"]) <= 9 or int(metrics["games_finished"]) == 0
    # Nothing is lost: every searched position was emitted or is still pending.
    assert emitted + int(carry.pending.valid.sum()) == chunks * 30
    assert finished > 0 and emitted > chunks * 30 // 2
    # Each move's search is drawn full with probability `prob`.
    assert (0 < full < 15) if fast < 6 else full == 30


@SHARED
def test_moves_before_temperature_moves_are_sampled_and_later_ones_greedy():
    """`temperature_moves` 3: a game's moves 0-2 are the search's sampled pick, move 3 on its
    greedy one (the same search: its key and exploring noise)."""
    game, rollout = integer_rollout("tictactoe", "gumbel")
    search = SearchConfig(num_simulations=8, max_num_considered_actions=4)  # integer_rollout's
    batch, length = sizes(game)
    states = start(game, batch)[0]
    move_number = jnp.asarray([2, 3] * (batch // 2), jnp.int32)

    @jax.jit
    def picks(key):  # the sampled and the greedy pick of one slot's search
        one = jax.tree.map(lambda x: x[:1], states)
        search_key = jax.random.split(key)[0]  # as the rollout splits a slot's key
        evaluate = integer_evaluator(game)
        return [
            run_search(game, evaluate, None, one, search_key, search, sample=jnp.array([s])).action[
                0
            ]
            for s in (True, False)
        ]

    played, differ = [], np.zeros(2, int)  # slots where the two picks differ, by move number
    for seed in range(12):
        full, keys = rollout_inputs(length, batch, seed, full_every=1)
        actions = np.asarray(rollout(None, states, move_number, full, keys)[2].action[0])
        for slot in range(batch):
            sampled, greedy = (int(a) for a in picks(keys[0, slot]))
            played.append(actions[slot] == (sampled if slot % 2 == 0 else greedy))
            differ[slot % 2] += sampled != greedy
    assert all(played) and (differ >= 3).all()  # enough slots where the picks tell them apart


def test_games_open_with_random_plies_that_are_not_recorded():
    """With `opening_moves` N, every game (the first ones and each auto-reset one) starts after
    0..N random plies, each count seen, none of them recorded: a new game's first recorded
    position already holds its opening's marks, and the move number counts them."""
    game = games.make("tictactoe")
    evaluate = integer_evaluator(game)
    search = SearchConfig(num_simulations=4, max_num_considered_actions=4)
    cfg = SelfPlayConfig(batch_size=16, chunk_moves=12, fast_simulations=2, opening_moves=3)
    init_fn, _ = make_selfplay(game, evaluate, search, cfg)
    carry = jax.jit(init_fn)(jax.random.key(0))
    rollout = jax.jit(make_rollout(game, evaluate, search, cfg))
    full, keys = rollout_inputs(cfg.chunk_moves, cfg.batch_size, seed=4)
    states, moves, traj = rollout(None, carry.states, carry.move_number, full, keys)

    def marks(observation):  # tic-tac-toe's planes: the mover's marks and the opponent's
        return np.asarray(observation).sum(axis=(-3, -2, -1)).round().astype(int)

    first = marks(traj.observation[0])
    np.testing.assert_array_equal(first, np.asarray(carry.move_number))
    np.testing.assert_array_equal(marks(jax.vmap(game.observe)(states)), np.asarray(moves))
    ended = np.asarray(traj.terminated[:-1])
    openings = marks(traj.observation[1:])[ended]  # the first position of each reset game
    assert len(openings) >= 16
    counts = np.concatenate([first, openings])
    assert counts.min() >= 0 and counts.max() <= 3
    assert set(counts) == {0, 1, 2, 3}
    # A live game comes out even where a random ply would have ended it.
    state, plies = jax.vmap(lambda k: new_game(game, k, 9))(jax.random.split(jax.random.key(1), 64))
    assert not np.asarray(state.terminated).any() and int(plies.max()) >= 5


# ----------------------------------------------------------------------------- value targets


def make_trajectory(players, rewards, terminated, policy_mask=None, ids=None, next_player=None):
    """A [T, B] trajectory from plain lists ([T] lists are one slot), each position's id in its
    observation; discounts follow from who moves next (`next_player`, by default the next
    entry's player)."""
    players, rewards, terminated = (np.asarray(x) for x in (players, rewards, terminated))
    if players.ndim == 1:
        players, rewards, terminated = (x[:, None] for x in (players, rewards, terminated))
    shape = players.shape
    if next_player is None:
        next_player = np.concatenate([players[1:], players[-1:]])
    next_player = np.asarray(next_player).reshape(shape)
    discount = np.where(terminated, 0.0, np.where(next_player == players, 1.0, -1.0))
    ids = np.arange(players.size) if ids is None else np.asarray(ids)
    mask = np.ones(shape, bool) if policy_mask is None else np.asarray(policy_mask, bool)
    return Trajectory(
        observation=jnp.asarray(ids.reshape(shape), jnp.float32)[..., None, None, None],
        policy=jnp.zeros((*shape, 3)).at[..., 1].set(1.0),
        policy_mask=jnp.asarray(mask.reshape(shape)),
        action=jnp.zeros(shape, jnp.int32),
        reward=jnp.asarray(rewards, jnp.float32),
        discount=jnp.asarray(discount, jnp.float32),
        terminated=jnp.asarray(terminated, bool),
        root_value=jnp.zeros(shape),
        valid=jnp.ones(shape, bool),
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


@pytest.mark.parametrize(
    ("players", "rewards", "terminated", "want"),
    [
        # Player 0 wins with the fifth move.
        ([0, 1, 0, 1, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1], [1, -1, 1, -1, 1]),
        # Dots-and-Boxes-like turns: player 0 makes the last move and loses; then a new game
        # in which player 1 (moving twice at the end) wins.
        (
            [0, 0, 1, 1, 0, 0, 1, 1, 1],
            [0, 0, 0, 0, -1, 0, 0, 0, 1],
            [0, 0, 0, 0, 1, 0, 0, 0, 1],
            [-1, -1, 1, 1, -1, -1, 1, 1, 1],
        ),
        # Rewards along the way (the scan must add them up) and a draw.
        (
            [0, 1, 1, 0, 1, 0],
            [0.5, 0, -0.25, 0, 0, 0],
            [0, 0, 1, 0, 0, 1],
            [0.75, -0.25, -0.25, 0, 0, 0],
        ),
        # An unfinished game: unknown.
        ([0, 1, 0, 1, 0, 1], [0, 0, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0], [1, -1, 1, None, None, None]),
    ],
)
def test_returns_are_each_movers_result(players, rewards, terminated, want):
    assert reference_results(players, rewards, terminated) == want
    value, known = (
        np.asarray(x[:, 0]) for x in returns(make_trajectory(players, rewards, terminated))
    )
    assert known.tolist() == [w is not None for w in want]
    np.testing.assert_allclose(value[known], [w for w in want if w is not None])


def test_resolve_carries_unfinished_game_to_next_chunk():
    capacity = 6
    pending = empty_trajectory(capacity, 1, (1, 1, 1), 3)
    # Chunk 1: a 2-move game ends, then a game starts and is unfinished at the chunk's end.
    chunk1 = make_trajectory(
        [0, 1, 0, 1],
        [0, 1, 0, 0],
        [0, 1, 0, 0],
        policy_mask=[1, 0, 1, 1],
        ids=[10, 11, 12, 13],
        next_player=np.array([1, 0, 1, 0]),  # player 0 moves first in chunk 2
    )
    step = jax.jit(resolve)
    ex, pending, counts = step(pending, chunk1)
    assert list(np.asarray(ex.valid)) == [True, True, False, False]
    np.testing.assert_allclose(ex.value[:2], [-1, 1])
    np.testing.assert_allclose(ex.observation[:2, 0, 0, 0], [10, 11])
    assert list(np.asarray(ex.policy_mask)) == [True, False, False, False]
    np.testing.assert_allclose(ex.policy[1], 0.0)  # no policy target without a full search
    assert int(counts["emitted"]) == 2 and int(counts["pending"]) == 2
    assert int(counts["dropped"]) == 0
    # Chunk 2: the game of ids 12, 13 ends with player 0 winning on its third move.
    chunk2 = make_trajectory([0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 1, 0], ids=[14, 15, 16, 17])
    ex, pending, counts = step(pending, chunk2)
    assert list(np.asarray(ex.valid)) == [True, True, True, True]
    np.testing.assert_allclose(ex.observation[:, 0, 0, 0], [12, 13, 14, 15])
    np.testing.assert_allclose(ex.value, [1, -1, 1, -1])
    assert int(counts["pending"]) == 2  # 16 (known, over the per-chunk quota) and 17
    # Chunk 3: id 16 comes out first, before anything of chunk 3.
    chunk3 = make_trajectory([1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1], ids=[18, 19, 20, 21])
    ex, _, _ = step(pending, chunk3)
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


@pytest.mark.parametrize("seed,groups", [(0, 1), (2, 5)])
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
    step = jax.jit(lambda p, c: resolve(p, c, groups=groups))
    pending = empty_trajectory(max_length, batch, (1, 1, 1), 3)
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
        ex, pending, counts = step(pending, chunk)
        assert int(counts["dropped"]) == 0
        assert int(np.asarray(pending.valid).sum(0).max()) <= max_length
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
    pending = empty_trajectory(9, 6, (1, 1, 1), 3)
    chunk = empty_trajectory(4, 6, (1, 1, 1), 3)
    for groups in (0, 4):
        with pytest.raises(ValueError, match=f"groups={groups} must be >= 1 and divide the 6"):
            resolve(pending, chunk, groups=groups)
