"""Value targets from self-play trajectories, with unfinished games carried to the next chunk.

The value target of a position is the return of its mover, computed by a reverse scan over
each slot's moves:

    G_t = reward_t + discount_t * G_{t+1}

with `discount_t` = 0 when move t ended the game, +1 when the same player moves again (Dots and
Boxes) and -1 when the other player moves next; so G_t is always in the mover's view, whatever
the order of turns. G_t is known once the game of position t has ended inside the window.

Positions whose game has not ended yet are not thrown away: `resolve` keeps them in a pending
buffer of `capacity` entries per slot and puts them in front of the next chunk, so every
searched position eventually becomes a training example. Per slot, the window is the pending
entries followed by the new chunk; known positions form a prefix of it, and the first up to T
of them are emitted (oldest first). With `capacity >= max_game_length` nothing is ever lost:
after a chunk either T positions were emitted (so the pending count did not grow) or all known
ones were, and what remains is the unfinished game, which has fewer than `max_game_length`
positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from azjax.types import Examples, Trajectory

Array = jax.Array
VALUE_TARGETS = ("z", "q", "mix")


def check_value_target(value_target: str, value_mix: float) -> None:
    """Raise a clear ValueError for an unknown value target or a mix weight outside [0, 1]."""
    if value_target not in VALUE_TARGETS:
        raise ValueError(
            f"value_target must be one of {', '.join(VALUE_TARGETS)}, got {value_target!r}"
        )
    if not 0.0 <= value_mix <= 1.0:
        raise ValueError(f"value_mix must be in [0, 1], got {value_mix!r}")


def returns(trajectory: Trajectory) -> tuple[Array, Array]:
    """Each position's return from its mover's view, and whether it is known ([T, B] each).

    A return is known when the position is valid and its game ends inside the trajectory.
    """

    def back(carry, step):
        ret_next, ended_next = carry
        reward, discount, terminated = step
        ret = reward + discount * ret_next
        ended = terminated | ended_next
        return (ret, ended), (ret, ended)

    batch = trajectory.reward.shape[1:]
    init = (jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.bool_))
    steps = (trajectory.reward, trajectory.discount, trajectory.terminated)
    _, (ret, ended) = jax.lax.scan(back, init, steps, reverse=True)
    return ret, ended & trajectory.valid


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


def empty_trajectory(length: int, batch: int, observation_shape, num_actions: int) -> Trajectory:
    """An all-padding trajectory [length, batch] (the initial pending buffer)."""
    lead = (length, batch)
    return Trajectory(
        observation=jnp.zeros((*lead, *observation_shape), jnp.float32),
        policy=jnp.zeros((*lead, num_actions), jnp.float32),
        policy_mask=jnp.zeros(lead, jnp.bool_),
        action=jnp.zeros(lead, jnp.int32),
        reward=jnp.zeros(lead, jnp.float32),
        discount=jnp.zeros(lead, jnp.float32),
        terminated=jnp.zeros(lead, jnp.bool_),
        player=jnp.zeros(lead, jnp.int32),
        root_value=jnp.zeros(lead, jnp.float32),
        valid=jnp.zeros(lead, jnp.bool_),
    )


def resolve(
    pending: Trajectory,
    chunk: Trajectory,
    value_target: str = "z",
    value_mix: float = 0.5,
) -> tuple[Examples, Trajectory, dict[str, Array]]:
    """Turn pending positions [P, B] plus a new chunk [T, B] into examples and a new pending.

    `pending` holds each slot's carried positions right-aligned (valid entries last, padding
    first); `chunk` is fully valid. Returns the examples (N = T * B, row-major over [T, B],
    `valid` marking the emitted ones), the new pending buffer [P, B] in the same layout, and
    counts: `emitted` (examples), `pending` (carried positions) and `dropped` (positions that
    did not fit in the pending buffer: 0 whenever P >= the game's longest game).
    """
    capacity, length = pending.valid.shape[0], chunk.valid.shape[0]
    window = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), pending, chunk)
    value, known = value_targets(window, value_target, value_mix)
    first = capacity - pending.valid.sum(0)  # [B], index of each slot's oldest position
    count = jnp.minimum(known.sum(0), length)  # [B], positions emitted per slot

    steps = jnp.arange(length)[:, None]
    source = jnp.minimum(first[None] + steps, capacity + length - 1)  # [T, B]
    emit = steps < count[None]

    def gather(x: Array) -> Array:
        idx = source.reshape(source.shape + (1,) * (x.ndim - 2))
        return jnp.take_along_axis(x, idx, axis=0)

    def flat(x: Array) -> Array:
        return x.reshape((-1, *x.shape[2:]))

    policy_mask = gather(window.policy_mask) & emit
    examples = Examples(
        observation=flat(gather(window.observation)),
        policy=flat(jnp.where(policy_mask[..., None], gather(window.policy), 0.0)),
        policy_mask=flat(policy_mask),
        value=flat(jnp.where(emit, gather(value), 0.0)),
        valid=flat(emit),
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
