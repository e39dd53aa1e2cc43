"""The mctx search over the games: mctx's own policy as the reference, legality everywhere in
the tree, tactics with a uniform net.

Positions come from random play; which moves win or block is decided by a plain-Python
Tic-Tac-Toe checker written here (independent of the games' jax rules) or, for Dots and Boxes,
by a hand-built position whose answer is worked out in the comments.
"""

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
# Every game, at small sizes where the game has them (compilation is what costs here).
ALL_GAMES = [
    ("tictactoe", {}),
    ("connect4", {}),
    ("othello", {"size": 6}),
    ("dots_and_boxes", {"rows": 2, "cols": 2}),
    ("chain_reaction", {"rows": 3, "cols": 3}),
]


def adversarial_evaluator(params, states, key):
    """Random values and priors that strongly prefer illegal actions."""
    del params
    logit_key, value_key = jax.random.split(key)
    legal = states.legal_action_mask
    noise = jax.random.normal(logit_key, legal.shape)
    logits = jnp.where(legal, noise, 8.0 + noise)
    return logits, jax.random.uniform(value_key, legal.shape[:1], minval=-1.0, maxval=1.0)


def test_gumbel_search_is_mctxs_gumbel_muzero_policy():
    """The Gumbel search gives what mctx's own `gumbel_muzero_policy` gives over the same
    States, to the bit: moves, policies, root values and the tree's visits and values, on Dots
    and Boxes 2x2 (the mover may move again) with root noise and random leaf values."""
    game = games.make("dots_and_boxes", rows=2, cols=2)
    states = live_positions(game, 6, seed=4)
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

    def theirs_fn(states, key):  # search_tree's keys and root
        root_key, _, search_key, _ = jax.random.split(key, 4)
        logits, value = _evaluate(adversarial_evaluator, None, states, root_key)
        root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=states)
        return mctx.gumbel_muzero_policy(
            None,
            search_key,
            root,
            recurrent_fn,
            num_simulations=config.num_simulations,
            invalid_actions=~states.legal_action_mask,
            max_num_considered_actions=config.max_num_considered_actions,
            gumbel_scale=jnp.full((6, 1), config.gumbel_scale),
        )

    key = jax.random.key(5)
    theirs = jax.jit(theirs_fn)(states, key)
    ours, tree = tree_search_fn(game, "gumbel", config.num_simulations)(states, key)
    np.testing.assert_array_equal(ours.action, theirs.action)
    np.testing.assert_array_equal(ours.policy, theirs.action_weights)
    np.testing.assert_array_equal(ours.root_value, theirs.search_tree.summary().value)
    for field in ("node_visits", "node_values", "children_visits", "children_values"):
        np.testing.assert_array_equal(getattr(tree, field), getattr(theirs.search_tree, field))
    assert len(set(np.asarray(ours.action).tolist())) > 1


def stack_states(states):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def live_positions(game, num, seed=0, finished=False):
    """`num` distinct positions reached by random play, at varied plies: live ones, the last
    one a finished game with `finished`."""
    _, states = random_trajectories(game, jax.random.key(seed), num, game.max_game_length)
    states = jax.tree.map(np.asarray, states)
    rng = np.random.default_rng(seed)
    picked = []
    for b in range(num):
        done = finished and b == num - 1
        picked.append(
            index(states, int(rng.choice(np.flatnonzero(states.terminated[:, b] == done))), b)
        )
    return stack_states(picked)


@functools.cache
def tree_search_fn(game, algorithm, simulations):
    config = SearchConfig(algorithm=algorithm, num_simulations=simulations)
    return jax.jit(
        lambda states, key: search_tree(game, adversarial_evaluator, None, states, key, config)
    )


# Every game under one algorithm (Gumbel on Othello, whose 37 actions are more than it
# considers at the root; PUCT on Dots and Boxes, where the mover moves again, which the mctx
# comparison above searches with Gumbel): the checks fail on a game's positions or on an
# algorithm's masking, not on a pair of them.
TREE_CASES = [
    (*ALL_GAMES[0], "gumbel"),
    (*ALL_GAMES[1], "puct"),
    (*ALL_GAMES[2], "gumbel"),
    (*ALL_GAMES[3], "puct"),
    (*ALL_GAMES[4], "gumbel"),
]


