"""The mctx search over the games (azjax/search.py): mctx's own Gumbel policy as the reference,
legal moves and terminal handling everywhere in the tree, tactics with a uniform net, greedy
and sampled moves under root noise."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest
from helpers import index, random_trajectories, uniform_evaluator

import games
from azjax.search import SearchConfig, _evaluate, reward, run_search, search_tree
from games.core import discount

ALGORITHMS = ("gumbel", "puct")


def adversarial_evaluator(params, states, key):
    """Random values and priors that strongly prefer illegal actions."""
    logit_key, value_key = jax.random.split(key)
    legal = states.legal_action_mask
    noise = jax.random.normal(logit_key, legal.shape)
    logits = jnp.where(legal, noise, 8.0 + noise)
    return logits, jax.random.uniform(value_key, legal.shape[:1], minval=-1.0, maxval=1.0)


def stack(states):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def positions(game, num, seed=0, finished=False):
    """`num` positions of random games: live ones, the last finished with `finished`."""
    _, states = random_trajectories(game, jax.random.key(seed), num, game.max_game_length)
    states, rng = jax.tree.map(np.asarray, states), np.random.default_rng(seed)
    done = [finished and b == num - 1 for b in range(num)]
    plies = [rng.choice(np.flatnonzero(states.terminated[:, b] == done[b])) for b in range(num)]
    return stack([index(states, int(t), b) for b, t in enumerate(plies)])


@functools.cache
def tree_search_fn(game, algorithm, simulations, evaluate=adversarial_evaluator, **kwargs):
    """`search_tree`, jitted once per settings (`explore` and `sample` traced)."""
    config = SearchConfig(algorithm=algorithm, num_simulations=simulations, **kwargs)
    return jax.jit(
        lambda states, key, explore=True, sample=None: search_tree(
            game, evaluate, None, states, key, config, explore=explore, sample=sample
        )
    )


def test_gumbel_search_is_mctxs_gumbel_muzero_policy():
    """Dots and Boxes 2x2 (repeated turns), root noise, random values: mctx's own result."""
    game = games.make("dots_and_boxes", rows=2, cols=2)
    states = positions(game, 6, seed=4)
    config = SearchConfig(algorithm="gumbel", num_simulations=16)

    def recurrent_fn(params, key, action, states):  # the tree holding the States themselves
        children = jax.vmap(game.step)(states, action)
        logits, value = _evaluate(adversarial_evaluator, params, children, key)
        step = mctx.RecurrentFnOutput(
            reward=jax.vmap(reward)(states, children),
            discount=jax.vmap(discount)(states, children),
            prior_logits=logits,
            value=value,
        )
        return step, children

    @jax.jit
    def theirs_fn(states, key):  # search_tree's keys and root
        root_key, _, search_key, _ = jax.random.split(key, 4)
        logits, value = _evaluate(adversarial_evaluator, None, states, root_key)
        return mctx.gumbel_muzero_policy(
            None,
            search_key,
            mctx.RootFnOutput(prior_logits=logits, value=value, embedding=states),
            recurrent_fn,
            num_simulations=config.num_simulations,
            invalid_actions=~states.legal_action_mask,
            max_num_considered_actions=config.max_num_considered_actions,
            gumbel_scale=jnp.full((6, 1), config.gumbel_scale),
        )

    theirs = theirs_fn(states, jax.random.key(5))
    ours, tree = tree_search_fn(game, "gumbel", 16)(states, jax.random.key(5))
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_allclose(ours.policy, theirs.action_weights, rtol=1e-6)
    np.testing.assert_allclose(ours.root_value, theirs.search_tree.summary().value, rtol=1e-6)
    for field in ("node_visits", "node_values", "children_visits", "children_values"):
        np.testing.assert_allclose(getattr(tree, field), getattr(theirs.search_tree, field), 1e-6)
    assert len(set(np.asarray(ours.action).tolist())) > 1


