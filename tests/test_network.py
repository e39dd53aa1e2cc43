"""The residual policy/value network: shapes, ranges, precision, and no batch statistics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_trajectories

import games
from azjax.network import NetworkConfig, init_params, make_network
from azjax.search import network_evaluator

GAMES = [
    ("tictactoe", {}),
    ("connect4", {}),
    ("othello", {"size": 6}),
    ("dots_and_boxes", {"rows": 2, "cols": 3}),
    ("chain_reaction", {"rows": 3, "cols": 4}),
]


def observations(game, batch, seed=0):
    _, states = random_trajectories(game, jax.random.key(seed), batch, 6)
    last = jax.tree.map(lambda x: x[-1], states)
    return jax.vmap(game.observe)(last), last


@pytest.mark.parametrize("name,kwargs", GAMES, ids=[g[0] for g in GAMES])
def test_shapes_and_ranges(name, kwargs):
    game = games.make(name, **kwargs)
    net = make_network(game, NetworkConfig(blocks=1, channels=8))
    params = init_params(net, game, jax.random.key(0))
    obs, _ = observations(game, 5)
    logits, value = jax.jit(net.apply)(params, obs)
    assert logits.shape == (5, game.num_actions) and logits.dtype == jnp.float32
    assert value.shape == (5,) and value.dtype == jnp.float32
    assert bool(jnp.all(jnp.abs(value) <= 1.0))
    assert bool(jnp.all(jnp.isfinite(logits)))
    # However large the value layer's output, the value stays in [-1, 1] (a tanh).
    large = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 50.0 if x.shape == (1,) else x,
        params,  # its one bias
    )
    value = jax.jit(net.apply)(large, obs)[1]
    assert bool(jnp.all((value > 0.99) & (value <= 1.0)))


def test_no_batch_statistics_and_pure_apply():
    game = games.make("connect4")
    net = make_network(game, NetworkConfig(blocks=2, channels=16))
    params = init_params(net, game, jax.random.key(1))
    assert set(params) == {"params"}  # no batch_stats collection
    obs, _ = observations(game, 8, seed=2)
    logits, value = net.apply(params, obs)
    # Each position's output is the same alone as in a batch with other positions.
    for i in (0, 5):
        one_logits, one_value = net.apply(params, obs[i : i + 1])
        np.testing.assert_allclose(one_logits[0], logits[i], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(one_value[0], value[i], rtol=1e-4, atol=1e-4)
    again = net.apply(params, obs)
    np.testing.assert_array_equal(again[0], logits)
    # Different positions give different outputs (the net looks at the board).
    assert float(jnp.abs(logits[0] - logits[5]).max()) > 0


def test_bfloat16_compute_keeps_float32_params_and_outputs():
    game = games.make("tictactoe")
    f32 = make_network(game, NetworkConfig(blocks=2, channels=16))
    bf16 = make_network(game, NetworkConfig(blocks=2, channels=16, dtype="bfloat16"))
    params = init_params(bf16, game, jax.random.key(3))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
    obs, _ = observations(game, 6, seed=4)
    logits16, value16 = bf16.apply(params, obs)
    logits32, value32 = f32.apply(params, obs)
    assert logits16.dtype == jnp.float32 and value16.dtype == jnp.float32
    np.testing.assert_allclose(logits16, logits32, atol=0.1)
    np.testing.assert_allclose(value16, value32, atol=0.1)


def test_network_evaluator_observes_the_states():
    game = games.make("dots_and_boxes", rows=2, cols=3)
    net = make_network(game, NetworkConfig(blocks=1, channels=8))
    params = init_params(net, game, jax.random.key(5))
    obs, states = observations(game, 4, seed=6)
    logits, value = network_evaluator(net)(params, states, jax.random.key(0))
    ref_logits, ref_value = net.apply(params, obs)
    np.testing.assert_array_equal(logits, ref_logits)
    np.testing.assert_array_equal(value, ref_value)


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="'float16'"):
        NetworkConfig(dtype="float16")
    with pytest.raises(ValueError, match="channels"):
        NetworkConfig(channels=0)
    game = games.make("tictactoe")
    net = make_network(game, NetworkConfig(blocks=1, channels=4))
    with pytest.raises(ValueError, match=r"\(3, 3, 2\)"):
        net.init(jax.random.key(0), jnp.zeros((1, 4, 4, 2)))


def test_the_tower_norm_is_layer_or_none_and_the_heads_keep_layer_norm():
    """`norm: layer` puts LayerNorms (scale and bias) in the stem and blocks, `norm: none` none;
    the heads keep LayerNorm either way, and a bad name is refused naming the choices."""
    game = games.make("connect4")
    obs = jax.random.normal(jax.random.key(0), (3, *game.observation_shape))
    shapes = {}
    for norm in ("layer", "none"):
        net = make_network(game, NetworkConfig(blocks=1, channels=8, norm=norm))
        params = net.init(jax.random.key(1), obs)
        logits, value = net.apply(params, obs)
        assert logits.shape == (3, game.num_actions) and bool(jnp.all(jnp.abs(value) <= 1))
        shapes[norm] = jax.tree.map(jnp.shape, params["params"])
    assert set(shapes["layer"]["_ResidualBlock_0"]["LayerNorm_0"]) == {"scale", "bias"}
    assert not any("Norm" in name for name in shapes["none"]["_ResidualBlock_0"])
    assert {"LayerNorm_0", "LayerNorm_1"} <= set(shapes["none"])  # the two heads
    refused = r"network.norm must be one of layer, none, got 'rms'"
    with pytest.raises(ValueError, match=refused):
        NetworkConfig(norm="rms")


def test_norm_none_starts_every_block_as_the_identity_and_trains_its_gain():
    """`norm: none`: biased convolutions, no normalisation in the stem and tower, and each
    block's zero-initialised gain makes the fresh tower the identity, so a 2-block net gives
    what the same stem and heads give without blocks; the gains still get gradients."""
    game = games.make("connect4")
    obs = jax.random.normal(jax.random.key(0), (3, *game.observation_shape))
    deep = make_network(game, NetworkConfig(blocks=2, channels=8, norm="none"))
    params = deep.init(jax.random.key(1), obs)
    block = params["params"]["_ResidualBlock_1"]
    assert set(block) == {"_Conv3x3_0", "_Conv3x3_1", "gain"}
    assert set(block["_Conv3x3_1"]) == {"kernel", "bias"}
    assert "LayerNorm_0" in params["params"] and "LayerNorm_2" not in params["params"]  # heads
    bare = {k: v for k, v in params["params"].items() if not k.startswith("_ResidualBlock")}
    shallow = make_network(game, NetworkConfig(blocks=0, channels=8, norm="none"))
    for a, b in zip(deep.apply(params, obs), shallow.apply({"params": bare}, obs), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)

    def loss(params):
        logits, value = deep.apply(params, obs)
        return jnp.sum(value) + jnp.sum(logits**2)

    grads = jax.grad(loss)(params)["params"]
    assert float(jnp.abs(grads["_ResidualBlock_0"]["gain"]).max()) > 0
    params["params"]["_ResidualBlock_0"]["gain"] = jnp.ones(8)  # a trained gain: blocks count
    moved = deep.apply(params, obs)[1] - shallow.apply({"params": bare}, obs)[1]
    assert float(jnp.abs(moved).max()) > 1e-4


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


def test_norm_none_folds_the_gain_into_the_second_convolution():
    """`norm: none` folds each block's gain g into its second convolution's kernel and bias:
    the block must equal `relu(x + g * (conv(h, w2) + b2))`, h = relu(conv(x, w1) + b1),
    computed here from the parameters with a non-trivial gain and biases."""
    from azjax.network import _ResidualBlock

    x = jax.random.normal(jax.random.key(0), (3, 6, 7, 8))
    block = _ResidualBlock(channels=8, dtype=jnp.float32, norm="none")
    leaves, tree = jax.tree.flatten(block.init(jax.random.key(1), x))
    keys = jax.random.split(jax.random.key(2), len(leaves))
    params = tree.unflatten(
        [jax.random.normal(k, leaf.shape) for k, leaf in zip(keys, leaves, strict=True)]
    )
    p = params["params"]
    assert set(p) == {"_Conv3x3_0", "_Conv3x3_1", "gain"}

    def conv(h, conv_params):
        dims = ("NHWC", "HWIO", "NHWC")
        y = jax.lax.conv_general_dilated(
            h, conv_params["kernel"], (1, 1), "SAME", dimension_numbers=dims
        )
        return y + conv_params["bias"]

    h = jax.nn.relu(conv(x, p["_Conv3x3_0"]))
    expected = jax.nn.relu(x + p["gain"] * conv(h, p["_Conv3x3_1"]))
    assert float(jnp.std(p["gain"])) > 0.5  # a per-channel gain: neither zeros nor ones
    np.testing.assert_allclose(block.apply(params, x), expected, rtol=1e-5, atol=1e-5)
