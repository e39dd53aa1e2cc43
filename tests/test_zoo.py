"""The model zoo (azjax.zoo) and its agent specs, through every door: `azjax-eval` (matches,
`--zoo`), `azjax-play`, the browser server and `scripts/replay.py` (zoo specs and the shipped
models' exact moves: tests/test_model.py).

A tiny Tic-Tac-Toe model exported in the test stands in for the shipped models; the zoo is
pointed at it with AZJAX_ZOO_DIR.
"""

from __future__ import annotations

import io
import json
import pathlib
import shutil
import subprocess
import sys

import jax
import pytest
import test_browser
from helpers import load_script, write_tiny_run
from starlette.testclient import TestClient

import games
from azjax import arena, export, model, session, zoo
from azjax.cli import evaluate, play
from azjax.cli.export import main as export_main
from azjax.config import Config, GameConfig
from azjax.export import make_card
from azjax.network import NetworkConfig, init_params, make_network
from azjax.web.app import create_app

browser, server = test_browser.browser, test_browser.server  # headless Chromium, the app
TTT, C4 = games.make("tictactoe"), games.make("connect4")


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    """A zoo with `tictactoe` (exported from a tiny run) and `c4` (a Connect4 net)."""
    root = tmp_path_factory.mktemp("zoo")
    write_tiny_run(root / "run")
    folder = root / "models"
    folder.mkdir()
    export.export_run(root / "run", folder / "tictactoe.azjax")
    config = Config(game=GameConfig("connect4"), network=NetworkConfig(blocks=0, channels=4))
    params = init_params(make_network(C4, config.network), C4, jax.random.key(0))
    export.save_model(folder / "c4.azjax", config, params, make_card(config, params, "c4"))
    return folder


@pytest.fixture(autouse=True)
def use_zoo(zoo_dir, monkeypatch):
    monkeypatch.setenv(zoo.ENV, str(zoo_dir))


def test_names_paths_cards_and_defaults(zoo_dir, monkeypatch, tmp_path):
    assert zoo.directory() == zoo_dir and zoo.names() == ["c4", "tictactoe"]
    assert zoo.names(TTT) == ["tictactoe"] and zoo.names(C4) == ["c4"]
    assert zoo.default(TTT) == "tictactoe" and zoo.default(C4) == "c4"
    assert zoo.names(games.make("othello")) == [] and zoo.default(games.make("othello")) is None
    assert zoo.path("c4") == zoo_dir / "c4.azjax"
    found = model.load("zoo:tictactoe")
    assert found.game is TTT and found.card == zoo.card("tictactoe")
    for bad in ("nope", "../models/c4"):
        with pytest.raises(ValueError, match=r"no zoo model .* the zoo has: c4, tictactoe"):
            zoo.path(bad)
    # The model named after the game plays it by default, before others sorted ahead of it.
    own = shutil.copytree(zoo_dir, tmp_path / "own")
    shutil.copy(own / "tictactoe.azjax", own / "a_tictactoe.azjax")
    monkeypatch.setenv(zoo.ENV, str(own))
    assert zoo.names(TTT) == ["a_tictactoe", "tictactoe"] and zoo.default(TTT) == "tictactoe"


def test_the_shipped_zoo_fits_and_names_its_games(monkeypatch):
    """Each shipped model is at most 4 MB and the zoo at most 16 MB (the package stays small);
    each card names a game azjax plays and carries measured strength, each match's interval the
    arena's for its counts."""
    monkeypatch.delenv(zoo.ENV)
    assert zoo.directory() == pathlib.Path(zoo.__file__).parent
    files = [zoo.path(name) for name in zoo.names()]
    assert len(files) >= 6 and all(f.stat().st_size <= 4 * 2**20 for f in files)
    assert sum(f.stat().st_size for f in files) <= 16 * 2**20
    for name in zoo.names():
        card = zoo.card(name)
        assert games.make(card["game"]["name"], **card["game"]["kwargs"]) is not None
        assert card["strength"], f"{name}: no strength figures in its card"
        for key, f in card["strength"].items():
            if "ci95" in f:
                counts = (f["wins"], f["draws"], f["losses"], (0, 0, 0), (0, 0, 0))
                r = arena.MatchResult(*counts, distinct=f["distinct_games"])
                assert f["ci95"] == pytest.approx(list(r.interval)), (name, key)


