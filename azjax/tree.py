"""The search loop: `mctx.search`'s tree, grown with fewer kernels per level of the tree.

`search` takes and returns what `mctx.search` does (with its default depth limit) and grows
the same `mctx.Tree`, node for node (tests/test_tree.py holds the two equal, bit for bit).
Each simulation walks down from the root, expands one node and backs its value up to the root.
mctx runs the walk down and the walk up as loops over the tree's levels, each as many levels
as the batch's deepest walk, so one level's kernels are what a batched search repeats most
(and on a GPU each level of a loop waits for the host to test its condition). Here:

- The root's action is selected once, before the walk down. mctx selects at every level
  through a `lax.cond` on the depth, which under `vmap` runs both the root's selection (for
  Gumbel MuZero, sequential halving) and the interior one at every level.
- The walk down records its path, and the walk up is no loop: the values that the path's
  nodes receive, reward + discount * the value below, come from one scan of the edges' maps
  x -> r + d x, and the tree's four statistics (node values and visits, children's values and
  visits) are written for the whole path in one scatter each. The scan sums in another order
  than mctx's loop, so the two agree to the bit where the discounts are 0 or +-1 and rewards
  come on a game's last move alone, as the game contract has them; otherwise to rounding.

The random keys are split as mctx splits them, so selections that draw from them (PUCT's tie
breaks) draw the same numbers.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import mctx

Array = jax.Array


def search(
    params: Any,
    rng_key: Array,
    *,
    root: mctx.RootFnOutput,
    recurrent_fn: mctx.RecurrentFn,
    root_action_selection_fn: mctx.RootActionSelectionFn,
    interior_action_selection_fn: mctx.InteriorActionSelectionFn,
    num_simulations: int,
    invalid_actions: Array | None = None,
    extra_data: Any = None,
) -> mctx.Tree:
    """`mctx.search` with its default depth limit (`num_simulations`): the tree [B, N =
    num_simulations + 1] after `num_simulations` simulations from `root` ([B, A] prior
    logits, [B] values, [B, ...] embeddings). Selection functions and `recurrent_fn` are
    mctx's: `root_action_selection_fn(key, tree, node)` and `interior_action_selection_fn(key,
    tree, node, depth)` over one unbatched tree; `invalid_actions` is bool [B, A] at the root."""
    batch = root.value.shape[0]
    rows = jnp.arange(batch)
    if invalid_actions is None:
        invalid_actions = jnp.zeros_like(root.prior_logits)
    walk = jax.vmap(
        functools.partial(
            _walk, select_root=root_action_selection_fn, select=interior_action_selection_fn
        )
    )

    def simulate(sim: Array, carry: tuple[Array, mctx.Tree]) -> tuple[Array, mctx.Tree]:
        key, tree = carry
        key, walk_key, expand_key = jax.random.split(key, 3)
        nodes, actions, depth = walk(jax.random.split(walk_key, batch), tree)
        parent = nodes[rows, depth - 1]
        action = actions[rows, depth - 1]
        leaf = tree.children_index[rows, parent, action]
        leaf = jnp.where(leaf == mctx.Tree.UNVISITED, sim + 1, leaf)
        tree = _expand(params, expand_key, tree, recurrent_fn, parent, action, leaf)
        return key, _backward(tree, nodes.at[rows, depth].set(leaf), actions, depth)

    tree = _root_tree(root, num_simulations, invalid_actions, extra_data)
    return jax.lax.fori_loop(0, num_simulations, simulate, (rng_key, tree))[1]


def _walk(
    key: Array,
    tree: mctx.Tree,
    select_root: mctx.RootActionSelectionFn,
    select: mctx.InteriorActionSelectionFn,
) -> tuple[Array, Array, Array]:
    """One unbatched tree's walk down from the root to an action not yet expanded: `(nodes,
    actions, depth)`, int32 [N] each and a scalar, where `nodes[d]` is the path's node at
    depth d and `actions[d]` the action taken there, for d < depth (the rest -1). A tree of N
    nodes holds paths of at most N - 1 edges, so no walk reaches mctx's default depth limit
    (the number of simulations, N - 1) before it reaches an action not yet expanded."""
    unvisited, size = mctx.Tree.UNVISITED, tree.node_visits.shape[0]
    key, root_key = jax.random.split(key)
    action = select_root(root_key, tree, mctx.Tree.ROOT_INDEX).astype(jnp.int32)
    nodes = jnp.full(size, unvisited, jnp.int32).at[0].set(mctx.Tree.ROOT_INDEX)
    actions = jnp.full(size, unvisited, jnp.int32).at[0].set(action)

    def down(carry: tuple) -> tuple:
        key, nodes, actions, child, depth = carry
        key, select_key = jax.random.split(key)
        # mctx passes the depth in the dtype of the prior logits
        action = select(select_key, tree, child, depth.astype(tree.children_prior_logits.dtype))
        action = action.astype(jnp.int32)
        nodes, actions = nodes.at[depth].set(child), actions.at[depth].set(action)
        return key, nodes, actions, tree.children_index[child, action], depth + 1

    child = tree.children_index[mctx.Tree.ROOT_INDEX, action]
    start = (key, nodes, actions, child, jnp.int32(1))
    _, nodes, actions, _, depth = jax.lax.while_loop(lambda c: c[3] != unvisited, down, start)
    return nodes, actions, depth


def _root_tree(
    root: mctx.RootFnOutput, num_simulations: int, invalid_actions: Array, extra_data: Any
) -> mctx.Tree:
    """The tree [B, num_simulations + 1] holding the root alone (visited once)."""
    batch, num_actions = root.prior_logits.shape
    nodes, dtype = (batch, num_simulations + 1), root.value.dtype
    children = (*nodes, num_actions)
    tree = mctx.Tree(
        node_visits=jnp.zeros(nodes, jnp.int32),
        raw_values=jnp.zeros(nodes, dtype),
        node_values=jnp.zeros(nodes, dtype),
        parents=jnp.full(nodes, mctx.Tree.NO_PARENT, jnp.int32),
        action_from_parent=jnp.full(nodes, mctx.Tree.NO_PARENT, jnp.int32),
        children_index=jnp.full(children, mctx.Tree.UNVISITED, jnp.int32),
        children_prior_logits=jnp.zeros(children, root.prior_logits.dtype),
        children_values=jnp.zeros(children, dtype),
        children_visits=jnp.zeros(children, jnp.int32),
        children_rewards=jnp.zeros(children, dtype),
        children_discounts=jnp.zeros(children, dtype),
        embeddings=jax.tree.map(
            lambda x: jnp.zeros((*nodes, *x.shape[1:]), x.dtype), root.embedding
        ),
        root_invalid_actions=invalid_actions,
        extra_data=extra_data,
    )
    index = jnp.full(batch, mctx.Tree.ROOT_INDEX)
    return _write_node(tree, index, root.prior_logits, root.value, root.embedding)


def _write_node(
    tree: mctx.Tree, index: Array, logits: Array, value: Array, embedding: Any
) -> mctx.Tree:
    """`tree` with node `index` [B] (new, or revisited at the depth limit) evaluated: its
    prior logits [B, A], raw and searched value [B], embedding, and one more visit."""
    rows = jnp.arange(index.shape[0])
    return tree.replace(
        children_prior_logits=tree.children_prior_logits.at[rows, index].set(logits),
        raw_values=tree.raw_values.at[rows, index].set(value),
        node_values=tree.node_values.at[rows, index].set(value),
        node_visits=tree.node_visits.at[rows, index].add(1),
        embeddings=jax.tree.map(lambda t, x: t.at[rows, index].set(x), tree.embeddings, embedding),
    )


def _expand(
    params: Any,
    key: Array,
    tree: mctx.Tree,
    recurrent_fn: mctx.RecurrentFn,
    parent: Array,
    action: Array,
    leaf: Array,
) -> mctx.Tree:
    """`tree` with the child `leaf` [B] of `parent` [B] by `action` [B] evaluated by
    `recurrent_fn` and linked to its parent."""
    rows = jnp.arange(parent.shape[0])
    embedding = jax.tree.map(lambda x: x[rows, parent], tree.embeddings)
    step, embedding = recurrent_fn(params, key, action, embedding)
    tree = _write_node(tree, leaf, step.prior_logits, step.value, embedding)
    return tree.replace(
        children_index=tree.children_index.at[rows, parent, action].set(leaf),
        children_rewards=tree.children_rewards.at[rows, parent, action].set(step.reward),
        children_discounts=tree.children_discounts.at[rows, parent, action].set(step.discount),
        parents=tree.parents.at[rows, leaf].set(parent),
        action_from_parent=tree.action_from_parent.at[rows, leaf].set(action),
    )


def _composed(discounts: Array, rewards: Array) -> tuple[Array, Array]:
    """The maps x -> r + d x of a path's edges [B, N], each composed with all those below it:
    `(scale, shift)` [B, N], edge k's `shift + scale x` = f_k(f_k+1(...f_N-1(x))). A scan that
    doubles its reach each step (log2 N steps, each one elementwise pass over the path)."""
    reach = 1
    while reach < discounts.shape[1]:
        below_d = jnp.concatenate([discounts[:, reach:], jnp.ones_like(discounts[:, :reach])], 1)
        below_r = jnp.concatenate([rewards[:, reach:], jnp.zeros_like(rewards[:, :reach])], 1)
        discounts, rewards = discounts * below_d, rewards + discounts * below_r
        reach *= 2
    return discounts, rewards


def _backward(tree: mctx.Tree, nodes: Array, actions: Array, depth: Array) -> mctx.Tree:
    """`tree` with the leaf's value backed up its path: `nodes` [B, N] from the root
    (`nodes[b, depth[b]]` the leaf), `actions` [B, N] taken at them. Each node on the path
    gets one more visit and the running mean of the values backed up through it, each edge its
    child's value and one more visit, as `mctx.search`'s walk up gives them."""
    batch, size = nodes.shape
    rows = jnp.arange(batch)
    on_path = jnp.arange(size) < depth[:, None]  # the leaf's ancestors
    parents = jnp.where(on_path, nodes, 0)
    edges = jnp.where(on_path, actions, 0)
    rewards = tree.children_rewards[rows[:, None], parents, edges]
    discounts = tree.children_discounts[rows[:, None], parents, edges]
    leaf_value = tree.node_values[rows, nodes[rows, depth]]
    # The value each ancestor receives, reward + discount * the value below, from the leaf
    # up: the edges' maps x -> r + d x composed (past the leaf, x -> x).
    scale, shift = _composed(jnp.where(on_path, discounts, 1), jnp.where(on_path, rewards, 0))
    backed = shift + scale * leaf_value[:, None]

    count = tree.node_visits[rows[:, None], parents]
    values = (tree.node_values[rows[:, None], parents] * count + backed) / (count + 1.0)
    # Each edge's child holds its new value: the next ancestor's, or the leaf's own.
    below = jnp.concatenate([values[:, 1:], values[:, :1]], axis=1)
    below = jnp.where(jnp.arange(size) == depth[:, None] - 1, leaf_value[:, None], below)
    visits = tree.children_visits[rows[:, None], parents, edges] + 1
    # Writes off the path go to a node past the tree's end, where they are dropped.
    index = jnp.where(on_path, nodes, tree.node_visits.shape[1])
    at = (rows[:, None], index)
    return tree.replace(
        node_values=tree.node_values.at[at].set(values, mode="drop"),
        node_visits=tree.node_visits.at[at].set(count + 1, mode="drop"),
        children_values=tree.children_values.at[(*at, edges)].set(below, mode="drop"),
        children_visits=tree.children_visits.at[(*at, edges)].set(visits, mode="drop"),
    )
