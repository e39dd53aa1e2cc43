"""Game functions called eagerly (outside jit), as host code and people do: no memory growth,
and actions that are not one integer in range are refused or lose, never coerced."""

from __future__ import annotations

import gc
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import games

BAD_TYPES = [1.7, 2.0, np.float32(3), "3", True, None, [1, 2], jnp.array([1])]
WIDE = [2**33, -(2**40), np.int64(2**33), np.uint64(2**32)]  # 2**33, 2**32 wrap to 0 in 32 bits


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.parametrize(
    "name", ["tictactoe", "connect4", "othello", "dots_and_boxes", "chain_reaction"]
)
def test_eager_calls_do_not_grow_memory(name):
    """Each public function, called eagerly 100 times (one size a game: a leak is in a game's
    code, which its sizes share)."""
    game = games.make(name)

    def play_one() -> None:
        state = game.init(jax.random.key(0))
        action = game.legal_actions(state)[0]
        after = game.step(state, action)
        jax.block_until_ready(game.observe(after))
        game.checked_step(state, action)
        game.legal_actions(after), game.board(after), game.render(after)
        game.format_action(action), game.heuristic(after, 0)

    for calls in (3, 100):  # compile once, then measure
        gc.collect()
        before = _rss_mb()
        for _ in range(calls):
            play_one()
    gc.collect()
    assert _rss_mb() - before < 20, "100 eager plies grew memory by 20 MB or more"


@pytest.fixture(scope="module")
def ttt():
    game = games.make("tictactoe")
    return game, game.init(jax.random.key(0))


def test_non_integer_actions_are_refused_naming_the_value(ttt):
    game, state = ttt
    for bad in BAD_TYPES:
        for fn in (game.step, game.checked_step):
            with pytest.raises(TypeError, match=r"integer.*0-8") as err:
                fn(state, bad)
            assert repr(bad) in str(err.value) or str(np.shape(bad)) in str(err.value)
    with pytest.raises(TypeError, match="float32"):
        jax.jit(game.step)(state, jnp.float32(1))
    with pytest.raises(TypeError, match="float32"):
        jax.vmap(game.step)(jax.tree.map(lambda x: x[None], state), jnp.ones(1, jnp.float32))


def test_out_of_range_actions_lose_and_never_wrap(ttt):
    game, state = ttt
    for action in WIDE:
        after = game.step(state, action)
        assert bool(after.terminated) and after.rewards.tolist() == [-1.0, 1.0], action
        with pytest.raises(games.IllegalMoveError, match=str(int(action))):
            game.checked_step(state, action)
    with jax.enable_x64(True):  # inside jit too
        for action in (np.int64(2**33), np.uint64(2**32), np.int64(-(2**32))):
            after = jax.jit(game.step)(state, action)
            assert bool(after.terminated) and after.rewards.tolist() == [-1.0, 1.0], action
        assert not bool(jax.jit(game.step)(state, np.int64(4)).terminated)
    for dtype in (jnp.int8, jnp.uint8, jnp.int16, jnp.uint32):
        assert int(game.board(jax.jit(game.step)(state, jnp.asarray(4, dtype)))[1, 1]) == 1
    # int8 holds no 144: compared in the action's own type, a 12x12 board's bound would wrap
    # and a legal cell would lose the game.
    game = games.make("chain_reaction", rows=12, cols=12)
    state = game.init(jax.random.key(0))
    for dtype in (jnp.int8, jnp.uint8, jnp.int16):
        after = jax.jit(game.step)(state, jnp.asarray(100, dtype))
        assert not bool(after.terminated) and int(game.board(after).reshape(-1)[100]) == 1
    after = jax.jit(game.step)(state, jnp.asarray(200, jnp.uint8))  # off the board: a loss
    assert bool(after.terminated) and after.rewards.tolist() == [-1.0, 1.0]


def test_batched_states_need_vmap(ttt):
    game, state = ttt
    batch = jax.vmap(game.init)(jax.random.split(jax.random.key(0), 4))
    for step in (game.step, jax.jit(game.step)):
        with pytest.raises(ValueError, match=r"jax\.vmap\(game\.step\)"):
            step(batch, jnp.zeros(4, jnp.int32))
    with pytest.raises(ValueError, match=r"one tictactoe state .*\(4, 9\)"):
        game.legal_actions(batch)
    with pytest.raises(TypeError, match=r"one integer action .*jax\.vmap"):
        jax.jit(game.step)(state, jnp.zeros(4, jnp.int32))
