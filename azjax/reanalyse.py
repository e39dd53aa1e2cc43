"""Reanalyse (MuZero Reanalyse, EfficientZero): fresh search targets for replayed positions.

A policy target stored in the replay buffer is as good as the network that searched it, which
may be many gradient steps old. Reanalyse searches a fixed number `count` of each sampled
batch again with the latest parameters and replaces their policy targets. The search is
self-play's full search (`SearchConfig`, its simulations and algorithm) without root noise, on
the stored game State, so it is exact and needs no learned model.

`count` is static (the first `count` positions of the uniformly drawn batch, so a uniform
sample themselves); the sampler applies the batch's symmetries after the refresh, so a
re-searched policy is mapped together with its observation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from azjax.replay import Batch
from azjax.search import Evaluator, SearchConfig, run_search
from games.core import Game

Array = jax.Array
Params = Any


def make_reanalyse(
    game: Game,
    evaluate: Evaluator,
    search_config: SearchConfig,
    count: int,
) -> Callable[[Params, Batch, Array], Batch]:
    """`reanalyse(params, batch, key) -> batch` over a batch [N >= count] that holds states.

    The first `count` positions get the policy target of a noise-free full search of their
    state (and `policy_mask` True). Other positions are unchanged.
    """

    def reanalyse(params: Params, batch: Batch, key: Array) -> Batch:
        states = jax.tree.map(lambda x: x[:count], batch.state)
        out = run_search(game, evaluate, params, states, key, search_config, explore=False)
        return batch.replace(
            policy=batch.policy.at[:count].set(out.policy),
            policy_mask=batch.policy_mask.at[:count].set(True),
        )

    return reanalyse


__all__ = ["make_reanalyse"]
