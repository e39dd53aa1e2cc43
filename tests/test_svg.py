"""Board pictures (games/svg.py), replays (scripts/replay.py) and curves (scripts/plot.py).

The pictures are checked against the board and the game's own notation: pieces drawn match
the signed board, and each clickable region sits where the move's notation says (under its
column label, beside its row label).
"""

from __future__ import annotations

import functools
import io
import json
import re
import xml.etree.ElementTree as ET

import jax
import numpy as np
import pytest
from helpers import load_script
from PIL import Image

import games
from games import svg

NS = "{http://www.w3.org/2000/svg}"
CONFIGS = [
    ("tictactoe", {}),
    ("connect4", {}),
    ("othello", {}),
    ("othello", {"size": 6}),
    ("dots_and_boxes", {}),
    ("dots_and_boxes", {"rows": 2, "cols": 4}),
    ("chain_reaction", {}),
    ("chain_reaction", {"rows": 4, "cols": 7}),
]
IDS = [name + "".join(f"-{k}{v}" for k, v in kw.items()) for name, kw in CONFIGS]


@functools.cache
def positions(game: games.Game, seed: int, plies: int = 60, every: int = 3):
    """States along one random game (legal moves chosen on the host), with the last action."""
    rng = np.random.default_rng(seed)
    step = jax.jit(game.step)
    state, last = game.init(jax.random.key(seed)), None
    out = [(state, last)]
    for ply in range(plies):
        if bool(state.terminated):
            break
        last = int(rng.choice(game.legal_actions(state)))
        state = step(state, last)
        if ply % every == every - 1 or bool(state.terminated):
            out.append((state, last))
    return out


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)
    assert root.tag == f"{NS}svg"
    return root


def elements(root: ET.Element, tag: str) -> list[ET.Element]:
    return list(root.iter(f"{NS}{tag}"))


def count(root: ET.Element, tag: str, **attrs: str) -> int:
    return sum(all(e.get(k) == v for k, v in attrs.items()) for e in elements(root, tag))


def centre(e: ET.Element) -> tuple[float, float]:
    x, y, w, h = (float(e.get(k)) for k in ("x", "y", "width", "height"))
    return x + w / 2, y + h / 2


def labels(root: ET.Element) -> dict[str, list[tuple[float, float]]]:
    """Text -> positions of every text element."""
    out: dict[str, list[tuple[float, float]]] = {}
    for e in elements(root, "text"):
        out.setdefault(e.text, []).append((float(e.get("x")), float(e.get("y"))))
    return out


@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=IDS)
def test_pieces_drawn_match_the_board(name, kwargs):
    game = games.make(name, **kwargs)
    p0, p1 = game.colours
    for state, last in positions(game, seed=1):
        board = np.asarray(game.board(state))
        root = parse(svg.to_svg(game, state, last_action=last))
        mine, theirs = int((board > 0).sum()), int((board < 0).sum())
        if name in ("tictactoe", "connect4"):  # a line through a win, and only then
            won = bool(state.terminated) and float(np.abs(np.asarray(state.rewards)).sum()) > 0
            assert (count(root, "line", stroke=svg.WIN_COLOUR) > 0) == won
        if name == "tictactoe":
            assert count(root, "line", stroke=p0) == 2 * mine  # an X is two strokes
            assert count(root, "circle", stroke=p1) == theirs
        elif name in ("connect4", "othello"):
            assert count(root, "circle", fill=p0) == mine
            assert count(root, "circle", fill=p1) == theirs
        elif name == "dots_and_boxes":
            drawn = int((board[0::2, 1::2] != 0).sum() + (board[1::2, 0::2] != 0).sum())
            thick = [e for e in elements(root, "line") if e.get("stroke-width") == "5"]
            assert len(thick) == drawn
            boxes = board[1::2, 1::2]
            assert count(root, "circle", fill=p0) == int((boxes > 0).sum())
            assert count(root, "circle", fill=p1) == int((boxes < 0).sum())
        else:  # chain reaction: an orb per unit of count up to 3, and the count above that
            # (a game can end mid-chain, leaving cells at or above their critical mass)
            assert count(root, "circle", fill=p0) == int(np.minimum(board[board > 0], 3).sum())
            assert count(root, "circle", fill=p1) == int(np.minimum(-board[board < 0], 3).sum())
            big = sorted(str(abs(v)) for v in board.flat if abs(v) > 3)
            assert (
                sorted(e.text for e in elements(root, "text") if e.get("fill") == svg.COUNT_COLOUR)
                == big
            )
        if name == "connect4" and last is not None:  # a dot on the disc just dropped
            discs = [e for e in elements(root, "circle") if e.get("fill") in (p0, p1)]
            at = [(float(e.get("cx")), float(e.get("cy"))) for e in discs]
            dots = [e for e in elements(root, "circle") if e.get("fill") == "#ffffff"]
            assert len(dots) == 1
            x, y = float(dots[0].get("cx")), float(dots[0].get("cy"))
            assert x == labels(root)[str(last + 1)][0][0]  # in the column under its label
            assert y == min(cy for cx, cy in at if cx == x)  # on its top disc


