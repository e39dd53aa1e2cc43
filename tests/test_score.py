"""The auxiliary score target: real self-play games' final margins reach every position of the
game from its mover's view (across chunks), the score head trains, bad configs are refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_train import TICTACTOE, TINY, records

import games
from azjax import export, targets
from azjax.cli.export import main as export_main
from azjax.config import ConfigError, load_config
from azjax.network import NetworkConfig, init_params, make_network
from azjax.search import (
    SearchConfig,
    final_margin,
    network_evaluator,
    search_tree,
    utility,
)
from azjax.selfplay import SelfPlayConfig, make_rollout
from azjax.train import train_and_evaluate

DOTS = ["game.name=dots_and_boxes", "game.kwargs={rows: 2, cols: 2}", "selfplay.chunk_moves=12"]
SCORE = ["network.score_head=true", "optim.score_weight=1.0"]


def expected_targets(game, actions, gamma):
    """Plain Python: replay each slot's moves [T, B]; each position of a finished game gets
    (discounted return, undiscounted final margin / num_actions), both from its mover's view
    (None: its game has not ended)."""
    step, score = jax.jit(game.step), jax.jit(game.score)
    length, batch = actions.shape
    out = {}
    for b in range(batch):
        state, positions = game.init(jax.random.key(0)), []
        for t in range(length):
            positions.append((t, int(state.current_player)))
            state = step(state, int(actions[t, b]))
            if bool(state.terminated):
                end = len(positions) - 1
                for k, (u, mover) in enumerate(positions):
                    value = float(state.rewards[mover]) * gamma ** (end - k)
                    margin = (1.0 if mover == 0 else -1.0) * float(score(state)) / game.num_actions
                    out[(u, b)] = (value, margin)
                state, positions = game.init(jax.random.key(0)), []
        for u, _ in positions:
            out[(u, b)] = None
    return out


def test_score_targets_are_final_margins_from_the_movers_view_across_chunks():
    batch, chunk, chunks = 3, 5, 8  # games of 12 moves span 3 or 4 chunks
    game, traj = dots_rollout(batch, chunk * chunks)
    expected = {
        k: None if v is None else v[1]  # the final margins
        for k, v in expected_targets(game, np.asarray(traj.action), 1.0).items()
    }
    margins = {v for v in expected.values() if v is not None}
    assert len(margins) > 2 and max(abs(m) for m in margins) <= 1  # varied, O(1)

    # Through the pending machinery, chunk by chunk, each position identified by its id.
    ids = np.arange(chunk * chunks)[:, None] * 100 + np.arange(batch)[None]
    traj = traj.replace(observation=jnp.asarray(ids, jnp.float32)[..., None, None, None])
    pending = targets.empty_trajectory(game.max_game_length, batch, (1, 1, 1), game.num_actions)
    resolve = jax.jit(targets.resolve)
    seen = set()
    for c in range(chunks):
        part = jax.tree.map(lambda x, c=c: x[c * chunk : (c + 1) * chunk], traj)
        ex, pending, _ = resolve(pending, part)
        for i in np.flatnonzero(np.asarray(ex.valid)):
            t, b = divmod(int(ex.observation[i, 0, 0, 0]), 100)
            assert expected[(t, b)] is not None, (t, b)
            assert float(ex.score[i]) == pytest.approx(expected[(t, b)], abs=1e-6), (t, b)
            seen.add((t, b))
    finished = {k for k, v in expected.items() if v is not None}
    assert len(seen) > chunk * batch and seen <= finished
    assert any(t // chunk != (t + 11) // chunk for t, _ in seen)  # some games spanned chunks


def test_score_head_trains_and_logs_its_loss(tmp_path):
    config = load_config(TICTACTOE, [*TINY, *DOTS, *SCORE])
    train_and_evaluate(config, tmp_path, progress=False)
    log = records(tmp_path)
    assert [r["iteration"] for r in log] == [1, 2]
    assert all(r["train/trained"] and np.isfinite(r["train/score_loss"]) for r in log)
    assert all(r["train/score_loss"] > 0 for r in log)

    # Exported to play with the tiebreak: the card says so and the model's agent searches so.
    model = tmp_path / "dots.azjax"
    args = [str(tmp_path), "--out", str(model), "--score-tiebreak", "0.2"]
    assert export_main(args) == 0
    config, _, card = export.load_model(model)
    assert config.search.score_tiebreak == 0.2 and card["search"]["score_tiebreak"] == 0.2
    assert export_main(["--card-only", str(model), "--score-tiebreak", "0.1"]) == 2
    assert export_main([*args[:3], "--score-tiebreak", "1.5"]) == 2


def test_score_head_output_and_refusals():
    game = games.make("othello", size=6)
    net = make_network(game, NetworkConfig(blocks=0, channels=8, score_head=True))
    params = init_params(net, game, jax.random.key(0))
    obs = jax.vmap(game.observe)(jax.vmap(game.init)(jax.random.split(jax.random.key(0), 3)))
    logits, value = net.apply(params, obs)  # every other caller sees (logits, value)
    assert value.shape == (3,)
    again, _, score = net.apply(params, obs, with_score=True)
    assert score.shape == (3,) and score.dtype == jnp.float32
    np.testing.assert_array_equal(logits, again)
    plain = make_network(game, NetworkConfig(blocks=0, channels=8))
    with pytest.raises(ValueError, match="no score head"):
        plain.apply(init_params(plain, game, jax.random.key(0)), obs, with_score=True)

    with pytest.raises(ConfigError, match="tictactoe has no final score"):
        load_config(TICTACTOE, SCORE)
    with pytest.raises(ConfigError, match=r"network\.score_head=true"):
        load_config(TICTACTOE, [*DOTS, "optim.score_weight=1.0"])
    with pytest.raises(ConfigError, match="value_target must be z or mix"):
        load_config(TICTACTOE, [*DOTS, *SCORE, "selfplay.value_target=q"])


def dots_rollout(batch: int, length: int, score_head: bool = False, **search):
    """(game, trajectory [length, batch]): self-play on Dots and Boxes 2x2 (repeated turns) by a
    tiny untrained net, 4 simulations, full and fast searches alternating, `search` overrides."""
    game = games.make("dots_and_boxes", rows=2, cols=2)
    net = make_network(game, NetworkConfig(blocks=0, channels=8, score_head=score_head))
    params = init_params(net, game, jax.random.key(0))
    config = SearchConfig(num_simulations=4, max_num_considered_actions=4, **search)
    selfplay = SelfPlayConfig(fast_simulations=2, temperature_moves=12)
    evaluate = network_evaluator(net, config.score_tiebreak)
    rollout = jax.jit(make_rollout(game, evaluate, config, selfplay))
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), batch))
    keys = jax.random.split(jax.random.key(1), (length, batch))
    full = jnp.arange(length) % 2 == 0
    return game, rollout(params, states, jnp.zeros(batch, jnp.int32), full, keys)[2]


def test_score_utility_blends_the_final_margin_into_rewards_and_value_targets():
    u, batch = 0.4, 4
    game, traj = dots_rollout(batch, 36, score_utility=u)
    end, margin, reward = (np.asarray(x) for x in (traj.terminated, traj.score, traj.reward))
    assert end.sum() >= batch and len(set(margin[end].round(6))) > 1
    # At a game's end the recorded reward is the utility; a win (margin > 0) stays above 0.
    np.testing.assert_allclose(reward[end], (1 - u) * np.sign(margin[end]) + u * margin[end])
    assert (reward[~end] == 0).all()
    # z is then the blended return: every known position's value target follows its margin.
    pending = targets.empty_trajectory(game.max_game_length, batch, None, game.num_actions)
    ex, _, _ = targets.resolve(pending, traj.replace(observation=None))
    valid = np.asarray(ex.valid)
    value, score = np.asarray(ex.value)[valid], np.asarray(ex.score)[valid]
    assert valid.sum() > batch
    np.testing.assert_allclose(value, (1 - u) * np.sign(score) + u * score, atol=1e-6)


def last_move(game):
    """(state, last action, child): a random Dots and Boxes 2x2 game one line before its end,
    the line and the final state, in a game that is not drawn."""
    step = jax.jit(game.step)
    for seed in range(20):
        state, order = game.init(jax.random.key(0)), np.random.default_rng(seed).permutation(12)
        for action in order[:-1]:  # one line left: the last move ends the game
            state = step(state, int(action))
        last = int(order[-1])
        child = step(state, last)
        if float(game.score(child)) != 0:
            break
    assert bool(child.terminated) and not bool(state.terminated)
    return state, last, child


def test_score_utility_is_the_reward_of_a_game_ending_edge_in_the_search_tree():
    game, u = games.make("dots_and_boxes", rows=2, cols=2), 0.5
    step = jax.jit(game.step)
    state, last, child = last_move(game)
    expected = utility(game, u, state, child)
    mover_margin = float(final_margin(game, state.current_player, child))
    reward = float(child.rewards[state.current_player])
    assert mover_margin != 0 and reward != 0
    assert float(expected) == pytest.approx((1 - u) * reward + u * mover_margin)
    net = make_network(game, NetworkConfig(blocks=0, channels=8))
    params = init_params(net, game, jax.random.key(0))
    batched = jax.tree.map(lambda x: x[None], state)
    for weight, want in ((u, float(expected)), (0.0, reward)):
        config = SearchConfig(num_simulations=2, max_num_considered_actions=2, score_utility=weight)
        _, tree = search_tree(
            game, network_evaluator(net), params, batched, jax.random.key(1), config
        )
        assert float(tree.children_rewards[0, tree.ROOT_INDEX, last]) == pytest.approx(want)
    assert float(utility(game, u, state, step(game.init(jax.random.key(0)), 0))) == 0.0
    assert float(utility(game, u, child, step(child, last))) == 0.0  # past the end: nothing


def test_score_utility_refusals():
    with pytest.raises(ConfigError, match=r"search\.score_utility=0\.5: tictactoe has no final"):
        load_config(TICTACTOE, ["search.score_utility=0.5"])
    with pytest.raises(ConfigError, match="score_utility"):
        load_config(TICTACTOE, [*DOTS, "search.score_utility=1.0"])
    tictactoe = games.make("tictactoe")
    state = tictactoe.init(jax.random.key(0))
    with pytest.raises(ValueError, match="tictactoe has no final score"):
        utility(tictactoe, 0.5, state, tictactoe.step(state, 0))


def test_score_tiebreak_values_leaves_by_the_predicted_margin_and_keeps_results_as_targets():
    game, w = games.make("dots_and_boxes", rows=2, cols=2), 0.3
    net = make_network(game, NetworkConfig(blocks=0, channels=8, score_head=True))
    params = init_params(net, game, jax.random.key(0))
    params = jax.tree.map(lambda x: 3.0 * x, params)  # scores beyond [-1, 1] too, to be clipped
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), 64))
    states = jax.vmap(game.step)(states, jax.random.randint(jax.random.key(1), (64,), 0, 12))
    obs = jax.vmap(game.observe)(states)
    logits, value, score = net.apply(params, obs, with_score=True)
    assert float(jnp.abs(score).max()) > 1  # the clip matters
    got_logits, got_value = network_evaluator(net, w)(params, states, jax.random.key(2))
    np.testing.assert_array_equal(got_logits, logits)
    np.testing.assert_allclose(got_value, (1 - w) * value + w * jnp.clip(score, -1, 1), atol=1e-6)
    np.testing.assert_array_equal(network_evaluator(net)(params, states, None)[1], value)

    # In the tree: the root's leaf value is blended, and so is a game-ending edge's reward.
    state, last, child = last_move(game)
    config = SearchConfig(num_simulations=2, max_num_considered_actions=2, score_tiebreak=w)
    batched = jax.tree.map(lambda x: x[None], state)
    evaluate = network_evaluator(net, w)
    _, tree = search_tree(game, evaluate, params, batched, jax.random.key(1), config)
    _, root_value = evaluate(params, batched, None)
    assert float(tree.raw_values[0, tree.ROOT_INDEX]) == pytest.approx(float(root_value[0]))
    reward = float(tree.children_rewards[0, tree.ROOT_INDEX, last])
    assert reward == pytest.approx(float(utility(game, w, state, child)))
    assert reward != pytest.approx(float(child.rewards[state.current_player]))

    # Self-play searches with it, but records bare results: the value targets stay results.
    _, traj = dots_rollout(4, 36, score_head=True, score_tiebreak=w)
    end, margin, reward = (np.asarray(x) for x in (traj.terminated, traj.score, traj.reward))
    assert end.sum() >= 4 and (margin[end] != 0).any()
    np.testing.assert_array_equal(reward[end], np.sign(margin[end]))


def test_score_tiebreak_refusals():
    with pytest.raises(ConfigError, match=r"search\.score_tiebreak=0\.2 needs a game with a final"):
        load_config(TICTACTOE, ["search.score_tiebreak=0.2"])
    with pytest.raises(ConfigError, match=r"network\.score_head=true"):
        load_config(TICTACTOE, [*DOTS, "search.score_tiebreak=0.2"])
    with pytest.raises(ConfigError, match="score_tiebreak"):
        load_config(TICTACTOE, [*DOTS, *SCORE, "search.score_tiebreak=1.0"])
    with pytest.raises(ConfigError, match="score_tiebreak"):
        load_config(
            TICTACTOE, [*DOTS, *SCORE, "search.score_tiebreak=0.2", "search.score_utility=0.5"]
        )
    load_config(TICTACTOE, [*DOTS, *SCORE, "search.score_tiebreak=0.2"])  # accepted
