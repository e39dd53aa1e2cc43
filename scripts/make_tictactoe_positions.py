"""Regenerate azjax/data/tictactoe_positions.json: every reachable non-terminal Tic-Tac-Toe
position (4,520), each labelled by exhaustive minimax (under a second, plain Python).

    python scripts/make_tictactoe_positions.py

Each position is its move list (cells as in games/tictactoe.py, row*3 + col, X first), the
first found by a depth-first walk from the empty board in cell order, and for every empty cell
the mover's score if it plays there and both sides then play perfectly: 10 - n for a win with n
marks on the final board (a sooner win scores more), 0 for a draw, n - 10 for a loss (a later
loss scores more); null for a taken cell.
"""

from __future__ import annotations

import argparse
import functools
import pathlib

from azjax.referees import TICTACTOE

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
Board = tuple[int, ...]  # 9 cells: 1 the mover's mark, -1 the opponent's, 0 empty


def _mark(board: Board, cell: int) -> Board:
    """The board after the mover takes `cell`."""
    return tuple(1 if i == cell else c for i, c in enumerate(board))


def _won(board: Board) -> bool:
    """Whether the player who just moved (marked 1) has a line."""
    return any(all(board[c] == 1 for c in line) for line in LINES)


@functools.cache
def scores(board: Board) -> tuple[int | None, ...]:
    """Each cell's score for the mover of `board` (None: taken)."""
    marks = 10 - board.count(0)  # marks on the board once the mover has played
    out: list[int | None] = []
    for cell, mark in enumerate(board):
        if mark:
            out.append(None)
            continue
        after = _mark(board, cell)
        if _won(after):
            out.append(10 - marks)
        elif 0 not in after:
            out.append(0)
        else:
            out.append(-max(s for s in scores(_flip(after)) if s is not None))
    return tuple(out)


def _flip(board: Board) -> Board:
    """The board from the other player's view."""
    return tuple(-c for c in board)


def positions() -> list[tuple[str, tuple[int | None, ...]]]:
    """(move list as digits, scores) of every reachable non-terminal position, by ply."""
    found: dict[Board, str] = {}

    def walk(board: Board, moves: str) -> None:
        if board in found:
            return
        found[board] = moves
        for cell in range(9):
            if board[cell] == 0:
                after = _mark(board, cell)
                if not _won(after) and 0 in after:
                    walk(_flip(after), moves + str(cell))

    walk((0,) * 9, "")
    ordered = sorted(found.items(), key=lambda item: (len(item[1]), item[1]))
    return [(moves, scores(board)) for board, moves in ordered]


def generate() -> dict:
    labelled = positions()
    return {
        "description": (
            "Every reachable non-terminal Tic-Tac-Toe position, once, as a move list (cells "
            "row*3 + col, X first) with, for every empty cell, the mover's score if it plays "
            "there and both sides then play perfectly: 10 - n for a win with n marks on the "
            "final board, 0 for a draw, n - 10 for a loss; null for a taken cell. Phases by "
            "marks on the board: opening 0-2, middle 3-5, late 6-8."
        ),
        "generator": "scripts/make_tictactoe_positions.py",
        "solver": "exhaustive minimax (the script)",
        "start_value": max(s for s in labelled[0][1] if s is not None),
        "positions": [{"moves": moves, "scores": list(s)} for moves, s in labelled],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=TICTACTOE.path)
    args = parser.parse_args(argv)
    TICTACTOE.write(generate(), args.out)


if __name__ == "__main__":
    main()
