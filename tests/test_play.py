"""Terminal play (`azjax-play`), driven through stdin: bad input, undo, hints, whole games."""

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
from azjax.cli import play
from azjax.session import Session

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def tictactoe_outcome(moves: list[str]) -> str:
    """Replay Tic-Tac-Toe moves (cells 1-9, X first) by plain rules: "X", "O" or "draw".

    Fails on an illegal move, a move after the end, or a game that has not ended."""
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


def listed_moves(message: str) -> list[str]:
    """The moves named after "Legal moves:" in an error message."""
    found = re.search(r"Legal moves: (.*)\.", message)
    assert found, message
    return re.split(r"[;,]\s*", found.group(1))


def drive(game_name: str, opponent: str, human: int, lines: str, seed: int = 0, **kwargs):
    game = games.make(game_name, **kwargs)
    session = Session(game, opponent, human, seed)
    out = io.StringIO()
    result = play.run(session, io.StringIO(lines), out, echo=True)
    return session, result, out.getvalue()


def agent_moves(text: str) -> list[str]:
    return re.findall(r"plays (\S+(?: \S+ \S+)?)\n", text)


def test_bad_input_is_explained_and_the_game_goes_on():
    session, result, out = drive("tictactoe", "random", 0, "foo\n0\n5\n5\nquit\n")
    assert result is None  # quit
    assert "'foo' is not a move in tictactoe: expected a cell number 1-9" in out
    assert "Cells are numbered 1-9" in out
    reply = agent_moves(out)
    assert len(reply) == 1 and reply[0] != "5"
    legal = [str(c) for c in range(1, 10) if str(c) not in ("5", reply[0])]
    refusal = next(x for x in out.splitlines() if x.startswith("'5' is not legal here."))
    assert listed_moves(refusal) == legal
    assert [p.notation for p in session.plies] == ["5", reply[0]]


def test_undo_goes_back_to_the_human_turn():
    session, _, out = drive("tictactoe", "random", 0, "undo\n5\nundo\n1\nquit\n")
    assert "Nothing to undo." in out
    assert "Taken back to your previous turn." in out
    assert [p.by for p in session.plies] == ["human", "agent"]
    assert session.plies[0].notation == "1"  # the 5 was taken back with the agent's reply
    board = [int(v) for v in np.asarray(games.make("tictactoe").board(session.state)).flat]
    assert board.count(1) == 1 and board.count(-1) == 1 and board[4] == 0


def test_undo_as_second_player_keeps_the_agent_opening():
    game = games.make("tictactoe")
    session = Session(game, "random", 1, seed=4)
    opening = session.reply()[0].notation
    mine = next(str(c) for c in range(1, 10) if str(c) != opening)
    out = io.StringIO()
    play.run(session, io.StringIO(f"{mine}\nundo\nquit\n"), out, echo=True)
    assert "Taken back to your previous turn." in out.getvalue()
    assert [p.notation for p in session.plies] == [opening]
    assert session.human_to_move
    assert session.undo() is False  # nothing of ours left to take back


def test_full_game_to_the_end_matches_plain_rules():
    # Try every cell in turn: illegal tries are refused, legal ones played, until the end.
    lines = "\n".join(str(c) for c in itertools.islice(itertools.cycle(range(1, 10)), 60))
    session, result, out = drive("tictactoe", "random", 0, lines + "\n", seed=3)
    moves = out.split("Moves: ")[1].split()
    assert moves == [p.notation for p in session.plies]
    winner = tictactoe_outcome(moves)
    expected = {"X": "win", "O": "loss", "draw": "draw"}[winner]
    assert result == expected
    assert {"win": "You win.", "loss": "You lose.", "draw": "Draw."}[expected] in out
    assert moves[1::2] == agent_moves(out)


def test_dots_and_boxes_repeated_turns_to_the_end():
    game = games.make("dots_and_boxes", rows=2, cols=2)
    notation = [game.format_action(a) for a in range(game.num_actions)]
    lines = "\n".join(notation * 3) + "\n"
    session, result, _ = drive("dots_and_boxes", "random", 1, lines, seed=5, rows=2, cols=2)
    assert session.over and result in ("win", "loss", "draw")
    assert len(session.plies) == game.num_actions  # every line drawn once
    assert sorted(p.action for p in session.plies) == list(range(game.num_actions))
    boxes = game.board(session.state)[1::2, 1::2]
    human = int((boxes < 0).sum()) - int((boxes > 0).sum())  # the human is player 1
    assert result == ("win" if human > 0 else "loss" if human < 0 else "draw")


def test_hint_lists_legal_moves_with_shares_and_a_value():
    session, _, out = drive("tictactoe", "random", 0, "5\nhint\nquit\n", seed=1)
    lines = out.splitlines()
    # Said at once (a search takes seconds), and named for what gives it: a pure MCTS.
    thinking = lines.index("Thinking (pure MCTS with 200 simulations)...")
    line = lines[thinking + 1]
    assert line.startswith("Hint from pure MCTS with 200 simulations: ")
    assert "random" not in line
    found = re.findall(r"(\d) \((\d+)%\)", line)
    assert 1 <= len(found) <= 3
    legal = set(map(str, range(1, 10))) - {p.notation for p in session.plies}
    assert {m for m, _ in found} <= legal
    assert sum(int(p) for _, p in found) <= 101
    value = float(re.search(r"value for you ([+-]\d\.\d\d)", line).group(1))
    assert -1.0 <= value <= 1.0