@pytest.mark.parametrize(
    "name,kwargs,algorithm", TREE_CASES, ids=[f"{c[0]}-{c[2]}" for c in TREE_CASES]
)
def test_only_legal_actions_anywhere_in_the_tree(name, kwargs, algorithm):
    """Five live positions and a finished game, searched with priors that prefer illegal moves:
    legal moves and policies only, at the root and below; the finished game gets move 0, no
    policy and value 0."""
    game = games.make(name, **kwargs)
    states = live_positions(game, 6, seed=1, finished=True)
    out, tree = tree_search_fn(game, algorithm, 24)(states, jax.random.key(2))
    out, tree = jax.tree.map(np.asarray, (out, tree))
    legal = np.asarray(states.legal_action_mask)
    assert legal[np.arange(5), out.action[:5]].all(), "an illegal move was chosen"
    assert (out.policy[~legal] == 0).all()
    np.testing.assert_allclose(out.policy[:5].sum(-1), 1.0, rtol=1e-5)
    assert out.action[5] == 0 and out.root_value[5] == 0 and not out.policy[5].any()

    expanded = tree.node_visits > 0  # [B, nodes]
    nodes = tree.embeddings  # the States
    node_legal = nodes.legal_action_mask  # [B, nodes, A]
    node_done = nodes.terminated
    visited = tree.children_visits > 0  # [B, nodes, A]
    live = expanded & ~node_done
    assert live.sum() > 6, "the search never went below the root"
    # Interior nodes of live positions only ever visit legal actions.
    assert not (visited & ~node_legal & live[..., None]).any(), "an illegal action was searched"
    # Edges: discount 0 into terminal states (and below them), +1 when the mover repeats, else -1.
    child = tree.children_index  # -1 where unexpanded
    has_child = child >= 0
    b_idx = np.arange(6)[:, None, None]
    child_done = node_done[b_idx, np.maximum(child, 0)]
    child_player = nodes.current_player[b_idx, np.maximum(child, 0)]
    parent_player = nodes.current_player[..., None]
    expected = np.where(child_done, 0.0, np.where(child_player == parent_player, 1.0, -1.0))
    np.testing.assert_array_equal(tree.children_discounts[has_child], expected[has_child])
    # Below a terminal node nothing happens: reward 0 (its value stays 0).
    below_terminal = has_child & node_done[..., None]
    assert (tree.children_rewards[below_terminal] == 0).all()


# ----------------------------------------------------------------------------- tactics


@functools.cache
def uniform_search_fn(game, algorithm, simulations):
    """The search with the uniform net, jitted once per game and settings: `explore` (root
    noise, sampled moves) is traced, so the tactics tests with and without it share it."""
    config = SearchConfig(algorithm=algorithm, num_simulations=simulations)
    return jax.jit(
        lambda states, key, explore: run_search(
            game, uniform_evaluator, None, states, key, config, explore=explore
        )
    )


def ttt_winning_cells(cells, sign):
    lines = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
    out = set()
    for line in lines:
        values = [cells[i] for i in line]
        if values.count(sign) == 2 and values.count(0) == 1:
            out.add(line[values.index(0)])
    return out


@functools.cache
def ttt_value(cells, sign):
    """Plain minimax: the result for `sign` to move on a tic-tac-toe board (tuple of 9)."""
    if ttt_winning_cells(cells, sign):
        return 1
    empty = [i for i in range(9) if cells[i] == 0]
    if not empty:
        return 0
    return max(-ttt_value((*cells[:i], sign, *cells[i + 1 :]), -sign) for i in empty)


