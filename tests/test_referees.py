"""The referees against plain-Python solvers, OpenSpiel and published values; the scorers on
known answers; `azjax-eval --solver`."""

from __future__ import annotations

import functools
import itertools
import json

import jax
import numpy as np
import pyspiel
import pytest
from helpers import compile_optimised, load_script, lookup_agent

import games
from azjax import agents, model, referees, zoo
from azjax.cli import INTERRUPTED
from azjax.cli import evaluate as cli
from azjax.referees import CONNECT4, DOTS_AND_BOXES, TICTACTOE, Position

Solution = load_script("make_dots_and_boxes_positions").Solution
COLS, ROWS = 7, 6  # Connect4
BOTTOM = sum(1 << (7 * c) for c in range(COLS))  # bitboards: 7 bits a column, bottom up
FULL = BOTTOM * ((1 << ROWS) - 1)
C4 = games.make("connect4")


@pytest.fixture(scope="module")
def positions():
    return CONNECT4.load()


@pytest.fixture(scope="module")
def groups():
    return referees.load_groups()


WIN = Position((), (-2, -1, 0, 1, 0, -1, -2), "opening")  # the empty board: the centre wins
DRAW = Position((3,), (-1, 0, 0, 0, 0, 0, -1), "opening")  # made-up labels: a draw
LOST = Position((0, 0), (-5, -3, -3, None, -4, -3, -7), "late")  # lost; column 3 full


def test_score_moves_on_hand_labelled_positions():
    acc = referees.score_moves([WIN, DRAW, LOST], [3, 0, 1])  # 0 loses the draw
    assert (acc.positions, acc.best_move, acc.keeps_result) == (3, 2 / 3, 2 / 3)
    acc = referees.score_moves([LOST, DRAW, WIN], [3, 4, 2])  # 3 is illegal; 2 only draws
    assert (acc.best_move, acc.keeps_result) == (1 / 3, 1 / 3)
    assert list(acc.by_phase.items()) == [("late", (1, 0, 0)), ("opening", (2, 0.5, 0.5))]
    won_to_lost = [("won", (1, 0, 0)), ("drawn", (1, 1, 1)), ("lost", (1, 0, 0))]
    assert list(acc.by_result.items()) == won_to_lost
    assert (WIN.value, DRAW.value, LOST.value, LOST.best_moves) == (1, 0, -1, (1, 2, 5))
    assert not WIN.keeps_result(-4) and not WIN.keeps_result(7)  # no such column
    assert (WIN.result_blind, DRAW.result_blind, LOST.result_blind) == (1, 1, 0.5)
    assert acc.result_blind == pytest.approx(2.5 / 3)
    with pytest.raises(ValueError, match="one move per position"):
        referees.score_moves([WIN], [])
    assert referees.wilson(0, 10) == pytest.approx((0, 0.2775), abs=1e-4)
    assert referees.wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert referees.wilson(1000, 1000) == pytest.approx((0.99617, 1), abs=1e-4)
    rates = referees.score_mistakes({"a": [WIN, DRAW], "b": [LOST]}, [2, 0, 6])
    assert rates.counts == {"a": (2, 2), "b": (1, 0)}  # in a lost position no move errs
    rates = referees.score_mistakes({"a": [WIN, DRAW], "b": [LOST]}, [3, 1, 6])
    assert rates.counts == {"a": (2, 0), "b": (1, 0)}
    ci = list(referees.wilson(0, 1))
    assert rates.to_dict()["b"] == {"positions": 1, "mistakes": 0, "mistake_rate": 0, "ci95": ci}
    with pytest.raises(ValueError, match="one move per position"):
        referees.score_mistakes({"a": [WIN]}, [3, 3])


def _bitboards(moves: tuple[int, ...]) -> tuple[int, int]:
    """(the mover's stones, all stones) after `moves`."""
    heights, stones = [0] * COLS, [0, 0]  # the first player's, the second's
    for i, move in enumerate(moves):
        stones[i % 2] |= 1 << (7 * move + heights[move])
        heights[move] += 1
    return stones[len(moves) % 2], stones[0] | stones[1]


def _aligned(stones: int) -> bool:  # four in a row: vertical, horizontal, the two diagonals
    return any((x := stones & stones >> s) & x >> 2 * s for s in (1, 7, 6, 8))


