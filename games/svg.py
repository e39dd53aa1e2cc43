"""Board pictures for every game: `to_svg(game, state)` and `to_png(game, state)`.

Each game is drawn from `game.name` and the signed board `game.board(state)` as a short list of
shapes, which is written out either as SVG text or rasterised with Pillow (imported only when a
PNG is asked for). The same shapes serve the browser (clickable regions carry `data-action`),
pictures on disk and animated replays.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from typing import Any
from xml.sax.saxutils import escape

import numpy as np

from games.core import Game, letters

# Player colours per game: (player 0, player 1).
COLOURS: dict[str, tuple[str, str]] = {
    "tictactoe": ("#d1495b", "#2e86ab"),
    "connect4": ("#d1495b", "#f2c14e"),
    "othello": ("#1c1c1c", "#f4f4f4"),
    "dots_and_boxes": ("#d1495b", "#2e86ab"),
    "chain_reaction": ("#e63946", "#2a9d8f"),
}
# Player names that match the colours, as shown to people.
PLAYERS: dict[str, tuple[str, str]] = {
    "tictactoe": ("X", "O"),
    "connect4": ("Red", "Yellow"),
    "othello": ("Black", "White"),
    "dots_and_boxes": ("Red", "Blue"),
    "chain_reaction": ("Red", "Green"),
}
_INK = "#333333"
_FAINT = "#9a9a9a"
WIN_COLOUR = "#2b2d42"  # the line through a winning row
COUNT_COLOUR = "#1b1b2f"  # Chain Reaction: the count of a cell holding more than three orbs
_FONT = "font-family:Helvetica,Arial,sans-serif"


@dataclasses.dataclass(frozen=True)
class Shape:
    """One drawing primitive in picture coordinates (pixels, y down).

    `kind` is "rect" (x, y, w, h), "circle" (cx, cy, r), "line" (x1, y1, x2, y2) or "text" (x, y,
    font size) centred on (x, y). A shape with `action` set is a clickable region for that move.
    """

    kind: str
    geom: tuple[float, ...]
    fill: str | None = None
    stroke: str | None = None
    width: float = 0.0
    text: str = ""
    action: int | None = None


@dataclasses.dataclass(frozen=True)
class Picture:
    """A whole picture: its size in pixels, background colour and shapes (drawn in order)."""

    width: float
    height: float
    background: str
    shapes: tuple[Shape, ...]


def picture(
    game: Game,
    state: Any = None,
    *,
    board: np.ndarray | None = None,
    last_action: int | None = None,
    cell: float = 64.0,
) -> Picture:
    """The shapes of a position: from `state`, or from a bare signed `board` (no legal moves).

    Legal moves of `state` become clickable regions; `last_action` is marked when given.
    """
    if board is None:
        if state is None:
            raise ValueError("picture needs a state or a board, got neither")
        board = game.board(state)
    board = np.asarray(board)
    legal = np.zeros(game.num_actions, bool)
    if state is not None and not bool(state.terminated):
        legal = np.asarray(state.legal_action_mask, bool)
    draw = _DRAWERS.get(game.name)
    if draw is None:
        raise ValueError(f"no picture for game {game.name!r}; expected one of {sorted(_DRAWERS)}")
    return draw(game, board, legal, last_action, float(cell))


def score(game: Game, board: np.ndarray) -> tuple[int, int] | None:
    """What each player has on the board where people count it: Othello discs, Dots and Boxes
    boxes, Chain Reaction orbs; None for the other games."""
    board = np.asarray(board)
    if game.name == "othello":
        return int((board > 0).sum()), int((board < 0).sum())
    if game.name == "dots_and_boxes":
        boxes = board[1::2, 1::2]
        return int((boxes > 0).sum()), int((boxes < 0).sum())
    if game.name == "chain_reaction":
        return int(board[board > 0].sum()), int(-board[board < 0].sum())
    return None


def to_svg(
    game: Game,
    state: Any = None,
    *,
    board: np.ndarray | None = None,
    last_action: int | None = None,
    cell: float = 64.0,
    clickable: bool = False,
) -> str:
    """The position as an SVG document.

    With `clickable`, every legal move is an element of class `move` with a `data-action`
    attribute (the action index), for the browser to attach clicks to.
    """
    pic = picture(game, state, board=board, last_action=last_action, cell=cell)
    return svg_text(pic, clickable=clickable, label=f"{game.name} board")


def to_png(
    game: Game,
    state: Any = None,
    *,
    board: np.ndarray | None = None,
    last_action: int | None = None,
    cell: float = 64.0,
    path: str | None = None,
) -> bytes:
    """The position as PNG bytes (Pillow); also written to `path` when given."""
    image = rasterise(picture(game, state, board=board, last_action=last_action, cell=cell))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = buffer.getvalue()
    if path is not None:
        with open(path, "wb") as f:
            f.write(data)
    return data


# ----------------------------------------------------------------------------- output


def _num(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def svg_text(pic: Picture, clickable: bool = False, label: str = "board") -> str:
    """Write a picture as a standalone SVG document."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_num(pic.width)} '
        f'{_num(pic.height)}" width="{_num(pic.width)}" height="{_num(pic.height)}" '
        f'role="img" aria-label="{escape(label)}">',
        f'<rect x="0" y="0" width="{_num(pic.width)}" height="{_num(pic.height)}" '
        f'fill="{pic.background}"/>',
    ]
    for s in pic.shapes:
        if s.action is not None and not clickable:
            continue
        paint = f'fill="{s.fill or "none"}"'
        if s.stroke:
            paint += f' stroke="{s.stroke}" stroke-width="{_num(s.width)}"'
        extra = f' class="move" data-action="{s.action}"' if s.action is not None else ""
        g = [_num(v) for v in s.geom]
        if s.kind == "rect":
            out.append(
                f'<rect x="{g[0]}" y="{g[1]}" width="{g[2]}" height="{g[3]}" {paint}{extra}/>'
            )
        elif s.kind == "circle":
            out.append(f'<circle cx="{g[0]}" cy="{g[1]}" r="{g[2]}" {paint}{extra}/>')
        elif s.kind == "line":
            out.append(
                f'<line x1="{g[0]}" y1="{g[1]}" x2="{g[2]}" y2="{g[3]}" {paint} '
                f'stroke-linecap="round"{extra}/>'
            )
        elif s.kind == "text":
            out.append(
                f'<text x="{g[0]}" y="{g[1]}" font-size="{g[2]}" text-anchor="middle" '
                f'dominant-baseline="central" style="{_FONT}" {paint}{extra}>'
                f"{escape(s.text)}</text>"
            )
        else:
            raise ValueError(f"unknown shape kind {s.kind!r}")
    out.append("</svg>")
    return "\n".join(out)


