"""The model zoo: trained networks shipped with azjax, ready to play.

    azjax.zoo.names()                          # the models, e.g. ["connect4", ...]
    azjax.model.load("zoo:connect4")           # config, network, params, card (azjax.model)
    agents.make("zoo:connect4", game)          # the network with search; policy-zoo:NAME: alone

Each model is `NAME.azjax` in this package's folder (written by `azjax-export`, see
azjax.export), with its card beside it as `NAME.card.json`. The environment variable
`AZJAX_ZOO_DIR` points the zoo at another folder (one's own models).
"""

from __future__ import annotations

import functools
import os
import pathlib
from typing import Any

import games
from azjax import export
from azjax.card import card_game, headline

ENV = "AZJAX_ZOO_DIR"


def directory() -> pathlib.Path:
    """The zoo's folder: `$AZJAX_ZOO_DIR`, else the one shipped in the package."""
    return pathlib.Path(os.environ.get(ENV) or pathlib.Path(__file__).parent)


def _plays(name: str, game: games.Game) -> bool:
    """Whether zoo model `name` was trained for `game` (the same game and size): not when its
    card names a game (or size) this azjax does not know, or cannot be read (a damaged file,
    which `zoo:NAME` names when asked for)."""
    try:
        return card_game(card(name)) is game
    except ValueError:
        return False


def names(game: games.Game | None = None) -> list[str]:
    """The zoo's models, sorted; with `game`, those trained for it (same game and size)."""
    found = sorted(p.name.removesuffix(export.SUFFIX) for p in directory().glob("*.azjax"))
    return found if game is None else [n for n in found if _plays(n, game)]


def path(name: str) -> pathlib.Path:
    """The model file of zoo model `name`; ValueError naming the models there are."""
    file = directory() / f"{name}{export.SUFFIX}"
    if "/" in name or "\\" in name or not file.is_file():
        there = ", ".join(names()) or "none"
        raise ValueError(f"no zoo model {name!r} in {directory()}; the zoo has: {there}")
    return file


def card(name: str) -> dict[str, Any]:
    """The card of zoo model `name`."""
    file = path(name)
    return _card(file, file.stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _card(file: pathlib.Path, mtime_ns: int) -> dict[str, Any]:
    del mtime_ns  # part of the cache key only: a rewritten model is read again
    return export.read_card(file)


def default(game: games.Game) -> str | None:
    """The zoo model to play `game` by default: the one named after the game if it plays this
    size, else the first that does; None when the zoo has none."""
    found = names(game)
    return next((name for name in found if name == game.name), found[0] if found else None)


def table(models: list[str] | None = None) -> str:
    """The zoo's `models` (default all) as a text table: name, game, size, iteration and
    strength figures."""
    rows = []
    for name in names() if models is None else models:
        c = card(name)
        size = ",".join(f"{k}={v}" for k, v in sorted(c["game"]["kwargs"].items())) or "-"
        rows.append((name, c["game"]["name"], size, str(c["iteration"]), headline(c)))
    if not rows:
        return f"the zoo is empty ({directory()})"
    header = ("name", "game", "size", "iteration", "strength")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = [
        "  ".join([*(f"{v:{w}}" for v, w in zip(r, widths, strict=False)), r[-1]])
        for r in [header, *rows]
    ]
    return "\n".join(lines)
