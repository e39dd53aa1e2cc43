"""Chain Reaction against an independent queue-based (breadth-first) implementation of the rules.

`Reference` below is written from the rules in the design notes, one explosion at a time with
a queue per level, per-player "has placed" flags and neighbour lists; it shares no code with
games/chain_reaction.py. It is compared step by step with the jitted, vmapped game on random
games of several sizes, on positions built for long chains, and on hypothesis-drawn positions.
"""

from __future__ import annotations

import collections
import functools

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import heuristics, index, live_positions, random_trajectories
from hypothesis import HealthCheck, given, settings

import games
from games import chain_reaction

SIZES = [(2, 2), (3, 3), (5, 5), (6, 9), (3, 4), (12, 12)]


class Reference:
    """Chain Reaction by the rules: orbs as (owner, count) lists, explosions from a queue."""

    def __init__(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        self.neighbours = []
        for r in range(rows):
            for c in range(cols):
                near = [(r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)]
                self.neighbours.append(
                    [i * cols + j for i, j in near if 0 <= i < rows and 0 <= j < cols]
                )
        self.count = [0] * (rows * cols)
        self.owner = [None] * (rows * cols)
        self.player = 0
        self.placed = [False, False]
        self.winner: int | None = None
        self.levels: list[np.ndarray] = []  # signed boards of the last move, one per level
        self.firings: list[int] = []  # explosions per cell during the last move

    @classmethod
    def from_board(cls, board: np.ndarray, player: int) -> Reference:
        ref = cls(*board.shape)
        for i, v in enumerate(board.reshape(-1).tolist()):
            ref.count[i] = abs(v)
            ref.owner[i] = None if v == 0 else (0 if v > 0 else 1)
        ref.player = player
        ref.placed = [ref.orbs(0) > 0, ref.orbs(1) > 0]
        return ref

    def critical(self, cell: int) -> int:
        return len(self.neighbours[cell])

    def orbs(self, player: int) -> int:
        return sum(c for c, o in zip(self.count, self.owner, strict=True) if o == player)

    def signed(self) -> np.ndarray:
        values = [c if o == 0 else -c for c, o in zip(self.count, self.owner, strict=True)]
        return np.array(values).reshape(self.rows, self.cols)

    def legal(self) -> list[int]:
        if self.winner is not None:
            return []
        return [i for i, o in enumerate(self.owner) if o is None or o == self.player]

    def eliminated(self, player: int) -> bool:
        return self.placed[player] and self.orbs(player) == 0

    def play(self, cell: int) -> None:
        assert cell in self.legal(), (cell, self.legal())
        me, opponent = self.player, 1 - self.player
        self.placed[me] = True
        self.count[cell] += 1
        self.owner[cell] = me
        self.levels = [self.signed()]
        self.firings = [0] * len(self.count)
        frontier = collections.deque([cell] if self.count[cell] >= self.critical(cell) else [])
        while frontier and not self.eliminated(opponent):
            upcoming, queued = collections.deque(), set()
            while frontier:
                c = frontier.popleft()
                self.count[c] -= self.critical(c)
                self.firings[c] += 1
                if self.count[c] == 0:
                    self.owner[c] = None
                for nb in self.neighbours[c]:
                    self.count[nb] += 1
                    self.owner[nb] = me
                for t in [c, *self.neighbours[c]]:
                    if self.count[t] >= self.critical(t) and t not in queued:
                        queued.add(t)
                        upcoming.append(t)
            # A cell queued mid-level explodes next level only if it is still critical now.
            frontier = collections.deque(t for t in upcoming if self.count[t] >= self.critical(t))
            self.levels.append(self.signed())
        if self.eliminated(opponent):
            self.winner = me
        else:
            self.player = opponent

    def rewards(self) -> np.ndarray:
        if self.winner is None:
            return np.zeros(2)
        return np.where(np.arange(2) == self.winner, 1.0, -1.0)


def make_state(board: np.ndarray, player: int) -> chain_reaction.State:
    """A live position with `player` to move on a signed board (player 0 positive)."""
    sign = 1 - 2 * player
    return chain_reaction.State(
        current_player=jnp.int32(player),
        legal_action_mask=jnp.asarray((board * sign >= 0).reshape(-1)),
        terminated=jnp.bool_(False),
        rewards=jnp.zeros(2, jnp.float32),
        board=jnp.asarray(board, jnp.int8),
    )


def assert_matches(game, state, ref: Reference, where: str, board=None) -> None:
    """`state` (its `board`, when given, computed beforehand) is `ref`'s position."""
    board = game.board(state) if board is None else board
    _assert_same(board, ref.signed(), where)
    assert bool(state.terminated) == (ref.winner is not None), where
    _assert_same(state.rewards, ref.rewards(), where)
    mask = np.zeros(game.num_actions, bool)
    mask[ref.legal()] = True
    _assert_same(state.legal_action_mask, mask, where)
    if ref.winner is None:
        assert int(state.current_player) == ref.player, where


def _assert_same(actual, expected, where: str) -> None:
    """numpy's assertion (its message names the cells that differ) where the arrays differ:
    the random games check every move, where the assertion costs ten times the comparison."""
    if not np.array_equal(actual, expected):
        np.testing.assert_array_equal(actual, expected, err_msg=where)


def critical_mass(rows: int, cols: int) -> np.ndarray:
    return np.array([len(n) for n in Reference(rows, cols).neighbours]).reshape(rows, cols)


@functools.cache
def jitted_step(game):
    return jax.jit(game.step)


@functools.cache
def jitted_observe(game):
    return jax.jit(game.observe)


# ----------------------------------------------------------------------------- random games


@pytest.mark.parametrize("rows,cols", SIZES, ids=[f"{r}x{c}" for r, c in SIZES])
def test_random_games_match_reference(rows, cols):
    game = games.make("chain_reaction", rows=rows, cols=cols)
    # Batches above 64 exercise the compacting vmap rule (games/chain_reaction.py).
    batch = 300 if rows * cols <= 25 else 80
    actions, states = random_trajectories(
        game, jax.random.key(rows * 100 + cols), batch, game.max_game_length
    )
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    boards = np.asarray(jax.jit(jax.vmap(jax.vmap(game.board)))(states))
    longest = 0
    for b in range(batch):
        ref = Reference(rows, cols)
        for t in range(game.max_game_length):
            where = f"{rows}x{cols} game {b} move {t}"
            if states.terminated[t, b]:
                break
            before, action = index(states, t, b), int(actions[t, b])
            ref.play(action)
            assert_matches(game, index(states, t + 1, b), ref, where, boards[t + 1, b])
            longest = max(longest, len(ref.levels) - 1)
            if b < 10:  # the animation helper, on a sample of games
                levels = game.chain_levels(before, action)
                assert len(levels) == len(ref.levels), where
                for ours, theirs in zip(levels, ref.levels, strict=True):
                    np.testing.assert_array_equal(ours, theirs, err_msg=where)
        assert ref.winner is not None, f"{rows}x{cols} game {b} did not end"
    assert longest < game.max_chain_levels


# ----------------------------------------------------------------------------- long chains


def saturated(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Every cell one orb short of critical mass (player 0), one opponent orb somewhere."""
    board = critical_mass(rows, cols) - 1
    board.reshape(-1)[rng.integers(rows * cols)] = -1
    return board


def snake(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Player 0's cells one orb short of critical mass along a path that winds through the
    board (full rows joined at alternating ends), the opponent's orb at its far end."""
    del rng
    mass = critical_mass(rows, cols)
    path = []
    for r in range(0, rows, 2):
        row = [(r, c) for c in (range(cols) if r % 4 == 0 else range(cols - 1, -1, -1))]
        path += row
        if r + 2 < rows:
            path.append((r + 1, row[-1][1]))
    board = np.zeros((rows, cols), int)
    for cell in path:
        board[cell] = mass[cell] - 1
    board[path[-1]] = -1
    return board


def dense(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Mostly critical cells of player 0 with a few random (signed) cells in between."""
    mass = critical_mass(rows, cols)
    board = np.where(rng.random((rows, cols)) < 0.75, mass - 1, 0)
    noise = rng.integers(-(mass - 1), mass)
    board = np.where(rng.random((rows, cols)) < 0.3, noise, board)
    if not (board < 0).any():
        board.reshape(-1)[rng.integers(rows * cols)] = -1
    return board


def long_chain_positions(rows, cols, count, seed):
    """(board, player, action) triples: built positions, for both colours."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        build = (saturated, snake, dense)[i % 3]
        board = build(rows, cols, rng)
        if not (board > 0).any():
            continue
        own = np.flatnonzero(board.reshape(-1) >= 0)
        action = int(own[0]) if build is snake else int(rng.choice(own))
        player = i % 2
        out.append((board if player == 0 else -board, player, action))
    return out


@pytest.mark.parametrize("rows,cols", SIZES, ids=[f"{r}x{c}" for r, c in SIZES])
def test_long_chains_match_reference_and_stay_far_under_the_bound(rows, cols):
    game = games.make("chain_reaction", rows=rows, cols=cols)
    cases = long_chain_positions(rows, cols, 120, seed=rows * cols)
    boards = np.stack([b for b, _, _ in cases])
    players = np.array([p for _, p, _ in cases])
    acts = np.array([a for _, _, a in cases], np.int32)
    start = jax.tree.map(lambda *xs: jnp.stack(xs), *[make_state(b, p) for b, p, _ in cases])
    batched = jax.jit(jax.vmap(game.step))(start, jnp.asarray(acts))
    single = jitted_step(game)
    diameter = rows + cols - 2
    longest = 0
    for i, (board, player, action) in enumerate(cases):
        where = f"{rows}x{cols} case {i}:\n{board}\nplayer {player} plays {action}"
        ref = Reference.from_board(board, player)
        orbs = int(np.abs(board).sum()) + 1
        ref.play(action)
        assert_matches(game, index(batched, i), ref, where)
        assert_matches(game, single(make_state(board, player), action), ref, where)
        levels = game.chain_levels(make_state(board, player), action)
        np.testing.assert_array_equal(np.stack(levels), np.stack(ref.levels), err_msg=where)
        # The argument behind `max_chain_levels`: while a cell stays unfired, no cell fires
        # more than diameter * orbs times; a chain that settles leaves a cell unfired.
        if min(ref.firings) == 0:
            assert max(ref.firings) <= diameter * orbs, where
        else:
            assert ref.winner is not None, where
        longest = max(longest, len(ref.levels) - 1)
    assert boards.shape[0] == players.shape[0] > 60
    assert longest >= rows + cols - 2, "the built positions should produce long chains"
    assert longest * 10 < game.max_chain_levels


def test_the_accelerator_loop_matches_the_compacting_loop():
    """The vmap rule runs a plain batched loop on accelerators: check it here on the CPU."""
    game = games.make("chain_reaction", rows=6, cols=9)
    cases = long_chain_positions(6, 9, 300, seed=7)
    boards = []
    for board, player, action in cases:
        mover = board * (1 - 2 * player)
        mover.reshape(-1)[action] += 1
        boards.append(mover)
    boards = jnp.asarray(np.stack(boards), jnp.int8)
    level = jnp.zeros(boards.shape[0], jnp.int32)
    mass, cap = jnp.asarray(game.mass), game.max_chain_levels
    results = [
        jax.jit(chain_reaction._resolve_batched, static_argnames=("cap", "compact"))(
            boards, level, mass, cap=cap, compact=compact
        )
        for compact in (True, False)
    ]
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert int(results[0][1].max()) > 10


def test_nested_vmap_matches_flat_vmap():
    game = games.make("chain_reaction", rows=5, cols=5)
    _, states = random_trajectories(game, jax.random.key(3), 400, 40)
    flat = index(states, slice(None, None, 4))
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), flat)
    keys = jax.random.split(jax.random.key(4), flat.current_player.shape[0])
    actions = jax.vmap(lambda k, m: jax.random.categorical(k, jnp.where(m, 0.0, -jnp.inf)))(
        keys, flat.legal_action_mask
    )
    actions = jnp.where(flat.legal_action_mask.any(-1), actions, 0).astype(jnp.int32)
    expected = jax.jit(jax.vmap(game.step))(flat, actions)
    nested_in = jax.tree.map(lambda x: x.reshape(4, -1, *x.shape[1:]), (flat, actions))
    nested = jax.jit(jax.vmap(jax.vmap(game.step)))(*nested_in)
    for ours, theirs in zip(jax.tree.leaves(nested), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(ours).reshape(theirs.shape), theirs)


# ----------------------------------------------------------------------------- properties


@st.composite
def positions(draw, sizes=((2, 2), (3, 3), (3, 4), (5, 5), (4, 7))):
    """A stable board where both players have orbs, the player to move and a legal action."""
    rows, cols = draw(st.sampled_from(sizes))
    mass = critical_mass(rows, cols)
    values = draw(st.lists(st.integers(-3, 3), min_size=rows * cols, max_size=rows * cols))
    board = np.clip(np.array(values).reshape(rows, cols), -(mass - 1), mass - 1)
    flat = board.reshape(-1)  # both players have orbs: a reachable kind of position
    mine = draw(st.integers(0, flat.size - 1))
    theirs = (mine + 1 + draw(st.integers(0, flat.size - 2))) % flat.size
    flat[mine], flat[theirs] = max(flat[mine], 1), min(flat[theirs], -1)
    player = draw(st.integers(0, 1))
    legal = np.flatnonzero(flat * (1 - 2 * player) >= 0)
    return board, player, int(legal[draw(st.integers(0, len(legal) - 1))])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions())
