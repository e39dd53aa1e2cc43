"""Baseline and network agents: exactness of alpha-beta, greedy's rules, MCTS, spec parsing,
every kind jittable and vmappable, and azjax-eval --ladder."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import compile_optimised, index, random_trajectories, write_tiny_run

import games
from azjax import agents, arena, specs

TTT_LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


@functools.cache
def _ttt_value(board: tuple[int, ...], mover: int) -> int:
    """Plain-Python negamax: the result (1, 0, -1) of a Tic-Tac-Toe board for `mover` (+1/-1)."""
    values = []
    for cell in range(9):
        if board[cell]:
            continue
        nxt = (*board[:cell], mover, *board[cell + 1 :])
        if any(all(nxt[i] == mover for i in line) for line in TTT_LINES):
            return 1
        values.append(0 if all(nxt) else -_ttt_value(nxt, -mover))
    return max(values)


def _ttt_move_values(board: tuple[int, ...], mover: int) -> dict[int, int]:
    out = {}
    for cell in range(9):
        if board[cell]:
            continue
        nxt = (*board[:cell], mover, *board[cell + 1 :])
        if any(all(nxt[i] == mover for i in line) for line in TTT_LINES):
            out[cell] = 1
        else:
            out[cell] = 0 if all(nxt) else -_ttt_value(nxt, -mover)
    return out


def _live_states(game, key, batch: int, length: int, stride: int = 1):
    """Non-final states along random games, batched (numpy leaves, leading dimension N)."""
    _, states = random_trajectories(game, key, batch, length)
    states = jax.tree.map(lambda x: np.asarray(x)[::stride].reshape(-1, *x.shape[2:]), states)
    live = ~states.terminated
    return jax.tree.map(lambda x: x[live], states)


def _unstack(states):
    """A batched state as a list of unbatched (numpy) states."""
    return [index(states, i) for i in range(states.current_player.shape[0])]


def _choose(agent, states, key, optimised: bool = False):
    """`agent`'s moves in `states`, vmapped; `optimised`: see helpers.compile_optimised."""
    keys = jax.random.split(key, states.current_player.shape[0])
    choose, args = jax.vmap(agent.fn, (None, 0, 0)), (agent.params, states, keys)
    choose = compile_optimised(choose, *args) if optimised else jax.jit(choose)
    return np.asarray(choose(*args))


def _stack(states):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def _all_children(game, states):
    """Every action applied to every state: a batched state with leaves [N, A, ...]."""
    step = jax.vmap(jax.vmap(game.step, (None, 0)), (0, None))
    return jax.device_get(jax.jit(step)(states, jnp.arange(game.num_actions)))


# ----------------------------------------------------------------------------- alpha-beta


def test_alphabeta_plays_optimal_tictactoe_moves():
    """Every move alphabeta:9 chooses, for X and for O, at every ply of random games, is one of
    the best by plain-Python negamax: it never loses, and perfect play against itself draws."""
    game = games.make("tictactoe")
    states = _live_states(game, jax.random.key(1), 12, 8)
    assert set(states.current_player.tolist()) == {0, 1}
    moves = _choose(agents.make("alphabeta:9", game), states, jax.random.key(2), optimised=True)
    for state, move in zip(_unstack(states), moves, strict=True):
        board = tuple(int(v) for v in np.asarray(state.board))
        mover = 1 if int(state.current_player) == 0 else -1
        values = _ttt_move_values(board, mover)
        assert values[int(move)] == max(values.values()), (board, int(move), values)


def _box_sides(rows, cols):
    h = (rows + 1) * cols
    return [
        (r * cols + c, (r + 1) * cols + c, h + r * (cols + 1) + c, h + r * (cols + 1) + c + 1)
        for r in range(rows)
        for c in range(cols)
    ]


@functools.cache
def _dab_value(lines: frozenset, margin: int, boxes: tuple, total: int) -> int:
    """Plain-Python Dots and Boxes: result sign for the mover; `margin` = mover's boxes minus
    the opponent's so far; `boxes` = the four lines of every box."""
    if len(lines) == total:
        return int(np.sign(margin))
    best = -2
    for line in range(total):
        if line in lines:
            continue
        nxt = lines | {line}
        gained = sum(1 for b in boxes if line in b and all(x in nxt for x in b))
        if gained:
            value = _dab_value(nxt, margin + gained, boxes, total)
        else:
            value = -_dab_value(nxt, -margin, boxes, total)
        best = max(best, value)
    return best


