"""Othello against OpenSpiel (8x8), published perft counts, an independent plain-Python
implementation written here from the rules (6x6 and 8x8), and its colour-swapping symmetries."""

from __future__ import annotations

import jax
import numpy as np
import pyspiel
import pytest
from helpers import (
    compare_with_openspiel,
    heuristics,
    index,
    live_positions,
    perft,
    random_trajectories,
)

import games
from games import othello

# The eight directions a line of discs can run in.
DIRECTIONS = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]


class ReferenceOthello:
    """Othello from the rules, one cell at a time: Black (+1, player 0) moves first; a disc
    must bracket at least one line of opposing discs, which all turn; a player who cannot
    place passes if the opponent can; the game ends when neither can; most discs wins."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.board = np.zeros((size, size), np.int32)
        h = size // 2
        self.board[h - 1, h - 1] = self.board[h, h] = -1
        self.board[h - 1, h] = self.board[h, h - 1] = 1
        self.player = 0
        self.over = False

    def _sign(self, player: int) -> int:
        return 1 if player == 0 else -1

    def _flips(self, row: int, col: int, sign: int) -> list[tuple[int, int]]:
        if self.board[row, col] != 0:
            return []
        flipped = []
        for dr, dc in DIRECTIONS:
            line = []
            r, c = row + dr, col + dc
            while 0 <= r < self.size and 0 <= c < self.size and self.board[r, c] == -sign:
                line.append((r, c))
                r, c = r + dr, c + dc
            if line and 0 <= r < self.size and 0 <= c < self.size and self.board[r, c] == sign:
                flipped += line
        return flipped

    def placements(self, player: int) -> list[int]:
        sign = self._sign(player)
        n = self.size
        return [r * n + c for r in range(n) for c in range(n) if self._flips(r, c, sign)]

    def legal_actions(self) -> list[int]:
        if self.over:
            return []
        mine = self.placements(self.player)
        if mine:
            return mine
        return [self.size * self.size]  # pass: the opponent can place, or the game were over

    def play(self, action: int) -> None:
        assert action in self.legal_actions(), (action, self.legal_actions())
        if action != self.size * self.size:
            row, col = divmod(action, self.size)
            sign = self._sign(self.player)
            for r, c in self._flips(row, col, sign):
                self.board[r, c] = sign
            self.board[row, col] = sign
        self.player = 1 - self.player
        self.over = not self.placements(0) and not self.placements(1)

    def black_result(self) -> float:
        return float(np.sign(self.board.sum()))


def _replay_against_reference(game, batch: int, seed: int) -> dict[str, int]:
    """Play our random games in ReferenceOthello, comparing every ply; returns tallies."""
    actions, states = random_trajectories(game, jax.random.key(seed), batch, game.max_game_length)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    tally = {"plies": 0, "passes": 0, "black_wins": 0, "white_wins": 0, "draws": 0}
    for b in range(batch):
        ref = ReferenceOthello(game.size)
        returns = np.zeros(2)
        for t in range(game.max_game_length + 1):
            ours = index(states, t, b)
            where = f"game {b}, ply {t}"
            returns += ours.rewards
            np.testing.assert_array_equal(game.board(ours), ref.board, err_msg=where)
            assert bool(ours.terminated) == ref.over, where
            if ref.over:
                result = ref.black_result()
                np.testing.assert_array_equal(returns, [result, -result], err_msg=where)
                key = {1.0: "black_wins", -1.0: "white_wins", 0.0: "draws"}[result]
                tally[key] += 1
                break
            assert int(ours.current_player) == ref.player, where
            mask = np.zeros(game.num_actions, bool)
            mask[ref.legal_actions()] = True
            np.testing.assert_array_equal(ours.legal_action_mask, mask, err_msg=where)
            tally["passes"] += int(actions[t, b]) == game.pass_action
            ref.play(int(actions[t, b]))
            tally["plies"] += 1
        else:
            raise AssertionError(f"game {b} did not end within max_game_length")
    return tally


# ----------------------------------------------------------------------------- OpenSpiel


def test_random_games_match_openspiel():
    game = games.make("othello")
    spiel = pyspiel.load_game("othello")
    batch = 300
    compared = compare_with_openspiel(game, spiel, batch=batch, length=game.max_game_length)
    assert compared > batch * 50
    # The comparison covered passes (so OpenSpiel's pass is our action 64), wins of both
    # colours and every ply of each game.
    actions, states = random_trajectories(game, jax.random.key(0), batch, game.max_game_length)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    live = ~states.terminated[:-1]
    assert ((actions == 64) & live).sum() >= 3
    black_result = states.rewards[:, :, 0].sum(axis=0)
    assert (black_result == 1).any() and (black_result == -1).any()


def test_boards_observations_and_notation_match_openspiel():
    game = games.make("othello")
    spiel = pyspiel.load_game("othello")
    start = spiel.new_initial_state()
    assert spiel.num_distinct_actions() == game.num_actions == 65
    for action in range(65):
        assert game.format_action(action) == start.action_to_string(0, action)
    symbols = {"x": 1, "o": -1, "-": 0}
    actions, states = random_trajectories(game, jax.random.key(3), 20, game.max_game_length)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    obs = np.asarray(jax.jit(jax.vmap(jax.vmap(game.observe)))(states))
    for b in range(20):
        ref = spiel.new_initial_state()
        for t in range(game.max_game_length + 1):
            rows = [line.split() for line in str(ref).splitlines()[2:10]]
            board = np.array([[symbols[v] for v in row[1:9]] for row in rows])
            np.testing.assert_array_equal(game.board(index(states, t, b)), board)
            sign = 1 if int(states.current_player[t, b]) == 0 else -1  # planes: mover's, other's
            np.testing.assert_array_equal(obs[t, b, ..., 0], board == sign, err_msg=f"{b}, {t}")
            np.testing.assert_array_equal(obs[t, b, ..., 1], board == -sign, err_msg=f"{b}, {t}")
            if ref.is_terminal():
                break
            ref.apply_action(int(actions[t, b]))


# ----------------------------------------------------------------------------- perft


def test_perft_matches_published_counts():
    game = games.make("othello")
    assert perft(game, 7, chunk=4096) == [4, 12, 56, 244, 1396, 8200, 55092]


# ----------------------------------------------------------------------------- reference


@pytest.mark.parametrize("size", [6, 8])
def test_random_games_match_plain_python_reference(size):
    game = games.make("othello", size=size)
    batch = 200 if size == 6 else 100
    tally = _replay_against_reference(game, batch=batch, seed=size)
    assert tally["plies"] > batch * (size * size - 4) * 0.8
    assert tally["passes"] >= 3
    assert tally["black_wins"] > 0 and tally["white_wins"] > 0


def test_no_double_pass_and_length_bound():
    for size in (6, 8):
        game = games.make("othello", size=size)
        actions, states = random_trajectories(game, jax.random.key(7), 256, game.max_game_length)
        actions, live = np.asarray(actions), ~np.asarray(states.terminated)[:-1]
        passes = (actions == game.pass_action) & live
        assert not (passes[1:] & passes[:-1]).any()
        # Each pass is followed by a placement; there are at most size^2 - 4 placements.
        placements = (live & ~passes).sum(axis=0)
        assert (placements <= size * size - 4).all()
        assert (passes.sum(axis=0) <= placements - 1).all()
        assert game.max_game_length == 2 * (size * size - 4) - 1


# ----------------------------------------------------------------------------- symmetries


def _boards(game, states) -> np.ndarray:
    """[N, size, size] signed boards of a batch of states."""
    states = jax.tree.map(np.asarray, states)
    n = states.current_player.shape[0]
    return np.stack([game.board(index(states, i)) for i in range(n)])


@pytest.mark.parametrize("size", [6, 8])
def test_symmetries_commute_with_step_on_built_positions(size):
    """transform-then-step-with-mapped-action == step-then-transform, from positions built
    with `from_board`; rot90, rot270, flip_lr and flip_ud swap the colours of the start, so the
    shared contract test cannot reach them by playing from it."""
    game = games.make("othello", size=size)
    start = game.board(game.init(jax.random.key(0)))
    by_name = {sym.name: sym for sym in game.symmetries}
    assert len(by_name) == 8
    for name in ("rot90", "rot270", "flip_lr", "flip_ud"):
        image = start.reshape(-1)[by_name[name].cell_source].reshape(start.shape)
        np.testing.assert_array_equal(image, -start)

    # Every live position of 32 random games, with the move played there.
    actions, states = random_trajectories(game, jax.random.key(11), 32, game.max_game_length)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    plies, games_ = np.nonzero(~states.terminated[:-1])
    states, actions = index(states, plies, games_), actions[plies, games_]
    assert len(actions) > 32 * (size * size - 4) * 0.8

    from_board = jax.jit(jax.vmap(game.from_board))
    step, observe = jax.jit(jax.vmap(game.step)), jax.jit(jax.vmap(game.observe))
    after = step(states, actions)
    boards, players = _boards(game, states), states.current_player
    after_boards = _boards(game, after)

    # from_board rebuilds each position exactly (rewards aside).
    rebuilt = from_board(boards, players)
    expected = states.replace(rewards=np.asarray(rebuilt.rewards))
    for ours, theirs in zip(jax.tree.leaves(rebuilt), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert not np.asarray(rebuilt.rewards).any()

    def transform(sym, boards):
        return boards.reshape(len(boards), -1)[:, sym.cell_source].reshape(boards.shape)

    for sym in game.symmetries:
        moved = from_board(transform(sym, boards), players)
        np.testing.assert_array_equal(
            observe(moved), sym.observation(observe(states)), err_msg=sym.name
        )
        np.testing.assert_array_equal(
            moved.legal_action_mask, sym.policy(states.legal_action_mask), err_msg=sym.name
        )
        moved_after = step(moved, sym.action(actions))
        np.testing.assert_array_equal(
            _boards(game, moved_after), transform(sym, after_boards), err_msg=sym.name
        )
        np.testing.assert_array_equal(
            moved_after.legal_action_mask, sym.policy(after.legal_action_mask), err_msg=sym.name
        )
        for field in ("rewards", "terminated", "current_player"):
            np.testing.assert_array_equal(
                getattr(moved_after, field), getattr(after, field), err_msg=sym.name
            )


@pytest.mark.parametrize("size", [6, 8])
def test_inline_words_play_the_same_games(size, monkeypatch):
    """Off CPU the bitboard words are plain expressions instead of scan outputs (see
    `_words_once`); forced here on CPU, they play the same games."""
    game = games.make("othello", size=size)
    actions, states = random_trajectories(game, jax.random.key(5), 32, game.max_game_length)
    monkeypatch.setattr(othello, "_words_once", othello._words_inline)
    start = game.init(jax.random.key(0))
    assert "scan" not in str(jax.make_jaxpr(game.step)(start, 0))

    @jax.jit
    def replay(actions):
        first = jax.vmap(game.init)(jax.random.split(jax.random.key(0), actions.shape[1]))

        def body(s, a):
            s = jax.vmap(game.step)(s, a)
            return s, s

        return first, jax.lax.scan(body, first, actions)[1]

    first, rest = replay(actions)
    for ours, theirs in zip(jax.tree.leaves(first), jax.tree.leaves(index(states, 0)), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    for ours, theirs in zip(jax.tree.leaves(rest), jax.tree.leaves(states), strict=True):
        np.testing.assert_array_equal(ours, theirs[1:])


# ----------------------------------------------------------------------------- host side


def test_notation_render_and_sizes():
    game = games.make("othello")
    assert game.parse_action("d3") == 19 and game.parse_action(" PASS ") == 64
    assert game.format_action(63) == "h8" and game.format_action(0) == "a1"
    small = games.make("othello", size=6)
    assert small.num_actions == 37 and small.observation_shape == (6, 6, 2)
    assert small.parse_action("f6") == 35 and small.format_action(36) == "pass"
    for bad in ("g1", "a7", "a0", "pas"):
        with pytest.raises(games.IllegalMoveError):
            small.parse_action(bad)
    state = game.init(jax.random.key(0))
    with pytest.raises(games.IllegalMoveError, match="Legal moves") as err:
        game.parse_action("pass", state)
    for move in ("d3", "c4", "f5", "e6"):
        assert move in str(err.value)
    lines = game.render(state).splitlines()
    assert lines[0].split() == list("abcdefgh")
    assert lines[4].split() == ["4", ".", ".", ".", "o", "x", ".", ".", "."]
    for bad in (7, 8.0, "8", True):
        with pytest.raises(ValueError, match=f"size must be 6 or 8, got {bad!r}"):
            games.make("othello", size=bad)
    with pytest.raises(ValueError, match="6x6 Othello board"):
        small.from_board(np.zeros((8, 8), np.int32), 0)


def _weight(row: int, col: int, size: int) -> int:
    """A cell's weight as the heuristic's docstring names them."""
    edge, next_to_edge = {0, size - 1}, {1, size - 2}
    if row in edge and col in edge:
        return 10  # a corner
    if row in next_to_edge and col in next_to_edge:
        return -5  # diagonally next to a corner
    if (row in edge and col in next_to_edge) or (col in edge and row in next_to_edge):
        return -2  # an edge square next to a corner
    return 2 if row in edge or col in edge else 1


@pytest.mark.parametrize("size", [6, 8])
def test_heuristic_is_the_weighted_disc_difference_and_counts_the_discs(size):
    game = games.make("othello", size=size)
    weights = np.array([[_weight(r, c, size) for c in range(size)] for r in range(size)])
    assert weights.sum() == (32 if size == 6 else 68) and (weights == -5).sum() == 4
    states = live_positions(game, jax.random.key(size), 8, 2 * size * size)
    boards = np.asarray(jax.vmap(game.board)(states))
    assert len(boards) > 200
    for player, sign in enumerate((1, -1)):
        expected = (np.sign(boards) * sign * weights).sum(axis=(1, 2))
        np.testing.assert_array_equal(heuristics(game, states)[:, player], expected)
    for board in boards[::10]:
        black = sum(v == 1 for v in board.flat)
        assert game.counts(board) == (black, np.count_nonzero(board) - black)
