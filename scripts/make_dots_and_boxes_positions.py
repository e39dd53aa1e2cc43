"""Regenerate azjax/data/dots_and_boxes_positions.json: 3x3 Dots and Boxes positions labelled
by the exact retrograde solver below (`Solution`; under 10 seconds).

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
import dataclasses
import pathlib
import random
import sys
import time
from collections.abc import Sequence

import numpy as np

from azjax.referees import DOTS_AND_BOXES

# Dots and Boxes: the rest of a game is worth what the drawn lines alone decide, so one table over
# the 2^L sets S of drawn lines (a set: the bits of its actions, games/dots_and_boxes.py) holds
# v(S), the mover's boxes from here on minus the opponent's under perfect play: v(every line) = 0
# and, over the open lines l closing c(S, l) boxes, v(S) = max_l c(S, l) + v(S | l) where
# c(S, l) > 0 (the mover moves again), else -v(S | l).

MAX_LINES = 24  # 2^24 int8 values (16 MiB): 3x3 boxes, 2x4, 1x7 and anything smaller


def closing_masks(rows: int, cols: int) -> np.ndarray:
    """int64 [L, 2]: per line, the other three sides of each box beside it, as line bits:
    drawing open line l into S closes box k exactly when `S & m == m` for m = [l, k] (a line
    beside one box has its own bit as the second mask, never in such an S)."""
    num_h = (rows + 1) * cols
    masks = np.zeros((num_h + rows * (cols + 1), 2), np.int64)
    count = np.zeros(len(masks), np.int64)
    for r in range(rows):
        for c in range(cols):
            left = num_h + r * (cols + 1) + c
            sides = [r * cols + c, (r + 1) * cols + c, left, left + 1]
            for line in sides:
                masks[line, count[line]] = sum(1 << s for s in sides if s != line)
                count[line] += 1
    lonely = count == 1
    masks[lonely, 1] = 1 << np.flatnonzero(lonely)
    return masks


@dataclasses.dataclass(frozen=True, eq=False)
class Solution:
    """A solved Dots and Boxes board: `values[S]` is v(S) for every set S of drawn lines."""

    rows: int
    cols: int
    values: np.ndarray  # int8 [2^L]
    masks: np.ndarray  # closing_masks(rows, cols)

    @classmethod
    def of(cls, rows: int, cols: int) -> Solution:
        """Retrograde analysis, one popcount layer at a time from the full set down, a few
        numpy operations per line (3x3: 24 lines, 16 MiB, under 10 seconds on one core)."""
        masks = closing_masks(rows, cols)
        n = len(masks)
        if n > MAX_LINES:
            raise ValueError(
                f"{rows}x{cols} boxes have {n} lines; the solver handles at most {MAX_LINES}"
            )
        values = np.zeros(1 << n, np.int8)
        sets = np.arange(1 << n, dtype=np.int32)
        popcount = np.bitwise_count(sets)
        for drawn in range(n - 1, -1, -1):
            layer = sets[popcount == drawn]
            best = np.full(len(layer), -128, np.int8)
            for line in range(n):
                bit = np.int32(1) << line
                open_ = (layer & bit) == 0
                s = layer[open_]
                after = values[s | bit]
                closed = sum(((s & m) == m).astype(np.int8) for m in masks[line].astype(np.int32))
                best[open_] = np.maximum(best[open_], np.where(closed > 0, closed + after, -after))
            values[layer] = best
        return cls(rows, cols, values, masks)

    def closes(self, drawn: int, line: int) -> int:
        """Boxes that drawing open `line` into the set `drawn` closes (0, 1 or 2)."""
        return sum(drawn & int(m) == int(m) for m in self.masks[line])

    def move_values(self, drawn: int) -> list[int | None]:
        """Per line, the mover's margin from here on after drawing it and perfect play by
        both; None for drawn lines. The best of them is `values[drawn]`."""
        out: list[int | None] = []
        for line in range(len(self.masks)):
            closed, after = self.closes(drawn, line), int(self.values[drawn | 1 << line])
            out.append(None if drawn >> line & 1 else closed + after if closed else -after)
        return out


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
        "solver": "this script's retrograde analysis over all 2^24 line sets",
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
