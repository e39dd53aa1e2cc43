"""Chance (games/core.py, azjax/search.py): the chance contract, the search with chance nodes
against mctx's Stochastic MuZero and exact values, and no search or agent reading the dice to
come."""

from __future__ import annotations

import functools
import pathlib

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest
from helpers import random_legal_action, random_trajectories, uniform_evaluator

pytest.importorskip("pgx")

import games
from azjax import agents
from azjax.config import CHANCE_VALUES, ConfigError, SearchConfig, SelfPlayConfig, load_config
from azjax.search import _chance_fn, _chance_tree, _decision_fn, _evaluate, search_tree
from azjax.selfplay import make_rollout
from games.core import mover_rewards
from games.testing import check_game
from games.tictactoe import TicTacToe

pytestmark = pytest.mark.xdist_group("pgx")

CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "configs"
BACKGAMMON = games.make("pgx:backgammon")


class _Coin(TicTacToe):
    """Tic-Tac-Toe with a coin, tossed after every move, that changes nothing."""

    chance_outcomes = 2

    def _apply_move(self, state, action):
        return self._apply(state, action)

    def chance_probs(self, afterstate):
        return jnp.float32([0.5, 0.5])


class _Lucky(_Coin):
    """A loaded coin: after a move that leaves the game on, the mover wins one time in ten."""

    def chance_probs(self, afterstate):
        live = ~afterstate.terminated
        return jnp.where(live, jnp.float32([0.9, 0.1]), jnp.float32([1.0, 0.0]))

    def step_chance(self, afterstate, outcome):
        lucky = (outcome == 1) & ~afterstate.terminated
        return afterstate.replace(
            terminated=afterstate.terminated | lucky,
            rewards=jnp.where(
                lucky, mover_rewards(1 - afterstate.current_player, 1.0), afterstate.rewards
            ),
            legal_action_mask=afterstate.legal_action_mask & ~lucky,
        )


def _broken(**methods):
    """A _Coin with some methods replaced."""
    return type("Broken", (_Coin,), methods)()


@pytest.mark.parametrize(
    ("game", "message"),
    [
        (BACKGAMMON, None),
        (_Coin(), None),
        (_broken(chance_probs=lambda _, a: jnp.float32([0.5, 0.4])), "does not sum to one"),
        (_broken(chance_probs=lambda _, a: jnp.float32([1, 0])), r"outcomes \[1\] are never"),
        (
            _broken(step_chance=lambda _, a, o: a.replace(current_player=1 - a.current_player)),
            r"step\(state, action\) is not step_chance",
        ),
    ],
    ids=["backgammon", "coin", "not-one", "unreachable", "not-step"],
)
def test_check_game_checks_the_chance_contract(game, message):
    if message is None:
        check_game(game, num_games=2)
    else:
        with pytest.raises(AssertionError, match=message):
            check_game(game, num_games=2)


def test_backgammon_gammons_and_last_move():
    """A gammon (pgx: 2) is a plain win; no roll follows a game's last move."""

    def play(key):
        def ply(carry):
            state, i = carry
            move = random_legal_action(jax.random.fold_in(key, i), state.legal_action_mask)
            return BACKGAMMON.step(state, move), i + 1

        return jax.lax.while_loop(lambda c: ~c[0].terminated, ply, (BACKGAMMON.init(key), 0))[0]

    ends = jax.jit(jax.vmap(play))(jax.random.split(jax.random.key(7), 32))
    margin = np.abs(np.asarray(ends.env.rewards)).max(axis=1)  # pgx's
    assert (margin > 1).any()
    np.testing.assert_array_equal(np.abs(np.asarray(ends.rewards)).max(axis=1), margin > 0)

    bounded = type(BACKGAMMON)()  # compiled apart: jit keys on the game
    bounded.max_game_length = 6  # from the start, each turn's second move passes the turn
    state = bounded.init(jax.random.key(0))
    for _ in range(5):
        state = bounded.step(state, bounded.legal_actions(state)[-1])
    after = bounded.afterstate(state, bounded.legal_actions(state)[-1])
    assert bool(after.terminated) and int(after.env.current_player) != int(state.env.current_player)
    np.testing.assert_array_equal(bounded.chance_probs(after)[0], 1.0)
    jax.tree.map(np.testing.assert_array_equal, bounded.step_chance(after, 20), after)


