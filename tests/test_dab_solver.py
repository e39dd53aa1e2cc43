"""Dots and Boxes exact values (azjax.dab_solver) and the shipped 3x3 referee set, checked
against independent references: a plain-Python minimax over box geometry written here,
OpenSpiel's dots_and_boxes, and values published for 3x3 (D. Wilson's analysis of the sample
game in E. Berlekamp, The Dots-and-Boxes Game, 2000, p. 4)."""

from __future__ import annotations

import functools
import itertools
import json
import random

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel
import pytest
from helpers import load_script

import games
from azjax import agents, solver
from azjax.agents import Agent
from azjax.dab_solver import Solution, closing_masks, solve
from azjax.solver import DOTS_AND_BOXES, Position
from games.core import random_legal_action

# ----------------------------------------------------------------------------- references


@functools.cache
def _box_masks(rows: int, cols: int) -> tuple[int, ...]:
    """Each box's four sides as bits of their actions, found by the dots they join: horizontal
    lines (r, c)-(r, c + 1) row-major, then vertical lines (r, c)-(r + 1, c) row-major."""
    lines = [((r, c), (r, c + 1)) for r in range(rows + 1) for c in range(cols)]
    lines += [((r, c), (r + 1, c)) for r in range(rows) for c in range(cols + 1)]
    index = {frozenset(line): i for i, line in enumerate(lines)}
    masks = []
    for r, c in itertools.product(range(rows), range(cols)):
        corners = [(r, c), (r, c + 1), (r + 1, c + 1), (r + 1, c)]
        sides = [index[frozenset((corners[k], corners[(k + 1) % 4]))] for k in range(4)]
        masks.append(sum(1 << s for s in sides))
    return tuple(masks)


class Minimax:
    """The mover's best box margin from here on, by memoised negamax over the lines: drawing a
    line scores the boxes whose four sides are then drawn and, if any, moves again."""

    def __init__(self, rows: int, cols: int) -> None:
        self.boxes = _box_masks(rows, cols)
        self.lines = (rows + 1) * cols + rows * (cols + 1)
        self.cache: dict[int, int] = {(1 << self.lines) - 1: 0}

    def gained(self, drawn: int, line: int) -> int:
        after = drawn | 1 << line
        return sum(1 for box in self.boxes if box >> line & 1 and after & box == box)

    def move_value(self, drawn: int, line: int) -> int:
        gained, after = self.gained(drawn, line), self.value(drawn | 1 << line)
        return gained + after if gained else -after

    def value(self, drawn: int) -> int:
        if drawn not in self.cache:
            self.cache[drawn] = max(
                self.move_value(drawn, line) for line in range(self.lines) if not drawn >> line & 1
            )
        return self.cache[drawn]


def _spiel_game(rows: int, cols: int):
    return pyspiel.load_game("dots_and_boxes", {"num_rows": rows, "num_cols": cols})


def _spiel_margin(state, player: int) -> int:
    """Boxes of `player` minus the opponent's, read off OpenSpiel's board."""
    text = str(state)
    margin = text.count("1") - text.count("2")  # OpenSpiel marks boxes with the owner, 1 or 2
    return margin if player == 0 else -margin


def _spiel_drawn(state) -> int:
    return sum(1 << a for a in state.history())


# ----------------------------------------------------------------------------- the solver


def perfect_agent(game: games.Game, solution: Solution) -> Agent:
    """A jittable agent that plays a uniformly random move among the best of `solution`."""
    masks = closing_masks(solution.rows, solution.cols).astype(np.int32)
    bits = np.int32(1) << np.arange(game.num_actions, dtype=np.int32)

    def fn(values: jax.Array, state, key: jax.Array) -> jax.Array:
        drawn = jnp.sum(jnp.where(state.lines, bits, 0))
        closed = jnp.sum((drawn & masks) == masks, axis=1)  # [L]
        after = values[drawn | bits].astype(jnp.int32)
        score = jnp.where(closed > 0, closed + after, -after)
        legal = state.legal_action_mask
        top = jnp.max(jnp.where(legal, score, -128))
        return random_legal_action(key, legal & (score == top))

    return Agent(fn=fn, params=jnp.asarray(solution.values), name="perfect")


@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 3), (2, 2), (2, 3), (3, 2)])
def test_every_value_matches_plain_minimax(rows, cols):
    reference = Minimax(rows, cols)
    reference.value(0)  # every set of lines is reached from the empty board
    values = solve(rows, cols)
    assert len(reference.cache) == len(values) == 1 << reference.lines
    expected = np.array([reference.cache[s] for s in range(len(values))])
    np.testing.assert_array_equal(values, expected)