def test_any_stable_position_matches_reference(position):
    board, player, action = position
    game = games.make("chain_reaction", rows=board.shape[0], cols=board.shape[1])
    ref = Reference.from_board(board, player)
    ref.play(action)
    after = jitted_step(game)(make_state(board, player), action)
    assert_matches(game, after, ref, f"\n{board}\nplayer {player} plays {action}")


def orbs_against(board: np.ndarray, sign: int) -> int:
    """The orbs of the player whose orbs have the sign opposite to `sign`."""
    return int(np.abs(board[board * sign < 0]).sum())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([(2, 2), (3, 3), (3, 4), (5, 5)]),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=70),
)
def test_invariants_along_games(size, choices):
    rows, cols = size
    game = games.make("chain_reaction", rows=rows, cols=cols)
    mass = critical_mass(rows, cols)
    step, observe = jitted_step(game), jitted_observe(game)
    state = game.init(jax.random.key(0))
    for move, choice in enumerate(choices):
        legal = game.legal_actions(state)
        if bool(state.terminated):
            assert not legal
            break
        before, mover = game.board(state), int(state.current_player)
        sign = 1 - 2 * mover
        np.testing.assert_array_equal(np.flatnonzero((before * sign).reshape(-1) >= 0), legal)
        state = step(state, legal[choice % len(legal)])
        after = game.board(state)
        rewards = np.asarray(state.rewards)
        assert rewards.sum() == 0
        # Ownership: every cell that changed now holds the mover's orbs (or none).
        changed = after != before
        assert (after[changed] * sign >= 0).all()
        assert (np.abs(after[~changed]) == np.abs(before[~changed])).all()
        assert orbs_against(after, sign) <= orbs_against(before, sign)
        if bool(state.terminated):
            assert move >= 2 and orbs_against(after, sign) == 0
            np.testing.assert_array_equal(rewards, np.where(np.arange(2) == mover, 1, -1))
            assert not np.asarray(state.legal_action_mask).any()
        else:
            assert np.abs(after).sum() == move + 1  # one orb per move, explosions conserve
            assert (np.abs(after) < mass).all()  # stable: nothing left at critical mass
            assert int(state.current_player) == 1 - mover and not rewards.any()
            obs = np.asarray(observe(state))
            own = after * -sign  # the next mover's orbs positive
            for k in range(3):
                np.testing.assert_array_equal(obs[..., k], own == k + 1)
                np.testing.assert_array_equal(obs[..., 3 + k], own == -(k + 1))
            np.testing.assert_array_equal(obs[..., 6], own == mass - 1)
            np.testing.assert_array_equal(obs[..., 7], own == -(mass - 1))


