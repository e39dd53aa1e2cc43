"""`azjax-play`: play any game in the terminal against any agent.

    azjax-play --game connect4 --opponent search:runs/connect4 --as second

Moves are typed in the game's notation; `undo` takes back to your previous turn, `hint` shows
the agent's view of your position (top moves with their share of the search and the value),
`quit` leaves. Input is read line by line from stdin, so a script (or a test) can drive a game.

`Session` (a game in progress against an agent) and the compiled-agent cache are shared with
the browser server (`azjax.cli.serve`).
"""

from __future__ import annotations

import argparse
import collections
import colorsys
import dataclasses
import functools
import json
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import jax
import numpy as np

import games
from azjax.cli.args import check_writable_file, seed_arg
from games import IllegalMoveError

State = Any

# ----------------------------------------------------------------------------- agents

_LOCK = threading.Lock()
CACHE_SIZE = 16  # (game, spec) pairs kept compiled; the least recently used go first
_AGENTS: collections.OrderedDict[tuple[Any, str], Callable[[State, jax.Array], int]]
_AGENTS = collections.OrderedDict()
_ANALYSERS: collections.OrderedDict[
    tuple[Any, str], Callable[[State, jax.Array], tuple[np.ndarray, float]]
]
_ANALYSERS = collections.OrderedDict()
_JITTED: dict[Callable, Callable] = {}  # one per move function: bounded by the agent kinds


def _cached(cache: collections.OrderedDict, key: Any, make: Callable[[], Any]) -> Any:
    """`cache[key]`, made by `make()` when missing; at most CACHE_SIZE entries (LRU)."""
    with _LOCK:
        if key in cache:
            cache.move_to_end(key)
        else:
            cache[key] = make()
            while len(cache) > CACHE_SIZE:
                cache.popitem(last=False)
        return cache[key]


def compiled_agent(game: games.Game, spec: str) -> Callable[[State, jax.Array], int]:
    """`agent(state, key) -> action` for `spec`, made once per (game, spec) and cached; the
    move function is jitted once and shared by specs that differ only in parameters.

    Raises ValueError (from `azjax.agents.make`) for a bad spec or a checkpoint that does
    not fit the game.
    """

    def make() -> Callable[[State, jax.Array], int]:
        from azjax import agents

        agent = agents.make(spec, game)
        if agent.fn not in _JITTED:  # shared by every checkpoint of the same net shape
            _JITTED[agent.fn] = jax.jit(agent.fn)
        fn = _JITTED[agent.fn]
        return lambda state, key: int(fn(agent.params, state, key))

    return _cached(_AGENTS, (game, spec), make)


def compiled_analysis(
    game: games.Game, spec: str
) -> Callable[[State, jax.Array], tuple[np.ndarray, float]]:
    """`analyse(state, key) -> (policy[A], value)` for `spec` (value from the mover's view),
    jitted once per (game, spec) and cached."""

    def make() -> Callable[[State, jax.Array], tuple[np.ndarray, float]]:
        from azjax import agents

        fn = jax.jit(agents.analyse(game, spec))

        def analyse(state: State, key: jax.Array) -> tuple[np.ndarray, float]:
            policy, value = fn(state, key)
            return np.asarray(policy, np.float64), float(value)

        return analyse

    return _cached(_ANALYSERS, (game, spec), make)


def analyst(spec: str) -> str:
    """Who gives the hints and evaluations against opponent `spec` (`azjax.agents.analyse`):
    a checkpoint's network with search, or pure MCTS for any other opponent."""
    from azjax import agents

    parsed = agents.parse_spec(spec)
    if parsed.workdir is not None:
        at = "" if parsed.step is None else f"@{parsed.step}"
        return f"the network of {parsed.workdir}{at} with search"
    if parsed.model is not None:
        return f"the zoo model {parsed.model} with search"
    return f"pure MCTS with {agents.ANALYSIS_SIMULATIONS} simulations"


@functools.cache
def _rules(game: games.Game) -> tuple[Callable[[jax.Array], State], Callable[[State, int], State]]:
    """`init(key)` and `step(state, action)` of `game`, jitted once per game: a session
    calls them once per move, and nothing is traced again for a new game or move."""
    return jax.jit(game.init), jax.jit(game.step)


# ----------------------------------------------------------------------------- a game


@dataclasses.dataclass(frozen=True)
class Ply:
    """One move played: who moved (player 0/1), the action, its notation, human or agent."""

    player: int
    action: int
    notation: str
    by: str  # "human" | "agent"


@dataclasses.dataclass(frozen=True)
class Advice:
    """An analysis of a position: top moves as (notation, share of the search), the value
    for the player to move (-1 lost .. +1 won) and who made it (`analyst`)."""

    moves: tuple[tuple[str, float], ...]
    value: float
    source: str


