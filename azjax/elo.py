"""Elo ratings by maximum likelihood over every game played (Bradley-Terry, 400-point scale).

Player i beats player j with probability 1 / (1 + 10 ** ((R_j - R_i) / 400)); a draw counts
as half a win and half a loss. The ratings maximising the likelihood of all results are found
by Newton's method with the anchor player (by default "random") held at 0. Standard errors
come from the inverse Fisher information with the anchor held fixed, counting each distinct
game once (`Record.distinct`: deterministic players replay games).

A player who won (or lost) every game has an unbounded maximum-likelihood rating;
`prior_draws` adds that many virtual drawn games to every pair that played, which keeps every
rating finite at the cost of a slight pull towards the opponents' ratings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import numpy as np

SCALE = 400.0 / math.log(10.0)  # Elo points per natural-log unit of strength


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
    """Fitted ratings and their standard errors, by player name."""

    ratings: dict[str, float]
    stderr: dict[str, float]
    anchor: str

    def table(self) -> list[tuple[str, float, float]]:
        """(name, rating, stderr), strongest first."""
        rows = [(n, r, self.stderr[n]) for n, r in self.ratings.items()]
        return sorted(rows, key=lambda row: -row[1])


def _matrices(
    players: Sequence[str], records: Iterable[Record], prior_draws: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(score[i, j] = points i took from j, count[i, j] = games between i and j, evidence[i, j]
    = distinct games between them)."""
    index = {name: i for i, name in enumerate(players)}
    n = len(players)
    score = np.zeros((n, n))
    count = np.zeros((n, n))
    evidence = np.zeros((n, n))
    for g in records:
        for name in (g.a, g.b):
            if name not in index:
                raise ValueError(f"player {name!r} is not among the players {list(players)}")
        if min(g.wins, g.draws, g.losses) < 0:
            raise ValueError(f"negative game count in {g}")
        i, j = index[g.a], index[g.b]  # i == j: a game against oneself adds nothing
        total = g.wins + g.draws + g.losses
        score[i, j] += g.wins + 0.5 * g.draws
        score[j, i] += g.losses + 0.5 * g.draws
        count[i, j] += total
        count[j, i] += total
        distinct = total if g.distinct is None else min(g.distinct, total)
        evidence[i, j] += distinct
        evidence[j, i] += distinct
    played = count > 0
    score += 0.5 * prior_draws * played
    count += prior_draws * played
    evidence += prior_draws * played
    return score, count, evidence


def _reachable(edges: np.ndarray, start: int) -> set[int]:
    seen, todo = {start}, [start]
    while todo:
        i = todo.pop()
        for j in np.flatnonzero(edges[i]):
            if int(j) not in seen:
                seen.add(int(j))
                todo.append(int(j))
    return seen


def _check_identifiable(
    players: Sequence[str], score: np.ndarray, count: np.ndarray, anchor: int
) -> None:
    """The maximum-likelihood ratings are finite and unique iff every player is linked to the
    anchor by games and, following "took points from" edges, reaches it and is reached from it."""
    linked = _reachable(count > 0, anchor)
    missing = [players[i] for i in range(len(players)) if i not in linked]
    if missing:
        raise ValueError(
            f"no chain of games links {', '.join(missing)} to the anchor {players[anchor]!r}; "
            "their ratings are undetermined"
        )
    beats = score > 0
    both = _reachable(beats, anchor) & _reachable(beats.T, anchor)
    apart = [players[i] for i in range(len(players)) if i not in both]
    if apart:
        raise ValueError(
            f"{', '.join(apart)} won (or lost) every game against the other group of players, "
            "so the maximum-likelihood ratings are infinite; pass prior_draws > 0 (virtual "
            "draws) for finite estimates"
        )


def fit(
    records: Iterable[Record],
    players: Sequence[str] | None = None,
    anchor: str = "random",
    prior_draws: float = 0.0,
    tol: float = 1e-10,
    max_iter: int = 200,
) -> Ratings:
    """Maximum-likelihood Elo ratings of `players` from the game `records`, with `anchor` at 0.

    ValueError when a player is not linked to the anchor by games, or when the maximum is at
    infinity (some group of players won every game against the rest) and `prior_draws` is 0.
    """
    records = list(records)
    if players is None:
        players = list(dict.fromkeys(name for g in records for name in (g.a, g.b)))
    players = list(players)
    if anchor not in players:
        raise ValueError(f"anchor {anchor!r} is not among the players {players}")
    if prior_draws < 0:
        raise ValueError(f"prior_draws must be >= 0, got {prior_draws}")
    score, count, evidence = _matrices(players, records, prior_draws)
    a = players.index(anchor)
    _check_identifiable(players, score, count, a)
    keep = [i for i in range(len(players)) if i != a]

    def log_likelihood(strength: np.ndarray) -> float:
        diff = strength[:, None] - strength[None, :]
        return float(-(score * np.logaddexp(0.0, -diff)).sum())

    def information(strength: np.ndarray, games: np.ndarray) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(strength[None, :] - strength[:, None]))
        info = -games * p * (1 - p)
        np.fill_diagonal(info, 0.0)
        np.fill_diagonal(info, -info.sum(1))
        return info

    # Newton's method on the log-strengths (rating / SCALE), the anchor held at 0, with step
    # halving so that every step raises the (concave) log-likelihood.
    strength = np.zeros(len(players))
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(strength[None, :] - strength[:, None]))
        grad = (score - count * p).sum(1)
        step = np.zeros(len(players))
        if keep:
            hessian = information(strength, count)[np.ix_(keep, keep)]
            step[keep] = np.linalg.solve(hessian, grad[keep])
        current, size = log_likelihood(strength), 1.0
        while log_likelihood(strength + size * step) < current - 1e-12 and size > 1e-8:
            size /= 2
        strength = strength + size * step
        if np.max(np.abs(size * step)) < tol:
            break

    var = np.zeros(len(players))
    if keep:
        var[keep] = np.diag(np.linalg.inv(information(strength, evidence)[np.ix_(keep, keep)]))
    ratings = {name: float(SCALE * strength[i]) for i, name in enumerate(players)}
    stderr = {name: float(SCALE * math.sqrt(max(var[i], 0.0))) for i, name in enumerate(players)}
    return Ratings(ratings, stderr, anchor)
