"""The model zoo: trained networks shipped with azjax, ready to play.

    azjax.zoo.names()                          # the models, e.g. ["connect4", ...]
    azjax.model.load("zoo:connect4")           # config, network, params, card (azjax.model)
    agents.make("zoo:connect4", game)          # the network with search; policy-zoo:NAME: alone

Each model is `NAME.azjax` (written by `azjax-export`) with its card `NAME.card.json` in this
package's folder, or in `$AZJAX_ZOO_DIR` when set.
"""

from __future__ import annotations

import functools
import os
import pathlib
from typing import Any

import games
from azjax import export

ENV = "AZJAX_ZOO_DIR"


def directory() -> pathlib.Path:
    """The zoo's folder: `$AZJAX_ZOO_DIR`, else the one shipped in the package."""
    return pathlib.Path(os.environ.get(ENV) or pathlib.Path(__file__).parent)


def _plays(name: str, game: games.Game) -> bool:
    """Whether zoo model `name` plays `game` at its size (False for a damaged card)."""
    try:
        return export.card_game(card(name)) is game
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
    """The card of zoo model `name` (read again once its file is rewritten)."""
    file = path(name)
    return _card(file, file.stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _card(file: pathlib.Path, mtime_ns: int) -> dict[str, Any]:
    return export.read_card(file)


def default(game: games.Game) -> str | None:
    """The zoo model for `game`: the one named after it, else the first that plays it, or None."""
    found = names(game)
    return game.name if game.name in found else next(iter(found), None)


def table(models: list[str] | None = None) -> str:
    """The zoo's `models` (default all) as a text table: name, game, size, iteration, strength."""
    rows = [("name", "game", "size", "iteration", "strength")]
    for name in names() if models is None else models:
        c = card(name)
        size = ",".join(f"{k}={v}" for k, v in sorted(c["game"]["kwargs"].items())) or "-"
        rows.append((name, c["game"]["name"], size, str(c["iteration"]), export.headline(c)))
    if len(rows) == 1:
        return f"the zoo is empty ({directory()})"
    widths = [*(max(len(r[i]) for r in rows) for i in range(4)), 0]  # the last column unpadded
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)