def _drop(mask: int, col: int) -> int:
    """The bit a stone dropped in `col` takes (0: the column is full)."""
    return (mask + (1 << 7 * col)) & (((1 << ROWS) - 1) << 7 * col)


def _perfect(mine: int, mask: int) -> tuple[int, int]:
    """(the mover's result 1/0/-1, plies to the end), winning soonest, losing latest: negamax."""
    lines = [_after(mine, mask, bit) for col in range(COLS) if (bit := _drop(mask, col))]
    return max(lines, key=lambda line: (line[0], -line[0] * line[1]))


@functools.cache
def _after(mine: int, mask: int, bit: int) -> tuple[int, int]:
    """(result, plies to the end) for the mover after it plays `bit`, this move included."""
    if _aligned(mine | bit) or mask | bit == FULL:
        return int(_aligned(mine | bit)), 1
    result, plies = _perfect(mask ^ mine, mask | bit)
    return -result, plies + 1


def _column_scores(moves: tuple[int, ...]) -> tuple[int | None, ...]:
    """Each column's score by brute force: 22 - the winner's stones, for the mover; None: full."""
    mine, mask = _bitboards(moves)
    lines = [_after(mine, mask, b) if (b := _drop(mask, c)) else None for c in range(COLS)]
    return tuple(line and line[0] * (22 - (len(moves) + line[1] + 1) // 2) for line in lines)


def test_the_connect4_sets_cover_the_game_and_match_a_brute_force(positions, groups):
    assert len(positions) >= 200 and len({p.moves for p in positions}) == len(positions)
    assert {p.phase for p in positions} == {"opening", "middle", "late"}
    assert {p.value for p in positions} == {-1, 0, 1}
    plies = [p.ply for p in positions]
    assert min(plies) == 0 and max(plies) >= 30
    # The first player wins only in the centre; the columns beside it draw (Allis 1988).
    assert [int(np.sign(s)) for s in positions[plies.index(0)].scores] == [-1, -1, 0, 1, 0, -1, -1]
    checked = 0
    for p in positions:  # a move that wins at once has the best (and a positive) score
        mine, mask = _bitboards(p.moves)
        for col in range(COLS):
            if (bit := _drop(mask, col)) and _aligned(mine | bit):
                assert p.scores[col] > 0 and col in p.best_moves, p.moves
                checked += 1
    assert checked > 10
    late = [p for p in positions if p.ply >= 30] + [p for p in groups["end-easy"] if p.ply >= 32][
        :60
    ]
    assert len(late) >= 70
    for p in late:  # the solver set's and Pons' late labels by brute force
        assert _column_scores(p.moves) == p.scores, p.moves


def test_accuracy_of_perfect_and_random_agents_and_foreign_positions(positions):
    key = jax.random.key(0)
    perfect = lookup_agent(C4, positions, lambda p: p.best_moves[-1])
    acc = referees.accuracy(C4, perfect, key)  # the shipped set by default
    assert (acc.positions, acc.best_move, acc.keeps_result) == (len(positions), 1, 1)

    def legal(p):
        return [c for c, s in enumerate(p.scores) if s is not None]

    # A random agent scores what the labels expect, batched or not; `progress` hears of each.
    rand, told = agents.make("random", C4), []
    runs = [referees.accuracy(C4, rand, jax.random.key(s), positions) for s in range(4)]
    assert referees.accuracy(C4, rand, jax.random.key(3), positions, 7, told.append) == runs[3]
    assert told == [7] * (len(positions) // 7) + [len(positions) % 7] * bool(len(positions) % 7)
    for got, ok in (("best_move", lambda p, c: c in p.best_moves), ("keeps_result", None)):
        ok = ok or (lambda p, c: p.keeps_result(c))
        expected = np.mean([np.mean([ok(p, c) for c in legal(p)]) for p in positions])
        assert np.mean([getattr(r, got) for r in runs]) == pytest.approx(expected, abs=0.05)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        referees.accuracy(C4, rand, key, positions, 0)
    with pytest.raises(ValueError, match="not labelled for tictactoe"):
        referees.replay(games.make("tictactoe"), positions[:2])
    full = next(p for p in positions if None in p.scores)  # a full column
    relabelled = Position(full.moves, positions[0].scores, full.phase)  # every column labelled
    with pytest.raises(ValueError, match="not labelled for connect4"):
        referees.replay(C4, [positions[0], relabelled])


SCORES = [-2, -1, 0, 1, 0, -1, -2]  # the empty board's


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no Connect4 position set at {}; run scripts/make_connect4_positions.py"),
        (b"{not json", "not a readable JSON position file"),
        (b'[{"moves": "", "scores": []}]', 'expected an object with a "positions" list'),
        (b'{"positions": [{"moves": "abc", "scores": []}]}', "are not a list of actions"),
        (b'{"positions": [{"moves": "99", "scores": []}]}', "move 9 at ply 0 is illegal"),
        (b'{"positions": [3]}', 'position 0: expected {"moves"'),
        (b'{"positions": [{"moves": "", "scores": [1.5]}]}', "scores must be integers or null"),
        (b'{"positions": [{"moves": "", "scores": [1, 2]}]}', "has bad scores (1, 2)"),
        ("0000000", "move 0 at ply 6 is illegal"),  # the seventh stone in column 0
        ("01010101", "move 1 at ply 7 is illegal"),  # a move after the first player won
        ("0101010", "positions finished or not labelled"),  # the won position itself
    ],
)
def test_bad_position_files_are_named_in_one_line(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    if isinstance(content, str):
        content = json.dumps({"positions": [{"moves": content, "scores": SCORES}]}).encode()
    if content is not None:
        bad.write_bytes(content)
    assert cli.main(["--solver", "random", "--positions", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and message.replace("{}", str(bad)) in err


def test_remaining_moves_and_groups_on_known_values_and_by_brute_force():
    cases = ((0, 1), (0, 21), (0, 0), (30, 0), (40, 1), (39, -1), (1, -1))  # (played, score)
    assert [referees.remaining_moves(*c) for c in cases] == [41, 1, 42, 12, 1, 2, 40]
    # stages: 14 | 15 and 28 | 29 moves played; difficulty: 13 | 14 and 28 | 29 moves left
    stages = [referees.group(p, 0).split("-")[0] for p in (14, 15, 28, 29)]
    assert stages == ["begin", "middle", "middle", "end"]
    difficulties = [referees.group(42 - r, 0).split("-")[1] for r in (13, 14, 28, 29)]
    assert difficulties == ["easy", "medium", "medium", "hard"]
    with pytest.raises(ValueError, match="moves played 42"):
        referees.group(42, 0)
    # Late shipped positions, read as they are (load_groups files them by the formula).
    data = json.loads(referees.PONS_PATH.read_text())
    shipped = CONNECT4.parse({"positions": data["groups"]["end-easy"]})
    kinds = set()
    for p in [p for p in shipped if p.ply >= 32][:60]:
        result, left = _perfect(*_bitboards(p.moves))
        assert (p.value, referees.remaining_moves(p.ply, p.best)) == (result, left), p.moves
        assert referees.group(p.ply, p.best) == "end-easy"
        kinds.add((result, p.ply % 2))
    assert kinds == set(itertools.product((1, 0, -1), (0, 1)))  # all six covered


def test_shipped_groups(groups):
    data = json.loads(referees.PONS_PATH.read_text())
    assert list(groups) == list(referees.GROUPS)
    assert data["counts"] == {name: len(ps) for name, ps in groups.items()}
    assert all(len(ps) >= 200 for ps in groups.values())
    every = [p.moves for ps in groups.values() for p in ps]
    assert len(set(every)) == len(every)  # no repeats
    for name, positions in groups.items():
        assert all(referees.group(p.ply, p.best) == name for p in positions)
    # Hard begins span their plies; easy ones are wins and losses (no draw ends that soon).
    assert {p.ply for p in groups["begin-hard"]} == set(range(14))
    assert {p.value for p in groups["begin-easy"]} == {-1, 1}


def test_a_misfiled_pons_group_is_refused(tmp_path):
    data = json.loads(referees.PONS_PATH.read_text())
    data["groups"]["begin-hard"].append(data["groups"]["end-easy"][0])
    bad = tmp_path / "bad.json"
    cases = [(data, "is not begin-hard")]
    cases.append(({"groups": {**data["groups"], "begin-hard": []}}, "group begin-hard is empty"))
    cases.append(({"groups": {"end-easy": []}}, 'expected an object with "groups"'))
    for content, message in cases:
        bad.write_text(json.dumps(content))
        with pytest.raises(ValueError, match=f"{bad}: .*{message}"):
            referees.load_groups(bad)
    with pytest.raises(FileNotFoundError, match=f"run {referees.PONS_SCRIPT}"):
        referees.load_groups(tmp_path / "nowhere.json")


# ----------------------------------------------------------------------------- azjax-eval


@pytest.mark.parametrize("stop_after", [0, 1, 2], ids=["whole", "solver_set", "pons_groups"])
def test_cli_scores_connect4_and_pons_and_keeps_finished_batches(
    stop_after, tmp_path, monkeypatch, capsys, positions, groups
):
    """`azjax-eval --solver` on Connect4 scores the solver set and Pons' six groups as the
    library does; a Ctrl-C during `--batch N` scores the positions of the batches done."""
    calls = []

    def ctrl_c_after_some_batches():
        calls.append(1)
        if len(calls) == stop_after:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli, "check_interrupt", ctrl_c_after_some_batches)
    out = tmp_path / "solver.json"
    argv = ["--solver", "random", "--batch", "640", "--quiet", "--json", str(out)]
    assert cli.main(argv) == (INTERRUPTED if stop_after else 0)
    data = json.loads(out.read_text())
    rand, key = agents.make("random", C4), jax.random.key(0)
    moves = referees.agent_moves(C4, rand, key, positions, 640)
    assert data["accuracy"] == referees.score_moves(positions, moves).to_dict()
    flat = [p for g in groups.values() for p in g]
    moves = referees.agent_moves(C4, rand, jax.random.fold_in(key, 1), flat, 640)
    if not stop_after:
        rates = referees.mistake_rates(C4, rand, jax.random.fold_in(key, 1), groups, 640)
        assert data["pons"] == rates.to_dict()
        assert all(0 < r["mistake_rate"] < 1 for r in data["pons"].values())
        return
    done, planned = len(positions) + 640 * (stop_after - 1), len(positions) + len(flat)
    stopped = [data["interrupted"], data["positions"], data["planned_positions"]]
    assert stopped == [True, done, planned]
    err = capsys.readouterr().err
    assert f"interrupted after {done} of {planned} positions (whole batches)" in err
    if stop_after == 1:
        assert "pons" not in data
    else:
        first = {referees.GROUPS[0]: groups[referees.GROUPS[0]][:640]}
        assert data["pons"] == referees.score_mistakes(first, moves[:640]).to_dict()


# ----------------------------------------------------------------------------- Tic-Tac-Toe

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def _play(board: tuple[int, ...], cell: int) -> tuple[int, ...]:
    """The board after the mover (1) takes `cell`, from the other player's view (signs swapped)."""
    return tuple(-1 if i == cell else -c for i, c in enumerate(board))


def _ended(board: tuple[int, ...]) -> int | None:
    """-1 if the last move won, 0 if it filled the board, None while the game goes on."""
    if any(all(board[c] == -1 for c in line) for line in LINES):
        return -1
    return None if 0 in board else 0


@functools.cache
def _result(board: tuple[int, ...]) -> int:
    """The mover's result under perfect play (1, 0, -1): plain negamax."""
    if (ended := _ended(board)) is not None:
        return ended
    return max(-_result(_play(board, c)) for c in range(9) if board[c] == 0)


def _board(moves) -> tuple[int, ...]:
    return functools.reduce(_play, moves, (0,) * 9)


def _keeps(board: tuple[int, ...], cell: int) -> bool:
    """Whether taking `cell` is legal and keeps the mover's result."""
    return not board[cell] and -_result(_play(board, cell)) == _result(board)


@pytest.fixture(scope="module")
def ttt_positions():
    return TICTACTOE.load()


def test_the_tictactoe_set_is_every_position_labelled_by_minimax(ttt_positions, tmp_path, capsys):
    seen, frontier = set(), [(0,) * 9]  # every non-terminal position reachable
    while frontier:
        board = frontier.pop()
        if board not in seen and _ended(board) is None:
            seen.add(board)
            frontier.extend(_play(board, c) for c in range(9) if board[c] == 0)
    boards = [_board(p.moves) for p in ttt_positions]
    assert len(boards) == len(seen) == 4520 and set(boards) == seen
    for p, board in zip(ttt_positions, boards, strict=True):
        signs = [None if s is None else int(np.sign(s)) for s in p.scores]
        assert signs == [None if board[c] else -_result(_play(board, c)) for c in range(9)]
    # The scores' sizes (how soon a win or loss comes) are the script's: it still writes them.
    load_script("make_tictactoe_positions").main(["--out", str(tmp_path / "ttt.json")])
    assert (tmp_path / "ttt.json").read_bytes() == TICTACTOE.path.read_bytes()
    assert "wrote 4520 positions" in capsys.readouterr().out


@pytest.mark.parametrize("spec", ["zoo:tictactoe", "policy-zoo:tictactoe"])
def test_the_zoo_model_keeps_the_result_in_every_position(ttt_positions, spec, monkeypatch):
    """With its card's search and its policy alone, the shipped model keeps the result in the
    3,191 positions where some legal move gives it up (in the other 1,329 every move keeps it)."""
    monkeypatch.delenv(zoo.ENV, raising=False)  # the shipped zoo
    game = games.make("tictactoe")
    found = model.load("zoo:tictactoe", game)
    search = found.config.playing_search()  # what agents.make("zoo:...") searches with
    assert found.card["search"] == {"algorithm": "gumbel", "simulations": 64}
    assert (search.algorithm, search.num_simulations) == ("gumbel", 64)
    boards = {p: _board(p.moves) for p in ttt_positions}
    at_stake = [p for p, b in boards.items() if not all(_keeps(b, c) for c in range(9) if not b[c])]
    assert len(at_stake) == 3191
    agent = agents.make(spec, game)
    states = referees.replay(game, at_stake)
    keys = jax.random.split(jax.random.key(0), len(at_stake))
    moves = np.asarray(compile_optimised(jax.vmap(agent.__call__), states, keys)(states, keys))
    moves = dict(zip(at_stake, moves.tolist(), strict=True))
    lost = [(p.moves, m) for p, m in moves.items() if not _keeps(boards[p], m)]
    assert not lost, f"{spec} gives up the result in {len(lost)} positions, e.g. {lost[:5]}"


# ----------------------------------------------------------------------------- Dots and Boxes


def _box_masks(rows: int, cols: int) -> tuple[int, ...]:
    """Each box's sides as action bits: horizontal lines row-major, then vertical ones."""
    h = (rows + 1) * cols
    boxes = itertools.product(range(rows), range(cols))
    return tuple(
        1 << r * cols + c | 1 << (r + 1) * cols + c | 3 << h + r * (cols + 1) + c for r, c in boxes
    )


class Minimax:
    """The mover's best box margin from here on, by memoised negamax over the lines: drawing a
    line scores the boxes whose four sides are then drawn and, if any, moves again."""

    def __init__(self, rows: int, cols: int) -> None:
        self.boxes = _box_masks(rows, cols)
        self.lines = (rows + 1) * cols + rows * (cols + 1)
        self.cache: dict[int, int] = {(1 << self.lines) - 1: 0}

    def move_value(self, drawn: int, line: int) -> int:
        after = drawn | 1 << line
        gained = sum(after & box == box for box in self.boxes if box >> line & 1)
        return gained + self.value(after) if gained else -self.value(after)

    def value(self, drawn: int) -> int:
        if drawn not in self.cache:
            lines = [line for line in range(self.lines) if not drawn >> line & 1]
            self.cache[drawn] = max(self.move_value(drawn, line) for line in lines)
        return self.cache[drawn]

    def labels(self, state) -> list[int | None]:
        """Each line's final margin for the mover of the OpenSpiel `state` (None: drawn)."""
        drawn = sum(1 << a for a in state.history())
        boxes = str(state).count("1") - str(state).count("2")  # the owners on OpenSpiel's board
        margin = boxes * (1 - 2 * state.current_player())
        return [
            None if drawn >> a & 1 else margin + self.move_value(drawn, a)
            for a in range(self.lines)
        ]


@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 3), (3, 1), (2, 2)])
def test_every_dots_and_boxes_value_matches_plain_minimax(rows, cols):
    """Every set of lines' value, and on 2x2 every line's (lines closing two boxes included)."""
    reference, solution = Minimax(rows, cols), Solution.of(rows, cols)
    reference.value(0)  # every set of lines is reached from the empty board
    values = solution.values
    assert len(reference.cache) == len(values) == 1 << reference.lines
    np.testing.assert_array_equal(values, [reference.cache[s] for s in range(len(values))])
    for drawn in range(len(values)) if (rows, cols) == (2, 2) else ():
        expected = [None if drawn >> a & 1 else reference.move_value(drawn, a) for a in range(12)]
        assert solution.move_values(drawn) == expected, drawn


