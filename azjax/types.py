"""Pytrees passed between the engine (self-play), the replay buffer and the trainer."""

from __future__ import annotations

import jax
from flax import struct

from games.core import State

Array = jax.Array


@struct.dataclass
class Examples:
    """Training positions with known targets, leading dimension N.

    Produced by the engine from self-play trajectories, stored by the replay buffer and
    consumed by the train step. Slots with `valid == False` are padding and are never stored.
    """

    observation: Array | None  # float32 [N, H, W, C], mover's view; None when states are kept
    policy: Array  # float32 [N, A], search policy target (zeros where policy_mask is False)
    policy_mask: Array  # bool [N], True where a full search produced the policy target (PCR)
    value: Array  # float32 [N], value target from the mover's view, in [-1, 1]
    valid: Array  # bool [N]
    state: State | None = None  # [N] the searched game states (when stored), else None


@struct.dataclass
class Trajectory:
    """Self-play positions in move order, leading dimensions [T, B] (time, game slot).

    Entry (t, b) is the position searched at step t in slot b and the move played from it.
    Consecutive entries of a slot belong to one game unless `terminated` ends it; the next
    entry then starts a new game.
    """

    observation: Array | None  # float32 [T, B, H, W, C], mover's view; None when states are kept
    policy: Array  # float32 [T, B, A], search policy (zeros where policy_mask is False)
    policy_mask: Array  # bool [T, B], True where a full search produced the policy (PCR)
    action: Array  # int32 [T, B], the move played
    reward: Array  # float32 [T, B], the mover's reward for the move played
    discount: Array  # float32 [T, B], 0 if the move ended the game, +1 same mover next, else -1
    terminated: Array  # bool [T, B], the move ended the game
    root_value: Array  # float32 [T, B], the searched value, mover's view
    valid: Array  # bool [T, B], False for empty padding slots
    state: State | None = None  # [T, B] the searched game states (when stored), else None
