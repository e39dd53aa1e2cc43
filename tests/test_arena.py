"""The arena's bookkeeping on rigged games whose outcome the test knows in advance."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import games
from azjax import arena
from azjax.agents import Agent, random_legal_action
from azjax.cli import INTERRUPTED
from games.core import Game


@struct.dataclass
class _State:
    current_player: jax.Array
    legal_action_mask: jax.Array
    terminated: jax.Array
    rewards: jax.Array
    moves: jax.Array  # int32[T], the actions played
    ply: jax.Array


class _Rigged(Game):
    """A fixed schedule of movers; at the end `outcome(moves)` is player 0's result."""

    name = "rigged"

    def __init__(self, movers: tuple[int, ...], outcome, num_actions: int = 4):
        self.movers = movers
        self.outcome = outcome
        self.num_actions = num_actions
        self.observation_shape = (1, 1, 1)
        self.max_game_length = len(movers)

    def init(self, key):
        del key
        n = len(self.movers)
        return _State(
            current_player=jnp.int32(self.movers[0]),
            legal_action_mask=jnp.ones(self.num_actions, bool),
            terminated=jnp.bool_(False),
            rewards=jnp.zeros(2, jnp.float32),
            moves=jnp.full(n, -1, jnp.int32),
            ply=jnp.int32(0),
        )

    def _apply(self, state, action):
        moves = state.moves.at[state.ply].set(action)
        ply = state.ply + 1
        done = ply == len(self.movers)
        r0 = jnp.where(done, self.outcome(moves), 0.0)
        movers = jnp.asarray((*self.movers, 0))
        return _State(
            current_player=movers[ply],
            legal_action_mask=jnp.full(self.num_actions, ~done),
            terminated=done,
            rewards=jnp.stack([r0, -r0]).astype(jnp.float32),
            moves=moves,
            ply=ply,
        )

    def observe(self, state):
        return jnp.zeros((1, 1, 1))

    def board(self, state):
        return np.asarray(state.moves)

    def render(self, state):
        return str(self.board(state))

    @property
    def symmetries(self):
        return ()

    def _parse(self, text):
        return int(text)

    def format_action(self, action):
        return str(action)


@functools.cache
def _constant(action: int):
    def fn(params, state, key):
        del params, state, key
        return jnp.int32(action)

    return fn


@functools.cache
def _by_colour(as_first: int, as_second: int):
    def fn(params, state, key):
        del params, key
        return jnp.where(state.current_player == 0, as_first, as_second).astype(jnp.int32)

    return fn


def _higher_wins(moves):
    return jnp.sign(moves[0] - moves[1]).astype(jnp.float32)


HIGHER = _Rigged((0, 1), _higher_wins)


@pytest.mark.parametrize("num_games", [1, 7, 10])
def test_wins_draws_losses_are_counted_from_a(num_games):
    key = jax.random.key(0)
    strong, weak = Agent(_constant(3), name="strong"), Agent(_constant(1), name="weak")
    first, second = (num_games + 1) // 2, num_games // 2
    r = arena.match(HIGHER, strong, weak, num_games, key)
    assert (r.wins, r.draws, r.losses, r.games) == (num_games, 0, 0, num_games)
    assert r.first == (first, 0, 0) and r.second == (second, 0, 0)
    assert r.score == 1.0 and r.name_a == "strong" and r.name_b == "weak"
    r = arena.match(HIGHER, weak, strong, num_games, key)
    assert (r.wins, r.draws, r.losses) == (0, 0, num_games) and r.score == 0.0
    r = arena.match(HIGHER, weak, Agent(_constant(1)), num_games, key)
    assert (r.wins, r.draws, r.losses) == (0, num_games, 0) and r.score == 0.5


def test_colours_alternate_game_by_game():
    # A plays 3 as player 0 and 0 as player 1; B always plays 2: A wins exactly its games as
    # player 0 and loses exactly those as player 1.
    a, b = Agent(_by_colour(3, 0), name="a"), Agent(_constant(2), name="b")
    r = arena.match(HIGHER, a, b, 9, jax.random.key(1), batch_size=4)
    assert r.first == (5, 0, 0) and r.second == (0, 0, 4)
    assert (r.wins, r.draws, r.losses) == (5, 0, 4)
    assert r.score == pytest.approx(5 / 9)


