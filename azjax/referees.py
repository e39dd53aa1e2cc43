"""Referees: an agent's moves scored against exact labels, and the solvers behind them.

Each set in `REFEREES` ships positions from every phase of play, each with the exact score of
every legal move under perfect play after it: higher is better, and its sign is the result for
the mover (positive wins, 0 draws, negative loses).

- Connect4 (data/connect4_positions.json, from scripts/make_connect4_positions.py and the
  bitbully solver) and Tic-Tac-Toe (all 4,520 non-terminal positions, from
  scripts/make_tictactoe_positions.py): a win scores more, a loss less, the sooner it comes.
- Dots and Boxes 3x3 (from scripts/make_dots_and_boxes_positions.py and its retrograde
  solver): the mover's final box margin, boxes already won included.

An agent is measured by best-move accuracy (its move has the top score) and result accuracy
(its move keeps the result; in a lost position every move does), overall, by phase and by
result. `result_blind` is the best-move accuracy of an agent that keeps every result but is
blind to the scores beyond their sign, as a net trained on bare results is. Connect4 also has
Pascal Pons' six test groups (data/connect4_pons.json, from scripts/make_connect4_pons.py),
scored by mistake rate. Scoring reads the labels from the shipped files: it needs no solver.
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
import jax.numpy as jnp
import numpy as np

import games
from azjax.agents import Agent
from azjax.arena import Z95
from games.core import Game, State

DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"
RESULTS = {1: "won", 0: "drawn", -1: "lost"}  # a position's value, for the player to move


@dataclasses.dataclass(frozen=True)
class Position:
    """A position as its move list, with a score per action (None: illegal) and its phase."""

    moves: tuple[int, ...]
    scores: tuple[int | None, ...]
    phase: str

    @property
    def ply(self) -> int:
        return len(self.moves)

    @property
    def best(self) -> int:
        return max(s for s in self.scores if s is not None)

    @property
    def value(self) -> int:
        """The game-theoretic result for the player to move: 1 win, 0 draw, -1 loss."""
        return int(np.sign(self.best))

    @property
    def result_blind(self) -> float:
        """The chance that a uniform pick among the moves keeping the result is a best move."""
        keep = [s for s in self.scores if s is not None and int(np.sign(s)) == self.value]
        return keep.count(max(keep)) / len(keep)

    @property
    def best_moves(self) -> tuple[int, ...]:
        return tuple(c for c, s in enumerate(self.scores) if s == self.best)

    def keeps_result(self, move: int) -> bool:
        score = self.scores[move] if 0 <= move < len(self.scores) else None
        return score is not None and int(np.sign(score)) == self.value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read(file: pathlib.Path, label: str, script: str, parse: Callable[[Any], Any]) -> Any:
    """`parse` of a JSON file's content; errors name the file (and the script making it)."""
    if not file.is_file():
        raise FileNotFoundError(f"no {label} position set at {file}; run {script}")
    try:
        return parse(json.loads(file.read_text()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file}: not a readable JSON position file ({err})") from None
    except ValueError as err:
        raise ValueError(f"{file}: {err}") from None


@dataclasses.dataclass(frozen=True)
class RefereeSet:
    """A shipped position set (azjax/data/GAME_positions.json, which scripts/make_GAME_positions.py
    writes): the game (and size) it labels and its phases."""

    label: str  # for people, e.g. "Dots and Boxes 3x3"
    game_name: str
    game_kwargs: tuple[tuple[str, Any], ...]
    phases: tuple[int, int]  # the first plies of the middle game and of the late one
    groups_file: str | None = None  # under azjax/data: Pons' test groups, if any

    @property
    def game(self) -> Game:
        return games.make(self.game_name, **dict(self.game_kwargs))

    @property
    def path(self) -> pathlib.Path:
        return DATA_DIR / f"{self.game_name}_positions.json"

    def phase(self, ply: int) -> str:
        return ("opening", "middle", "late")[sum(ply >= first for first in self.phases)]

    def parse(self, data: Any) -> list[Position]:
        """Positions from the file's JSON ({"positions": [{"moves", "scores"}, ...]}, moves a
        list of actions or a string of digits); ValueError naming the first bad entry."""
        if not isinstance(data, dict) or not isinstance(data.get("positions"), list):
            got = f"keys {sorted(data)}" if isinstance(data, dict) else type(data).__name__
            raise ValueError(f'expected an object with a "positions" list, got {got}')
        out, num_actions = [], self.game.num_actions
        for i, entry in enumerate(data["positions"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("scores"), list):
                raise ValueError(f'position {i}: expected {{"moves": ..., "scores": [...]}}')
            moves = entry.get("moves")
            if isinstance(moves, str) and all(c in "0123456789" for c in moves):
                moves = [int(c) for c in moves]
            if not isinstance(moves, list) or not all(_is_int(m) for m in moves):
                raise ValueError(
                    f"position {i}: moves {moves!r} are not a list of actions or a string of digits"
                )
            for ply, move in enumerate(moves):
                if not 0 <= move < num_actions:
                    raise ValueError(
                        f"position {i}: move {move} at ply {ply} is illegal "
                        f"(actions are 0 to {num_actions - 1})"
                    )
            if not all(s is None or _is_int(s) for s in entry["scores"]):
                raise ValueError(f"position {i}: scores must be integers or null")
            scores = tuple(entry["scores"])
            if len(scores) != num_actions or all(s is None for s in scores):
                raise ValueError(f"position {i} ({entry['moves']!r}) has bad scores {scores}")
            out.append(Position(tuple(moves), scores, self.phase(len(moves))))
        return out

    def load(self, path: str | None = None) -> tuple[Position, ...]:
        """The labelled positions (the shipped set by default)."""
        return _load(self, path)

    def write(self, data: dict[str, Any], path: str | pathlib.Path | None = None) -> None:
        """Write a position set (its header fields and `positions`), one position per line so
        that regenerated files diff cleanly (the shipped file by default)."""
        file = pathlib.Path(path) if path is not None else self.path
        file.parent.mkdir(parents=True, exist_ok=True)
        head = {k: v for k, v in data.items() if k != "positions"}
        body = ",\n".join(json.dumps(p, separators=(",", ":")) for p in data["positions"])
        file.write_text(json.dumps(head, indent=1)[:-2] + f',\n "positions": [\n{body}\n]}}\n')
        print(f"wrote {len(data['positions'])} positions to {file}")


@functools.cache
def _load(referee: RefereeSet, path: str | None) -> tuple[Position, ...]:
    def parse(data: Any) -> tuple[Position, ...]:
        positions = tuple(referee.parse(data))
        replay(referee.game, positions)
        return positions

    file = pathlib.Path(path) if path is not None else referee.path
    script = f"scripts/make_{referee.game_name}_positions.py"
    return _read(file, referee.label, script, parse)


CONNECT4 = RefereeSet("Connect4", "connect4", (), (12, 24), groups_file="connect4_pons.json")
DOTS_AND_BOXES = RefereeSet(
    "Dots and Boxes 3x3", "dots_and_boxes", (("cols", 3), ("rows", 3)), (8, 16)
)
TICTACTOE = RefereeSet("Tic-Tac-Toe", "tictactoe", (), (3, 6))
REFEREES = (CONNECT4, DOTS_AND_BOXES, TICTACTOE)


def referee_for(game: Game) -> RefereeSet:
    """The position set labelling `game` (its name and size); ValueError if there is none."""
    for referee in REFEREES:
        if referee.game is game:
            return referee
    *others, last = [r.label for r in REFEREES]
    raise ValueError(
        f"no perfect-play position set for this {game.name} game; "
        f"there are sets for {', '.join(others)} and {last}"
    )


Shares = dict[str, tuple[int, float, float]]  # name -> (positions, best move, result kept)


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """Shares of positions with a best move and with the result kept: overall, by phase and by
    the position's result; `result_blind` as in the module's docstring."""

    positions: int
    best_move: float
    keeps_result: float
    by_phase: Shares
    by_result: Shares  # won, drawn, lost
    result_blind: float

    def to_dict(self) -> dict:
        keys = ("positions", "best_move", "keeps_result")
        tables = {
            name: {k: dict(zip(keys, row, strict=True)) for k, row in getattr(self, name).items()}
            for name in ("by_phase", "by_result")
        }
        return {k: getattr(self, k) for k in (*keys, "result_blind")} | tables

    def __str__(self) -> str:
        lines = [
            f"{self.positions} positions: best move {self.best_move:.1%}, "
            f"result kept {self.keeps_result:.1%} "
            f"(keeping every result, blind to the scores: best move {self.result_blind:.1%})"
        ]
        for name, (n, b, k) in (self.by_phase | self.by_result).items():
            lines.append(f"  {name:8s} {n:4d} positions: best {b:.1%}, result kept {k:.1%}")
        return "\n".join(lines)


def score_moves(positions: Sequence[Position], moves: Sequence[int]) -> Accuracy:
    """Accuracy of one chosen move per position; phases in the order they first appear, then
    results from won to lost."""
    if len(positions) != len(moves) or not positions:
        raise ValueError(f"need one move per position, got {len(moves)} for {len(positions)}")
    pairs = list(zip(positions, map(int, moves), strict=True))
    best = np.array([m in p.best_moves for p, m in pairs])
    keeps = np.array([p.keeps_result(m) for p, m in pairs])

    def split(labels: list[str], order: Sequence[str]) -> Shares:
        labels = np.array(labels)
        return {
            name: (int(sel.sum()), float(best[sel].mean()), float(keeps[sel].mean()))
            for name in order
            if (sel := labels == name).any()
        }

    phases = [p.phase for p in positions]
    return Accuracy(
        positions=len(positions),
        best_move=float(best.mean()),
        keeps_result=float(keeps.mean()),
        by_phase=split(phases, list(dict.fromkeys(phases))),
        by_result=split([RESULTS[p.value] for p in positions], list(RESULTS.values())),
        result_blind=float(np.mean([p.result_blind for p in positions])),
    )


def replay(game: Game, positions: Sequence[Position]) -> State:
    """The positions as a batch of game states (leading dimension = len(positions)), refusing
    positions that are finished or whose labelled moves are not the legal moves there."""
    if any(len(p.scores) != game.num_actions for p in positions):
        raise ValueError(f"these positions are not labelled for {game.name}")
    padded = np.full((len(positions), game.max_game_length), -1, np.int32)
    for i, p in enumerate(positions):
        padded[i, : p.ply] = p.moves
    states, illegal = _replay_fn(game)(jnp.asarray(padded))
    for i, ply in enumerate(np.asarray(illegal)):
        if ply >= 0:
            raise ValueError(
                f"position {i}: move {positions[i].moves[ply]} at ply {ply} is illegal "
                f"in {game.name} (moves {list(positions[i].moves)})"
            )
    labelled = np.array([[s is not None for s in p.scores] for p in positions])
    bad = np.asarray(states.terminated) | (labelled != np.asarray(states.legal_action_mask)).any(1)
    if bad.any():
        moves = [positions[i].moves for i in np.flatnonzero(bad)[:3]]
        raise ValueError(f"positions finished or not labelled for {game.name}'s moves: {moves}")
    return states


@functools.cache
def _replay_fn(game: Game):
    def one(moves: jax.Array) -> tuple[State, jax.Array]:
        """The state after `moves` (-1: none), and the ply of the first illegal move (-1)."""

        def body(carry: tuple[State, jax.Array], ply_move: tuple[jax.Array, jax.Array]):
            state, illegal = carry
            ply, move = ply_move
            legal = state.legal_action_mask[jnp.maximum(move, 0)] & ~state.terminated
            illegal = jnp.where((move >= 0) & ~legal & (illegal < 0), ply, illegal)
            nxt = game.step(state, move)
            state = jax.tree.map(lambda n, s: jnp.where(move >= 0, n, s), nxt, state)
            return (state, illegal), None

        start = (game.init(jax.random.key(0)), jnp.int32(-1))
        return jax.lax.scan(body, start, (jnp.arange(moves.shape[0]), moves))[0]

    return jax.jit(jax.vmap(one))


@functools.cache
def _moves_fn(fn):
    return jax.jit(jax.vmap(fn, (None, 0, 0)))


class MovesInterrupted(KeyboardInterrupt):
    """`agent_moves` stopped (Ctrl-C) after some of its batches: `moves` are those of the first
    `len(moves)` positions, of the `planned` ones."""

    def __init__(self, moves: np.ndarray, planned: int):
        super().__init__(f"interrupted after {len(moves)} of {planned} positions")
        self.moves = moves
        self.planned = planned


def agent_moves(
    game: Game,
    agent: Agent,
    key: jax.Array,
    positions: Sequence[Position],
    batch_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> np.ndarray:
    """The move `agent` chooses in each of `positions`, `batch_size` at a time (default: all;
    the last batch padded, so one compilation serves all), each with its own key whatever the
    batches; `progress(n)` after each batch of n. A KeyboardInterrupt after the first batch
    becomes MovesInterrupted, with the finished moves."""
    count = len(positions)
    if count == 0:
        raise ValueError("no positions to score")
    size = count if batch_size is None else int(batch_size)
    if size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    states, keys = replay(game, positions), jax.random.split(key, count)
    moves_fn, moves = _moves_fn(agent.fn), []
    try:
        for start in range(0, count, size):
            rows = np.minimum(np.arange(start, start + size), count - 1)  # the last batch padded
            batch = jax.tree.map(lambda x, rows=rows: x[rows], (states, keys))
            moves.append(np.asarray(moves_fn(agent.params, *batch))[: count - start])
            if progress is not None:
                progress(len(moves[-1]))
    except KeyboardInterrupt:
        if not moves:
            raise
        raise MovesInterrupted(np.concatenate(moves), count) from None
    return np.concatenate(moves)


def accuracy(
    game: Game,
    agent: Agent,
    key: jax.Array,
    positions: Sequence[Position] | None = None,
    batch_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> Accuracy:
    """Perfect-play accuracy of `agent` on `positions` (default: the game's shipped set);
    batches and `progress` as in `agent_moves`."""
    positions = list(referee_for(game).load() if positions is None else positions)
    return score_moves(positions, agent_moves(game, agent, key, positions, batch_size, progress))


# Pons' groups: a Connect4 position's stage is its moves played (begin <= 14, middle 15-28, end
# > 28), its difficulty the moves left under perfect play (easy < 14, medium 14-28, hard > 28);
# six (stage, difficulty) groups are used. A move is a mistake when its exact result for the
# mover is worse than the position's.

CELLS = 42  # Connect4's 6x7 board
STAGES = (("begin", 0, 14), ("middle", 15, 28), ("end", 29, CELLS - 1))  # moves played
DIFFICULTIES = (("easy", 0, 13), ("medium", 14, 28), ("hard", 29, CELLS))  # moves left
GROUPS = ("end-easy", "middle-easy", "middle-medium", "begin-easy", "begin-medium", "begin-hard")
PONS_PATH = DATA_DIR / str(CONNECT4.groups_file)
PONS_SCRIPT = "scripts/make_connect4_pons.py"


def remaining_moves(ply: int, score: int) -> int:
    """Moves left until the game ends under perfect play, from the exact score after `ply` moves:
    22 - k for a win with the mover's k-th stone (k - ply // 2 more stones of the mover, one
    fewer of the opponent's), -(22 - k) for a loss to the opponent's k-th stone (k - (ply -
    ply // 2) more of each), 0 for a draw (the board fills)."""
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


def group(ply: int, score: int) -> str:
    """A position's group, '<stage>-<difficulty>', from its moves played and exact score."""
    stage = _band(STAGES, ply, "moves played")
    return f"{stage}-{_band(DIFFICULTIES, remaining_moves(ply, score), 'moves left')}"


@functools.cache
def load_groups(path: str | pathlib.Path | None = None) -> dict[str, tuple[Position, ...]]:
    """Pons' labelled positions per group (the shipped set by default); ValueError when a
    group is missing or a position does not belong to the group it is filed under."""

    def parse(data: Any) -> dict[str, tuple[Position, ...]]:
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, dict) or sorted(groups) != sorted(GROUPS):
            raise ValueError(f'expected an object with "groups" {", ".join(GROUPS)}')
        out = {}
        for name in GROUPS:
            positions = tuple(CONNECT4.parse({"positions": groups[name]}))
            if not positions:
                raise ValueError(f"group {name} is empty")
            for p in positions:
                if group(p.ply, p.best) != name:
                    raise ValueError(f"{''.join(map(str, p.moves))!r} is not {name}")
            out[name] = positions
        replay(CONNECT4.game, [p for ps in out.values() for p in ps])  # one compilation
        return out

    file = pathlib.Path(path) if path is not None else PONS_PATH
    return _read(file, "Pons", PONS_SCRIPT, parse)


def wilson(hits: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion hits / n (95% by default)."""
    if n <= 0:
        raise ValueError(f"need at least one trial, got {n}")
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclasses.dataclass(frozen=True)
class MistakeRates:
    """Per group: (positions, mistakes); rates and 95% Wilson intervals derive from them."""

    counts: dict[str, tuple[int, int]]

    def rate(self, name: str) -> float:
        n, mistakes = self.counts[name]
        return mistakes / n

    def to_dict(self) -> dict:
        return {
            name: {"positions": n, "mistakes": m, "mistake_rate": m / n, "ci95": [*wilson(m, n)]}
            for name, (n, m) in self.counts.items()
        }

    def __str__(self) -> str:
        lines = ["Pons mistake rates (95% Wilson interval):"]
        for name, (n, m) in self.counts.items():
            lo, hi = wilson(m, n)
            lines.append(f"  {name:13s} {n:4d} positions: {m / n:6.1%}  [{lo:.1%}, {hi:.1%}]")
        return "\n".join(lines)


def score_mistakes(groups: dict[str, Sequence[Position]], moves: Sequence[int]) -> MistakeRates:
    """Mistake rates of one chosen move per position, the positions taken group after group."""
    count = sum(len(ps) for ps in groups.values())
    if len(moves) != count:
        raise ValueError(f"need one move per position, got {len(moves)} for {count}")
    counts, start = {}, 0
    for name, positions in groups.items():
        chosen, start = moves[start : start + len(positions)], start + len(positions)
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
    `progress` as in `agent_moves`."""
    groups = load_groups() if groups is None else groups
    flat = [p for positions in groups.values() for p in positions]
    return score_mistakes(groups, agent_moves(game, agent, key, flat, batch_size, progress))
