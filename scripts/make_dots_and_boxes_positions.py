"""Regenerate azjax/data/dots_and_boxes_positions.json: 3x3 Dots and Boxes positions labelled
by the exact retrograde solver (azjax.referees; under 10 seconds).

Positions come from games in which each move is, with probability --random-prob, a uniformly
random line and otherwise one of the solver's best lines. Target plies (lines drawn) are spread
evenly over 0 .. --max-ply; repeats and positions where every legal line has the same value
(nothing for best-move accuracy to tell apart) are skipped, and a ply with no new position left
passes on to the next. The set also holds the positions after each of the first four moves
of the sample game in E. Berlekamp, The Dots-and-Boxes Game (2000), p. 4, whose values D. Wilson
published (tests/test_referees.py checks the labels against them).

    python scripts/make_dots_and_boxes_positions.py --count 300 --seed 0

Each position is its move list (actions as in games/dots_and_boxes.py), its phase, and for
every line the mover's final box margin (boxes already won included) if that line is drawn and
both sides then play perfectly; null for a drawn line.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import time
from collections.abc import Sequence

from azjax.referees import DOTS_AND_BOXES
from azjax.referees import DotsAndBoxesSolution as Solution

TRIES_PER_PLY = 200
PUBLISHED_LINE = (7, 10, 6, 20)  # h 3 2, h 4 2, h 3 1, v 3 1


def _label(solution: Solution, moves: Sequence[int]) -> list[int | None]:
    """Each line's final margin for the mover after `moves` from the start (None: drawn)."""
    drawn, margin = 0, 0
    for move in moves:
        closed = solution.closes(drawn, move)
        margin = margin + closed if closed else -margin  # the opponent moves next: its view
        drawn |= 1 << move
    return [None if v is None else margin + v for v in solution.move_values(drawn)]


def _play_to(solution: Solution, rng: random.Random, ply: int, random_prob: float) -> list[int]:
    """`ply` moves from the empty board, each random or one of the solver's best."""
    drawn, moves = 0, []
    for _ in range(ply):
        values = solution.move_values(drawn)
        legal = [line for line, v in enumerate(values) if v is not None]
        if rng.random() < random_prob:
            move = rng.choice(legal)
        else:
            top = max(values[line] for line in legal)
            move = rng.choice([line for line in legal if values[line] == top])
        drawn |= 1 << move
        moves.append(move)
    return moves


def generate(count: int, seed: int, max_ply: int, random_prob: float) -> dict:
    start = time.perf_counter()
    solution = Solution.of(**dict(DOTS_AND_BOXES.game_kwargs))
    print(f"solved 3x3 in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    rng = random.Random(seed)
    positions, seen = [], set()
    for ply in range(1, len(PUBLISHED_LINE) + 1):
        moves = list(PUBLISHED_LINE[:ply])
        positions.append((moves, _label(solution, moves)))
        seen.add(tuple(moves))
    ply = 0
    for i in range(len(positions), count):
        ply = max(ply, round(i * max_ply / max(count - 1, 1)))
        tries = 0
        while True:
            tries += 1
            if tries % TRIES_PER_PLY == 0:
                ply += 1  # this ply has no new informative position left
            if ply > max_ply:
                raise ValueError(f"only {i} informative positions up to ply {max_ply}")
            moves = _play_to(solution, rng, ply, random_prob)
            if tuple(moves) in seen:
                continue
            scores = _label(solution, moves)
            if len({s for s in scores if s is not None}) > 1:
                break
        seen.add(tuple(moves))
        positions.append((moves, scores))
    positions.sort(key=lambda p: len(p[0]))
    return {
        "description": (
            "Dots and Boxes 3x3 positions as move lists (actions as in games/dots_and_boxes.py: "
            "12 horizontal lines row-major, then 12 vertical lines row-major; first player "
            "first) with, for every line, the mover's final box margin (boxes already won "
            "included) if that line is drawn and both sides then play perfectly; null for a "
            "drawn line. Phases by lines drawn: opening 0-7, middle 8-15, late 16-23."
        ),
        "generator": (
            f"scripts/make_dots_and_boxes_positions.py --count {count} --seed {seed} "
            f"--max-ply {max_ply} --random-prob {random_prob}"
        ),
        "solver": "azjax.dab_solver (retrograde analysis over all 2^24 line sets)",
        "start_value": int(solution.values[0]),
        "positions": [
            {"moves": moves, "phase": DOTS_AND_BOXES.phase(len(moves)), "scores": scores}
            for moves, scores in positions
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ply", type=int, default=22)
    parser.add_argument("--random-prob", type=float, default=0.5)
    parser.add_argument("--out", type=pathlib.Path, default=DOTS_AND_BOXES.path)
    args = parser.parse_args(argv)
    data = generate(args.count, args.seed, args.max_ply, args.random_prob)
    DOTS_AND_BOXES.write(data, args.out)


if __name__ == "__main__":
    main()