class Session:
    """A game between a person (playing `human`, 0 or 1) and an agent given by its spec."""

    def __init__(self, game: games.Game, opponent: str, human: int, seed: int = 0) -> None:
        if human not in (0, 1):
            raise ValueError(f"human must be player 0 or 1, got {human!r}")
        self.game, self.opponent, self.human = game, opponent, human
        self.agent = compiled_agent(game, opponent)
        self.analyst = analyst(opponent)
        init_key, self._key = jax.random.split(jax.random.key(seed))
        self.states: list[State] = [_rules(game)[0](init_key)]
        self.plies: list[Ply] = []
        self.evaluation: Advice | None = None

    @property
    def state(self) -> State:
        return self.states[-1]

    @property
    def over(self) -> bool:
        return bool(self.state.terminated)

    @property
    def human_to_move(self) -> bool:
        return not self.over and int(self.state.current_player) == self.human

    def _next_key(self) -> jax.Array:
        self._key, key = jax.random.split(self._key)
        return key

    def _push(self, action: int, by: str) -> Ply:
        state, game = self.state, self.game
        if action not in game.legal_actions(state):
            game.checked_step(state, action)  # raises the game's IllegalMoveError
        ply = Ply(int(state.current_player), action, game.format_action(action), by)
        self.states.append(_rules(game)[1](state, action))
        self.plies.append(ply)
        return ply

    def play(self, action: int) -> Ply:
        """The person's move (raises IllegalMoveError when illegal or not their turn)."""
        if not self.human_to_move:
            raise IllegalMoveError("it is not your turn" if not self.over else "the game is over")
        return self._push(int(action), "human")

    def reply(self, evaluate: bool = False) -> list[Ply]:
        """The agent's moves until it is the person's turn again or the game ends.

        With `evaluate`, `self.evaluation` holds the agent's analysis of the position before
        its last move (value from the agent's view).
        """
        plies = []
        while not self.over and not self.human_to_move:
            if evaluate:
                self.evaluation = self.advice()
            plies.append(self._push(self.agent(self.state, self._next_key()), "agent"))
        return plies

    def undo(self) -> bool:
        """Take back to the person's previous turn (before their last move); False if none."""
        mine = [i for i, p in enumerate(self.plies) if p.by == "human"]
        if not mine:
            return False
        del self.plies[mine[-1] :]
        del self.states[mine[-1] + 1 :]
        self.evaluation = None
        return True

    def advice(self, top: int = 3) -> Advice:
        """An analysis of the current position by `self.analyst` (the opponent's network
        with search, else pure MCTS)."""
        policy, value = compiled_analysis(self.game, self.opponent)(self.state, self._next_key())
        order = np.argsort(-policy, kind="stable")[:top]
        order = [a for a in order if policy[a] >= 0.01] or list(order[:1])  # drop the noise
        moves = tuple((self.game.format_action(int(a)), float(policy[a])) for a in order)
        return Advice(moves, value, self.analyst)

    def result(self) -> str | None:
        """ "win", "loss" or "draw" from the person's view once the game is over, else None."""
        if not self.over:
            return None
        reward = float(self.state.rewards[self.human])
        return "win" if reward > 0 else "loss" if reward < 0 else "draw"

    def record(self) -> dict[str, Any]:
        """The game as JSON-able data (`scripts/replay.py --record` reads it)."""
        return {"game": self.game.name, "moves": [p.notation for p in self.plies]}


# ----------------------------------------------------------------------------- terminal

_RESET = "\x1b[0m"
# Terminal colours (bold ANSI codes) by hue in degrees; a player whose colour is a grey (Othello)
# is shown red (player 0) or blue (player 1).
_HUES = {0: "31", 60: "33", 120: "32", 240: "34", 300: "35"}


def _ansi(css: str, player: int) -> str:
    """The terminal colour closest in hue to the CSS colour `#rrggbb`."""
    hue, _, saturation = colorsys.rgb_to_hls(*(int(css[i : i + 2], 16) / 255 for i in (1, 3, 5)))
    if saturation < 0.2:
        return f"\x1b[1;{('31', '34')[player]}m"
    nearest = min(_HUES, key=lambda h: min(abs(hue * 360 - h), 360 - abs(hue * 360 - h)))
    return f"\x1b[1;{_HUES[nearest]}m"


def player_name(game: games.Game, player: int) -> str:
    """The player's mark in the game's text picture."""
    return game.marks[player]


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


@functools.cache
def _size_keywords() -> dict[str, str]:
    """Every size keyword of any game -> which games take it and in what range."""
    found: dict[str, list[str]] = {}
    for name in games.names():
        for key, (low, high) in games.make(name).sizes.items():
            found.setdefault(key, []).append(f"{name}: {low}-{high}")
    return {key: ", ".join(uses) for key, uses in found.items()}


def game_kwargs(args: argparse.Namespace) -> dict[str, int]:
    """The size keywords given on the command line (only those set)."""
    return {k: getattr(args, k) for k in _size_keywords() if getattr(args, k) is not None}


def add_game_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--game", required=True, choices=games.names())
    for key, uses in _size_keywords().items():
        parser.add_argument(f"--{key}", type=int, help=f"board {key} ({uses})")


