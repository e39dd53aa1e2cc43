"""Tic-Tac-Toe is small enough to check whole: plain minimax over every reachable position
labels the shipped solver set (azjax/data/tictactoe_positions.json) and judges every move of
the shipped model, with its search and with its raw policy."""

import functools

import jax
import numpy as np
import pytest
from helpers import compile_optimised, load_script

import games
from azjax import agents, model, solver, zoo

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
REACHABLE = 4520  # non-terminal positions reachable from the empty board


def _play(board: tuple[int, ...], cell: int) -> tuple[int, ...]:
    """The board after the mover (1) takes `cell`, from the other player's view (signs swapped)."""
    return tuple(-1 if i == cell else -c for i, c in enumerate(board))


def _ended(board: tuple[int, ...]) -> int | None:
    """The result for the player to move once the last move ended the game (-1 lost, 0 drawn);
    None while it goes on."""
    if any(all(board[c] == -1 for c in line) for line in LINES):
        return -1
    return None if 0 in board else 0


@functools.cache
def _result(board: tuple[int, ...]) -> int:
    """The game-theoretic result for the player to move: 1 won, 0 drawn, -1 lost."""
    ended = _ended(board)
    if ended is not None:
        return ended
    return max(-_result(_play(board, c)) for c in range(9) if board[c] == 0)


def _board(moves) -> tuple[int, ...]:
    board = (0,) * 9
    for move in moves:
        board = _play(board, move)
    return board


def _reachable() -> set[tuple[int, ...]]:
    seen, frontier = set(), [(0,) * 9]
    while frontier:
        board = frontier.pop()
        if board in seen or _ended(board) is not None:
            continue
        seen.add(board)
        frontier.extend(_play(board, c) for c in range(9) if board[c] == 0)
    return seen


@pytest.fixture(scope="module")
def positions():
    return solver.TICTACTOE.load()


def test_the_shipped_set_is_every_position_labelled_by_minimax(positions):
    boards = [_board(p.moves) for p in positions]
    assert len(set(boards)) == len(boards) == REACHABLE
    assert set(boards) == _reachable()
    for p, board in zip(positions, boards, strict=True):
        signs = [None if s is None else int(np.sign(s)) for s in p.scores]
        want = [None if board[c] else -_result(_play(board, c)) for c in range(9)]
        assert signs == want, p.moves


def test_the_script_writes_the_shipped_set(tmp_path, capsys):
    """The scores' sizes (how soon a win or loss comes) are the script's: it still writes them."""
    load_script("make_tictactoe_positions").main(["--out", str(tmp_path / "ttt.json")])
    assert (tmp_path / "ttt.json").read_bytes() == solver.TICTACTOE.path.read_bytes()
    assert "wrote 4520 positions" in capsys.readouterr().out


@pytest.mark.parametrize("spec", ["zoo:tictactoe", "policy-zoo:tictactoe"])
def test_the_zoo_model_keeps_the_result_in_every_position(positions, spec, monkeypatch):
    """With the search its card names (agents.make("zoo:...")) and with its policy alone, the
    shipped model's move keeps a won position won and a drawn one drawn, everywhere."""
    monkeypatch.delenv(zoo.ENV, raising=False)  # the shipped zoo
    game = games.make("tictactoe")
    found = model.load("zoo:tictactoe", game)
    search = found.config.playing_search()  # what agents.make("zoo:tictactoe") searches with
    assert found.card["search"] == {"algorithm": "gumbel", "simulations": 64}
    assert (search.algorithm, search.num_simulations) == ("gumbel", 64)
    agent = agents.make(spec, game)
    states = solver.replay(game, positions)
    keys = jax.random.split(jax.random.key(0), len(positions))
    moves = np.asarray(compile_optimised(jax.vmap(agent.__call__), states, keys)(states, keys))
    lost = []
    for p, move in zip(positions, moves, strict=True):
        board = _board(p.moves)
        if board[move] or -_result(_play(board, int(move))) != _result(board):
            lost.append((p.moves, int(move)))
    assert not lost, f"{spec} gives up the result in {len(lost)} positions, e.g. {lost[:5]}"