@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=IDS)
def test_click_regions_are_the_legal_moves_where_the_notation_says(name, kwargs):
    game = games.make(name, **kwargs)
    for state, last in positions(game, seed=1):
        root = parse(svg.to_svg(game, state, last_action=last, clickable=True))
        regions = {int(e.get("data-action")): e for e in root.iter() if e.get("data-action")}
        legal = set(game.legal_actions(state))
        pass_only = {a for a in legal if game.format_action(a) == "pass"}
        assert set(regions) == legal - pass_only
        assert not parse(svg.to_svg(game, state)).findall(".//*[@data-action]")
        marks = labels(root)
        for action, region in regions.items():
            cx, cy = centre(region)
            text = game.format_action(action)
            if name == "tictactoe":  # an empty cell shows its own number
                assert marks[text] == [pytest.approx((cx, cy))]
            elif name == "connect4":  # the column number under the column
                assert marks[text][0][0] == pytest.approx(cx)
            elif name == "othello":  # "d3": letter above, number to the left
                col_x = marks[text[0]][0][0]
                row_y = min(marks[text[1:]])[1]
                assert (cx, cy) == pytest.approx((col_x, row_y))
            elif name == "chain_reaction":  # "r,c"
                r, c = text.split(",")
                col_x = min(marks[c], key=lambda p: p[1])[0]  # the label on top
                row_y = min(marks[r], key=lambda p: p[0])[1]  # the label on the left
                assert (cx, cy) == pytest.approx((col_x, row_y))
            else:  # "h r c" / "v r c": dots labelled by row (left) and column (top)
                kind, r, c = text.split()
                top = min(p[1] for ps in marks.values() for p in ps)
                left = min(p[0] for ps in marks.values() for p in ps)
                x = next(p[0] for p in marks[c] if p[1] == top)
                y = next(p[1] for p in marks[r] if p[0] == left)
                if kind == "h":
                    x2 = next(p[0] for p in marks[str(int(c) + 1)] if p[1] == top)
                    assert (cx, cy) == pytest.approx(((x + x2) / 2, y))
                else:
                    y2 = next(p[1] for p in marks[str(int(r) + 1)] if p[0] == left)
                    assert (cx, cy) == pytest.approx((x, (y + y2) / 2))


def hex_rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])


def test_png_shows_the_pieces_in_their_colours(tmp_path):
    game = games.make("connect4")
    state = game.init(jax.random.key(0))
    for column in (3, 3, 0):  # red d1, yellow d2, red a1
        state = game.checked_step(state, column)
    path = tmp_path / "c4.png"
    data = svg.to_png(game, state, path=str(path))
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and path.read_bytes() == data
    pic = svg.picture(game, state)
    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)
    assert image.shape == (round(pic.height), round(pic.width), 3)
    discs = {  # disc centres in the picture, by fill colour
        (round(s.geom[1]), round(s.geom[0])): s.fill for s in pic.shapes if s.kind == "circle"
    }
    rows = sorted({y for y, _ in discs})
    cols = sorted({x for _, x in discs})
    expect = {(rows[-1], cols[3]): 0, (rows[-2], cols[3]): 1, (rows[-1], cols[0]): 0}
    for (y, x), player in expect.items():
        colour = hex_rgb(game.colours[player])
        assert np.abs(image[y + 8, x + 8] - colour).max() < 40, (y, x, image[y + 8, x + 8])
    empty = image[rows[0] + 8, cols[0] + 8]
    assert min(np.abs(empty - hex_rgb(c)).max() for c in game.colours) > 60


def test_bad_calls_are_refused():
    game = games.make("tictactoe")
    with pytest.raises(ValueError, match="needs a state or a board"):
        svg.to_svg(game)


# ----------------------------------------------------------------------------- replays


