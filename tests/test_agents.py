"""Baseline and network agents against exact references and their rules; specs; every kind
jitted and vmapped; azjax-eval --ladder."""

from __future__ import annotations

import functools
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import compile_optimised, index, live_positions, load_script, write_tiny_run

import games
from azjax import agents, arena, export, referees, specs
from azjax.cli.evaluate import main


def _live_states(game, key, batch: int, length: int, stride: int = 1):
    states = live_positions(game, key, batch, length)
    return index(states, slice(None, None, stride))


def _choose(agent, states, key, optimised: bool = False):
    keys = jax.random.split(key, states.current_player.shape[0])
    choose, args = jax.vmap(agent.fn, (None, 0, 0)), (agent.params, states, keys)
    choose = compile_optimised(choose, *args) if optimised else jax.jit(choose)
    return np.asarray(choose(*args))


def test_alphabeta_plays_perfectly():
    """At every Tic-Tac-Toe ply, for X and O, alphabeta:9 plays a best move by exact labels."""
    game, positions = games.make("tictactoe"), referees.TICTACTOE.load()[1::45]
    assert {p.ply for p in positions} == set(range(1, 9))
    states = referees.replay(game, positions)
    moves = _choose(agents.make("alphabeta:9", game), states, jax.random.key(2), optimised=True)
    assert referees.score_moves(positions, moves).best_move == 1
    # 2x2 Dots and Boxes endgames (a box keeps the turn): the best result by the solver.
    game = games.make("dots_and_boxes", rows=2, cols=2)
    solution = load_script("make_dots_and_boxes_positions").Solution.of(2, 2)
    states = _live_states(game, jax.random.key(3), 12, 12)
    states = index(states, np.asarray(states.lines).sum(-1) >= 6)
    assert states.current_player.shape[0] >= 20
    moves = _choose(agents.make("alphabeta:6", game), states, jax.random.key(4))
    for i, move in enumerate(moves):
        drawn = sum(1 << int(line) for line in np.flatnonzero(states.lines[i]))
        me = int(states.current_player[i])
        margin = int(states.scores[i, me]) - int(states.scores[i, 1 - me])
        results = [None if v is None else np.sign(margin + v) for v in solution.move_values(drawn)]
        assert results[move] == max(r for r in results if r is not None), (drawn, move, results)


def _negamax(game, states, depth: int):
    """[N, A] action values for the mover, every action `depth` plies deep, no pruning."""
    num, step = game.num_actions, jax.vmap(jax.vmap(game.step, (None, 0)), (0, None))
    kids = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), step(states, jnp.arange(num)))
    movers = jnp.repeat(states.current_player, num)
    reward = kids.rewards[jnp.arange(movers.shape[0]), movers]
    final = jax.vmap(agents.terminal_value)(kids, movers) + jnp.sign(reward) * depth
    if depth == 1:
        below = jax.vmap(game.heuristic)(kids, movers)
    else:
        value = _negamax(game, kids, depth - 1).max(-1)
        below = jnp.where(kids.current_player == movers, value, -value)
    values = jnp.where(kids.terminated, final, below).reshape(-1, num)
    return jnp.where(states.legal_action_mask, values, -jnp.inf)


@pytest.mark.parametrize(
    "name, kwargs", [("connect4", {}), ("dots_and_boxes", {"rows": 2, "cols": 2})]
)
def test_alphabeta_equals_plain_negamax(name, kwargs):
    game = games.make(name, **kwargs)
    states = _live_states(game, jax.random.key(14), 6, 24, stride=4)
    values = np.asarray(jax.jit(_negamax, static_argnums=(0, 2))(game, states, 3))
    moves = _choose(agents.make("alphabeta:3", game), states, jax.random.key(15))
    np.testing.assert_array_equal(values[np.arange(len(moves)), moves], values.max(-1))


@pytest.mark.parametrize("name", ["tictactoe", "connect4"])
def test_greedy_takes_an_immediate_win(name):
    game = games.make(name)
    states = _live_states(game, jax.random.key(5), 32, game.max_game_length)
    moves = _choose(agents.make("greedy", game), states, jax.random.key(6))
    step = jax.jit(jax.vmap(jax.vmap(game.step, (None, 0)), (0, None)))
    children = jax.device_get(step(states, jnp.arange(game.num_actions)))
    wins = children.rewards[np.arange(len(moves)), :, states.current_player] > 0  # [N, A]
    has_win = (wins := wins & states.legal_action_mask).any(-1)
    assert has_win.sum() >= 5
    np.testing.assert_array_equal(wins[np.arange(len(moves)), moves][has_win], True)


