"""Connect4 perfect-play accuracy: the scoring on known answers and the shipped labels checked
against independent facts (published opening values, immediate wins, a plain-Python solver)."""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import load_script, lookup_agent

import games
from azjax import agents, solver
from azjax.solver import Position

ROWS, COLS = 6, 7


@pytest.fixture(scope="module")
def game():
    return games.make("connect4")


@pytest.fixture(scope="module")
def positions():
    return solver.CONNECT4.load()


# ----------------------------------------------------------------------------- scoring


def test_score_moves_on_hand_labelled_positions():
    win = Position((), (-2, -1, 0, 1, 0, -1, -2), "opening")  # the empty board: centre wins
    draw = Position((3,), (-1, 0, 0, 0, 0, 0, -1), "opening")  # made-up labels: a draw
    lost = Position((0, 0), (-5, -3, -3, None, -4, -3, -7), "late")  # lost; column 3 full
    acc = solver.score_moves([win, draw, lost], [3, 0, 1])
    assert acc.positions == 3
    assert acc.best_move == pytest.approx(2 / 3)  # 3 and 1 are best; 0 is not
    assert acc.keeps_result == pytest.approx(2 / 3)  # 0 loses the draw
    acc = solver.score_moves([win, draw, lost], [2, 4, 3])
    assert acc.best_move == pytest.approx(1 / 3)  # only 4 is a best move
    assert acc.keeps_result == pytest.approx(1 / 3)  # 2 only draws; 3 is illegal
    assert win.value == 1 and draw.value == 0 and lost.value == -1
    assert lost.best_moves == (1, 2, 5)
    assert not win.keeps_result(-4) and not win.keeps_result(7)  # no such column
    assert acc.by_phase == {"opening": (2, 0.5, 0.5), "late": (1, 0.0, 0.0)}
    assert acc.by_result == {"won": (1, 0.0, 0.0), "drawn": (1, 1.0, 1.0), "lost": (1, 0.0, 0.0)}
    backwards = solver.score_moves([lost, draw, win], [1, 0, 3])  # results from won to lost
    assert list(backwards.by_result) == ["won", "drawn", "lost"]
    # Keeping the result, blind to the scores: the win's only winning move is best (1), the
    # draw's 5 drawing moves are all best (1), and 3 of the lost position's 6 moves are (1/2).
    assert win.result_blind == 1.0 and draw.result_blind == 1.0 and lost.result_blind == 0.5
    assert acc.result_blind == pytest.approx(2.5 / 3)
    assert acc.to_dict()["by_result"]["lost"] == {
        "positions": 1,
        "best_move": 0.0,
        "keeps_result": 0.0,
    }
    with pytest.raises(ValueError, match="one move per position"):
        solver.score_moves([win], [])


# ----------------------------------------------------------------------------- shipped labels


def test_shipped_set_covers_the_game(positions):
    assert len(positions) >= 200
    plies = np.array([p.ply for p in positions])
    assert [p.phase for p in positions] == [solver.CONNECT4.phase(p.ply) for p in positions]
    assert {p.phase for p in positions} == {"opening", "middle", "late"}
    assert plies.min() == 0 and plies.max() >= 30
    assert len({p.moves for p in positions}) == len(positions)
    assert {p.value for p in positions} == {-1, 0, 1}


def test_empty_board_has_the_published_values(positions):
    # First player wins only in the centre; the columns next to it draw (Allis 1988).
    empty = next(p for p in positions if p.ply == 0)
    signs = [int(np.sign(s)) for s in empty.scores]
    assert signs == [-1, -1, 0, 1, 0, -1, -1]


def test_labels_agree_with_our_rules(game, positions):
    states = solver.replay(game, positions)
    legal = np.asarray(states.legal_action_mask)
    assert not np.asarray(states.terminated).any()
    labelled = np.array([[s is not None for s in p.scores] for p in positions])
    np.testing.assert_array_equal(labelled, legal)
    # A move that wins at once has the best (and a positive) score.
    children = jax.vmap(jax.vmap(game.step, (None, 0)), (0, None))(states, jnp.arange(COLS))
    movers = np.asarray(states.current_player)
    wins = np.asarray(children.terminated) & (
        np.asarray(children.rewards)[np.arange(len(positions)), :, movers] > 0
    )
    checked = 0
    for p, row in zip(positions, wins, strict=True):
        for column in np.flatnonzero(row):
            assert p.scores[column] > 0 and column in p.best_moves, p.moves
            checked += 1
    assert checked > 10


