"""Chain Reaction against `Reference`, an independent queue-based (breadth-first) implementation
of the rules written here (tests/test_rules.py plays it in lockstep with random games), on
positions built for long chains; then the rest of the game."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import heuristics, index, live_positions, random_trajectories

import games
from games import chain_reaction


class Reference:
    """Chain Reaction by the rules, with OpenSpiel's state interface: orbs as counts and owners
    per cell, per-player "has placed" flags, explosions from a queue, one level at a time."""

    def __init__(self, rows: int, cols: int, board: np.ndarray | None = None, player: int = 0):
        self.rows, self.cols, self.player, self.winner = rows, cols, player, None
        self.neighbours = [
            [
                i * cols + j
                for i, j in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1))
                if 0 <= i < rows and 0 <= j < cols
            ]
            for r in range(rows)
            for c in range(cols)
        ]
        flat = np.zeros(rows * cols, int) if board is None else np.asarray(board).reshape(-1)
        self.count = [abs(int(v)) for v in flat]
        self.owner = [None if v == 0 else int(v < 0) for v in flat]
        self.placed = [self.orbs(0) > 0, self.orbs(1) > 0]
        self.levels: list[np.ndarray] = []  # signed boards of the last move, one per level

    def orbs(self, player: int) -> int:
        return sum(c for c, o in zip(self.count, self.owner, strict=True) if o == player)

    def board(self) -> np.ndarray:
        values = [c if o == 0 else -c for c, o in zip(self.count, self.owner, strict=True)]
        return np.array(values).reshape(self.rows, self.cols)

    def current_player(self) -> int:
        return self.player

    def is_terminal(self) -> bool:
        return self.winner is not None

    def returns(self) -> list[float]:
        return [0.0, 0.0] if self.winner is None else [1.0 - 2 * self.winner, 2 * self.winner - 1.0]

    def legal_actions(self) -> list[int]:
        if self.winner is not None:
            return []
        return [i for i, o in enumerate(self.owner) if o is None or o == self.player]

    def apply_action(self, cell: int) -> None:
        assert cell in self.legal_actions(), (cell, self.legal_actions())
        me, opponent = self.player, 1 - self.player
        self.placed[me] = True
        self.count[cell] += 1
        self.owner[cell] = me
        self.levels = [self.board()]

        def critical(c: int) -> bool:
            return self.count[c] >= len(self.neighbours[c])

        def eliminated() -> bool:
            return self.placed[opponent] and self.orbs(opponent) == 0

        frontier = collections.deque([cell] if critical(cell) else [])
        while frontier and not eliminated():
            upcoming = []
            while frontier:
                c = frontier.popleft()
                self.count[c] -= len(self.neighbours[c])
                if self.count[c] == 0:
                    self.owner[c] = None
                for nb in self.neighbours[c]:
                    self.count[nb] += 1
                    self.owner[nb] = me
                upcoming += [t for t in [c, *self.neighbours[c]] if critical(t)]
            # A cell queued mid-level explodes next level only if it is still critical now.
            frontier = collections.deque(t for t in dict.fromkeys(upcoming) if critical(t))
            self.levels.append(self.board())
        if eliminated():
            self.winner = me
        else:
            self.player = opponent


def make_state(board: np.ndarray, player: int) -> chain_reaction.State:
    """A live position with `player` to move on a signed board (player 0 positive)."""
    return chain_reaction.State(
        current_player=jnp.int32(player),
        legal_action_mask=jnp.asarray((board * (1 - 2 * player) >= 0).reshape(-1)),
        terminated=jnp.bool_(False),
        rewards=jnp.zeros(2, jnp.float32),
        board=jnp.asarray(board, jnp.int8),
    )


def assert_matches(state, ref: Reference, where: str) -> None:
    """`state` is `ref`'s position."""
    np.testing.assert_array_equal(np.asarray(state.board), ref.board(), err_msg=where)
    assert bool(state.terminated) == ref.is_terminal(), where
    np.testing.assert_array_equal(state.rewards, ref.returns(), err_msg=where)
    mask = np.zeros(ref.rows * ref.cols, bool)
    mask[ref.legal_actions()] = True
    np.testing.assert_array_equal(state.legal_action_mask, mask, err_msg=where)
    if not ref.is_terminal():
        assert int(state.current_player) == ref.player, where


def critical_mass(rows: int, cols: int) -> np.ndarray:
    return np.array([len(n) for n in Reference(rows, cols).neighbours]).reshape(rows, cols)


# ----------------------------------------------------------------------------- long chains


def long_chain_positions(rows: int, cols: int, count: int, seed: int):
    """(board, player, action) triples, for both colours: every cell of the mover one orb
    short of critical mass (saturated), such cells along a path winding through the board
    (snake), or mostly such cells with random ones in between (dense); an opponent orb each."""
    rng = np.random.default_rng(seed)
    mass = critical_mass(rows, cols)
    path = []  # the snake: full rows joined at alternating ends
    for r in range(0, rows, 2):
        row = [(r, c) for c in (range(cols) if r % 4 == 0 else range(cols - 1, -1, -1))]
        path += row + ([(r + 1, row[-1][1])] if r + 2 < rows else [])
    out = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            board = mass - 1
            board.reshape(-1)[rng.integers(rows * cols)] = -1
        elif kind == 1:
            board = np.zeros((rows, cols), int)
            for cell in path:
                board[cell] = mass[cell] - 1
            board[path[-1]] = -1
        else:
            board = np.where(rng.random((rows, cols)) < 0.75, mass - 1, 0)
            noise = rng.integers(-(mass - 1), mass)
            board = np.where(rng.random((rows, cols)) < 0.3, noise, board)
            board.reshape(-1)[rng.integers(rows * cols)] = -1
        own = np.flatnonzero(board.reshape(-1) >= 0)
        if (board > 0).any():
            action = int(own[0]) if kind == 1 else int(rng.choice(own))
            out.append((board * (1 - 2 * (i % 2)), i % 2, action))
    return out


