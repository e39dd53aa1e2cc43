"""Self-play: legal games that replay exactly with auto-reset, slots independent of each other,
temperature, playout cap randomisation, random openings; value targets (`returns`, and
`resolve` carrying unfinished games over) against a plain-Python sum of each mover's rewards."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import games
from azjax.search import SearchConfig
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

SHARED = pytest.mark.xdist_group("tictactoe_integer_rollout")  # one compiled rollout a worker


def integer_evaluator(game):
    """A fixed linear evaluator, exact in float32 whatever the batch size."""
    size, rng = int(np.prod(game.observation_shape)), np.random.default_rng(0)
    w_logits = jnp.asarray(rng.integers(-3, 4, (size, game.num_actions)), jnp.float32)
    w_value = jnp.asarray(rng.integers(-3, 4, size), jnp.float32)

    def evaluate(params, states, key):
        obs = jax.vmap(game.observe)(states).reshape(-1, size)
        return (obs @ w_logits) / 4.0, jnp.tanh((obs @ w_value) / 8.0)

    return evaluate


@functools.cache
def integer_rollout(name: str, algorithm: str, **kwargs):
    """(game, jitted rollout, batch 4, length: every slot finishes a game), once per settings."""
    game = games.make(name, **kwargs)
    search = SearchConfig(algorithm, num_simulations=8, max_num_considered_actions=4)
    cfg = SelfPlayConfig(fast_simulations=3, temperature_moves=3)
    rollout = jax.jit(make_rollout(game, integer_evaluator(game), search, cfg))
    return game, rollout, 4, min(2 * game.max_game_length + 5, 60)


def play(name, algorithm, seed, full_every=3, move_number=None, **kwargs):
    """A rollout from start positions: (final states, move numbers, trajectory, keys)."""
    game, rollout, batch, length = integer_rollout(name, algorithm, **kwargs)
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), batch))
    moves = jnp.zeros(batch, jnp.int32) if move_number is None else move_number
    full = jnp.arange(length) % full_every == 0 if full_every else jnp.zeros(length, bool)
    if not isinstance(seed, jax.Array):
        seed = jax.random.split(jax.random.key(seed), (length, batch))
    return *rollout(None, states, moves, full, seed), seed


@pytest.mark.parametrize(
    ("name", "kwargs", "algorithm"),
    [
        pytest.param("tictactoe", {}, "gumbel", marks=SHARED, id="tictactoe-gumbel"),
        pytest.param("dots_and_boxes", {"rows": 2, "cols": 2}, "puct", id="dots_and_boxes-puct"),
    ],
)
def test_selfplay_games_are_legal_and_replay_exactly(name, kwargs, algorithm):
    """Replaying each slot's moves gives every record; finished games restart at once."""
    game, _, batch, length = integer_rollout(name, algorithm, **kwargs)
    states, moves, traj, _ = play(name, algorithm, 1, **kwargs)
    traj = jax.tree.map(np.asarray, traj)

    @jax.jit
    def step(state, action):  # one move and what the checks read of it
        nxt, mover = game.step(state, action), state.current_player
        seen = (game.observe(state), state.legal_action_mask[action], nxt.rewards[mover])
        return nxt, (*seen, nxt.terminated, nxt.current_player == mover)

    initial, ended = game.init(jax.random.key(0)), 0
    for b in range(batch):
        state, count = initial, 0
        for t in range(length):
            nxt, seen = step(state, int(traj.action[t, b]))
            observation, legal, reward, terminated, same = jax.device_get(seen)
            np.testing.assert_array_equal(observation, traj.observation[t, b], f"{b}, {t}")
            assert legal and reward == traj.reward[t, b] and terminated == traj.terminated[t, b]
            assert traj.discount[t, b] == (0.0 if terminated else 1.0 if same else -1.0)
            state, count = (initial, 0) if terminated else (nxt, count + 1)
            ended += terminated
        assert int(moves[b]) == count
        np.testing.assert_array_equal(
            game.observe(state), game.observe(jax.tree.map(lambda x, b=b: x[b], states))
        )
    assert ended >= 1 and traj.valid.all()


@SHARED
@pytest.mark.parametrize("algorithm", ["gumbel", "puct"])
def test_each_slot_plays_the_same_game_whatever_the_other_slots_play(algorithm):
    _, _, together, keys = play("tictactoe", algorithm, 2, full_every=2)
    others = play("tictactoe", algorithm, 5, full_every=2)[3]
    for b in (0, 3):
        alone = play("tictactoe", algorithm, others.at[:, b].set(keys[:, b]), full_every=2)[2]
        assert not (np.asarray(alone.action) == np.asarray(together.action)).all()
        for x, y in zip(jax.tree.leaves(together), jax.tree.leaves(alone), strict=True):
            np.testing.assert_array_equal(x[:, b], y[:, b])
    assert len({tuple(np.asarray(together.action[:, b])) for b in range(4)}) > 1


