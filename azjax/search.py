"""Monte Carlo tree search over any game through mctx: Gumbel MuZero or PUCT (AlphaZero).

`mctx.search` runs over the real game, as in pgx's AlphaZero example: the tree's embeddings are
the States and `recurrent_fn` steps the rules. Conventions, as mctx needs them:

- values are from the view of the player to move at a node, an edge's reward from that of the
  player who moved (`rewards[parent's mover]`);
- an edge's discount is 0 into a terminal state, -1 when the player to move changes, +1 when it
  does not (Dots and Boxes), so `reward + discount * value(child)` is in the parent's view;
- terminal nodes are valued 0 and expand into themselves (`Game.step` is a no-op there) with
  reward 0 and discount 0, so they change no value;
- illegal actions are masked at the root (`invalid_actions`) and, as mctx masks only the root,
  inside the tree by a prior logit of `finfo.min` (finite, so no softmax sees NaN).

Games with chance (dice) are searched over mctx's Stochastic MuZero tree with the real game as
its model (`_chance_tree`): a decision node expands into the move's `afterstate` (valued from
its mover's view; reward 0, discount 1), a chance node into `step_chance` of one outcome chosen
by `chance_probs`, never by the State's key, so the search cannot foresee the roll that
`game.step` will draw. An afterstate's value is the expectation of `reward + discount * value`
over its outcomes (`chance_value="expected"`) or that of one drawn outcome ("sampled").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import mctx
from flax import struct

from azjax.config import SearchConfig
from games.core import Game, State, discount

Array = jax.Array
Params = Any
# evaluate(params, states batched [B], key) -> (logits float32[B, A], value float32[B]);
# the value is from the point of view of each state's player to move.
Evaluator = Callable[[Params, State, Array], tuple[Array, Array]]


class SearchOutput(NamedTuple):
    action: Array  # int32 [B], the move to play
    policy: Array  # float32 [B, A], the policy target (Gumbel improved policy / visit counts)
    root_value: Array  # float32 [B], the searched value of the root, mover's view


def network_evaluator(network) -> Evaluator:
    """The evaluator of an `azjax.network.PolicyValueNet` (the key is unused)."""
    observe = jax.vmap(network.game.observe)
    return lambda params, states, key: network.apply(params, observe(states))


def mask_logits(logits: Array, legal: Array) -> Array:
    """Logits with illegal actions at `finfo.min` (finite, so an all-illegal row stays NaN-free)."""
    logits = logits.astype(jnp.float32)
    top = jnp.max(jnp.where(legal, logits, -jnp.inf), axis=-1, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    return jnp.where(legal, logits - top, jnp.finfo(jnp.float32).min)


def _masked(logits: Array, invalid_actions: Array) -> Array:
    """Logits as mctx's policies mask them: the best at 0, invalid actions at `finfo.min`."""
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jnp.where(invalid_actions, jnp.finfo(logits.dtype).min, logits)


def reward(state: State, child: State) -> Array:
    """float32: the reward of the move `state` -> `child` for its mover. Unbatched."""
    return child.rewards[state.current_player].astype(jnp.float32)


def _evaluate(evaluate: Evaluator, params: Params, states: State, key: Array):
    """Masked prior logits and values (0 at terminal states) of a batch of States."""
    logits, value = evaluate(params, states, key)
    value = jnp.where(states.terminated, 0.0, value).astype(jnp.float32)
    return mask_logits(logits, states.legal_action_mask), value


def _grower(game: Game, evaluate: Evaluator, chance_value: str) -> Callable[..., mctx.Tree]:
    """`mctx.search` over `game`'s States, or `_chance_tree` on a game with chance: either
    takes `mctx.search`'s arguments but `recurrent_fn` and returns a tree with children
    [B, N, A]."""
    if game.has_chance:
        decision_fn = _decision_fn(game, evaluate, chance_value)
        return functools.partial(_chance_tree, decision_fn, _chance_fn(game, evaluate))

    def recurrent_fn(params: Params, key: Array, action: Array, states: State):
        children = jax.vmap(game.step)(states, action)
        logits, value = _evaluate(evaluate, params, children, key)
        out = mctx.RecurrentFnOutput(
            reward=jax.vmap(reward)(states, children),
            discount=jax.vmap(discount)(states, children),
            prior_logits=logits,
            value=value,
        )
        return out, children

    return functools.partial(mctx.search, recurrent_fn=recurrent_fn)


