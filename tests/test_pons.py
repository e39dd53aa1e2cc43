"""The Pons yardstick: groups (stage x difficulty) against a brute-force count of the moves left,
the mistake scorer on known answers, and the shipped groups' shape."""

from __future__ import annotations

import json
import random

import jax
import numpy as np
import pytest
from helpers import load_script, lookup_agent

import games
from azjax import pons
from azjax.solver import CONNECT4, Position

COLS, ROWS = 7, 6
BOTTOM = sum(1 << (7 * c) for c in range(COLS))  # one bit per column, 7 bits per column
FULL = BOTTOM * ((1 << ROWS) - 1)


@pytest.fixture(scope="module")
def groups():
    return pons.load()


# ----------------------------------------------------------------------------- brute force


def _aligned(stones: int) -> bool:
    for shift in (1, 7, 6, 8):  # vertical, horizontal, the two diagonals
        pairs = stones & (stones >> shift)
        if pairs & (pairs >> 2 * shift):
            return True
    return False


def _perfect_line(mine: int, mask: int, cache: dict) -> tuple[int, int]:
    """(result for the mover: 1, 0, -1; plies until the game ends) under perfect play, where
    the winner ends it as soon as it can and the loser as late as it can: plain negamax."""
    if (mine, mask) in cache:
        return cache[mine, mask]
    best, best_key = None, None
    for col in range(COLS):
        bit = (mask + (1 << 7 * col)) & (((1 << ROWS) - 1) << 7 * col)
        if not bit:
            continue  # a full column
        if _aligned(mine | bit):
            line = (1, 1)
        elif mask | bit == FULL:
            line = (0, 1)
        else:
            result, plies = _perfect_line((mask | bit) ^ (mine | bit), mask | bit, cache)
            line = (-result, plies + 1)
        key = (line[0], -line[1] if line[0] > 0 else line[1] if line[0] < 0 else 0)
        if best_key is None or key > best_key:
            best, best_key = line, key
    cache[mine, mask] = best
    return best


def _bitboards(moves: tuple[int, ...]) -> tuple[int, int]:
    """(the mover's stones, all stones) after `moves`."""
    heights, mine, mask = [0] * COLS, 0, 0
    for i, move in enumerate(moves):
        bit = 1 << (7 * move + heights[move])
        heights[move] += 1
        mask |= bit
        if i % 2 == len(moves) % 2:
            mine |= bit
    return mine, mask


