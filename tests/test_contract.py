"""The game contract (games/core.py), checked for every game and size in GAME_CONFIGS."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import GAME_CONFIGS, config_id
from helpers import index, random_trajectories

import games

BATCH = 16


@pytest.fixture(scope="module", params=GAME_CONFIGS, ids=config_id)
def played(request):
    """A game and a batch of random games played to the end (plus a few no-op plies)."""
    name, kwargs = request.param
    game = games.make(name, **kwargs)
    length = game.max_game_length + 2
    actions, states = random_trajectories(game, jax.random.key(1), BATCH, length)
    return game, np.asarray(actions), jax.tree.map(np.asarray, states)


def test_init_and_observation(played):
    game, _, states = played
    state = game.init(jax.random.key(0))
    assert int(state.current_player) == 0 and not bool(state.terminated)
    assert state.legal_action_mask.shape == (game.num_actions,)
    assert state.legal_action_mask.dtype == jnp.bool_
    assert state.rewards.shape == (2,) and state.rewards.dtype == jnp.float32
    obs = jax.jit(jax.vmap(game.observe))(index(states, 0))
    assert obs.shape == (BATCH, *game.observation_shape) and obs.dtype == jnp.float32
    assert isinstance(game.render(state), str)
    assert np.asarray(game.board(state)).ndim == 2


def test_every_game_ends_within_max_game_length(played):
    game, _, states = played
    assert states.terminated[game.max_game_length].all()
    # A finished game has no legal move and its rewards are zero-sum and +-1 or 0.
    final = index(states, -1)
    assert not final.legal_action_mask.any()
    total = states.rewards.sum(axis=0)
    np.testing.assert_array_equal(total[:, 0], -total[:, 1])
    assert set(np.unique(total)) <= {-1.0, 0.0, 1.0}


def test_vmap_matches_single_game(played):
    game, actions, states = played
    step = jax.jit(game.step)
    for b in range(3):
        state = game.init(jax.random.key(0))
        for t in range(actions.shape[0]):
            state = step(state, actions[t, b])
            expected = index(states, t + 1, b)
            for ours, theirs in zip(jax.tree.leaves(state), jax.tree.leaves(expected), strict=True):
                np.testing.assert_array_equal(ours, theirs)


def test_step_on_terminated_state_is_a_noop(played):
    game, _, states = played
    final = index(states, -1)
    assert final.terminated.all()
    for action in (0, game.num_actions - 1):
        after = jax.jit(jax.vmap(game.step))(final, jnp.full(BATCH, action, jnp.int32))
        assert not np.asarray(after.rewards).any()
        for ours, theirs in zip(
            jax.tree.leaves(after.replace(rewards=final.rewards)),
            jax.tree.leaves(final),
            strict=True,
        ):
            np.testing.assert_array_equal(ours, theirs)


def test_illegal_action_makes_the_mover_lose(played):
    game, _, states = played
    state = index(states, 1, 0)  # one move in
    illegal = [a for a in range(game.num_actions) if not state.legal_action_mask[a]]
    step = jax.jit(game.step)
    for action in [*illegal[:2], -1, game.num_actions]:
        after = step(state, action)
        mover = int(state.current_player)
        assert bool(after.terminated)
        assert after.rewards[mover] == -1.0 and after.rewards[1 - mover] == 1.0
        assert not np.asarray(after.legal_action_mask).any()
        with pytest.raises(games.IllegalMoveError):
            game.checked_step(state, action)


def test_symmetries_commute_with_step(played):
    """transform-then-step-with-mapped-action == step-then-transform, along whole games.

    Checked for every symmetry that fixes the start position (all of them except Othello's
    colour-swapping ones, which tests/test_othello.py checks from built positions)."""
    game, actions, states = played
    syms = game.symmetries
    assert syms[0].name == "identity"
    np.testing.assert_array_equal(syms[0].action_source, np.arange(game.num_actions))
    start = game.init(jax.random.key(0))
    observe = jax.jit(jax.vmap(jax.vmap(game.observe)))
    obs = observe(states)
    checked = 0
    for sym in syms:
        assert sorted(sym.action_source.tolist()) == list(range(game.num_actions)), sym.name
        if not np.array_equal(sym.observation(game.observe(start)), game.observe(start)):
            continue
        mapped = np.asarray(sym.action_map)[actions]
        sym_states = _replay(game, jnp.asarray(mapped))
        np.testing.assert_array_equal(observe(sym_states), sym.observation(obs), err_msg=sym.name)
        np.testing.assert_array_equal(
            sym_states.legal_action_mask, sym.policy(states.legal_action_mask), err_msg=sym.name
        )
        np.testing.assert_array_equal(sym_states.rewards, states.rewards, err_msg=sym.name)
        checked += 1
    assert checked >= min(len(syms), 2)


def _replay(game, actions):
    """States [T + 1, B] of games that play the given actions from the start."""

    @jax.jit
    def run(actions):
        first = jax.vmap(game.init)(jax.random.split(jax.random.key(0), actions.shape[1]))

        def body(s, a):
            s = jax.vmap(game.step)(s, a)
            return s, s

        _, rest = jax.lax.scan(body, first, actions)
        return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)

    return run(actions)


def test_notation_round_trips(played):
    game, _, _ = played
    for action in range(game.num_actions):
        assert game.parse_action(game.format_action(action)) == action
    for bad in ["", "zz", "99 99", "-1"]:
        with pytest.raises(games.IllegalMoveError):
            game.parse_action(bad)


def test_parse_refuses_illegal_moves_listing_legal_ones(played):
    game, _, states = played
    state = index(states, 1, 0)
    illegal = [a for a in range(game.num_actions) if not state.legal_action_mask[a]]
    legal = [a for a in range(game.num_actions) if state.legal_action_mask[a]]
    if illegal:
        with pytest.raises(games.IllegalMoveError, match="Legal moves") as err:
            game.parse_action(game.format_action(illegal[0]), state)
        assert game.format_action(legal[0]) in str(err.value)
    assert game.parse_action(game.format_action(legal[0]), state) == legal[0]


def test_make_is_cached_and_refuses_unknown_names():
    assert games.make("tictactoe") is games.make("tictactoe")
    assert games.make("othello") is games.make("othello", size=8)
    assert games.make("chain_reaction", rows=5) is games.make("chain_reaction", cols=5)
    with pytest.raises(ValueError, match="bad arguments for game 'othello'"):
        games.make("othello", rows=3)
    with pytest.raises(ValueError, match="unknown game 'chess'"):
        games.make("chess")
