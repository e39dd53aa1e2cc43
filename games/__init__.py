"""Pure, jittable board-game rules: `games.make(name, **kwargs)` and `games.names()`.

This package never imports `azjax`; people use it on its own. `games.register(name, cls)` adds
a game defined elsewhere; the modules named in the environment variable `AZJAX_GAMES`
(separated by colons or commas, e.g. `AZJAX_GAMES=my_games.connect3`; empty names are
ignored) are imported before the first
`names()` or `make()`, so that a module registering its games there reaches every azjax
command line tool.

`make("pgx:<env_id>")` wraps a two-player pgx environment (`games.pgx_games`; pgx is the
optional extra `azjax[pgx]`). pgx games are not in `names()` unless registered:
`register("pgx:hex", games.pgx_games.game_class("hex"))`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from typing import Any

from games import testing
from games.core import Game, IllegalMoveError, Symmetry

PLUGINS_ENV = "AZJAX_GAMES"
PGX_PREFIX = "pgx:"

# name -> (module, class) for the shipped games, loaded on first use so that one game's import
# cost is paid alone; the class itself for registered ones.
_REGISTRY: dict[str, tuple[str, str] | type[Game]] = {
    "tictactoe": ("games.tictactoe", "TicTacToe"),
    "connect4": ("games.connect4", "Connect4"),
    "othello": ("games.othello", "Othello"),
    "dots_and_boxes": ("games.dots_and_boxes", "DotsAndBoxes"),
    "chain_reaction": ("games.chain_reaction", "ChainReaction"),
}

_CACHE: dict[tuple[str, tuple[tuple[str, Any], ...]], Game] = {}


def register(name: str, cls: type[Game]) -> None:
    """Add a game defined outside this package: `make(name, **kwargs)` returns `cls(**kwargs)`.

    `name` must equal `cls.name`. Registering the same class again does nothing; another class
    under a taken name is refused (ValueError), as is anything but a concrete `Game` subclass
    (TypeError).
    """
    if not (isinstance(cls, type) and issubclass(cls, Game)):
        raise TypeError(f"games.register({name!r}, {cls!r}): not a subclass of games.Game")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise TypeError(f"games.register({name!r}, {cls.__name__}): {missing} not implemented")
    if getattr(cls, "name", None) != name:
        raise ValueError(
            f"games.register({name!r}, {cls.__name__}): the class's name is "
            f"{getattr(cls, 'name', None)!r}; set `name = {name!r}` on the class"
        )
    known = _REGISTRY.get(name)
    if known is None or known is cls or known == (cls.__module__, cls.__qualname__):
        _REGISTRY[name] = known or cls
        return
    taken = known if isinstance(known, tuple) else (known.__module__, known.__qualname__)
    raise ValueError(
        f"games.register({name!r}, {cls.__module__}.{cls.__qualname__}): the name is taken by "
        f"{'.'.join(taken)}"
    )


def _load_plugins() -> None:
    """Import the modules named in AZJAX_GAMES (each registers its games when imported);
    ValueError naming the first that cannot be imported."""
    names = re.split(r"[:,]", os.environ.get(PLUGINS_ENV, ""))
    for module in filter(None, (name.strip() for name in names)):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(
                f"{PLUGINS_ENV}: cannot import game module {module!r} ({err}); expected "
                "importable module names separated by ':' or ','"
            ) from None


def names() -> list[str]:
    """The registered game names."""
    _load_plugins()
    return sorted(_REGISTRY)


def _game_class(name: str) -> type[Game]:
    """The class of game `name`: registered, or a pgx environment (`pgx:<env_id>`, which
    raises ImportError naming the extra when pgx is missing)."""
    entry = _REGISTRY.get(name)
    if entry is None and name.startswith(PGX_PREFIX):
        pgx_games = importlib.import_module("games.pgx_games")
        return pgx_games.game_class(name.removeprefix(PGX_PREFIX))
    if entry is None:
        raise ValueError(
            f"unknown game {name!r}; expected one of {', '.join(names())} or {PGX_PREFIX}<env_id>"
            f" (a game of your own: name its module in {PLUGINS_ENV}, docs/adding_a_game.md)"
        )
    if isinstance(entry, tuple):
        module, cls = entry
        return getattr(importlib.import_module(module), cls)
    return entry


def make(name: str, **kwargs: Any) -> Game:
    """The game `name`, sized by keyword arguments (e.g. `make("othello", size=6)`), or the
    two-player pgx environment `env_id` for `name="pgx:<env_id>"`.

    The same game (defaults filled in: `make("othello")` is `make("othello", size=8)`) is the
    same object, so jitted functions closing over it are compiled once.
    """
    _load_plugins()
    game_cls = _game_class(name)
    try:
        bound = inspect.signature(game_cls).bind(**kwargs)
    except TypeError as err:
        raise ValueError(f"bad arguments for game {name!r}: {err}") from None
    bound.apply_defaults()
    # Types are part of the key: 8.0 == 8 (and True == 1) must still reach the game's checks.
    key = (name, tuple((k, type(v), v) for k, v in sorted(bound.arguments.items())))
    if key not in _CACHE:
        _CACHE[key] = game_cls(**bound.arguments)
    return _CACHE[key]


__all__ = ["Game", "IllegalMoveError", "Symmetry", "make", "names", "register", "testing"]