def run(
    session: Session, lines: TextIO, out: TextIO, colour: bool = False, echo: bool = False
) -> str | None:
    """Drive a session from `lines` (one command or move per line); the result, or None if quit.

    `echo` repeats each line read after the prompt (for transcripts of piped input).
    """
    game = session.game

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    def show_reply() -> None:
        for ply in session.reply():
            say(f"{session.opponent} ({player_name(game, ply.player)}) plays {ply.notation}")

    say(
        f"{game.name}: you are {player_name(game, session.human)}, "
        f"{session.opponent} is {player_name(game, 1 - session.human)}."
    )
    say("Type a move, or: undo, hint, quit. " + game.notation_help())
    show_reply()
    while not session.over:
        say()
        say(draw(game, session.state, colour))
        legal = " ".join(game.format_action(a) for a in game.legal_actions(session.state))
        say(f"Legal: {legal}")
        out.write(f"Your move ({player_name(game, session.human)}): ")
        out.flush()
        line = lines.readline()
        if echo or not line:
            say(line.rstrip("\n"))
        if not line:
            say("End of input: the game is left unfinished.")
            return None
        command = line.strip().lower()
        if command in ("quit", "exit", "q"):
            return None
        if command == "":
            continue
        if command == "undo":
            say("Taken back to your previous turn." if session.undo() else "Nothing to undo.")
            continue
        if command == "hint":
            say(f"Thinking ({session.analyst})...")
            advice = session.advice()
            moves = ", ".join(f"{m} ({share:.0%})" for m, share in advice.moves)
            say(f"Hint from {advice.source}: {moves}; value for you {advice.value:+.2f}")
            continue
        try:
            action = game.parse_action(command, session.state)
        except IllegalMoveError as err:
            say(str(err))
            continue
        session.play(action)
        show_reply()
    say()
    say(draw(game, session.state, colour))
    result = session.result()
    say({"win": "You win.", "loss": "You lose.", "draw": "Draw."}[result])
    say("Moves: " + " ".join(p.notation for p in session.plies))
    return result


FALLBACK_OPPONENT = "mcts:200"  # the default opponent of a game the zoo has no model for


def default_opponent(game: games.Game) -> str:
    """`zoo:NAME` when the zoo has a model for `game` (azjax.zoo.default), else pure MCTS."""
    from azjax import zoo

    name = zoo.default(game)
    return FALLBACK_OPPONENT if name is None else f"zoo:{name}"


def _epilog() -> str:
    """The notation of every game and the commands at the prompt, for --help."""
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
    parser = argparse.ArgumentParser(
        prog="azjax-play",
        description=__doc__.split("\n\n")[0],
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_game_arguments(parser)
    parser.add_argument(
        "--opponent",
        help="agent spec: random, greedy, alphabeta:D, mcts:SIMS, policy:WORKDIR[@STEP], "
        "search:WORKDIR[@STEP][:SIMS], zoo:NAME[:SIMS], policy-zoo:NAME (default: the zoo's "
        f"model for the game, else {FALLBACK_OPPONENT})",
    )
    parser.add_argument(
        "--as",
        dest="side",
        choices=("first", "second"),
        default="first",
        help="play first (player 0) or second (default first)",
    )
    parser.add_argument(
        "--seed", type=seed_arg, default=0, help="PRNG seed of the agent's moves (default 0)"
    )
    parser.add_argument("--save", help="write the finished game as JSON (for scripts/replay.py)")
    parser.add_argument("--no-colour", action="store_true", help="plain text even on a terminal")
    args = parser.parse_args(argv)
    try:
        if args.save:  # before the game, so that a finished game is never lost
            check_writable_file(args.save, "--save")
        game = games.make(args.game, **game_kwargs(args))
        args.opponent = args.opponent or default_opponent(game)
    except ValueError as err:
        parser.error(str(err))
    session: Session | None = None
    status = 0
    try:
        try:
            session = Session(game, args.opponent, 0 if args.side == "first" else 1, args.seed)
        except ValueError as err:
            parser.error(str(err))
        colour = sys.stdout.isatty() and not args.no_colour
        run(session, sys.stdin, sys.stdout, colour, echo=not sys.stdin.isatty())
    except KeyboardInterrupt:  # Ctrl-C: at the prompt or while the agent thinks
        sys.stdout.flush()
        print("\nInterrupted: the game is left unfinished.", file=sys.stderr, flush=True)
        status = 130
    if args.save and session is not None:
        save(session, args.save, {"kwargs": game_kwargs(args), "opponent": args.opponent})
    if status:
        sys.exit(status)


def save(session: Session, path: str, extra: dict[str, Any]) -> None:
    """Write the game (finished or not) as JSON for `scripts/replay.py --record`."""
    record = {**session.record(), **extra}
    try:
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
    except OSError as err:
        sys.exit(f"azjax-play: cannot write --save {path}: {err.strerror}")
    print(f"Saved the game ({len(record['moves'])} moves) to {path}.", flush=True)


if __name__ == "__main__":
    main()
