"""On-device self-play: B games under `vmap`, T moves per chunk under `lax.scan`.

A move that ends a game resets its slot to a new game inside the scan, so every step searches
one live position per slot. Each game is searched as its own batch of one with its own keys, so
a slot plays the same game whatever the batch size.

Playout cap randomization (KataGo): each step is a full search (`num_simulations`, root noise,
policy target) with probability `full_search_prob`, else a fast one (`fast_simulations`, no root
noise outside the sampled opening moves, no policy target). mctx's simulation count is static,
so one flag per scan step picks the search for the whole batch, under `lax.cond` (a per-game
flag under `vmap` would run both searches; fixed full and fast slots would tie a slot's games
to one kind). The slots' games are at unrelated move numbers, so the flag correlates little
within a game.

Moves are sampled for the first `temperature_moves` moves of a game (all when None), greedy
afterwards. With `opening_moves` N > 0 a game opens with k ~ U{0..N} random legal plies
(`new_game`), unsearched and unrecorded but counted in move numbers, so self-play also learns
from positions its own play would not reach.

Value targets (`resolve`): a position's target is its mover's return `G_t = reward_t +
discount_t * G_{t+1}`, with the search's rewards and discounts (`azjax.search.reward`,
`games.core.discount`), so z is the return the search maximises. Positions of unfinished games
wait in a pending buffer in the carry until known. With `as_states`, positions travel as game
States instead of observations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from azjax.config import SearchConfig, SelfPlayConfig
from azjax.search import Evaluator, reward, run_search, search_evaluations
from games.core import Game, State, discount, random_legal_action, tree_where

Array = jax.Array


@struct.dataclass
class Examples:
    """Training positions with known targets [N]: made by self-play (`resolve`), stored by the
    replay buffer and drawn by its sampler. Slots with `valid == False` are padding, never
    stored."""

    observation: Array | None  # float32 [N, H, W, C], mover's view; None where states are kept
    policy: Array  # float32 [N, A], search policy target (zeros where policy_mask is False)
    policy_mask: Array  # bool [N], True where a full search produced the policy target (PCR)
    value: Array  # float32 [N], value target from the mover's view, in [-1, 1]
    valid: Array  # bool [N]
    state: State | None = None  # [N] the searched game states (when stored), else None


@struct.dataclass
class Trajectory:
    """Self-play positions in move order [T, B]: entry (t, b) is the position searched at step
    t in slot b and the move played from it; a slot's next entry after `terminated` starts a
    new game."""

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


@struct.dataclass
class Carry:
    """Self-play state between chunks; every leaf has the slot dimension B."""

    states: State  # [B] games in flight (never terminated)
    move_number: Array  # int32 [B], moves played in each slot's current game
    pending: Trajectory  # [B, max_game_length] positions waiting for their game's result


def _swap(tree: Trajectory) -> Trajectory:
    """[T, B] <-> [B, T]: the carry keeps the slot dimension first."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), tree)


def _moves_played(move_number: Array, terminated: Array) -> Array:
    """[T, B]: moves played in each slot's game after each step (its length where it ended)."""

    def step(count, ended):
        count = count + 1
        return jnp.where(ended, 0, count), count

    return jax.lax.scan(step, move_number, terminated)[1]


def new_game(game: Game, key: Array, opening_moves: int) -> tuple[State, Array]:
    """(state, plies): a new game after k ~ U{0..opening_moves} uniformly random legal plies,
    skipping any that would end it (so `plies` can be below k). Unbatched."""
    if opening_moves == 0:
        return game.init(key), jnp.int32(0)
    init_key, count_key, move_key = jax.random.split(key, 3)
    count = jax.random.randint(count_key, (), 0, opening_moves + 1)

    def ply(i, carry):
        state, plies = carry
        action = random_legal_action(jax.random.fold_in(move_key, i), state.legal_action_mask)
        nxt = game.step(state, action)
        take = (i < count) & (plies == i) & ~nxt.terminated
        return tree_where(take, nxt, state), plies + take

    return jax.lax.fori_loop(0, opening_moves, ply, (game.init(init_key), jnp.int32(0)))


