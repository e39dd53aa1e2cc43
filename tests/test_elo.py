"""Elo fitting: known ratings recovered, closed forms for two players, refusals, gating."""

from __future__ import annotations

import math

import numpy as np
import pytest

from azjax import elo
from azjax.arena import MatchResult, elo_from_score, gate


def _expected(ra: float, rb: float) -> float:
    return 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))


def test_fit_recovers_ratings_from_exact_results():
    # Results equal to their expectations (large counts, rounded): the fit must return the
    # generating ratings up to rounding.
    true = {"random": 0.0, "a": 250.0, "b": 600.0, "c": 1100.0}
    names = list(true)
    records = []
    n = 1_000_000
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            p = _expected(true[names[i]], true[names[j]])
            wins = round(n * p)
            records.append(elo.Record(names[i], names[j], wins, 0, n - wins))
    fitted = elo.fit(records)
    for name, rating in true.items():
        assert fitted.ratings[name] == pytest.approx(rating, abs=0.5)


def test_fit_recovers_ratings_from_sampled_results_with_draws():
    rng = np.random.default_rng(1)
    true = {"random": 0.0, "greedy": 200.0, "ab2": 450.0, "ab4": 700.0, "mcts": 900.0}
    names = list(true)
    records = []
    for i in range(len(names)):
        for j in range(len(names)):
            if i == j:
                continue
            p = _expected(true[names[i]], true[names[j]])
            # Each game scores 1 w.p. p - d/2, 1/2 w.p. d, 0 otherwise: mean p.
            draw = 0.2 * min(p, 1 - p)
            counts = rng.multinomial(3000, [p - draw / 2, draw, 1 - p - draw / 2])
            records.append(elo.Record(names[i], names[j], *map(int, counts)))
    fitted = elo.fit(records)
    assert fitted.table()[0][0] == "mcts"
    for name, rating in true.items():
        assert abs(fitted.ratings[name] - rating) <= 4 * fitted.stderr[name] + 1e-9, name
    assert fitted.ratings["random"] == 0.0 and fitted.stderr["random"] == 0.0


def test_two_players_closed_form_and_stderr():
    # One pairing: the MLE is the logit of the score; its standard error 1/sqrt(n p (1 - p))
    # in natural-log units.
    w, d, lost = 50, 20, 30
    n, s = w + d + lost, (w + d / 2) / (w + d + lost)
    fitted = elo.fit([elo.Record("x", "random", w, d, lost)])
    assert fitted.ratings["x"] == pytest.approx(400 * math.log10(s / (1 - s)), abs=1e-6)
    assert fitted.ratings["x"] == pytest.approx(elo_from_score(s), abs=1e-6)
    assert fitted.stderr["x"] == pytest.approx(elo.SCALE / math.sqrt(n * s * (1 - s)), rel=1e-6)
    # 25 distinct games among the 100 (the rest replayed): the same rating, twice the error.
    repeated = elo.fit([elo.Record("x", "random", w, d, lost, distinct=25)])
    assert repeated.ratings["x"] == pytest.approx(fitted.ratings["x"], abs=1e-6)
    assert repeated.stderr["x"] == pytest.approx(2 * fitted.stderr["x"], rel=1e-6)
    # 4 virtual draws: 2 more points of 104, and 4 more games of evidence.
    prior = elo.fit([elo.Record("x", "random", w, d, lost, distinct=25)], prior_draws=4)
    s = (w + d / 2 + 2) / (n + 4)
    assert prior.ratings["x"] == pytest.approx(elo_from_score(s), abs=1e-6)
    assert prior.stderr["x"] == pytest.approx(elo.SCALE / math.sqrt(29 * s * (1 - s)), rel=1e-6)


def test_lopsided_records_still_reach_the_maximum():
    """Results of 99.9% beside near-even ones, with a tiny prior: a full Newton step from level
    ratings overshoots here (to overflow), so the fit halves its steps; it must still end where
    every player's expected points equal its points (the likelihood's stationary point)."""
    games = [("random", "p1", 102, 99898), ("random", "p2", 7, 3), ("p0", "p1", 99911, 89)]
    games.append(("p0", "p2", 998, 2))
    prior = 1e-4
    fitted = elo.fit([elo.Record(a, b, w, 0, lost) for a, b, w, lost in games], prior_draws=prior)
    ratings = fitted.ratings
    assert all(math.isfinite(r) for r in ratings.values())
    expected = dict.fromkeys(ratings, 0.0)
    points = dict.fromkeys(ratings, 0.0)
    for a, b, w, lost in games:
        n, p = w + lost + prior, _expected(ratings[a], ratings[b])
        expected[a] += n * p
        expected[b] += n * (1 - p)
        points[a] += w + prior / 2
        points[b] += lost + prior / 2
    for name in ratings:
        assert expected[name] == pytest.approx(points[name], rel=1e-6, abs=1e-6), name


def test_games_against_oneself_count_for_nothing_and_negative_counts_are_refused():
    games = [elo.Record("x", "random", 50, 20, 30), elo.Record("y", "x", 10, 0, 10)]
    alone = elo.fit(games)
    with_self = elo.fit([*games, elo.Record("x", "x", 9, 0, 1)])
    assert with_self.ratings == pytest.approx(alone.ratings, abs=1e-9)
    assert with_self.stderr == pytest.approx(alone.stderr, abs=1e-9)
    with pytest.raises(ValueError, match="negative game count"):
        elo.fit([*games, elo.Record("x", "random", 3, -1, 0)])


def test_draws_only_means_equal_ratings_and_anchor_choice():
    fitted = elo.fit([elo.Record("random", "b", 0, 40, 0), elo.Record("b", "c", 30, 0, 10)])
    assert fitted.ratings["b"] == pytest.approx(0.0, abs=1e-6)
    assert fitted.ratings["c"] == pytest.approx(-400 * math.log10(3), abs=1e-6)
    moved = elo.fit(
        [elo.Record("random", "b", 0, 40, 0), elo.Record("b", "c", 30, 0, 10)], anchor="c"
    )
    assert moved.ratings["c"] == 0.0
    assert moved.ratings["b"] == pytest.approx(400 * math.log10(3), abs=1e-6)


def test_unbounded_and_unlinked_ratings_are_refused():
    sweep = [elo.Record("x", "random", 10, 0, 0)]
    with pytest.raises(ValueError, match="infinite"):
        elo.fit(sweep)
    with pytest.raises(ValueError, match="infinite"):  # swept by the anchor: as unbounded
        elo.fit([elo.Record("random", "x", 10, 0, 0)])
    finite = elo.fit(sweep, prior_draws=1.0)  # 10.5 of 11 points
    assert finite.ratings["x"] == pytest.approx(elo_from_score(10.5 / 11), abs=1e-6)
    with pytest.raises(ValueError, match="no chain of games links"):
        elo.fit([elo.Record("x", "random", 1, 1, 1), elo.Record("y", "z", 1, 1, 1)])
    with pytest.raises(ValueError, match="anchor"):
        elo.fit([elo.Record("x", "y", 1, 1, 1)])
    with pytest.raises(ValueError, match="not among the players"):
        elo.fit([elo.Record("x", "random", 1, 1, 1)], players=["random"])


def test_gate_threshold():
    def result(w, d, lost):
        return MatchResult(w, d, lost, (w, d, lost), (0, 0, 0))

    assert gate(result(55, 0, 45))
    assert gate(result(50, 10, 40))  # 55 of 100
    assert not gate(result(54, 0, 46))
    assert gate(result(54, 0, 46), threshold=0.5)
