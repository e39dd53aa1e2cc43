"""Pure, jittable board-game rules: `games.make(name, **kwargs)` and `games.names()`.

This package never imports `azjax`; people use it on its own.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from games.core import Game, IllegalMoveError, Symmetry

# name -> (module, class); modules load on first use so one game's import cost is paid alone.
_REGISTRY: dict[str, tuple[str, str]] = {
    "tictactoe": ("games.tictactoe", "TicTacToe"),
    "connect4": ("games.connect4", "Connect4"),
    "othello": ("games.othello", "Othello"),
    "dots_and_boxes": ("games.dots_and_boxes", "DotsAndBoxes"),
    "chain_reaction": ("games.chain_reaction", "ChainReaction"),
}

_CACHE: dict[tuple[str, tuple[tuple[str, Any], ...]], Game] = {}


def names() -> list[str]:
    """The registered game names."""
    return sorted(_REGISTRY)


def make(name: str, **kwargs: Any) -> Game:
    """The game `name`, sized by keyword arguments (e.g. `make("othello", size=6)`).

    The same game (defaults filled in: `make("othello")` is `make("othello", size=8)`) is the
    same object, so jitted functions closing over it are compiled once.
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown game {name!r}; expected one of {', '.join(names())}")
    module, cls = _REGISTRY[name]
    game_cls = getattr(importlib.import_module(module), cls)
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


__all__ = ["Game", "IllegalMoveError", "Symmetry", "make", "names"]