@pytest.mark.parametrize(("rows", "cols"), [(2, 2), (3, 4), (6, 9), (12, 12)])
def test_long_chains_match_reference_and_stay_far_under_the_bound(rows, cols):
    """Batched (over 64 boards: the compacting vmap rule on CPU, and the plain loop it runs
    elsewhere), one at a time and as `chain_levels`; the chains stay far under
    `max_chain_levels`, a bound of the board."""
    game = games.make("chain_reaction", rows=rows, cols=cols)
    cases = long_chain_positions(rows, cols, 100, seed=rows * cols)
    start = jax.tree.map(lambda *xs: jnp.stack(xs), *[make_state(b, p) for b, p, _ in cases])
    batched = jax.jit(jax.vmap(game.step))(start, jnp.asarray([a for _, _, a in cases]))
    placed = np.stack(
        [b * (1 - 2 * p) + (np.arange(b.size) == a).reshape(b.shape) for b, p, a in cases]
    )
    resolve = jax.jit(chain_reaction._resolve_batched, static_argnames=("cap", "compact"))
    level, mass = jnp.zeros(len(cases), jnp.int32), jnp.asarray(game.mass)
    plain, _ = resolve(
        jnp.asarray(placed, jnp.int8), level, mass, cap=game.max_chain_levels, compact=False
    )
    longest = 0
    for i, (board, player, action) in enumerate(cases):
        where = f"{rows}x{cols} case {i}:\n{board}\nplayer {player} plays {action}"
        ref = Reference(rows, cols, board, player)
        ref.apply_action(action)
        assert_matches(index(batched, i), ref, where)
        np.testing.assert_array_equal(plain[i] * (1 - 2 * player), ref.board(), err_msg=where)
        if i % 10 == 0:
            assert_matches(game.step(make_state(board, player), action), ref, where)
        levels = game.chain_levels(make_state(board, player), action)
        np.testing.assert_array_equal(np.stack(levels), np.stack(ref.levels), err_msg=where)
        longest = max(longest, len(ref.levels) - 1)
    assert len(cases) > 64
    assert longest >= rows + cols - 2, "the built positions should produce long chains"
    capacity = int((critical_mass(rows, cols) - 1).sum())  # the orbs of a stable board
    assert game.max_game_length == capacity + 1
    n, diameter = rows * cols, rows + cols - 2
    assert game.max_chain_levels == (n - 1) * diameter * (capacity + 1) + 1 > longest * 10


def test_nested_vmap_matches_flat_vmap():
    game = games.make("chain_reaction", rows=5, cols=5)
    actions, states = random_trajectories(game, jax.random.key(3), 96, game.max_game_length)
    flat, acts = index(states, slice(0, -1, 4)), actions[::4]
    expected = jax.jit(jax.vmap(jax.vmap(game.step)))(flat, acts)
    merged = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), (flat, acts))
    once = jax.jit(jax.vmap(game.step))(*merged)
    for ours, theirs in zip(jax.tree.leaves(once), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(ours).reshape(theirs.shape), theirs)


# ----------------------------------------------------------------------------- the rest


def test_sizes_notation_and_render():
    for bad in (1, 13, -5, "5", 5.0, True):
        with pytest.raises(ValueError, match=f"chain_reaction rows .*{bad!r}"):
            games.make("chain_reaction", rows=bad)
        with pytest.raises(ValueError, match="chain_reaction cols"):
            chain_reaction.ChainReaction(cols=bad)
    game = games.make("chain_reaction", rows=3, cols=4)
    assert (game.num_actions, game.observation_shape) == (12, (3, 4, 8))
    assert game.parse_action("1,1") == 0
    assert game.parse_action(" 2 , 3 ") == game.parse_action("2 3") == 6
    assert game.format_action(11) == "3,4"
    for bad, reason in [("0,1", "row 0"), ("4,1", "row 4"), ("1,5", "column 5"), ("a", "row,col")]:
        with pytest.raises(games.IllegalMoveError, match=reason):
            game.parse_action(bad)
    state = make_state(np.array([[2, 0, 0, 0], [0, -3, 0, 0], [0, 0, 0, 1]]), player=1)
    with pytest.raises(games.IllegalMoveError, match="Legal moves: 1,2"):
        game.parse_action("1,1", state)
    with pytest.raises(games.IllegalMoveError):
        game.chain_levels(state, 0)
    assert game.render(state).splitlines() == [
        "   1  2  3  4",
        "1 2x  .  .  .",
        "2  . 3o  .  .",
        "3  .  .  . 1x",
    ]


def test_heuristic_is_the_orb_difference_and_counts_the_orbs():
    game = games.make("chain_reaction", rows=3, cols=4)
    states = live_positions(game, jax.random.key(3), 96, game.max_game_length)
    boards = np.asarray(jax.vmap(game.board)(states))
    assert (boards < -1).any() and (boards > 1).any()
    for board, value in zip(boards[::5], heuristics(game, states)[::5], strict=True):
        orbs = [sum(abs(int(v)) for v in board.flat if v * sign > 0) for sign in (1, -1)]
        assert game.counts(board) == tuple(orbs)
        np.testing.assert_array_equal(value, [orbs[0] - orbs[1], orbs[1] - orbs[0]])