def make_rollout(
    game: Game,
    evaluate: Evaluator,
    search_config: SearchConfig,
    selfplay_config: SelfPlayConfig,
    as_states: bool = False,
) -> Callable:
    """`rollout(params, states, move_number, full, keys) -> (states, move_number, trajectory)`.

    Plays `T = full.shape[0]` moves in each of the B slots of `states` (live games [B]): `full`
    (bool [T]) picks a full or fast search per step, `keys` [T, B] are each slot's keys, and
    finished games restart at once. A slot's `Trajectory` depends only on its keys and `full`.
    """
    cfg = selfplay_config
    sims = search_config.num_simulations
    always_full = cfg.full_search_prob >= 1.0 or cfg.fast_simulations == sims
    temperature_moves = cfg.temperature_moves
    temperature_moves = game.max_game_length if temperature_moves is None else temperature_moves

    def play(params, state: State, move_number: Array, full: Array, key: Array):
        """One slot's move: search, play, restart the game if it ended. Unbatched."""
        search_key, reset_key = jax.random.split(key)
        sample = (move_number < temperature_moves)[None]
        one = jax.tree.map(lambda x: x[None], state)

        def search(simulations: int | None = None, explore: Array | bool = True):
            return run_search(
                game, evaluate, params, one, search_key, search_config, simulations, explore, sample
            )

        def fast_search():
            out = search(cfg.fast_simulations, explore=sample)
            return out._replace(policy=jnp.zeros_like(out.policy))

        out = search() if always_full else jax.lax.cond(full, search, fast_search)
        action = out.action[0]
        nxt = game.step(state, action)
        ended = nxt.terminated
        record = Trajectory(
            observation=None if as_states else game.observe(state),
            policy=out.policy[0],
            policy_mask=jnp.asarray(full | always_full, jnp.bool_),
            action=action,
            reward=reward(state, nxt),
            discount=discount(state, nxt),
            terminated=ended,
            root_value=out.root_value[0],
            valid=jnp.bool_(True),
            state=state if as_states else None,
        )
        fresh, plies = new_game(game, reset_key, cfg.opening_moves)
        nxt = tree_where(ended, fresh, nxt)
        return nxt, jnp.where(ended, plies, move_number + 1), record

    play_all = jax.vmap(play, in_axes=(None, 0, 0, None, 0))

    def rollout(params, states: State, move_number: Array, full: Array, keys: Array):
        def step(carry, xs):
            states, move_number, record = play_all(params, *carry, *xs)
            return (states, move_number), record

        (states, move_number), trajectory = jax.lax.scan(step, (states, move_number), (full, keys))
        return states, move_number, trajectory

    return rollout


def make_selfplay(
    game: Game,
    evaluate: Evaluator,
    search_config: SearchConfig,
    selfplay_config: SelfPlayConfig,
    as_states: bool = False,
    groups: int | None = None,
) -> tuple[Callable[[Array], Carry], Callable[[Any, Carry, Array], tuple]]:
    """`(init_fn, chunk_fn)`, both pure and un-jitted.

    `init_fn(key) -> Carry`; `chunk_fn(params, carry, key) -> (carry, examples, metrics)` with
    `Examples` of N = chunk_moves * batch_size slots (`valid` marks those with a known target)
    and a dict of scalar metrics. The slots share example slots within `groups` contiguous
    groups (`resolve`; default: one group per device).
    """
    cfg = selfplay_config
    batch, length = cfg.batch_size, cfg.chunk_moves
    rollout = make_rollout(game, evaluate, search_config, selfplay_config, as_states)
    groups = math.gcd(batch, jax.device_count()) if groups is None else groups

    def init_fn(key: Array) -> Carry:
        games, plies = jax.vmap(lambda k: new_game(game, k, cfg.opening_moves))(
            jax.random.split(key, batch)
        )
        example = jax.tree.map(lambda x: x[0], games) if as_states else None
        shape = None if as_states else game.observation_shape
        pending = empty_trajectory(game.max_game_length, batch, shape, game.num_actions, example)
        return Carry(games, plies, _swap(pending))

    def chunk_fn(params, carry: Carry, key: Array) -> tuple[Carry, Examples, dict[str, Array]]:
        pcr_key, slot_key = jax.random.split(key)
        full = jax.random.bernoulli(pcr_key, cfg.full_search_prob, (length,))
        keys = jax.random.split(slot_key, (length, batch))
        games, move_number, chunk = rollout(params, carry.states, carry.move_number, full, keys)
        examples, pending, counts = resolve(_swap(carry.pending), chunk, groups)
        moves = _moves_played(carry.move_number, chunk.terminated)
        finished = chunk.terminated.sum()
        positions = length * batch
        metrics = {
            "games_finished": finished,
            "mean_game_length": jnp.where(chunk.terminated, moves, 0).sum()
            / jnp.maximum(finished, 1),
            "full_search_fraction": chunk.policy_mask[:, 0].mean(),
            "target_fraction": counts["emitted"] / positions,
            "policy_target_fraction": examples.policy_mask.sum() / positions,
            "pending_positions": counts["pending"],
            "dropped_positions": counts["dropped"],
        }
        return Carry(games, move_number, _swap(pending)), examples, metrics

    return init_fn, chunk_fn


