"""Chance in the game contract (games/core.py) and the search with chance nodes
(`azjax/search.py`): pgx's backgammon declares its roll, check_game checks it, the search
equals mctx's Stochastic MuZero tree, and no search (self-play, agents) reads a roll to come."""

from __future__ import annotations

import functools
import pathlib

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest
from helpers import uniform_evaluator

pytest.importorskip("pgx")

import games
from azjax import agents
from azjax.config import CHANCE_VALUES, ConfigError, SearchConfig, SelfPlayConfig, load_config
from azjax.search import (
    _chance_fn,
    _chance_tree,
    _decision_fn,
    _evaluate,
    run_search,
    search_evaluations,
    search_tree,
)
from azjax.selfplay import make_rollout
from games.core import mover_rewards, random_legal_action
from games.testing import check_game
from games.tictactoe import TicTacToe

pytestmark = pytest.mark.xdist_group("pgx")

CONFIGS = pathlib.Path(__file__).resolve().parent.parent / "configs"


def test_backgammon_passes_check_game_with_its_roll_declared():
    game = games.make("pgx:backgammon")
    assert game.has_chance and game.chance_outcomes == 21
    check_game(game, num_games=2)


def test_backgammon_heuristic_is_the_pip_count_lead():
    """Level at the start; each move (none of these hits) gains its mover the pips it ran, in
    both players' views."""
    game = games.make("pgx:backgammon")
    state = game.init(jax.random.key(0))
    assert float(game.heuristic(state, 0)) == float(game.heuristic(state, 1)) == 0.0
    lead = 0.0
    for _ in range(6):
        mover, action = int(state.current_player), game.legal_actions(state)[-1]
        state = game.step(state, action)
        lead += (1 if mover == 0 else -1) * (action % 6 + 1)  # pgx: action = 6 * source + die
        assert float(game.heuristic(state, 0)) == -float(game.heuristic(state, 1)) == lead
    # A checker on the bar is 25 pips from home: at the start each side's farthest checkers
    # are 24 pips out, so sending one to its bar costs its side a pip.
    start = game.init(jax.random.key(0))
    mover, board = int(start.current_player), start.env._board  # pgx: the mover's view
    assert int(board[0]) == 2 and int(board[23]) == -2
    for edited, lead in (
        (board.at[0].add(-1).at[24].add(1), -1.0),  # the mover's, to its bar (24)
        (board.at[23].add(1).at[25].add(-1), 1.0),  # the other's, to its bar (25)
    ):
        moved = start.replace(env=start.env.replace(_board=edited))
        assert float(game.heuristic(moved, mover)) == -float(game.heuristic(moved, 1 - mover))
        assert float(game.heuristic(moved, mover)) == lead


class _Coin(TicTacToe):
    """Tic-Tac-Toe with a coin tossed after every move that changes nothing: a valid chance
    game, broken below one way at a time."""

    chance_outcomes = 2

    def _apply_move(self, state, action):
        return self._apply(state, action)

    def chance_probs(self, afterstate):
        return jnp.float32([0.5, 0.5])


class _NotOne(_Coin):
    def chance_probs(self, afterstate):
        return jnp.float32([0.5, 0.4])


class _Unreachable(_Coin):
    def chance_probs(self, afterstate):
        return jnp.float32([1.0, 0.0])


class _NotStep(_Coin):
    def step_chance(self, afterstate, outcome):
        return afterstate.replace(current_player=1 - afterstate.current_player)


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (_Coin, None),
        (_NotOne, "chance_probs does not sum to one"),
        (_Unreachable, r"chance outcomes \[1\] are never possible"),
        (_NotStep, r"step\(state, action\) is not step_chance"),
    ],
)
def test_check_game_checks_the_chance_contract(cls, message):
    if message is None:
        check_game(cls(), num_games=2)
        return
    with pytest.raises(AssertionError, match=message):
        check_game(cls(), num_games=2)


@functools.cache
def _positions(game: games.Game) -> games.core.State:
    """16 backgammon positions after 7 random moves (the tests' own random play), made once
    (one compiled step in a loop); a test that needs fewer takes the first ones."""

    def play(key):
        def ply(i, state):
            legal = state.legal_action_mask
            move = jax.random.choice(
                jax.random.fold_in(key, i), game.num_actions, p=legal / legal.sum()
            )
            return game.step(state, move)

        return jax.lax.fori_loop(0, 7, ply, game.init(key))

    return jax.jit(jax.vmap(play))(jax.random.split(jax.random.key(5), 16))