def test_greedy_does_not_hand_over_boxes():
    game = games.make("dots_and_boxes")
    boxes = [(b, b + 3, 12 + b + b // 3, 13 + b + b // 3) for b in range(9)]  # 3x3: their sides

    def three_sided(drawn):
        return any(sum(x in drawn for x in box) == 3 for box in boxes)

    states = _live_states(game, jax.random.key(7), 16, 24, stride=2)
    moves = _choose(agents.make("greedy", game), states, jax.random.key(8))
    checked = 0
    for lines, move in zip(np.asarray(states.lines), moves, strict=True):
        drawn = set(np.flatnonzero(lines).tolist())  # with a box to take, greedy takes it first
        safe = [x for x in range(24) if x not in drawn and not three_sided(drawn | {x})]
        if safe and not three_sided(drawn):
            assert int(move) in safe, (sorted(drawn), int(move))
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    ("spec", "name", "num_games"), [("greedy", "chain_reaction", 20), ("mcts:32", "tictactoe", 10)]
)
def test_greedy_and_pure_mcts_beat_random(spec, name, num_games):
    game = games.make(name)
    key = jax.random.key(9 if spec == "greedy" else 10)
    r = arena.match(game, agents.make(spec, game), agents.make("random", game), num_games, key)
    assert r.score >= 0.75, r


@pytest.mark.parametrize("spec", ["greedy", "alphabeta:1"])
def test_ties_are_broken_at_random(spec):
    # A first line of Dots and Boxes closes nothing and gives nothing away: every move ties.
    game = games.make("dots_and_boxes")
    agent = agents.make(spec, game)
    state = game.init(jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 64)
    moves = jax.jit(jax.vmap(agent.fn, (None, None, 0)))(agent.params, state, keys)
    assert len(set(np.asarray(moves).tolist())) > 8


def test_rollout_value_is_from_the_movers_view():
    game = games.make("tictactoe")
    evaluate = jax.jit(agents.rollout_evaluator(game))

    def values(moves, seeds):
        state = functools.reduce(game.step, moves, game.init(jax.random.key(0)))
        one = jax.tree.map(lambda x: x[None], state)
        return {float(evaluate(None, one, jax.random.key(k))[1][0]) for k in range(seeds)}

    assert values((0, 3, 1, 4, 6, 7, 5, 8), 1) == {1.0}  # X to move, only the winning cell 2 left
    assert values((0, 1, 2, 3, 5, 4, 6), 12) == {1.0, 0.0}  # O: 7 wins (1-4-7), 8 draws


def test_bad_specs_foreign_checkpoints_and_batches_are_refused(tmp_path, tiny_run):
    game = games.make("tictactoe")
    cases = [
        ("", "expected random, greedy"),
        ("minimax", "unknown agent kind 'minimax'"),
        ("random:3", "random takes no argument"),
        ("alphabeta", "positive integer DEPTH"),
        ("alphabeta:two", "positive integer DEPTH"),
        ("mcts:-5", "positive integer SIMS"),
        ("policy:", "needs a run directory"),
        ("search:@3", "needs a run directory"),
        (f"policy:{tmp_path}", "no checkpoint"),
    ]
    for spec, message in cases:
        with pytest.raises(ValueError, match=message):
            agents.make(spec, game)
    with pytest.raises(ValueError, match="trained on tictactoe"):
        agents.make(f"search:{tiny_run}", games.make("connect4"))
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), 3))
    with pytest.raises(ValueError, match=r"agent random takes one unbatched State, got a batch"):
        agents.make("random", game)(states, jax.random.key(1))


def test_spec_parsing():
    spec = agents.Spec
    cases = {
        "alphabeta:4": spec("alphabeta", number=4),
        "search:runs/x@120:64": spec("search", number=64, workdir="runs/x", step=120),
        "search:runs/x": spec("search", workdir="runs/x"),
        "policy:runs/a@b/": spec("policy", workdir="runs/a@b/"),  # a trailing / keeps @ and :
        "policy:runs/x:8/": spec("policy", workdir="runs/x:8/"),
        "zoo:c4.v2-b:16": spec("zoo", number=16, model="c4.v2-b"),
        " random\n": spec("random"),
    }
    assert {text: agents.parse_spec(text) for text in cases} == cases
    assert specs.parse_source("zoo:c4.v2-b") == specs.Source("zoo", "c4.v2-b")
    for bad, message in [
        ("policy:runs/a@b", "policy needs an integer >= 0 STEP, got 'b'"),
        ("policy:runs/x:8", "policy takes no SIMS, got 8; search:runs/x:8 searches"),
    ]:
        with pytest.raises(ValueError, match=message):
            agents.parse_spec(bad)
    with pytest.raises(ValueError, match="no run directory before @3"):
        specs.parse_source("@3")
    assert specs.check_simulations(specs.MAX_SIMULATIONS, "--simulations") == 100_000
    with pytest.raises(ValueError, match=r"--simulations must be in \[1, 100000\]"):
        specs.check_simulations(specs.MAX_SIMULATIONS + 1, "--simulations")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    write_tiny_run(workdir)
    return workdir