def tactical_positions(kind, count, seed):
    """(states, answers): Tic-Tac-Toe positions where the mover can win at once ("win") or must
    block the opponent's only immediate win, and the block does not lose anyway ("block");
    answers are the correct moves (sets), found by the plain-Python checkers above."""
    game = games.make("tictactoe")
    _, states = random_trajectories(game, jax.random.key(seed), 256, game.max_game_length)
    states = jax.tree.map(np.asarray, states)
    found, answers = [], []
    for t in range(states.terminated.shape[0]):
        for b in range(states.terminated.shape[1]):
            state = index(states, t, b)
            if state.terminated or len(found) == count:
                continue
            sign = 1 if int(state.current_player) == 0 else -1
            cells = tuple(v for row in np.asarray(game.board(state)).tolist() for v in row)
            mine, theirs = ttt_winning_cells(cells, sign), ttt_winning_cells(cells, -sign)
            if kind == "win":
                answer = mine
            elif not mine and len(theirs) == 1:
                (cell,) = theirs
                lost = -ttt_value((*cells[:cell], sign, *cells[cell + 1 :]), -sign) < 0
                answer = None if lost else theirs
            else:
                answer = None
            if answer:
                found.append(state)
                answers.append(answer)
    assert len(found) == count, f"only {len(found)} {kind} positions found"
    return stack_states(found), answers


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("kind", ["win", "block"])
def test_uniform_net_finds_immediate_win_and_blocks_immediate_loss(kind, algorithm):
    game = games.make("tictactoe")
    states, answers = tactical_positions(kind, 8, seed=3)
    out = uniform_search_fn(game, algorithm, 128)(states, jax.random.key(0), False)
    chosen = np.asarray(out.action).tolist()
    wrong = [(i, c, a) for i, (c, a) in enumerate(zip(chosen, answers, strict=True)) if c not in a]
    assert not wrong, f"(position, chosen, correct): {wrong}"
    if kind == "win":
        # The root value approaches the win (+1) seen through the terminal reward.
        assert (np.asarray(out.root_value) > 0.3).all()


def test_dots_and_boxes_takes_the_chain_on_repeated_turns():
    """One row of three boxes. Every top and bottom line and the left end are drawn:

        +---+---+---+
        |   .   .   .      lines 7, 8, 9 (the verticals right of boxes 0, 1, 2) are open
        +---+---+---+

    Drawing 7 closes box 0 and keeps the turn, then 8 closes box 1, then 9 closes box 2: the
    mover wins 3-0 through two +1 discounts. Drawing 8 or 9 first closes nothing and hands the
    whole chain to the opponent. With a wrong discount sign on repeated turns the search
    would value 7 at -1 and avoid it.
    """
    game = games.make("dots_and_boxes", rows=1, cols=3)
    assert game.num_actions == 10
    state = game.init(jax.random.key(0))
    for action in [0, 1, 2, 3, 4, 5, 6]:
        state = game.checked_step(state, action)
    assert game.legal_actions(state) == [7, 8, 9]
    assert int(state.scores.sum()) == 0
    states = stack_states([state] * 2)
    for algorithm in ALGORITHMS:
        out = uniform_search_fn(game, algorithm, 48)(states, jax.random.key(1), False)
        assert np.asarray(out.action).tolist() == [7, 7], algorithm
        # The policy target agrees (the Gumbel root value averages every considered action's
        # visits, so it says less here).
        assert (np.asarray(out.policy[:, 7]) > 0.5).all(), algorithm


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_exploring_search_still_prefers_the_win_and_samples_legal_moves(algorithm):
    game = games.make("tictactoe")
    states, answers = tactical_positions("win", 8, seed=4)
    fn = uniform_search_fn(game, algorithm, 128)  # the tactics test's search
    hits, legal = 0, np.asarray(states.legal_action_mask)
    for seed in range(4):
        out = fn(states, jax.random.key(seed), True)
        action = np.asarray(out.action)
        assert legal[np.arange(8), action].all()
        hits += sum(int(a in ans) for a, ans in zip(action.tolist(), answers, strict=True))
        # The policy target puts most mass on winning moves.
        win_mass = [float(sum(out.policy[i, a] for a in ans)) for i, ans in enumerate(answers)]
        assert np.mean(win_mass) > 0.5
    assert hits > 16, hits  # sampled moves: most but not necessarily all are the win


@functools.cache
def noisy_search_fn(algorithm, cutoff):
    """The search with root noise over connect4 positions, jitted once per algorithm and
    cutoff (`sample`, which moves are sampled, traced): the greedy and cutoff tests share it."""
    game = games.make("connect4")
    config = SearchConfig(
        algorithm=algorithm, num_simulations=24, gumbel_scale=3.0, sample_cutoff=cutoff
    )
    return jax.jit(
        lambda states, key, sample: search_tree(
            game, adversarial_evaluator, None, states, key, config, explore=True, sample=sample
        )
    )


