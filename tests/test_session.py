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
    real_search = session.run_search

    def counting_search(*args, **kwargs):
        traces.append(1)  # runs only while jax traces the analysis
        return real_search(*args, **kwargs)

    monkeypatch.setattr(session, "run_search", counting_search)
    monkeypatch.setattr(session, "_ANALYSERS", collections.OrderedDict())
    session._analysis_fn.cache_clear()  # a fresh jit, whatever ran before in this process
    state = GAME.checked_step(GAME.init(jax.random.key(0)), 4)
    key = jax.random.key(1)
    policies = []
    for step in (1, 2):
        spec = f"search:{run}@{step}"
        policy, value = session.compiled_analysis(GAME, spec)(state, key)
        # The same answer as the analysis with the parameters baked in as constants.
        baked_policy, baked_value = agents.analyse(GAME, spec)(state, key)
        np.testing.assert_allclose(policy, baked_policy, atol=1e-6)
        assert value == pytest.approx(float(baked_value), abs=1e-6)
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