def test_hint_values_a_won_position_for_the_person():
    game = games.make("tictactoe")
    session = Session(game, "random", 1, seed=0)
    state = session.state
    for cell in (0, 1, 4, 2, 6):  # X: 1, 5 and 7 (two lines open); O: 2, 3 and now to move
        state = game.checked_step(state, cell)
    session.states.append(state)  # O to move, lost whatever it plays
    out = io.StringIO()
    play.run(session, io.StringIO("hint\nquit\n"), out)
    value = float(re.search(r"value for you ([+-]\d\.\d\d)", out.getvalue()).group(1))
    assert value < -0.5


@pytest.mark.parametrize("command", ["quit", "exit", "q", " Q "])
def test_every_quit_command_leaves(command):
    session, result, out = drive("tictactoe", "random", 0, f"{command}\n5\n")
    assert result is None and session.plies == [] and "is not a move" not in out


def test_end_of_input_leaves_quietly():
    session, result, _ = drive("connect4", "random", 0, "4\n")
    assert result is None and len(session.plies) == 2


def test_colour_only_when_asked():
    game = games.make("tictactoe")
    state = game.checked_step(game.init(jax.random.key(0)), 4)
    assert play.draw(game, state, colour=False) == "1 2 3\n4 X 6\n7 8 9"
    coloured = play.draw(game, state, colour=True)
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == "1 2 3\n4 X 6\n7 8 9"
    assert "\x1b[1;31mX\x1b[0m" in coloured
    other = games.make("connect4")
    after = other.checked_step(other.init(jax.random.key(0)), 3)
    assert play.draw(other, after, colour=False) == other.render(after)
    assert "\x1b[1;31mX\x1b[0m" in play.draw(other, after, colour=True)
    grey = games.make("othello")  # black and white discs: player 0 red, player 1 blue
    start = play.draw(grey, grey.init(jax.random.key(0)), colour=True)
    assert "\x1b[1;31mx\x1b[0m" in start and "\x1b[1;34mo\x1b[0m" in start


def test_command_line_game_and_saved_record(tmp_path):
    save = tmp_path / "game.json"
    moves = "\n".join(str(c) for c in itertools.islice(itertools.cycle(range(1, 8)), 200))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "azjax.cli.play",
            "--game",
            "connect4",
            "--opponent",
            "random",
            "--as",
            "second",
            "--seed",
            "2",
            "--save",
            str(save),
        ],
        input=moves + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
        env={**os.environ, "AZJAX_JAX_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr
    assert any((tmp_path / "cache").iterdir())  # the next game starts compiled
    assert "\x1b[" not in proc.stdout  # not a terminal: plain text
    assert proc.stdout.startswith("connect4: you are O, random is X.")  # --as second
    assert proc.stdout.index("random (X) plays") < proc.stdout.index("Your move (O)")
    assert re.search(r"(You win\.|You lose\.|Draw\.)\nMoves: ", proc.stdout)
    record = json.loads(save.read_text())
    assert record["game"] == "connect4" and record["opponent"] == "random"
    game = games.make("connect4")
    state = game.init(jax.random.key(0))
    for move in record["moves"]:
        state = game.checked_step(state, game.parse_action(move, state))
    assert bool(state.terminated)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--game", "tictactoe", "--opponent", "nonsense"], "nonsense"),
        (["--game", "othello", "--size", "size=7", "--opponent", "random"], "size takes 6, 8"),
        (["--game", "othello", "--size", "rows=6", "--opponent", "random"], "size 6, 8"),
        (["--game", "chess", "--opponent", "random"], "unknown game 'chess'"),
        (  # before the game, not after it
            ["--game", "tictactoe", "--opponent", "random", "--save", "/no/such/folder/g.json"],
            "--save /no/such/folder/g.json: there is no folder /no/such/folder",
        ),
        (["--game", "tictactoe", "--opponent", "random", "--save", "."], "--save . is a folder"),
        (["--opponent", "random"], "--game is needed (one of chain_reaction, "),
        ([], "unless --opponent names a trained model"),
        (["--size", "size=6", "--opponent", "zoo:othello"], "--size needs --game"),
    ],
)
def test_command_line_refuses_bad_arguments(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        play.main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_game_is_the_opponent_models_when_not_named(tmp_path, monkeypatch, capsys):
    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", io.StringIO("c2\n"))
    play.main(["--opponent", "policy-zoo:othello6", "--save", str(save)])
    out = capsys.readouterr().out
    assert out.startswith("othello: you are x, policy-zoo:othello6 is o.")
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


def test_ctrl_c_at_the_prompt_leaves_quietly_and_saves(tmp_path, monkeypatch, capsys):
    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", Interrupting("5\n"))
    argv = ["--game", "tictactoe", "--opponent", "random", "--save", str(save)]
    try:
        play.main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped from azjax-play")
    except SystemExit as exit_info:
        assert exit_info.code == 130
    else:
        pytest.fail("no exit status after Ctrl-C")
    out, err = capsys.readouterr()
    assert err.strip() == "Interrupted: the game is left unfinished."
    record = json.loads(save.read_text())
    assert record["moves"][0] == "5" and len(record["moves"]) == 2
    assert f"Saved the game (2 moves) to {save}" in out


def test_end_of_input_says_so_and_saves(tmp_path, monkeypatch, capsys):
    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", io.StringIO("5\n"))
    play.main(["--game", "tictactoe", "--opponent", "random", "--save", str(save)])
    out = capsys.readouterr().out
    assert "End of input: the game is left unfinished." in out
    assert len(json.loads(save.read_text())["moves"]) == 2


def test_help_lists_every_notation_and_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        play.main(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for name in games.names():
        assert " ".join(games.make(name).notation_help().split()) in text, name
    for command in ("undo", "hint", "quit"):
        assert f"{command}:" in text
    assert "--as {first,second} play first (player 0) or second" in text
