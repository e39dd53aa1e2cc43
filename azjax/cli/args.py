"""What the command lines share in reading their arguments: the parser, the game modules, the
game and the server's port (checks shared with the scripts and the server: `azjax.checks`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

import games
from azjax.checks import argparse_type, parse_size
from azjax.cli import bad_input
from azjax.specs import parse_spec


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, refusing a bad command line in one line with the status of bad input
    (argparse's own prints its usage block first)."""

    def error(self, message: str) -> NoReturn:
        raise SystemExit(bad_input(self.prog, f"{message}; see {self.prog} --help"))


def _check_port(value: object, name: str) -> int:
    if not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"{name} must be from 1 to 65535 (0: any free port), got {value!r}")
    return value


port_arg = argparse_type(_check_port, "port")


def load_game_modules(prog: str) -> None:
    """Import AZJAX_GAMES' game modules, refusing one that fails (status 2, one line)."""
    try:
        games.names()
    except ValueError as err:
        raise SystemExit(bad_input(prog, str(err))) from None


def chosen_game(
    name: str | None, size: str | None, specs: Sequence[str | None], who: str
) -> games.Game:
    """The game `--game NAME --size K=V,...` names, else the game of the first of `specs` (agent
    specs, None for one not given) that names a trained model; `who` says in the refusal which
    agent could have named it."""
    if name is not None:
        return games.make(name, **parse_size(size, name))
    if size is not None:
        raise ValueError("--size needs --game (the game it sizes)")
    for spec in specs:
        source = parse_spec(spec).source if spec else None
        if source is not None:
            from azjax import model  # flax and orbax: deferred so that --help answers at once

            return model.game_of(source)
    names = ", ".join(games.names())
    raise ValueError(f"--game is needed (one of {names}) unless {who} names a trained model")
