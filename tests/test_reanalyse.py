"""Reanalyse: the buffer keeps each position's State, re-searched targets equal a fresh search
of that state (through the batch's symmetry), and a run with it resumes bit-exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from helpers import stop_after_first_iteration
from test_train import (
    TICTACTOE,
    TINY,
    assert_trees_equal,
    records,
    restore_latest,
    run_uninterrupted,
)

from azjax.config import load_config
from azjax.reanalyse import make_reanalyse
from azjax.replay import make_sampler
from azjax.search import network_evaluator, run_search
from azjax.train import train_and_evaluate

REANALYSE = [*TINY, "train.reanalyse_fraction=0.25"]


def test_reanalyse_resumes_exactly_and_equals_a_fresh_search(tmp_path):
    # Two iterations straight; then, as if stopped after the first, checkpoint 2 and its record
    # are lost, and the same command resumes at iteration 1 (one program for both runs).
    config = load_config(TICTACTOE, REANALYSE)
    train_and_evaluate(config, tmp_path, progress=False)
    trainer, _, state = run_uninterrupted(config, 2)
    _, straight = restore_latest(trainer, tmp_path)
    assert_trees_equal(straight, state)
    stop_after_first_iteration(tmp_path)
    assert train_and_evaluate(config, tmp_path, progress=False)["start_iteration"] == 1
    assert [r["iteration"] for r in records(tmp_path)] == [1, 2]
    _, restored = restore_latest(trainer, tmp_path)
    assert_trees_equal(restored, state)  # the stored States included

    game, buffer = trainer.game, state.buffer
    assert buffer.stored.observation is None  # the States stand for the observations

    count = 8
    evaluate = network_evaluator(trainer.network)
    reanalyse = make_reanalyse(game, evaluate, config.search, count)
    sample = make_sampler(game, 32)
    search_key = jax.random.key(7)

    @jax.jit
    def draw(buffer, params, key):
        picked = {}

        def refresh(batch):
            # as if fast-searched: no policy target
            batch = batch.replace(policy_mask=jnp.zeros_like(batch.policy_mask))
            picked["batch"] = batch
            return reanalyse(params, batch, search_key)

        return sample(buffer, key, refresh), picked["batch"]

    out, picked = draw(buffer, state.params, jax.random.key(3))
    observations = jax.vmap(game.observe)(picked.state)
    states = jax.tree.map(lambda x: x[:count], picked.state)
    fresh = jax.jit(run_search, static_argnums=(0, 1, 5), static_argnames="explore")(
        game, evaluate, state.params, states, search_key, config.search, explore=False
    )
    np.testing.assert_array_equal(out.value, picked.value)  # value targets are kept
    assert out.policy_mask[:count].all() and not out.policy_mask[count:].any()
    assert out.state is None
    for i in range(32):
        policy = fresh.policy[i] if i < count else picked.policy[i]
        # The symmetries that map the stored observation onto the sampled one; the policy
        # target must be the searched (or stored) one under one of them.
        images = [
            s.policy(policy)
            for s in game.symmetries
            if np.array_equal(s.observation(observations[i]), out.observation[i])
        ]
        assert images, i
        assert any(np.allclose(p, out.policy[i], atol=1e-5) for p in images), i
    assert not np.allclose(fresh.policy, picked.policy[:count], atol=1e-3)  # targets refreshed