def search_evaluations(game: Game, config: SearchConfig, num_simulations: int | None = None) -> int:
    """The evaluator's rows in one position's search: the root, one per simulation, and on a
    game with chance the decision step's too (mctx steps both kinds of node every simulation):
    `chance_outcomes` per simulation under "expected", one under "sampled"."""
    sims = config.num_simulations if num_simulations is None else num_simulations
    per_simulation = 1
    if game.has_chance:
        per_simulation += game.chance_outcomes if config.chance_value == "expected" else 1
    return 1 + sims * per_simulation


def search_tree(
    game: Game,
    evaluate: Evaluator,
    params: Params,
    states: State,
    key: Array,
    config: SearchConfig,
    num_simulations: int | None = None,
    explore: bool | Array = True,
    sample: Array | None = None,
) -> tuple[SearchOutput, mctx.Tree]:
    """`run_search`, also returning the mctx tree (for analysis and tests): its embeddings are
    the States, or with chance nodes a `_Node` each."""
    batch = states.current_player.shape[0]
    sims = config.num_simulations if num_simulations is None else int(num_simulations)
    if sims < 1:
        raise ValueError(f"num_simulations must be >= 1, got {sims}")
    explore = jnp.broadcast_to(jnp.asarray(explore, jnp.bool_), (batch,))
    sample = explore if sample is None else jnp.broadcast_to(jnp.asarray(sample), (batch,))
    legal = states.legal_action_mask
    root_key, noise_key, search_key, action_key = jax.random.split(key, 4)

    logits, value = _evaluate(evaluate, params, states, root_key)
    root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=states)
    grower = _grower(game, evaluate, config.chance_value)
    grow = functools.partial(grower, params, num_simulations=sims, invalid_actions=~legal)
    if config.algorithm == "gumbel":  # mctx.gumbel_muzero_policy's
        root = root.replace(prior_logits=_masked(logits, ~legal))
        tree_key, gumbel_key = jax.random.split(search_key)
        scale = jnp.where(explore, config.gumbel_scale, 0.0)[:, None]
        gumbel = scale * jax.random.gumbel(gumbel_key, logits.shape)
        qtransform = mctx.qtransform_completed_by_mix_value
        tree = grow(
            tree_key,
            root=root,
            root_action_selection_fn=functools.partial(
                mctx.gumbel_muzero_root_action_selection,
                num_simulations=sims,
                max_num_considered_actions=config.max_num_considered_actions,
                qtransform=qtransform,
            ),
            interior_action_selection_fn=functools.partial(
                mctx.gumbel_muzero_interior_action_selection, qtransform=qtransform
            ),
            extra_data=mctx.GumbelMuZeroExtraData(root_gumbel=gumbel),
        )
        q = jax.vmap(qtransform, in_axes=(0, None))(tree, tree.ROOT_INDEX)
        visits = tree.summary().visit_counts
        most = (visits == visits.max(-1, keepdims=True)) & legal
        # Sampled: sequential halving's pick, the best Gumbel + logit + completed Q of the most
        # visited moves (mctx's private `score_considered`); greedy: the same without the noise.
        score = jnp.maximum(-1e9, gumbel + root.prior_logits + q)
        sampled = jnp.argmax(jnp.where(most, score, -jnp.inf), axis=-1)
        greedy = jnp.argmax(jnp.where(most, logits + q, -jnp.inf), axis=-1)
        weights = jax.nn.softmax(_masked(root.prior_logits + q, ~legal))
    else:  # mctx.muzero_policy's, with Dirichlet noise over the legal moves only
        fraction = jnp.where(explore, config.dirichlet_fraction, 0.0)[:, None]
        noise = jax.random.gamma(noise_key, config.dirichlet_alpha, logits.shape) * legal
        total = noise.sum(-1, keepdims=True)
        uniform = legal / jnp.maximum(legal.sum(-1, keepdims=True), 1)
        noise = jnp.where(total > 0, noise / jnp.where(total > 0, total, 1.0), uniform)
        probs = (1 - fraction) * jax.nn.softmax(logits) + fraction * noise
        tiny = jnp.finfo(jnp.float32).tiny
        noisy = mask_logits(jnp.log(jnp.maximum(probs, tiny)), legal)
        prior = jnp.log(jnp.maximum(jax.nn.softmax(noisy), tiny))
        select = functools.partial(mctx.muzero_action_selection, pb_c_init=config.pb_c_init)
        tree = grow(
            jax.random.split(search_key, 3)[2],  # mctx.muzero_policy's key for the search
            root=root.replace(prior_logits=_masked(prior, ~legal)),
            root_action_selection_fn=functools.partial(select, depth=0),
            interior_action_selection_fn=select,
        )
        weights = tree.summary().visit_probs
        visits = tree.summary().visit_counts.astype(jnp.float32)
        # Ties in visit counts go to the higher prior.
        greedy = jnp.argmax(
            jnp.where(legal, visits + 0.5 * jax.nn.softmax(logits), -jnp.inf), axis=-1
        )
        sampled = jax.random.categorical(
            action_key, jnp.where(visits > 0, jnp.log(visits), -jnp.inf)
        )
    action = jnp.where(sample, sampled, greedy)
    if config.sample_cutoff is not None:
        action = _cut(tree, action, greedy, config.sample_cutoff)
    live = legal.any(-1)
    output = SearchOutput(
        action=jnp.where(live, action, 0).astype(jnp.int32),
        policy=jnp.where(live[:, None], weights, 0.0).astype(jnp.float32),
        root_value=jnp.where(live, tree.summary().value, 0.0).astype(jnp.float32),
    )
    return output, tree


