"""Self-play: legal replayable games with auto-reset, PCR masks, batch independence, examples."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import games
from azjax.network import NetworkConfig, init_params, make_network
from azjax.search import SearchConfig, network_evaluator, run_search
from azjax.selfplay import SelfPlayConfig, make_rollout, make_selfplay, new_game

# The tic-tac-toe rollouts are shared with the tests below that play tic-tac-toe: one worker.
SHARED = pytest.mark.xdist_group("tictactoe_integer_rollout")
GAMES = [
    pytest.param("tictactoe", {}, "gumbel", marks=SHARED, id="tictactoe-gumbel"),
    pytest.param("tictactoe", {}, "puct", marks=SHARED, id="tictactoe-puct"),
    pytest.param("dots_and_boxes", {"rows": 2, "cols": 2}, "puct", id="dots_and_boxes-puct"),
    pytest.param("chain_reaction", {"rows": 3, "cols": 3}, "gumbel", id="chain_reaction-gumbel"),
]


def tiny_net(game):
    net = make_network(game, NetworkConfig(blocks=1, channels=8))
    return network_evaluator(net), init_params(net, game, jax.random.key(0))


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
    # Playout cap randomisation's fast searches add no root noise once the temperature moves
    # are played: their moves and values do not depend on the keys.
    game, rollout = integer_rollout("tictactoe", "gumbel")
    states, _ = start(game, 4)
    past = jnp.full(4, 3, jnp.int32)  # temperature_moves=3 already played
    fast = jnp.zeros(4, bool)
    runs = [rollout(None, states, past, fast, rollout_inputs(4, 4, seed)[1])[2] for seed in (1, 2)]
    np.testing.assert_array_equal(runs[0].action, runs[1].action)
    np.testing.assert_array_equal(runs[0].root_value, runs[1].root_value)
    # Inside the temperature moves fast searches explore too: other keys, other moves.
    first = jnp.zeros(4, jnp.int32)
    runs = [rollout(None, states, first, fast, rollout_inputs(4, 4, seed)[1])[2] for seed in (1, 2)]
    assert (np.asarray(runs[0].action) != np.asarray(runs[1].action)).any()
    # Full searches in the temperature moves sample: from one start, each slot its own game.
    full = jnp.ones(4, bool)
    played = rollout(None, states, jnp.zeros(4, jnp.int32), full, rollout_inputs(4, 4, 3)[1])[2]
    assert len({tuple(a) for a in np.asarray(played.action).T.tolist()}) > 1


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
    for b in range(batch):
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
@pytest.mark.parametrize(("prob", "fast"), [(0.25, 2), (1.0, 2), (0.5, 6)])
def test_chunks_emit_every_position_once_with_pcr_masks(prob, fast):
    game = games.make("tictactoe")
    evaluate, params = tiny_net(game)
    search = SearchConfig(num_simulations=6, max_num_considered_actions=4)
    cfg = SelfPlayConfig(batch_size=6, chunk_moves=5, full_search_prob=prob, fast_simulations=fast)
    init_fn, chunk_fn = make_selfplay(game, evaluate, search, cfg)
    chunk_fn = jax.jit(chunk_fn)
    carry = init_fn(jax.random.key(0))
    emitted, finished, chunks, full = 0, 0, 6, 0
    for c in range(chunks):
        carry, ex, metrics = chunk_fn(params, carry, jax.random.key(c + 1))
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
        if prob == 1.0 or fast == 6:
            assert (ex.policy_mask == valid).all()
            assert float(metrics["full_search_fraction"]) == 1.0
        emitted += int(valid.sum())
        finished += int(metrics["games_finished"])
        assert 5 <= float(metrics["mean_game_length"]) <= 9 or int(metrics["games_finished"]) == 0
    # Nothing is lost: every searched position was emitted or is still pending.
    assert emitted + int(carry.pending.valid.sum()) == chunks * 30
    assert finished > 0 and emitted > chunks * 30 // 2
    # Each move's search is drawn full with probability `prob`.
    assert 0 < full < 15 if prob < 1 and fast < 6 else full == 30


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
    for seed in range(24):
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
    carry = init_fn(jax.random.key(0))
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


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="full_search_prob"):
        SelfPlayConfig(full_search_prob=0.0)
    with pytest.raises(ValueError, match="'zz'"):
        SelfPlayConfig(value_target="zz")
    with pytest.raises(ValueError, match="chunk_moves"):
        SelfPlayConfig(chunk_moves=0)
    with pytest.raises(ValueError, match="opening_moves"):
        SelfPlayConfig(opening_moves=-1)
