"""The policy/value network: an AlphaZero-shaped residual tower in flax.

    stem:   3x3 conv (C channels) -> LayerNorm -> ReLU
    tower:  `blocks` x [3x3 conv -> LN -> ReLU -> 3x3 conv -> LN -> + skip -> ReLU]
    policy: 1x1 conv (H) -> LN -> ReLU -> dense(num_actions)             -> logits
    value:  1x1 conv (H) -> LN -> ReLU -> dense(C) -> ReLU -> dense(1)   -> tanh

LayerNorm over each cell's channels keeps no batch statistics, so `apply(params, obs)` is one
pure function in self-play, training and evaluation. The heads open with `head_channels` (H,
default 8) channels normalised before their ReLU: AlphaZero's 1 or 2 unnormalised channels can
be pushed below zero on every cell by a few large early updates and never recover, while after
a LayerNorm over H >= 2 channels some channel of each cell is positive unless all are equal.

On the CPU, XLA differentiates a convolution inside a loop much more slowly than the same
convolution as a matrix product over the nine shifted boards (im2col), whose forward pass is the
slower one; so there `_Conv3x3` runs the native forward with im2col's gradients (`_cpu_conv`).
Parameters are float32; `NetworkConfig.dtype = "bfloat16"` computes in bfloat16 and returns
float32 outputs.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from azjax.config import NetworkConfig
from games.core import Game

Array = jax.Array
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _native_conv(x: Array, kernel: Array) -> Array:
    return jax.lax.conv_general_dilated(
        x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def _im2col_conv(x: Array, kernel: Array) -> Array:
    height, width = x.shape[1:3]
    padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    shifted = [padded[:, i : i + height, j : j + width] for i in range(3) for j in range(3)]
    return jnp.concatenate(shifted, axis=-1) @ kernel.reshape(-1, kernel.shape[-1])


@jax.custom_vjp
def _cpu_conv(x: Array, kernel: Array) -> Array:
    """The native convolution, differentiated as im2col (see the module docstring)."""
    return _native_conv(x, kernel)


_cpu_conv.defvjp(
    lambda x, kernel: (_native_conv(x, kernel), (x, kernel)),
    lambda inputs, grad: jax.vjp(_im2col_conv, *inputs)[1](grad),
)


class _Conv3x3(nn.Module):
    """A 3x3 'SAME' convolution without bias; im2col's gradients on the CPU."""

    features: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: Array) -> Array:
        shape = (3, 3, x.shape[-1], self.features)
        kernel = self.param("kernel", nn.initializers.lecun_normal(), shape, jnp.float32)
        x, kernel = x.astype(self.dtype), kernel.astype(self.dtype)
        return jax.lax.platform_dependent(x, kernel, cpu=_cpu_conv, default=_native_conv)


class _ResidualBlock(nn.Module):
    channels: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: Array) -> Array:
        y = nn.relu(nn.LayerNorm(dtype=self.dtype)(_Conv3x3(self.channels, self.dtype)(x)))
        y = nn.LayerNorm(dtype=self.dtype)(_Conv3x3(self.channels, self.dtype)(y))
        return nn.relu(x + y)


class PolicyValueNet(nn.Module):
    """`apply(params, obs[B, H, W, C]) -> (logits float32[B, A], value float32[B] in [-1, 1])`;
    `game` lets evaluators observe game states."""

    game: Game
    blocks: int
    channels: int
    head_channels: int = 8
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, obs: Array) -> tuple[Array, Array]:
        if obs.shape[1:] != tuple(self.game.observation_shape):
            raise ValueError(
                f"observation shape {obs.shape[1:]} does not match {self.game.name}'s "
                f"{tuple(self.game.observation_shape)} (expected [batch, H, W, C])"
            )
        x = obs.astype(self.dtype)
        x = nn.relu(nn.LayerNorm(dtype=self.dtype)(_Conv3x3(self.channels, self.dtype)(x)))
        for _ in range(self.blocks):
            x = _ResidualBlock(self.channels, self.dtype)(x)
        batch = x.shape[0]

        def head(x: Array) -> Array:  # a 1x1 convolution is a dense layer over each cell
            x = nn.Dense(self.head_channels, use_bias=False, dtype=self.dtype)(x)
            return nn.relu(nn.LayerNorm(dtype=self.dtype)(x)).reshape(batch, -1)

        logits = nn.Dense(self.game.num_actions, dtype=self.dtype)(head(x))
        v = nn.relu(nn.Dense(self.channels, dtype=self.dtype)(head(x)))
        value = jnp.tanh(nn.Dense(1, dtype=self.dtype)(v)[:, 0])
        return logits.astype(jnp.float32), value.astype(jnp.float32)


def make_network(game: Game, config: NetworkConfig) -> PolicyValueNet:
    """The residual network for `game`, sized by `config`."""
    return PolicyValueNet(
        game=game,
        blocks=config.blocks,
        channels=config.channels,
        head_channels=config.head_channels,
        dtype=_DTYPES[config.dtype],
    )


def init_params(network: PolicyValueNet, game: Game, key: Array):
    """Fresh float32 parameters for `network` (a pytree)."""
    return _init(network, key, game.observation_shape)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _init(network: PolicyValueNet, key: Array, shape: tuple[int, ...]):
    """flax's `init` as one program per network and observation shape: called eagerly, it
    compiles each operation as a program of its own."""
    return network.init(key, jnp.zeros((1, *shape), jnp.float32))
