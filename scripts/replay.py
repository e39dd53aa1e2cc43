"""A finished game as an animated GIF or a sequence of SVG pictures.

    python scripts/replay.py --game tictactoe --moves "5 1 9 3 2 8 7" --out game.gif
    python scripts/replay.py --record game.json --out frames/        # from azjax-play --save
    python scripts/replay.py --game chain_reaction --agents greedy random --out cr.gif
    python scripts/replay.py --game othello --size size=6 --moves "c2 b2 b3" --out o6.gif

Moves are given in the game's notation, separated by spaces, or by `;` when a move itself has
spaces (Dots and Boxes: "h 1 1; v 1 1"). With `--agents A B`, the two agents play a game (A
first). Chain Reaction moves show each explosion level as its own frame. An output ending in
`.gif` is an animated GIF; anything else is a folder of numbered SVG files. A game with its own
drawing (pgx's games: Hex's hexagons, Backgammon's points and dice) is drawn with it, as SVG
files only. Every replay starts from `game.init(START)`, so a game with dice rolls the same
dice when its moves are replayed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys
from collections.abc import Sequence
from html import escape
from typing import Any

import jax

import games
from azjax.checks import add_game_arguments, check_writable_file, parse_size, seed_arg
from games import svg

CAPTION = 34.0  # pixels under the board for the move caption
HIGHLIGHT = "#f1c40f"  # Chain Reaction's colour for a cell at critical mass and the last move
INK = "#333333"
START = 0  # the key of every replay's start position: a game with dice replays its rolls


def split_moves(text: str) -> list[str]:
    """Moves separated by `;` when any is, else by whitespace."""
    parts = text.split(";") if ";" in text else text.split()
    return [p.strip() for p in parts if p.strip()]


def agent_game(game: games.Game, specs: Sequence[str], seed: int) -> list[int]:
    """The actions of one game between two agents (specs[0] moves first)."""
    from azjax.session import compiled_agent

    agents = [compiled_agent(game, spec) for spec in specs]
    key, state, actions = jax.random.key(seed), game.init(jax.random.key(START)), []
    while not bool(state.terminated):
        key, sub = jax.random.split(key)
        action = agents[int(state.current_player)](state, sub)
        state = game.checked_step(state, action)
        actions.append(action)
    return actions


def read_record(path: str) -> dict[str, Any]:
    """A game saved by `azjax-play --save`; ValueError naming what is wrong with it."""
    try:
        text = pathlib.Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read --record {path}: {getattr(err, 'strerror', err)}") from None
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        record = None
    moves = record.get("moves") if isinstance(record, dict) else None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("game"), str)
        or not isinstance(record.get("kwargs", {}), dict)
        or not isinstance(moves, list)
        or not all(isinstance(m, str) for m in moves)
    ):
        raise ValueError(
            f"--record {path} is not a game saved by azjax-play: expected JSON like "
            '{"game": "connect4", "moves": ["4", "3"], "kwargs": {}}'
        )
    return record


def captioned(pic: svg.Picture, text: str) -> svg.Picture:
    """The picture with a line of text under it."""
    label = svg.Shape("text", (pic.width / 2, pic.height + CAPTION / 2, 16), INK, text=text)
    return dataclasses.replace(pic, height=pic.height + CAPTION, shapes=(*pic.shapes, label))


def with_legend(pic: svg.Picture) -> svg.Picture:
    """The picture with a legend of the Chain Reaction marks under it: the highlighted disc
    of a cell at critical mass (as many orbs as neighbours), the frame of the last move, and
    the number written on a cell of more than three orbs."""
    size, step = 12.0, 18.0
    rows = [
        ("circle", "critical mass (= neighbours): explodes"),
        ("rect", "last move"),
        ("text", "orbs, when more than 3"),
    ]
    from PIL import ImageFont

    length = ImageFont.load_default(size=size).getlength  # the font GIF frames are drawn in
    shapes = list(pic.shapes)
    width = max(length(text) for _, text in rows)
    left = (pic.width - width) / 2 + size  # where each line starts, its icon before it
    for i, (icon, text) in enumerate(rows):
        y = pic.height + step * (i + 0.5)
        x = left - size
        if icon == "circle":
            shapes.append(svg.Shape("circle", (x, y, size * 0.55), HIGHLIGHT))
        elif icon == "rect":
            box = (x - size / 2, y - size / 2, size, size)
            shapes.append(svg.Shape("rect", box, None, HIGHLIGHT, 2))
        else:
            shapes.append(svg.Shape("text", (x, y, size), svg.COUNT_COLOUR, text="5"))
        centre = left + length(text) / 2
        shapes.append(svg.Shape("text", (centre, y, size), INK, text=text))
    height = pic.height + step * len(rows) + 6
    return dataclasses.replace(pic, height=height, shapes=tuple(shapes))


def draws_itself(game: games.Game) -> bool:
    """Whether the game has its own drawing (`Game.svg` overridden: pgx's games), which this
    script writes as SVG files but cannot rasterise into a GIF."""
    return type(game).svg is not games.Game.svg


def own_frames(game: games.Game, actions: Sequence[int], names: Sequence[str]) -> list[str]:
    """SVG documents of the start and every move in the game's own drawing, captioned."""
    state = game.init(jax.random.key(START))
    out = [_captioned_svg(game.svg(state), "start")]
    for i, action in enumerate(actions):
        text = f"{i + 1}. {names[int(state.current_player)]} {game.format_action(action)}"
        state = game.checked_step(state, action)
        out.append(_captioned_svg(game.svg(state), text + _result(game, state, names)))
    return out


def _captioned_svg(document: str, text: str) -> str:
    """An SVG document with a line of text under it (the document nested as it is)."""
    box = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', document)
    if box is None:
        raise ValueError(f"the game's drawing has no viewBox: {document[:60]!r}")
    width, height = float(box[1]), float(box[2])
    total = height + CAPTION
    label = (
        f'<text x="{width / 2:g}" y="{height + CAPTION / 2:g}" font-size="16" '
        f'text-anchor="middle" dominant-baseline="middle" fill="{INK}">{escape(text)}</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{total:g}" '
        f'viewBox="0 0 {width:g} {total:g}">{document}{label}</svg>'
    )


def _result(game: games.Game, state: Any, names: Sequence[str]) -> str:
    """The caption's end: who won (and the count, where people count), a draw, or nothing."""
    if not bool(state.terminated):
        return ""
    reward = float(state.rewards[0])
    text = f" - {names[0] if reward > 0 else names[1]} wins" if reward else " - draw"
    counted = svg.score(game, game.board(state))
    return text + (f" {counted[0]}-{counted[1]}" if counted else "")


def frames(
    game: games.Game, actions: Sequence[int], names: Sequence[str], cell: float
) -> list[tuple[svg.Picture, bool]]:
    """(picture, is_final_position_of_a_move) for the start and every move of the game; games
    drawn level by level (Chain Reaction) get a legend of their marks."""
    pictures = _frames(game, actions, names, cell)
    if hasattr(game, "chain_levels"):
        pictures = [(with_legend(pic), final) for pic, final in pictures]
    return pictures


def _frames(
    game: games.Game, actions: Sequence[int], names: Sequence[str], cell: float
) -> list[tuple[svg.Picture, bool]]:
    state = game.init(jax.random.key(START))
    out = [(captioned(svg.picture(game, state, cell=cell), "start"), True)]
    for i, action in enumerate(actions):
        mover = names[int(state.current_player)]
        text = f"{i + 1}. {mover} {game.format_action(action)}"
        if hasattr(game, "chain_levels"):
            for board in game.chain_levels(state, action)[:-1]:
                pic = svg.picture(game, board=board, last_action=action, cell=cell)
                out.append((captioned(pic, text), False))
        state = game.checked_step(state, action)
        text += _result(game, state, names)
        pic = svg.picture(game, board=game.board(state), last_action=action, cell=cell)
        out.append((captioned(pic, text), True))
    return out


def write_gif(pictures: Sequence[tuple[svg.Picture, bool]], path: pathlib.Path, ms: int) -> None:
    """An animated GIF: `ms` per move, a third of it per explosion level, the end held."""
    images = [svg.rasterise(p) for p, _ in pictures]
    durations = [ms if final else max(ms // 3, 60) for _, final in pictures]
    durations[-1] = ms * 4
    images[0].save(path, save_all=True, append_images=images[1:], duration=durations, loop=0)


def write_svgs(pictures: Sequence[tuple[svg.Picture, bool] | str], folder: pathlib.Path) -> None:
    """Numbered SVG files: pictures, or documents in a game's own drawing (`own_frames`)."""
    folder.mkdir(parents=True, exist_ok=True)
    width = len(str(len(pictures)))
    for i, pic in enumerate(pictures):
        text = pic if isinstance(pic, str) else svg.svg_text(pic[0])
        (folder / f"frame_{i:0{width}d}.svg").write_text(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_game_arguments(parser, default="the --record's game")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--moves", help="the moves in the game's notation, counted from 1 (azjax-play --help)"
    )
    source.add_argument("--record", help="a game saved by azjax-play --save")
    source.add_argument("--agents", nargs=2, metavar=("FIRST", "SECOND"), help="agent specs")
    parser.add_argument("--seed", type=seed_arg, default=0, help="PRNG seed for --agents")
    parser.add_argument("--out", required=True, help="NAME.gif, or a folder for SVG frames")
    parser.add_argument(
        "--ms", type=int, default=700, help="milliseconds per move in a GIF (20-60000; 700)"
    )
    parser.add_argument(
        "--cell", type=float, default=64.0, help="pixels per board cell (8-256; 64)"
    )
    args = parser.parse_args(argv)
    if not 8 <= args.cell <= 256:  # also refuses nan
        parser.error(f"--cell must be from 8 to 256 pixels, got {args.cell}")
    if not 20 <= args.ms <= 60000:
        parser.error(f"--ms must be from 20 to 60000 milliseconds, got {args.ms}")

    name, kwargs = args.game, {}
    out = pathlib.Path(args.out)
    try:
        if out.suffix.lower() == ".gif":
            check_writable_file(args.out, "--out")
        else:
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise ValueError(f"--out {out}: cannot make the folder ({err.strerror})") from None
        if args.record:
            record = read_record(args.record)
            name, kwargs = record["game"], record.get("kwargs", {})
        if name is None:
            raise ValueError("--game is needed with --moves and --agents")
        game = games.make(name, **{**kwargs, **parse_size(args.size, name)})
        if args.agents:
            actions = agent_game(game, args.agents, args.seed)
        else:
            texts = record["moves"] if args.record else split_moves(args.moves)
            actions, state = [], game.init(jax.random.key(START))
            for i, text in enumerate(texts):
                try:
                    action = game.parse_action(text, state)
                except games.IllegalMoveError as err:
                    raise ValueError(f"move {i + 1}: {err}") from None
                state = game.checked_step(state, action)
                actions.append(action)
        if draws_itself(game) and out.suffix.lower() == ".gif":
            raise ValueError(
                f"{game.name} is drawn by its own SVG, which this script cannot turn into a GIF:"
                " give a folder as --out for SVG files"
            )
    except ValueError as err:
        parser.error(str(err))
    if draws_itself(game):
        pictures = own_frames(game, actions, game.players)
    else:
        pictures = frames(game, actions, game.players, args.cell)
    try:
        if out.suffix.lower() == ".gif":
            write_gif(pictures, out, args.ms)
        else:
            write_svgs(pictures, out)
    except OSError as err:
        sys.exit(f"replay.py: cannot write --out {out}: {err.strerror}")
    print(f"{len(actions)} moves, {len(pictures)} frames -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