@pytest.mark.parametrize(
    "spec", ["random", "greedy", "alphabeta:2", "policy:RUN", "search:RUN@1:4"]
)
def test_every_agent_is_jittable_and_vmappable(spec, tiny_run):
    """Legal moves vmapped, the same move jitted on one state; checkpoints share one function."""
    game = games.make("tictactoe")
    agent = agents.make(spec.replace("RUN", str(tiny_run)), game)
    states = _live_states(game, jax.random.key(11), 4, 6, stride=3)
    moves = _choose(agent, states, jax.random.key(12))
    assert states.legal_action_mask[np.arange(len(moves)), moves].all()
    keys = jax.random.split(jax.random.key(12), len(moves))
    assert int(jax.jit(agent)(index(states, -1), keys[-1])) == moves[-1]
    if spec.startswith("policy"):
        older = agents.make(f"policy:{tiny_run}@1", game)
        assert agent.name.endswith("@2") and older.name.endswith("@1") and agent.fn is older.fn


def test_analysis_of_a_network_and_of_pure_mcts(tiny_run):
    game = games.make("tictactoe")
    state = game.step(game.init(jax.random.key(0)), 4)
    searched = agents.analysis(game, f"search:{tiny_run}")
    policy, value = searched(state, jax.random.key(13))
    assert np.asarray(policy)[4] == 0 and float(np.sum(policy)) == pytest.approx(1, abs=1e-5)
    # printed, the analysis and an agent name what they are, not every weight of the net
    assert re.fullmatch(r"Analysis\(a network's search, [\d,]+ weights\)", repr(searched))
    assert re.fullmatch(
        rf"Agent\('search:{re.escape(str(tiny_run))}@\d+', [\d,]+ weights\)",
        repr(agents.make(f"search:{tiny_run}", game)),
    )
    assert -1.0 <= float(value) <= 1.0
    state = game.init(jax.random.key(0))
    for a in (0, 3, 1, 4):  # X threatens 2, O threatens 5; X to move wins at 2
        state = game.step(state, a)
    policy, value = agents.analysis(game, "greedy")(state, jax.random.key(1))
    assert int(np.argmax(np.asarray(policy))) == 2
    assert float(value) > 0.0  # the mean of the searched values, poorer moves included
    assert np.all(np.asarray(policy)[~np.asarray(state.legal_action_mask)] == 0)


def test_ladder_of_a_run_and_of_its_exported_models(tiny_run, tmp_path, capsys):
    """A run's checkpoints, or model files in their cards' order, are rated; a spec plays one."""
    models, out, png = tmp_path / "models", tmp_path / "ladder.json", tmp_path / "elo.png"
    models.mkdir()
    for step, name in ((2, "a_late"), (1, "b_early")):  # file names sort against the steps
        export.export_run(tiny_run, models / f"{name}.azjax", step=step)
    late_file = models / "a_late.azjax"
    ladders = [
        (tiny_run, f"{tiny_run}@1", f"{tiny_run}@2"),
        (models, models / "b_early.azjax", late_file),
    ]
    for folder, early, late in ladders:
        argv = ["--ladder", str(folder), "--baselines", "random", "--kind", "policy", "--quiet"]
        assert main([*argv, "--games", "2", "--json", str(out), "--png", str(png)]) == 0
        data, early, late = json.loads(out.read_text()), f"policy:{early}", f"policy:{late}"
        assert (data["steps"], set(data["elo"])) == ([1, 2], {"random", early, late})
        pairs = [(m["a"], m["b"]) for m in data["matches"]]
        assert pairs == [(early, "random"), (late, "random"), (late, early)]
        assert png.stat().st_size > 0
        png.unlink()
    game = games.make("tictactoe")
    assert agents.make(f"search:{late_file}:3", game).name.endswith(".azjax:3")
    with pytest.raises(ValueError, match="a model file has one step: drop @2"):
        agents.parse_spec(f"search:{late_file}@2")
    with pytest.raises(ValueError, match=r"a_late\.azjax was trained on tictactoe"):
        agents.make(f"search:{late_file}", games.make("connect4"))
    export.export_run(tiny_run, models / "c_again.azjax", step=2)
    assert main([*argv, "--games", "2"]) == 2
    assert "c_again.azjax has iteration 2 on its card" in capsys.readouterr().err
    assert main(["--ladder", str(tmp_path), "--quiet"]) == 2
    assert "no checkpoint (nor model files *.azjax)" in capsys.readouterr().err
    argv = ["--ladder", str(tiny_run), "--baselines", "random", "--kind", "policy", "--quiet"]
    assert main([*argv, "--games", "2", "--json", str(out), "--steps", "2"]) == 0
    assert json.loads(out.read_text())["steps"] == [2]
    assert main([*argv, "--steps", "2,3"]) == 2
    assert "--steps: no checkpoint at [3]" in capsys.readouterr().err
    # A match without --game plays the game the checkpoint was trained on (its config's).
    assert main(["--a", f"policy:{tiny_run}", "--b", "random", "--games", "2", "--quiet"]) == 0
    assert "policy:" in capsys.readouterr().out
