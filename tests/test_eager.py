"""Game functions called eagerly (outside jit), as host code and people do: no memory growth,
and actions that are not one integer in range are refused or lose, never coerced."""

from __future__ import annotations

import gc
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import GAME_CONFIGS, config_id

import games

CALLS = 300
MAX_GROWTH_MB = 20


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _first_legal(state) -> int:
    return int(np.flatnonzero(np.asarray(state.legal_action_mask))[0])


# One size of each game: a leak is in a game's code, which its sizes share.
ONE_SIZE_EACH = list({name: (name, kwargs) for name, kwargs in reversed(GAME_CONFIGS)}.values())


@pytest.mark.parametrize("config", ONE_SIZE_EACH, ids=config_id)
def test_eager_calls_do_not_grow_memory(config):
    name, kwargs = config
    game = games.make(name, **kwargs)
    key = jax.random.key(0)

    def play_one() -> None:
        state = game.init(key)
        action = _first_legal(state)
        after = game.step(state, action)
        jax.block_until_ready(game.observe(after))
        game.checked_step(state, action)
        game.legal_actions(after)
        game.board(after)
        game.render(after)
        game.format_action(action)

    for _ in range(3):  # compile once
        play_one()
    gc.collect()
    before = _rss_mb()
    for _ in range(CALLS):
        play_one()
    gc.collect()
    growth = _rss_mb() - before
    assert growth < MAX_GROWTH_MB, f"{CALLS} eager plies grew memory by {growth:.0f} MB"


# ----------------------------------------------------------------------------- actions


@pytest.fixture(scope="module")
def ttt():
    game = games.make("tictactoe")
    return game, game.init(jax.random.key(0))


@pytest.mark.parametrize("bad", [1.7, 2.0, np.float32(3), "3", True, None, [1, 2], jnp.array([1])])
def test_non_integer_actions_are_refused_naming_the_value(ttt, bad):
    game, state = ttt
    for fn in (game.step, game.checked_step):
        with pytest.raises(TypeError, match=r"integer.*0-8") as err:
            fn(state, bad)
        assert repr(bad) in str(err.value) or str(np.shape(bad)) in str(err.value)


def test_traced_float_action_is_refused_at_trace_time(ttt):
    game, state = ttt
    with pytest.raises(TypeError, match="float32"):
        jax.jit(game.step)(state, jnp.float32(1))
    with pytest.raises(TypeError, match="float32"):
        jax.vmap(game.step)(jax.tree.map(lambda x: x[None], state), jnp.ones(1, jnp.float32))


@pytest.mark.parametrize("action", [2**33, -(2**40), np.int64(2**33), np.uint64(2**32)])
def test_out_of_range_actions_lose_and_never_wrap(ttt, action):
    """2**33 and 2**32 wrap to cell 0 in 32 bits: out of range must stay out of range."""
    game, state = ttt
    after = game.step(state, action)
    assert bool(after.terminated) and after.rewards.tolist() == [-1.0, 1.0]
    with pytest.raises(games.IllegalMoveError, match=str(int(action))):
        game.checked_step(state, action)


def test_wide_actions_inside_jit_never_wrap(ttt):
    game, state = ttt
    with jax.enable_x64(True):
        for action in (np.int64(2**33), np.uint64(2**32), np.int64(-(2**32))):
            after = jax.jit(game.step)(state, action)
            assert bool(after.terminated) and after.rewards.tolist() == [-1.0, 1.0], action
        assert not bool(jax.jit(game.step)(state, np.int64(4)).terminated)
    for dtype in (jnp.int8, jnp.uint8, jnp.int16, jnp.uint32):
        after = jax.jit(game.step)(state, jnp.asarray(4, dtype))
        assert int(game.board(after)[1, 1]) == 1, dtype


def test_narrow_actions_reach_every_cell_of_a_large_board():
    """int8 holds no 144: compared in the action's own type, a 12x12 board's bound would wrap
    and a legal cell would lose the game."""
    game = games.make("chain_reaction", rows=12, cols=12)
    state = game.init(jax.random.key(0))
    for dtype in (jnp.int8, jnp.uint8, jnp.int16):
        after = jax.jit(game.step)(state, jnp.asarray(100, dtype))
        assert not bool(after.terminated), dtype
        assert int(game.board(after).reshape(-1)[100]) == 1, dtype
    after = jax.jit(game.step)(state, jnp.asarray(200, jnp.uint8))  # off the board: a loss
    assert bool(after.terminated) and after.rewards.tolist() == [-1.0, 1.0]


def test_batched_states_need_vmap(ttt):
    game, state = ttt
    batch = jax.vmap(game.init)(jax.random.split(jax.random.key(0), 4))
    with pytest.raises(ValueError, match=r"jax\.vmap\(game\.step\)"):
        game.step(batch, jnp.zeros(4, jnp.int32))
    with pytest.raises(ValueError, match=r"jax\.vmap\(game\.step\)"):
        jax.jit(game.step)(batch, jnp.zeros(4, jnp.int32))
    with pytest.raises(ValueError, match=r"one tictactoe state .*\(4, 9\)"):
        game.legal_actions(batch)
    with pytest.raises(TypeError, match=r"one integer action .*jax\.vmap"):
        jax.jit(game.step)(state, jnp.zeros(4, jnp.int32))
