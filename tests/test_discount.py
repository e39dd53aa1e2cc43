"""The discount γ (`search.discount`): the search tree's edges and self-play's value targets
use it, the score target does not, bad values are refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_score import dots_rollout, expected_targets
from test_train import TICTACTOE

import games
from azjax import targets
from azjax.config import ConfigError, load_config
from azjax.network import NetworkConfig, init_params, make_network
from azjax.search import SearchConfig, network_evaluator, search_tree


@pytest.mark.parametrize("gamma", [0.9, 1.0])
def test_value_targets_are_discounted_returns_and_scores_are_not(gamma):
    batch, length = 3, 30
    game, traj = dots_rollout(batch, length, discount=gamma)  # repeated turns: +γ edges too
    discount = np.abs(np.asarray(traj.discount, np.float64)).round(6)
    assert set(np.unique(discount)) == {0.0, round(gamma, 6)}

    expected = expected_targets(game, np.asarray(traj.action), gamma)
    ids = np.arange(length)[:, None] * 100 + np.arange(batch)[None]
    traj = traj.replace(observation=jnp.asarray(ids, jnp.float32)[..., None, None, None])
    pending = targets.empty_trajectory(game.max_game_length, batch, (1, 1, 1), game.num_actions)
    ex, _, _ = targets.resolve(pending, traj)
    checked = 0
    for i in np.flatnonzero(np.asarray(ex.valid)):
        t, b = divmod(int(ex.observation[i, 0, 0, 0]), 100)
        value, margin = expected[(t, b)]
        assert float(ex.value[i]) == pytest.approx(value, abs=1e-6), (t, b)
        assert float(ex.score[i]) == pytest.approx(margin, abs=1e-6), (t, b)
        checked += 1
    assert checked > batch * 6
    values = np.abs(np.asarray(ex.value)[np.asarray(ex.valid)])
    if gamma < 1:  # results further away are worth less: more than one magnitude
        assert len(set(values[values > 0].round(6))) > 2


def test_search_tree_edges_carry_the_discount():
    game, gamma = games.make("tictactoe"), 0.8
    state = game.init(jax.random.key(0))
    for action in (0, 3, 1, 4):  # X to move: 2 wins at once, the rest go on
        state = game.step(state, action)
    net = make_network(game, NetworkConfig(blocks=0, channels=8))
    params = init_params(net, game, jax.random.key(0))
    batched = jax.tree.map(lambda x: x[None], state)
    for weight in (gamma, 1.0):
        config = SearchConfig(num_simulations=5, max_num_considered_actions=5, discount=weight)
        _, tree = search_tree(
            game, network_evaluator(net), params, batched, jax.random.key(1), config
        )
        root = tree.ROOT_INDEX
        visited = np.asarray(tree.children_visits[0, root]) > 0
        discounts = np.asarray(tree.children_discounts[0, root])
        assert visited[2] and discounts[2] == 0.0  # the winning move ends the game
        others = visited & (np.arange(game.num_actions) != 2)
        assert others.any()
        np.testing.assert_allclose(discounts[others], -weight)


def test_discount_refusals():
    for bad in ("0", "1.5", "-0.5"):
        with pytest.raises(ConfigError, match=r"search\.discount"):
            load_config(TICTACTOE, [f"search.discount={bad}"])
    assert load_config(TICTACTOE, ["search.discount=0.97"]).search.discount == 0.97
