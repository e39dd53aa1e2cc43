"""The Pons yardstick: Connect4 mistake rates by stage and difficulty, as Pascal Pons' test sets.

A position's *stage* is the number of moves played (begin <= 14, middle 15-28, end > 28) and its
*difficulty* the number of moves left until the game ends under perfect play (easy < 14,
medium 14-28, hard > 28). Six (stage, difficulty) groups are used: end-easy, middle-easy,
middle-medium, begin-easy, begin-medium and begin-hard.

An agent's move is a *mistake* when its exact outcome for the mover (win, draw, loss) is worse
than the position's best; an agent is measured by its mistake rate in each group, with a 95%
Wilson interval.

Moves left under perfect play come from the exact score (`remaining_moves`), in the convention
of exact Connect4 solvers: after `ply` moves, the mover's score is 22 - k when it wins with its
k-th stone, -(22 - k) when the opponent wins with its k-th stone, 0 for a draw.

The positions ship in azjax/data/connect4_pons.json (scripts/make_connect4_pons.py, the bitbully
solver): per group, move lists with the exact score of every legal move, as in
azjax/data/connect4_positions.json. Scoring an agent needs no solver.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from azjax.agents import Agent
from azjax.arena import Z95
from azjax.solver import CONNECT4, DATA_DIR, Position, agent_moves, replay
from games.core import Game

CELLS = 42  # Connect4's 6x7 board
STAGES = (("begin", 0, 14), ("middle", 15, 28), ("end", 29, CELLS - 1))  # moves played
DIFFICULTIES = (("easy", 0, 13), ("medium", 14, 28), ("hard", 29, CELLS))  # moves left
GROUPS = ("end-easy", "middle-easy", "middle-medium", "begin-easy", "begin-medium", "begin-hard")
PATH = DATA_DIR / str(CONNECT4.groups_file)
SCRIPT = "scripts/make_connect4_pons.py"


def remaining_moves(ply: int, score: int) -> int:
    """Moves left until the game ends under perfect play, from the exact score after `ply` moves.

    The mover has played ply // 2 stones and its opponent ply - ply // 2. A draw fills the board
    (42 - ply moves). A win with the mover's k-th stone (score 22 - k) ends after the mover plays
    k - ply // 2 more stones and the opponent one fewer: 2 * (22 - score - ply // 2) - 1 moves.
    A loss to the opponent's k-th stone (score -(22 - k)) ends after k - (ply - ply // 2) more
    stones of each: 2 * (22 + score - (ply - ply // 2)) moves.
    """
    if score == 0:
        return CELLS - ply
    if score > 0:
        return 2 * (22 - score - ply // 2) - 1
    return 2 * (22 + score - (ply - ply // 2))


def _band(table: tuple[tuple[str, int, int], ...], value: int, what: str) -> str:
    for name, lo, hi in table:
        if lo <= value <= hi:
            return name
    raise ValueError(f"{what} {value} is outside {table}")


def stage(ply: int) -> str:
    return _band(STAGES, ply, "moves played")


def difficulty(remaining: int) -> str:
    return _band(DIFFICULTIES, remaining, "moves left")


def group(ply: int, score: int) -> str:
    """A position's group, '<stage>-<difficulty>', from its moves played and exact score."""
    return f"{stage(ply)}-{difficulty(remaining_moves(ply, score))}"


def position_group(position: Position) -> str:
    return group(position.ply, max(s for s in position.scores if s is not None))


def wilson(hits: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion hits / n (95% by default)."""
    if n <= 0:
        raise ValueError(f"need at least one trial, got {n}")
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def load(path: str | pathlib.Path | None = None) -> dict[str, tuple[Position, ...]]:
    """The labelled positions per group (the shipped set by default); ValueError when a group
    is missing or a position does not belong to the group it is filed under."""
    return _load(str(path) if path is not None else None)


@functools.cache
def _load(path: str | None) -> dict[str, tuple[Position, ...]]:
    file = pathlib.Path(path) if path is not None else PATH
    if not file.is_file():
        raise FileNotFoundError(f"no Pons position set at {file}; run {SCRIPT}")
    try:
        data = json.loads(file.read_text())
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, dict) or sorted(groups) != sorted(GROUPS):
            raise ValueError(f'expected an object with "groups" {", ".join(GROUPS)}')
        out = {}
        for name in GROUPS:
            positions = tuple(CONNECT4.parse({"positions": groups[name]}))
            if not positions:
                raise ValueError(f"group {name} is empty")
            for p in positions:
                if position_group(p) != name:
                    raise ValueError(f"{''.join(map(str, p.moves))!r} is not {name}")
            replay(CONNECT4.game, positions)
            out[name] = positions
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file}: not a readable JSON position file ({err})") from None
    except ValueError as err:
        raise ValueError(f"{file}: {err}") from None
    return out


@dataclasses.dataclass(frozen=True)
class MistakeRates:
    """Per group: (positions, mistakes); rates and 95% Wilson intervals derive from them."""

    counts: dict[str, tuple[int, int]]

    def rate(self, name: str) -> float:
        n, mistakes = self.counts[name]
        return mistakes / n

    def interval(self, name: str) -> tuple[float, float]:
        n, mistakes = self.counts[name]
        return wilson(mistakes, n)

    def to_dict(self) -> dict:
        return {
            name: {
                "positions": n,
                "mistakes": m,
                "mistake_rate": self.rate(name),
                "ci95": list(self.interval(name)),
            }
            for name, (n, m) in self.counts.items()
        }

    def __str__(self) -> str:
        lines = ["Pons mistake rates (95% Wilson interval):"]
        for name, (n, m) in self.counts.items():
            lo, hi = self.interval(name)
            lines.append(f"  {name:13s} {n:4d} positions: {m / n:6.1%}  [{lo:.1%}, {hi:.1%}]")
        return "\n".join(lines)


def score_mistakes(groups: dict[str, Sequence[Position]], moves: Sequence[int]) -> MistakeRates:
    """Mistake rates of one chosen move per position, the positions taken group after group."""
    count = sum(len(ps) for ps in groups.values())
    if len(moves) != count:
        raise ValueError(f"need one move per position, got {len(moves)} for {count}")
    counts, start = {}, 0
    for name, positions in groups.items():
        chosen = moves[start : start + len(positions)]
        start += len(positions)
        mistakes = sum(not p.keeps_result(int(m)) for p, m in zip(positions, chosen, strict=True))
        counts[name] = (len(positions), mistakes)
    return MistakeRates(counts)


def mistake_rates(
    game: Game,
    agent: Agent,
    key: jax.Array,
    groups: dict[str, Sequence[Position]] | None = None,
    batch_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> MistakeRates:
    """The Pons mistake rates of `agent` (on the shipped groups by default); batches and
    `progress` as in azjax.solver.accuracy."""
    groups = load() if groups is None else groups
    flat = [p for positions in groups.values() for p in positions]
    moves = agent_moves(game, agent, key, flat, batch_size, progress)
    return score_mistakes(groups, np.asarray(moves))