def _stop(finished: int):
    raise KeyboardInterrupt  # Ctrl-C, as it lands after a batch


def test_an_interrupted_match_keeps_its_finished_batches(tmp_path, monkeypatch, capsys):
    import json

    from azjax.cli.evaluate import main

    a, b = Agent(_by_colour(3, 0), name="a"), Agent(_constant(2), name="b")
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
    assert main([*argv, "--batch", "4", "--quiet", "--json", str(out)]) == 130
    saved = json.loads(out.read_text())["match"]
    assert (saved["games"], saved["planned_games"], saved["interrupted"]) == (4, 8, True)
    printed = capsys.readouterr()
    assert "azjax-eval: interrupted after 4 of 8 games" in printed.err
    assert "random vs greedy" in printed.out
    monkeypatch.setattr(arena, "ladder", lambda *args, **kwargs: _stop(0))  # between matches
    argv = ["--game", "tictactoe", "--round-robin", "random,greedy", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 130
    assert capsys.readouterr().err.strip() == (
        f"azjax-eval: interrupted; the finished matches are in {out}"
    )


def _repeat_then_other(moves):
    # Player 0 wins iff its two moves agree and differ from player 1's move.
    return jnp.where((moves[0] == moves[1]) & (moves[1] != moves[2]), 1.0, -1.0)


def test_a_player_may_move_twice_in_a_row():
    # Movers 0, 0, 1: the agent of player 0 must make both of the first two moves.
    game = _Rigged((0, 0, 1), _repeat_then_other)
    a, b = Agent(_constant(1), name="a"), Agent(_constant(2), name="b")
    r = arena.match(game, a, b, 6, jax.random.key(2))
    assert r.first == (3, 0, 0) and r.second == (0, 0, 3)
    game = _Rigged((1, 0, 0, 1, 1), lambda m: jnp.where(m[1] == m[2], 1.0, 0.0))
    r = arena.match(game, a, b, 4, jax.random.key(2))
    assert r.first == (2, 0, 0) and r.second == (0, 0, 2)
    # Movers 0, 1, 1 and player 0 wins iff the last move is 3: A (3) makes it only as player 1,
    # and B (0) as player 1 ends A's games as player 0. While one agent moves, the games
    # waiting for the other (their last move pending) take no move and no reward.
    game = _Rigged((0, 1, 1), lambda m: jnp.where(m[2] == 3, 1.0, -1.0))
    r = arena.match(game, Agent(_constant(3), name="a"), b, 6, jax.random.key(3))
    assert (r.wins, r.draws, r.losses) == (0, 0, 6)


def _opening_decides(moves):
    return jnp.where(moves[0] % 2 == 0, 1.0, -1.0)


def test_random_openings_are_shared_by_each_pair_of_games():
    # The first move is a random opening move that alone decides the game: with the opening
    # shared by the two games of a pair (colours swapped), A wins exactly one game per pair.
    game = _Rigged((0, 1), _opening_decides, num_actions=8)
    a, b = Agent(_constant(0), name="a"), Agent(_constant(0), name="b")
    for seed in range(4):  # unshared openings give 20 wins of 40 one time in eight
        r = arena.match(game, a, b, 40, jax.random.key(seed), opening_moves=1)
        assert (r.wins, r.draws, r.losses) == (20, 0, 20)
        # Both outcomes occur, so the opening really is random.
        assert 0 < r.first[0] < 20
        # Constant agents replay each of the 8 openings' games: at most 8 x 2 colours distinct.
        assert 2 < r.distinct <= 16
        # Batches of 3 are played as 4 (whole pairs): colours alternate and openings pair up
        # across the batches.
        r = arena.match(game, a, b, 6, jax.random.key(seed), opening_moves=1, batch_size=3)
        assert (r.wins, r.draws, r.losses) == (3, 0, 3) and sum(r.first) == 3
    # A game decided inside its opening still counts.
    r = arena.match(game, a, b, 40, jax.random.key(0), opening_moves=2)
    assert (r.wins, r.draws, r.losses) == (20, 0, 20)


def test_repeated_games_are_counted_once_in_the_interval():
    # Constant agents without openings play one game per colour, however many are asked for.
    a, b = Agent(_by_colour(3, 0), name="a"), Agent(_constant(2), name="b")
    r = arena.match(HIGHER, a, b, 40, jax.random.key(4), batch_size=8)
    assert r.distinct == 2 and r.to_dict()["distinct_games"] == 2
    same = Agent(_constant(2), name="same")  # the same moves in both colours: two games still
    assert arena.match(HIGHER, same, b, 40, jax.random.key(4)).distinct == 2
    # Two distinct games, a win and a loss 20 times each: the interval of those two games.
    assert (r.wins, r.losses) == (20, 20) and r.interval == _interval(1, 0, 1)
    # Random agents rarely repeat a game of 4 moves among 8 actions.
    game = _Rigged((0, 1, 0, 1), _higher_wins, num_actions=8)
    a = Agent(lambda params, state, key: random_legal_action(key, state.legal_action_mask))
    r = arena.match(game, a, a, 40, jax.random.key(5))
    assert r.distinct >= 36
    assert r.interval == pytest.approx(dataclasses.replace(r, distinct=None).interval, rel=0.1)
    low, high = dataclasses.replace(r, distinct=10).interval  # fewer games, a wider interval
    assert low < r.interval[0] and r.interval[1] < high


def test_distinct_games_do_not_depend_on_the_batches():
    # Tic-Tac-Toe's first free cell against itself after one random ply: 9 openings, 2 colours,
    # games of several lengths. A batch plays until its longest game ends; a replayed game is
    # the same game whichever batch (and batch length) it falls in.
    first_free = Agent(lambda params, state, key: jnp.argmax(state.legal_action_mask), name="f")
    game, key = games.make("tictactoe"), jax.random.key(6)
    whole = arena.match(game, first_free, first_free, 36, key, opening_moves=1)
    assert 2 < whole.distinct <= 18
    for batch in (2, 4, 6):
        r = arena.match(game, first_free, first_free, 36, key, opening_moves=1, batch_size=batch)
        assert r.distinct <= 18, (batch, r.distinct)


def _interval(wins: int, draws: int, losses: int, distinct: int | None = None):
    return arena.MatchResult(wins, draws, losses, (0, 0, 0), (0, 0, 0), distinct=distinct).interval


def test_confidence_interval():
    z = 1.959963984540054
    # Without draws: Agresti and Coull's interval of a proportion, wins of games.
    for wins, losses in ((30, 70), (149, 51), (3, 0)):
        n, p = wins + losses + z * z, (wins + z * z / 2) / (wins + losses + z * z)
        half = z * np.sqrt(p * (1 - p) / n)
        assert _interval(wins, 0, losses) == pytest.approx((p - half, min(p + half, 1.0)))
    # Draws count half and spread the scores less than a win and a loss do.
    low, high = _interval(30, 40, 30)
    assert low < 0.5 < high and high - low < np.subtract(*_interval(50, 0, 50)[::-1])
    # A match whose games all end alike is not certainty: 200 wins of 200 lie below the exact
    # (Clopper-Pearson) lower bound 0.025 ** (1 / 200), and 100 draws leave room both ways.
    low, high = _interval(200, 0, 0)
    assert 0.95 < low < 0.025 ** (1 / 200) and high == 1.0
    low, high = _interval(0, 100, 0)
    assert 0.45 < low < 0.5 < high < 0.55 and low == pytest.approx(1 - high)
    # One distinct game is little evidence, and no game none.
    assert _interval(0, 5, 0, distinct=1) == _interval(0, 1, 0)
    assert _interval(1, 0, 0)[0] < 0.2 and _interval(0, 0, 0) == (0.0, 1.0)
    r = arena.MatchResult(30, 40, 30, (15, 20, 15), (15, 20, 15))
    assert r.to_dict()["as_first"] == {"wins": 15, "draws": 20, "losses": 15}
    assert r.to_dict()["ci95"] == list(r.interval)
    named = dataclasses.replace(r, name_a="zoo:x", name_b="random")
    low, high = r.interval
    assert str(named) == (
        f"zoo:x vs random: +30 =40 -30 (score 0.500 [{low:.3f}, {high:.3f}]; as first +15 =20 "
        "-15, as second +15 =20 -15)"
    )


def test_confidence_interval_covers_the_true_score():
    """Over 1,000 matches drawn from each of a few true win/draw/loss shares, near-certain ones
    included, the interval holds the true score at least 93% of the time."""
    rng = np.random.default_rng(0)
    for shares in ((0.99, 0.0, 0.01), (0.97, 0.03, 0.0), (0.3, 0.4, 0.3), (0.02, 0.96, 0.02)):
        for n in (20, 200):
            score = shares[0] + shares[1] / 2
            counts = rng.multinomial(n, shares, size=1000)
            held = [low <= score <= high for low, high in (_interval(*c) for c in counts)]
            assert np.mean(held) >= 0.93, (shares, n, np.mean(held))


def test_bad_arguments_are_refused():
    a = Agent(_constant(0), name="a")
    with pytest.raises(ValueError, match="num_games"):
        arena.match(HIGHER, a, a, 0, jax.random.key(0))
    with pytest.raises(ValueError, match="opening_moves"):
        arena.match(HIGHER, a, a, 2, jax.random.key(0), opening_moves=-1)
    with pytest.raises(ValueError, match="distinct"):
        arena.round_robin(HIGHER, [a, a], 2, jax.random.key(0))
    # A game that outlasts its declared length is reported, not counted as unfinished.
    long = _Rigged((0,) * 6, _higher_wins)
    long.max_game_length = 1
    with pytest.raises(RuntimeError, match="a game outlasted 4 turns; max_game_length is too"):
        arena.match(long, a, a, 2, jax.random.key(0))


def _random(params, state, key):
    del params
    return random_legal_action(key, state.legal_action_mask)


def test_each_pair_of_a_round_robin_plays_its_own_games():
    # Three copies of one random agent: with one key for every pair, each match would replay
    # the same games.
    game = _Rigged((0, 1, 0, 1), _higher_wins, num_actions=8)
    players = [Agent(_random, name=name) for name in "xyz"]
    results = arena.round_robin(game, players, 40, jax.random.key(6))
    games = {(r.wins, r.draws, r.losses, r.first, r.second) for r in results}
    assert [(r.name_a, r.name_b) for r in results] == [("x", "y"), ("x", "z"), ("y", "z")]
    assert len(games) == 3


def test_ladder_orders_rigged_agents():
    agents = [Agent(_constant(v), name=n) for v, n in ((0, "random"), (1, "one"), (3, "three"))]
    ratings, results = arena.ladder(HIGHER, agents, 4, jax.random.key(0))
    assert [r.score for r in results] == [0.0, 0.0, 0.0]
    assert ratings.ratings["random"] == 0.0
    assert 0.0 < ratings.ratings["one"] < ratings.ratings["three"]


# ----------------------------------------------------------------------------- command line


def test_cli_refuses_bad_input_clearly(capsys):
    from azjax.cli.evaluate import main

    cases = [
        (["--game", "tictactoe", "--a", "alphabeta:x", "--b", "random"], "bad agent spec"),
        (["--game", "tictactoe", "--a", "random"], "--a needs --b"),
        (["--game", "go", "--a", "random", "--b", "random"], "unknown game 'go'"),
        (["--game", "othello", "--size", "size", "--a", "random", "--b", "random"], "KEY=VALUE"),
        (
            ["--game", "othello", "--size", "size=7", "--a", "random", "--b", "random"],
            "size takes 6, 8",
        ),
        (["--a", "random", "--b", "random"], "--game is needed"),
        (["--game", "tictactoe", "--round-robin", "random"], "at least two specs"),
        (["--game", "othello", "--solver", "random"], "Connect4"),
        (["--game", "tictactoe", "--a", "random", "--b", "random", "--games", "0"], "--games"),
        (
            ["--game", "tictactoe", "--a", "random", "--b", "random", "--batch", "0"],
            "--batch must be >= 1, got 0",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_cli_round_robin_and_solver_write_json(tmp_path):
    import json

    from azjax.cli.evaluate import main

    out = tmp_path / "rr.json"
    argv = ["--game", "tictactoe", "--round-robin", "random,alphabeta:9", "--games", "6"]
    assert main([*argv, "--quiet", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    (m,) = data["matches"]
    assert (m["a"], m["b"], m["games"], m["wins"]) == ("random", "alphabeta:9", 6, 0)
    assert data["elo"]["random"] == 0.0 and data["elo"]["alphabeta:9"] > 0
    # each player meets the ones listed before it, in their order, before the next one plays
    argv = ["--game", "tictactoe", "--round-robin", "random,greedy,alphabeta:1,alphabeta:2"]
    assert main([*argv, "--games", "2", "--quiet", "--json", str(out)]) == 0
    played = [(m["a"], m["b"]) for m in json.loads(out.read_text())["matches"]]
    assert played == [
        ("random", "greedy"),
        ("random", "alphabeta:1"),
        ("greedy", "alphabeta:1"),
        ("random", "alphabeta:2"),
        ("greedy", "alphabeta:2"),
        ("alphabeta:1", "alphabeta:2"),
    ]


@pytest.mark.parametrize("saved", [True, False], ids=["json", "no_json"])
def test_cli_round_robin_interrupted_shows_and_keeps_its_finished_matches(
    saved, tmp_path, monkeypatch, capsys
):
    import json

    from azjax.cli import evaluate

    calls = []

    def ctrl_c_in_the_second_match():  # one batch a match: after the first match's
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(evaluate, "check_interrupt", ctrl_c_in_the_second_match)
    out = tmp_path / "rr.json"
    argv = ["--game", "tictactoe", "--round-robin", "random,greedy,alphabeta:1"]
    argv += ["--games", "4", "--batch", "4", "--quiet", *(["--json", str(out)] if saved else [])]
    assert evaluate.main(argv) == INTERRUPTED
    printed, err = capsys.readouterr()
    table = printed.splitlines()
    assert len(table) == 2 and table[1].startswith("random vs greedy "), printed
    kept = f"; the finished matches are in {out}" if saved else ""
    assert err == f"azjax-eval: interrupted{kept}\n"
    if saved:
        partial = json.loads(out.read_text())["partial"]
        assert [(m["a"], m["b"], m["games"]) for m in partial] == [("random", "greedy", 4)]
    else:
        assert not out.exists()


def test_cli_writes_its_json_before_printing(tmp_path, monkeypatch):
    """A closed stdout (`azjax-eval ... | head`) must not lose the results."""
    import io
    import json

    from azjax.cli.evaluate import main

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    out = tmp_path / "m.json"
    argv = ["--game", "tictactoe", "--a", "random", "--b", "greedy", "--games", "4", "--quiet"]
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    with pytest.raises(BrokenPipeError):
        main([*argv, "--json", str(out)])
    assert json.loads(out.read_text())["match"]["games"] == 4


def test_cli_notes_repeated_games(capsys, tmp_path):
    import json

    from azjax.cli.evaluate import main

    # Deterministic agents without openings play one game per colour, however many are asked.
    out = tmp_path / "m.json"
    argv = ["--a", "policy-zoo:tictactoe", "--b", "zoo:tictactoe:2", "--games", "6", "--quiet"]
    assert main(["--game", "tictactoe", *argv, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["match"]["distinct_games"] == 2
    assert "2 distinct games of 6" in capsys.readouterr().out


def test_cli_refuses_before_drawing_a_progress_bar(capsys):
    from azjax.cli.evaluate import main

    cases = [
        (["--round-robin", "random,random"], "agent names must be distinct"),
        (["--a", "random", "--b", "random", "--opening-moves", "-2"], "--opening-moves"),
    ]
    for argv, message in cases:
        assert main(["--game", "tictactoe", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "%" not in err, err


def test_cli_size_help_lists_only_the_sizes_a_game_takes(capsys):
    from azjax.cli.evaluate import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert "othello: size 6, 8" in " ".join(capsys.readouterr().out.split())


def test_cli_warns_of_a_deep_alphabeta_before_playing(capsys):
    import games
    from azjax.cli.evaluate import _agent

    connect4, tictactoe = games.make("connect4"), games.make("tictactoe")
    _agent("alphabeta:12", connect4)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: alphabeta:12" in err and "connect4" in err, err
    for spec, game in (("alphabeta:4", connect4), ("alphabeta:9", tictactoe)):
        _agent(spec, game)
        assert capsys.readouterr().err == "", spec