@SHARED
def test_fast_searches_past_the_temperature_moves_do_not_explore():
    """Past the 3 temperature moves fast searches ignore the keys; inside them not."""
    for move_number, same in ((jnp.full(4, 3, jnp.int32), True), (None, False)):
        a, b = (play("tictactoe", "gumbel", s, None, move_number)[2] for s in (1, 2))
        # the first 5 moves: no game of Tic-Tac-Toe ends (and restarts at move 0) before
        assert np.array_equal(a.action[:5], b.action[:5]) == same
        assert np.array_equal(a.root_value[:5], b.root_value[:5]) == same


@pytest.mark.parametrize(("prob", "fast"), [(0.25, 2), (0.5, 6)])  # 6: fast is full, PCR off
def test_chunks_emit_every_position_once_with_pcr_masks(prob, fast):
    """Full searches (prob) alone give policy targets; each position emitted once."""
    game = games.make("tictactoe")
    cfg = SelfPlayConfig(batch_size=6, chunk_moves=5, full_search_prob=prob, fast_simulations=fast)
    init_fn, chunk_fn = (
        jax.jit(f)
        for f in make_selfplay(
            game,
            integer_evaluator(game),
            SearchConfig(num_simulations=6, max_num_considered_actions=4),
            cfg,
        )
    )
    carry, emitted, finished, full = init_fn(jax.random.key(0)), 0, 0, 0
    for c in range(6):
        carry, ex, metrics = chunk_fn(None, carry, jax.random.key(c + 1))
        ex = jax.tree.map(np.asarray, ex)
        full += round(float(metrics["full_search_fraction"]) * 5)
        assert ex.observation.shape == (30, 3, 3, 2) and not (ex.policy_mask & ~ex.valid).any()
        sums = ex.policy.sum(-1)
        np.testing.assert_allclose(sums[ex.policy_mask], 1.0, rtol=1e-5)
        assert (sums[~ex.policy_mask] == 0).all()
        assert set(np.unique(ex.value[ex.valid])) <= {-1.0, 0.0, 1.0}
        assert (ex.value[~ex.valid] == 0).all() and int(metrics["dropped_positions"]) == 0
        assert float(metrics["target_fraction"]) == pytest.approx(ex.valid.sum() / 30)
        assert fast < 6 or (ex.policy_mask == ex.valid).all()
        emitted += int(ex.valid.sum())
        finished += int(metrics["games_finished"])
    assert emitted + int(carry.pending.valid.sum()) == 6 * 30
    assert finished > 0 and emitted > 90
    assert (0 < full < 15) if fast < 6 else full == 30


def test_games_open_with_random_plies_that_are_not_recorded():
    """Every game opens with 0..3 unrecorded random plies, counted in the move number."""
    game = games.make("tictactoe")
    evaluate, search = (
        integer_evaluator(game),
        SearchConfig(num_simulations=4, max_num_considered_actions=4),
    )
    cfg = SelfPlayConfig(batch_size=16, chunk_moves=12, fast_simulations=2, opening_moves=3)
    carry = jax.jit(make_selfplay(game, evaluate, search, cfg)[0])(jax.random.key(0))
    rollout = jax.jit(make_rollout(game, evaluate, search, cfg))
    keys = jax.random.split(jax.random.key(4), (12, 16))
    states, moves, traj = rollout(None, carry.states, carry.move_number, jnp.ones(12, bool), keys)

    def marks(observation):  # Tic-Tac-Toe's planes: the mover's marks and the opponent's
        return np.asarray(observation).sum(axis=(-3, -2, -1)).round().astype(int)

    first = marks(traj.observation[0])
    np.testing.assert_array_equal(first, np.asarray(carry.move_number))
    np.testing.assert_array_equal(marks(jax.vmap(game.observe)(states)), np.asarray(moves))
    openings = marks(traj.observation[1:])[np.asarray(traj.terminated[:-1])]  # restarted games
    assert len(openings) >= 16 and set(np.concatenate([first, openings])) == {0, 1, 2, 3}
    state, plies = jax.vmap(lambda k: new_game(game, k, 9))(jax.random.split(jax.random.key(1), 64))
    assert not np.asarray(state.terminated).any() and int(plies.max()) >= 5


# ----------------------------------------------------------------------------- value targets


