"""Search with chance nodes for games with dice: mctx's Stochastic MuZero tree, the real game
as its model (AlphaZero-style: nothing learned about the dynamics).

A move's node (a decision node) expands into the game's `afterstate`: the move played, the
dice not yet rolled. An afterstate (a chance node) expands into `step_chance` of one outcome,
chosen by mctx in proportion to the game's `chance_probs`, never by the State's own key: the
search cannot foresee the roll that `game.step` will draw. Conventions, as in azjax/search.py:

- values are from the point of view of the player to move at a decision node, and an
  afterstate is valued from the view of the player who moved into it (mctx's decision ->
  afterstate edge has no reward and discount 1);
- the chance edge afterstate -> state carries the move's reward for its mover and the discount
  0 into a terminal state, +1 when the mover moves again, -1 when the other player moves;
- an afterstate's value is the expectation over its outcomes of `reward + discount * value`,
  every outcome's State evaluated (`chance_outcomes` evaluations per expanded node);
- illegal actions get the prior logit `finfo.min` inside the tree and are masked at the root.

Moves are PUCT's (mctx has no Gumbel variant of this tree, so a Gumbel config is refused):
Dirichlet noise over the legal moves at the root when exploring, then a move sampled in
proportion to the visits, or the most visited move (ties to the higher prior).
`azjax.search.search_tree` sends every game with `has_chance` here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mctx
from flax import struct

from azjax.search import Evaluator, Params, SearchConfig, SearchOutput, _cut, mask_logits
from games.core import Game, State

Array = jax.Array


@struct.dataclass
class Afterstate:
    """The embedding of a chance node: the game's afterstate and who moved into it."""

    state: State
    mover: Array  # int32


def _outcome_value(child: State, mover: Array, value: Array) -> tuple[Array, Array, Array]:
    """(reward, discount, backed-up value) of the chance edge into `child`, from `mover`'s
    view; `value` is the evaluation of `child` from its own mover's view. Unbatched."""
    reward = child.rewards[mover].astype(jnp.float32)
    same = child.current_player == mover
    discount = jnp.where(child.terminated, 0.0, jnp.where(same, 1.0, -1.0)).astype(jnp.float32)
    return reward, discount, reward + discount * value


def _evaluate(evaluate: Evaluator, params: Params, states: State, key: Array):
    """Masked prior logits and values (0 at terminal states) of a batch of States."""
    logits, value = evaluate(params, states, key)
    value = jnp.where(states.terminated, 0.0, value).astype(jnp.float32)
    return mask_logits(logits, states.legal_action_mask), value


def _decision_fn(game: Game, evaluate: Evaluator):
    def decision_fn(params: Params, key: Array, action: Array, states: State):
        after = jax.vmap(game.afterstate)(states, action)
        probs = jax.vmap(game.chance_probs)(after)  # [B, C]
        outcomes = jnp.arange(game.chance_outcomes, dtype=jnp.int32)
        children = jax.vmap(lambda a: jax.vmap(game.step_chance, (None, 0))(a, outcomes))(after)
        flat = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), children)
        _, value = _evaluate(evaluate, params, flat, key)
        movers = jnp.repeat(states.current_player, game.chance_outcomes)
        _, _, backed = jax.vmap(_outcome_value)(flat, movers, value)
        out = mctx.DecisionRecurrentFnOutput(
            chance_logits=jnp.log(jnp.maximum(probs, jnp.finfo(jnp.float32).tiny)),
            afterstate_value=(probs * backed.reshape(probs.shape)).sum(-1),
        )
        return out, Afterstate(state=after, mover=states.current_player)

    return decision_fn


def _chance_fn(game: Game, evaluate: Evaluator):
    def chance_fn(params: Params, key: Array, outcome: Array, after: Afterstate):
        children = jax.vmap(game.step_chance)(after.state, outcome)
        logits, value = _evaluate(evaluate, params, children, key)
        reward, discount, _ = jax.vmap(_outcome_value)(children, after.mover, value)
        out = mctx.ChanceRecurrentFnOutput(
            action_logits=logits, value=value, reward=reward, discount=discount
        )
        return out, children

    return chance_fn


def chance_search_tree(
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
    """Search a batch of states [B] of a game with chance and pick a move for each; also
    returns the mctx search tree (decision nodes' actions). `azjax.search.run_search` calls
    it for every game with `has_chance`.

    `config.algorithm` must be "puct". `num_simulations` overrides `config.num_simulations`
    (static); `config`'s Dirichlet noise, `pb_c_init` and `sample_cutoff` apply. `explore`
    (bool, or bool[B]) adds the root noise; `sample` (bool[B], default `explore`) samples the
    move from the visits, else the most visited move is played. The policy target is the visit
    distribution, 0 on illegal actions. States without a legal action get action 0, a zero
    policy and value 0.
    """
    if config.algorithm != "puct":
        raise ValueError(
            f"search.algorithm={config.algorithm!r} on {game.name}: a game with chance is "
            "searched with PUCT (mctx has no Gumbel search with chance nodes); set it to 'puct'"
        )
    batch = states.current_player.shape[0]
    sims = config.num_simulations if num_simulations is None else int(num_simulations)
    if sims < 1:
        raise ValueError(f"num_simulations must be >= 1, got {sims}")
    explore = jnp.broadcast_to(jnp.asarray(explore, jnp.bool_), (batch,))
    sample = explore if sample is None else jnp.broadcast_to(jnp.asarray(sample), (batch,))
    legal = states.legal_action_mask
    root_key, noise_key, search_key, action_key = jax.random.split(key, 4)

    logits, value = _evaluate(evaluate, params, states, root_key)
    noise = jax.random.dirichlet(
        noise_key, jnp.full(game.num_actions, config.dirichlet_alpha), (batch,)
    )
    noise = jnp.where(legal, noise, 0.0)
    noise = noise / jnp.maximum(noise.sum(-1, keepdims=True), jnp.finfo(jnp.float32).tiny)
    fraction = jnp.where(explore, config.dirichlet_fraction, 0.0)[:, None]
    probs = (1 - fraction) * jax.nn.softmax(logits) + fraction * noise
    root = mctx.RootFnOutput(
        prior_logits=mask_logits(jnp.log(jnp.maximum(probs, jnp.finfo(jnp.float32).tiny)), legal),
        value=value,
        embedding=states,
    )
    out = mctx.stochastic_muzero_policy(
        params,
        search_key,
        root,
        _decision_fn(game, evaluate),
        _chance_fn(game, evaluate),
        num_simulations=sims,
        invalid_actions=~legal,
        dirichlet_fraction=0.0,  # the noise above is restricted to legal actions
        pb_c_init=config.pb_c_init,
    )
    summary = out.search_tree.summary()
    visits = summary.visit_counts.astype(jnp.float32)
    # Ties in visit counts go to the higher prior.
    greedy = jnp.argmax(jnp.where(legal, visits + 0.5 * jax.nn.softmax(logits), -jnp.inf), -1)
    sampled = jax.random.categorical(action_key, jnp.where(visits > 0, jnp.log(visits), -jnp.inf))
    action = jnp.where(sample, sampled, greedy)
    if config.sample_cutoff is not None:
        action = _cut(out.search_tree, action, greedy, config.sample_cutoff)
    live = legal.any(-1)
    output = SearchOutput(
        action=jnp.where(live, action, 0).astype(jnp.int32),
        policy=jnp.where(live[:, None], out.action_weights, 0.0).astype(jnp.float32),
        root_value=jnp.where(live, summary.value, 0.0).astype(jnp.float32),
    )
    return output, out.search_tree