def test_dots_and_boxes_published_values_and_limits():
    # 1x1: the four lines alternate, so the second player draws the last and takes the box.
    assert Solution.of(1, 1).values[0] == -1
    # 2x2: the first player wins 3-1 by starting on an outside line; an inside line lets the
    # opponent draw ("Optimal play for 2 by 2 Dots and Boxes", Puzzling Stack Exchange).
    start, inside = Solution.of(2, 2).move_values(0), {2, 3, 7, 10}
    assert [start[a] for a in sorted(inside)] == [0, 0, 0, 0]
    assert {start[a] for a in range(12) if a not in inside} == {2}
    with pytest.raises(ValueError, match="1x8 boxes have 25 lines; the solver handles at most 24"):
        Solution.of(1, 8)


@pytest.fixture(scope="module")
def dab_positions():
    return DOTS_AND_BOXES.load()


# After the first moves of the sample game (h 3 2, h 4 2, h 3 1, v 3 1) in E. Berlekamp, The
# Dots-and-Boxes Game (2000), p. 4, every line's value from the first player's view, as
# D. Wilson published: horizontal lines by dot row, then vertical lines by box row; ".": drawn.
_PUBLISHED = {
    (7,): "-1 -3 -1 -3 -1 -3 -1 . -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -3 -3 -1",
    (7, 10): "-3 -3 -3 -3 -3 -3 -3 . -3 -3 . -3 -3 -3 -3 -3 -3 -1 -1 -3 -3 -3 -3 -3",
    (7, 10, 6): "-1 -1 -1 -1 -3 -1 . . -1 -1 . -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1",
    (7, 10, 6, 20): "-1 -1 -1 -1 -3 -1 . . -1 -5 . -1 -1 -1 -1 -1 -1 -1 -1 -3 . -5 -5 -1",
}


