"""azjax's search loop (`azjax.tree.search`) against mctx's own (`mctx.search`): the same tree.

Both grow trees over the same positions, recurrent function, selection functions and keys;
the two trees must hold the same nodes, edges, visits, priors, rewards and embeddings to the
bit, and the same searched values to float rounding (XLA may fuse a running mean's
multiply-add into one rounding in one program and not in the other). The positions come from
random play, the leaf values and priors from a hash of each State.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mctx
import numpy as np
import pytest
from helpers import live_positions

import games
from azjax import tree as azjax_tree
from azjax.search import _evaluate, _recurrent_fn, state_packing

EXACT = (
    "node_visits",
    "raw_values",
    "parents",
    "action_from_parent",
    "children_index",
    "children_prior_logits",
    "children_visits",
    "children_rewards",
    "children_discounts",
    "embeddings",
)
SEARCHED = ("node_values", "children_values")


def assert_same_tree(ours: mctx.Tree, theirs: mctx.Tree, label: str = "") -> None:
    for field in EXACT:
        np.testing.assert_array_equal(
            getattr(ours, field), getattr(theirs, field), err_msg=f"{label} {field}"
        )
    for field in SEARCHED:
        np.testing.assert_allclose(
            getattr(ours, field), getattr(theirs, field), rtol=0, atol=1e-6, err_msg=field
        )


def hashed_evaluator(game):
    """Priors and values from a hash of each State's bytes: they differ from node to node, and
    every program computes them to the same bit (small integers over powers of two; a random
    normal's arithmetic can round otherwise in another program)."""
    packed = state_packing(game)

    def evaluate(params, states, key):
        del params, key
        rows = packed.pack(states).astype(jnp.uint32)
        weights = jnp.arange(1, rows.shape[-1] + 1, dtype=jnp.uint32) * jnp.uint32(2654435761)
        mixed = (rows * weights).sum(-1) * jnp.uint32(2246822519)
        per_action = mixed[:, None] ^ (jnp.arange(game.num_actions, dtype=jnp.uint32) * 40503)
        per_action = per_action * jnp.uint32(2654435761) >> 24  # 0..255
        logits = (per_action.astype(jnp.float32) - 128.0) / 32.0
        value = ((mixed >> 16) % 255).astype(jnp.float32) / 128.0 - 127.0 / 128.0
        return logits, value

    return evaluate


def selections(sims: int, considered: int):
    """(root, interior) selection functions of Gumbel MuZero and of PUCT, as mctx's policies
    make them."""
    completed = mctx.qtransform_completed_by_mix_value
    gumbel = (
        functools.partial(
            mctx.gumbel_muzero_root_action_selection,
            num_simulations=sims,
            max_num_considered_actions=considered,
            qtransform=completed,
        ),
        functools.partial(mctx.gumbel_muzero_interior_action_selection, qtransform=completed),
    )
    puct = (functools.partial(mctx.muzero_action_selection, depth=0), mctx.muzero_action_selection)
    return {"gumbel": gumbel, "puct": puct}


# Tic-Tac-Toe's trees reach finished games and grow below them; in Dots and Boxes a mover may
# move again (discount +1); Connect4's trees are deep and narrow.
GAMES = [
    ("tictactoe", {}, 64),
    ("dots_and_boxes", {"rows": 2, "cols": 2}, 48),
    ("connect4", {}, 48),
]


@pytest.mark.parametrize("name,kwargs,sims", GAMES, ids=[g[0] for g in GAMES])
def test_search_grows_mctx_search_tree(name, kwargs, sims, monkeypatch):
    game = games.make(name, **kwargs)
    states = live_positions(game, jax.random.key(3), 8, 6)
    evaluate = hashed_evaluator(game)
    recurrent_fn = _recurrent_fn(game, evaluate)
    invalid = ~states.legal_action_mask
    logits, value = _evaluate(evaluate, None, states, jax.random.key(4))
    root = mctx.RootFnOutput(
        prior_logits=logits, value=value, embedding=state_packing(game).pack(states)
    )
    gumbel = mctx.GumbelMuZeroExtraData(
        root_gumbel=jax.random.gumbel(jax.random.key(5), logits.shape)
    )
    for algorithm, (select_root, select) in selections(sims, 4).items():
        kwargs = dict(
            root=root,
            recurrent_fn=recurrent_fn,
            root_action_selection_fn=select_root,
            interior_action_selection_fn=select,
            num_simulations=sims,
            invalid_actions=invalid,
            extra_data=gumbel,
        )

        # Each in a program of its own, as each runs in use (in one program, XLA could fuse
        # their arithmetic differently).
        key = jax.random.key(6)
        theirs = jax.jit(lambda k, kw=kwargs: mctx.search(None, k, **kw))(key)
        ours = jax.jit(lambda k, kw=kwargs: azjax_tree.search(None, k, **kw))(key)
        assert_same_tree(ours, theirs, algorithm)
        # Gumbel's interior actions kept per node (as azjax searches on a GPU): the
        # path recomputed in one pass, then in spans of 4 positions (a loop over the spans).
        for span in (azjax_tree.SPAN, 4) if algorithm == "gumbel" else ():
            monkeypatch.setattr(azjax_tree, "SPAN", span)
            kept = jax.jit(
                lambda k, kw=kwargs: azjax_tree.search(None, k, **kw, deterministic_interior=True)
            )(key)
            assert_same_tree(kept, theirs, f"gumbel, actions kept per node, spans of {span}")
        # The trees are deep enough, and hold finished games, for the path's scan to matter.
        depth = np.zeros(np.asarray(ours.parents).shape, int)
        parents = np.asarray(ours.parents)
        for node in range(1, sims + 1):
            depth[:, node] = depth[np.arange(len(depth)), np.maximum(parents[:, node], 0)] + 1
        assert depth.max() >= 6, (algorithm, depth.max())
        discounts = np.asarray(ours.children_discounts)[np.asarray(ours.children_index) > 0]
        assert (discounts == -1).any()
        if name == "tictactoe":
            assert (discounts == 0).any(), algorithm  # finished games, and copies below them
        if name == "dots_and_boxes":
            assert (discounts == 1).any(), algorithm  # a box completed: the mover moves again


def test_search_without_invalid_actions_treats_every_action_as_valid():
    """mctx's default: no mask at the root."""
    game = games.make("tictactoe")
    states = live_positions(game, jax.random.key(0), 4, 3)
    evaluate = hashed_evaluator(game)
    logits, value = _evaluate(evaluate, None, states, jax.random.key(1))
    root = mctx.RootFnOutput(
        prior_logits=logits, value=value, embedding=state_packing(game).pack(states)
    )
    select_root, select = selections(8, 4)["puct"]
    kwargs = dict(
        root=root,
        recurrent_fn=_recurrent_fn(game, evaluate),
        root_action_selection_fn=select_root,
        interior_action_selection_fn=select,
        num_simulations=8,
    )
    theirs = jax.jit(lambda k: mctx.search(None, k, **kwargs))(jax.random.key(2))
    ours = jax.jit(lambda k: azjax_tree.search(None, k, **kwargs))(jax.random.key(2))
    assert_same_tree(ours, theirs)
    np.testing.assert_array_equal(ours.root_invalid_actions, theirs.root_invalid_actions)
    assert jnp.asarray(ours.root_invalid_actions).sum() == 0