def _first(states: games.core.State, num: int) -> games.core.State:
    return jax.tree.map(lambda x: x[:num], states)


def _reseeded(states: games.core.State) -> games.core.State:
    """The same positions with other dice to come."""
    return states.replace(seed=states.seed ^ jnp.uint32(0x9E3779B9))


def _linear_evaluator(game: games.Game):
    """A fixed evaluator whose values depend on the dice in the observation (as a network's
    do): uniform priors, `tanh` of a random linear function of the observation."""
    weights = jax.random.normal(jax.random.key(42), (int(np.prod(game.observation_shape)),))

    def evaluate(params, states, key):
        obs = jax.vmap(game.observe)(states).reshape(states.terminated.shape[0], -1)
        return jnp.zeros((obs.shape[0], game.num_actions)), jnp.tanh(obs @ weights / 4)

    return evaluate


def test_step_reveals_the_roll_and_afterstate_does_not():
    """The leak's cause: `step` rolls the next turn's dice from the State's seed, so a search
    that steps the State sees them; `afterstate` leaves them unrolled whatever the seed."""
    game = games.make("pgx:backgammon")
    states = _positions(game)
    other = _reseeded(states)
    # Each game's first legal move that hands the turn over: after the last die of a turn.
    move = jnp.argmax(states.legal_action_mask, axis=-1)
    afterstate, step = jax.jit(jax.vmap(game.afterstate)), jax.jit(jax.vmap(game.step))
    due = np.asarray(afterstate(states, move).chance_due)
    assert due.any()
    dice = np.asarray(step(states, move).env._dice)
    other_dice = np.asarray(step(other, move).env._dice)
    assert (dice[due] != other_dice[due]).any(axis=-1).any()
    for x, y in zip(
        jax.tree.leaves(afterstate(states, move).env),
        jax.tree.leaves(afterstate(other, move).env),
        strict=True,
    ):
        np.testing.assert_array_equal(x, y)


def test_a_roll_comes_before_any_move_and_shows_in_the_observation():
    """An afterstate awaiting its roll has no legal move; after `step_chance` the observation
    shows the dice rolled (pgx's last six features count the playable dice by face)."""
    game = games.make("pgx:backgammon")
    states = _positions(game)
    move = jnp.argmax(states.legal_action_mask, axis=-1)
    after = jax.jit(jax.vmap(game.afterstate))(states, move)
    due = np.asarray(after.chance_due)
    assert due.any() and not np.asarray(after.legal_action_mask)[due].any()
    roll = jax.jit(jax.vmap(game.step_chance, in_axes=(0, None)))
    rolls = [(a, b) for a in range(6) for b in range(a, 6)]  # the lower die first
    for outcome, (a, b) in enumerate(rolls):
        rolled = roll(after, outcome)
        shown = np.asarray(jax.vmap(game.observe)(rolled)).reshape(len(due), -1)[:, -6:]
        faces = np.bincount([a] * 4 if a == b else [a, b], minlength=6)
        np.testing.assert_array_equal(shown[due], np.broadcast_to(faces, (due.sum(), 6)))
        assert np.asarray(rolled.legal_action_mask)[due].any(axis=-1).all()


def test_a_gammon_is_a_plain_win():
    """pgx scores a won backgammon game 1, 2 (a gammon) or 3 (a backgammon); azjax's reward is
    its sign. Random play to the end wins some games by a gammon."""
    game = games.make("pgx:backgammon")

    def play(key):
        def ply(carry):
            state, i = carry
            move = random_legal_action(jax.random.fold_in(key, i), state.legal_action_mask)
            return game.step(state, move), i + 1

        start = (game.init(key), jnp.int32(0))
        return jax.lax.while_loop(lambda carry: ~carry[0].terminated, ply, start)[0]

    ends = jax.jit(jax.vmap(play))(jax.random.split(jax.random.key(7), 32))
    assert np.asarray(ends.terminated).all()
    margin = np.abs(np.asarray(ends.env.rewards)).max(axis=1)  # pgx's
    assert (margin > 1).any()
    np.testing.assert_array_equal(np.abs(np.asarray(ends.rewards)).max(axis=1), margin > 0)