def test_published_small_board_values():
    # 1x1: the four lines alternate, so the second player draws the last and takes the box.
    assert solve(1, 1)[0] == -1
    # 2x2: the first player wins 3-1 by starting on an outside line; an inside line lets the
    # opponent draw ("Optimal play for 2 by 2 Dots and Boxes", Puzzling Stack Exchange).
    start = Solution.of(2, 2).move_values(0)
    inside = {2, 3, 7, 10}  # h 2 1, h 2 2, v 1 2, v 2 2
    assert [start[a] for a in sorted(inside)] == [0, 0, 0, 0]
    assert {start[a] for a in range(12) if a not in inside} == {2}


def test_solver_refuses_boards_too_large():
    with pytest.raises(ValueError, match="at most 24"):
        solve(3, 4)
    with pytest.raises(ValueError, match="1x8 boxes have 25 lines"):  # one too many
        solve(1, 8)


def test_a_line_that_closes_two_boxes_scores_both():
    """Wherever one line closes two boxes at once on 2x2, `closes`, `move_values` and the
    perfect agent's choice agree with the plain minimax: both boxes count."""
    solution, reference = Solution.of(2, 2), Minimax(2, 2)
    doubles = {
        drawn
        for drawn in range(1 << reference.lines)
        for line in range(reference.lines)
        if not drawn >> line & 1 and reference.gained(drawn, line) == 2
    }
    assert doubles
    for drawn in doubles:
        moves = solution.move_values(drawn)
        for line, value in enumerate(moves):
            if value is not None:
                assert solution.closes(drawn, line) == reference.gained(drawn, line)
                assert value == reference.move_value(drawn, line)
    game = games.make("dots_and_boxes", rows=2, cols=2)
    sets = np.array(sorted(doubles))
    lines = (sets[:, None] >> np.arange(reference.lines)) & 1 == 1
    start = game.init(jax.random.key(0))
    states = jax.vmap(lambda drawn: start.replace(lines=drawn, legal_action_mask=~drawn))(
        jnp.asarray(lines)
    )
    perfect = perfect_agent(game, solution)
    keys = jax.random.split(jax.random.key(1), len(sets))
    chosen = np.asarray(jax.jit(jax.vmap(perfect))(states, keys))
    for drawn, line in zip(sets.tolist(), chosen.tolist(), strict=True):
        assert reference.move_value(drawn, line) == reference.value(drawn), (drawn, line)


def test_full_game_values_match_openspiel_on_2x2():
    """Negamax over OpenSpiel's own states and rules, of the final box margin (so without the
    solver's premise that the future depends on the drawn lines alone)."""
    solution = Solution.of(2, 2)
    cache: dict[tuple[str, int], int] = {}

    def final_margin(state) -> int:  # for the player to move, both playing perfectly
        player = state.current_player()
        key = (str(state), player)
        if key not in cache:
            cache[key] = max(
                _spiel_margin(child, player)
                if child.is_terminal()
                else final_margin(child) * (1 if child.current_player() == player else -1)
                for child in map(state.child, state.legal_actions())
            )
            expected = _spiel_margin(state, player) + solution.values[_spiel_drawn(state)]
            assert cache[key] == expected, state.history()
        return cache[key]

    assert final_margin(_spiel_game(2, 2).new_initial_state()) == 2
    assert len(cache) > 4096  # every line set, many with several box owners and movers


def test_best_play_in_openspiel_reaches_the_solver_value():
    """From random 2x3 positions, the solver's best lines for both sides, played by OpenSpiel,
    end with the box margin the solver promised, and OpenSpiel's result agrees."""
    solution = Solution.of(2, 3)
    rng = random.Random(0)
    games_played = 0
    for _ in range(150):
        state = _spiel_game(2, 3).new_initial_state()
        for _ in range(rng.randrange(17)):
            state.apply_action(rng.choice(state.legal_actions()))
        if state.is_terminal():
            continue
        mover = state.current_player()
        promised = _spiel_margin(state, mover) + solution.values[_spiel_drawn(state)]
        while not state.is_terminal():
            values = solution.move_values(_spiel_drawn(state))
            top = max(v for v in values if v is not None)
            state.apply_action(rng.choice([a for a, v in enumerate(values) if v == top]))
        assert _spiel_margin(state, mover) == promised, state.history()
        assert state.returns()[0] == np.sign(_spiel_margin(state, 0))
        games_played += 1
    assert games_played > 100


