"""Agents: one door from a spec string (azjax.specs) to a move chooser, `agent(state, key)`.

An agent takes ONE unbatched game State and a PRNG key and returns an int32 action; it is
jittable and vmappable, so the arena vmaps it over games. `Agent.fn` is cached per (game,
settings) and network parameters are the traced `Agent.params`, so jitted callers compile once
per pair of agent kinds, whatever the checkpoint. Games with chance (dice): searches use chance
nodes (`run_search`), `greedy` scores the position after its move before the roll, and
alpha-beta, which would read the dice to come, refuses them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import flax
import jax
import jax.numpy as jnp

from azjax import model
from azjax.search import Evaluator, SearchConfig, network_evaluator, run_search
from azjax.specs import Spec, parse_spec
from games.core import Game, State, random_legal_action

Array = jax.Array
Params = Any
MoveFn = Callable[[Params, State, Array], Array]

ANALYSIS_SIMULATIONS = 200  # pure-MCTS simulations behind `analyse` for baseline specs
WIN = 1e6  # value of a won terminal position; heuristic evaluations stay far below it


@dataclasses.dataclass(frozen=True, eq=False)  # equal and hashed by identity: jax.jit(agent)
class Agent:
    """A move chooser: `agent(state, key) -> int32 action` for one unbatched state.

    A pytree whose leaves are `params`: passed to a jitted function, one compiled program
    serves every agent with the same `fn` (every checkpoint of a network), whatever its name."""

    fn: MoveFn  # fn(params, state, key); cached, hashable
    params: Any = None  # traced pytree (network parameters); None for baselines
    name: str = ""

    def __call__(self, state: State, key: Array) -> Array:
        check_unbatched(state, f"agent {self.name}".rstrip())
        return self.fn(self.params, state, key)

    def __repr__(self) -> str:  # the name, not every weight of the network
        return f"Agent({self.name!r}{_weights(self.params)})"


class _Label:
    """An agent's name in its pytree structure, equal to every other so that a name (a
    checkpoint's step) never splits jit's cache: a jitted function returning an agent names it
    as the first agent it was traced with."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Label)

    def __hash__(self) -> int:
        return 0


jax.tree_util.register_pytree_node(
    Agent,
    lambda agent: ((agent.params,), (agent.fn, _Label(agent.name))),
    lambda aux, children: Agent(aux[0], children[0], aux[1].text),
)


def check_unbatched(state: State, who: str) -> None:
    """Refuse a batch of states (ValueError naming `who`): agents and analyses take one state,
    and a batch would fail deep inside with a broadcasting error. Static shapes: works in jit."""
    shape = jnp.shape(state.current_player)
    if shape:
        raise ValueError(
            f"{who} takes one unbatched State, got a batch of shape {shape}: "
            "vmap it over the batch (jax.vmap(agent)(states, keys))"
        )


def _random_best(key: Array, values: Array, legal: Array) -> Array:
    """A uniformly random legal action among those of the highest value."""
    values = jnp.where(legal, values, -jnp.inf)
    return random_legal_action(key, legal & (values >= values.max()))


def terminal_value(state: State, player: Array) -> Array:
    """WIN, -WIN or 0 for `player` from the rewards of the transition into a final state."""
    return WIN * jnp.sign(state.rewards[player])


def _random_move(params: Params, state: State, key: Array) -> Array:
    return random_legal_action(key, state.legal_action_mask)


@functools.cache
def _greedy_fn(game: Game) -> MoveFn:
    actions = jnp.arange(game.num_actions, dtype=jnp.int32)

    def fn(params: Params, state: State, key: Array) -> Array:
        del params
        me = state.current_player
        children = jax.vmap(game.afterstate, (None, 0))(state, actions)
        values = jnp.where(
            children.terminated,
            jax.vmap(terminal_value, (0, None))(children, me),
            jax.vmap(game.heuristic, (0, None))(children, me).astype(jnp.float32),
        )
        return _random_best(key, values, state.legal_action_mask)

    return fn


