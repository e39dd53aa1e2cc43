"""The policy/value network: an AlphaZero-shaped residual tower in flax.

    stem:   3x3 conv (C channels) -> LayerNorm -> ReLU
    tower:  `blocks` x [3x3 conv -> LN -> ReLU -> 3x3 conv -> LN -> + skip -> ReLU]
    policy: 1x1 conv (2) + bias -> ReLU -> dense(num_actions)            -> logits
    value:  1x1 conv (2) + bias -> ReLU -> dense(C) -> ReLU -> dense(1)  -> tanh

Normalisation is LayerNorm over the channels of each board cell. It keeps no batch statistics,
so `apply(params, obs)` is a pure function that behaves identically in self-play, training and
evaluation: no train/eval switch, no mutable `batch_stats` collection to carry through the
replay/train loop, and no dependence on the mix of positions in a batch (self-play batches
hold openings and endgames side by side, which would skew BatchNorm's statistics). The heads
are not normalised: a LayerNorm over a one- or two-channel 1x1 conv would erase what the
channels say about the board (over one channel it outputs only its bias, a constant value).

On the CPU, XLA runs a convolution inside a loop (the scan over training steps, mctx's loop over
simulations) about ten times slower than outside one; the same 3x3 convolution written as a
matrix product over the nine shifted copies of the board (im2col) runs equally fast in both.
`_Conv3x3` therefore picks im2col on the CPU and the native convolution elsewhere
(`lax.platform_dependent`), over the same kernel.

Parameters are always float32; `NetworkConfig.dtype = "bfloat16"` runs the convolutions and
dense layers in bfloat16 (fast on accelerators) and returns float32 outputs.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from games.core import Game

Array = jax.Array
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Size and compute precision of the residual network."""

    blocks: int = 2  # residual blocks
    channels: int = 32
    dtype: str = "float32"  # compute dtype ("bfloat16" on accelerators); params stay float32

    def __post_init__(self) -> None:
        if self.blocks < 0:
            raise ValueError(f"network.blocks must be >= 0, got {self.blocks}")
        if self.channels < 1:
            raise ValueError(f"network.channels must be >= 1, got {self.channels}")
        if self.dtype not in _DTYPES:
            raise ValueError(
                f"network.dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}"
            )


def _native_conv(x: Array, kernel: Array) -> Array:
    return jax.lax.conv_general_dilated(
        x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def _im2col_conv(x: Array, kernel: Array) -> Array:
    height, width = x.shape[1:3]
    padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    shifted = [padded[:, i : i + height, j : j + width] for i in range(3) for j in range(3)]
    return jnp.concatenate(shifted, axis=-1) @ kernel.reshape(-1, kernel.shape[-1])


class _Conv3x3(nn.Module):
    """A 3x3 'SAME' convolution without bias; im2col on the CPU (see the module docstring)."""

    features: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: Array) -> Array:
        shape = (3, 3, x.shape[-1], self.features)
        kernel = self.param("kernel", nn.initializers.lecun_normal(), shape, jnp.float32)
        x, kernel = x.astype(self.dtype), kernel.astype(self.dtype)
        return jax.lax.platform_dependent(x, kernel, cpu=_im2col_conv, default=_native_conv)


class _ResidualBlock(nn.Module):
    channels: int
    dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: Array) -> Array:
        y = _Conv3x3(self.channels, self.dtype)(x)
        y = nn.relu(nn.LayerNorm(dtype=self.dtype)(y))
        y = _Conv3x3(self.channels, self.dtype)(y)
        y = nn.LayerNorm(dtype=self.dtype)(y)
        return nn.relu(x + y)


class PolicyValueNet(nn.Module):
    """`apply(params, obs[B, H, W, C]) -> (logits float32[B, A], value float32[B] in [-1, 1])`.

    `game` is kept on the module so that evaluators can turn game states into observations.
    """

    game: Game
    blocks: int
    channels: int
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, obs: Array) -> tuple[Array, Array]:
        if obs.shape[1:] != tuple(self.game.observation_shape):
            raise ValueError(
                f"observation shape {obs.shape[1:]} does not match {self.game.name}'s "
                f"{tuple(self.game.observation_shape)} (expected [batch, H, W, C])"
            )
        x = obs.astype(self.dtype)
        x = _Conv3x3(self.channels, self.dtype)(x)
        x = nn.relu(nn.LayerNorm(dtype=self.dtype)(x))
        for _ in range(self.blocks):
            x = _ResidualBlock(self.channels, self.dtype)(x)
        batch = x.shape[0]

        # The heads' 1x1 convolutions are dense layers over the channels of each cell.
        p = nn.relu(nn.Dense(2, dtype=self.dtype)(x)).reshape(batch, -1)
        logits = nn.Dense(self.game.num_actions, dtype=self.dtype)(p)

        v = nn.relu(nn.Dense(2, dtype=self.dtype)(x)).reshape(batch, -1)
        v = nn.relu(nn.Dense(self.channels, dtype=self.dtype)(v))
        value = jnp.tanh(nn.Dense(1, dtype=self.dtype)(v)[:, 0])
        return logits.astype(jnp.float32), value.astype(jnp.float32)


def make_network(game: Game, config: NetworkConfig) -> PolicyValueNet:
    """The residual network for `game`, sized by `config`."""
    return PolicyValueNet(
        game=game, blocks=config.blocks, channels=config.channels, dtype=_DTYPES[config.dtype]
    )


def init_params(network: PolicyValueNet, game: Game, key: Array):
    """Fresh float32 parameters for `network` (a pytree)."""
    obs = jnp.zeros((1, *game.observation_shape), jnp.float32)
    return network.init(key, obs)