def _cut(tree: mctx.Tree, action: Array, greedy: Array, cutoff: float) -> Array:
    """[B]: `action`, or `greedy` where the searched Q of `action` is more than `cutoff` below
    the best Q of the root's visited actions, so that a sampled move varies the game without
    throwing it away."""
    root = jnp.full(action.shape, tree.ROOT_INDEX)
    q = tree.qvalues(root)
    visited = tree.children_visits[:, tree.ROOT_INDEX] > 0
    best = jnp.max(jnp.where(visited, q, -jnp.inf), axis=-1)
    chosen = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
    return jnp.where(chosen >= best - cutoff, action, greedy)


def run_search(
    game: Game,
    evaluate: Evaluator,
    params: Params,
    states: State,
    key: Array,
    config: SearchConfig,
    num_simulations: int | None = None,
    explore: bool | Array = True,
    sample: Array | None = None,
) -> SearchOutput:
    """Search a batch of states [B] and pick a move for each.

    `num_simulations` overrides `config.num_simulations` (static). `explore` (bool, or bool[B])
    adds root noise: Dirichlet for PUCT, Gumbel for Gumbel MuZero; `explore=False` is for
    evaluation play. `sample` (bool[B], default `explore`) picks how the move is chosen: PUCT
    samples in proportion to visits or plays the most visited action (ties to the higher
    prior); Gumbel plays sequential halving's pick under the noise or the noise-free best of the
    most visited actions. The policy target is the Gumbel improved policy (softmax of prior
    logits + completed Q) or the PUCT visit distribution, 0 on illegal actions. States without a
    legal action get action 0, a zero policy and value 0 (self-play never searches them).
    """
    return search_tree(
        game, evaluate, params, states, key, config, num_simulations, explore, sample
    )[0]


