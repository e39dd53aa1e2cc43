"""Othello: `Reference`, an independent plain-Python implementation written here from the rules
(tests/test_rules.py plays it in lockstep with 6x6 games, OpenSpiel with 8x8 ones), the
colour-swapping symmetries on built positions, and the host side."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import heuristics, index, live_positions, random_trajectories

import games
from games import othello

# The eight directions a line of discs can run in.
DIRECTIONS = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]


class Reference:
    """Othello from the rules, with OpenSpiel's state interface: Black (+1, player 0) moves
    first; a disc must bracket at least one line of opposing discs, which all turn; a player
    who cannot place passes; the game ends when neither can; most discs wins."""

    def __init__(self, size: int) -> None:
        self.size, h = size, size // 2
        self.cells = np.zeros((size, size), int)
        self.cells[h - 1 : h + 1, h - 1 : h + 1] = [[-1, 1], [1, -1]]
        self.player = 0
        self.placements = [self._placements(0), self._placements(1)]

    def _flips(self, row: int, col: int, sign: int) -> list[tuple[int, int]]:
        if self.cells[row, col] != 0:
            return []
        flips, n = [], self.size
        for dr, dc in DIRECTIONS:
            line, r, c = [], row + dr, col + dc
            while 0 <= r < n and 0 <= c < n and self.cells[r, c] == -sign:
                line.append((r, c))
                r, c = r + dr, c + dc
            if line and 0 <= r < n and 0 <= c < n and self.cells[r, c] == sign:
                flips += line
        return flips

    def _placements(self, player: int) -> list[int]:
        n, sign = self.size, 1 - 2 * player
        return [r * n + c for r in range(n) for c in range(n) if self._flips(r, c, sign)]

    def board(self) -> np.ndarray:
        return self.cells

    def current_player(self) -> int:
        return self.player

    def is_terminal(self) -> bool:
        return not self.placements[0] and not self.placements[1]

    def returns(self) -> list[float]:
        return [np.sign(self.cells.sum()), -np.sign(self.cells.sum())]

    def legal_actions(self) -> list[int]:
        pass_ = [] if self.is_terminal() else [self.size * self.size]
        return self.placements[self.player] or pass_

    def apply_action(self, action: int) -> None:
        assert action in self.legal_actions(), (action, self.legal_actions())
        if action != self.size * self.size:
            row, col = divmod(action, self.size)
            sign = 1 - 2 * self.player
            for r, c in [*self._flips(row, col, sign), (row, col)]:
                self.cells[r, c] = sign
        self.player = 1 - self.player
        self.placements = [self._placements(0), self._placements(1)]


@pytest.mark.parametrize("size", [6, 8])
def test_symmetries_commute_with_step_on_built_positions(size):
    """transform-then-step-with-mapped-action == step-then-transform, from positions built with
    `from_board`: rot90, rot270, flip_lr and flip_ud swap the colours of the start, so the
    shared contract cannot reach them by playing from it."""
    game = games.make("othello", size=size)
    start = np.asarray(game.board(game.init(jax.random.key(0)))).ravel()
    syms = {sym.name: sym for sym in game.symmetries}
    for name in ("rot90", "rot270", "flip_lr", "flip_ud"):
        np.testing.assert_array_equal(start[syms[name].cell_source], -start)
    # 512 live positions of random games, with the move played there.
    actions, states = random_trajectories(game, jax.random.key(11), 96, game.max_game_length)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    live = np.argwhere(~states.terminated[:-1])
    plies, games_ = np.random.default_rng(size).choice(live, 512, replace=False).T
    states, actions = index(states, plies, games_), actions[plies, games_]
    from_board, step = jax.jit(jax.vmap(game.from_board)), jax.jit(jax.vmap(game.step))
    boards, observe = jax.jit(jax.vmap(game.board)), jax.jit(jax.vmap(game.observe))
    rebuilt = from_board(boards(states), states.current_player)  # exactly, with no rewards
    no_rewards = states.replace(rewards=0 * states.rewards)
    for ours, theirs in zip(jax.tree.leaves(rebuilt), jax.tree.leaves(no_rewards), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    after = step(states, actions)
    for sym in syms.values():

        def turn(board, source=sym.cell_source):
            return board.reshape(len(board), -1)[:, source].reshape(board.shape)

        moved = from_board(turn(boards(states)), states.current_player)
        moved_after = step(moved, sym.action(actions))
        for ours, theirs in [
            (observe(moved), sym.observation(observe(states))),
            (moved.legal_action_mask, sym.policy(states.legal_action_mask)),
            (boards(moved_after), turn(boards(after))),
            (moved_after.legal_action_mask, sym.policy(after.legal_action_mask)),
            (moved_after.rewards, after.rewards),
            (moved_after.terminated, after.terminated),
            (moved_after.current_player, after.current_player),
        ]:
            np.testing.assert_array_equal(ours, theirs, err_msg=sym.name)


def test_inline_words_play_the_same_games(monkeypatch):
    """Off CPU the bitboard words are plain expressions instead of scan outputs
    (`_words_once`); forced here on CPU, they play the same games."""
    game = games.make("othello")
    actions, states = random_trajectories(game, jax.random.key(5), 96, game.max_game_length)
    monkeypatch.setattr(othello, "_words_once", othello._words_inline)
    assert "scan" not in str(jax.make_jaxpr(game.step)(game.init(jax.random.key(0)), 0))

    @jax.jit
    def replay(actions):
        first = jax.vmap(game.init)(jax.random.split(jax.random.key(0), actions.shape[1]))
        rest = jax.lax.scan(lambda s, a: (jax.vmap(game.step)(s, a),) * 2, first, actions)[1]
        return jax.tree.map(lambda x, y: jax.numpy.concatenate([x[None], y]), first, rest)

    for ours, theirs in zip(jax.tree.leaves(replay(actions)), jax.tree.leaves(states), strict=True):
        np.testing.assert_array_equal(ours, theirs)


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
    assert all(move in str(err.value) for move in ("d3", "c4", "f5", "e6"))
    lines = game.render(state).splitlines()
    assert lines[0].split() == list("abcdefgh")
    assert lines[4].split() == ["4", ".", ".", ".", "o", "x", ".", ".", "."]
    for bad in (7, 8.0, "8", True):
        with pytest.raises(ValueError, match=f"size must be 6 or 8, got {bad!r}"):
            games.make("othello", size=bad)
    with pytest.raises(ValueError, match="6x6 Othello board"):
        small.from_board(np.zeros((8, 8), np.int32), 0)


@pytest.mark.parametrize("size", [6, 8])
def test_heuristic_is_the_weighted_disc_difference_and_counts_the_discs(size):
    """Corners 10, cells diagonally next to a corner -5, edge cells next to a corner -2, other
    edge cells 2, inner cells 1; `counts` the discs of each colour."""
    game = games.make("othello", size=size)
    edge, near = {0, size - 1}, {1, size - 2}

    def weight(r: int, c: int) -> int:
        if r in edge and c in edge:
            return 10
        if r in near and c in near:
            return -5
        if (r in edge and c in near) or (c in edge and r in near):
            return -2
        return 2 if r in edge or c in edge else 1

    weights = np.array([[weight(r, c) for c in range(size)] for r in range(size)])
    states = live_positions(game, jax.random.key(size), 96, game.max_game_length)
    boards = np.asarray(jax.vmap(game.board)(states))
    for player, sign in enumerate((1, -1)):
        expected = (np.sign(boards) * sign * weights).sum(axis=(1, 2))
        np.testing.assert_array_equal(heuristics(game, states)[:, player], expected)
    for board in boards[::50]:
        assert game.counts(board) == ((board == 1).sum(), (board == -1).sum())
