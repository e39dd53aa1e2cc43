"""Tic-Tac-Toe against OpenSpiel: random games step by step, and perft counts."""

import pyspiel
from helpers import compare_with_openspiel, openspiel_perft, perft

import games


def test_random_games_match_openspiel():
    game = games.make("tictactoe")
    compared = compare_with_openspiel(game, pyspiel.load_game("tic_tac_toe"), batch=300, length=9)
    assert compared > 300 * 5


def test_perft_matches_openspiel():
    game = games.make("tictactoe")
    assert perft(game, 9) == openspiel_perft(pyspiel.load_game("tic_tac_toe"), 9)
