"""Matches between agents, played on the device: W/D/L with a 95% interval, gating, Elo.

`match(game, a, b, n, key)` plays `n` games at once (vmapped) in one jitted loop, compiled once
per (game, both move functions, games per batch, opening moves): parameters are traced, so every
checkpoint of a run shares it. A is player 0 in even games and player 1 in odd ones; games 2i
and 2i+1 share their random opening. Each loop iteration lets ONE agent move wherever it is to
move (A and B in turn, or the one that someone waits for), so an agent only sees positions
where it moves and a player moving twice in a row (Dots and Boxes) waits a turn. Deterministic
agents replay games (Othello has 12 two-ply openings): each game's moves are hashed, and
intervals and Elo errors count each distinct game once.

`fit`: maximum-likelihood Elo (Bradley-Terry, 400-point scale, a draw half a win and half a
loss, the anchor at 0), standard errors from the inverse Fisher information; `prior_draws`
virtual draws per pair that played keep the rating of a player who won every game finite.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from azjax.agents import Agent, MoveFn
from games.core import Game, random_legal_action, tree_where

Array = jax.Array
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
SCALE = 400.0 / math.log(10.0)  # Elo points per natural-log unit of strength


@dataclasses.dataclass(frozen=True)
class MatchResult:
    """Outcome of a match from agent A's view; `first`/`second`: (W, D, L) as player 0 / 1."""

    wins: int
    draws: int
    losses: int
    first: tuple[int, int, int]
    second: tuple[int, int, int]
    name_a: str = "a"
    name_b: str = "b"
    distinct: int | None = None  # games with distinct moves (and colours); None: not known

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """A's mean score, a win counting 1 and a draw 1/2."""
        return (self.wins + 0.5 * self.draws) / max(self.games, 1)

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% interval of `score` within [0, 1]: the normal approximation over per-game
        scores (1, 1/2, 0) with Agresti and Coull's z²/2 pseudo-wins and pseudo-losses (games
        that all end alike are no certainty); a repeated game counts once (`distinct`)."""
        n = self.games
        if n == 0:
            return 0.0, 1.0
        samples = n if self.distinct is None else min(self.distinct, n)
        pseudo = Z95**2 / 2
        total = samples + 2 * pseudo
        wins = self.wins * samples / n + pseudo
        draws = self.draws * samples / n
        mean = (wins + draws / 2) / total
        variance = (wins + draws / 4) / total - mean**2
        half = Z95 * math.sqrt(max(variance, 0.0) / total)
        return max(0.0, mean - half), min(1.0, mean + half)

    @property
    def elo_difference(self) -> float:
        """The Elo difference A - B implied by `score` (+-inf for a clean sweep)."""
        if self.score in (0.0, 1.0):
            return math.copysign(math.inf, self.score - 0.5)
        return -400.0 * math.log10(1.0 / self.score - 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.name_a,
            "b": self.name_b,
            "games": self.games,
            "distinct_games": self.distinct,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
            "score": self.score,
            "ci95": list(self.interval),
            "elo_difference": diff if math.isfinite(diff := self.elo_difference) else None,
            "as_first": dict(zip(("wins", "draws", "losses"), self.first, strict=True)),
            "as_second": dict(zip(("wins", "draws", "losses"), self.second, strict=True)),
        }


class MatchInterrupted(KeyboardInterrupt):
    """A match stopped (Ctrl-C) after some of its batches: `result` counts their games, of the
    `planned` ones. Callers that only stop on KeyboardInterrupt need not know it."""

    def __init__(self, result: MatchResult, planned: int):
        super().__init__(f"interrupted after {result.games} of {planned} games")
        self.result = result
        self.planned = planned


def gate(result: MatchResult, threshold: float) -> bool:
    """True when the challenger (agent A) scored at least `threshold` against the best."""
    return result.score >= threshold


@functools.cache
def _play_fn(game: Game, fn_a: MoveFn, fn_b: MoveFn, num_games: int, opening_moves: int):
    """A jitted `play(params_a, params_b, key) -> (A's returns [N], A's colour [N], done [N],
    moves hash [N] uint32)`."""
    colour_a = jnp.arange(num_games, dtype=jnp.int32) % 2
    pair = jnp.arange(num_games) // 2
    batch_step = jax.vmap(game.step)

    def hashed(moves: Array, actions: Array) -> Array:  # FNV-1a step per move
        return (moves ^ (actions.astype(jnp.uint32) + 1)) * jnp.uint32(16777619)

    def play(params_a: Any, params_b: Any, key: Array):
        init_key, open_key, play_key = jax.random.split(key, 3)
        pair_keys = jax.random.split(init_key, (num_games + 1) // 2)[pair]
        states = jax.vmap(game.init)(pair_keys)
        returns = jnp.zeros((num_games, 2), jnp.float32)
        moves = jnp.full(num_games, 2166136261, jnp.uint32)

        def opening(carry, t):
            states, returns, moves = carry
            keys = jax.random.split(jax.random.fold_in(open_key, t), (num_games + 1) // 2)[pair]
            actions = jax.vmap(random_legal_action)(keys, states.legal_action_mask)
            states = batch_step(states, actions)
            return (states, returns + states.rewards, hashed(moves, actions)), None

        carry = (states, returns, moves)
        (states, returns, moves), _ = jax.lax.scan(opening, carry, jnp.arange(opening_moves))

        def body(carry):
            t, states, returns, moves = carry
            live = ~states.terminated
            a_to_move = states.current_player == colour_a
            wants_a, wants_b = live & a_to_move, live & ~a_to_move
            use_a = jnp.where(t % 2 == 0, wants_a.any(), ~wants_b.any())
            keys = jax.random.split(jax.random.fold_in(play_key, t), num_games)
            actions = jax.lax.cond(
                use_a,
                lambda: jax.vmap(fn_a, (None, 0, 0))(params_a, states, keys),
                lambda: jax.vmap(fn_b, (None, 0, 0))(params_b, states, keys),
            )
            moving = jnp.where(use_a, wants_a, wants_b)
            stepped = batch_step(states, actions)
            states = jax.vmap(tree_where)(moving, stepped, states)
            returns = returns + jnp.where(moving[:, None], stepped.rewards, 0.0)
            moves = jnp.where(moving, hashed(moves, actions), moves)
            return t + 1, states, returns, moves

        def cond(carry):
            t, states, _, _ = carry
            return (t < 2 * game.max_game_length + 2) & ~states.terminated.all()

        carry = (jnp.int32(0), states, returns, moves)
        _, states, returns, moves = jax.lax.while_loop(cond, body, carry)
        returns_a = returns[jnp.arange(num_games), colour_a]
        return returns_a, colour_a, states.terminated, moves

    return jax.jit(play)


def match(
    game: Game,
    agent_a: Agent,
    agent_b: Agent,
    num_games: int,
    key: Array,
    opening_moves: int = 0,
    batch_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> MatchResult:
    """Play `num_games` games between A and B (colours alternated), counted from A's view,
    `batch_size` at a time (default: all at once), `progress(n)` after each batch of n games,
    each pair of games from the same `opening_moves` random plies; a Ctrl-C after a batch
    raises `MatchInterrupted` with the finished batches' result."""
    if num_games < 1:
        raise ValueError(f"num_games must be >= 1, got {num_games}")
    if opening_moves < 0:
        raise ValueError(f"opening_moves must be >= 0, got {opening_moves}")
    batch = num_games if batch_size is None else min(int(batch_size), num_games)
    if batch < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    batch += batch % 2  # whole pairs of games
    play = _play_fn(game, agent_a.fn, agent_b.fn, batch, opening_moves)
    returns, colours, seen, done = [], [], set(), 0

    def result() -> MatchResult:
        r, c = np.concatenate(returns), np.concatenate(colours)
        first, second, overall = (
            (int((r[m] > 0).sum()), int((r[m] == 0).sum()), int((r[m] < 0).sum()))
            for m in (c == 0, c == 1, c >= 0)
        )
        return MatchResult(*overall, first, second, agent_a.name, agent_b.name, len(seen))

    try:
        for index in range(math.ceil(num_games / batch)):
            r, c, finished, moves = jax.device_get(
                play(agent_a.params, agent_b.params, jax.random.fold_in(key, index))
            )
            if not finished.all():
                raise RuntimeError(
                    f"{game.name}: a game outlasted {2 * game.max_game_length + 2} turns; "
                    "max_game_length is too small"
                )
            take = min(batch, num_games - done)
            returns.append(r[:take])
            colours.append(c[:take])
            seen.update(zip(c[:take].tolist(), moves[:take].tolist(), strict=True))
            done += take
            if progress is not None:
                progress(take)
    except KeyboardInterrupt:
        if not done:
            raise
        raise MatchInterrupted(result(), num_games) from None
    return result()