@functools.cache
def _chance_search(algorithm: str, chance_value: str):
    """`search_tree` with chance nodes over backgammon positions with the dice-reading
    `_linear_evaluator`, jitted once per settings (`explore` traced): the tests below share it."""
    game = games.make("pgx:backgammon")
    config = SearchConfig(algorithm=algorithm, num_simulations=16, chance_value=chance_value)
    evaluate = _linear_evaluator(game)
    return jax.jit(
        lambda states, explore: search_tree(
            game, evaluate, None, states, jax.random.key(0), config, explore=explore
        )
    )


# Both searches with chance nodes and both first values of a chance node (mctx's PUCT with one
# drawn outcome as pure MCTS plays it, our Gumbel with the expectation as self-play does).
CHANCE_SEARCHES = [("puct", "sampled"), ("gumbel", "expected")]


@pytest.mark.parametrize(("algorithm", "chance_value"), CHANCE_SEARCHES)
def test_chance_search_does_not_depend_on_the_dice_to_come(algorithm, chance_value):
    """The same positions searched under two dice seeds (the search key the same), with and
    without root noise, give the same moves, policies and values (a tree that steps `step`
    would choose differently in some of these positions)."""
    game = games.make("pgx:backgammon")
    states = _positions(game)
    search = _chance_search(algorithm, chance_value)
    legal = np.asarray(states.legal_action_mask)
    for explore in (jnp.bool_(False), jnp.bool_(True)):
        a, b = search(states, explore)[0], search(_reseeded(states), explore)[0]
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
        assert legal[np.arange(16), np.asarray(a.action)].all()
        np.testing.assert_allclose(np.asarray(a.policy).sum(-1), 1.0, rtol=1e-5)
        assert not np.asarray(a.policy)[~legal].any()


@pytest.mark.parametrize(("algorithm", "chance_value"), CHANCE_SEARCHES)
def test_chance_tree_stores_each_node_as_its_edge_made_it(algorithm, chance_value):
    """In the tree every chance node holds the Afterstate of its parent's State and move
    (with that State's mover), and every decision node below a chance node holds `step_chance`
    of its parent's Afterstate with the outcome of its edge: the rolled State, not another."""
    game = games.make("pgx:backgammon")
    _, tree = _chance_search(algorithm, chance_value)(_positions(game), jnp.bool_(True))
    states, afters, decision = (
        tree.embeddings.state,
        tree.embeddings.after,
        tree.embeddings.decision,
    )
    parents, actions = np.asarray(tree.parents), np.asarray(tree.action_from_parent)
    decision = np.asarray(decision)
    b, n = np.nonzero(parents >= 0)
    p, a = parents[b, n], actions[b, n]
    moved, rolled = ~decision[b, n] & decision[b, p], decision[b, n] & ~decision[b, p]
    assert moved.sum() > 16 and rolled.sum() > 16 and (moved | rolled).all()

    def pick(tree, batch, node):
        return jax.tree.map(lambda x: np.asarray(x)[batch, node], tree)

    after = jax.jit(jax.vmap(game.afterstate))(
        pick(states, b[moved], p[moved]), jnp.asarray(a[moved])
    )
    jax.tree.map(np.testing.assert_array_equal, pick(afters, b[moved], n[moved]).state, after)
    np.testing.assert_array_equal(
        pick(afters, b[moved], n[moved]).mover, pick(states, b[moved], p[moved]).current_player
    )
    outcomes = jnp.asarray(a[rolled] - game.num_actions)
    rolled_states = jax.jit(jax.vmap(game.step_chance))(
        pick(afters, b[rolled], p[rolled]).state, outcomes
    )
    jax.tree.map(np.testing.assert_array_equal, pick(states, b[rolled], n[rolled]), rolled_states)


@pytest.mark.parametrize(("algorithm", "chance_value"), CHANCE_SEARCHES)
def test_chance_search_signs_on_a_deterministic_game(algorithm, chance_value):
    """On Tic-Tac-Toe with a coin that changes nothing the search with chance nodes takes a win
    (X at 2) and blocks a loss (O threatens 5): rewards and discounts are in the mover's view.
    Both positions in one batch: one compiled search."""
    game = _Coin()
    assert game.has_chance
    positions = []
    for moves in ((0, 3, 1, 4), (0, 3, 8, 4)):
        state = game.init(jax.random.key(0))
        for move in moves:
            state = game.step(state, move)
        positions.append(state)
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *positions)

    config = SearchConfig(algorithm=algorithm, num_simulations=200, chance_value=chance_value)
    search = jax.jit(
        lambda s: search_tree(
            game, uniform_evaluator, None, s, jax.random.key(1), config, explore=False
        )
    )
    out, tree = search(batch)
    assert np.asarray(out.action).tolist() == [2, 5]
    # every simulation through the win backs up the win: the roll's edge carries the reward
    win = tree.qvalues(jnp.full(2, tree.ROOT_INDEX))[0, 2]
    np.testing.assert_allclose(win, 1.0, rtol=1e-6)
    # The policy target learns it too (the prior is flat): Gumbel's softmax of prior + completed
    # Q, PUCT's visits.
    assert np.asarray(out.policy).argmax(-1).tolist() == [2, 5]
    assert (np.asarray(out.policy).max(-1) > 0.5).all()


