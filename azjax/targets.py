"""Value targets from self-play trajectories, with unfinished games carried to the next chunk.

The value target of a position is the return of its mover, computed by a reverse scan over
each slot's moves:

    G_t = reward_t + discount_t * G_{t+1}

with `discount_t` = 0 when move t ended the game, +1 when the same player moves again (Dots and
Boxes) and -1 when the other player moves next; so G_t is always in the mover's view, whatever
the order of turns. G_t is known once the game of position t has ended inside the window.

Positions whose game has not ended yet are not thrown away: `resolve` keeps them in a pending
buffer of P entries per slot and puts them in front of the next chunk, so every searched
position eventually becomes a training example. Per slot, the window is the pending entries
followed by the new chunk [T]; its known positions form a prefix (oldest first).

The output has T * B example slots, shared by all game slots: when more positions are known,
each slot emits up to a common cap c >= T of its oldest known positions (water-filling; the
largest c that fits, the few leftover example slots going to slots above the cap). Pooling
keeps the known backlog small, since finished games are spread unevenly over slots. Nothing is
lost when P >= max_game_length: a slot emits at least min(known, T) positions, so after a chunk
either its pending count did not grow or only its unfinished game (fewer than max_game_length
positions) is left.
"""

from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jnp

from azjax.types import Examples, Trajectory
from azjax.validation import check_fields
from games.core import State

Array = jax.Array
VALUE_TARGETS = ("z", "q", "mix")


def check_value_target(value_target: str, value_mix: float) -> None:
    """ValueError naming `selfplay.value_target` (the config key that sets it) when unknown, or
    `selfplay.value_mix` outside [0, 1]."""
    given = types.SimpleNamespace(value_target=value_target, value_mix=value_mix)
    checks = {
        "value_target": (value_target in VALUE_TARGETS, f"one of {', '.join(VALUE_TARGETS)}"),
        "value_mix": (0.0 <= value_mix <= 1.0, "in [0, 1]"),
    }
    check_fields("selfplay", given, checks)


def _backup(trajectory: Trajectory, reward: Array, discount: Array) -> tuple[Array, Array]:
    """`G_t = reward_t + discount_t * G_{t+1}` over `reward` and `discount` [T, B], and whether
    the game of each position ends inside the trajectory ([T, B] each)."""

    def back(carry, step):
        ret_next, ended_next = carry
        reward, discount, terminated = step
        ret = reward + discount * ret_next
        ended = terminated | ended_next
        return (ret, ended), (ret, ended)

    batch = reward.shape[1:]
    init = (jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.bool_))
    steps = (reward, discount, trajectory.terminated)
    _, (ret, ended) = jax.lax.scan(back, init, steps, reverse=True)
    return ret, ended & trajectory.valid


def returns(trajectory: Trajectory) -> tuple[Array, Array]:
    """Each position's return from its mover's view, and whether it is known ([T, B] each).

    A return is known when the position is valid and its game ends inside the trajectory.
    """
    return _backup(trajectory, trajectory.reward, trajectory.discount)


def value_targets(
    trajectory: Trajectory, value_target: str = "z", value_mix: float = 0.5
) -> tuple[Array, Array]:
    """Value targets [T, B] and their known mask.

    "z": the game result (return); "q": the search's root value (known at once); "mix":
    `(1 - value_mix) * z + value_mix * q`, known with z.
    """
    check_value_target(value_target, value_mix)
    z, known = returns(trajectory)
    if value_target == "z":
        return z, known
    q = trajectory.root_value
    if value_target == "q":
        return q, trajectory.valid
    return (1.0 - value_mix) * z + value_mix * q, known


def empty_trajectory(
    length: int,
    batch: int,
    observation_shape: tuple[int, ...] | None,
    num_actions: int,
    state: State | None = None,
) -> Trajectory:
    """An all-padding trajectory [length, batch] (the initial pending buffer); with an
    (unbatched) example `state`, it keeps game states too, and with `observation_shape` None,
    no observations."""
    lead = (length, batch)
    return Trajectory(
        observation=None
        if observation_shape is None
        else jnp.zeros((*lead, *observation_shape), jnp.float32),
        policy=jnp.zeros((*lead, num_actions), jnp.float32),
        policy_mask=jnp.zeros(lead, jnp.bool_),
        action=jnp.zeros(lead, jnp.int32),
        reward=jnp.zeros(lead, jnp.float32),
        discount=jnp.zeros(lead, jnp.float32),
        terminated=jnp.zeros(lead, jnp.bool_),
        root_value=jnp.zeros(lead, jnp.float32),
        valid=jnp.zeros(lead, jnp.bool_),
        state=jax.tree.map(lambda x: jnp.zeros((*lead, *x.shape), x.dtype), state),
    )