# ----------------------------------------------------------------------------- the rest


def test_lengths_and_bounds_follow_the_board():
    for rows, cols in SIZES:
        game = games.make("chain_reaction", rows=rows, cols=cols)
        capacity = int((critical_mass(rows, cols) - 1).sum())
        assert game.max_game_length == capacity + 1
        n, diameter = rows * cols, rows + cols - 2
        assert game.max_chain_levels == (n - 1) * diameter * (capacity + 1) + 1
        assert game.num_actions == n and game.observation_shape == (rows, cols, 8)
        assert len(game.symmetries) == (8 if rows == cols else 4)
    assert games.make("chain_reaction").num_actions == 25


def test_the_opponent_loses_only_after_placing():
    game = games.make("chain_reaction", rows=2, cols=2)
    step = jitted_step(game)
    state = step(game.init(jax.random.key(0)), 0)  # player 1 has no orbs yet and does not lose
    assert not bool(state.terminated) and int(state.current_player) == 1
    state = step(step(state, 1), 0)  # captures 1's only orb: over at once,
    assert bool(state.terminated)  # though the captured cell is at critical mass
    np.testing.assert_array_equal(game.board(state), [[0, 2], [1, 0]])
    np.testing.assert_array_equal(state.rewards, [1.0, -1.0])


