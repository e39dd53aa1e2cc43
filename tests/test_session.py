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


def _after(moves: list[int]):
    """The Tic-Tac-Toe state after `moves` (cells 0-8)."""
    state = GAME.init(jax.random.key(0))
    for action in moves:
        state = GAME.checked_step(state, action)
    return state


@pytest.mark.parametrize(
    ("moves", "human", "result"),
    [
        ([0, 1, 2, 4, 3, 5, 7, 6, 8], 0, "draw"),
        ([0, 1, 2, 4, 3, 5, 7, 6, 8], 1, "draw"),
        ([0, 3, 1, 4, 2], 0, "win"),  # X takes the top row
        ([0, 3, 1, 4, 2], 1, "loss"),
        ([0, 3, 1, 4, 8, 5], 1, "win"),  # O takes the middle row
    ],
)
def test_result_is_the_persons_view_of_the_end(moves, human, result):
    game = session.Session(GAME, "random", human)
    assert game.result() is None
    game.states.append(_after(moves))
    assert game.over and game.result() == result


def test_a_person_moves_only_on_their_turn():
    game = session.Session(GAME, "random", human=1)  # the agent opens; nothing moved yet
    with pytest.raises(games.IllegalMoveError, match="it is not your turn"):
        game.play(4)
    game.reply()
    assert game.human_to_move and game.play(game.game.legal_actions(game.state)[0]).by == "human"
    game.states.append(_after([0, 3, 1, 4, 2]))
    with pytest.raises(games.IllegalMoveError, match="the game is over"):
        game.play(8)


def test_advice_lists_the_top_moves_above_one_percent(monkeypatch):
    policies = {
        "spread": [0.6, 0.25, 0.1, 0.05, 0, 0, 0, 0, 0],  # the top three
        "two": [0.0, 0.7, 0.0, 0.295, 0.005, 0, 0, 0, 0],  # 0.5% is noise
        "flat": [0.0] * 8 + [0.004],  # all noise: the best one still
    }
    expected = {"spread": ["1", "2", "3"], "two": ["2", "4"], "flat": ["9"]}
    game = session.Session(GAME, "random", human=0)
    for name, policy in policies.items():

        def compiled_analysis(game, spec, policy=policy):
            return lambda state, key: (np.array(policy), 0.25)

        monkeypatch.setattr(session, "compiled_analysis", compiled_analysis)
        advice = game.advice()
        assert [move for move, _ in advice.moves] == expected[name], name
        assert advice.value == 0.25


def test_compiled_agents_are_kept_least_recently_used_first_out(monkeypatch):
    monkeypatch.setattr(session, "CACHE_SIZE", 2)
    cache = collections.OrderedDict()
    made = []

    def make(key):
        return lambda: made.append(key) or key

    for key in ("a", "b", "a", "c", "a", "b"):
        assert session._cached(cache, key, make(key)) == key
    assert made == ["a", "b", "c", "b"]  # "b" went when "c" came (a was used since), then back
    assert list(cache) == ["a", "b"]