def _emission_counts(known: Array, total: int, most: int) -> Array:
    """[B] positions emitted per slot from `known` [B] known counts (each <= `most`), at most
    `total` in all.

    Every slot gets min(known, c) for the largest cap c with sum(min(known, c)) <= total (found
    by bisection; c >= total // B), and the remaining example slots go, one each, to the first
    slots that still have known positions above the cap.
    """
    batch = known.shape[0]
    low = jnp.asarray(total // batch, jnp.int32)  # always fits
    high = jnp.maximum(known.max(), low) + 1  # never needed beyond this
    for _ in range(int(most + 1).bit_length()):
        mid = (low + high) // 2
        fits = jnp.minimum(known, mid).sum() <= total
        low, high = jnp.where(fits, mid, low), jnp.where(fits, high, mid)
    count = jnp.minimum(known, low)
    above = known > low
    extra = above & (jnp.cumsum(above) <= total - count.sum())
    return count + extra


def resolve(
    pending: Trajectory,
    chunk: Trajectory,
    value_target: str = "z",
    value_mix: float = 0.5,
    groups: int = 1,
) -> tuple[Examples, Trajectory, dict[str, Array]]:
    """Turn pending positions [P, B] plus a new chunk [T, B] into examples and a new pending.

    `pending` holds each slot's carried positions right-aligned (valid entries last, padding
    first); `chunk` is fully valid. Returns the examples (N = T * B; in each group the emitted
    ones first, by slot, oldest first, `valid` marking them), the new pending buffer [P, B] in
    the same layout, and counts: `emitted` (examples), `pending` (carried positions) and
    `dropped` (positions that did not fit in the pending buffer: 0 whenever P >= the longest
    game).

    `groups` splits the B slots into that many contiguous groups that share their T * B /
    groups example slots among themselves only; with one group per device, examples never
    move between devices.
    """
    batch = chunk.valid.shape[1]
    if groups < 1 or batch % groups:
        raise ValueError(f"groups={groups} must be >= 1 and divide the {batch} game slots")
    if groups == 1:
        return _resolve(pending, chunk, value_target, value_mix)

    def split(x: Array) -> Array:
        return x.reshape(x.shape[0], groups, batch // groups, *x.shape[2:])

    one_group = functools.partial(_resolve, value_target=value_target, value_mix=value_mix)
    examples, new_pending, counts = jax.vmap(one_group, in_axes=1, out_axes=(0, 1, 0))(
        jax.tree.map(split, pending), jax.tree.map(split, chunk)
    )
    examples = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), examples)
    new_pending = jax.tree.map(lambda x: x.reshape(x.shape[0], batch, *x.shape[3:]), new_pending)
    return examples, new_pending, {k: v.sum() for k, v in counts.items()}


def _resolve(
    pending: Trajectory, chunk: Trajectory, value_target: str, value_mix: float
) -> tuple[Examples, Trajectory, dict[str, Array]]:
    """`resolve` for one group of slots."""
    capacity, (length, batch) = pending.valid.shape[0], chunk.valid.shape
    window = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), pending, chunk)
    value, known = value_targets(window, value_target, value_mix)
    first = capacity - pending.valid.sum(0)  # [B], window index of each slot's oldest position
    count = _emission_counts(known.sum(0), length * batch, capacity + length)  # [B]

    # Example j comes from slot `slot[j]`, the `j - start[slot]`-th oldest position there.
    end = jnp.cumsum(count)
    j = jnp.arange(length * batch)
    slot = jnp.minimum(jnp.searchsorted(end, j, side="right"), batch - 1)
    row = jnp.minimum(first[slot] + j - (end - count)[slot], capacity + length - 1)
    emit = j < end[-1]

    def gather(x: Array) -> Array:
        return x[row, slot]

    policy_mask = gather(window.policy_mask) & emit
    examples = Examples(
        observation=jax.tree.map(gather, window.observation),
        policy=jnp.where(policy_mask[:, None], gather(window.policy), 0.0),
        policy_mask=policy_mask,
        value=jnp.where(emit, gather(value), 0.0),
        valid=emit,
        state=jax.tree.map(gather, window.state),
    )
    # The new pending buffer is the window's last P entries, minus what was emitted.
    keep_from = first + count  # [B], window index of the oldest position still pending
    kept = jnp.arange(length, capacity + length)[:, None] >= keep_from[None]
    new_pending = jax.tree.map(lambda x: x[length:], window)
    new_pending = new_pending.replace(valid=new_pending.valid & kept)
    counts = {
        "emitted": count.sum(),
        "pending": new_pending.valid.sum(),
        "dropped": jnp.maximum(length - keep_from, 0).sum(),
    }
    return examples, new_pending, counts