# ----------------------------------------------------------------------------- agents


def _positions(rows: int, cols: int, count: int, seed: int) -> list[Position]:
    """Positions from random play labelled by the plain minimax (final margin per line)."""
    reference = Minimax(rows, cols)
    game = _spiel_game(rows, cols)
    rng = random.Random(seed)
    out: dict[tuple[int, ...], Position] = {}
    while len(out) < count:
        state = game.new_initial_state()
        for _ in range(rng.randrange(reference.lines - 1)):
            state.apply_action(rng.choice(state.legal_actions()))
        drawn, margin = _spiel_drawn(state), _spiel_margin(state, state.current_player())
        scores = tuple(
            None if drawn >> a & 1 else margin + reference.move_value(drawn, a)
            for a in range(reference.lines)
        )
        if len({s for s in scores if s is not None}) > 1:
            phase = "opening" if len(state.history()) < reference.lines // 2 else "late"
            out[tuple(state.history())] = Position(tuple(state.history()), scores, phase)
    return sorted(out.values(), key=lambda p: p.ply)


def test_perfect_agent_scores_every_position_and_random_does_not():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    positions = _positions(2, 2, 120, seed=1)
    perfect = perfect_agent(game, Solution.of(2, 2))
    result = solver.accuracy(game, perfect, jax.random.key(0), positions)
    assert (result.positions, result.best_move, result.keeps_result) == (120, 1.0, 1.0)
    assert set(result.by_phase) == {"opening", "late"}
    rand = solver.accuracy(game, agents.make("random", game), jax.random.key(0), positions)
    assert rand.best_move < 0.8 and rand.keeps_result < 0.95


def test_perfect_agent_wins_the_2x2_game_by_two_against_itself():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    perfect = perfect_agent(game, Solution.of(2, 2))

    def play(key):
        def body(state, key):
            return game.step(state, perfect(state, key)), None

        return jax.lax.scan(body, game.init(key), jax.random.split(key, 12))[0]

    final = jax.jit(jax.vmap(play))(jax.random.split(jax.random.key(0), 16))
    assert np.asarray(final.terminated).all()
    np.testing.assert_array_equal(np.asarray(final.scores), np.tile([3, 1], (16, 1)))


# ----------------------------------------------------------------------------- shipped set


@pytest.fixture(scope="module")
def shipped():
    return DOTS_AND_BOXES.load()


@pytest.fixture(scope="module")
def game():
    return games.make("dots_and_boxes")


def test_shipped_set_covers_the_game(shipped, game):
    assert DOTS_AND_BOXES.path.stat().st_size < 200_000
    data = json.loads(DOTS_AND_BOXES.path.read_text())
    assert [e["phase"] for e in data["positions"]] == [p.phase for p in shipped]
    assert len(shipped) >= 250 and len({p.moves for p in shipped}) == len(shipped)
    counts = {phase: sum(p.phase == phase for p in shipped) for phase in ("opening", "middle")}
    assert min(counts.values()) >= 80 and sum(p.phase == "late" for p in shipped) >= 80
    assert max(p.ply for p in shipped) >= 20
    assert all(len({s for s in p.scores if s is not None}) > 1 for p in shipped)
    assert {p.value for p in shipped} == {-1, 1}  # 9 boxes: no draws
    assert solver.referee_for(game) is DOTS_AND_BOXES
    solver.replay(game, shipped)  # raises unless the labelled lines are the legal ones


# After the first moves of the sample game (h 3 2, h 4 2, h 3 1, v 3 1), the value of every
# line from the first player's view, as published: horizontal lines by dot row, vertical
# lines by box row; None for drawn lines.
_PUBLISHED = {  # moves: (horizontal lines, vertical lines)
    (7,): (
        [-1, -3, -1, -3, -1, -3, -1, None, -1, -1, -1, -1],
        [-1, -1, -1, -1, -1, -1, -1, -1, -1, -3, -3, -1],
    ),
    (7, 10): (
        [-3, -3, -3, -3, -3, -3, -3, None, -3, -3, None, -3],
        [-3, -3, -3, -3, -3, -1, -1, -3, -3, -3, -3, -3],
    ),
    (7, 10, 6): (
        [-1, -1, -1, -1, -3, -1, None, None, -1, -1, None, -1],
        [-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1],
    ),
    (7, 10, 6, 20): (
        [-1, -1, -1, -1, -3, -1, None, None, -1, -5, None, -1],
        [-1, -1, -1, -1, -1, -1, -1, -3, None, -5, -5, -1],
    ),
}