def test_replay_gif_has_a_frame_per_move_and_chain_level(tmp_path):
    replay = load_script("replay")
    out = tmp_path / "ttt.gif"
    replay.main(["--game", "tictactoe", "--moves", "5 1 9 3 2 8 7", "--out", str(out)])
    assert Image.open(out).n_frames == 8  # the start and seven moves

    game = games.make("chain_reaction", rows=3, cols=3)
    # Red 1,1 twice: the corner reaches its critical mass of 2 and explodes on the third move.
    moves = ["1,1", "3,3", "1,1"]
    state, actions = game.init(jax.random.key(0)), []
    for text in moves:
        actions.append(game.parse_action(text, state))
        state = game.checked_step(state, actions[-1])
    pictures = replay.frames(game, actions, game.players, 40.0)
    finals = [final for _, final in pictures]
    assert finals == [True, True, True, False, True]  # one level before the last move settles
    folder = tmp_path / "frames"
    replay.main(
        [
            "--game",
            "chain_reaction",
            "--size",
            "rows=3,cols=3",
            "--moves",
            " ".join(moves),
            "--out",
            str(folder),
        ]
    )
    files = sorted(folder.glob("frame_*.svg"))
    assert len(files) == 5
    exploding = parse(files[3].read_text())
    # The unstable corner, highlighted, and the legend's sample of the mark.
    assert count(exploding, "circle", fill="#f1c40f") == 2
    assert "3. Red 1,1" in files[3].read_text()


def test_replay_dots_and_boxes_moves_separated_by_semicolons(tmp_path):
    replay = load_script("replay")
    out = tmp_path / "db"
    replay.main(
        ["--game", "dots_and_boxes", "--moves", "h 1 1; v 1 1; h 2 1; v 1 2", "--out", str(out)]
    )
    last = parse(sorted(out.glob("*.svg"))[-1].read_text())
    assert count(last, "circle", fill=games.make("dots_and_boxes").colours[1]) == 1  # Blue's box


def test_replay_refuses_an_illegal_move(tmp_path, capsys):
    replay = load_script("replay")
    with pytest.raises(SystemExit):
        replay.main(["--game", "tictactoe", "--moves", "5 5", "--out", str(tmp_path / "x.gif")])
    err = capsys.readouterr().err
    assert "move 2: '5' is not legal here" in err
    listed = re.search(r"Legal moves: (.*)\.", err).group(1)
    assert re.split(r"[;,]\s*", listed) == ["1", "2", "3", "4", "6", "7", "8", "9"]


def test_replay_from_a_saved_record(tmp_path):
    replay = load_script("replay")
    record = tmp_path / "game.json"
    record.write_text(json.dumps({"game": "othello", "kwargs": {"size": 6}, "moves": ["c2"]}))
    replay.main(["--record", str(record), "--out", str(tmp_path / "o")])
    first, second = sorted((tmp_path / "o").glob("*.svg"))
    black = games.make("othello").colours[0]
    assert count(parse(first.read_text()), "circle", fill=black) == 2
    assert count(parse(second.read_text()), "circle", fill=black) == 4  # placed one, flipped one


# ----------------------------------------------------------------------------- curves


def test_plot_groups_fields_and_writes_a_png(tmp_path):
    plot = load_script("plot")
    rows = [
        {
            "iteration": i + 1,
            "train/loss": 2.0 / (i + 1),
            "train/value_loss": 1.0 / (i + 1),
            "eval/random/win_rate": i / 10,
            "eval/random/losses": 10 - i,
            "positions_per_second": 1000.0 + i,
            "elo": 10.0 * i,
            "elapsed_minutes": 0.5 * (i + 1),
            "note": "text is skipped",
            "flag": True,
        }
        for i in range(10)
    ]
    lines = [json.dumps(r) for r in rows] + [json.dumps({"iteration": 10, "final": True})]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"iteration": 11, "train/lo')
    _, xs, series = plot.numeric_series(plot.read_metrics(tmp_path / "metrics.jsonl")[:10])
    assert xs == [float(i + 1) for i in range(10)]
    assert "note" not in series and "flag" not in series
    groups = dict(plot.panels(series))
    assert groups["Losses"] == ["train/loss", "train/value_loss"]
    assert groups["Strength vs opponents"] == ["eval/random/win_rate"]
    assert groups["Elo"] == ["elo"] and groups["Throughput"] == ["positions_per_second"]
    assert all("eval/random/losses" not in names for names in groups.values())  # in the rate
    out = plot.plot(str(tmp_path))
    assert out == tmp_path / "metrics.png"
    assert Image.open(out).size[0] > 1000

    # Against the wall clock instead: the iteration becomes a curve of its own.
    x_key, xs, series = plot.numeric_series(rows, "elapsed_minutes")
    assert x_key == "elapsed_minutes" and xs == [0.5 * (i + 1) for i in range(10)]
    assert "iteration" in series and "elapsed_minutes" not in series
    assert plot.plot(str(tmp_path), str(tmp_path / "t.png"), x="elapsed_minutes").is_file()
    with pytest.raises(ValueError, match="--x wall: row 1 has no such field"):
        plot.plot(str(tmp_path), x="wall")