def test_alphabeta_is_exact_with_repeated_turns():
    # Dots and Boxes 2x2 endgames (a box completed keeps the turn), searched to the end.
    game = games.make("dots_and_boxes", rows=2, cols=2)
    boxes = tuple(_box_sides(2, 2))
    states = _live_states(game, jax.random.key(3), 12, 12)
    states = jax.tree.map(lambda x: x[states.lines.sum(-1) >= 6], states)
    assert states.current_player.shape[0] >= 20
    moves = _choose(agents.make("alphabeta:6", game), states, jax.random.key(4))
    for state, move in zip(_unstack(states), moves, strict=True):
        lines = frozenset(int(i) for i in np.flatnonzero(np.asarray(state.lines)))
        me = int(state.current_player)
        margin = int(state.scores[me]) - int(state.scores[1 - me])

        def after(line, lines=lines, margin=margin):
            nxt = lines | {line}
            gained = sum(1 for b in boxes if line in b and all(x in nxt for x in b))
            if gained:
                return _dab_value(nxt, margin + gained, boxes, 12)
            return -_dab_value(nxt, -margin, boxes, 12)

        values = {line: after(line) for line in range(12) if line not in lines}
        assert values[int(move)] == max(values.values()), (sorted(lines), int(move), values)


def _negamax(game, states, depth: int):
    """Reference search without pruning: every action expanded `depth` plies (vmapped), values
    backed up by negamax (negated only when the player to move changes). Returns [N, A]
    values of each action for the player to move (-inf for illegal ones)."""
    num = game.num_actions
    mover = states.current_player
    step = jax.vmap(jax.vmap(game.step, (None, 0)), (0, None))
    children = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), step(states, jnp.arange(num)))
    movers = jnp.repeat(mover, num)
    reward = children.rewards[jnp.arange(movers.shape[0]), movers]
    final = jax.vmap(agents.terminal_value)(children, movers) + jnp.sign(reward) * depth
    if depth == 1:
        below = jax.vmap(game.heuristic)(children, movers)
    else:
        value = _negamax(game, children, depth - 1).max(-1)
        below = jnp.where(children.current_player == movers, value, -value)
    values = jnp.where(children.terminated, final, below).reshape(-1, num)
    return jnp.where(states.legal_action_mask, values, -jnp.inf)


@pytest.mark.parametrize(
    ("name", "kwargs", "depth"),
    [
        ("connect4", {}, 3),
        ("dots_and_boxes", {"rows": 2, "cols": 2}, 3),
    ],
)
def test_alphabeta_equals_plain_negamax(name, kwargs, depth):
    game = games.make(name, **kwargs)
    states = _live_states(game, jax.random.key(14), 6, 24, stride=4)
    values = np.asarray(jax.jit(_negamax, static_argnums=(0, 2))(game, states, depth))
    moves = _choose(agents.make(f"alphabeta:{depth}", game), states, jax.random.key(15))
    rows = np.arange(len(moves))
    np.testing.assert_array_equal(values[rows, moves], values.max(-1))


# ----------------------------------------------------------------------------- greedy


@pytest.mark.parametrize("name", ["tictactoe", "connect4"])
def test_greedy_takes_an_immediate_win(name):
    game = games.make(name)
    states = _live_states(game, jax.random.key(5), 32, game.max_game_length)
    moves = _choose(agents.make("greedy", game), states, jax.random.key(6))
    children = _all_children(game, states)
    movers = states.current_player
    wins = children.rewards[np.arange(len(movers)), :, movers] > 0  # [N, A], mover's view
    wins &= states.legal_action_mask
    has_win = wins.any(-1)
    assert has_win.sum() >= 5
    np.testing.assert_array_equal(wins[np.arange(len(moves)), moves][has_win], True)