def test_the_dots_and_boxes_set_covers_the_game_and_matches_references(dab_positions):
    assert len(dab_positions) >= 250 and len({p.moves for p in dab_positions}) == len(dab_positions)
    assert all(sum(p.phase == ph for p in dab_positions) >= 80 for ph in ("opening", "late"))
    assert max(p.ply for p in dab_positions) >= 20
    assert all(len({s for s in p.scores if s is not None}) > 1 for p in dab_positions)
    assert {p.value for p in dab_positions} == {-1, 1}  # 9 boxes: no draws
    by_moves = {p.moves: p for p in dab_positions}
    for moves, values in _PUBLISHED.items():
        sign = 1 if len(moves) % 2 == 0 else -1  # no box is won yet: players alternate
        expected = tuple(None if v == "." else sign * int(v) for v in values.split())
        assert by_moves[moves].scores == expected, moves
    # Every first line loses by 3: after any of them, the second player's best wins by 3.
    assert json.loads(DOTS_AND_BOXES.path.read_text())["start_value"] == -3
    firsts = [p for p in dab_positions if p.ply == 1]
    assert len(firsts) >= 10 and all(p.best == 3 for p in firsts)
    reference, spiel = Minimax(3, 3), pyspiel.load_game("dots_and_boxes(num_rows=3,num_cols=3)")
    late = [p for p in dab_positions if p.ply >= 14]
    assert len(late) >= 80
    for p in late:
        state = spiel.new_initial_state()
        for move in p.moves:
            state.apply_action(move)
        assert list(p.scores) == reference.labels(state), p.moves


def test_cli_measures_dots_and_boxes(tmp_path, capsys, dab_positions):
    out = tmp_path / "dab.json"
    argv = ["--solver", "random", "--game", "dots_and_boxes", "--json", str(out)]
    assert cli.main(argv) == 0
    n, printed = len(dab_positions), capsys.readouterr().out
    assert f"random against perfect play (dots_and_boxes):\n{n} positions" in printed
    data = json.loads(out.read_text())
    acc = data["accuracy"]
    assert [data["game"], data["agent"], acc["positions"]] == ["dots_and_boxes", "random", n]
    assert 0 < acc["best_move"] < acc["keeps_result"] < 1
    assert list(acc["by_phase"]) == ["opening", "middle", "late"]
    argv = ["--solver", "random", "--game", "dots_and_boxes", "--size", "rows=2,cols=2"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "there are sets for Connect4, Dots and Boxes 3x3 and Tic-Tac-Toe" in err