def rasterise(pic: Picture, supersample: int = 3) -> Any:
    """Draw a picture with Pillow (supersampled, then reduced for smooth edges); RGB image."""
    from PIL import Image, ImageDraw, ImageFont

    k = supersample
    size = (round(pic.width * k), round(pic.height * k))
    image = Image.new("RGB", size, pic.background)
    pen = ImageDraw.Draw(image)
    for s in pic.shapes:
        if s.action is not None:
            continue
        g = [v * k for v in s.geom]
        w = round(s.width * k)
        if s.kind == "rect":
            pen.rectangle(
                (g[0], g[1], g[0] + g[2], g[1] + g[3]),
                fill=s.fill,
                outline=s.stroke,
                width=w if s.stroke else 0,
            )
        elif s.kind == "circle":
            box = (g[0] - g[2], g[1] - g[2], g[0] + g[2], g[1] + g[2])
            pen.ellipse(box, fill=s.fill, outline=s.stroke, width=w if s.stroke else 0)
        elif s.kind == "line":
            pen.line((g[0], g[1], g[2], g[3]), fill=s.stroke, width=w)
            for x, y in ((g[0], g[1]), (g[2], g[3])):  # round caps, as in the SVG
                pen.ellipse((x - w / 2, y - w / 2, x + w / 2, y + w / 2), fill=s.stroke)
        elif s.kind == "text":
            font = ImageFont.load_default(size=g[2])
            pen.text((g[0], g[1]), s.text, fill=s.fill, font=font, anchor="mm")
        else:
            raise ValueError(f"unknown shape kind {s.kind!r}")
    return image.resize((round(pic.width), round(pic.height)), Image.Resampling.LANCZOS)