def _column_scores(moves: tuple[int, ...], cache: dict) -> tuple[int | None, ...]:
    """Every column's Pons score after `moves` from the brute force: 22 - the winner's stones
    at the win, signed for the mover; 0 for a draw; None for a full column."""
    mine, mask = _bitboards(moves)
    scores = []
    for col in range(COLS):
        bit = (mask + (1 << 7 * col)) & (((1 << ROWS) - 1) << 7 * col)
        if not bit:
            scores.append(None)
            continue
        if _aligned(mine | bit):
            result, end = 1, len(moves) + 1
        elif mask | bit == FULL:
            result, end = 0, len(moves) + 1
        else:
            reply, plies = _perfect_line((mask | bit) ^ (mine | bit), mask | bit, cache)
            result, end = -reply, len(moves) + 1 + plies
        scores.append(result * (22 - (end + 1) // 2))  # the last stone is the winner's
    return tuple(scores)


def _check_late_groups(groups: dict[str, list[Position]], plies: int) -> set:
    """Positions of `groups` with at least `plies` moves played, checked by exhaustive search:
    every column's score, the moves left under perfect play from the best score, and so the
    group. Returns the (result, parity) pairs met."""
    cache: dict = {}
    kinds = set()
    for name, positions in groups.items():
        for p in (p for p in positions if p.ply >= plies):
            mine, mask = _bitboards(p.moves)
            result, left = _perfect_line(mine, mask, cache)
            best = max(s for s in p.scores if s is not None)
            assert int(np.sign(best)) == result, p.moves
            assert pons.remaining_moves(p.ply, best) == left, (p.moves, best, left)
            assert name == f"{pons.stage(p.ply)}-{pons.difficulty(left)}", p.moves
            assert pons.position_group(p) == name, p.moves
            assert _column_scores(p.moves, cache) == p.scores, p.moves
            kinds.add((result, p.ply % 2))
    return kinds


def test_remaining_moves_on_known_values():
    assert pons.remaining_moves(0, 1) == 41  # the first player wins with its last stone
    assert pons.remaining_moves(0, 21) == 1  # a win with the first stone
    assert pons.remaining_moves(0, 0) == 42 and pons.remaining_moves(30, 0) == 12
    assert pons.remaining_moves(40, 1) == 1  # 21st stone: the mover has 20 on the board
    assert pons.remaining_moves(39, -1) == 2  # the opponent's 21st stone after the mover's 20th
    assert pons.remaining_moves(1, -1) == 40  # the first player wins with its 21st stone


def test_groups_match_a_brute_force_count_of_the_moves_left():
    """Late positions, shipped with bitbully's scores, checked by exhaustive search (the file
    read as it is, not through pons.load, which files positions by the formula under test)."""
    data = json.loads(pons.PATH.read_text())
    shipped = CONNECT4.parse({"positions": data["groups"]["end-easy"]})
    kinds = _check_late_groups({"end-easy": [p for p in shipped if p.ply >= 32][:60]}, 32)
    assert kinds == {(r, parity) for r in (1, 0, -1) for parity in (0, 1)}  # all six covered


def test_random_late_positions_match_the_brute_force_count():
    """Random positions ten or eleven moves from full: the Pons score from its definition
    (22 - the winner's stones at the win) gives the brute-force moves left."""
    rng, cache, checked = random.Random(0), {}, 0
    while checked < 40:
        moves, heights = [], [0] * COLS
        while len(moves) < 31 + checked % 2:  # both movers
            col = rng.choice([c for c in range(COLS) if heights[c] < ROWS])
            moves.append(col)
            heights[col] += 1
        mine, mask = _bitboards(tuple(moves))
        if any(_aligned(s) for s in (mine, mine ^ mask)):
            continue
        result, plies = _perfect_line(mine, mask, cache)
        ply = len(moves)
        end = ply + plies  # stones on the board at the end
        winner_stones = (end + 1) // 2 if end % 2 else end // 2  # odd: the first player won
        score = result * (22 - winner_stones) if result else 0
        assert pons.remaining_moves(ply, score) == plies, (moves, score, plies)
        checked += 1


def test_stage_and_difficulty_bounds():
    assert [pons.stage(p) for p in (0, 14, 15, 28, 29, 41)] == [
        "begin",
        "begin",
        "middle",
        "middle",
        "end",
        "end",
    ]
    assert [pons.difficulty(r) for r in (1, 13, 14, 28, 29, 42)] == [
        "easy",
        "easy",
        "medium",
        "medium",
        "hard",
        "hard",
    ]
    assert pons.group(0, 1) == "begin-hard" and pons.group(20, 21 - 10) == "middle-easy"
    with pytest.raises(ValueError, match="moves played 42"):
        pons.stage(42)


# ----------------------------------------------------------------------------- scoring


def test_wilson_interval():
    lo, hi = pons.wilson(0, 10)
    assert lo == 0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = pons.wilson(5, 10)
    assert (lo, hi) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    lo, hi = pons.wilson(1000, 1000)
    assert hi == 1 and lo == pytest.approx(0.99617, abs=1e-4)


def test_score_mistakes_on_hand_labelled_positions():
    win = Position((), (-2, -1, 0, 1, 0, -1, -2), "")  # only column 3 keeps the win
    draw = Position((3,), (-1, 0, 0, 0, 0, 0, -1), "")  # 0 and 6 lose the draw
    lost = Position((0, 0), (-5, -3, -3, None, -4, -3, -7), "")  # no mistake possible
    rates = pons.score_mistakes({"a": [win, draw], "b": [lost]}, [2, 0, 6])
    assert rates.counts == {"a": (2, 2), "b": (1, 0)}
    rates = pons.score_mistakes({"a": [win, draw], "b": [lost]}, [3, 1, 6])
    assert rates.counts == {"a": (2, 0), "b": (1, 0)}
    assert rates.to_dict()["b"] == {
        "positions": 1,
        "mistakes": 0,
        "mistake_rate": 0.0,
        "ci95": list(pons.wilson(0, 1)),
    }
    assert "a" in str(rates) and "0.0%" in str(rates)
    with pytest.raises(ValueError, match="one move per position"):
        pons.score_mistakes({"a": [win]}, [3, 3])


def test_a_perfect_agent_makes_no_mistake_and_a_worst_agent_every_one(groups):
    game = games.make("connect4")

    def worst(p):
        return min((c for c, s in enumerate(p.scores) if s is not None), key=lambda c: p.scores[c])

    def can_err(p):
        return not p.keeps_result(worst(p))

    # A few positions a group where a mistake exists (a lost position has none).
    some = {name: tuple([p for p in ps if can_err(p)][:8]) for name, ps in groups.items()}
    assert all(len(ps) == 8 for ps in some.values())
    flat = [p for ps in some.values() for p in ps]
    key = jax.random.key(0)
    perfect = pons.mistake_rates(
        game, lookup_agent(game, flat, lambda p: p.best_moves[0]), key, some
    )
    assert perfect.counts == {name: (8, 0) for name in pons.GROUPS}
    bad = pons.mistake_rates(game, lookup_agent(game, flat, worst), key, some, batch_size=5)
    assert bad.counts == {name: (8, 8) for name in pons.GROUPS}
    assert bad.interval("begin-hard")[0] > 0.6


# ----------------------------------------------------------------------------- shipped set


def test_shipped_groups(groups):
    data = json.loads(pons.PATH.read_text())
    assert pons.PATH.stat().st_size < 1_000_000
    assert list(groups) == list(pons.GROUPS)
    assert data["counts"] == {name: len(ps) for name, ps in groups.items()}
    assert all(len(ps) >= 200 for ps in groups.values())
    assert "--seed" in data["generator"] and isinstance(data["seed"], int)
    every = [p.moves for ps in groups.values() for p in ps]
    assert len(set(every)) == len(every)  # no repeats
    for name, positions in groups.items():
        stage, difficulty = name.split("-")
        for p in positions:
            best = max(s for s in p.scores if s is not None)
            assert pons.stage(p.ply) == stage
            assert pons.difficulty(pons.remaining_moves(p.ply, best)) == difficulty
    # Hard begins span their plies; easy ones are wins and losses (no draw ends that soon).
    assert {p.ply for p in groups["begin-hard"]} == set(range(14))  # 14: at most 28 left
    assert {p.value for p in groups["begin-easy"]} == {-1, 1}


def test_the_script_writes_groups_as_the_shipped_ones(tmp_path, capsys):
    """scripts/make_connect4_pons.py at 5 positions a group, from the shipped file's seed: the
    begin groups are the shipped ones' first five (the stage draws the same random stream),
    every group is filed by its stage and difficulty (pons.load refuses a misfiled position)
    without repeats, and the late ones score as the brute force says."""
    out = tmp_path / "pons.json"
    load_script("make_connect4_pons").main(["--count", "5", "--out", str(out)])
    assert "wrote {'end-easy': 5," in capsys.readouterr().out
    made, shipped = pons.load(out), pons.load()
    assert {name: len(ps) for name, ps in made.items()} == dict.fromkeys(pons.GROUPS, 5)
    for name in ("begin-easy", "begin-medium", "begin-hard"):
        assert made[name] == shipped[name][:5], name
    every = [p.moves for ps in made.values() for p in ps]
    assert len(set(every)) == len(every)
    assert len(_check_late_groups(made, 29)) > 1
    data = json.loads(out.read_text())
    assert data["generator"] == "scripts/make_connect4_pons.py --count 5 --seed 0"


def test_a_misfiled_position_is_refused(tmp_path):
    data = json.loads(pons.PATH.read_text())
    data["groups"]["begin-hard"].append(data["groups"]["end-easy"][0])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="is not begin-hard"):
        pons.load(bad)
    data["groups"]["begin-hard"] = []
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=f"{bad}: group begin-hard is empty"):
        pons.load(bad)
    del data["groups"]["end-easy"]
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match='expected an object with "groups"'):
        pons.load(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match=f"{bad}: not a readable JSON position file"):
        pons.load(bad)
    with pytest.raises(FileNotFoundError, match=f"run {pons.SCRIPT}"):
        pons.load(tmp_path / "nowhere.json")