@pytest.mark.parametrize("bad", [1, 13, 0, -5, "5", 5.0, True])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError, match="rows") as err:
        games.make("chain_reaction", rows=bad)
    assert repr(bad) in str(err.value) or str(bad) in str(err.value)
    with pytest.raises(ValueError, match="cols"):
        chain_reaction.ChainReaction(cols=bad)


def test_notation_and_render():
    game = games.make("chain_reaction", rows=3, cols=4)
    assert game.parse_action("1,1") == 0
    assert game.parse_action(" 2 , 3 ") == game.parse_action("2 3") == 6
    assert game.format_action(11) == "3,4"
    for bad, reason in [
        ("0,1", "row 0"),
        ("4,1", "row 4"),
        ("1,5", "column 5"),
        ("a,b", "row,col"),
    ]:
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
    states = live_positions(game, jax.random.key(3), 16, 40)
    boards = np.asarray(jax.vmap(game.board)(states))
    assert len(boards) > 200 and (boards < -1).any() and (boards > 1).any()
    values = heuristics(game, states)
    for board, value in zip(boards, values, strict=True):
        orbs = [sum(abs(int(v)) for v in board.flat if v * sign > 0) for sign in (1, -1)]
        assert game.counts(board) == tuple(orbs)
        np.testing.assert_array_equal(value, [orbs[0] - orbs[1], orbs[1] - orbs[0]])