def test_greedy_does_not_hand_over_boxes():
    game = games.make("dots_and_boxes")
    boxes = _box_sides(3, 3)
    states = _live_states(game, jax.random.key(7), 16, 24, stride=2)
    moves = _choose(agents.make("greedy", game), states, jax.random.key(8))
    checked = 0
    for state, move in zip(_unstack(states), moves, strict=True):
        lines = set(np.flatnonzero(np.asarray(state.lines)).tolist())

        def sides(ls):
            return [sum(x in ls for x in b) for b in boxes]

        if 3 in sides(lines):
            continue  # a box can be taken: greedy takes boxes first
        free = [line for line in range(24) if line not in lines]
        safe = [line for line in free if 3 not in sides(lines | {line})]
        if safe:
            assert int(move) in safe, (sorted(lines), int(move))
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize(("name", "kwargs"), [("chain_reaction", {}), ("othello", {"size": 6})])
def test_greedy_beats_random_widely(name, kwargs):
    game = games.make(name, **kwargs)
    r = arena.match(
        game, agents.make("greedy", game), agents.make("random", game), 20, jax.random.key(9)
    )
    assert r.score >= 0.75, r


# ----------------------------------------------------------------------------- pure MCTS


@pytest.mark.parametrize("spec", ["greedy", "alphabeta:1"])
def test_ties_are_broken_at_random(spec):
    # A first line of Dots and Boxes closes nothing and gives nothing away: every move ties.
    game = games.make("dots_and_boxes")
    agent = agents.make(spec, game)
    state = game.init(jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 64)
    moves = jax.jit(jax.vmap(agent.fn, (None, None, 0)))(agent.params, state, keys)
    assert len(set(np.asarray(moves).tolist())) > 8


def test_an_agent_refuses_a_batch_of_states():
    game = games.make("tictactoe")
    states = jax.vmap(game.init)(jax.random.split(jax.random.key(0), 3))
    with pytest.raises(ValueError, match=r"agent random takes one unbatched State, got a batch"):
        agents.make("random", game)(states, jax.random.key(1))


def test_rollout_value_is_from_the_movers_view():
    game = games.make("tictactoe")
    evaluate = jax.jit(agents.rollout_evaluator(game))  # one compilation for every call below
    # X: 0 1 _ / O: 3 4 ... X to move with one empty cell completing 0-1-2: every playout wins.
    state = game.init(jax.random.key(0))
    for a in (0, 3, 1, 4, 6, 7, 5, 8):  # X 0 1 6 5, O 3 4 7 8: X to move, only cell 2 left
        state = game.step(state, a)
    assert not bool(state.terminated) and int(state.current_player) == 0
    logits, value = evaluate(None, _stack([state]), jax.random.key(1))
    assert float(value[0]) == 1.0 and logits.shape == (1, 9)
    # O to move with cells 7 and 8 left: O wins at 7 (1-4-7); at 8, X fills 7 and it is a draw.
    state = game.init(jax.random.key(0))
    for a in (0, 1, 2, 3, 5, 4, 6):  # X 0 2 5 6, O 1 3 4
        state = game.step(state, a)
    values = [float(evaluate(None, _stack([state]), jax.random.key(k))[1][0]) for k in range(12)]
    assert set(values) == {1.0, 0.0}


def test_mcts_beats_random_at_tictactoe():
    game = games.make("tictactoe")
    r = arena.match(
        game, agents.make("mcts:32", game), agents.make("random", game), 10, jax.random.key(10)
    )
    assert r.score >= 0.75, r


# ----------------------------------------------------------------------------- specs


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "expected random, greedy"),
        ("minimax", "unknown agent kind 'minimax'"),
        ("random:3", "random takes no argument"),
        ("alphabeta", "positive integer DEPTH"),
        ("alphabeta:0", "positive integer DEPTH"),
        ("alphabeta:two", "positive integer DEPTH"),
        ("mcts:-5", "positive integer SIMS"),
        ("policy:", "needs a run directory"),
        ("search:@3", "needs a run directory"),
    ],
)
def test_bad_specs_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        agents.make(spec, games.make("tictactoe"))