@dataclasses.dataclass(frozen=True)
class Record:
    """Results between two players from `a`'s view (a batch of games)."""

    a: str
    b: str
    wins: int
    draws: int
    losses: int
    distinct: int | None = None  # distinct games among them (repeats add no evidence)


@dataclasses.dataclass(frozen=True)
class Ratings:
    """Fitted Elo ratings and their standard errors, by player name."""

    ratings: dict[str, float]
    stderr: dict[str, float]
    anchor: str

    def table(self) -> list[tuple[str, float, float]]:
        """(name, rating, stderr), strongest first."""
        rows = [(n, r, self.stderr[n]) for n, r in self.ratings.items()]
        return sorted(rows, key=lambda row: -row[1])


def _closure(edges: np.ndarray) -> np.ndarray:
    """Which node reaches which along `edges` (bool [n, n]), by repeated squaring."""
    reach = edges | np.eye(len(edges), dtype=bool)
    for _ in range(len(edges).bit_length()):
        reach = reach @ reach
    return reach


def fit(
    records: Iterable[Record],
    players: Sequence[str] | None = None,
    anchor: str = "random",
    prior_draws: float = 0.0,
) -> Ratings:
    """Maximum-likelihood Elo ratings of `players` from the game `records`, `anchor` at 0;
    standard errors count each distinct game once. ValueError when a player is not linked to
    the anchor by games, or when some group of players won every game against the rest (the
    maximum is at infinity) and `prior_draws` is 0."""
    records = list(records)
    if players is None:
        players = list(dict.fromkeys(name for g in records for name in (g.a, g.b)))
    players, n = list(players), len(players)
    if anchor not in players:
        raise ValueError(f"anchor {anchor!r} is not among the players {players}")
    if prior_draws < 0:
        raise ValueError(f"prior_draws must be >= 0, got {prior_draws}")
    # score[i, j]: points i took from j; count[i, j]: games between them; evidence: distinct ones
    score, count, evidence = np.zeros((3, n, n))
    for g in records:
        if unknown := [name for name in (g.a, g.b) if name not in players]:
            raise ValueError(f"player {unknown[0]!r} is not among the players {players}")
        if min(g.wins, g.draws, g.losses) < 0:
            raise ValueError(f"negative game count in {g}")
        i, j = players.index(g.a), players.index(g.b)
        if i == j:
            continue  # a game against oneself adds nothing
        total = g.wins + g.draws + g.losses
        distinct = total if g.distinct is None else min(g.distinct, total)
        score[i, j] += g.wins + 0.5 * g.draws
        score[j, i] += g.losses + 0.5 * g.draws
        count[[i, j], [j, i]] += total
        evidence[[i, j], [j, i]] += distinct
    played = count > 0
    score += 0.5 * prior_draws * played
    count += prior_draws * played
    evidence += prior_draws * played

    # Finite and unique iff every player is linked to the anchor by games and, following "took
    # points from" edges, reaches it and is reached from it (its strong component).
    a = players.index(anchor)
    if missing := [p for p, linked in zip(players, _closure(played)[a], strict=True) if not linked]:
        raise ValueError(
            f"no chain of games links {', '.join(missing)} to the anchor {anchor!r}; "
            "their ratings are undetermined"
        )
    beats = _closure(score > 0)
    if apart := [p for p, both in zip(players, beats[a] & beats[:, a], strict=True) if not both]:
        raise ValueError(
            f"{', '.join(apart)} won (or lost) every game against the other group of players, "
            "so the maximum-likelihood ratings are infinite; pass prior_draws > 0 (virtual "
            "draws) for finite estimates"
        )
    keep = [i for i in range(n) if i != a]

    def win_chance(strength: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(strength[None, :] - strength[:, None]))

    def log_likelihood(strength: np.ndarray) -> float:
        return float(-(score * np.logaddexp(0.0, strength[None, :] - strength[:, None])).sum())

    def information(strength: np.ndarray, games: np.ndarray) -> np.ndarray:
        p = win_chance(strength)
        info = -games * p * (1 - p)
        np.fill_diagonal(info, 0.0)
        np.fill_diagonal(info, -info.sum(1))
        return info[np.ix_(keep, keep)]

    # Newton's method on the log-strengths (rating / SCALE), the anchor held at 0, with step
    # halving so that every step raises the (concave) log-likelihood.
    strength, step = np.zeros(n), np.zeros(n)
    for _ in range(200):
        grad = (score - count * win_chance(strength)).sum(1)
        step[keep] = np.linalg.solve(information(strength, count), grad[keep])
        current, size = log_likelihood(strength), 1.0
        while log_likelihood(strength + size * step) < current - 1e-12 and size > 1e-8:
            size /= 2
        strength = strength + size * step
        if np.max(np.abs(size * step)) < 1e-10:
            break
    var = np.zeros(n)
    var[keep] = np.diag(np.linalg.inv(information(strength, evidence)))
    ratings = {name: float(SCALE * strength[i]) for i, name in enumerate(players)}
    stderr = {name: float(SCALE * math.sqrt(max(var[i], 0.0))) for i, name in enumerate(players)}
    return Ratings(ratings, stderr, anchor)


