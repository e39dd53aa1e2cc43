"""Exact Dots and Boxes values by retrograde analysis over every set of drawn lines.

What the rest of a game is worth depends only on which lines are drawn: the open boxes, the
lines that can still close them and the moves left all follow from it, and the boxes already
won are settled. So one table over the 2^L line sets (L lines, numbered by action as in
games/dots_and_boxes.py, a set of drawn lines being the bits of their actions) holds

    v(S) = the boxes the player to move wins from here on minus the opponent's, both playing
           to maximise their own final margin,

with v(all lines) = 0 and, over the undrawn lines l, closing c(S, l) boxes,

    v(S) = max_l  c(S, l) + v(S | l)   if c(S, l) > 0   (the mover moves again)
                  -v(S | l)            otherwise         (the opponent moves next).

`solve` fills the table one popcount layer at a time, from the full set down, each layer as a
few numpy operations per line (int8 values: at most 9 boxes on 3x3). 3x3 (24 lines, 16.8M
sets, 16 MiB) takes under 10 seconds on one core.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

MAX_LINES = 24  # 2^24 int8 values (16 MiB): 3x3 boxes, 2x4, 1x7 and anything smaller


def num_lines(rows: int, cols: int) -> int:
    """Lines of a rows x cols board of boxes."""
    return (rows + 1) * cols + rows * (cols + 1)


def closing_masks(rows: int, cols: int) -> np.ndarray:
    """int64 [L, 2]: for each line, the other three sides of each box beside it, as line bits.

    Drawing open line l into S closes box k exactly when `S & m == m` for m = [l, k]. A line
    with one box has its own bit as the second mask, which an S without l never contains.
    """
    num_h = (rows + 1) * cols
    masks = np.zeros((num_lines(rows, cols), 2), np.int64)
    count = np.zeros(len(masks), np.int64)
    for r in range(rows):
        for c in range(cols):
            sides = [
                r * cols + c,
                (r + 1) * cols + c,
                num_h + r * (cols + 1) + c,
                num_h + r * (cols + 1) + c + 1,
            ]
            for line in sides:
                masks[line, count[line]] = sum(1 << s for s in sides if s != line)
                count[line] += 1
    lonely = count == 1
    masks[lonely, 1] = 1 << np.flatnonzero(lonely)
    return masks


def solve(rows: int, cols: int) -> np.ndarray:
    """int8 [2^L]: v(S) for every set S of drawn lines (see the module docstring)."""
    n = num_lines(rows, cols)
    if n > MAX_LINES:
        raise ValueError(
            f"{rows}x{cols} boxes have {n} lines; the solver handles at most {MAX_LINES}"
        )
    masks = closing_masks(rows, cols).astype(np.int32)
    values = np.zeros(1 << n, np.int8)
    sets = np.arange(1 << n, dtype=np.int32)
    popcount = np.bitwise_count(sets).astype(np.int8)
    for drawn in range(n - 1, -1, -1):
        layer = sets[popcount == drawn]
        best = np.full(len(layer), -128, np.int8)
        for line in range(n):
            bit = np.int32(1) << line
            open_ = (layer & bit) == 0
            s = layer[open_]
            after = values[s | bit]
            closed = ((s & masks[line, 0]) == masks[line, 0]).astype(np.int8) + (
                (s & masks[line, 1]) == masks[line, 1]
            )
            best[open_] = np.maximum(best[open_], np.where(closed > 0, closed + after, -after))
        values[layer] = best
    return values


@dataclasses.dataclass(frozen=True, eq=False)
class Solution:
    """A solved board: `values[S]` is v(S) for every line set S."""

    rows: int
    cols: int
    values: np.ndarray  # int8 [2^L]

    @classmethod
    def of(cls, rows: int, cols: int) -> Solution:
        return cls(rows, cols, solve(rows, cols))

    @functools.cached_property
    def masks(self) -> np.ndarray:
        return closing_masks(self.rows, self.cols)

    def closes(self, drawn: int, line: int) -> int:
        """Boxes that drawing open `line` into the set `drawn` closes (0, 1 or 2)."""
        return sum(drawn & int(m) == int(m) for m in self.masks[line])

    def move_values(self, drawn: int) -> list[int | None]:
        """Per line, the mover's margin from here on after drawing it and perfect play by
        both; None for drawn lines. The best of them is `values[drawn]`."""
        out: list[int | None] = []
        for line in range(len(self.masks)):
            bit = 1 << line
            if drawn & bit:
                out.append(None)
                continue
            closed = self.closes(drawn, line)
            after = int(self.values[drawn | bit])
            out.append(closed + after if closed else -after)
        return out