def test_azjax_eval_plays_and_lists_the_zoo(zoo_dir, tmp_path, monkeypatch, capsys):
    folder = shutil.copytree(zoo_dir, tmp_path / "zoo")  # its cards change
    monkeypatch.setenv(zoo.ENV, str(folder))
    result = tmp_path / "match.json"
    args = ["--a", "zoo:tictactoe", "--b", "random", "--games", "4", "--quiet"]
    assert evaluate.main([*args, "--json", str(result)]) == 0  # the game comes from the model
    match = json.loads(result.read_text())
    assert match["game"] == "tictactoe" and match["match"]["a"] == "zoo:tictactoe"
    assert export_main(["--card-only", str(zoo.path("tictactoe")), "--strength", str(result)]) == 0
    (folder / "broken.azjax").write_bytes(b"not a model")  # a broken download: hides no other
    assert zoo.names() == ["broken", "c4", "tictactoe"] and zoo.names(TTT) == ["tictactoe"]
    assert session.default_opponent(TTT) == "zoo:tictactoe"
    with pytest.raises(ValueError, match=r"broken\.azjax is not an azjax model file"):
        model.load("zoo:broken")
    capsys.readouterr()
    listing = tmp_path / "zoo.json"
    assert evaluate.main(["--zoo", "--json", str(listing)]) == 0
    out, err = capsys.readouterr()
    assert f"tictactoe  -     2          vs random {match['match']['score']:.1%} of 4\n" in out
    assert [row.split()[0] for row in out.splitlines()] == ["name", "c4", "tictactoe", "wrote"]
    assert err == f"warning: {folder / 'broken.azjax'} is not an azjax model file (ExtraData)\n"
    assert [c["name"] for c in json.loads(listing.read_text())["zoo"]] == ["c4", "tictactoe"]
    assert evaluate.main(["--zoo", "--game", "connect4"]) == 0
    assert [row.split()[0] for row in capsys.readouterr().out.splitlines()] == ["name", "c4"]
    assert evaluate.main(["--zoo", "--game", "othello", "--size", "size=6"]) == 0
    assert capsys.readouterr().out.startswith("the zoo has no othello size=6 model (")
    monkeypatch.setenv(zoo.ENV, str(tmp_path))  # a folder without models
    assert evaluate.main(["--zoo"]) == 0
    assert capsys.readouterr().out == f"the zoo is empty ({tmp_path})\n"


def test_azjax_play_and_replay_default_to_the_zoo_model(tmp_path, monkeypatch, capsys):
    other_size = games.make("chain_reaction", rows=6, cols=9)  # the zoo's model is 5x5
    assert session.default_opponent(other_size) == session.FALLBACK_OPPONENT
    assert session.analyst("zoo:tictactoe") == "the zoo model tictactoe with search"
    save = tmp_path / "game.json"
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(map(str, range(1, 10))) * 2 + "\n"))
    play.main(["--game", "tictactoe", "--save", str(save)])
    out = capsys.readouterr().out
    assert "zoo:tictactoe is O" in out and "Moves: " in out
    assert json.loads(save.read_text())["opponent"] == "zoo:tictactoe"
    args = ["--game", "tictactoe", "--agents", "zoo:tictactoe", "policy-zoo:tictactoe"]
    load_script("replay").main([*args, "--out", str(tmp_path / "frames")])
    assert len(list((tmp_path / "frames").glob("*.svg"))) >= 6  # the start and five moves


def test_browser_server_offers_zoo_models_without_runs():
    """Each with its game's size and whether it is that game's default (playing them, and the
    other doors to every kind of model: tests/test_model.py)."""
    with TestClient(create_app(None, analyse=False)) as client:
        same = {"kwargs": {}, "label": "", "strength": "-", "default": True}
        assert client.get("/api/options").json()["zoo"] == [
            {"name": "c4", "game": "connect4", **same},
            {"name": "tictactoe", "game": "tictactoe", **same},
        ]
        response = client.post("/api/games", json={"game": "tictactoe", "opponent": "zoo:c4"})
        assert response.status_code == 400 and "unknown opponent" in response.json()["error"]


def test_the_page_picks_the_zoo_model_unless_the_person_chose(browser, server):
    page = browser.new_page()
    page.goto(server)
    page.wait_for_selector("body[data-ready=true]")
    chosen = []
    for game in ("tictactoe", "connect4", "othello", "tictactoe", "connect4"):
        page.select_option("#game", game)
        chosen.append(page.input_value("#opponent"))
        if game == "othello":
            page.select_option("#opponent", "greedy")  # the person's choice is kept from now on
    # othello has no zoo model here (and no run): the page's fallback, pure MCTS
    assert chosen == ["zoo:tictactoe", "zoo:c4", "mcts:200", "greedy", "greedy"]
    page.select_option("#opponent", "zoo:c4")
    page.select_option("#game", "tictactoe")  # not offered here: the game's own default
    assert page.input_value("#opponent") == "zoo:tictactoe"


NO_PGX = """
import sys
sys.modules["pgx"] = None  # as where the pgx extra is not installed
from azjax import zoo
from azjax.cli import play
from azjax.web.app import find_zoo
print("backgammon" in zoo.names(), [m["name"] for m in find_zoo() if m["name"] == "backgammon"])
play.main(["--opponent", "zoo:backgammon"])
"""


def test_backgammon_plays_its_zoo_model_and_names_pgx_where_missing(monkeypatch, capsys):
    """With pgx, `zoo:backgammon` is Backgammon's default opponent in the terminal and the
    browser; without, the zoo still lists it, the browser leaves it out and asking for it says
    in one line what to install."""
    monkeypatch.delenv(zoo.ENV)
    game = games.make("pgx:backgammon")
    assert zoo.default(game) == "backgammon" and session.default_opponent(game) == "zoo:backgammon"
    with TestClient(create_app(None, analyse=False)) as client:
        offered = {m["name"]: m for m in client.get("/api/options").json()["zoo"]}
    assert offered["backgammon"]["game"] == "pgx:backgammon" and offered["backgammon"]["default"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("quit\n"))
    play.main(["--game", "pgx:backgammon", "--no-colour"])  # its moves: tests/test_model.py
    out = capsys.readouterr().out
    assert out.startswith("pgx:backgammon: you are Black (X), zoo:backgammon is White (O).")
    result = subprocess.run([sys.executable, "-c", NO_PGX], capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == "True []\n", result
    error = result.stderr.splitlines()
    assert len(error) == 1 and "pip install 'azjax[pgx]'" in error[0], result.stderr
