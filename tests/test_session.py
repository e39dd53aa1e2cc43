"""azjax.session: turns and results from the person's view, hints, and one compilation shared by
the checkpoints of one network shape."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from helpers import write_tiny_run

import games
from azjax import agents, session

GAME = games.make("tictactoe")


def _after(moves: list[int]):
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
    game = session.Session(GAME, "random", human=0)
    for policy, expected in [
        ([0.6, 0.25, 0.1, 0.05, 0, 0, 0, 0, 0], ["1", "2", "3"]),  # the top three
        ([0.0, 0.7, 0.0, 0.295, 0.005, 0, 0, 0, 0], ["2", "4"]),  # 0.5% is noise
        ([0.0] * 8 + [0.004], ["9"]),  # all noise: the best one still
    ]:
        analysis = lambda state, key, p=policy: (np.array(p), 0.25)  # noqa: E731
        monkeypatch.setattr(session, "compiled_analysis", lambda game, spec, a=analysis: a)
        advice = game.advice()
        assert [move for move, _ in advice.moves] == expected and advice.value == 0.25


def test_checkpoints_of_one_network_share_one_compilation(tmp_path, monkeypatch):
    """Agents and hints take the parameters as arguments: a second checkpoint of the same
    network shape is played and analysed without tracing anything again."""
    write_tiny_run(tmp_path / "ttt", steps=(1, 2))
    traces = []

    def counting_jit(fn):
        return jax.jit(lambda *args: traces.append("agent") or fn(*args))

    def counting_search(*args, real=agents.run_search, **kwargs):
        traces.append("analysis")
        return real(*args, **kwargs)

    monkeypatch.setattr(session, "_jit", functools.cache(counting_jit))
    monkeypatch.setattr(agents, "run_search", counting_search)
    for cache in (session.compiled_agent, session.compiled_analysis, agents._analysis_fn):
        cache.cache_clear()  # nothing compiled before, whatever ran in this process
    state, key = _after([4]), jax.random.key(1)
    policies = []
    for step in (1, 2):
        spec = f"policy:{tmp_path / 'ttt'}@{step}"
        assert session.compiled_agent(GAME, spec)(state, key) in GAME.legal_actions(state)
        policy, value = session.compiled_analysis(GAME, spec)(state, key)
        assert policy[~np.asarray(state.legal_action_mask)].sum() == 0 and -1 <= value <= 1
        policies.append(policy)
    assert sorted(traces) == ["agent", "analysis"], traces
    assert not np.allclose(*policies)  # each checkpoint's own parameters were used
    for cache in (session.compiled_agent, session.compiled_analysis, agents._analysis_fn):
        cache.cache_clear()  # no counting function left for later tests
