"""The residual policy/value network: shapes, ranges, no batch statistics, bfloat16 compute."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_trajectories

import games
from azjax.network import NetworkConfig, init_params, make_network
from azjax.search import network_evaluator


def test_shapes_ranges_precision_and_a_pure_apply():
    """Connect Four (a board that is not square), in float32 and bfloat16 compute."""
    game = games.make("connect4")
    net = make_network(game, NetworkConfig(blocks=1, channels=8))
    params = init_params(net, game, jax.random.key(0))
    assert set(params) == {"params"}  # no batch_stats collection
    states = jax.tree.map(lambda x: x[-1], random_trajectories(game, jax.random.key(0), 6, 6)[1])
    obs = jax.vmap(game.observe)(states)
    apply = jax.jit(net.apply)
    logits, value = apply(params, obs)
    assert logits.shape == (6, game.num_actions) and logits.dtype == jnp.float32
    assert value.shape == (6,) and value.dtype == jnp.float32
    assert bool(jnp.all(jnp.abs(value) <= 1.0)) and bool(jnp.all(jnp.isfinite(logits)))
    assert float(jnp.abs(logits[0] - logits[5]).max()) > 0  # the net looks at the board
    # Each position's output is the same alone as in a batch (no batch statistics).
    one_logits, one_value = apply(params, obs[:1])
    np.testing.assert_allclose(one_logits[0], logits[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(one_value[0], value[0], rtol=1e-4, atol=1e-4)
    for a, b in zip(network_evaluator(net)(params, states, None), (logits, value), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # However large the value layer's output, the value stays in [-1, 1] (a tanh).
    large = jax.tree.map(lambda x: x + 50.0 if x.shape == (1,) else x, params)  # its one bias
    value_large = apply(large, obs)[1]
    assert bool(jnp.all((value_large > 0.99) & (value_large <= 1.0)))
    # bfloat16 compute: the same float32 parameters, float32 outputs, close values.
    bf16 = make_network(game, NetworkConfig(blocks=1, channels=8, dtype="bfloat16"))
    logits16, value16 = jax.jit(bf16.apply)(params, obs)
    assert logits16.dtype == jnp.float32 and value16.dtype == jnp.float32
    np.testing.assert_allclose(logits16, logits, atol=0.1)
    np.testing.assert_allclose(value16, value, atol=0.1)


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match=r"network\.dtype must be one of .*'float16'"):
        NetworkConfig(dtype="float16")
    with pytest.raises(ValueError, match=r"network\.channels must be >= 1, got 0"):
        NetworkConfig(channels=0)
    game = games.make("tictactoe")
    net = make_network(game, NetworkConfig(blocks=0, channels=4))
    with pytest.raises(ValueError, match=r"\(3, 3, 2\)"):
        net.init(jax.random.key(0), jnp.zeros((1, 4, 4, 2)))
