"""Board pictures for every game: `to_svg(game, state)` and `to_png(game, state)`.

Each game draws itself (`Game.draw`, in its own module) from the signed board
`game.board(state)` as a short list of shapes, which is written out either as SVG text or
rasterised with Pillow (imported only when a PNG is asked for). The same shapes serve the
browser (clickable regions carry `data-action`), pictures on disk and animated replays. The
helpers the games draw with live here, and `grid_picture`, the picture of a game that draws
nothing of its own.
"""

from __future__ import annotations

import dataclasses
import io
import re
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import numpy as np

if TYPE_CHECKING:
    from games.core import Game

INK = "#333333"
FAINT = "#9a9a9a"
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
    return game.draw(board, legal, last_action, float(cell))


def score(game: Game, board: np.ndarray) -> tuple[int, int] | None:
    """What each player has on the board where people count it (`Game.counts`: Othello discs,
    Dots and Boxes boxes, Chain Reaction orbs); None for the other games."""
    return game.counts(np.asarray(board))


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


def pgx_svg(env_state: Any, label: str = "board") -> str:
    """pgx's own drawing of a pgx State (`State.to_svg`: Hex's hexagons, Backgammon's points
    and dice) as a standalone SVG document that scales like `svg_text`'s (a viewBox) and is
    labelled like it. It has no clickable moves."""
    text = env_state.to_svg()
    head = re.match(r"<svg\b[^>]*>", text)
    if head is None:
        raise ValueError(f"pgx's drawing is not SVG: {text[:40]!r}")
    width = re.search(r'\swidth="([\d.]+)"', head.group())
    height = re.search(r'\sheight="([\d.]+)"', head.group())
    extra = f' role="img" aria-label="{escape(label)}"'
    if width and height:
        extra += f' viewBox="0 0 {_num(float(width[1]))} {_num(float(height[1]))}"'
    return head.group()[:-1] + extra + ">" + text[head.end() :]


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


# ----------------------------------------------------------------------------- helpers


def runs(board: np.ndarray, length: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
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


def margin(cell: float) -> float:
    """The border around a board of cells of side `cell`."""
    return round(cell * 0.45)


def grid_picture(
    board: np.ndarray,
    legal: np.ndarray,
    last: int | None,
    cell: float,
    colours: tuple[str, str],
) -> Picture:
    """A plain picture of any signed board: a grid of cells, each non-empty one holding a disc
    of its owner's colour with the count inside when above 1, the `last` cell outlined, the
    columns numbered from 1 below and the rows from 1 at the left. Cell i (row-major) is action
    i, clickable when legal, if the board has a cell per action or per action but one (a pass);
    otherwise no move is drawn."""
    board = np.asarray(board)
    board = board.reshape(1, -1) if board.ndim < 2 else board.reshape(board.shape[0], -1)
    rows, cols = board.shape
    clickable = rows * cols in (len(legal), len(legal) - 1)
    m = margin(cell)  # room for the numbers
    shapes: list[Shape] = []
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            x, y = m + c * cell, m / 2 + r * cell
            edge, width = ("#e0a100", 3.0) if i == last and clickable else (INK, 1.5)
            shapes.append(Shape("rect", (x, y, cell, cell), "#f7f7f2", edge, width))
            v = int(board[r, c])
            if v:
                fill = colours[0 if v > 0 else 1]
                shapes.append(Shape("circle", (x + cell / 2, y + cell / 2, cell * 0.4), fill))
            if abs(v) > 1:
                size = cell * 0.3
                shapes.append(
                    Shape("text", (x + cell / 2, y + cell / 2, size), "#ffffff", text=str(abs(v)))
                )
            if clickable and legal[i]:
                shapes.append(Shape("rect", (x, y, cell, cell), "transparent", action=i))
    for c in range(cols):
        at = (m + (c + 0.5) * cell, m / 2 + rows * cell + m / 2, m * 0.6)
        shapes.append(Shape("text", at, INK, text=str(c + 1)))
    for r in range(rows):
        shapes.append(
            Shape("text", (m / 2, m / 2 + (r + 0.5) * cell, m * 0.6), INK, text=str(r + 1))
        )
    return Picture(cols * cell + 1.5 * m, rows * cell + 1.5 * m, "#ffffff", tuple(shapes))