# ----------------------------------------------------------------------------- chance nodes


@struct.dataclass
class Afterstate:
    """The embedding of a chance node: the game's afterstate and who moved into it."""

    state: State
    mover: Array  # int32


def _decision_fn(game: Game, evaluate: Evaluator, chance_value: str):
    """mctx's decision step `(params, key, action [B], states [B]) -> (output, Afterstate)`:
    each move's afterstate, its outcomes' log-probabilities and its first value (see the module
    docstring; "sampled" costs one evaluation, for evaluators as noisy as a random playout)."""

    def decision_fn(params: Params, key: Array, action: Array, states: State):
        after = jax.vmap(game.afterstate)(states, action)
        probs = jax.vmap(game.chance_probs)(after)  # [B, C]
        logp = jnp.log(jnp.maximum(probs, jnp.finfo(jnp.float32).tiny))
        movers = states.current_player
        if chance_value == "sampled":
            outcome_key, key = jax.random.split(key)
            outcome = jax.random.categorical(outcome_key, jnp.where(probs > 0, logp, -jnp.inf))
            children = jax.vmap(game.step_chance)(after, outcome)
        else:
            outcomes = jnp.arange(game.chance_outcomes, dtype=jnp.int32)
            children = jax.vmap(lambda a: jax.vmap(game.step_chance, (None, 0))(a, outcomes))(after)
            children = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), children)
            movers = jnp.repeat(movers, game.chance_outcomes)
        _, value = _evaluate(evaluate, params, children, key)
        # the edge's parent as `reward` and `discount` read it: the player who moved
        parents = children.replace(current_player=movers)
        backed = jax.vmap(reward)(parents, children) + jax.vmap(discount)(parents, children) * value
        if chance_value != "sampled":
            backed = (probs * backed.reshape(probs.shape)).sum(-1)
        out = mctx.DecisionRecurrentFnOutput(chance_logits=logp, afterstate_value=backed)
        return out, Afterstate(state=after, mover=states.current_player)

    return decision_fn


def _chance_fn(game: Game, evaluate: Evaluator):
    """mctx's chance step `(params, key, outcome [B], Afterstate [B]) -> (output, states)`."""

    def chance_fn(params: Params, key: Array, outcome: Array, after: Afterstate):
        children = jax.vmap(game.step_chance)(after.state, outcome)
        logits, value = _evaluate(evaluate, params, children, key)
        movers = after.state.replace(current_player=after.mover)  # the edge's parent, as above
        out = mctx.ChanceRecurrentFnOutput(
            action_logits=logits,
            value=value,
            reward=jax.vmap(reward)(movers, children),
            discount=jax.vmap(discount)(movers, children),
        )
        return out, children

    return chance_fn


@struct.dataclass
class _Node:
    """A node's embedding in the tree with chance nodes: a decision node's `state` or a chance
    node's `after`; the other field is what the other kind's step made of the parent (both run
    for every node), never read."""

    state: State
    after: Afterstate
    decision: Array  # bool: a decision node


def _chance_recurrent_fn(
    decision_fn: Callable, chance_fn: Callable, num_actions: int, num_outcomes: int
) -> mctx.RecurrentFn:
    """One recurrent function over the tree with chance nodes, as mctx's Stochastic MuZero
    builds it: a node has A + C children, the moves then the outcomes, and the half that is not
    its kind has prior logits -inf. Both steps run for every node; each node keeps its kind's."""

    def recurrent_fn(params: Params, key: Array, index: Array, node: _Node):
        decided, after = decision_fn(params, key, index, node.state)
        rolled, state = chance_fn(params, key, index - num_actions, node.after)
        batch, decision = index.shape[0], node.decision  # a decision node's child is a chance node
        outcome_logits = [jnp.full((batch, num_actions), -jnp.inf), decided.chance_logits]
        move_logits = [rolled.action_logits, jnp.full((batch, num_outcomes), -jnp.inf)]
        output = mctx.RecurrentFnOutput(
            prior_logits=jnp.where(
                decision[:, None],
                jnp.concatenate(outcome_logits, axis=-1),
                jnp.concatenate(move_logits, axis=-1),
            ),
            value=jnp.where(decision, decided.afterstate_value, rolled.value),
            reward=jnp.where(decision, 0.0, rolled.reward),
            discount=jnp.where(decision, 1.0, rolled.discount),
        )
        return output, _Node(state=state, after=after, decision=~decision)

    return recurrent_fn