def _python_value(cells: tuple[tuple[int, ...], ...], mover: int, cache: dict) -> int:
    """Game-theoretic result (1, 0, -1) for `mover` by plain negamax (cells[col] bottom-up)."""
    key = (cells, mover)
    if key in cache:
        return cache[key]
    best = -2
    for col in range(COLS):
        if len(cells[col]) == ROWS:
            continue
        nxt = tuple((*c, mover) if i == col else c for i, c in enumerate(cells))
        if _wins(nxt, col, mover):
            best = 1
            break
        full = all(len(c) == ROWS for c in nxt)
        best = max(best, 0 if full else -_python_value(nxt, 1 - mover, cache))
    cache[key] = best
    return best


def _wins(cells, col: int, mover: int) -> bool:
    row = len(cells[col]) - 1

    def at(c: int, r: int) -> int | None:
        return cells[c][r] if 0 <= c < COLS and 0 <= r < len(cells[c]) else None

    for dc, dr in ((1, 0), (0, 1), (1, 1), (1, -1)):
        run = 1
        for sign in (1, -1):
            k = 1
            while at(col + sign * k * dc, row + sign * k * dr) == mover:
                run += 1
                k += 1
        if run >= 4:
            return True
    return False


def test_late_labels_match_a_plain_python_solver(positions):
    late = [p for p in positions if p.ply >= 30]
    assert len(late) >= 10
    cache: dict = {}
    for p in late:
        cells = [[] for _ in range(COLS)]
        for i, col in enumerate(p.moves):
            cells[col].append(i % 2)
        mover = p.ply % 2
        frozen = tuple(tuple(c) for c in cells)
        for col, score in enumerate(p.scores):
            if score is None:
                continue
            nxt = tuple((*c, mover) if i == col else c for i, c in enumerate(frozen))
            if _wins(nxt, col, mover):
                value = 1
            elif all(len(c) == ROWS for c in nxt):
                value = 0
            else:
                value = -_python_value(nxt, 1 - mover, cache)
            assert value == int(np.sign(score)), (p.moves, col)


def test_the_script_writes_the_shipped_set(tmp_path, capsys):
    """scripts/make_connect4_positions.py with its defaults writes the shipped file byte for
    byte: the labels checked above are the script's."""
    out = tmp_path / "connect4.json"
    load_script("make_connect4_positions").main(["--out", str(out)])
    assert out.read_bytes() == solver.CONNECT4.path.read_bytes()
    assert "wrote 300 positions" in capsys.readouterr().out