def test_plot_panels_share_the_x_range_and_keep_their_scales(tmp_path):
    """Every panel spans the same x range; fractions keep their fixed 0..1 range; a log axis
    only where every value is positive; a final record's star sits at its own x (here the
    wall clock of the final evaluation, after the last iteration's)."""
    plot = load_script("plot")
    rows = [
        {
            "iteration": i + 1,
            "elapsed_minutes": float(i + 1),
            "train/loss": 2.0 / (i + 1),
            "train/learning_rate": 0.01 * i,  # 0 at first: no log axis
            "selfplay/full_search_fraction": 0.25,
            "eval/random/score": 0.1 * i,
        }
        for i in range(5)
    ]
    final = {"iteration": 5, "final": True, "elapsed_minutes": 6.0, "eval/random/score": 0.9}
    lines = [json.dumps(r) for r in (*rows, final)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    figure = plot.figure(str(tmp_path), "elapsed_minutes")
    axes = {ax.get_title(): ax for ax in figure.axes if ax.get_title()}
    (span,) = {ax.get_xlim() for ax in axes.values()}
    assert span[0] < 1.0 and span[1] > 6.0  # the rows and the final star
    assert axes["Losses"].get_yscale() == "log"
    assert axes["Learning rate"].get_yscale() == "linear"
    for fractions in ("Search and targets", "Strength vs opponents"):
        assert axes[fractions].get_ylim() == pytest.approx((-0.02, 1.02))
    (star,) = [
        line
        for line in axes["Strength vs opponents"].get_lines()
        if line.get_label() == "eval/random/score (final)"
    ]
    assert list(star.get_xdata()) == [6.0] and list(star.get_ydata()) == [0.9]


def test_plot_names_a_bad_line(tmp_path):
    plot = load_script("plot")
    (tmp_path / "metrics.jsonl").write_text('{"loss": 1}\nnot json\n{"loss": 0.5}\n')
    with pytest.raises(ValueError, match=re.escape("metrics.jsonl:2 is not JSON")):
        plot.plot(str(tmp_path))
    (tmp_path / "metrics.jsonl").write_text('{"loss": 1}\n[1, 2]\n{"loss": 0.5}\n')
    with pytest.raises(ValueError, match=re.escape("metrics.jsonl:2: expected a JSON object")):
        plot.plot(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"no metrics\.jsonl"):
        plot.plot(str(tmp_path / "missing"))


def test_score_counts_what_people_count():
    othello = games.make("othello")
    assert svg.score(othello, othello.board(othello.init(jax.random.key(0)))) == (2, 2)
    dots = games.make("dots_and_boxes", rows=2, cols=2)
    lattice = np.zeros((5, 5), int)
    lattice[1, 1], lattice[1, 3], lattice[3, 3] = 1, -1, -1
    assert svg.score(dots, lattice) == (1, 2)
    chain = games.make("chain_reaction", rows=3, cols=3)
    assert svg.score(chain, np.array([[3, 0, -1], [0, -2, 0], [1, 0, 0]])) == (4, 3)
    assert svg.score(games.make("connect4"), np.zeros((6, 7), int)) is None


def test_plot_leaves_out_game_lengths_of_iterations_that_finished_no_game():
    plot = load_script("plot")
    rows = [
        {"iteration": i, "selfplay/games_finished": g, "selfplay/mean_game_length": n}
        for i, (g, n) in enumerate([(5, 20.0), (0, 0.0), (3, 24.0)], 1)
    ]
    _, _, series = plot.numeric_series(rows)
    lengths = series["selfplay/mean_game_length"]
    assert lengths[0] == 20.0 and np.isnan(lengths[1]) and lengths[2] == 24.0
    assert series["selfplay/games_finished"] == [5.0, 0.0, 3.0]


def test_grid_picture_draws_any_signed_board_with_its_counts():
    """The picture of a game that draws nothing itself: a disc per owned cell in its owner's
    colour, the count inside above 1, the last cell outlined, the legal cells clickable."""
    board = np.array([[0, 1, -1], [3, -2, 0]])
    legal = np.array([True, False, False, False, False, True])
    picture = svg.grid_picture(board, legal, 4, 40.0, ("#111111", "#eeeeee"))
    centres = {(s.geom[0], s.geom[1]): s.fill for s in picture.shapes if s.kind == "circle"}
    m = svg.margin(40.0) / 2
    centre = {i: (m + (i % 3) * 40 + 20, m + (i // 3) * 40 + 20) for i in range(6)}
    assert centres == {
        centre[1]: "#111111",
        centre[2]: "#eeeeee",
        centre[3]: "#111111",
        centre[4]: "#eeeeee",
    }
    texts = {(s.geom[0], s.geom[1]): s.text for s in picture.shapes if s.kind == "text"}
    assert texts == {centre[3]: "3", centre[4]: "2"}
    assert [s.action for s in picture.shapes if s.action is not None] == [0, 5]
    outlined = [s for s in picture.shapes if s.kind == "rect" and s.stroke == "#e0a100"]
    assert [(s.geom[0] + 20, s.geom[1] + 20) for s in outlined] == [centre[4]]
