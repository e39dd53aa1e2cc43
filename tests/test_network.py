"""The residual policy/value network: shapes, ranges, precision, no batch statistics, and the
CPU convolution's gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_trajectories

import games
from azjax.network import NetworkConfig, init_params, make_network
from azjax.search import network_evaluator


def observations(game, batch, seed=0):
    _, states = random_trajectories(game, jax.random.key(seed), batch, 6)
    last = jax.tree.map(lambda x: x[-1], states)
    return jax.vmap(game.observe)(last), last


@pytest.mark.parametrize(
    "name,kwargs", [("connect4", {}), ("dots_and_boxes", {"rows": 2, "cols": 3})]
)
def test_shapes_ranges_and_a_pure_apply(name, kwargs):
    game = games.make(name, **kwargs)
    net = make_network(game, NetworkConfig(blocks=1, channels=8))
    params = init_params(net, game, jax.random.key(0))
    assert set(params) == {"params"}  # no batch_stats collection
    obs, states = observations(game, 6)
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
    # The evaluator observes the states itself.
    for a, b in zip(network_evaluator(net)(params, states, None), (logits, value), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # However large the value layer's output, the value stays in [-1, 1] (a tanh).
    large = jax.tree.map(lambda x: x + 50.0 if x.shape == (1,) else x, params)  # its one bias
    value = apply(large, obs)[1]
    assert bool(jnp.all((value > 0.99) & (value <= 1.0)))


def test_bfloat16_compute_keeps_float32_params_and_outputs():
    game = games.make("tictactoe")
    f32 = make_network(game, NetworkConfig(blocks=1, channels=8))
    bf16 = make_network(game, NetworkConfig(blocks=1, channels=8, dtype="bfloat16"))
    params = init_params(bf16, game, jax.random.key(3))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
    obs, _ = observations(game, 6, seed=4)
    logits16, value16 = jax.jit(bf16.apply)(params, obs)
    logits32, value32 = jax.jit(f32.apply)(params, obs)
    assert logits16.dtype == jnp.float32 and value16.dtype == jnp.float32
    np.testing.assert_allclose(logits16, logits32, atol=0.1)
    np.testing.assert_allclose(value16, value32, atol=0.1)


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match=r"network\.dtype must be one of .*'float16'"):
        NetworkConfig(dtype="float16")
    with pytest.raises(ValueError, match=r"network\.channels must be >= 1, got 0"):
        NetworkConfig(channels=0)
    game = games.make("tictactoe")
    net = make_network(game, NetworkConfig(blocks=0, channels=4))
    with pytest.raises(ValueError, match=r"\(3, 3, 2\)"):
        net.init(jax.random.key(0), jnp.zeros((1, 4, 4, 2)))


def test_cpu_convolution_matches_the_native_one_in_values_and_gradients():
    """On the CPU `_Conv3x3` runs the native convolution forward with im2col's gradients; both
    must equal the native convolution's own (inside a scan, where the training step runs it)."""
    from azjax.network import _cpu_conv, _native_conv

    x = jax.random.normal(jax.random.key(0), (3, 6, 7, 5))
    kernel = jax.random.normal(jax.random.key(1), (3, 3, 5, 4))
    target = jax.random.normal(jax.random.key(2), (3, 6, 7, 4))

    def loss(conv, x, kernel):
        def step(carry, _):
            return carry, jnp.sum((conv(x, kernel) - target) ** 2 * carry)

        return jax.lax.scan(step, 1.0, None, length=2)[1].sum()

    grads = jax.value_and_grad(loss, argnums=(1, 2))
    ours = jax.jit(grads, static_argnums=0)(_cpu_conv, x, kernel)
    native = grads(_native_conv, x, kernel)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(native), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-3)
    assert float(jnp.abs(native[1][1]).max()) > 1.0  # gradients that could differ