def chunk_evaluations(
    game: Game,
    search_config: SearchConfig,
    selfplay_config: SelfPlayConfig,
    full_search_fraction: float,
) -> int:
    """The evaluator's rows in one chunk, from its `full_search_fraction` metric: each step
    searches every slot, fully or (playout cap randomization) fast (`search_evaluations`)."""
    cfg = selfplay_config
    full_steps = round(full_search_fraction * cfg.chunk_moves)  # exact: a count over the steps
    full = search_evaluations(game, search_config)
    fast = search_evaluations(game, search_config, cfg.fast_simulations)
    return cfg.batch_size * (full_steps * full + (cfg.chunk_moves - full_steps) * fast)


# ----------------------------------------------------------------------------- value targets


def returns(trajectory: Trajectory) -> tuple[Array, Array]:
    """Each position's return `G_t = reward_t + discount_t * G_{t+1}` (its mover's view) and
    whether it is known (valid, its game ending inside the trajectory), [T, B] each."""

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


def empty_trajectory(
    length: int,
    batch: int,
    observation_shape: tuple[int, ...] | None,
    num_actions: int,
    state: State | None = None,
) -> Trajectory:
    """An all-padding trajectory [length, batch] (the initial pending buffer), with game states
    like the unbatched `state` if given, and no observations if `observation_shape` is None."""
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
    `total` in all: min(known, c) for the largest cap c with sum(min(known, c)) <= total (by
    bisection), the remaining example slots going one each to the first slots above the cap."""
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
    groups: int = 1,
) -> tuple[Examples, Trajectory, dict[str, Array]]:
    """Turn pending positions [P, B] plus a new chunk [T, B] into examples and a new pending.

    `pending` holds each slot's carried positions right-aligned (padding first); `chunk` is
    fully valid. Returns the examples (N = T * B; in each group the emitted ones first, by
    slot, oldest first), the new pending buffer [P, B] in the same layout, and counts:
    `emitted`, `pending` and `dropped` (positions that did not fit in the pending buffer: none
    when P >= the longest game). The B slots form `groups` contiguous groups that share their
    example slots among themselves only (one per device: examples never change device).
    """
    batch = chunk.valid.shape[1]
    if groups < 1 or batch % groups:
        raise ValueError(f"groups={groups} must be >= 1 and divide the {batch} game slots")
    if groups == 1:
        return _resolve(pending, chunk)

    def split(x: Array) -> Array:
        return x.reshape(x.shape[0], groups, batch // groups, *x.shape[2:])

    examples, new_pending, counts = jax.vmap(_resolve, in_axes=1, out_axes=(0, 1, 0))(
        jax.tree.map(split, pending), jax.tree.map(split, chunk)
    )
    examples = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), examples)
    new_pending = jax.tree.map(lambda x: x.reshape(x.shape[0], batch, *x.shape[3:]), new_pending)
    return examples, new_pending, {k: v.sum() for k, v in counts.items()}


def _resolve(
    pending: Trajectory, chunk: Trajectory
) -> tuple[Examples, Trajectory, dict[str, Array]]:
    """`resolve` for one group of slots."""
    capacity, (length, batch) = pending.valid.shape[0], chunk.valid.shape
    window = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), pending, chunk)
    value, known = returns(window)
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