def _children(tree: mctx.Tree, part: slice) -> mctx.Tree:
    """`tree` with its children's arrays cut to `part` of the A + C: the moves or the outcomes."""
    return tree.replace(
        children_index=tree.children_index[..., part],
        children_prior_logits=tree.children_prior_logits[..., part],
        children_visits=tree.children_visits[..., part],
        children_rewards=tree.children_rewards[..., part],
        children_discounts=tree.children_discounts[..., part],
        children_values=tree.children_values[..., part],
        root_invalid_actions=tree.root_invalid_actions[..., part],
    )


def _chance_selection(
    select_move: mctx.InteriorActionSelectionFn, num_actions: int
) -> mctx.InteriorActionSelectionFn:
    """Selection in the tree with chance nodes (one game's: mctx vmaps it): `select_move` over
    the moves at a decision node; at a chance node the outcome furthest behind its share of the
    visits (the largest probability / (visits + 1))."""
    moves, outcomes = slice(None, num_actions), slice(num_actions, None)

    def select(key: Array, tree: mctx.Tree, node: Array, depth: Array) -> Array:
        move = select_move(key, _children(tree, moves), node, depth)
        chances = _children(tree, outcomes)
        probs = jax.nn.softmax(chances.children_prior_logits[node])
        outcome = jnp.argmax(probs / (chances.children_visits[node] + 1)).astype(jnp.int32)
        return jnp.where(tree.embeddings.decision[node], move, outcome + num_actions)

    return select


def _chance_tree(
    decision_fn: Callable,
    chance_fn: Callable,
    params: Params,
    rng_key: Array,
    *,
    root: mctx.RootFnOutput,
    root_action_selection_fn: mctx.RootActionSelectionFn,
    interior_action_selection_fn: mctx.InteriorActionSelectionFn,
    num_simulations: int,
    invalid_actions: Array,
    extra_data: Any = None,
) -> mctx.Tree:
    """`mctx.search` over the tree with chance nodes, as `mctx.stochastic_muzero_policy` runs
    it, with any selection of moves. Returns the tree with its children cut to the moves."""
    num_actions = root.prior_logits.shape[-1]
    batch = root.prior_logits.shape[0]
    decided, after = jax.eval_shape(
        decision_fn, params, rng_key, jnp.zeros(batch, jnp.int32), root.embedding
    )
    num_outcomes = decided.chance_logits.shape[-1]
    tree_root = root.replace(
        prior_logits=jnp.concatenate(
            [root.prior_logits, jnp.full((batch, num_outcomes), -jnp.inf)], axis=-1
        ),
        embedding=_Node(
            state=root.embedding,
            after=jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), after),
            decision=jnp.ones(batch, jnp.bool_),
        ),
    )

    def root_selection(key: Array, tree: mctx.Tree, node: Array, depth: Array) -> Array:
        return root_action_selection_fn(key, tree, node)

    tree = mctx.search(
        params,
        rng_key,
        root=tree_root,
        recurrent_fn=_chance_recurrent_fn(decision_fn, chance_fn, num_actions, num_outcomes),
        root_action_selection_fn=functools.partial(
            _chance_selection(root_selection, num_actions), depth=0
        ),
        interior_action_selection_fn=_chance_selection(interior_action_selection_fn, num_actions),
        num_simulations=num_simulations,
        invalid_actions=invalid_actions,
        extra_data=extra_data,
    )
    return _children(tree, slice(None, num_actions))