def test_spec_parsing():
    assert agents.parse_spec("alphabeta:4") == agents.Spec("alphabeta", number=4)
    assert agents.parse_spec("search:runs/x@120:64") == agents.Spec(
        "search", number=64, workdir="runs/x", step=120
    )
    assert agents.parse_spec("policy:runs/a@b/") == agents.Spec("policy", workdir="runs/a@b/")
    with pytest.raises(ValueError, match="policy needs an integer >= 0 STEP, got 'b'"):
        agents.parse_spec("policy:runs/a@b")  # without the slash, b stands where STEP does
    assert agents.parse_spec("search:runs/x") == agents.Spec("search", workdir="runs/x")
    # policy takes no SIMS: a trailing :N is refused naming the search that takes it, and a
    # WORKDIR truly named x:8 is reached with a trailing slash, as x@y is
    with pytest.raises(ValueError, match="policy takes no SIMS, got 8; search:runs/x:8 searches"):
        agents.parse_spec("policy:runs/x:8")
    assert agents.parse_spec("policy:runs/x:8/") == agents.Spec("policy", workdir="runs/x:8/")
    # zoo names may hold dots and dashes; spaces around a spec are dropped
    assert agents.parse_spec("zoo:c4.v2-b:16") == agents.Spec("zoo", number=16, model="c4.v2-b")
    assert agents.parse_spec(" random\n") == agents.Spec("random")
    assert specs.parse_source("zoo:c4.v2-b") == specs.Source("zoo", "c4.v2-b")
    with pytest.raises(ValueError, match="no run directory before @3"):
        specs.parse_source("@3")
    assert specs.check_simulations(specs.MAX_SIMULATIONS, "--simulations") == 100_000
    for beside in (0, specs.MAX_SIMULATIONS + 1):
        with pytest.raises(ValueError, match=r"--simulations must be in \[1, 100000\]"):
            specs.check_simulations(beside, "--simulations")


def test_missing_checkpoint_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint"):
        agents.make(f"policy:{tmp_path}", games.make("tictactoe"))


# ----------------------------------------------------------------------------- networks


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    write_tiny_run(workdir)
    return workdir


@pytest.mark.parametrize(
    "spec", ["random", "greedy", "alphabeta:2", "policy:RUN", "search:RUN@1:4"]
)
def test_every_agent_is_jittable_and_vmappable(spec, tiny_run):
    """Legal moves from the vmapped move function, and the same move from the agent jitted on
    one state, as the README shows; every checkpoint of a run shares one move function."""
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


def test_network_analysis(tiny_run):
    game = games.make("tictactoe")
    state = game.step(game.init(jax.random.key(0)), 4)
    policy, value = agents.analysis(game, f"search:{tiny_run}")(state, jax.random.key(13))
    assert np.asarray(policy)[4] == 0 and float(np.sum(policy)) == pytest.approx(1, abs=1e-5)
    assert -1.0 <= float(value) <= 1.0


def test_an_untrained_looking_checkpoint_is_played_with_a_warning(tiny_run, tmp_path, capsys):
    """A checkpoint whose net answers the same everywhere (all parameters 0) still plays, with
    a warning naming what is constant; a live one plays without."""
    game = games.make("tictactoe")
    write_tiny_run(tmp_path / "dead", steps=(1,), dead=True)
    agent = agents.make(f"policy:{tmp_path / 'dead'}", game)
    err = capsys.readouterr().err
    assert f"warning: the network of {tmp_path / 'dead'}@1 looks untrained: " in err, err
    assert "its value output is constant" in err and "its policy is the same" in err
    assert int(agent(game.init(jax.random.key(0)), jax.random.key(1))) in range(9)
    agents.make(f"policy:{tiny_run}", game)
    assert "warning" not in capsys.readouterr().err


def test_checkpoint_of_another_game_is_refused(tiny_run):
    with pytest.raises(ValueError, match="trained on tictactoe"):
        agents.make(f"search:{tiny_run}", games.make("connect4"))


