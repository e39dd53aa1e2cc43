"""Terminal play (`azjax-play`), driven through stdin, and the game under it (azjax.session):
turns, bad input, undo, hints, whole games, the saved record and Ctrl-C (bad command lines:
tests/test_exit_status.py)."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import ROOT

import games
from azjax import session as session_module
from azjax.cli import play
from azjax.session import Session

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
TTT = ["--game", "tictactoe", "--opponent", "random"]
TTT_GAME = games.make("tictactoe")


def tictactoe_outcome(moves: list[str]) -> str:
    """Replay Tic-Tac-Toe moves (cells 1-9, X first) by plain rules: "X", "O" or "draw";
    fails on an occupied cell, a move after the end or a game not ended."""
    board = [""] * 9
    for i, move in enumerate(moves):
        cell = int(move) - 1
        assert board[cell] == "", f"move {i + 1} ({move}) is on an occupied cell"
        board[cell] = "XO"[i % 2]
        won = any(board[a] == board[b] == board[c] == board[cell] for a, b, c in LINES)
        if won or all(board):
            assert i == len(moves) - 1, "moves after the end of the game"
            return board[cell] if won else "draw"
    raise AssertionError(f"the game {moves} has not ended")


def drive(lines: str, human: int = 0, seed: int = 0, name: str = "tictactoe", **kwargs):
    session = Session(games.make(name, **kwargs), "random", human, seed)
    out = io.StringIO()
    result = play.run(session, io.StringIO(lines), out, echo=True)
    return session, result, out.getvalue()


def agent_moves(text: str) -> list[str]:
    return re.findall(r"plays (\S+)\n", text)


def _after(moves: list[int]):
    state = TTT_GAME.init(jax.random.key(0))
    for action in moves:
        state = TTT_GAME.checked_step(state, action)
    return state


@pytest.mark.parametrize(
    ("moves", "human", "result"),
    [
        ([0, 1, 2, 4, 3, 5, 7, 6, 8], 0, "draw"),
        ([0, 1, 2, 4, 3, 5, 7, 6, 8], 1, "draw"),
        ([0, 3, 1, 4, 2], 0, "win"),  # X takes the top row
        ([0, 3, 1, 4, 2], 1, "loss"),
        ([0, 3, 1, 4, 8, 5], 1, "win"),  # O takes the middle row
    ],
)
def test_result_is_the_persons_view_of_the_end(moves, human, result):
    game = Session(TTT_GAME, "random", human)
    assert game.result() is None
    game.states.append(_after(moves))
    assert game.over and game.result() == result


def test_a_person_moves_only_on_their_turn():
    game = Session(TTT_GAME, "random", human=1)  # the agent opens; nothing moved yet
    with pytest.raises(games.IllegalMoveError, match="it is not your turn"):
        game.play(4)
    game.reply()
    assert game.human_to_move and game.play(game.game.legal_actions(game.state)[0]).by == "human"
    game.states.append(_after([0, 3, 1, 4, 2]))
    with pytest.raises(games.IllegalMoveError, match="the game is over"):
        game.play(8)


def test_advice_lists_the_top_moves_above_one_percent(monkeypatch):
    game = Session(TTT_GAME, "random", human=0)
    for policy, expected in [
        ([0.6, 0.25, 0.1, 0.05, 0, 0, 0, 0, 0], ["1", "2", "3"]),  # the top three
        ([0.0, 0.7, 0.0, 0.295, 0.005, 0, 0, 0, 0], ["2", "4"]),  # 0.5% is noise
        ([0.0] * 8 + [0.004], ["9"]),  # all noise: the best one still
    ]:
        analysis = lambda state, key, p=policy: (np.array(p), 0.25)  # noqa: E731
        monkeypatch.setattr(session_module, "compiled_analysis", lambda game, spec, a=analysis: a)
        advice = game.advice()
        assert [move for move, _ in advice.moves] == expected and advice.value == 0.25


def test_bad_input_is_explained_and_the_game_goes_on():
    session, result, out = drive("foo\n0\n5\n\n5\nquit\n")
    assert result is None  # quit
    assert "'foo' is not a move in tictactoe: expected a cell number 1-9" in out
    assert "Cells are numbered 1-9" in out
    (reply,) = agent_moves(out)
    assert reply != "5"
    refusal = next(x for x in out.splitlines() if x.startswith("'5' is not legal here."))
    legal = re.search(r"Legal moves: (.*)\.", refusal).group(1)
    assert re.split(r"[;,]\s*", legal) == [
        str(c) for c in range(1, 10) if str(c) not in "5" + reply
    ]
    assert [p.notation for p in session.plies] == ["5", reply]


def test_undo_goes_back_to_the_persons_turn():
    session, _, out = drive("undo\n5\nundo\n1\nquit\n")
    assert "Nothing to undo." in out and "Taken back to your previous turn." in out
    assert [p.by for p in session.plies] == ["human", "agent"]
    assert session.plies[0].notation == "1"  # the 5 was taken back with the agent's reply
    board = np.asarray(games.make("tictactoe").board(session.state)).ravel().tolist()
    assert board.count(1) == 1 and board.count(-1) == 1 and board[4] == 0
    second = Session(games.make("tictactoe"), "random", 1, seed=4)  # the agent's opening stays
    opening = second.reply()[0].notation
    mine = next(str(c) for c in range(1, 10) if str(c) != opening)
    play.run(second, io.StringIO(f"{mine}\nundo\nquit\n"), io.StringIO())
    assert [p.notation for p in second.plies] == [opening] and second.human_to_move
    assert second.undo() is False  # nothing of the person's left to take back


def test_whole_games_to_the_end_follow_the_rules():
    # Every cell in turn: illegal tries are refused, legal ones played, until the end.
    lines = "\n".join(str(c) for c in itertools.islice(itertools.cycle(range(1, 10)), 60))
    session, result, out = drive(lines + "\n", seed=3)
    moves = out.split("Moves: ")[1].split()
    assert moves == [p.notation for p in session.plies] and moves[1::2] == agent_moves(out)
    expected = {"X": "win", "O": "loss", "draw": "draw"}[tictactoe_outcome(moves)]
    assert result == expected
    assert {"win": "You win.", "loss": "You lose.", "draw": "Draw."}[expected] in out
    # Dots and Boxes: a box drawn gives its player another turn, the agent's too.
    game = games.make("dots_and_boxes", rows=2, cols=2)
    every = "\n".join([game.format_action(a) for a in range(game.num_actions)] * 3) + "\n"
    session, result, _ = drive(every, 1, 5, "dots_and_boxes", rows=2, cols=2)
    assert sorted(p.action for p in session.plies) == list(range(game.num_actions))
    boxes = game.board(session.state)[1::2, 1::2]
    mine = int((boxes < 0).sum()) - int((boxes > 0).sum())  # the person is player 1
    assert result == ("win" if mine > 0 else "loss" if mine < 0 else "draw")


def test_hint_names_its_analyst_and_values_the_persons_position():
    session, _, out = drive("5\nhint\nquit\n", seed=1)
    lines = out.splitlines()
    line = lines[lines.index("Thinking (pure MCTS with 200 simulations)...") + 1]  # said first
    assert line.startswith("Hint from pure MCTS with 200 simulations: ")
    found = re.findall(r"(\d) \((\d+)%\)", line)
    legal = set(map(str, range(1, 10))) - {p.notation for p in session.plies}
    assert 1 <= len(found) <= 3 and {m for m, _ in found} <= legal
    assert sum(int(p) for _, p in found) <= 101
    lost = Session(games.make("tictactoe"), "random", 1)
    lost.states.append(lost.game.init(jax.random.key(0)))
    for cell in (0, 1, 4, 2, 6):  # X: 1, 5 and 7 (two lines open); O to move, lost
        lost.states.append(lost.game.checked_step(lost.state, cell))
    out = io.StringIO()
    play.run(lost, io.StringIO("hint\nquit\n"), out)
    assert float(re.search(r"value for you ([+-]\d\.\d\d)", out.getvalue()).group(1)) < -0.5


@pytest.mark.parametrize("name", ["pgx:hex", "pgx:backgammon"])
def test_pgx_games_are_played_in_their_notation_by_colour(name):
    """The text board, moves typed and shown in the game's notation (a hint's too), turns
    named by colour."""
    pytest.importorskip("pgx")
    session = Session(games.make(name), "random", 0)
    game, hint = session.game, "hint\n" if name == "pgx:hex" else ""  # one analysis is enough
    first = game.format_action(game.legal_actions(session.state)[-1])
    more = [game.format_action(a) for a in range(game.num_actions)] if not hint else []
    out = io.StringIO()  # Backgammon: the second die the first legal of every move named
    play.run(session, io.StringIO("\n".join([f"{hint}{first}", *more, "quit\n"])), out)
    out = out.getvalue()
    assert out.startswith(f"{name}: you are Black (X), random is White (O).")
    assert "Your move (Black): " in out and game.render(session.states[0]) in out
    assert not hint or re.search(r"Hint from .*: [a-k]\d+ \(\d+%\)", out)
    assert session.plies[0].notation == first
    assert any(p.by == "agent" for p in session.plies)
    for ply in session.plies:
        assert ply.by == "human" or f"random (White) plays {ply.notation}\n" in out


def test_quit_and_end_of_input_leave():
    for command in ("quit", "exit", "q", " Q "):
        session, result, out = drive(f"{command}\n5\n")
        assert result is None and session.plies == [] and "is not a move" not in out
    session, result, out = drive("4\n")
    assert result is None and len(session.plies) == 2
    assert out.rstrip().endswith("End of input: the game is left unfinished.")


def test_colour_only_when_asked():
    game = games.make("tictactoe")
    state = game.checked_step(game.init(jax.random.key(0)), 4)
    assert play.draw(game, state, colour=False) == "1 2 3\n4 X 6\n7 8 9"
    coloured = play.draw(game, state, colour=True)
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == "1 2 3\n4 X 6\n7 8 9"
    assert "\x1b[1;31mX\x1b[0m" in coloured
    grey = games.make("othello")  # black and white discs: player 0 red, player 1 blue
    start = play.draw(grey, grey.init(jax.random.key(0)), colour=True)
    assert "\x1b[1;31mx\x1b[0m" in start and "\x1b[1;34mo\x1b[0m" in start


def test_command_line_game_and_saved_record(tmp_path):
    save, cache = tmp_path / "game.json", tmp_path / "cache"
    argv = ["--game", "connect4", "--opponent", "random", "--as", "second", "--seed", "2"]
    proc = subprocess.run(
        [sys.executable, "-m", "azjax.cli.play", *argv, "--save", str(save)],
        input="\n".join(str(c) for c in itertools.islice(itertools.cycle(range(1, 8)), 200)),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, "AZJAX_JAX_CACHE": str(cache)},
    )
    assert proc.returncode == 0, proc.stderr
    assert any(cache.iterdir())  # the next game starts compiled
    assert "\x1b[" not in proc.stdout  # not a terminal: plain text
    assert proc.stdout.startswith("connect4: you are Yellow (O), random is Red (X).")  # second
    assert proc.stdout.index("random (Red) plays") < proc.stdout.index("Your move (Yellow)")
    moves = re.search(r"(You win\.|You lose\.|Draw\.)\nMoves: (.*)\n", proc.stdout).group(2)
    record = {"game": "connect4", "moves": moves.split(), "kwargs": {}, "opponent": "random"}
    assert json.loads(save.read_text()) == record


def test_the_game_is_the_opponent_models_when_not_named(tmp_path, monkeypatch, capsys):
    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", io.StringIO("c2\n"))
    play.main(["--opponent", "policy-zoo:othello6", "--save", str(save)])
    out = capsys.readouterr().out
    assert out.startswith("othello: you are Black (x), policy-zoo:othello6 is White (o).")
    assert "(a1-f6)" in out  # 6x6, the model's size
    record = json.loads(save.read_text())
    assert record["kwargs"] == {"size": 6} and record["moves"][0] == "c2"


class Interrupting(io.StringIO):
    """stdin that gives its lines, then raises KeyboardInterrupt as Ctrl-C does."""

    def readline(self, *args) -> str:
        line = super().readline(*args)
        if not line:
            raise KeyboardInterrupt
        return line


def test_a_game_left_unfinished_is_saved(tmp_path, monkeypatch, capsys):
    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", io.StringIO("5\n"))  # then the end of input
    play.main([*TTT, "--save", str(save)])
    assert f"Saved the game (2 moves) to {save}" in capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", Interrupting("5\n"))  # then Ctrl-C
    with pytest.raises(SystemExit) as stop:
        play.main([*TTT, "--save", str(save)])
    out, err = capsys.readouterr()
    assert stop.value.code == 130 and err == "\nInterrupted: the game is left unfinished.\n"
    assert f"Saved the game (2 moves) to {save}" in out
    assert json.loads(save.read_text())["moves"][0] == "5"


def test_help_lists_every_notation_and_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        play.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert exit_info.value.code == 0 and all(f"{c}:" in text for c in ("undo", "hint", "quit"))
    for name in games.names():
        assert " ".join(games.make(name).notation_help().split()) in text, name