@pytest.mark.parametrize(
    ("name", "kwargs", "algorithm"),
    [
        ("othello", {"size": 6}, "gumbel"),  # 37 actions, more than Gumbel considers; passes
        ("dots_and_boxes", {"rows": 2, "cols": 2}, "puct"),  # the mover moves again
        ("chain_reaction", {"rows": 3, "cols": 3}, "gumbel"),
    ],
    ids=["othello-gumbel", "dots_and_boxes-puct", "chain_reaction-gumbel"],
)
def test_only_legal_actions_anywhere_in_the_tree(name, kwargs, algorithm):
    """Priors preferring illegal moves; discounts 0/+1/-1; a finished game gets move 0."""
    game = games.make(name, **kwargs)
    states = positions(game, 6, seed=1, finished=True)
    search = tree_search_fn(game, algorithm, 24)
    out, tree = jax.tree.map(np.asarray, search(states, jax.random.key(2)))
    legal = np.asarray(states.legal_action_mask)
    assert legal[np.arange(5), out.action[:5]].all(), "an illegal move was chosen"
    assert (out.policy[~legal] == 0).all()
    np.testing.assert_allclose(out.policy[:5].sum(-1), 1.0, rtol=1e-5)
    assert out.action[5] == 0 and out.root_value[5] == 0 and not out.policy[5].any()

    nodes = tree.embeddings  # the States
    live = (tree.node_visits > 0) & ~nodes.terminated
    assert live.sum() > 6, "the search never went below the root"
    visited = tree.children_visits > 0
    assert not (visited & ~nodes.legal_action_mask & live[..., None]).any()
    child = np.maximum(tree.children_index, 0)
    has_child = tree.children_index >= 0
    rows = np.arange(6)[:, None, None]
    same = nodes.current_player[rows, child] == nodes.current_player[..., None]
    expected = np.where(nodes.terminated[rows, child], 0.0, np.where(same, 1.0, -1.0))
    np.testing.assert_array_equal(tree.children_discounts[has_child], expected[has_child])
    assert (tree.children_rewards[has_child & nodes.terminated[..., None]] == 0).all()
    with pytest.raises(ValueError, match=r"^num_simulations must be >= 1, got 0$"):
        run_search(game, adversarial_evaluator, None, states, jax.random.key(1), SearchConfig(), 0)


# Tic-Tac-Toe positions (moves from the start) and the moves that win or block at once.
TACTICS = [
    ((0, 3, 1, 4), {2}),  # X wins at 2
    ((4, 0, 8, 2, 6), {1}),  # O wins at 1 (X threatens 7)
    ((0, 4, 8, 2, 6, 3), {7}),  # X wins at 7 (O threatens 5)
    ((0, 3, 8, 4), {5}),  # X blocks 3-4-5 (the blocks do not lose anyway)
    ((4, 0, 2), {6}),  # O blocks 2-4-6
    ((0, 4, 1), {2}),  # O blocks 0-1-2
]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_uniform_net_wins_and_blocks_at_once(algorithm):
    """Greedy moves win or block; sampled ones mostly do, and the policy target agrees."""
    game = games.make("tictactoe")
    start = game.init(jax.random.key(0))
    states = stack([functools.reduce(game.checked_step, moves, start) for moves, _ in TACTICS])
    answers = [answer for _, answer in TACTICS]
    search = tree_search_fn(game, algorithm, 128, uniform_evaluator)
    out = search(states, jax.random.key(0), False)[0]
    assert [int(a) in answer for a, answer in zip(out.action, answers, strict=True)] == [True] * 6
    hits, legal = 0, np.asarray(states.legal_action_mask)
    for seed in range(4):
        out = search(states, jax.random.key(seed), True)[0]
        assert legal[np.arange(6), np.asarray(out.action)].all()
        hits += sum(int(a) in answer for a, answer in zip(out.action, answers, strict=True))
        mass = [float(sum(out.policy[i, a] for a in answer)) for i, answer in enumerate(answers)]
        assert np.mean(mass) > 0.5
    assert hits > 12, hits


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_greedy_and_cut_moves_under_root_noise(algorithm):
    """Greedy: most visited; sampled moves over `sample_cutoff` below the best Q: greedy."""
    game = games.make("connect4")
    states = positions(game, 16, seed=7)
    legal = np.asarray(states.legal_action_mask)

    def run(cutoff, sample):
        moves, gaps = [], []
        search = tree_search_fn(game, algorithm, 24, gumbel_scale=3.0, sample_cutoff=cutoff)
        for seed in range(3):
            out, tree = search(states, jax.random.key(seed), True, np.full(16, sample))
            q = np.asarray(tree.qvalues(jnp.zeros(16, jnp.int32)))
            visited = np.asarray(tree.children_visits[:, 0]) > 0
            action = np.asarray(out.action)
            assert legal[np.arange(16), action].all()
            if not sample:
                visits = np.asarray(tree.summary().visit_counts)
                np.testing.assert_array_equal(visits[np.arange(16), action], visits.max(-1))
            moves.extend(action)
            gaps.extend(np.where(visited, q, -np.inf).max(-1) - q[np.arange(16), action])
        return np.array(moves), np.array(gaps)

    sampled, gaps = run(None, True)
    greedy, _ = run(None, False)
    cut, cut_gaps = run(0.05, True)
    far = gaps > 0.05
    assert (far & (sampled != greedy)).any(), "no sampled move to cut: the test shows nothing"
    np.testing.assert_array_equal(cut[far], greedy[far])
    np.testing.assert_array_equal(cut[~far], sampled[~far])
    assert ((cut_gaps <= 0.05) | (cut == greedy)).all()