def ladder(
    game: Game,
    agents: Sequence[Agent],
    num_games: int,
    key: Array,
    pairs: Sequence[tuple[int, int]] | None = None,
    anchor: str = "random",
    prior_draws: float = 1.0,
    opening_moves: int = 0,
    batch_size: int | None = None,
    on_result: Callable[[MatchResult], Any] | None = None,
    progress: Callable[[int], Any] | None = None,
) -> tuple[Ratings, list[MatchResult]]:
    """A `match` of `num_games` for each pair of agents (indices; default: every pair; each its
    own key), `on_result` called after each, and Elo ratings `fit` to all their games."""
    names = [agent.name for agent in agents]
    if len(set(names)) != len(names):
        raise ValueError(f"agent names must be distinct, got {names}")
    if pairs is None:
        pairs = list(itertools.combinations(range(len(agents)), 2))
    results, settings = [], (opening_moves, batch_size, progress)
    for index, (i, j) in enumerate(pairs):
        pair_key = jax.random.fold_in(key, index)
        results.append(match(game, agents[i], agents[j], num_games, pair_key, *settings))
        if on_result is not None:
            on_result(results[-1])
    records = [Record(r.name_a, r.name_b, r.wins, r.draws, r.losses, r.distinct) for r in results]
    return fit(records, names, anchor, prior_draws), results