@functools.cache
def _alphabeta_fn(game: Game, depth: int) -> MoveFn:
    """Negamax with alpha-beta pruning to `depth` plies, as a loop over an explicit stack (jit
    allows no recursion) of `depth` positions with, per level, the next child to try, the
    window and the best value so far, from that level's mover's view. Each iteration plays the
    top position's next legal child (scored at once when final or at the depth limit, else
    pushed) or pops a position with no child left or a closed window (a cut-off), backing its
    value up, negated only when the mover changes (repeated turns are exact). Final positions
    score +-WIN plus the plies left (faster wins, slower losses), others `game.heuristic`. The
    root tries its moves in a random order and keeps the first strictly best: random ties."""
    num_actions = game.num_actions
    order = jnp.asarray(game.move_order(), jnp.int32)
    positions = jnp.arange(num_actions)

    def fn(params: Params, state: State, key: Array) -> Array:
        del params
        root_order = jax.random.permutation(key, num_actions).astype(jnp.int32)
        stack = jax.tree.map(lambda x: jnp.broadcast_to(x, (depth, *x.shape)), state)
        neg_inf = jnp.full(depth, -jnp.inf, jnp.float32)
        init = (
            jnp.int32(0),  # level of the top position; -1 once the root is done
            stack,
            jnp.zeros(depth, jnp.int32),  # next position in the child order, per level
            neg_inf,  # alpha
            -neg_inf,  # beta
            neg_inf,  # best value so far
            jnp.int32(0),  # best root action
            jnp.int32(0),  # root action leading to the current subtree
        )

        def body(carry):
            level, stack, cursor, alpha, beta, best, best_action, root_action = carry
            node = jax.tree.map(lambda x: x[level], stack)
            mover = node.current_player
            child_order = jnp.where(level == 0, root_order, order)
            candidates = node.legal_action_mask[child_order] & (positions >= cursor[level])
            expand = candidates.any() & (alpha[level] < beta[level])
            slot = jnp.argmax(candidates)
            action = child_order[slot]
            child = game.step(node, action)
            plies_left = (depth - level).astype(jnp.float32)
            leaf_value = jnp.where(
                child.terminated,
                terminal_value(child, mover) + jnp.sign(child.rewards[mover]) * plies_left,
                jnp.asarray(game.heuristic(child, mover), jnp.float32),
            )
            is_leaf = child.terminated | (level + 1 >= depth)

            # Backed-up value of the finished top position, in its parent's view.
            parent = jnp.maximum(level - 1, 0)
            same = node.current_player == stack.current_player[parent]
            popped = jnp.where(same, best[level], -best[level])

            # Which level receives a value, and which value.
            target = jnp.where(expand, level, parent)
            value = jnp.where(expand, leaf_value, popped)
            receives = jnp.where(expand, is_leaf, level > 0)
            improves = receives & (value > best[target])
            best = best.at[target].set(jnp.where(improves, value, best[target]))
            alpha = alpha.at[target].max(jnp.where(receives, value, -jnp.inf))
            best_action = jnp.where(
                improves & (target == 0), jnp.where(expand, action, root_action), best_action
            )

            cursor = cursor.at[level].set(jnp.where(expand, slot + 1, cursor[level]))
            push = expand & ~is_leaf
            up = jnp.minimum(level + 1, depth - 1)
            keep = child.current_player == mover
            stack = jax.tree.map(lambda s, c: s.at[up].set(jnp.where(push, c, s[up])), stack, child)
            cursor = cursor.at[up].set(jnp.where(push, 0, cursor[up]))
            alpha = alpha.at[up].set(
                jnp.where(push, jnp.where(keep, alpha[level], -beta[level]), alpha[up])
            )
            beta = beta.at[up].set(
                jnp.where(push, jnp.where(keep, beta[level], -alpha[level]), beta[up])
            )
            best = best.at[up].set(jnp.where(push, -jnp.inf, best[up]))
            root_action = jnp.where(push & (level == 0), action, root_action)
            level = jnp.where(push, level + 1, jnp.where(expand, level, level - 1))
            return level, stack, cursor, alpha, beta, best, best_action, root_action

        out = jax.lax.while_loop(lambda carry: carry[0] >= 0, body, init)
        return out[6]

    return fn


