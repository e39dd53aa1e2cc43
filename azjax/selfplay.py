"""On-device self-play: B games under `vmap`, T moves per chunk under `lax.scan`.

Every step searches exactly one live position per slot: a move that ends a game immediately
resets that slot to a new game (inside the scan), so no search is spent on finished games.

Playout cap randomization (KataGo): each step is a full search (`SearchConfig.num_simulations`,
root noise, policy target) with probability `full_search_prob`, else a fast one
(`fast_simulations`, no root noise except in the sampled opening moves, no policy target);
every position gets a value target. mctx's simulation count is static, so the choice is made
once per scan step for the whole batch and applied with `lax.cond` on that unbatched flag: only
the chosen search runs, and no simulation is wasted. (Splitting the batch into fixed full and
fast slots would tie a slot's games to one kind of search, and a per-game flag under `vmap`
would run both searches for every game.) A step's games are at unrelated move numbers after the
first few resets, so the shared flag correlates little within a game.

Moves are sampled (see `run_search`'s `sample`) for the first `temperature_moves` moves of
each game and played greedily afterwards. With `opening_moves` N > 0, each game opens with a
uniformly drawn number k in 0..N of uniformly random legal plies (fewer where one would end the
game), played without search and not recorded: self-play then also learns from positions its
own play would not reach, and its move numbers count those plies.

Each game is searched as its own batch of one, vmapped over slots, with its own keys: a game's
moves depend only on its keys, so a slot plays the same game whatever the batch size.

Each move records the mover's reward and the edge's discount as the search sees them
(`azjax.search.reward`, `games.core.discount`), so the value target z is the return the search
maximises.
With `as_states`, each position travels as its game State instead of its observation (the replay
buffer stores whichever is smaller, and reanalyse needs the State), so the pending buffer
shrinks too.

Value targets come from `azjax.targets.resolve`: positions whose game has not ended stay in a
pending buffer in the carry (max_game_length entries per slot) and are emitted once known;
slots share their example slots within groups (one per device), so a burst of finished games
in some slots is emitted at once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from azjax import targets
from azjax.search import Evaluator, SearchConfig, reward, run_search, search_evaluations
from azjax.types import Examples, Trajectory
from azjax.validation import check_fields
from games.core import Game, State, discount, random_legal_action, tree_where

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class SelfPlayConfig:
    """Games in flight, chunk length, playout cap randomization, move sampling, value targets."""

    batch_size: int = 256  # games in flight
    chunk_moves: int = 32  # moves per jitted chunk (lax.scan length)
    full_search_prob: float = 0.25  # playout cap randomization: P(full search)
    fast_simulations: int = 8
    temperature_moves: int = 8  # sample moves for the first N moves of a game, then argmax
    value_target: str = "z"  # "z" | "q" | "mix"
    value_mix: float = 0.5  # weight of q in "mix"
    opening_moves: int = 0  # each game opens with 0..N uniformly random plies, not recorded

    def __post_init__(self) -> None:
        checks = {
            "batch_size": (self.batch_size >= 1, ">= 1"),
            "chunk_moves": (self.chunk_moves >= 1, ">= 1"),
            "full_search_prob": (0.0 < self.full_search_prob <= 1.0, "in (0, 1]"),
            "fast_simulations": (self.fast_simulations >= 1, ">= 1"),
            "temperature_moves": (self.temperature_moves >= 0, ">= 0"),
            "opening_moves": (self.opening_moves >= 0, ">= 0"),
        }
        check_fields("selfplay", self, checks)
        targets.check_value_target(self.value_target, self.value_mix)


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
    """A new game after k ~ U{0..opening_moves} uniformly random legal plies: (state, plies).

    A ply that would end the game is not played, so the state is live and `plies` (int32
    scalar) can be below k. Unbatched; with `opening_moves == 0`, `(game.init(key), 0)`.
    """
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

    Plays `T = full.shape[0]` moves in each of the `B` slots of `states` (live games, [B]):
    `full` (bool [T]) picks a full or fast search per step, `keys` ([T, B]) are each slot's
    keys. Finished games restart at once. Returns the final states and move numbers and the
    `Trajectory` [T, B]. A slot's trajectory depends only on its own keys and `full`, so a
    batch of B games plays exactly what B separate one-game rollouts would.
    """
    cfg = selfplay_config
    always_full = cfg.full_search_prob >= 1.0 or cfg.fast_simulations == (
        search_config.num_simulations
    )

    def play(params, state: State, move_number: Array, full: Array, key: Array):
        """One slot's move: search, play, restart the game if it ended. Unbatched."""
        search_key, reset_key = jax.random.split(key)
        sample = (move_number < cfg.temperature_moves)[None]
        one = jax.tree.map(lambda x: x[None], state)

        def full_search():
            return run_search(game, evaluate, params, one, search_key, search_config, sample=sample)

        def fast_search():
            out = run_search(
                game,
                evaluate,
                params,
                one,
                search_key,
                search_config,
                num_simulations=cfg.fast_simulations,
                explore=sample,
                sample=sample,
            )
            return out._replace(policy=jnp.zeros_like(out.policy))

        out = full_search() if always_full else jax.lax.cond(full, full_search, fast_search)
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
            states, move_number = carry
            full, keys = xs
            states, move_number, record = play_all(params, states, move_number, full, keys)
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
    `Examples` of N = chunk_moves * batch_size slots (`valid` marks the ones with a known
    target; with `as_states`, they carry their game states instead of observations) and a dict
    of scalar metrics. The slots share example slots within `groups` contiguous groups, the
    examples of group g coming g-th (default: one group per device, so examples stay local).
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
        pending = targets.empty_trajectory(
            game.max_game_length, batch, shape, game.num_actions, example
        )
        return Carry(
            states=games,
            move_number=plies,
            pending=_swap(pending),
        )

    def chunk_fn(params, carry: Carry, key: Array) -> tuple[Carry, Examples, dict[str, Array]]:
        pcr_key, slot_key = jax.random.split(key)
        full = jax.random.bernoulli(pcr_key, cfg.full_search_prob, (length,))
        keys = jax.random.split(slot_key, (length, batch))
        games, move_number, chunk = rollout(params, carry.states, carry.move_number, full, keys)
        examples, pending, counts = targets.resolve(
            _swap(carry.pending), chunk, cfg.value_target, cfg.value_mix, groups
        )
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