class _Lucky(_Coin):
    """Tic-Tac-Toe where a loaded coin, tossed after a move that leaves the game on, ends it
    as the mover's win one time in ten."""

    def chance_probs(self, afterstate):
        live = ~afterstate.terminated
        return jnp.where(live, jnp.float32([0.9, 0.1]), jnp.float32([1.0, 0.0]))

    def step_chance(self, afterstate, outcome):
        lucky = (outcome == 1) & ~afterstate.terminated
        mover = 1 - afterstate.current_player
        return afterstate.replace(
            terminated=afterstate.terminated | lucky,
            rewards=jnp.where(lucky, mover_rewards(mover, 1.0), afterstate.rewards),
            legal_action_mask=afterstate.legal_action_mask & ~lucky,
        )


@pytest.mark.parametrize("chance_value", CHANCE_VALUES)
def test_a_chance_nodes_first_value_follows_the_outcomes_probabilities(chance_value):
    """A flat evaluator's first value of the chance node after a move is the loaded coin's:
    the expectation 0.1 under "expected", and under "sampled" a win (1) for the rows whose
    drawn toss came up lucky, drawn by the coin's probabilities (about 1 row in 10, not 1 in
    2)."""
    game, rows = _Lucky(), 128
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), rows))

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
        assert set(np.unique(first)) <= {0.0, 1.0}
        assert 0.02 < first.mean() < 0.25, first.mean()


def test_chance_tree_grows_mctx_stochastic_muzero_tree():
    """`_chance_tree`, the tree with chance nodes that Gumbel's search grows (built from mctx's
    public pieces), given PUCT's selection grows the same tree as mctx's own
    `stochastic_muzero_policy` over backgammon positions: the same nodes, visits, values,
    rewards and discounts, the outcomes visited in the same order."""
    game = games.make("pgx:backgammon")
    states = _first(_positions(game), 8)
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
        # what stochastic_muzero_policy does before its search: the prior through its
        # (noise-free) Dirichlet mix and its masking, the search's key the third of three
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
    assert ours.children_visits.shape == (8, sims + 1, game.num_actions)
    # chance nodes (reached by a move) searched often enough for the order of their outcomes
    # to show, and decision nodes reached by a roll
    edge = np.asarray(ours.action_from_parent)
    visits = np.asarray(ours.node_visits)
    assert (visits[(edge >= 0) & (edge < game.num_actions)] >= 8).sum() >= 10
    assert (edge >= game.num_actions).any()
    for field in (
        "node_visits",
        "raw_values",
        "node_values",
        "parents",
        "action_from_parent",
        "children_index",
        "children_prior_logits",
        "children_visits",
        "children_rewards",
        "children_discounts",
        "children_values",
        "root_invalid_actions",
    ):
        np.testing.assert_allclose(
            getattr(ours, field), getattr(theirs, field), rtol=1e-6, err_msg=field
        )