@functools.cache
def rollout_evaluator(game: Game) -> Evaluator:
    """An Evaluator for pure MCTS: uniform logits and, as the value, the result (+1, -1 or 0)
    for the player to move of one playout by uniformly random legal moves on both sides (0 for a
    final state, and for a playout cut at `max_game_length`), dice drawn from the key, never
    read from the State."""

    def rollout(state: State, key: Array) -> Array:
        player = state.current_player

        def body(carry):
            s, k, total, steps = carry
            k, sub = jax.random.split(k)
            action = random_legal_action(sub, s.legal_action_mask)
            if game.has_chance:
                after = game.afterstate(s, action)
                dice = jnp.log(game.chance_probs(after))
                s = game.step_chance(
                    after, jax.random.categorical(jax.random.fold_in(sub, 1), dice)
                )
            else:
                s = game.step(s, action)
            return s, k, total + s.rewards[player], steps + 1

        def cond(carry):
            return ~carry[0].terminated & (carry[3] < game.max_game_length)

        init = (state, key, jnp.float32(0.0), jnp.int32(0))
        return jax.lax.while_loop(cond, body, init)[2]

    def evaluate(params: Params, states: State, key: Array) -> tuple[Array, Array]:
        del params
        batch = states.current_player.shape[0]
        values = jax.vmap(rollout)(states, jax.random.split(key, batch))
        return jnp.zeros((batch, game.num_actions), jnp.float32), values

    return evaluate


MCTS_EXPLORATION = 2.0  # PUCT constant of pure MCTS (uniform prior: close to classic UCT)


def mcts_config(game: Game, simulations: int) -> SearchConfig:
    """Pure MCTS settings: PUCT over a uniform prior (Gumbel's in-tree selection did not gain
    from more simulations with one-rollout values), the most visited move played; a chance
    node is first valued by one playout from one drawn outcome, not one per outcome."""
    return SearchConfig(
        algorithm="puct",
        num_simulations=simulations,
        max_num_considered_actions=game.num_actions,
        pb_c_init=MCTS_EXPLORATION,
        chance_value="sampled",
    )


@functools.cache
def _search_fn(game: Game, evaluate: Evaluator, config: SearchConfig) -> MoveFn:
    def fn(params: Params, state: State, key: Array) -> Array:
        batched = jax.tree.map(lambda x: x[None], state)
        out = run_search(game, evaluate, params, batched, key, config, explore=False)
        return out.action[0]

    return fn


def mcts_agent(game: Game, simulations: int) -> Agent:
    """Pure MCTS: `simulations` PUCT simulations over a uniform prior, valued by rollouts."""
    if simulations < 1:
        raise ValueError(f"MCTS simulations must be >= 1, got {simulations}")
    config = mcts_config(game, simulations)
    return Agent(fn=_search_fn(game, rollout_evaluator(game), config), name=f"mcts:{simulations}")


@functools.cache
def _policy_fn(game: Game, network: Any) -> MoveFn:
    def fn(params: Params, state: State, key: Array) -> Array:
        logits, _ = network.apply(params, game.observe(state)[None])
        return _random_best(key, logits[0], state.legal_action_mask)

    return fn


@functools.cache
def _network_evaluator(network: Any) -> Evaluator:
    return network_evaluator(network)


def policy_agent(game: Game, network: Any, params: Params, name: str = "policy") -> Agent:
    """The network's most probable legal move, without search."""
    return Agent(fn=_policy_fn(game, network), params=params, name=name)


def search_agent(
    game: Game, network: Any, params: Params, search_config: SearchConfig, name: str = "search"
) -> Agent:
    """The network with search (no exploration noise): the searched best move."""
    fn = _search_fn(game, _network_evaluator(network), search_config)
    return Agent(fn=fn, params=params, name=name)


