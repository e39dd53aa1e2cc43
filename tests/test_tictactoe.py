"""Tic-Tac-Toe against OpenSpiel: random games step by step, boards and observations, perft."""

import jax
import numpy as np
import pyspiel
from helpers import compare_with_openspiel, index, openspiel_perft, perft, random_trajectories

import games


def test_random_games_match_openspiel():
    game = games.make("tictactoe")
    compared = compare_with_openspiel(game, pyspiel.load_game("tic_tac_toe"), batch=300, length=9)
    assert compared > 300 * 5


def test_boards_and_observations_match_openspiel():
    """Our board, and observation planes from the mover's view (its marks, then the other's),
    against OpenSpiel's printed board (x = player 0), every ply."""
    game, spiel = games.make("tictactoe"), pyspiel.load_game("tic_tac_toe")
    batch = 100
    actions, states = random_trajectories(game, jax.random.key(7), batch, 9)
    actions, states = np.asarray(actions), jax.tree.map(np.asarray, states)
    obs = np.asarray(jax.jit(jax.vmap(jax.vmap(game.observe)))(states))
    movers_seen = set()
    for b in range(batch):
        ref = spiel.new_initial_state()
        for t in range(10):
            state = index(states, t, b)
            marks = {"x": 1, "o": -1, ".": 0}
            board = np.array([[marks[ch] for ch in row] for row in str(ref).split()])
            np.testing.assert_array_equal(game.board(state), board, err_msg=f"{b}, {t}")
            sign = 1 if int(state.current_player) == 0 else -1
            movers_seen.add(sign)
            np.testing.assert_array_equal(obs[t, b, ..., 0], board == sign, err_msg=f"{b}, {t}")
            np.testing.assert_array_equal(obs[t, b, ..., 1], board == -sign, err_msg=f"{b}, {t}")
            if ref.is_terminal():
                break
            ref.apply_action(int(actions[t, b]))
    assert movers_seen == {1, -1}


def test_perft_matches_openspiel():
    game = games.make("tictactoe")
    assert perft(game, 9) == openspiel_perft(pyspiel.load_game("tic_tac_toe"), 9)
