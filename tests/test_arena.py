"""The arena on rigged games of known outcome, its intervals, Elo fitting, azjax-eval's matches."""

from __future__ import annotations

import dataclasses
import functools
import io
import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import games
from azjax import arena
from azjax.agents import Agent, random_legal_action
from azjax.cli import evaluate as cli


@struct.dataclass
class _State:
    current_player: jax.Array
    legal_action_mask: jax.Array
    terminated: jax.Array
    rewards: jax.Array
    moves: jax.Array  # int32[T], the actions played
    ply: jax.Array


@dataclasses.dataclass(eq=False)
class _Rigged:
    """Fixed movers, `num_actions` legal moves, and `outcome(moves)` as player 0's result."""

    movers: tuple[int, ...]
    outcome: object
    num_actions: int = 4
    name = "rigged"

    def __post_init__(self):
        self.max_game_length = len(self.movers)

    def init(self, key):
        moves = jnp.full(len(self.movers), -1, jnp.int32)
        return self._state(moves, jnp.int32(0), jnp.bool_(False), jnp.float32(0))

    def step(self, state, action):
        moves, ply = state.moves.at[state.ply].set(action), state.ply + 1
        done = ply >= len(self.movers)
        return self._state(moves, ply, done, jnp.where(done, self.outcome(moves), 0.0))

    def _state(self, moves, ply, done, reward):
        mover = jnp.asarray((*self.movers, 0))[ply]
        rewards = jnp.stack([reward, -reward]).astype(jnp.float32)
        return _State(mover, jnp.full(self.num_actions, ~done), done, rewards, moves, ply)


@functools.cache
def _constant(action: int):
    return lambda params, state, key: jnp.int32(action)


@functools.cache
def _by_colour(as_first: int, as_second: int):
    return lambda params, state, key: jnp.int32(
        jnp.where(state.current_player, as_second, as_first)
    )


def _random(params, state, key):
    return random_legal_action(key, state.legal_action_mask)


def _higher_wins(moves):
    return jnp.sign(moves[0] - moves[1]).astype(jnp.float32)


HIGHER, TTT = _Rigged((0, 1), _higher_wins), games.make("tictactoe")


