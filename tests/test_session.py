"""azjax.session: the agents and hints of a game against a person take the network parameters
as arguments, so a second checkpoint of the same network shape reuses the compilation."""

from __future__ import annotations

import collections
import functools

import jax
import numpy as np
import pytest
from helpers import write_tiny_run

import games
from azjax import agents, session

GAME = games.make("tictactoe")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny Tic-Tac-Toe run with two checkpoints (other parameters, one network shape)."""
    workdir = tmp_path_factory.mktemp("session") / "ttt"
    write_tiny_run(workdir, steps=(1, 2))
    return workdir


def test_hints_of_two_checkpoints_are_traced_once(run, monkeypatch):
    traces = []
    real_search = agents.run_search

    def counting_search(*args, **kwargs):
        traces.append(1)  # runs only while jax traces the analysis
        return real_search(*args, **kwargs)

    monkeypatch.setattr(agents, "run_search", counting_search)
    monkeypatch.setattr(session, "_ANALYSERS", collections.OrderedDict())
    agents._analysis_fn.cache_clear()  # a fresh jit, whatever ran before in this process
    state = GAME.checked_step(GAME.init(jax.random.key(0)), 4)
    legal = np.asarray(state.legal_action_mask)
    policies = []
    for step in (1, 2):
        policy, value = session.compiled_analysis(GAME, f"search:{run}@{step}")(
            state, jax.random.key(1)
        )
        assert policy[~legal].sum() == 0 and policy.sum() == pytest.approx(1.0, abs=1e-5)
        assert -1.0 <= value <= 1.0
        policies.append(policy)
    assert len(traces) == 1, f"the analysis was traced {len(traces)} times for two checkpoints"
    assert not np.allclose(*policies)  # each checkpoint's own parameters were used


@pytest.mark.parametrize("kind", ["search", "policy"])
def test_agents_of_two_checkpoints_are_traced_once(run, kind, monkeypatch):
    traces = []

    def counting_jit(fn):
        def counted(params, state, key):
            traces.append(1)  # runs only while jax traces the move function
            return fn(params, state, key)

        return jax.jit(counted)

    monkeypatch.setattr(session, "_AGENTS", collections.OrderedDict())
    monkeypatch.setattr(session, "_jit", functools.cache(counting_jit))  # nothing jitted before
    state = GAME.init(jax.random.key(0))
    moves = []
    for step in (1, 2):
        spec = f"{kind}:{run}@{step}"
        moves.append(session.compiled_agent(GAME, spec)(state, jax.random.key(3)))
        assert moves[-1] == int(agents.make(spec, GAME)(state, jax.random.key(3)))
    assert len(traces) == 1, f"the {kind} agent was traced {len(traces)} times for two checkpoints"