def _trained(game: Game, parsed: Spec) -> tuple[model.Model, str]:
    """(the model, the agent name) of a spec naming a checkpoint, a model file or a zoo model,
    refusing one trained for another game."""
    found = model.load(parsed.source, game)
    name = f"{parsed.kind}:{parsed.model if parsed.model is not None else found.name}"
    if parsed.number is not None:
        name += f":{parsed.number}"
    return found, name


def make(spec: str, game: Game) -> Agent:
    """The agent named by `spec` for `game` (the spec forms: azjax.specs)."""
    parsed = parse_spec(spec)
    if parsed.kind == "random":
        return Agent(fn=_random_move, name="random")
    if parsed.kind == "greedy":
        return Agent(fn=_greedy_fn(game), name="greedy")
    if parsed.kind == "alphabeta" and game.has_chance:
        raise ValueError(
            f"alphabeta:{parsed.number} cannot play {game.name}: it has chance (dice), and "
            "alpha-beta would read the rolls to come; use mcts:N, greedy or random"
        )
    if parsed.kind == "alphabeta":
        return Agent(fn=_alphabeta_fn(game, parsed.number), name=f"alphabeta:{parsed.number}")
    if parsed.kind == "mcts":
        return mcts_agent(game, parsed.number)
    found, name = _trained(game, parsed)
    if parsed.kind in ("policy", "policy-zoo"):
        return policy_agent(game, found.network, found.params, name)
    search = found.config.playing_search(parsed.number)
    return search_agent(game, found.network, found.params, search, name)


AnalysisFn = Callable[[Params, State, Array], tuple[Array, Array, Array]]


@flax.struct.dataclass
class Analysis:
    """Hints: `analysis(state, key) -> (policy float32[A], value float32)` for one unbatched
    state, the value the searched one for the player to move."""

    fn: AnalysisFn = flax.struct.field(pytree_node=False)  # jitted fn(params, state, key); cached
    params: Any = None  # traced pytree (network parameters); None for pure MCTS

    def __call__(self, state: State, key: Array) -> tuple[Array, Array]:
        return self.searched(state, key)[:2]

    def searched(self, state: State, key: Array) -> tuple[Array, Array, Array]:
        """(policy, value, the action the search chooses with this key)."""
        check_unbatched(state, "an analysis")
        return self.fn(self.params, state, key)

    def __repr__(self) -> str:  # not every weight of the network
        kind = "pure MCTS" if self.params is None else "a network's search"
        return f"Analysis({kind}{_weights(self.params)})"


def _weights(params: Any) -> str:
    """ ", 12,345 weights" of a network's parameters; "" for none."""
    if params is None:
        return ""
    return f", {sum(x.size for x in jax.tree.leaves(params)):,} weights"


@functools.cache
def _analysis_fn(game: Game, evaluate: Evaluator, config: SearchConfig) -> AnalysisFn:
    """One jitted search per (game, evaluator, settings), shared by checkpoints of a network."""

    @jax.jit
    def fn(params: Params, state: State, key: Array) -> tuple[Array, Array, Array]:
        batched = jax.tree.map(lambda x: x[None], state)
        out = run_search(game, evaluate, params, batched, key, config, explore=False)
        return out.policy[0], out.root_value[0], out.action[0]

    return fn


def analysis(game: Game, spec: str) -> Analysis:
    """The analysis behind hints for `spec`: a trained network's search (its run's settings
    for play, `Config.playing_search`), else pure MCTS with ANALYSIS_SIMULATIONS simulations."""
    parsed = parse_spec(spec)
    if parsed.workdir is None and parsed.model is None:
        config = mcts_config(game, ANALYSIS_SIMULATIONS)
        return Analysis(_analysis_fn(game, rollout_evaluator(game), config))
    found, _ = _trained(game, parsed)
    config = found.config.playing_search(parsed.number)
    evaluate = _network_evaluator(found.network)
    return Analysis(_analysis_fn(game, evaluate, config), found.params)