def test_selfplay_moves_do_not_depend_on_the_dice_to_come():
    """One self-play step (sampled and greedy moves, full and fast searches) from the same
    positions under two dice seeds: the same moves, policy targets and searched values."""
    game = games.make("pgx:backgammon")
    states = _first(_positions(game), 4)
    search = SearchConfig(algorithm="gumbel", num_simulations=8)
    rollout = make_rollout(
        game, _linear_evaluator(game), search, SelfPlayConfig(batch_size=4, temperature_moves=2)
    )
    move_number = jnp.arange(4, dtype=jnp.int32)  # the first half samples, the rest is greedy
    keys = jax.random.split(jax.random.key(9), (1, 4))
    play = jax.jit(lambda s, full: rollout(None, s, move_number, full, keys)[2])
    for full in (True, False):
        a = play(states, jnp.array([full]))
        b = play(_reseeded(states), jnp.array([full]))
        for field in ("action", "policy", "root_value"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_greedy_agent_does_not_depend_on_the_dice_to_come():
    game = games.make("pgx:backgammon")
    states = _first(_positions(game), 2)
    agent = agents.make("greedy", game)
    keys = jax.random.split(jax.random.key(4), 2)
    play = jax.jit(jax.vmap(agent))
    a, b = play(states, keys), play(_reseeded(states), keys)
    np.testing.assert_array_equal(a, b)
    assert np.asarray(states.legal_action_mask)[np.arange(2), np.asarray(a)].all()


def test_rollout_values_do_not_depend_on_the_dice_to_come():
    """Pure MCTS (`mcts:N`) values its leaves by random playouts: their dice are drawn from
    the key, never from the State, so two dice seeds give the same playouts (its search is
    `test_chance_search_does_not_depend_on_the_dice_to_come[puct-sampled]`'s)."""
    game = games.make("pgx:backgammon")
    states = _positions(game)
    evaluate = jax.jit(agents.rollout_evaluator(game))
    key = jax.random.key(4)
    logits, values = evaluate(None, states, key)
    np.testing.assert_array_equal(values, evaluate(None, _reseeded(states), key)[1])
    assert set(np.asarray(values).tolist()) == {-1.0, 1.0}  # playouts to the end: won or lost
    assert not np.asarray(logits).any()


def test_alphabeta_refuses_a_chance_game():
    with pytest.raises(ValueError, match=r"alphabeta:2 cannot play pgx:backgammon: it has chance"):
        agents.make("alphabeta:2", games.make("pgx:backgammon"))


def test_config_refuses_alphabeta_on_a_chance_game():
    for name in ("pgx_backgammon.yaml", "pgx_backgammon_gpu.yaml"):
        assert load_config(CONFIGS / name).search.algorithm == "gumbel"
    load_config(CONFIGS / "pgx_backgammon.yaml", ["search.algorithm=puct"])
    with pytest.raises(ConfigError, match=r"eval.opponents\[1\]='alphabeta:2'"):
        load_config(CONFIGS / "pgx_backgammon.yaml", ["eval.opponents=[random,alphabeta:2]"])


@pytest.mark.parametrize(
    ("chance_value", "per_simulation"), [("expected", 1 + 2), ("sampled", 1 + 1)]
)
def test_search_evaluations_counts_every_row_the_evaluator_sees(chance_value, per_simulation):
    """`search_evaluations` (the trainer's evaluations/s) against the rows the evaluator is
    called on: the root, each simulation's chance step, and its decision step's outcomes."""
    game, rows = _Coin(), []

    def counted(params, states, key):
        batch = states.terminated.shape[0]
        jax.debug.callback(lambda: rows.append(batch))
        return jnp.zeros((batch, game.num_actions)), jnp.zeros(batch)

    config = SearchConfig(num_simulations=3, chance_value=chance_value)
    states = jax.tree.map(lambda x: x[None], game.init(jax.random.key(0)))
    jax.block_until_ready(run_search(game, counted, None, states, jax.random.key(1), config))
    jax.effects_barrier()
    assert sum(rows) == search_evaluations(game, config) == 1 + 3 * per_simulation
    assert search_evaluations(TicTacToe(), config, num_simulations=5) == 1 + 5


def test_the_move_that_ends_a_game_is_followed_by_no_roll():
    """A game ended by its length bound rolls no dice after its last move, though the turn
    passes: every probability on outcome 0, and no outcome changes the afterstate."""
    bounded = type(games.make("pgx:backgammon"))()  # compiled apart: jit keys on the game
    bounded.max_game_length = 6  # from the start, each turn's second move passes the turn
    state = bounded.init(jax.random.key(0))
    for _ in range(5):
        state = bounded.step(state, bounded.legal_actions(state)[-1])
    after = bounded.afterstate(state, bounded.legal_actions(state)[-1])
    assert bool(after.terminated) and int(after.env.current_player) != int(state.env.current_player)
    np.testing.assert_array_equal(bounded.chance_probs(after)[0], 1.0)
    for got, kept in zip(
        jax.tree.leaves(bounded.step_chance(after, 20)), jax.tree.leaves(after), strict=True
    ):
        np.testing.assert_array_equal(got, kept)
