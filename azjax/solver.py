"""Perfect-play accuracy: an agent's moves scored against exact solver labels.

Each game in `REFEREES` ships positions from every phase of play, each with the
exact score of every legal move from the view of the player to move, with perfect play after
it: a higher score is a better move, and its sign is the result (positive wins, 0 draws,
negative loses).

- Connect4: azjax/data/connect4_positions.json, from scripts/make_connect4_positions.py (the
  bitbully solver); a win scores more the sooner it comes, a loss less the sooner it comes.
- Dots and Boxes 3x3: azjax/data/dots_and_boxes_positions.json, from
  scripts/make_dots_and_boxes_positions.py (azjax.dab_solver); the score is the mover's final
  box margin, boxes already won included.
- Tic-Tac-Toe: azjax/data/tictactoe_positions.json, all 4,520 reachable non-terminal
  positions, from scripts/make_tictactoe_positions.py (exhaustive minimax); a win scores more
  the sooner it comes, a loss less the sooner it comes.

An agent is measured by

- best-move accuracy: the share of positions where its move has the highest score, and
- result accuracy: the share where its move keeps the game-theoretic result (a won position
  stays won, a drawn one drawn; in a lost position every legal move keeps the result).

Both are also given by phase and by result (won, drawn, lost positions), with the best-move
accuracy that an agent keeping every result but blind to the scores beyond their sign would
expect (`result_blind`): a net trained on bare results is such an agent, so this is the part of
best move that only targets aware of the scores can reach.

Connect4 also has Pascal Pons' six test groups of positions, scored by mistake rate
(azjax.pons).

Neither metric needs a solver: the labels are read from the shipped files.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import games
from azjax.agents import Agent
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
    def value(self) -> int:
        """The game-theoretic result for the player to move: 1 win, 0 draw, -1 loss."""
        return int(np.sign(max(s for s in self.scores if s is not None)))

    @property
    def result(self) -> str:
        return RESULTS[self.value]

    @property
    def result_blind(self) -> float:
        """The chance that a uniform pick among the moves keeping the result is a best move."""
        keep = [s for s in self.scores if s is not None and int(np.sign(s)) == self.value]
        return keep.count(max(keep)) / len(keep)

    @property
    def best_moves(self) -> tuple[int, ...]:
        top = max(s for s in self.scores if s is not None)
        return tuple(c for c, s in enumerate(self.scores) if s == top)

    def keeps_result(self, move: int) -> bool:
        score = self.scores[move] if 0 <= move < len(self.scores) else None
        return score is not None and int(np.sign(score)) == self.value


@dataclasses.dataclass(frozen=True)
class RefereeSet:
    """A shipped position set: the game (and size) it labels, its file and its phases."""

    label: str  # for people, e.g. "Dots and Boxes 3x3"
    game_name: str
    game_kwargs: tuple[tuple[str, Any], ...]
    file: str  # under azjax/data
    script: str  # regenerates the file
    phases: tuple[tuple[str, int, int], ...]  # (name, first ply, last ply)
    groups_file: str | None = None  # under azjax/data: Pons' test groups (azjax.pons), if any

    @property
    def game(self) -> Game:
        return games.make(self.game_name, **dict(self.game_kwargs))

    @property
    def path(self) -> pathlib.Path:
        return DATA_DIR / self.file

    def phase(self, ply: int) -> str:
        return next(name for name, lo, hi in self.phases if lo <= ply <= hi)

    def parse(self, data: Any) -> list[Position]:
        """Positions from the file's JSON layout ({"positions": [{"moves", "scores"}, ...]};
        moves as a list of actions, or as a string of one-digit actions); ValueError naming
        the first entry that does not fit it."""
        if not isinstance(data, dict) or not isinstance(data.get("positions"), list):
            got = f"keys {sorted(data)}" if isinstance(data, dict) else type(data).__name__
            raise ValueError(f'expected an object with a "positions" list, got {got}')
        out = []
        num_actions = self.game.num_actions
        for i, entry in enumerate(data["positions"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("scores"), list):
                raise ValueError(f'position {i}: expected {{"moves": ..., "scores": [...]}}')
            moves = _moves(entry.get("moves"), num_actions, i)
            if not all(s is None or _is_int(s) for s in entry["scores"]):
                raise ValueError(f"position {i}: scores must be integers or null")
            scores = tuple(None if s is None else int(s) for s in entry["scores"])
            if len(scores) != num_actions or all(s is None for s in scores):
                raise ValueError(f"position {i} ({entry['moves']!r}) has bad scores {scores}")
            out.append(Position(moves, scores, self.phase(len(moves))))
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
        lines = [json.dumps(p, separators=(",", ":")) for p in data["positions"]]
        body = ",\n".join(lines)
        file.write_text(json.dumps(head, indent=1)[:-2] + f',\n "positions": [\n{body}\n]}}\n')
        print(f"wrote {len(lines)} positions to {file}")


@functools.cache
def _load(referee: RefereeSet, path: str | None) -> tuple[Position, ...]:
    file = pathlib.Path(path) if path is not None else referee.path
    if not file.is_file():
        raise FileNotFoundError(f"no {referee.label} position set at {file}; run {referee.script}")
    try:
        positions = tuple(referee.parse(json.loads(file.read_text())))
        replay(referee.game, positions)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file}: not a readable JSON position file ({err})") from None
    except ValueError as err:
        raise ValueError(f"{file}: {err}") from None
    return positions


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _moves(moves: Any, num_actions: int, index: int) -> tuple[int, ...]:
    """A position's move list: a list of actions, or a string of one-digit actions."""
    if isinstance(moves, str) and all(c in "0123456789" for c in moves):
        moves = [int(c) for c in moves]
    if not isinstance(moves, list) or not all(_is_int(m) for m in moves):
        raise ValueError(
            f"position {index}: moves {moves!r} are not a list of actions or a string of digits"
        )
    for ply, move in enumerate(moves):
        if not 0 <= move < num_actions:
            raise ValueError(
                f"position {index}: move {move} at ply {ply} is illegal "
                f"(actions are 0 to {num_actions - 1})"
            )
    return tuple(moves)