@functools.cache
def _positions():
    """16 backgammon positions after 7 random moves, and the same with other dice to come."""
    states = jax.tree.map(
        lambda x: x[-1], random_trajectories(BACKGAMMON, jax.random.key(5), 16, 7)[1]
    )
    other = states.replace(seed=states.seed ^ jnp.uint32(0x9E3779B9))
    # `step` rolls the next dice from the seed (a search must not), `afterstate` leaves them
    move = jnp.argmax(states.legal_action_mask, axis=-1)
    step, after = jax.jit(jax.vmap(BACKGAMMON.step)), jax.jit(jax.vmap(BACKGAMMON.afterstate))
    assert (step(states, move).env._dice != step(other, move).env._dice).any()
    jax.tree.map(np.testing.assert_array_equal, after(states, move).env, after(other, move).env)
    return states, other


def _linear_evaluator(game):
    """Uniform priors and values that read the dice in the observation (as a network's do)."""
    weights = jax.random.normal(jax.random.key(42), (int(np.prod(game.observation_shape)),))

    def evaluate(params, states, key):
        obs = jax.vmap(game.observe)(states).reshape(states.terminated.shape[0], -1)
        return jnp.zeros((obs.shape[0], game.num_actions)), jnp.tanh(obs @ weights / 4)

    return evaluate


def test_chance_search_does_not_depend_on_the_dice_to_come():
    """PUCT with sampled chance values (pure MCTS's); self-play's Gumbel search: below."""
    states, other = _positions()
    config = SearchConfig(algorithm="puct", num_simulations=16, chance_value="sampled")
    search = jax.jit(
        lambda s, explore: search_tree(
            BACKGAMMON,
            _linear_evaluator(BACKGAMMON),
            None,
            s,
            jax.random.key(0),
            config,
            explore=explore,
        )[0]
    )
    legal = np.asarray(states.legal_action_mask)
    for explore in (jnp.bool_(False), jnp.bool_(True)):
        a = search(states, explore)
        jax.tree.map(np.testing.assert_array_equal, a, search(other, explore))
        assert legal[np.arange(16), np.asarray(a.action)].all()
        np.testing.assert_allclose(np.asarray(a.policy).sum(-1), 1.0, rtol=1e-5)
        assert not np.asarray(a.policy)[~legal].any()


def test_selfplay_and_agents_do_not_depend_on_the_dice_to_come():
    """Self-play (full, fast), greedy and pure MCTS's playouts under two dice seeds."""
    states, other = _positions()
    evaluate = _linear_evaluator(BACKGAMMON)
    search = SearchConfig(algorithm="gumbel", num_simulations=8)
    rollout = make_rollout(
        BACKGAMMON, evaluate, search, SelfPlayConfig(batch_size=4, temperature_moves=2)
    )
    move_number = jnp.arange(4, dtype=jnp.int32)  # the first half samples, the rest is greedy
    keys = jax.random.split(jax.random.key(9), (1, 4))
    play = jax.jit(
        lambda s, full: rollout(None, jax.tree.map(lambda x: x[:4], s), move_number, full, keys)[2]
    )
    for full in (True, False):
        a, b = play(states, jnp.array([full])), play(other, jnp.array([full]))
        for field in ("action", "policy", "root_value"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))

    greedy = jax.jit(jax.vmap(agents.make("greedy", BACKGAMMON)))
    keys = jax.random.split(jax.random.key(4), 16)
    np.testing.assert_array_equal(greedy(states, keys), greedy(other, keys))
    playouts = jax.jit(agents.rollout_evaluator(BACKGAMMON))
    values = playouts(None, states, jax.random.key(4))[1]
    np.testing.assert_array_equal(values, playouts(None, other, jax.random.key(4))[1])
    assert set(np.asarray(values).tolist()) == {-1.0, 1.0}  # playouts to the end


def test_alphabeta_is_refused_on_a_chance_game():
    with pytest.raises(ValueError, match=r"alphabeta:2 cannot play pgx:backgammon: it has chance"):
        agents.make("alphabeta:2", BACKGAMMON)
    assert load_config(CONFIGS / "pgx_backgammon.yaml").search.algorithm == "gumbel"
    with pytest.raises(ConfigError, match=r"eval.opponents\[1\]='alphabeta:2'"):
        load_config(CONFIGS / "pgx_backgammon.yaml", ["eval.opponents=[random,alphabeta:2]"])


TWO = ((0, 3, 1, 4), (0, 3, 8, 4))  # Tic-Tac-Toe: X wins at 2; X must block at 5


