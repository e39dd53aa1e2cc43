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
- Where the interior selection ignores its key and depth (Gumbel MuZero's: a function of the
  node's statistics alone) and `deterministic_interior` says so, each node's next action is
  kept in a [B, N] array, recomputed for the path's nodes after each backup (the only nodes
  whose statistics changed) in batched passes of `SPAN` positions, and the walk down is no
  loop either: each node's successor is its kept action's child, and the path from the root
  follows by pointer doubling (log2 N passes of gathers). A search of up to `SPAN` simulations
  then has no loop whose length depends on the tree, at the cost of selecting at every path
  position: more arithmetic, fewer launches and no host round trips (azjax keeps the actions
  on a GPU: `azjax.search.keeps_actions`).

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
# Path positions in one batched pass of `_choose`: a search of up to 128 simulations (every
# shipped self-play search) takes one pass and no loop.
SPAN = 128


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
    deterministic_interior: bool = False,
) -> mctx.Tree:
    """`mctx.search` with its default depth limit (`num_simulations`): the tree [B, N =
    num_simulations + 1] after `num_simulations` simulations from `root` ([B, A] prior
    logits, [B] values, [B, ...] embeddings). Selection functions and `recurrent_fn` are
    mctx's: `root_action_selection_fn(key, tree, node)` and `interior_action_selection_fn(key,
    tree, node, depth)` over one unbatched tree; `invalid_actions` is bool [B, A] at the root.
    `deterministic_interior` says the interior selection ignores its key and depth (Gumbel
    MuZero's), so each node's action is computed once its statistics change, not at each walk."""
    batch = root.value.shape[0]
    rows = jnp.arange(batch)
    if invalid_actions is None:
        invalid_actions = jnp.zeros_like(root.prior_logits)
    walk = jax.vmap(
        functools.partial(
            _walk, select_root=root_action_selection_fn, select=interior_action_selection_fn
        )
    )
    select_root = jax.vmap(functools.partial(_select_root, root_action_selection_fn))

    def simulate(sim: Array, carry: tuple) -> tuple:
        key, tree, chosen = carry
        key, walk_key, expand_key = jax.random.split(key, 3)
        walk_keys = jax.random.split(walk_key, batch)
        if chosen is None:
            nodes, actions, depth = walk(walk_keys, tree)
        else:
            nodes, actions, depth = _follow(tree, chosen, select_root(walk_keys, tree))
        parent = nodes[rows, depth - 1]
        action = actions[rows, depth - 1]
        leaf = tree.children_index[rows, parent, action]
        leaf = jnp.where(leaf == mctx.Tree.UNVISITED, sim + 1, leaf)
        tree = _expand(params, expand_key, tree, recurrent_fn, parent, action, leaf)
        path = nodes.at[rows, depth].set(leaf)
        tree = _backward(tree, path, actions, depth)
        if chosen is not None:
            chosen = _choose(interior_action_selection_fn, tree, chosen, path, depth)
        return key, tree, chosen

    tree = _root_tree(root, num_simulations, invalid_actions, extra_data)
    # Each node's next interior action, [B, N]: read only at nodes already expanded, each of
    # which was chosen for after the backup that expanded it.
    chosen = jnp.zeros(tree.node_visits.shape, jnp.int32) if deterministic_interior else None
    return jax.lax.fori_loop(0, num_simulations, simulate, (rng_key, tree, chosen))[1]


def _choose(
    select: mctx.InteriorActionSelectionFn,
    tree: mctx.Tree,
    chosen: Array,
    nodes: Array,
    depth: Array,
) -> Array:
    """`chosen` [B, N] with the next action of each node on the path `nodes` [B, N] below the
    root (to the leaf `nodes[b, depth[b]]`) recomputed by `select`, which ignores its key and
    depth: those nodes are the ones whose statistics the simulation changed. The path is taken
    in spans of `SPAN` positions, one batched pass each: one pass where the tree is no deeper
    than a span (a search of at most `SPAN` simulations), and as many as the deepest path needs
    otherwise, so the work follows the paths' depth, not the tree's size."""
    below = nodes.shape[1] - 1  # the root's action is the root selection's, never kept
    if below <= SPAN:
        return _choose_span(select, tree, chosen, nodes, depth, jnp.int32(1), below)

    def more(carry: tuple[Array, Array]) -> Array:
        return carry[0] <= depth.max()

    def span(carry: tuple[Array, Array]) -> tuple[Array, Array]:
        start, chosen = carry
        return start + SPAN, _choose_span(select, tree, chosen, nodes, depth, start, SPAN)

    return jax.lax.while_loop(more, span, (jnp.int32(1), chosen))[1]


