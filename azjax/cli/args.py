"""What the command lines share in reading their arguments: the parser, the game modules and
the values only they take (the server's port); the checks shared with the scripts and the
browser server (seeds, files, game sizes) are in `azjax.checks`."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

import games
from azjax.checks import argparse_type
from azjax.cli import bad_input


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, refusing a bad command line in one line with the status of bad input
    (argparse's own prints its usage block first)."""

    def error(self, message: str) -> NoReturn:
        raise SystemExit(bad_input(self.prog, f"{message}; see {self.prog} --help"))


def check_port(value: object, name: str = "port") -> int:
    """`value` as a TCP port: 1..65535, or 0 for any free port."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"{name} must be from 1 to 65535 (0: any free port), got {value!r}")
    return value


port_arg = argparse_type(check_port, "port")


def load_game_modules(prog: str) -> None:
    """Import the game modules named in AZJAX_GAMES before anything else, exiting with
    status 2 and one line naming the module that cannot be imported."""
    try:
        games.names()
    except ValueError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        raise SystemExit(2) from None