def test_pure_mcts_analysis():
    game = games.make("tictactoe")
    state = game.init(jax.random.key(0))
    for a in (0, 3, 1, 4):  # X threatens 2, O threatens 5; X to move wins at 2
        state = game.step(state, a)
    policy, value = agents.analysis(game, "greedy")(state, jax.random.key(1))
    assert int(np.argmax(np.asarray(policy))) == 2
    assert float(value) > 0.0  # the mean of the searched values, poorer moves included
    assert np.all(np.asarray(policy)[~np.asarray(state.legal_action_mask)] == 0)


def test_ladder_of_a_run(tiny_run, tmp_path, capsys):
    import json

    from azjax.cli.evaluate import main

    out, png = tmp_path / "ladder.json", tmp_path / "elo.png"
    argv = ["--ladder", str(tiny_run), "--baselines", "random", "--kind", "policy"]
    assert main([*argv, "--games", "2", "--quiet", "--json", str(out), "--png", str(png)]) == 0
    data = json.loads(out.read_text())
    assert data["steps"] == [1, 2]
    assert set(data["elo"]) == {"random", f"policy:{tiny_run}@1", f"policy:{tiny_run}@2"}
    assert len(data["matches"]) == 3  # each checkpoint vs random, and the newer vs the older
    assert png.stat().st_size > 0
    assert main([*argv, "--games", "2", "--quiet", "--json", str(out), "--steps", "2"]) == 0
    data = json.loads(out.read_text())
    assert data["steps"] == [2] and len(data["matches"]) == 1
    assert main([*argv, "--quiet", "--steps", "2,3"]) == 2
    assert "--steps: no checkpoint at [3]" in capsys.readouterr().err
    # A match without --game plays the game the checkpoint was trained on (its config's).
    assert main(["--a", f"policy:{tiny_run}", "--b", "random", "--games", "2", "--quiet"]) == 0
    assert "policy:" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--a", f"policy:{empty}", "--b", "random", "--quiet"]) == 2
    assert f"no checkpoint in {empty}" in capsys.readouterr().err


def test_ladder_of_exported_models(tiny_run, tmp_path, capsys):
    """A folder of azjax-export files is rated like a run, in the order of the cards' iterations;
    `policy:FILE.azjax` / `search:FILE.azjax` play one model file."""
    import json

    from azjax import export
    from azjax.cli.evaluate import main

    models = tmp_path / "models"
    models.mkdir()
    for step, name in ((2, "a_late"), (1, "b_early")):  # file names sort against the steps
        export.export_run(tiny_run, models / f"{name}.azjax", step=step)
    out = tmp_path / "ladder.json"
    argv = ["--ladder", str(models), "--baselines", "random", "--kind", "policy", "--quiet"]
    assert main([*argv, "--games", "2", "--json", str(out), "--png", str(tmp_path / "e.png")]) == 0
    data = json.loads(out.read_text())
    early, late = f"policy:{models / 'b_early.azjax'}", f"policy:{models / 'a_late.azjax'}"
    assert data["steps"] == [1, 2]
    assert set(data["elo"]) == {"random", early, late}
    assert [(m["a"], m["b"]) for m in data["matches"]] == [
        (early, "random"),
        (late, "random"),
        (late, early),
    ]
    game = games.make("tictactoe")
    state = game.init(jax.random.key(0))
    from_file = agents.make(f"policy:{models / 'a_late.azjax'}", game)
    from_run = agents.make(f"policy:{tiny_run}@2", game)
    assert int(from_file(state, jax.random.key(1))) == int(from_run(state, jax.random.key(1)))
    assert agents.make(f"search:{models / 'a_late.azjax'}:3", game).name.endswith(".azjax:3")
    with pytest.raises(ValueError, match="a model file has one step: drop @2"):
        agents.parse_spec(f"search:{models / 'a_late.azjax'}@2")
    with pytest.raises(ValueError, match=r"a_late\.azjax was trained on tictactoe"):
        agents.make(f"search:{models / 'a_late.azjax'}", games.make("connect4"))
    export.export_run(tiny_run, models / "c_again.azjax", step=2)
    assert main([*argv, "--games", "2"]) == 2
    assert "c_again.azjax has iteration 2 on its card" in capsys.readouterr().err
    assert main(["--ladder", str(tmp_path), "--quiet"]) == 2
    assert "no checkpoint (nor model files *.azjax)" in capsys.readouterr().err