@pytest.mark.parametrize(
    ("algorithm", "chance_value"), [("puct", "sampled"), ("gumbel", "expected")]
)
def test_chance_search_signs_on_a_deterministic_game(algorithm, chance_value):
    """A coin that changes nothing: the search takes a win (2) and blocks a loss (5)."""
    game = _Coin()
    positions = [functools.reduce(game.step, m, game.init(jax.random.key(0))) for m in TWO]
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *positions)
    config = SearchConfig(algorithm=algorithm, num_simulations=200, chance_value=chance_value)
    out, tree = jax.jit(
        lambda s: search_tree(
            game, uniform_evaluator, None, s, jax.random.key(1), config, explore=False
        )
    )(batch)
    assert np.asarray(out.action).tolist() == [2, 5]
    np.testing.assert_allclose(tree.qvalues(jnp.full(2, tree.ROOT_INDEX))[0, 2], 1.0, rtol=1e-6)
    assert np.asarray(out.policy).argmax(-1).tolist() == [2, 5]
    assert (np.asarray(out.policy).max(-1) > 0.5).all()


@pytest.mark.parametrize("chance_value", CHANCE_VALUES)
def test_a_chance_nodes_first_value_follows_the_outcomes_probabilities(chance_value):
    """The loaded coin's first value: 0.1 expected; a win in ~1 row of 10 sampled."""
    game = _Lucky()
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), 128))
    config = SearchConfig(algorithm="puct", num_simulations=1, chance_value=chance_value)
    _, tree = jax.jit(
        lambda s: search_tree(
            game, uniform_evaluator, None, s, jax.random.key(1), config, explore=False
        )
    )(states)
    first = np.asarray(tree.raw_values[:, 1])  # the one chance node, the mover's view
    if chance_value == "expected":
        np.testing.assert_allclose(first, 0.1, rtol=1e-6)
    else:
        assert set(np.unique(first)) <= {0.0, 1.0} and 0.02 < first.mean() < 0.25


def test_chance_tree_grows_mctx_stochastic_muzero_tree():
    """`_chance_tree` with PUCT's selection grows mctx's `stochastic_muzero_policy` tree (on a
    loaded coin: its outcomes' order shows, and it compiles far faster than Backgammon)."""
    game = _Lucky()
    states = jax.tree.map(lambda x: x[2], random_trajectories(game, jax.random.key(5), 8, 2)[1])
    evaluate = _linear_evaluator(game)
    decide, roll = _decision_fn(game, evaluate, "expected"), _chance_fn(game, evaluate)
    key, sims = jax.random.key(0), 64

    @jax.jit
    def both(states):
        logits, value = _evaluate(evaluate, None, states, key)
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=states)
        invalid = ~states.legal_action_mask
        theirs = mctx.stochastic_muzero_policy(
            None, key, root, decide, roll, sims, invalid_actions=invalid, dirichlet_fraction=0.0
        ).search_tree
        # stochastic_muzero_policy's prior (noise-free Dirichlet mix, masked) and search key
        prior = jnp.log(jnp.maximum(jax.nn.softmax(logits), jnp.finfo(jnp.float32).tiny))
        prior = jnp.where(invalid, jnp.finfo(jnp.float32).min, prior - prior.max(-1, keepdims=True))
        select = functools.partial(
            mctx.muzero_action_selection,
            pb_c_init=1.25,
            pb_c_base=19652.0,
            qtransform=mctx.qtransform_by_parent_and_siblings,
        )
        ours = _chance_tree(
            decide,
            roll,
            None,
            jax.random.split(key, 3)[2],
            root=root.replace(prior_logits=prior),
            num_simulations=sims,
            invalid_actions=invalid,
            root_action_selection_fn=functools.partial(select, depth=0),
            interior_action_selection_fn=select,
        )
        return theirs, ours

    theirs, ours = both(states)
    # chance nodes searched often enough for the order of their outcomes to show
    edge, visits = np.asarray(ours.action_from_parent), np.asarray(ours.node_visits)
    assert (visits[(edge >= 0) & (edge < game.num_actions)] >= 8).sum() >= 10
    assert (edge >= game.num_actions).any()
    bare = [t.replace(embeddings=None, extra_data=None) for t in (ours, theirs)]
    jax.tree.map(functools.partial(np.testing.assert_allclose, rtol=1e-6), *bare)
