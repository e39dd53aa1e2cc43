"""Pytrees passed between the engine (self-play), the replay buffer and the trainer."""

from __future__ import annotations

import jax
from flax import struct

Array = jax.Array


@struct.dataclass
class Examples:
    """Training positions with known targets, leading dimension N.

    Produced by the engine from self-play trajectories, stored by the replay buffer and
    consumed by the train step. Slots with `valid == False` are padding and are never stored.
    """

    observation: Array  # float32 [N, H, W, C], mover's view
    policy: Array  # float32 [N, A], search policy target (zeros where policy_mask is False)
    policy_mask: Array  # bool [N], True where a full search produced the policy target (PCR)
    value: Array  # float32 [N], value target from the mover's view, in [-1, 1]
    valid: Array  # bool [N]