def make_trajectory(players, rewards, terminated, ids=None, next_player=None):
    """A [T, B] trajectory of plain lists, ids in the observations, discounts by turn."""
    players, rewards, terminated = (
        np.asarray(x).reshape(len(x), -1) for x in (players, rewards, terminated)
    )
    if next_player is None:
        next_player = np.concatenate([players[1:], players[-1:]])
    discount = np.where(terminated, 0.0, np.where(next_player == players, 1.0, -1.0))
    ids, shape = np.arange(players.size) if ids is None else np.asarray(ids), players.shape
    return Trajectory(
        observation=jnp.asarray(ids.reshape(shape), jnp.float32)[..., None, None, None],
        policy=jnp.zeros((*shape, 3)).at[..., 1].set(1.0),
        policy_mask=jnp.ones(shape, bool),
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
        total = 0.0
        for u in range(t, len(players)):
            total += rewards[u] if players[u] == players[t] else -rewards[u]
            if terminated[u]:
                break
        out.append(total if any(terminated[t:]) else None)
    return out


@pytest.mark.parametrize(
    ("players", "rewards", "terminated", "want"),
    [
        ([0, 1, 0, 1, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1], [1, -1, 1, -1, 1]),  # 0 wins
        # repeated turns: player 0 ends the game and loses; in the next player 1 wins
        (
            [0, 0, 1, 1, 0, 0, 1, 1, 1],
            [0, 0, 0, 0, -1, 0, 0, 0, 1],
            [0, 0, 0, 0, 1, 0, 0, 0, 1],
            [-1, -1, 1, 1, -1, -1, 1, 1, 1],
        ),
        # rewards along the way, added up, and a draw
        (
            [0, 1, 1, 0, 1, 0],
            [0.5, 0, -0.25, 0, 0, 0],
            [0, 0, 1, 0, 0, 1],
            [0.75, -0.25, -0.25, 0, 0, 0],
        ),
        # an unfinished game: unknown
        ([0, 1, 0, 1, 0, 1], [0, 0, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0], [1, -1, 1, None, None, None]),
    ],
)
def test_returns_are_each_movers_result(players, rewards, terminated, want):
    assert reference_results(players, rewards, terminated) == want
    traj = make_trajectory(players, rewards, terminated)
    value, known = (np.asarray(x[:, 0]) for x in returns(traj))
    assert known.tolist() == [w is not None for w in want]
    np.testing.assert_allclose(value[known], [w for w in want if w is not None])


def random_stream(rng, num_moves, max_length=9):
    """One slot's moves: games of random length with random (sometimes repeated) turns."""
    players, rewards, terminated = [], [], []
    while len(players) < num_moves:
        length, player = int(rng.integers(1, max_length + 1)), 0
        for i in range(length):
            players.append(player)
            rewards.append(float(rng.choice([-1, 0, 1])) if i == length - 1 else 0.0)
            terminated.append(i == length - 1)
            player = 1 - player if rng.random() < 0.6 else player
    return players[:num_moves], rewards[:num_moves], terminated[:num_moves]


@pytest.mark.parametrize(("seed", "groups"), [(0, 1), (2, 5)])
def test_resolve_emits_every_finished_position_once_with_the_right_value(seed, groups):
    """Each position once, oldest first, valued as the reference, slots shared by group."""
    rng = np.random.default_rng(seed)
    batch, length, chunks = 5, 4, 12
    streams = [random_stream(rng, length * chunks + 1) for _ in range(batch)]
    expected = {
        (b, t): z for b, s in enumerate(streams) for t, z in enumerate(reference_results(*s))
    }
    known_at = {  # the move whose chunk makes (b, t) known
        (b, t): next((u for u in range(t, len(s[2])) if s[2][u]), None)
        for b, s in enumerate(streams)
        for t in range(len(s[2]))
    }
    step = jax.jit(lambda p, c: resolve(p, c, groups=groups))
    pending = empty_trajectory(9, batch, (1, 1, 1), 3)
    emitted = {b: [] for b in range(batch)}
    emitted_before, pooled = np.zeros(groups, int), False
    group_of = np.arange(batch) // (batch // groups)
    for c in range(chunks):
        part = slice(c * length, (c + 1) * length)
        cols = [np.stack([np.asarray(s[k][part]) for s in streams], axis=1) for k in range(3)]
        nxt = np.stack(
            [np.asarray(s[0][c * length + 1 : (c + 1) * length + 1]) for s in streams], axis=1
        )
        ids = (np.arange(length)[:, None] + c * length) * 100 + np.arange(batch)[None]
        ex, pending, counts = step(pending, make_trajectory(*cols, ids, nxt))
        assert int(counts["dropped"]) == 0
        known = np.zeros(groups, int)
        for (b, t), e in known_at.items():
            known[group_of[b]] += t < length * chunks and e is not None and e < (c + 1) * length
        valid = np.asarray(ex.valid).reshape(groups, -1)
        count = valid.sum(1)  # as many known positions as fit, emitted ones first
        np.testing.assert_array_equal(count, np.minimum(valid.shape[1], known - emitted_before))
        assert int(counts["emitted"]) == count.sum()
        assert all(valid[g, : count[g]].all() for g in range(groups))
        emitted_before += count
        per_slot = np.zeros(batch, int)
        for i in np.flatnonzero(np.asarray(ex.valid)):
            t, b = divmod(int(ex.observation[i, 0, 0, 0]), 100)
            emitted[b].append(t)
            per_slot[b] += 1
            assert expected[(b, t)] == pytest.approx(float(ex.value[i])), (b, t)
        pooled |= bool(per_slot.max() > length)
    assert pooled == (groups == 1)
    for b in range(batch):
        finished = [t for t in range(length * chunks) if expected[(b, t)] is not None]
        assert emitted[b] == finished[: len(emitted[b])]  # oldest first, each once
        assert len(finished) - len(emitted[b]) <= 9  # the rest fits the pending buffer
    empty = empty_trajectory(4, 6, (1, 1, 1), 3)
    for bad in (0, 4):
        with pytest.raises(ValueError, match=f"groups={bad} must be >= 1 and divide the 6"):
            resolve(empty, empty, groups=bad)
