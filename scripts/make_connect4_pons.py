"""Regenerate azjax/data/connect4_pons.json: Connect4 positions in Pascal Pons' six test groups.

For each stage (moves played: begin 0-14, middle 15-28, end 29-41) positions come from
uniformly random legal moves from the empty board, to a number of moves drawn uniformly in the
stage; finished positions and repeats are skipped. Every legal move of a position is scored by
bitbully (exact Connect4 solver with opening book; `pip install -e '.[solver]'`), the
position's best score gives its moves left under perfect play (azjax.pons.remaining_moves,
checked against bitbully's own conversion) and so its difficulty, and the position is kept
when its group is one of the six and still short of --count (otherwise it is dropped, so each
group holds random positions of that stage and difficulty).

    python scripts/make_connect4_pons.py --count 1000 --seed 0

A stage stops after --stage-seconds even with groups short; the file records each group's count.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
import time

from azjax.referees import GROUPS, STAGES, group, remaining_moves
from azjax.referees import PONS_PATH as PATH

COLS = 7


def _random_position(rng: random.Random, ply: int) -> list[int] | None:
    """`ply` uniformly random legal moves from the empty board; None if the game ended first."""
    import bitbully

    board = bitbully.Board()
    moves: list[int] = []
    for _ in range(ply):
        move = rng.choice(board.legal_moves())
        if board.play_on_copy(move).has_win():
            return None
        board.play(move)
        moves.append(move)
    return None if board.is_full() else moves


def generate(count: int, seed: int, stage_seconds: float) -> dict:
    import bitbully

    solver = bitbully.BitBully()
    rng = random.Random(seed)
    kept: dict[str, list[dict]] = {name: [] for name in GROUPS}
    seen: set[str] = set()
    tried: dict[str, int] = {}
    for stage, lo, hi in STAGES:
        wanted = [name for name in GROUPS if name.startswith(f"{stage}-")]
        start, tries = time.monotonic(), 0
        while any(len(kept[n]) < count for n in wanted):
            if time.monotonic() - start > stage_seconds:
                print(f"{stage}: out of time", file=sys.stderr, flush=True)
                break
            moves = _random_position(rng, rng.randint(lo, hi))
            text = "".join(map(str, moves or []))
            if moves is None or text in seen:
                continue
            seen.add(text)
            tries += 1
            board = bitbully.Board(moves)
            scores = solver.score_all_moves(board)
            best = max(scores.values())
            left = remaining_moves(len(moves), best)
            if left != bitbully.BitBully.score_to_moves_left(best, board):
                raise AssertionError(f"{text}: score {best} gives {left} moves left")
            name = group(len(moves), best)
            if name in wanted and len(kept[name]) < count:
                kept[name].append({"moves": text, "scores": [scores.get(c) for c in range(COLS)]})
                if len(kept[name]) % 100 == 0:
                    elapsed = time.monotonic() - start
                    print(
                        f"{name}: {len(kept[name])}/{count} ({tries} solved, {elapsed:.0f}s)",
                        file=sys.stderr,
                        flush=True,
                    )
        tried[stage] = tries
    return {
        "description": (
            "Connect4 (6x7) positions in Pascal Pons' test groups (stage = moves played: begin "
            "<= 14, middle 15-28, end > 28; difficulty = moves left under perfect play: easy "
            "< 14, medium 14-28, hard > 28), from uniformly random play, as move lists (columns "
            "0-6 from the left, first player first) with the exact score of every column from "
            "the view of the player to move: positive wins (22 - k: a win with the mover's k-th "
            "stone), 0 draws, negative loses; null for a full column."
        ),
        "generator": f"scripts/make_connect4_pons.py --count {count} --seed {seed}",
        "seed": seed,
        "solver": f"bitbully {bitbully.__version__}",
        "counts": {name: len(kept[name]) for name in GROUPS},
        "solved_per_stage": tried,
        "groups": kept,
    }


def write(data: dict, path: pathlib.Path) -> None:
    """One position per line, so that regenerated files diff cleanly."""
    head = {k: v for k, v in data.items() if k != "groups"}
    groups = []
    for name, positions in data["groups"].items():
        lines = ",\n".join(json.dumps(p, separators=(",", ":")) for p in positions)
        groups.append(f"  {json.dumps(name)}: [\n{lines}\n  ]")
    body = ",\n".join(groups)
    path.write_text(json.dumps(head, indent=1)[:-2] + f',\n "groups": {{\n{body}\n }}\n}}\n')
    print(f"wrote {data['counts']} to {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="positions per group")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stage-seconds", type=float, default=3600.0)
    parser.add_argument("--out", type=pathlib.Path, default=PATH)
    args = parser.parse_args(argv)
    try:
        import bitbully  # noqa: F401
    except ImportError:
        parser.error("bitbully is not installed; pip install -e '.[solver]'")
    write(generate(args.count, args.seed, args.stage_seconds), args.out)


if __name__ == "__main__":
    main()