@functools.cache
def noisy_positions():
    return live_positions(games.make("connect4"), 16, seed=7)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_greedy_moves_are_the_most_visited_even_with_root_noise(algorithm):
    """`sample=False` (self-play after the opening moves) plays a most visited root action,
    also when root noise shaped the search."""
    states = noisy_positions()
    search = noisy_search_fn(algorithm, None)
    for seed in range(3):
        out, tree = search(states, jax.random.key(seed), np.zeros(16, bool))
        visits = np.asarray(tree.summary().visit_counts)
        action = np.asarray(out.action)
        chosen = visits[np.arange(16), action]
        np.testing.assert_array_equal(chosen, visits.max(-1))
        assert np.asarray(states.legal_action_mask)[np.arange(16), action].all()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_greedy_ties_in_visits_go_to_the_higher_prior(algorithm):
    """Four simulations without noise visit four moves once each, all valued 0: the greedy
    move is the one the prior (rising with the action index) prefers, among legal ones."""
    game = games.make("tictactoe")
    config = SearchConfig(algorithm=algorithm, num_simulations=4, max_num_considered_actions=4)

    def rising(params, states, key):
        batch, actions = states.legal_action_mask.shape
        return jnp.broadcast_to(jnp.arange(actions) / 10.0, (batch, actions)), jnp.zeros(batch)

    first = game.init(jax.random.key(0))
    later = game.step(game.step(first, 8), 2)  # X on 8, O on 2: 7 is the best legal move
    states = stack_states([first, later])
    out, tree = jax.jit(lambda s, k: search_tree(game, rising, None, s, k, config, explore=False))(
        states, jax.random.key(1)
    )
    visits = np.asarray(tree.summary().visit_counts)
    assert (visits[np.arange(2), [8, 7]] == visits.max(-1)).all() and (visits.max(-1) == 1).all()
    np.testing.assert_array_equal(out.action, [8, 7])
    with pytest.raises(ValueError, match=r"^num_simulations must be >= 1, got 0$"):
        run_search(game, rising, None, states, jax.random.key(1), config, 0)


def test_root_dirichlet_noise_falls_on_legal_moves():
    """PUCT's root prior is 0.75 x the net's + 0.25 x Dirichlet noise over the legal moves. With
    a small alpha the noise sits mostly on one move, so in every row some legal move gains
    well over 0.05 on 0.75 x the uniform prior; noise drawn over all moves and then masked
    leaves rows where it fell on an illegal move nearly uniform."""
    game = games.make("tictactoe")
    later = game.step(game.step(game.init(jax.random.key(0)), 8), 2)  # 7 legal moves
    states = stack_states([later] * 32)
    config = SearchConfig(algorithm="puct", num_simulations=2, dirichlet_alpha=0.03)
    _, tree = jax.jit(
        lambda s, k: search_tree(game, uniform_evaluator, None, s, k, config, explore=True)
    )(states, jax.random.key(0))
    prior = np.asarray(jax.nn.softmax(tree.children_prior_logits[:, tree.ROOT_INDEX]))
    legal = np.asarray(states.legal_action_mask)
    np.testing.assert_allclose(prior.sum(-1), 1.0, rtol=1e-5)
    assert (prior[~legal] == 0).all() and (prior.max(-1) >= 0.75 / 7 + 0.05).all()
    # The net keeps 0.75 of the prior: the moves the noise missed have 0.75 x 1/7, no more.
    np.testing.assert_allclose(prior[legal].reshape(32, 7).min(-1), 0.75 / 7, atol=0.005)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_sample_cutoff_keeps_sampled_moves_near_the_best_q(algorithm):
    """A sampled move whose searched Q is more than `sample_cutoff` below the best visited Q
    gives way to the greedy move, and the others stay: the cutoff changes the move, not the
    search (the same key gives the same tree)."""
    states = noisy_positions()

    def run(cutoff, sample):
        moves, gaps = [], []
        for seed in range(3):
            out, tree = noisy_search_fn(algorithm, cutoff)(states, jax.random.key(seed), sample)
            q = np.asarray(tree.qvalues(jnp.zeros(16, jnp.int32)))
            visited = np.asarray(tree.children_visits[:, 0]) > 0
            action = np.asarray(out.action)
            moves.extend(action)
            gaps.extend(np.where(visited, q, -np.inf).max(-1) - q[np.arange(16), action])
        return np.array(moves), np.array(gaps)

    sampled, gaps = run(None, np.ones(16, bool))
    greedy, _ = run(None, np.zeros(16, bool))
    cut, cut_gaps = run(0.05, np.ones(16, bool))
    far = gaps > 0.05
    assert (far & (sampled != greedy)).any(), "no sampled move to cut: the test shows nothing"
    np.testing.assert_array_equal(cut[far], greedy[far])
    np.testing.assert_array_equal(cut[~far], sampled[~far])
    assert ((cut_gaps <= 0.05) | (cut == greedy)).all()