@pytest.mark.parametrize("script", ["make_connect4_positions", "make_connect4_pons"])
def test_the_connect4_scripts_name_the_missing_solver(script, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "bitbully", None)  # an import of it fails
    with pytest.raises(SystemExit) as exit_info:
        load_script(script).main(["--out", str(tmp_path / "x.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("bitbully is not installed; pip install -e '.[solver]'")
    assert not (tmp_path / "x.json").exists()


# ----------------------------------------------------------------------------- agents


def test_accuracy_of_a_perfect_and_of_a_worst_agent(game, positions):
    key = jax.random.key(0)
    perfect = solver.accuracy(game, lookup_agent(game, positions, lambda p: p.best_moves[-1]), key)
    assert perfect.best_move == 1.0 and perfect.keeps_result == 1.0
    assert perfect.positions == len(positions)

    def worst(p):
        legal = [c for c, s in enumerate(p.scores) if s is not None]
        return min(legal, key=lambda c: p.scores[c])

    bad = solver.accuracy(game, lookup_agent(game, positions, worst), key)
    all_equal = np.mean([len({s for s in p.scores if s is not None}) == 1 for p in positions])
    all_keep = np.mean(
        [all(p.keeps_result(c) for c in range(COLS) if p.scores[c] is not None) for p in positions]
    )
    assert bad.best_move == pytest.approx(all_equal)
    assert bad.keeps_result == pytest.approx(all_keep)


def test_batches_score_as_one_call(game, positions):
    """In batches (the last one padded) each position keeps its key: the same moves, and
    `progress` hears of every position once."""
    greedy = agents.make("greedy", game)
    key = jax.random.key(3)
    whole = solver.accuracy(game, greedy, key, positions)
    told = []
    parts = solver.accuracy(game, greedy, key, positions, batch_size=7, progress=told.append)
    assert parts == whole
    assert told == [7] * (len(positions) // 7) + [len(positions) % 7] * bool(len(positions) % 7)
    random = agents.make("random", game)
    assert solver.accuracy(game, random, key, positions, 5) == solver.accuracy(
        game, random, key, positions
    )
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        solver.accuracy(game, random, key, positions, 0)


def test_random_agent_matches_its_expected_accuracy(game, positions):
    # Expected shares for a uniform legal move, from the labels alone.
    def share(p, ok):
        legal = [c for c in range(COLS) if p.scores[c] is not None]
        return np.mean([ok(p, c) for c in legal])

    expect_best = np.mean([share(p, lambda p, c: c in p.best_moves) for p in positions])
    expect_keep = np.mean([share(p, lambda p, c: p.keeps_result(c)) for p in positions])
    random = agents.make("random", game)
    runs = [solver.accuracy(game, random, jax.random.key(s), positions) for s in range(4)]
    assert np.mean([r.best_move for r in runs]) == pytest.approx(expect_best, abs=0.05)
    assert np.mean([r.keeps_result for r in runs]) == pytest.approx(expect_keep, abs=0.05)


def test_positions_are_refused_for_another_game(game, positions):
    with pytest.raises(ValueError, match="not labelled for tictactoe"):
        solver.replay(games.make("tictactoe"), positions[:2])
    full = next(p for p in positions if None in p.scores)  # a full column
    relabelled = Position(full.moves, positions[0].scores, full.phase)  # every column labelled
    with pytest.raises(ValueError, match="not labelled for connect4"):
        solver.replay(game, [positions[0], relabelled])
    with pytest.raises(ValueError, match=r"no perfect-play position set.*Connect4"):
        solver.accuracy(games.make("othello"), agents.make("random", game), jax.random.key(0))
    assert solver.referee_for(game) is solver.CONNECT4


SCORES = [-2, -1, 0, 1, 0, -1, -2]  # the empty board's


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not a readable JSON position file"),
        (b"\xff\xfe\x00binary", "not a readable JSON position file"),
        (b'[{"moves": "", "scores": []}]', 'expected an object with a "positions" list'),
        (b'{"positions": [{"moves": "abc", "scores": []}]}', "are not a list of actions"),
        (b'{"positions": [{"moves": "99", "scores": []}]}', "move 9 at ply 0 is illegal"),
        (b'{"positions": [{"moves": [0, true], "scores": []}]}', "are not a list of actions"),
        (b'{"positions": [3]}', 'position 0: expected {"moves"'),
        (b'{"positions": [{"moves": "", "scores": [1.5]}]}', "scores must be integers or null"),
        (b'{"positions": [{"moves": "", "scores": [1, 2]}]}', "has bad scores (1, 2)"),
    ],
)
def test_bad_position_files_are_named_in_one_line(tmp_path, capsys, content, message):
    from azjax.cli.evaluate import main

    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    assert main(["--solver", "random", "--positions", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and message in err, err


def test_a_missing_position_file_names_the_script_that_makes_it(tmp_path, capsys):
    from azjax.cli.evaluate import main

    missing = tmp_path / "nowhere.json"
    with pytest.raises(FileNotFoundError, match=f"no Connect4 position set at {missing}; run "):
        solver.CONNECT4.load(str(missing))
    assert main(["--solver", "random", "--positions", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scripts/make_connect4_positions.py" in err, err


@pytest.mark.parametrize(
    ("moves", "message"),
    [
        ("0000000", "move 0 at ply 6 is illegal"),  # the seventh stone in column 0
        ("00000000", "move 0 at ply 6 is illegal"),  # the first illegal move is named
        ("01010101", "move 1 at ply 7 is illegal"),  # a move after the first player won
        ("0101010", "positions finished or not labelled"),  # the won position itself
    ],
)
def test_a_move_the_game_does_not_allow_is_named(tmp_path, moves, message):
    full = {"moves": moves, "scores": SCORES}
    (tmp_path / "full.json").write_text(f'{{"positions": [{json.dumps(full)}]}}')
    with pytest.raises(ValueError, match=rf"full\.json: (position 0: )?{message}"):
        solver.CONNECT4.load(str(tmp_path / "full.json"))