@pytest.mark.parametrize("num_games", [1, 7])
def test_wins_draws_losses_are_counted_from_a(num_games):
    key = jax.random.key(0)
    strong, weak = Agent(_constant(3), name="strong"), Agent(_constant(1), name="weak")
    r = arena.match(HIGHER, strong, weak, num_games, key)
    assert (r.wins, r.draws, r.losses, r.games) == (num_games, 0, 0, num_games)
    assert r.first == ((num_games + 1) // 2, 0, 0) and r.second == (num_games // 2, 0, 0)
    assert r.score == 1.0 and r.name_a == "strong" and r.name_b == "weak"
    r = arena.match(HIGHER, weak, strong, num_games, key)
    assert (r.wins, r.draws, r.losses) == (0, 0, num_games) and r.score == 0.0
    r = arena.match(HIGHER, weak, Agent(_constant(1)), num_games, key)
    assert (r.wins, r.draws, r.losses) == (0, num_games, 0) and r.score == 0.5


def _stop(finished: int):
    raise KeyboardInterrupt  # Ctrl-C, as it lands after a batch


def test_colours_alternate_and_an_interrupted_match_keeps_its_batches(
    tmp_path, monkeypatch, capsys
):
    # A plays 3 as player 0 and 0 as player 1; B always plays 2: A wins exactly its games as
    # player 0 and loses exactly those as player 1.
    a, b = Agent(_by_colour(3, 0), name="a"), Agent(_constant(2), name="b")
    r = arena.match(HIGHER, a, b, 9, jax.random.key(1), batch_size=4)
    assert (r.first, r.second, r.wins, r.losses, r.score) == ((5, 0, 0), (0, 0, 4), 5, 4, 5 / 9)
    with pytest.raises(arena.MatchInterrupted) as stopped:
        arena.match(HIGHER, a, b, 9, jax.random.key(1), batch_size=4, progress=_stop)
    r = stopped.value.result
    assert stopped.value.planned == 9 and isinstance(stopped.value, KeyboardInterrupt)
    assert (r.games, r.first, r.second) == (4, (2, 0, 0), (0, 0, 2))
    # azjax-eval prints and saves those games, says so, and exits as interrupted programs do
    match = arena.match
    monkeypatch.setattr(arena, "match", lambda *args: match(*args[:7], _stop))
    out = tmp_path / "m.json"
    argv = ["--game", "tictactoe", "--a", "random", "--b", "greedy", "--games", "8"]
    assert cli.main([*argv, "--batch", "4", "--quiet", "--json", str(out)]) == 130
    saved = json.loads(out.read_text())["match"]
    assert (saved["games"], saved["planned_games"], saved["interrupted"]) == (4, 8, True)
    printed = capsys.readouterr()
    assert "azjax-eval: interrupted after 4 of 8 games" in printed.err
    assert "random vs greedy" in printed.out


def test_a_player_may_move_twice_in_a_row():
    # Movers 0, 0, 1: player 0 wins iff its two moves agree and differ from player 1's.
    game = _Rigged((0, 0, 1), lambda m: jnp.where((m[0] == m[1]) & (m[1] != m[2]), 1.0, -1.0))
    a, b = Agent(_constant(1), name="a"), Agent(_constant(2), name="b")
    r = arena.match(game, a, b, 6, jax.random.key(2))
    assert r.first == (3, 0, 0) and r.second == (0, 0, 3)
    # Movers 0, 1, 1, player 0 winning iff the last move is 3: A (3) makes it only as player 1,
    # and games waiting for the other agent take no move and no reward.
    game = _Rigged((0, 1, 1), lambda m: jnp.where(m[2] == 3, 1.0, -1.0))
    r = arena.match(game, Agent(_constant(3), name="a"), b, 6, jax.random.key(3))
    assert (r.wins, r.draws, r.losses) == (0, 0, 6)


def test_random_openings_are_shared_by_each_pair_of_games():
    # The random opening move alone decides the game: shared by a pair, A wins one game of two.
    game = _Rigged((0, 1), lambda m: jnp.where(m[0] % 2 == 0, 1.0, -1.0), num_actions=8)
    a, b = Agent(_constant(0), name="a"), Agent(_constant(0), name="b")
    for seed in range(4):  # unshared openings give 20 wins of 40 one time in eight
        r = arena.match(game, a, b, 40, jax.random.key(seed), opening_moves=1)
        assert (r.wins, r.draws, r.losses) == (20, 0, 20)
        assert 0 < r.first[0] < 20 and 2 < r.distinct <= 16  # random openings; 8 x 2 colours
        # Batches of 3 are played as 4 (whole pairs).
        r = arena.match(game, a, b, 6, jax.random.key(seed), opening_moves=1, batch_size=3)
        assert (r.wins, r.draws, r.losses) == (3, 0, 3) and sum(r.first) == 3
    # A game decided inside its opening still counts.
    r = arena.match(game, a, b, 40, jax.random.key(0), opening_moves=2)
    assert (r.wins, r.draws, r.losses) == (20, 0, 20)


def test_repeated_games_are_counted_once_in_the_interval():
    a, b, key = Agent(_by_colour(3, 0), name="a"), Agent(_constant(2), name="b"), jax.random.key(4)
    r = arena.match(HIGHER, a, b, 40, key, batch_size=8)
    assert r.distinct == 2 and r.to_dict()["distinct_games"] == 2
    same = Agent(_constant(2), name="same")  # the same moves in both colours: two games still
    assert arena.match(HIGHER, same, b, 40, key).distinct == 2
    assert (r.wins, r.losses) == (20, 20) and r.interval == _interval(1, 0, 1)
    game = _Rigged((0, 1, 0, 1), _higher_wins, num_actions=8)
    r = arena.match(game, Agent(_random), Agent(_random), 40, jax.random.key(5))
    assert r.distinct >= 36
    assert r.interval == pytest.approx(dataclasses.replace(r, distinct=None).interval, rel=0.1)
    low, high = dataclasses.replace(r, distinct=10).interval  # fewer games, a wider interval
    assert low < r.interval[0] and r.interval[1] < high
    # The first free cell after a random ply: a replayed game is the same in any batch.
    first_free = Agent(lambda params, state, key: jnp.argmax(state.legal_action_mask), name="f")
    for batch in (None, 8):  # the last batch of 8 padded
        r = arena.match(TTT, first_free, first_free, 36, key, opening_moves=1, batch_size=batch)
        assert 2 < r.distinct <= 18, (batch, r.distinct)


def _interval(wins: int, draws: int, losses: int, distinct: int | None = None):
    return arena.MatchResult(wins, draws, losses, (0, 0, 0), (0, 0, 0), distinct=distinct).interval


def test_confidence_interval():
    z = 1.959963984540054
    # Without draws: Agresti and Coull's interval of a proportion, wins of games.
    for wins, losses in ((30, 70), (149, 51), (3, 0)):
        n, p = wins + losses + z * z, (wins + z * z / 2) / (wins + losses + z * z)
        half = z * np.sqrt(p * (1 - p) / n)
        assert _interval(wins, 0, losses) == pytest.approx((p - half, min(p + half, 1.0)))
    low, high = _interval(30, 40, 30)
    assert low < 0.5 < high and high - low < np.subtract(*_interval(50, 0, 50)[::-1])
    # Games all alike are not certainty: 200 wins of 200 lie below Clopper-Pearson's bound.
    low, high = _interval(200, 0, 0)
    assert 0.95 < low < 0.025 ** (1 / 200) and high == 1.0
    low, high = _interval(0, 100, 0)
    assert 0.45 < low < 0.5 < high < 0.55 and low == pytest.approx(1 - high)
    assert _interval(0, 5, 0, distinct=1) == _interval(0, 1, 0)
    assert _interval(1, 0, 0)[0] < 0.2 and _interval(0, 0, 0) == (0.0, 1.0)
    r = arena.MatchResult(30, 40, 30, (15, 20, 15), (15, 20, 15))
    assert r.to_dict()["as_first"] == {"wins": 15, "draws": 20, "losses": 15}
    assert r.to_dict()["ci95"] == list(r.interval)
    # Over 1,000 matches of a few true shares, the interval holds the score >= 93% of the time.
    rng = np.random.default_rng(0)
    for shares in ((0.99, 0.0, 0.01), (0.97, 0.03, 0.0), (0.3, 0.4, 0.3), (0.02, 0.96, 0.02)):
        for n in (20, 200):
            score = shares[0] + shares[1] / 2
            counts = rng.multinomial(n, shares, size=1000)
            held = [low <= score <= high for low, high in (_interval(*c) for c in counts)]
            assert np.mean(held) >= 0.93, (shares, n, np.mean(held))


def test_ladder_plays_each_pair_its_own_games_and_orders_the_agents():
    # Three copies of one random agent: one key for every pair would replay the same games.
    game = _Rigged((0, 1, 0, 1), _higher_wins, num_actions=8)
    players = [Agent(_random, name=name) for name in ("random", "y", "z")]
    _, results = arena.ladder(game, players, 40, jax.random.key(6))
    assert [(r.name_a, r.name_b) for r in results] == [("random", "y"), ("random", "z"), ("y", "z")]
    assert len({(r.wins, r.draws, r.losses, r.first, r.second) for r in results}) == 3
    agents = [Agent(_constant(v), name=n) for v, n in ((0, "random"), (1, "one"), (3, "three"))]
    ratings, results = arena.ladder(HIGHER, agents, 4, jax.random.key(0))
    assert [r.score for r in results] == [0.0, 0.0, 0.0]
    assert ratings.ratings["random"] == 0.0
    assert 0.0 < ratings.ratings["one"] < ratings.ratings["three"]


def test_cli_refuses_bad_input_in_one_line_before_a_progress_bar(capsys):
    ttt, rr, both = ["--game", "tictactoe"], "--round-robin", ["--a", "random", "--b", "random"]
    cases = [
        ([*ttt, "--a", "alphabeta:x", "--b", "random"], "bad agent spec"),
        (["--game", "go", *both], "unknown game 'go'"),
        (["--game", "othello", "--size", "size", *both], "KEY=VALUE"),
        (["--game", "othello", "--size", "size=7", *both], "size takes 6, 8"),
        (both, "--game is needed"),
        ([*ttt, rr, "random"], "at least two specs"),
        ([*ttt, rr, "random,random"], "agent names must be distinct"),
        (["--game", "othello", "--solver", "random"], "Connect4"),
        ([*ttt, *both, "--batch", "0"], "--batch must be >= 1, got 0"),
        ([*ttt, *both, "--opening-moves", "-2"], "--opening-moves"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "%" not in err, (argv, err)


def test_cli_round_robin_writes_json(tmp_path, monkeypatch):
    """Each player meets the ones listed before it, and Elo is fitted to the (stand-in) results."""

    def match(game, a, b, num_games, *args):
        return arena.MatchResult(2, 1, 1, (1, 1, 0), (1, 0, 1), a.name, b.name, distinct=4)

    monkeypatch.setattr(arena, "match", match)
    out = tmp_path / "rr.json"
    argv = ["--game", "tictactoe", "--round-robin", "random,greedy,alphabeta:1,alphabeta:2"]
    assert cli.main([*argv, "--games", "4", "--quiet", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    names = ["random", "greedy", "alphabeta:1", "alphabeta:2"]
    pairs = [(names[i], names[j], 2) for j in range(4) for i in range(j)]
    assert [(m["a"], m["b"], m["wins"]) for m in data["matches"]] == pairs
    expected = arena.fit([arena.Record(a, b, 2, 1, 1, 4) for a, b, _ in pairs], prior_draws=1)
    assert data["anchor"] == "random" and data["elo"] == pytest.approx(expected.ratings)
    assert data["elo_stderr"] == pytest.approx(expected.stderr)


def test_cli_round_robin_interrupted_shows_and_keeps_its_finished_matches(
    tmp_path, monkeypatch, capsys
):
    calls = []

    def ctrl_c_in_the_second_match():  # one batch a match: after the first match's
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli, "check_interrupt", ctrl_c_in_the_second_match)
    out = tmp_path / "rr.json"
    argv = ["--game", "tictactoe", "--round-robin", "random,greedy,alphabeta:1"]
    argv += ["--games", "4", "--batch", "4", "--quiet", "--json", str(out)]
    assert cli.main(argv) == 130
    printed, err = capsys.readouterr()
    table = printed.splitlines()
    assert len(table) == 2 and table[1].startswith("random vs greedy "), printed
    assert err == f"azjax-eval: interrupted; the finished matches are in {out}\n"
    partial = json.loads(out.read_text())["partial"]
    assert [(m["a"], m["b"], m["games"]) for m in partial] == [("random", "greedy", 4)]


def test_cli_writes_its_json_before_printing_and_notes_repeated_games(
    tmp_path, monkeypatch, capsys
):
    """A closed stdout (`azjax-eval ... | head`) loses no results; repeated games are noted."""
    out = tmp_path / "m.json"
    argv = ["--a", "policy-zoo:tictactoe", "--b", "policy-zoo:tictactoe", "--games", "6", "--quiet"]
    assert cli.main(["--game", "tictactoe", *argv, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["match"]["distinct_games"] == 2
    assert "2 distinct games of 6" in capsys.readouterr().out

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    out.unlink()
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    with pytest.raises(BrokenPipeError):
        cli.main(["--game", "tictactoe", *argv, "--json", str(out)])
    assert json.loads(out.read_text())["match"]["games"] == 6


def test_cli_warns_of_a_deep_alphabeta(capsys):
    connect4, tictactoe = games.make("connect4"), games.make("tictactoe")
    cli._agent("alphabeta:12", connect4)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: alphabeta:12" in err and "connect4" in err, err
    for spec, game in (("alphabeta:4", connect4), ("alphabeta:9", tictactoe)):
        cli._agent(spec, game)
        assert capsys.readouterr().err == "", spec


def _expected(ra: float, rb: float) -> float:
    return 1.0 / (1.0 + 10.0 ** ((rb - ra) / 400.0))


def test_fit_recovers_known_ratings_within_four_errors():
    rng = np.random.default_rng(1)
    true = {"random": 0.0, "greedy": 200.0, "ab2": 450.0, "ab4": 700.0, "mcts": 900.0}
    records = []
    for x, y in itertools.permutations(true, 2):
        p = _expected(true[x], true[y])
        draw = 0.2 * min(p, 1 - p)
        counts = rng.multinomial(3000, [p - draw / 2, draw, 1 - p - draw / 2])
        records.append(arena.Record(x, y, *map(int, counts)))
    fitted = arena.fit(records)
    assert fitted.table()[0][0] == "mcts"
    for name, rating in true.items():
        assert abs(fitted.ratings[name] - rating) <= 4 * fitted.stderr[name] + 1e-9, name
    assert fitted.ratings["random"] == 0.0 and fitted.stderr["random"] == 0.0


def test_fit_in_closed_form_and_at_the_maximum():
    # One pairing: the logit of the score, error 1/sqrt(n p (1 - p)); self-play counts nothing.
    w, d, lost = 50, 20, 30
    n, s = w + d + lost, (w + d / 2) / (w + d + lost)
    fitted = arena.fit([arena.Record("x", "random", w, d, lost), arena.Record("x", "x", 9, 0, 1)])
    assert fitted.ratings["x"] == pytest.approx(400 * math.log10(s / (1 - s)), abs=1e-6)
    r = arena.MatchResult(w, d, lost, (0, 0, 0), (0, 0, 0))
    assert fitted.ratings["x"] == pytest.approx(r.elo_difference, abs=1e-6)
    assert fitted.stderr["x"] == pytest.approx(arena.SCALE / math.sqrt(n * s * (1 - s)), rel=1e-6)
    # 25 distinct games of 100: the same rating, twice the error; 4 virtual draws: 2 points.
    repeated = arena.fit([arena.Record("x", "random", w, d, lost, distinct=25)])
    assert repeated.ratings["x"] == pytest.approx(fitted.ratings["x"], abs=1e-6)
    assert repeated.stderr["x"] == pytest.approx(2 * fitted.stderr["x"], rel=1e-6)
    prior = arena.fit([arena.Record("x", "random", w, d, lost, distinct=25)], prior_draws=4)
    s = (w + d / 2 + 2) / (n + 4)
    assert prior.ratings["x"] == pytest.approx(400 * math.log10(s / (1 - s)), abs=1e-6)
    assert prior.stderr["x"] == pytest.approx(arena.SCALE / math.sqrt(29 * s * (1 - s)), rel=1e-6)
    records = [arena.Record("random", "b", 0, 40, 0), arena.Record("b", "c", 30, 0, 10)]
    assert arena.fit(records).ratings == pytest.approx(
        {"random": 0, "b": 0, "c": -400 * math.log10(3)}, abs=1e-6
    )
    assert arena.fit(records, anchor="c").ratings["b"] == pytest.approx(400 * math.log10(3))
    # 99.9% results beside near-even ones, a tiny prior: expected points still equal points.
    results = [("random", "p1", 102, 99898), ("random", "p2", 7, 3), ("p0", "p1", 99911, 89)]
    results.append(("p0", "p2", 998, 2))
    prior = 1e-4
    records = [arena.Record(a, b, w, 0, x) for a, b, w, x in results]
    ratings = arena.fit(records, prior_draws=prior).ratings
    expected, points = dict.fromkeys(ratings, 0.0), dict.fromkeys(ratings, 0.0)
    for a, b, w, lost in results:
        n, p = w + lost + prior, _expected(ratings[a], ratings[b])
        expected[a], expected[b] = expected[a] + n * p, expected[b] + n * (1 - p)
        points[a], points[b] = points[a] + w + prior / 2, points[b] + lost + prior / 2
    assert expected == pytest.approx(points, rel=1e-6, abs=1e-6)


def test_bad_arguments_and_records_are_refused():
    a = Agent(_constant(0), name="a")
    with pytest.raises(ValueError, match="num_games"):
        arena.match(HIGHER, a, a, 0, jax.random.key(0))
    with pytest.raises(ValueError, match="opening_moves"):
        arena.match(HIGHER, a, a, 2, jax.random.key(0), opening_moves=-1)
    with pytest.raises(ValueError, match="distinct"):
        arena.ladder(HIGHER, [a, a], 2, jax.random.key(0))
    # A game that outlasts its declared length is reported, not counted as unfinished.
    long = _Rigged((0,) * 6, _higher_wins)
    long.max_game_length = 1
    with pytest.raises(RuntimeError, match="a game outlasted 4 turns; max_game_length is too"):
        arena.match(long, a, a, 2, jax.random.key(0))
    sweep = [arena.Record("x", "random", 10, 0, 0)]
    for records in (sweep, [arena.Record("random", "x", 10, 0, 0)]):  # swept by the anchor too
        with pytest.raises(ValueError, match="infinite; pass prior_draws > 0"):
            arena.fit(records)
    finite = arena.fit(sweep, prior_draws=1.0)  # 10.5 of 11 points
    assert finite.ratings["x"] == pytest.approx(400 * math.log10(10.5 / 0.5), abs=1e-6)
    cases = [
        ([arena.Record("x", "random", 1, 1, 1), arena.Record("y", "z", 1, 1, 1)], {}, "no chain"),
        ([arena.Record("x", "y", 1, 1, 1)], {}, "anchor 'random' is not among"),
        ([arena.Record("x", "random", 1, 1, 1)], {"players": ["random"]}, "not among the players"),
        ([arena.Record("x", "random", 3, -1, 0)], {}, "negative game count"),
    ]
    for records, kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            arena.fit(records, **kwargs)