CONNECT4 = RefereeSet(
    label="Connect4",
    game_name="connect4",
    game_kwargs=(),
    file="connect4_positions.json",
    script="scripts/make_connect4_positions.py",
    phases=(("opening", 0, 11), ("middle", 12, 23), ("late", 24, 42)),
    groups_file="connect4_pons.json",
)
DOTS_AND_BOXES = RefereeSet(
    label="Dots and Boxes 3x3",
    game_name="dots_and_boxes",
    game_kwargs=(("cols", 3), ("rows", 3)),
    file="dots_and_boxes_positions.json",
    script="scripts/make_dots_and_boxes_positions.py",
    phases=(("opening", 0, 7), ("middle", 8, 15), ("late", 16, 24)),
)
TICTACTOE = RefereeSet(
    label="Tic-Tac-Toe",
    game_name="tictactoe",
    game_kwargs=(),
    file="tictactoe_positions.json",
    script="scripts/make_tictactoe_positions.py",
    phases=(("opening", 0, 2), ("middle", 3, 5), ("late", 6, 8)),
)
REFEREES = (CONNECT4, DOTS_AND_BOXES, TICTACTOE)
DEFAULT_REFEREE = CONNECT4  # for a caller that names no game


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


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """Shares of positions with a best move and with the result kept: overall, by phase and by
    the position's result; `result_blind` is the best-move share expected of an agent that keeps
    every result and picks among those moves at random (see the module's docstring)."""

    positions: int
    best_move: float
    keeps_result: float
    by_phase: dict[str, tuple[int, float, float]]  # phase -> (positions, best, keeps)
    by_result: dict[str, tuple[int, float, float]]  # won/drawn/lost -> (positions, best, keeps)
    result_blind: float

    def to_dict(self) -> dict:
        def parts(table: dict[str, tuple[int, float, float]]) -> dict:
            return {
                name: {"positions": n, "best_move": b, "keeps_result": k}
                for name, (n, b, k) in table.items()
            }

        return {
            "positions": self.positions,
            "best_move": self.best_move,
            "keeps_result": self.keeps_result,
            "result_blind": self.result_blind,
            "by_phase": parts(self.by_phase),
            "by_result": parts(self.by_result),
        }

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
    best = np.array([int(m) in p.best_moves for p, m in zip(positions, moves, strict=True)])
    keeps = np.array([p.keeps_result(int(m)) for p, m in zip(positions, moves, strict=True)])

    def split(labels: Sequence[str]) -> dict[str, tuple[int, float, float]]:
        labels = np.array(labels)
        return {
            name: (int(sel.sum()), float(best[sel].mean()), float(keeps[sel].mean()))
            for name in dict.fromkeys(labels)
            for sel in [labels == name]
        }

    by_result = split([p.result for p in positions])
    return Accuracy(
        positions=len(positions),
        best_move=float(best.mean()),
        keeps_result=float(keeps.mean()),
        by_phase=split([p.phase for p in positions]),
        by_result={name: by_result[name] for name in RESULTS.values() if name in by_result},
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
    bad = np.asarray(states.terminated) | np.any(
        labelled != np.asarray(states.legal_action_mask), axis=1
    )
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

        plies = jnp.arange(moves.shape[0])
        start = (game.init(jax.random.key(0)), jnp.int32(-1))
        return jax.lax.scan(body, start, (plies, moves))[0]

    return jax.jit(jax.vmap(one))


@functools.cache
def _moves_fn(fn):
    return jax.jit(jax.vmap(fn, (None, 0, 0)))


def agent_moves(
    game: Game,
    agent: Agent,
    key: jax.Array,
    positions: Sequence[Position],
    batch_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> np.ndarray:
    """The move `agent` chooses in each of `positions`.

    The agent moves in `batch_size` positions at a time (default: all at once; the last batch
    is padded, so one compilation serves all), each with its own key whatever the batches;
    `progress(n)` is called after each batch with the number of positions it moved in. A
    KeyboardInterrupt after the first batch becomes MovesInterrupted, with the finished moves.
    """
    count = len(positions)
    if count == 0:
        raise ValueError("no positions to score")
    size = count if batch_size is None else int(batch_size)
    if size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    states = replay(game, positions)
    keys = jax.random.split(key, count)
    moves_fn = _moves_fn(agent.fn)
    moves = []
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


class MovesInterrupted(KeyboardInterrupt):
    """`agent_moves` stopped (Ctrl-C) after some of its batches: `moves` are those of the first
    `len(moves)` positions, of the `planned` ones."""

    def __init__(self, moves: np.ndarray, planned: int):
        super().__init__(f"interrupted after {len(moves)} of {planned} positions")
        self.moves = moves
        self.planned = planned


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