# ----------------------------------------------------------------------------- games


def _runs(board: np.ndarray, length: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(first, last) cells of every straight run of `length` equal non-zero cells."""
    rows, cols = board.shape
    found = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                end = (r + dr * (length - 1), c + dc * (length - 1))
                if not (0 <= end[0] < rows and 0 <= end[1] < cols) or board[r, c] == 0:
                    continue
                if all(board[r + dr * k, c + dc * k] == board[r, c] for k in range(length)):
                    found.append(((r, c), end))
    return found


def _margin(cell: float) -> float:
    return round(cell * 0.45)


def _tictactoe(
    game: Game, board: np.ndarray, legal: np.ndarray, last: int | None, cell: float
) -> Picture:
    m = _margin(cell) / 2
    x_col, o_col = COLOURS["tictactoe"]
    shapes: list[Shape] = []
    for i in (1, 2):
        shapes.append(Shape("line", (m + i * cell, m, m + i * cell, m + 3 * cell), None, _INK, 3))
        shapes.append(Shape("line", (m, m + i * cell, m + 3 * cell, m + i * cell), None, _INK, 3))
    for r in range(3):
        for c in range(3):
            a = r * 3 + c
            x, y = m + c * cell, m + r * cell
            cx, cy, q = x + cell / 2, y + cell / 2, cell * 0.28
            if a == last:
                shapes.append(Shape("rect", (x + 4, y + 4, cell - 8, cell - 8), "#fff3c4"))
            v = int(board[r, c])
            if v > 0:
                shapes.append(Shape("line", (cx - q, cy - q, cx + q, cy + q), None, x_col, 6))
                shapes.append(Shape("line", (cx - q, cy + q, cx + q, cy - q), None, x_col, 6))
            elif v < 0:
                shapes.append(Shape("circle", (cx, cy, q * 1.05), None, o_col, 5.5))
            else:  # the notation of an empty cell, faint
                shapes.append(Shape("text", (cx, cy, cell * 0.22), _FAINT, text=str(a + 1)))
            if legal[a]:
                shapes.append(Shape("rect", (x, y, cell, cell), "transparent", action=a))
    for (r1, c1), (r2, c2) in _runs(board, 3):  # the winning line
        x1, y1 = m + (c1 + 0.5) * cell, m + (r1 + 0.5) * cell
        x2, y2 = m + (c2 + 0.5) * cell, m + (r2 + 0.5) * cell
        shapes.append(Shape("line", (x1, y1, x2, y2), None, WIN_COLOUR, 7))
    side = 3 * cell + 2 * m
    return Picture(side, side, "#ffffff", tuple(shapes))


def _connect4(
    game: Game, board: np.ndarray, legal: np.ndarray, last: int | None, cell: float
) -> Picture:
    rows, cols = board.shape
    m = _margin(cell)
    red, yellow = COLOURS["connect4"]
    shapes = [Shape("rect", (m / 2, m / 2, cols * cell, rows * cell), "#1d4e89")]
    last_row = None
    if last is not None:  # the top disc of the last column played
        filled = np.flatnonzero(board[:, last] != 0)
        last_row = int(filled[0]) if filled.size else None
    for r in range(rows):
        for c in range(cols):
            cx, cy = m / 2 + (c + 0.5) * cell, m / 2 + (r + 0.5) * cell
            v = int(board[r, c])
            fill = red if v > 0 else yellow if v < 0 else "#f7f7f2"
            shapes.append(Shape("circle", (cx, cy, cell * 0.4), fill, "#153a66", 2))
            if last == c and last_row == r:
                shapes.append(Shape("circle", (cx, cy, cell * 0.1), "#ffffff"))
    for (r1, c1), (r2, c2) in _runs(board, 4):  # the winning four
        x1, y1 = m / 2 + (c1 + 0.5) * cell, m / 2 + (r1 + 0.5) * cell
        x2, y2 = m / 2 + (c2 + 0.5) * cell, m / 2 + (r2 + 0.5) * cell
        shapes.append(Shape("line", (x1, y1, x2, y2), None, WIN_COLOUR, 8))
    for c in range(cols):
        x = m / 2 + (c + 0.5) * cell
        shapes.append(
            Shape("text", (x, m / 2 + rows * cell + m / 2, m * 0.6), _INK, text=str(c + 1))
        )
        if legal[c]:
            shapes.append(
                Shape("rect", (m / 2 + c * cell, m / 2, cell, rows * cell), "transparent", action=c)
            )
    return Picture(cols * cell + m, rows * cell + 1.5 * m, "#ffffff", tuple(shapes))


def _othello(
    game: Game, board: np.ndarray, legal: np.ndarray, last: int | None, cell: float
) -> Picture:
    n = board.shape[0]
    m = _margin(cell)
    black, white = COLOURS["othello"]
    shapes = [Shape("rect", (m, m, n * cell, n * cell), "#2e7d4f", "#174a2c", 3)]
    for i in range(1, n):
        shapes.append(
            Shape("line", (m + i * cell, m, m + i * cell, m + n * cell), None, "#174a2c", 1.5)
        )
        shapes.append(
            Shape("line", (m, m + i * cell, m + n * cell, m + i * cell), None, "#174a2c", 1.5)
        )
    cols = letters(n)
    for i in range(n):
        shapes.append(Shape("text", (m + (i + 0.5) * cell, m / 2, m * 0.5), _INK, text=cols[i]))
        shapes.append(Shape("text", (m / 2, m + (i + 0.5) * cell, m * 0.5), _INK, text=str(i + 1)))
    for r in range(n):
        for c in range(n):
            a = r * n + c
            cx, cy = m + (c + 0.5) * cell, m + (r + 0.5) * cell
            v = int(board[r, c])
            if v != 0:
                fill, edge = (black, "#000000") if v > 0 else (white, "#8a8a8a")
                shapes.append(Shape("circle", (cx, cy, cell * 0.4), fill, edge, 1.5))
            if a == last:
                shapes.append(Shape("circle", (cx, cy, cell * 0.08), "#e63946"))
            if legal[a]:
                shapes.append(Shape("circle", (cx, cy, cell * 0.1), "#5fa57a"))
                shapes.append(
                    Shape("rect", (m + c * cell, m + r * cell, cell, cell), "transparent", action=a)
                )
    side = n * cell + 1.3 * m  # labels on the top and left only
    return Picture(side, side, "#ffffff", tuple(shapes))


def _dots_and_boxes(
    game: Game, board: np.ndarray, legal: np.ndarray, last: int | None, cell: float
) -> Picture:
    rows, cols = (board.shape[0] - 1) // 2, (board.shape[1] - 1) // 2
    m = _margin(cell)
    colours = COLOURS["dots_and_boxes"]
    tint = {1: "#f6d3d8", -1: "#cfe4ef"}
    shapes: list[Shape] = []

    def point(r: int, c: int) -> tuple[float, float]:
        return m + c * cell, m + r * cell

    for c in range(cols + 1):  # dots are numbered from 1, as in the notation
        shapes.append(Shape("text", (m + c * cell, m * 0.4, m * 0.45), _INK, text=str(c + 1)))
    for r in range(rows + 1):
        shapes.append(Shape("text", (m * 0.4, m + r * cell, m * 0.45), _INK, text=str(r + 1)))
    for r in range(rows):  # claimed boxes first, under the lines
        for c in range(cols):
            owner = int(np.sign(board[2 * r + 1, 2 * c + 1]))
            if owner:
                x, y = point(r, c)
                shapes.append(Shape("rect", (x, y, cell, cell), tint[owner]))
                colour = colours[0 if owner > 0 else 1]
                shapes.append(Shape("circle", (x + cell / 2, y + cell / 2, cell * 0.16), colour))
    horizontal = (rows + 1) * cols
    lines = [
        (r * cols + c, (2 * r, 2 * c + 1), (r, c), (r, c + 1), "h")
        for r in range(rows + 1)
        for c in range(cols)
    ]
    lines += [
        (horizontal + r * (cols + 1) + c, (2 * r + 1, 2 * c), (r, c), (r + 1, c), "v")
        for r in range(rows)
        for c in range(cols + 1)
    ]
    for a, grid, start, end, kind in lines:
        (x1, y1), (x2, y2) = point(*start), point(*end)
        if board[grid] != 0:
            colour = "#e0a100" if a == last else _INK
            shapes.append(Shape("line", (x1, y1, x2, y2), None, colour, 5))
            continue
        shapes.append(Shape("line", (x1, y1, x2, y2), None, "#e6e6e6", 3))
        if legal[a]:
            pad = cell * 0.18
            box = (
                (x1 + pad, y1 - pad, cell - 2 * pad, 2 * pad)
                if kind == "h"
                else (x1 - pad, y1 + pad, 2 * pad, cell - 2 * pad)
            )
            shapes.append(Shape("rect", box, "transparent", action=a))
    for r in range(rows + 1):
        for c in range(cols + 1):
            shapes.append(Shape("circle", (*point(r, c), cell * 0.08), _INK))
    return Picture(cols * cell + 1.5 * m, rows * cell + 1.5 * m, "#ffffff", tuple(shapes))


# Orb centres (as fractions of a cell, about its centre) for 1, 2 and 3 orbs.
_ORB_LAYOUT = {
    1: ((0.0, 0.0),),
    2: ((-0.14, 0.0), (0.14, 0.0)),
    3: ((-0.14, 0.1), (0.14, 0.1), (0.0, -0.14)),
}


def _chain_reaction(
    game: Game, board: np.ndarray, legal: np.ndarray, last: int | None, cell: float
) -> Picture:
    rows, cols = board.shape
    m = _margin(cell)
    p0, p1 = COLOURS["chain_reaction"]
    shapes = [Shape("rect", (m, m, cols * cell, rows * cell), "#1b1b2f")]
    for c in range(cols):
        shapes.append(Shape("text", (m + (c + 0.5) * cell, m / 2, m * 0.5), _INK, text=str(c + 1)))
    for r in range(rows):
        shapes.append(Shape("text", (m / 2, m + (r + 0.5) * cell, m * 0.5), _INK, text=str(r + 1)))
    for r in range(rows):
        for c in range(cols):
            a = r * cols + c
            x, y = m + c * cell, m + r * cell
            cx, cy = x + cell / 2, y + cell / 2
            edge = "#f1c40f" if a == last else "#3d3d5c"
            shapes.append(Shape("rect", (x, y, cell, cell), None, edge, 3 if a == last else 1.5))
            v = int(board[r, c])
            colour = p0 if v > 0 else p1
            count = abs(v)
            critical = (r > 0) + (r < rows - 1) + (c > 0) + (c < cols - 1)
            if count and count >= critical:  # an exploding cell (animation frames)
                shapes.append(Shape("circle", (cx, cy, cell * 0.42), "#f1c40f"))
            for dx, dy in _ORB_LAYOUT.get(min(count, 3), ()):
                shapes.append(
                    Shape(
                        "circle",
                        (cx + dx * cell, cy + dy * cell, cell * 0.14),
                        colour,
                        "#0d0d0d",
                        1,
                    )
                )
            if count > 3:
                shapes.append(
                    Shape("text", (cx, cy + cell * 0.33, cell * 0.2), COUNT_COLOUR, text=str(count))
                )
            if legal[a]:
                shapes.append(Shape("rect", (x, y, cell, cell), "transparent", action=a))
    return Picture(cols * cell + 2 * m, rows * cell + 2 * m, "#ffffff", tuple(shapes))


_DRAWERS: dict[str, Callable[..., Picture]] = {
    "tictactoe": _tictactoe,
    "connect4": _connect4,
    "othello": _othello,
    "dots_and_boxes": _dots_and_boxes,
    "chain_reaction": _chain_reaction,
}
