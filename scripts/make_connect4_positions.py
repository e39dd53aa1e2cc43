"""Regenerate azjax/data/connect4_positions.json: Connect4 positions labelled by an exact solver.

Positions come from games that open with a mix of random and solver-best moves (the solver's
opening book makes these instant) and continue with random moves that do not hand the
opponent an immediate win. Target plies are spread evenly over 0 .. --max-ply; finished
positions and repeats are skipped (a ply with no new position left passes on to the next).
Every legal move of every position is scored by bitbully (exact Connect4 solver with opening
book; `pip install -e '.[solver]'`).

    python scripts/make_connect4_positions.py --count 300 --seed 0

Scores follow the usual convention of exact Connect4 solvers, from the view of the player to
move: positive wins (larger = sooner), 0 draws, negative loses (more negative = sooner).
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys

from azjax.referees import CONNECT4

COLS = 7
BOOK_PLIES = 12  # plies covered by bitbully's opening book


def _play_to(solver, rng: random.Random, ply: int, random_prob: float):
    """A move list of `ply` moves from the empty board, or None when the game ended first.

    Within the opening book (the first BOOK_PLIES moves) a move is, with probability
    `random_prob`, uniformly random and otherwise one of the solver's best moves; later moves
    are random among those that do not let the opponent win at once (solving every middle-game
    position along the way would be slow), so late positions stay undecided more often.
    """
    import bitbully

    board = bitbully.Board()
    moves: list[int] = []
    for t in range(ply):
        legal = board.legal_moves()
        if t < BOOK_PLIES and rng.random() >= random_prob:
            scores = solver.score_all_moves(board)
            top = max(scores.values())
            move = rng.choice(sorted(c for c, s in scores.items() if s == top))
        else:
            safe = [c for c in legal if not board.play_on_copy(c).can_win_next()]
            move = rng.choice(safe or legal)
        won = board.play_on_copy(move).has_win()
        board.play(move)
        moves.append(move)
        if won or board.is_full():
            return None
    return moves


def generate(count: int, seed: int, max_ply: int, random_prob: float) -> dict:
    import bitbully

    solver = bitbully.BitBully()
    rng = random.Random(seed)
    positions, seen = [], set()
    for i in range(count):
        ply = round(i * max_ply / max(count - 1, 1))
        tries = 0
        while True:
            tries += 1
            if tries % 50 == 0:
                ply += 1  # this ply has no new position left (the first plies have few)
            moves = _play_to(solver, rng, ply, random_prob)
            if moves is None:
                continue
            text = "".join(map(str, moves))
            if text not in seen:
                break
        seen.add(text)
        scores = solver.score_all_moves(bitbully.Board(moves))
        positions.append({"moves": text, "scores": [scores.get(c) for c in range(COLS)]})
        if (i + 1) % 25 == 0:
            print(f"{i + 1}/{count} positions", file=sys.stderr, flush=True)
    return {
        "description": (
            "Connect4 (6x7) positions as move lists (columns 0-6 from the left, first player "
            "first) with the exact score of every column from the view of the player to move: "
            "positive wins (larger = sooner), 0 draws, negative loses; null for a full column."
        ),
        "generator": (
            f"scripts/make_connect4_positions.py --count {count} --seed {seed} "
            f"--max-ply {max_ply} --random-prob {random_prob}"
        ),
        "solver": f"bitbully {bitbully.__version__}",
        "positions": positions,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-ply", type=int, default=38)
    parser.add_argument("--random-prob", type=float, default=0.35)
    parser.add_argument("--out", type=pathlib.Path, default=CONNECT4.path)
    args = parser.parse_args(argv)
    try:
        import bitbully  # noqa: F401
    except ImportError:
        parser.error("bitbully is not installed; pip install -e '.[solver]'")
    data = generate(args.count, args.seed, args.max_ply, args.random_prob)
    CONNECT4.write(data, args.out)


if __name__ == "__main__":
    main()
