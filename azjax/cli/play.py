"""`azjax-play`: play any game in the terminal against any agent.

    azjax-play --opponent search:runs/connect4 --as second   # the game is the model's
    azjax-play --game chain_reaction --size rows=6,cols=9 --opponent greedy

Moves are typed in the game's notation, with `undo`, `hint` and `quit` (see --help). Input is
read line by line from stdin, so a script can drive a game (`azjax.session.Session`).
"""

from __future__ import annotations

import argparse
import colorsys
import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

import games
from azjax.checks import add_game_arguments, check_writable_file, seed_arg, size_kwargs
from azjax.cli import INTERRUPTED, bad_input, check_interrupt, run_command, use_compilation_cache
from azjax.cli.args import ArgumentParser, chosen_game, load_game_modules
from azjax.session import FALLBACK_OPPONENT, Session, default_opponent
from games import IllegalMoveError

State = Any

_RESET = "\x1b[0m"
# Bold ANSI colours by hue in degrees; a grey player (Othello) is red (player 0) or blue (1).
_HUES = {0: "31", 60: "33", 120: "32", 240: "34", 300: "35"}


def _ansi(css: str, player: int) -> str:
    """The terminal colour closest in hue to the CSS colour `#rrggbb`."""
    hue, _, saturation = colorsys.rgb_to_hls(*(int(css[i : i + 2], 16) / 255 for i in (1, 3, 5)))
    if saturation < 0.2:
        return f"\x1b[1;{('31', '34')[player]}m"
    nearest = min(_HUES, key=lambda h: min(abs(hue * 360 - h), 360 - abs(hue * 360 - h)))
    return f"\x1b[1;{_HUES[nearest]}m"


def draw(game: games.Game, state: State, colour: bool) -> str:
    """The game's text picture, its marks coloured (as the players' colours) when `colour`."""
    text = game.render(state)
    if not colour:
        return text
    table = {
        mark: f"{_ansi(css, player)}{mark}{_RESET}"
        for player, (mark, css) in enumerate(zip(game.marks, game.colours, strict=True))
    }
    return "".join(table.get(ch, ch) for ch in text)


def run(
    session: Session, lines: TextIO, out: TextIO, colour: bool = False, echo: bool = False
) -> str | None:
    """Drive a session from `lines` (a command or move each); the result, None if left.
    `echo` repeats each line read after the prompt (transcripts of piped input)."""
    game = session.game

    def side(player: int) -> str:  # "Black (X)"; a player named by its mark: "X"
        name, mark = game.players[player], game.marks[player]
        return name if name == mark else f"{name} ({mark})"

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    def show_reply() -> None:
        for ply in session.reply():
            say(f"{session.opponent} ({game.players[ply.player]}) plays {ply.notation}")
        check_interrupt()  # a Ctrl-C that XLA's compile swallowed while the agent thought

    them = side(1 - session.human)
    say(f"{game.name}: you are {side(session.human)}, {session.opponent} is {them}.")
    say("Type a move, or: undo, hint, quit. " + game.notation_help())
    show_reply()
    while not session.over:
        say(f"\n{draw(game, session.state, colour)}")
        legal = " ".join(game.format_action(a) for a in game.legal_actions(session.state))
        say(f"Legal: {legal}")
        print(f"Your move ({game.players[session.human]}): ", end="", file=out, flush=True)
        line = lines.readline()
        if echo or not line:
            say(line.rstrip("\n"))
        if not line:
            say("End of input: the game is left unfinished.")
            return None
        command = line.strip().lower()
        if command in ("quit", "exit", "q"):
            return None
        if command == "undo":
            say("Taken back to your previous turn." if session.undo() else "Nothing to undo.")
        elif command == "hint":
            say(f"Thinking ({session.analyst})...")
            advice = session.advice()
            moves = ", ".join(f"{m} ({share:.0%})" for m, share in advice.moves)
            say(f"Hint from {advice.source}: {moves}; value for you {advice.value:+.2f}")
        elif command:
            try:
                session.play(game.parse_action(command, session.state))
            except IllegalMoveError as err:
                say(str(err))
                continue
            show_reply()
    say(f"\n{draw(game, session.state, colour)}")
    result = session.result()
    say({"win": "You win.", "loss": "You lose.", "draw": "Draw."}[result])
    say("Moves: " + " ".join(p.notation for p in session.plies))
    return result


def _epilog() -> str:
    lines = ["moves, numbered from 1 as the board is labelled (shown at the default size):"]
    for name in games.names():
        text = games.make(name).notation_help()
        lines += textwrap.wrap(
            text, 96, initial_indent=f"  {name + ':':16}", subsequent_indent=" " * 18
        )
    lines += [
        "",
        "commands at the prompt:",
        "  undo: take back to your previous turn",
        "  hint: the best moves here and your position's value, by a search (takes seconds)",
        "  quit: leave (as do Ctrl-C and end of input); --save keeps the game so far",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    if status := run_command("azjax-play", _main, argv):
        sys.exit(status)


def _main(argv: Sequence[str] | None) -> int:
    load_game_modules("azjax-play")
    parser = ArgumentParser(
        prog="azjax-play",
        description=__doc__.split("\n\n")[0],
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_game_arguments(parser, default="the --opponent model's game")
    add = parser.add_argument
    add(
        "--opponent",
        help="agent spec: random, greedy, alphabeta:D, mcts:SIMS, policy:WORKDIR[@STEP], "
        "search:WORKDIR[@STEP][:SIMS], search:FILE.azjax[:SIMS], zoo:NAME[:SIMS], "
        f"policy-zoo:NAME (default: the zoo's model for the game, else {FALLBACK_OPPONENT})",
    )
    add(
        "--as",
        dest="side",
        choices=("first", "second"),
        default="first",
        help="play first (player 0) or second (default first)",
    )
    add("--seed", type=seed_arg, default=0, help="PRNG seed of the agent's moves (default 0)")
    add("--save", help="write the finished game as JSON (for scripts/replay.py)")
    add("--no-colour", action="store_true", help="plain text even on a terminal")
    args = parser.parse_args(argv)
    try:
        if args.save:  # before the game, so that a finished game is never lost
            check_writable_file(args.save, "--save")
        game = chosen_game(args.game, args.size, [args.opponent], "--opponent")
        args.opponent = args.opponent or default_opponent(game)
    except ValueError as err:
        return bad_input("azjax-play", f"error: {err}")
    use_compilation_cache()  # a second game starts without compiling the agent again
    session, status = None, 0
    try:
        try:
            session = Session(game, args.opponent, 0 if args.side == "first" else 1, args.seed)
        except ValueError as err:
            return bad_input("azjax-play", f"error: {err}")
        colour = sys.stdout.isatty() and not args.no_colour
        run(session, sys.stdin, sys.stdout, colour, echo=not sys.stdin.isatty())
    except KeyboardInterrupt:  # Ctrl-C: at the prompt or while the agent thinks
        sys.stdout.flush()
        print("\nInterrupted: the game is left unfinished.", file=sys.stderr, flush=True)
        status = INTERRUPTED
    if args.save and session is not None:
        save(session, args.save, {"kwargs": size_kwargs(game), "opponent": args.opponent})
    return status


def save(session: Session, path: str, extra: dict[str, Any]) -> None:
    """Write the game so far as JSON for `scripts/replay.py --record`."""
    record = session.record() | extra
    try:
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
    except OSError as err:
        sys.exit(f"azjax-play: cannot write --save {path}: {err.strerror}")
    print(f"Saved the game ({len(record['moves'])} moves) to {path}.", flush=True)


if __name__ == "__main__":
    main()
