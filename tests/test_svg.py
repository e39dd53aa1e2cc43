"""Board pictures (games/svg.py), replays (scripts/replay.py) and curves (scripts/plot.py).

The pictures are checked against the board and the game's own notation: pieces drawn match
the signed board, and each clickable region sits where the move's notation says (under its
column label, beside its row label).
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET

import jax
import numpy as np
import pytest
from conftest import GAME_CONFIGS, config_id
from helpers import load_script
from PIL import Image

import games
from games import svg

NS = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == f"{NS}svg"
    return root


def count(root: ET.Element, tag: str, **attrs: str) -> int:
    return sum(all(e.get(k) == v for k, v in attrs.items()) for e in root.iter(f"{NS}{tag}"))


def check_pieces(game: games.Game, state, board: np.ndarray, root: ET.Element) -> None:
    """The pieces drawn in `root` are those of `board`."""
    p0, p1 = game.colours
    mine, theirs = int((board > 0).sum()), int((board < 0).sum())
    if game.name in ("tictactoe", "connect4"):  # a line through a win, and only then
        won = bool(state.terminated) and np.abs(np.asarray(state.rewards)).sum() > 0
        assert (count(root, "line", stroke=svg.WIN_COLOUR) > 0) == won
    if game.name == "tictactoe":
        assert count(root, "line", stroke=p0) == 2 * mine  # an X is two strokes
        assert count(root, "circle", stroke=p1) == theirs
    elif game.name in ("connect4", "othello"):
        assert (count(root, "circle", fill=p0), count(root, "circle", fill=p1)) == (mine, theirs)
    elif game.name == "dots_and_boxes":
        lines = int((board[0::2, 1::2] != 0).sum() + (board[1::2, 0::2] != 0).sum())
        assert count(root, "line", **{"stroke-width": "5"}) == lines
        boxes = board[1::2, 1::2]
        assert count(root, "circle", fill=p0) == int((boxes > 0).sum())
        assert count(root, "circle", fill=p1) == int((boxes < 0).sum())
    else:  # chain reaction: an orb per unit of count up to 3, and the count above that
        assert count(root, "circle", fill=p0) == int(np.minimum(board[board > 0], 3).sum())
        assert count(root, "circle", fill=p1) == int(np.minimum(-board[board < 0], 3).sum())
        shown = [e.text for e in root.iter(f"{NS}text") if e.get("fill") == svg.COUNT_COLOUR]
        assert sorted(shown) == sorted(str(abs(v)) for v in board.flat if abs(v) > 3)


def check_clicks(game: games.Game, state, root: ET.Element) -> None:
    """The clickable regions of `root` are the legal moves but a pass, each where its notation
    says: a Tic-Tac-Toe cell shows its number, a Connect Four column sits under its number,
    a cell ("d3", "2,3") by its column's label (top) and row's label (left), a Dots and Boxes
    line ("h r c" / "v r c") between the dots so labelled."""
    regions = {int(e.get("data-action")): e for e in root.iter() if e.get("data-action")}
    legal = set(game.legal_actions(state))
    assert set(regions) == {a for a in legal if game.format_action(a) != "pass"}
    if not regions:
        return
    marks: dict[str, list[tuple[float, float]]] = {}
    for e in root.iter(f"{NS}text"):
        marks.setdefault(e.text, []).append((float(e.get("x")), float(e.get("y"))))
    top = min(p[1] for ps in marks.values() for p in ps)
    left = min(p[0] for ps in marks.values() for p in ps)

    def col(label: str) -> float:
        return next(x for x, y in marks[label] if y == top)

    def row(label: str) -> float:
        return next(y for x, y in marks[label] if x == left)

    for action, region in regions.items():
        x, y, w, h = (float(region.get(k)) for k in ("x", "y", "width", "height"))
        centre, text = (x + w / 2, y + h / 2), game.format_action(action)
        if game.name == "tictactoe":
            expected = marks[text][0]
        elif game.name == "connect4":
            expected = (marks[text][0][0], centre[1])
        else:  # by its column's label (between two for a line) and its row's
            kind, r, c = {
                "othello": ("", text[1:], text[0]),
                "chain_reaction": ("", *text.split(",")),
            }.get(game.name) or text.split()
            xs = [col(c)] + ([col(str(int(c) + 1))] if kind == "h" else [])
            ys = [row(r)] + ([row(str(int(r) + 1))] if kind == "v" else [])
            expected = (np.mean(xs), np.mean(ys))
        assert centre == pytest.approx(expected), text


@pytest.mark.parametrize("config", GAME_CONFIGS, ids=config_id)
def test_pictures_show_the_board_and_click_where_the_notation_says(config):
    name, kwargs = config
    game = games.make(name, **kwargs)
    rng, state, last = np.random.default_rng(1), game.init(jax.random.key(1)), None
    for ply in range(60):
        if ply % 3 == 0 or bool(state.terminated):
            root = parse(svg.to_svg(game, state, last_action=last))
            check_pieces(game, state, np.asarray(game.board(state)), root)
            assert not any(e.get("data-action") for e in root.iter())
            check_clicks(game, state, parse(svg.to_svg(game, state, clickable=True)))
        if bool(state.terminated):
            break
        last = int(rng.choice(game.legal_actions(state)))
        state = game.step(state, last)
        if name == "connect4":  # a dot on the disc just dropped: the column's top one
            root = parse(svg.to_svg(game, state, last_action=last))
            circles = list(root.iter(f"{NS}circle"))
            (dot,) = [e for e in circles if e.get("fill") == "#ffffff"]
            x = float(dot.get("cx"))
            assert any(e.text == str(last + 1) and float(e.get("x")) == x for e in root.iter())
            column = [
                float(e.get("cy"))
                for e in circles
                if float(e.get("cx")) == x and e.get("fill") in game.colours
            ]
            assert float(dot.get("cy")) == min(column)


def test_png_shows_the_pieces_in_their_colours(tmp_path):
    game = games.make("connect4")
    state = game.init(jax.random.key(0))
    for column in (3, 3, 0):
        state = game.checked_step(state, column)
    data = svg.to_png(game, state, path=str(tmp_path / "c4.png"))
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "c4.png").read_bytes() == data
    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)
    pic = svg.picture(game, state)
    assert image.shape == (round(pic.height), round(pic.width), 3)
    rgb = [np.array([int(c[i : i + 2], 16) for i in (1, 3, 5)]) for c in game.colours]
    for disc in (s for s in pic.shapes if s.kind == "circle"):  # off centre: the last move's dot
        pixel = image[round(disc.geom[1]) + 8, round(disc.geom[0]) + 8]
        near = [np.abs(pixel - c).max() < 40 for c in rgb]
        assert near == [disc.fill == c for c in game.colours], (disc, pixel)
    assert sum(disc.fill in game.colours for disc in pic.shapes) == 3
    with pytest.raises(ValueError, match="needs a state or a board"):
        svg.to_svg(game)


def test_grid_picture_draws_any_signed_board_with_its_counts():
    """The picture of a game that draws nothing itself: a disc per owned cell in its owner's
    colour, the count inside above 1, the last cell outlined, the legal cells clickable."""
    board = np.array([[0, 1, -1], [3, -2, 0]])
    legal = np.array([True, False, False, False, False, True])
    picture = svg.grid_picture(board, legal, 4, 40.0, ("#111111", "#eeeeee"))
    m = svg.margin(40.0)
    centre = {i: (m + (i % 3) * 40 + 20, m / 2 + (i // 3) * 40 + 20) for i in range(6)}
    discs = {(s.geom[0], s.geom[1]): s.fill for s in picture.shapes if s.kind == "circle"}
    assert discs == {centre[i]: ("#111111", "#eeeeee")[i % 2 == 0] for i in (1, 2, 3, 4)}
    texts = {(s.geom[0], s.geom[1]): s.text for s in picture.shapes if s.kind == "text"}
    assert {k: v for k, v in texts.items() if k in centre.values()} == {
        centre[3]: "3",
        centre[4]: "2",
    }
    below, left = m / 2 + 80 + m / 2, m / 2  # the coordinates: columns 1-3, rows 1-2
    assert sorted(v for (x, y), v in texts.items() if y == below) == ["1", "2", "3"]
    assert sorted(v for (x, y), v in texts.items() if x == left) == ["1", "2"]
    assert [s.action for s in picture.shapes if s.action is not None] == [0, 5]
    outlined = [s for s in picture.shapes if s.kind == "rect" and s.stroke == "#e0a100"]
    assert [(s.geom[0] + 20, s.geom[1] + 20) for s in outlined] == [centre[4]]


# ----------------------------------------------------------------------------- replays


def test_replays_have_a_frame_per_move_and_chain_level(tmp_path):
    replay = load_script("replay")
    replay.main(
        ["--game", "tictactoe", "--moves", "5 1 9 3 2 8 7", "--out", str(tmp_path / "t.gif")]
    )
    assert Image.open(tmp_path / "t.gif").n_frames == 8  # the start and seven moves
    # Red 1,1 twice: the corner reaches its critical mass of 2 and explodes on the third move,
    # one level before it settles; frames are highlighted and captioned.
    moves = ["--moves", "1,1 3,3 1,1", "--out", str(tmp_path / "cr")]
    replay.main(["--game", "chain_reaction", "--size", "rows=3,cols=3", *moves])
    files = sorted((tmp_path / "cr").glob("frame_*.svg"))
    assert len(files) == 5 and "3. Red 1,1" in files[3].read_text()
    assert count(parse(files[3].read_text()), "circle", fill="#f1c40f") == 2  # and the legend's
    dots = ["--game", "dots_and_boxes", "--moves", "h 1 1; v 1 1; h 2 1; v 1 2"]
    replay.main([*dots, "--out", str(tmp_path / "db")])
    last = parse(sorted((tmp_path / "db").glob("*.svg"))[-1].read_text())
    assert count(last, "circle", fill=games.make("dots_and_boxes").colours[1]) == 1  # Blue's box
    record = tmp_path / "game.json"
    record.write_text(json.dumps({"game": "othello", "kwargs": {"size": 6}, "moves": ["c2"]}))
    replay.main(["--record", str(record), "--out", str(tmp_path / "o")])
    first, second = sorted((tmp_path / "o").glob("*.svg"))
    black = games.make("othello").colours[0]
    assert count(parse(first.read_text()), "circle", fill=black) == 2
    assert count(parse(second.read_text()), "circle", fill=black) == 4  # placed one, flipped one


def test_replay_refuses_an_illegal_move(tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_script("replay").main(["--game", "tictactoe", "--moves", "5 5", "--out", "x.gif"])
    err = capsys.readouterr().err
    assert "move 2: '5' is not legal here" in err
    listed = re.search(r"Legal moves: (.*)\.", err).group(1)
    assert re.split(r"[;,]\s*", listed) == ["1", "2", "3", "4", "6", "7", "8", "9"]


# ----------------------------------------------------------------------------- curves


def test_plot_draws_each_quantity_in_its_panel(tmp_path):
    """Panels share the x range (here the wall clock);
    fractions keep 0..1, a log axis only where every value is positive; the final record is a
    star at its own x; text, flags, counts summed up by a rate and the game length of
    iterations that finished no game are left out; a line cut short is skipped."""
    plot = load_script("plot")
    lengths, finished = [20.0, 0.0, 24.0, 22.0, 21.0], [5, 0, 3, 2, 1]
    rows = [
        {
            "iteration": i + 1,
            "elapsed_minutes": float(i + 1),
            "train/loss": 2.0 / (i + 1),
            "train/learning_rate": 0.01 * i,  # 0 at first: no log axis
            "selfplay/full_search_fraction": 0.25,
            "selfplay/games_finished": finished[i],
            "selfplay/mean_game_length": lengths[i],
            "eval/random/score": 0.1 * i,
            "eval/random/losses": 5 - i,
            "note": "text is skipped",
            "flag": True,
        }
        for i in range(5)
    ]
    final = {"iteration": 5, "final": True, "elapsed_minutes": 6.0, "eval/random/score": 0.9}
    lines = [json.dumps(r) for r in (*rows, final)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"iteration": 6, "train/lo')
    axes = {ax.get_title(): ax for ax in plot.figure(str(tmp_path), "elapsed_minutes").axes}
    curves = {t: {c.get_label(): c for c in ax.get_lines()} for t, ax in axes.items() if t}
    assert {t: sorted(c) for t, c in curves.items()} == {
        "Losses": ["train/loss"],
        "Strength vs opponents": ["eval/random/score", "eval/random/score (final)"],
        "Learning rate": ["train/learning_rate"],
        "Search and targets": ["selfplay/full_search_fraction"],
        "Self-play games": ["selfplay/games_finished"],
        "Game length": ["selfplay/mean_game_length"],
    }
    (span,) = {axes[t].get_xlim() for t in curves}
    assert span[0] < 1.0 and span[1] > 6.0
    assert axes["Losses"].get_yscale() == "log" and axes["Learning rate"].get_yscale() == "linear"
    for fractions in ("Search and targets", "Strength vs opponents"):
        assert axes[fractions].get_ylim() == pytest.approx((-0.02, 1.02))
    star = curves["Strength vs opponents"]["eval/random/score (final)"]
    assert list(star.get_xdata()) == [6.0] and list(star.get_ydata()) == [0.9]
    length = curves["Game length"]["selfplay/mean_game_length"]
    assert list(length.get_xdata()) == [1.0, 3.0, 4.0, 5.0]
    assert plot.plot(str(tmp_path)) == tmp_path / "metrics.png"
    assert Image.open(tmp_path / "metrics.png").size[0] > 1000
    with pytest.raises(ValueError, match="--x wall: row 1 has no such field"):
        plot.plot(str(tmp_path), x="wall")


def test_plot_names_a_bad_line(tmp_path):
    plot = load_script("plot")
    for line, message in [("not json", "metrics.jsonl:2 is not JSON"), ("[1, 2]", "expected")]:
        (tmp_path / "metrics.jsonl").write_text(f'{{"loss": 1}}\n{line}\n{{"loss": 0.5}}\n')
        with pytest.raises(ValueError, match=re.escape(message)):
            plot.plot(str(tmp_path))