def _choose_span(
    select: mctx.InteriorActionSelectionFn,
    tree: mctx.Tree,
    chosen: Array,
    nodes: Array,
    depth: Array,
    start: Array,
    width: int,
) -> Array:
    """`_choose` over the path's positions `start`, ..., `start + width - 1` (those past the
    path's end or the tree's kept as they were)."""
    size = nodes.shape[1]
    start = jnp.minimum(start, size - width)  # the span inside the path array
    positions = start + jnp.arange(width)
    span = jax.lax.dynamic_slice_in_dim(nodes, start, width, axis=1)  # [B, width]
    on_path = positions <= depth[:, None]
    key, level = jax.random.key(0), jnp.zeros((), tree.children_prior_logits.dtype)
    per_node = jax.vmap(select, in_axes=(None, None, 0, None))
    actions = jax.vmap(per_node, in_axes=(None, 0, 0, None))(
        key, tree, jnp.where(on_path, span, 0), level
    )
    index = jnp.where(on_path, span, size)  # off the path: past the end, dropped
    rows = jnp.arange(nodes.shape[0])[:, None]
    return chosen.at[rows, index].set(actions.astype(jnp.int32), mode="drop")


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
    key, action = _select_root(select_root, key, tree)
    nodes = jnp.full(size, unvisited, jnp.int32).at[0].set(mctx.Tree.ROOT_INDEX)
    actions = jnp.full(size, unvisited, jnp.int32).at[0].set(action)

    def down(carry: tuple) -> tuple:
        key, nodes, actions, child, depth = carry
        key, select_key = jax.random.split(key)
        # mctx passes the depth in the dtype of the prior logits
        level = depth.astype(tree.children_prior_logits.dtype)
        action = select(select_key, tree, child, level).astype(jnp.int32)
        nodes, actions = nodes.at[depth].set(child), actions.at[depth].set(action)
        return key, nodes, actions, tree.children_index[child, action], depth + 1

    child = tree.children_index[mctx.Tree.ROOT_INDEX, action]
    start = (key, nodes, actions, child, jnp.int32(1))
    _, nodes, actions, _, depth = jax.lax.while_loop(lambda c: c[3] != unvisited, down, start)
    return nodes, actions, depth


def _select_root(
    select_root: mctx.RootActionSelectionFn, key: Array, tree: mctx.Tree
) -> tuple[Array, Array]:
    """One unbatched tree's root action, drawn as mctx draws it: `(the key left for the walk
    below, the action)`."""
    key, root_key = jax.random.split(key)
    return key, select_root(root_key, tree, mctx.Tree.ROOT_INDEX).astype(jnp.int32)


def _follow(tree: mctx.Tree, chosen: Array, root: tuple[Array, Array]) -> tuple:
    """The walks down trees [B] whose interior actions are kept, `chosen` [B, N], after the
    root's action (`root`: `_select_root`'s, batched): `(nodes, actions, depth)` [B, N] each
    and [B], as `_walk` gives them, with no loop over the tree's levels. A node's successor on
    any walk is its chosen action's child, one gather for every node; the path from the root's
    child is then found by pointer doubling, log2 N passes of two gathers each."""
    unvisited, (batch, size) = mctx.Tree.UNVISITED, chosen.shape
    rows, action = jnp.arange(batch)[:, None], root[1]
    sink = size  # an action not yet expanded leads here, and the sink to itself
    successor = tree.children_index[rows, jnp.arange(size), chosen]
    jump = jnp.where(successor == unvisited, sink, successor)
    jump = jnp.concatenate([jump, jnp.full((batch, 1), sink)], axis=1)  # [B, N + 1]
    first = tree.children_index[rows[:, 0], mctx.Tree.ROOT_INDEX, action]
    path = jnp.where(first == unvisited, sink, first)[:, None]  # path[:, k]: k + 1 levels down
    while path.shape[1] < size - 1:  # the path's next len(path) nodes, then twice the jump
        path = jnp.concatenate([path, jnp.take_along_axis(jump, path, axis=1)], axis=1)
        jump = jnp.take_along_axis(jump, jump, axis=1)
    below = path[:, : size - 1] != sink
    path = jnp.where(below, path[:, : size - 1], unvisited)
    nodes = jnp.concatenate([jnp.full((batch, 1), mctx.Tree.ROOT_INDEX), path], axis=1)
    taken = jnp.where(below, chosen[rows, jnp.maximum(path, 0)], unvisited)
    actions = jnp.concatenate([action[:, None], taken], axis=1)
    return nodes.astype(jnp.int32), actions, (1 + below.sum(1)).astype(jnp.int32)


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
