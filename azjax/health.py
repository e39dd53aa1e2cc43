"""Run health: is the network still learning, or have its heads died?

A network whose policy or value head dies (every unit of a small ReLU layer negative on every
position) trains on without error, its losses at the level of a constant prediction. `Monitor`
reads each iteration's spread of the value and policy outputs over the training batch
(`train/value_std`, `train/policy_std`) and whether the loss still moves; `check_network`, run
when a trained network is loaded for play, looks at its outputs on random games' positions.
(`train/value_explained`, the fraction of the value targets' variance the net explains, is a
learning curve, not a verdict: early on a healthy net explains only a few percent.)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from games.core import Game, random_legal_action

Array = jax.Array

CONSTANT = 1e-3  # an output spread (standard deviation over positions) below this is constant


@dataclasses.dataclass
class Monitor:
    """Judges the last `window` trained iterations, once that many have trained: `update(record)`
    returns the problems found and adds `health/ok` (1 or 0), and `health` (the problems, as
    text) when there are any, to the record."""

    window: int = 20
    records: list = dataclasses.field(default_factory=list)

    def update(self, record: dict[str, Any]) -> list[str]:
        if not record.get("train/trained"):
            return []
        self.records = [*self.records, record][-self.window :]
        if len(self.records) < self.window:
            return []
        problems = self.problems()
        record["health/ok"] = int(not problems)
        if problems:
            record["health"] = "; ".join(problems)
        return problems

    def problems(self) -> list[str]:
        def mean(key: str) -> float:
            return float(np.mean([r.get(key, np.nan) for r in self.records]))

        found = []
        value_std, policy_std = mean("train/value_std"), mean("train/policy_std")
        if value_std < CONSTANT:
            found.append(f"value output is constant (std {value_std:.1e} over a batch)")
        if policy_std < CONSTANT:
            found.append(f"policy output is the same for every position (std {policy_std:.1e})")
        losses = np.array([r["train/loss"] for r in self.records])
        if np.ptp(losses) <= 1e-6 * max(1.0, float(np.abs(losses).max())):
            found.append(f"the loss stopped moving (at {losses[-1]:.4f})")
        return found


def random_positions(game: Game, key: Array, games: int = 32, plies: int = 16):
    """States [games * plies] of random games after 0..`plies`-1 random moves, and a bool mask
    of those not yet terminated."""

    def one(state, key):
        action = random_legal_action(key, state.legal_action_mask)
        return game.step(state, action), state

    def play(key):
        init_key, key = jax.random.split(key)
        _, states = jax.lax.scan(one, game.init(init_key), jax.random.split(key, plies))
        return states

    states = jax.vmap(play)(jax.random.split(key, games))
    states = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), states)
    return states, ~states.terminated


@functools.partial(jax.jit, static_argnums=(0, 2))
def _spread(network: Any, params: Any, game: Game, key: Array) -> tuple[Array, Array]:
    states, live = random_positions(game, key)
    logits, value = network.apply(params, jax.vmap(game.observe)(states))
    weight = live / jnp.maximum(live.sum(), 1)

    def std(x: Array) -> Array:  # over the live positions, per trailing index
        mean = jnp.tensordot(weight, x, 1)
        return jnp.sqrt(jnp.tensordot(weight, jnp.square(x - mean), 1))

    return std(value), jnp.mean(std(logits))


def output_spread(network: Any, params: Any, game: Game, key: Array) -> tuple[float, float]:
    """(value std, mean over actions of the logits' std) of `network` over random positions."""
    value_std, policy_std = _spread(network, params, game, key)
    return float(value_std), float(policy_std)


def check_network(network: Any, params: Any, game: Game, key: Array | None = None) -> list[str]:
    """Problems of a trained network seen on random positions (empty when it looks alive)."""
    key = jax.random.key(0) if key is None else key
    value_std, policy_std = output_spread(network, params, game, key)
    found = []
    if value_std < CONSTANT:
        found.append(f"its value output is constant (std {value_std:.1e} over random positions)")
    if policy_std < CONSTANT:
        found.append(f"its policy is the same for every position (std {policy_std:.1e})")
    return found