def test_shipped_labels_match_published_values(shipped):
    by_moves = {p.moves: p for p in shipped}
    for moves, (horizontal, vertical) in _PUBLISHED.items():
        sign = 1 if len(moves) % 2 == 0 else -1  # no box is won yet: players alternate
        expected = tuple(None if v is None else sign * v for v in [*horizontal, *vertical])
        assert by_moves[moves].scores == expected, moves
    # Every first line loses by 3: after any of them, the second player's best wins by 3.
    assert json.loads(DOTS_AND_BOXES.path.read_text())["start_value"] == -3
    firsts = [p for p in shipped if p.ply == 1]
    assert len(firsts) >= 10 and all(max(s for s in p.scores if s is not None) == 3 for p in firsts)


def test_shipped_late_labels_match_openspiel_and_plain_minimax(shipped):
    reference = Minimax(3, 3)
    late = [p for p in shipped if p.ply >= 14]
    assert len(late) >= 80
    for p in late:
        state = _spiel_game(3, 3).new_initial_state()
        for move in p.moves:
            state.apply_action(move)
        drawn, margin = _spiel_drawn(state), _spiel_margin(state, state.current_player())
        expected = tuple(
            None if drawn >> a & 1 else margin + reference.move_value(drawn, a) for a in range(24)
        )
        assert p.scores == expected, p.moves


def test_the_script_writes_the_shipped_set(tmp_path, capsys):
    """scripts/make_dots_and_boxes_positions.py with its defaults writes the shipped file byte
    for byte: the labels checked above are the script's."""
    out = tmp_path / "dab.json"
    load_script("make_dots_and_boxes_positions").main(["--out", str(out)])
    assert out.read_bytes() == DOTS_AND_BOXES.path.read_bytes()
    assert "wrote 300 positions" in capsys.readouterr().out


@functools.cache
def _lookup_fn(table: bytes, shape: tuple[int, ...], picks: tuple[int, ...]):
    lines, picks = jnp.asarray(np.frombuffer(table, bool).reshape(shape)), jnp.asarray(picks)

    def fn(params, state, key):
        del params, key
        return picks[jnp.argmax(jnp.all(lines == state.lines, axis=1))]

    return fn


def test_accuracy_on_the_shipped_set(shipped, game):
    # Positions with the same lines have the same best lines, so the lines identify them.
    lines = np.asarray(solver.replay(game, shipped).lines)
    picks = tuple(p.best_moves[0] for p in shipped)
    best = Agent(fn=_lookup_fn(lines.tobytes(), lines.shape, picks), name="lookup")
    perfect = solver.accuracy(game, best, jax.random.key(0))
    assert (perfect.positions, perfect.best_move, perfect.keeps_result) == (len(shipped), 1, 1)
    assert list(perfect.by_phase) == ["opening", "middle", "late"]

    def share(ok) -> float:  # expected for a uniformly random legal line
        oks = [[ok(p, a) for a, s in enumerate(p.scores) if s is not None] for p in shipped]
        return float(np.mean([np.mean(row) for row in oks]))

    rand = solver.accuracy(game, agents.make("random", game), jax.random.key(1))
    assert rand.best_move == pytest.approx(share(lambda p, a: a in p.best_moves), abs=0.08)
    assert rand.keeps_result == pytest.approx(share(Position.keeps_result), abs=0.08)
    assert rand.best_move < 0.6 and rand.keeps_result < 0.9


# ----------------------------------------------------------------------------- azjax-eval


def test_eval_cli_measures_dots_and_boxes(tmp_path, capsys, shipped):
    from azjax.cli.evaluate import main

    out = tmp_path / "dab.json"
    argv = ["--solver", "random", "--game", "dots_and_boxes", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"random against perfect play (dots_and_boxes):\n{len(shipped)} positions" in printed
    data = json.loads(out.read_text())
    assert data["game"] == "dots_and_boxes" and data["agent"] == "random"
    acc = data["accuracy"]
    assert acc["positions"] == len(shipped) and 0 < acc["best_move"] < acc["keeps_result"] < 1
    assert list(acc["by_phase"]) == ["opening", "middle", "late"]
    assert main(["--solver", "random", "--game", "dots_and_boxes", "--size", "rows=2,cols=2"]) == 2
    assert (
        "there are sets for Connect4, Dots and Boxes 3x3 and Tic-Tac-Toe" in capsys.readouterr().err
    )
